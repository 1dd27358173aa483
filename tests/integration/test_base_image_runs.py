"""The local base image for real: debootstrap + docker import, cached."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from convmatrix.run.lanes import base_image

DOCKER = "/usr/bin/docker"


def _daemon_answers() -> bool:
    if not Path(DOCKER).exists():
        return False
    return subprocess.run([DOCKER, "info"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not _daemon_answers(), reason=f"no Docker daemon answers `{DOCKER} info` (start it: .ci/docker-up)")
@pytest.mark.skipif(shutil.which("debootstrap") is None, reason="debootstrap missing (install it: .ci/docker-up)")
def test_real_base_image_runs_python_311_and_is_cached() -> None:
    # Builds on a clean machine (minutes), finds the cached image on the next run.
    first = base_image.ensure(docker=DOCKER)
    assert first.startswith("sha256:")
    run = subprocess.run(
        [DOCKER, "run", "--rm", "--network", "none", base_image.TAG, "python3", "-c",
         "import venv, sys; print(sys.version)"],
        capture_output=True, text=True, check=True, timeout=120,
    )
    assert run.stdout.startswith("3.11.")
    started = time.monotonic()
    assert base_image.ensure(docker=DOCKER) == first
    assert time.monotonic() - started < 2
    label = subprocess.run(
        [DOCKER, "image", "inspect", "--format", '{{index .Config.Labels "convmatrix.base"}}', first],
        capture_output=True, text=True, check=True,
    )
    assert label.stdout.strip() == "bookworm"
