"""The one owner of a cell's results directory: its layout, its files and their replacement.

    <run>/<cell-id>@<gpu-key>@<host>/   what one cell left on one GPU of one host (docs/contracts.md)
        cell.json                        the harness's record: request, GPU, exit status, evidence
        env.json                         the suite's record of the stack it observed
        results.jsonl                    one line per case (format: suites/records.py)
        log.txt                          everything the suite printed
        evidence/<case>.txt              where each failing case's failure first shows in log.txt
        blocking/                        the CUDA_LAUNCH_BLOCKING=1 re-run, the same layout
        first_cause.json                 triage's first cause in log.txt
    <run>/<cell-id>@<gpu-key>@<host>.partial/  a run in progress: swapped in whole when it ends
    <run>/plans/<host>-<digest>.json    what each run meant to run (results/plans.py)
    <run>/.locks/<result name>          held while a run writes that result (held_lock)

A rerun never appends to an earlier result: it writes a fresh `.partial` directory and swaps it
in when the harness has finished it, so a directory holds exactly one run, and a run killed
with the harness leaves the earlier result untouched beside its `.partial`.

Stdlib only: nox imports this in its own interpreter.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import importlib.util
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

from convmatrix.errors import BadInput
from convmatrix.shipped import shipped

# The report files written beside a run's results (nox -s nightly, the fleet engines' merge):
# format, file name.
REPORT_FILES = (("json", "report.json"), ("markdown", "report.md"), ("html", "report.html"),
                ("junit", "junit.xml"))


def find_suite_dir() -> Path:
    """The suite this harness runs: the checkout's suites/ from a source tree (each clone runs its
    own suite), else the copy the wheel carries (convmatrix/suites/). `convmatrix --version` and
    every cell.json name the one chosen."""
    return shipped("suites", "conftest.py")


SUITE_DIR = find_suite_dir()
CELL_JSON = "cell.json"
ENV_JSON = "env.json"
RESULTS = "results.jsonl"
LOG = "log.txt"
FIRST_CAUSE = "first_cause.json"  # triage's first cause in log.txt, written when the cell finishes
EVIDENCE = "evidence"
BLOCKING = "blocking"
EXPLAIN = "explain"  # --explain: each failing case re-run with cuDNN's log on (run/explain.py)
PARTIAL = ".partial"
# A host name goes into result directory names and the report: a DNS label's characters, and
# dots and underscores, no more (nothing that could climb out of the run directory or split a
# cell@gpu@host name).
HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", re.ASCII)
LOCKS = ".locks"  # <run>/.locks/<result name>: held while a run writes that result
CELL_SCHEMA = 1
PYTEST_EXIT_OK = (0, 1)  # all passed / some cases failed: both are a completed run


def suite_module(stem: str) -> ModuleType:
    """suites/<stem>.py loaded by path (suites/ is no package): records.py, the schema the suite
    writes by; options.py, the suite's own options, which a run's suite options are checked by;
    catalog.py and casefile.py, by which a run's case files are checked before any cell runs."""
    name = f"convmatrix_suite_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SUITE_DIR / f"{stem}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


records = suite_module("records")
suite_options = suite_module("options")


def result_name(cell_id: str, gpu_key: str, host: str) -> str:
    """<cell-id>@<gpu-key>@<host>: runs of one cell on two hosts never share a directory (results
    written before hosts were recorded are <cell-id>@<gpu-key>, and still read)."""
    return f"{cell_id}@{gpu_key}@{host}" if host else f"{cell_id}@{gpu_key}"


def staging_dir(final: Path) -> Path:
    return final.with_name(final.name + PARTIAL)


def final_dir(staging: Path) -> Path:
    return staging.with_name(staging.name.removesuffix(PARTIAL))


def is_staging(path: Path) -> bool:
    return path.name.endswith(PARTIAL)


class Busy(BadInput):
    """Another process is writing this result (another run into the same --out on this host)."""


@contextlib.contextmanager
def replacing(final: Path, *, wait: bool = True, holder: str = "") -> Iterator[Path]:
    """A fresh directory to run into, swapped in for `final` when the block ends normally.

    An exception (an interrupt, a harness bug) leaves the partial directory for the report to
    show as interrupted, and whatever `final` held before stays as it was.
    """
    staging = staging_dir(final)
    with held_lock(final, wait=wait, holder=holder):
        recover(final)
        shutil.rmtree(staging, ignore_errors=True)  # an earlier, interrupted attempt: start afresh
        staging.mkdir(parents=True)
        yield staging
        swap_in(staging, final)


@contextlib.contextmanager
def held_lock(final: Path, *, wait: bool = True, holder: str = "") -> Iterator[None]:
    """One writer at a time per result directory, in a lock file in <run>/.locks/ that names its
    holder (host and pid) and that the kernel releases when the process ends, however it ends.
    wait: take turns (two shards of one run on one host both run the control: the second waits,
    then replaces the first's result whole); else Busy, naming the holder (two runs into one
    --out would otherwise both write one cell)."""
    locks = final.parent / LOCKS
    if locks.is_symlink() or (locks.exists() and not locks.is_dir()):
        locks.unlink()  # the harness's own directory: a link there is never followed
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / final.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    with os.fdopen(fd, "r+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.seek(0)
            who = handle.read(200).strip() or "another process"
            raise Busy(f"{final.name}: being written by {who} (another convmatrix run into the same --out); "
                       "not run here") from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} on {holder or 'this host'}\n")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def recover(final: Path) -> None:
    """A harness killed between swap_in's two renames leaves the earlier result as `.old` and no
    `final`: it is put back, so neither the report nor --resume loses it."""
    old = final.with_name(final.name + ".old")
    if not final.exists() and old.is_dir() and not old.is_symlink():
        os.replace(old, final)


