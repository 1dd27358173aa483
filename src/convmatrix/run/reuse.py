"""Completed results kept for reuse (`--reuse-results`), keyed by what decides them: the cell's
environment (the lock of its venv or interpreter, its image's id), the suite's version (a digest
of its code, as env.json records it), the run's suite options, the driver and the GPU key.

Every complete run is stored (in home.results_store(): <$CONVMATRIX_HOME>/results unless
$CONVMATRIX_RESULTS_STORE says where); a run reuses a stored result only when asked to (fix-proof and
upgrade runs, where the control is re-run for every candidate), and the reused cell's cell.json
says so (`reused`). The nightly never passes the option (its nox session refuses it): a nightly
result always comes from that night.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from convmatrix import home, tree
from convmatrix.results import rundir
from convmatrix.run import cases
from convmatrix.run.runner import Target

# The installed distributions, as `pip freeze` would list them: an environment's lock.
FREEZE = ("import importlib.metadata as m; "
          "print('\\n'.join(sorted({f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions()})))")


def store() -> Path:
    return home.results_store()


def environment_lock(python: str) -> str:
    """A hash of what is installed for this interpreter ("" when it cannot say)."""
    try:
        listed = subprocess.run([python, "-c", FREEZE], capture_output=True, text=True, timeout=120, check=True)
    except (OSError, subprocess.SubprocessError):
        return ""
    return hashlib.sha256(listed.stdout.encode()).hexdigest()


VENV_LOCK = "convmatrix-lock.json"  # in a venv: its lock, and the state of its site-packages then


def venv_lock(venv: Path, python: str) -> str:
    """environment_lock for a venv, kept in the venv: asked again only when one of its
    site-packages directories changed. Installing or removing a distribution adds or drops a
    .dist-info directory there, which changes that directory's mtime. Asking the venv's python
    cost a warm torch venv 0.07-0.1 s here, on every prepare; reading the kept lock, 0.5 ms."""
    state = [os.stat(path).st_mtime_ns for path in sorted(venv.glob("lib/python*/site-packages"))]
    saved = rundir.read_json(venv / VENV_LOCK)
    kept = saved.get("lock")
    if state and saved.get("site_packages") == state and isinstance(kept, str) and kept:
        return kept
    lock = environment_lock(python)
    if lock and state:
        rundir.write_json(venv / VENV_LOCK, {"site_packages": state, "lock": lock})
    return lock


@functools.cache
def suite_version() -> str:
    """The suite's version as it records it in env.json (suites/records.py): any change to its
    code is another suite."""
    return str(rundir.records.suite_version(str(rundir.SUITE_DIR)))


def key(target: Target, lock: str, *, driver: str, suite_args: Sequence[str], blocking: bool,
        explain: str | None = None) -> str | None:
    """The store key of a target's result; None where the environment has no lock."""
    if not lock:
        return None
    facts = {"cell": target.cell.id, "lock": lock, "suite": suite_version(), "driver": driver,
             # a case file counts by its content: the same file under another run's path is the same
             "gpu": target.key, "suite_args": cases.for_key(suite_args), "rerun_blocking": blocking,
             **({"explain": explain} if explain else {})}  # absent when off: older keys stay valid
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


KEPT = (rundir.CELL_JSON, rundir.ENV_JSON, rundir.RESULTS, rundir.LOG, rundir.FIRST_CAUSE, rundir.EVIDENCE,
        rundir.BLOCKING, rundir.EXPLAIN)


def save(result_key: str, results_dir: Path) -> None:
    """Keep a complete result under its key (replacing an older one); best effort: a full disk
    costs the reuse, never the run. Held meanwhile, so that `convmatrix gc` leaves it alone."""
    with home.held(home.RESULTS, result_key):
        _save(results_dir, store(), result_key)


def _save(results_dir: Path, where: Path, result_key: str) -> None:
    staging = f"{result_key}.saving"
    try:
        with tree.Tree.open(where, create=True) as kept:
            try:
                kept.remove(staging)
                kept.mkdir(staging, exist_ok=False)
                home.mark(where / staging, "stored result")  # gc removes only what carries it
                # What a reuse shows, as regular files only (a symlink is never followed), bounded in
                # depth and entries: nothing else a cell left there, however big, reaches the store.
                rundir.copy_plain(results_dir, where / staging, only=KEPT)
                kept.remove(result_key)
                kept.rename(staging, result_key)
            except OSError:
                kept.remove(staging)
    except OSError:
        pass


def restore(result_key: str, into: Path, *, host: str = "") -> bool:
    """Copy a stored result into a fresh results directory; whether there was a complete one.
    The copy is recorded as this host's (the key holds the environment, driver and GPU); the
    stored result is held while it is copied, and marked used (gc ages it by that)."""
    stored = store() / result_key
    with home.held(home.RESULTS, result_key):
        if not rundir.is_complete(stored):
            return False
        rundir.copy_plain(stored, into, only=KEPT)  # not the store's own marker
        home.touch(stored)
    meta = rundir.read_json(into / rundir.CELL_JSON)
    meta["reused"] = {"key": result_key, "started": meta.get("started"), "ended": meta.get("ended"),
                      "host": meta.get("host")}
    if host:
        meta["host"] = host
    rundir.write_json(into / rundir.CELL_JSON, meta)
    return True
