"""The container lanes' isolation check, the same on every engine (Docker, Podman)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from convmatrix.run.lanes import base_image, container, containers
from convmatrix.run.lanes.images import docker_cli

# A suite step that tries to leave a root shell on the host (the container lanes' isolation tests).
HOSTILE_STEP = ("id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; touch /planted || echo rootfs read-only; "
                "cp /bin/sh /results/rootsh; chmod 4755 /results/rootsh; cp /bin/sh /results/results.jsonl; "
                "chmod 4755 /results/results.jsonl; ln -s /etc/shadow /results/env.json; echo done")


def assert_no_root_shell(engine: str, image: str, tmp_path: Path) -> None:
    """Run the hostile step in a cell container of that engine: not root (or, rootless Podman,
    the container's root, which is the user), no capability, no new privileges, a read-only root,
    and only the suite's own files leave its scratch directory, as plain files without setuid bits."""
    out = tmp_path / "run" / "c@cpu@h"
    out.mkdir(parents=True)
    (tmp_path / "suite").mkdir()
    with container.scratch(out) as place:
        spec = containers.RunSpec(image=image, command=["sh", "-c", HOSTILE_STEP], results_dir=place,
                                  suite_dir=tmp_path / "suite", gpu=None, environment={})
        with containers.client(engine) as engine_client:
            outcome = containers.run(engine_client, spec, out / "log.txt")
    log = (out / "log.txt").read_text()
    assert outcome.exit_code == 0 and "done" in log, log
    uid = "65534" if os.getuid() == 0 else "0" if engine == "podman" else str(os.getuid())
    assert f"\n{uid}\n" in log and "CapEff:\t0000000000000000" in log and "NoNewPrivs:\t1" in log, log
    assert "rootfs read-only" in log
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "results.jsonl"]
    assert not (out / "results.jsonl").stat().st_mode & 0o7000  # no setuid, setgid or sticky bit
    assert not [p for p in out.rglob("*") if p.is_symlink()]


def inspect_cell_container(engine: str, image: str, tmp_path: Path) -> dict[str, Any]:
    """The engine's own `inspect` of a cell container created (never started) with run_kwargs, as
    that engine's CLI prints it: what the engine really set, to compare with what was asked."""
    (tmp_path / "results").mkdir()
    (tmp_path / "suite").mkdir()
    spec = containers.RunSpec(image=image, command=["true"], results_dir=tmp_path / "results",
                              suite_dir=tmp_path / "suite", gpu=None, environment={})
    with containers.client(engine) as engine_client:
        assert containers.kind_of(engine_client).name == engine
        kwargs = containers.run_kwargs(spec, containers.kind_of(engine_client))
        created = engine_client.containers.create(**{k: v for k, v in kwargs.items() if k != "auto_remove"})
        try:
            cli = docker_cli() if engine == "docker" else base_image.engine_cli("podman")
            done = subprocess.run([cli, "inspect", created.id], capture_output=True, text=True, check=True)
        finally:
            created.remove(force=True)
    (info,) = json.loads(done.stdout)
    assert isinstance(info, dict)
    return info


# --- issue 49: the rootless user runs a copy it can read ---
def readable_copy(checkout: Path, home: Path, owner: str | None = None) -> Path:
    """The harness's source (src/ and suites/, as a checkout lays them out) copied into home, readable
    by its user: the checkout itself may sit in a folder that user cannot enter (a `mktemp -d`
    clone, a 0700 home; issue 49). Returns the copy's src/, for PYTHONPATH."""
    copy = home / "checkout"
    shutil.rmtree(copy, ignore_errors=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
    for part in ("src", "suites"):
        shutil.copytree(checkout / part, copy / part, ignore=skip)
    for path in (copy, *copy.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
        if owner is not None:
            shutil.chown(path, owner, owner)
    return copy / "src"


def cell_images() -> set[str]:
    """The ids of the cell images on the Docker engine (labelled images.LABEL_HASH)."""
    from convmatrix.run.lanes.images import LABEL_HASH

    done = subprocess.run([docker_cli(), "images", "--quiet", "--no-trunc", "--filter", f"label={LABEL_HASH}"],
                          capture_output=True, text=True, timeout=120, check=True)
    return set(done.stdout.split())


def remove_images_since(before: set[str]) -> None:
    """Remove the cell images made since `before` (cell_images()), and then BuildKit's cache of
    their layers: removing an image alone moves its layers into that cache and frees nothing (seen
    here: a 5.4 GB cell image became 5.4 GB more of `docker system df`'s build cache). Only the
    regular records go (`--filter type=regular`): the cache mounts, which hold the packages a
    later build downloads again, stay. For a test module whose images no other module uses: CI's
    machine has a disk of its own size (tests/diskwatch.py)."""
    made = sorted(cell_images() - before)
    if made:
        subprocess.run([docker_cli(), "image", "rm", "--force", *made], capture_output=True, text=True,
                       timeout=600, check=False)
    subprocess.run([docker_cli(), "builder", "prune", "--force", "--filter", "type=regular"], capture_output=True,
                   text=True, timeout=600, check=False)