def swap_in(staging: Path, final: Path) -> None:
    """Replace `final` by `staging`: the old result is moved aside first, then removed, so a
    crash between the two renames leaves one complete directory, never a mix of both."""
    old = final.with_name(final.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(staging, final)
    shutil.rmtree(old, ignore_errors=True)


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_whole(path, [json.dumps(data, indent=2) + "\n"])


def write_whole(path: Path, parts: Iterable[str]) -> None:
    """path's new text, written whole or not at all (a temporary file beside it, renamed):
    readers see the old file or the new one, never half of one, and a write that fails leaves
    the old one and no temporary file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            handle.writelines(parts)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):  # renamed, or never made (no such directory)
            tmp.unlink()


# What a results directory holds is written by the suite (and whatever a cell image runs), so it
# is read as untrusted: each file a regular one inside its cell directory, opened without
# following a symlink or blocking on a FIFO, and read with a bound.
MAX_RECORD = 4 << 20  # cell.json, env.json, first_cause.json: a few KB when sound
MAX_RESULTS = 256 << 20  # results.jsonl: 200 cases of <= 60 KB lines is 12 MB
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class NotPlain(OSError):
    """A path in a results directory that is not a regular file inside it (said in one line)."""


def inside(path: Path, base: Path) -> None:
    """NotPlain unless path is under base with no symlink on the way (base itself is trusted)."""
    try:
        relative = path.relative_to(base)
    except ValueError:
        raise NotPlain(f"{path}: outside {base}") from None
    if ".." in relative.parts:
        raise NotPlain(f"{path}: outside {base}")
    here = base
    for part in relative.parts[:-1]:
        here = here / part
        if here.is_symlink():
            raise NotPlain(f"{path}: {here} is a symlink")


def open_plain(path: Path, base: Path | None = None) -> BinaryIO:
    """path for reading: a regular file (under base, when given), never a symlink, a FIFO or a device."""
    if base is not None:
        inside(path, base)
    try:
        fd = os.open(path, _READ)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotPlain(f"{path}: a symlink (not followed)") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotPlain(f"{path}: not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_plain(path: Path, limit: int, base: Path | None = None) -> bytes:
    """A regular file's bytes, at most limit of them (NotPlain past it: nothing of it is used)."""
    with open_plain(path, base) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise NotPlain(f"{path}: larger than {limit:,} bytes; not read")
    return data


def write_plain(path: Path, data: bytes, base: Path) -> None:
    """path's new bytes, as a regular file under base: written to a fresh temporary file beside
    it and renamed over whatever is there (a rename replaces a symlink or a FIFO, never follows it)."""
    parent = path.parent
    if parent != base and parent.parent == base and (parent.is_symlink() or (parent.exists() and not parent.is_dir())):
        parent.unlink()  # the suite's, in the harness's own directory: made a real directory below
    inside(path, base)
    parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def copy_plain(source: Path, target: Path, limit: int = MAX_RESULTS, only: Iterable[str] | None = None) -> None:
    """The regular files and directories under source into target (of source's top level, only
    the names in `only` when given), none bigger than limit: symlinks, FIFOs, devices and sockets
    are dropped (never followed), as are setuid/setgid bits."""
    target.mkdir(parents=True, exist_ok=True)
    wanted = set(only) if only is not None else None
    for entry in os.scandir(source):
        if entry.is_symlink() or (wanted is not None and entry.name not in wanted):
            continue
        if entry.is_dir(follow_symlinks=False):
            copy_plain(Path(entry.path), target / entry.name, limit)
        elif entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_size <= limit:
            with contextlib.suppress(NotPlain):
                write_plain(target / entry.name, read_plain(Path(entry.path), limit), target)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object, or {} when the file is missing or unreadable, not a regular file or too big
    (for the harness's own bookkeeping; the report reads with rundir.load_object, which names what
    is wrong)."""
    try:
        data = json.loads(read_plain(path, MAX_RECORD))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def load_object(path: Path, errors: list[str], limit: int | None = None) -> dict[str, Any] | None:
    """A JSON object from path (a regular file, at most limit bytes), None when there is no such
    file; what is wrong is added to errors as one line (and {} given)."""
    try:
        data = json.loads(read_plain(path, limit or MAX_RECORD).decode("utf-8"))
    except FileNotFoundError:
        return None
    except NotPlain as exc:
        errors.append(str(exc))
        return {}
    except RecursionError:
        errors.append(f"{path}: nested too deeply to be one of ours")
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        errors.append(f"{path}: unreadable ({exc.strerror if isinstance(exc, OSError) else exc})")
        return {}
    except ValueError as exc:
        errors.append(f"{path}: not JSON ({exc})")
        return {}
    if not isinstance(data, dict):
        errors.append(f"{path}: not a JSON object")
        return {}
    return data


def append_result(results_dir: Path, record: dict[str, Any]) -> None:
    with (results_dir / RESULTS).open("a") as fh:
        fh.write(json.dumps(record) + "\n")


def is_complete(results_dir: Path) -> bool:
    """A finished run, which --resume keeps: the suite ended and exited normally, nothing failed
    to set up, and the harness closed it (cell.json has its end)."""
    meta = read_json(results_dir / CELL_JSON)
    env = read_json(results_dir / ENV_JSON)
    return (meta.get("exit_code") in PYTEST_EXIT_OK and bool(meta.get("ended")) and not meta.get("error")
            and bool(env.get("ended")))
