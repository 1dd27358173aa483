"""Cell images: what goes into each (the build plan), its content-hash tag, and the BuildKit build.

An image is named by a hash of everything that goes into it (the Dockerfile and its scripts, the
build arguments, the wheelhouse listing, the base image's id), so an up-to-date image is found
by its tag and never rebuilt. The docker CLI builds (BuildKit: secrets and cache mounts; the
Python SDK's build has neither); every other engine call is in lanes/containers.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from convmatrix import popen
from convmatrix.errors import BadInput, InfrastructureError
from convmatrix.matrix import stacks
from convmatrix.matrix.cells import Cell
from convmatrix.matrix.values import IMAGE, slug
from convmatrix.run.lanes import install
from convmatrix.shipped import shipped


def find_images_dir() -> Path:
    """The build context: the checkout's images/ from a source tree, else the wheel's copy."""
    return shipped("images", "Dockerfile")


IMAGES_DIR = find_images_dir()
CONTEXT_FILES = ("Dockerfile", "pip-install", "check-python")
REPOSITORY = "convmatrix/cell"
LABEL_CELL = "convmatrix.cell"
LABEL_HASH = "convmatrix.hash"
DIGEST = re.compile(r"[0-9a-f]{64}")  # what plan() puts in LABEL_HASH: a sha256, in hex


@dataclass(frozen=True, kw_only=True)
class Secrets:
    """Build secrets: files handed to BuildKit, never copied into the context or a layer."""

    ca: Path | None = None  # a CA bundle for a TLS-intercepting proxy (pip's PIP_CERT)
    pipconf: Path | None = None  # a pip.conf carrying index credentials


@dataclass(frozen=True, kw_only=True)
class Plan:
    cell: Cell
    args: dict[str, str]  # build arguments (FLAVOUR among them: wheel | system)
    wheelhouse: Path | None
    digest: str  # content hash of everything that goes into the image

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}:{self.digest[:20]}"


def cudnn_library_path(cell: Cell, flavour: str, parts: install.Plan) -> str:
    """The folder images/Dockerfile puts first on LD_LIBRARY_PATH (the cell's wheel's cuDNN, so that
    its sub-libraries are not taken from a base's own cuDNN: docs/container-lane.md), only where
    the image will have it: the cell venv's nvidia/cudnn/lib when a wheel installs a cuDNN there (a
    wheel-flavour CUDA torch, or a cuDNN override with the cell's Python known); "" otherwise (a
    system base's own torch and cuDNN, a CPU torch), which leaves the base's LD_LIBRARY_PATH as it is."""
    cuda_torch = flavour == "wheel" and not cell.from_image() and stacks.cuda_version(cell.cuda) is not None
    if not (cuda_torch or parts.cudnn) or cell.python == IMAGE:
        return ""
    return f"/opt/cell/lib/python{cell.python}/site-packages/nvidia/cudnn/lib"


def build_args(cell: Cell, flavour: str, wheelhouse: Path | None) -> dict[str, str]:
    """The Dockerfile's arguments for a cell: the named parts of its install plan (install.py), the
    ones the baremetal lane installs; a stack taken from the image (values.IMAGE) installs nothing
    of it and checks no Python."""
    parts = install.plan(cell, Path("/wheelhouse") if wheelhouse else None)
    return {
        "BASE": cell.base,
        "FLAVOUR": flavour,
        "PYTHON_VERSION": cell.python,  # "image": check-python checks none
        "SOURCE_ARGS": " ".join(parts.source),
        "TORCH_ARGS": " ".join(parts.torch),
        "SUITE_REQUIREMENTS": " ".join(parts.suite),
        "CUDNN_SPEC": parts.cudnn,
        "CUDNN_LIBRARY_PATH": cudnn_library_path(cell, flavour, parts),
        # One pip cache per torch install: not shared across every stack's builds.
        "CACHE_ID": slug(f"py{cell.python}-torch{cell.torch}-{cell.cuda}-{flavour}"
                         + (f"-{cell.base}" if cell.from_image() else "")),
    }


def wheelhouse_listing(wheelhouse: Path | None) -> list[list[object]]:
    """Names, sizes and mtimes: cheap to read, and a changed wheel changes the hash."""
    if wheelhouse is None:
        return []
    if not wheelhouse.is_dir():
        raise BadInput(f"wheelhouse {wheelhouse}: no such directory")
    return sorted([p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in wheelhouse.iterdir() if p.is_file())


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """What every plan of one build shares: the context files' bytes, wheelhouse, base ids."""

    files: dict[str, bytes]
    wheelhouse: Path | None
    listing: list[list[object]]
    base_ids: dict[str, str]  # base reference -> image id ("" when not present locally)


def read_inputs(wheelhouse: Path | None, base_ids: dict[str, str]) -> Inputs:
    files = {name: (IMAGES_DIR / name).read_bytes() for name in CONTEXT_FILES}
    return Inputs(files=files, wheelhouse=wheelhouse, listing=wheelhouse_listing(wheelhouse), base_ids=base_ids)


def plan(cell: Cell, flavour: str, inputs: Inputs) -> Plan:
    args = build_args(cell, flavour, inputs.wheelhouse)
    content = {
        "files": {k: hashlib.sha256(v).hexdigest() for k, v in sorted(inputs.files.items())},
        "args": args,
        "wheelhouse": inputs.listing,
        # The base's image id when it is here (a re-tagged base means a rebuild), else its reference.
        "base": inputs.base_ids.get(cell.base) or cell.base,
    }
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    return Plan(cell=cell, args=args, wheelhouse=inputs.wheelhouse, digest=digest)


# --- building -----------------------------------------------------------------------------------

def docker_cli() -> str:
    """A docker client that builds with BuildKit: $CONVMATRIX_DOCKER, else one with buildx, else
    Debian's /usr/bin/docker (its 20.10 client builds with BuildKit by itself)."""
    chosen = os.environ.get("CONVMATRIX_DOCKER")
    if chosen:
        return chosen
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "buildx", "version"], capture_output=True, check=False).returncode == 0:
        return docker
    if Path("/usr/bin/docker").exists():
        return "/usr/bin/docker"
    return docker or "docker"


def podman_cli() -> str:
    """Podman's client: $CONVMATRIX_PODMAN, else `podman` on PATH. Its builder (Buildah) takes the
    same Dockerfile: RUN --mount of type cache, secret and bind, and --secret id=...,src=..."""
    return os.environ.get("CONVMATRIX_PODMAN") or shutil.which("podman") or "podman"


def build_command(p: Plan, context: Path, secrets: Secrets, docker: str, *, engine: str = "docker") -> list[str]:
    # --progress is BuildKit's; Buildah prints every step plainly, and has no such option.
    progress = ["--progress=plain"] if engine == "docker" else []
    command = [docker, "build", *progress, "--tag", p.tag,
               "--label", f"{LABEL_CELL}={p.cell.id}", "--label", f"{LABEL_HASH}={p.digest}"]
    for key, value in p.args.items():
        command += ["--build-arg", f"{key}={value}"]
    for name, path in (("ca", secrets.ca), ("pipconf", secrets.pipconf)):
        if path is not None:
            command += ["--secret", f"id={name},src={path}"]
    return [*command, str(context)]


def make_context(p: Plan, directory: Path) -> None:
    """The build context: the image files and the wheelhouse (hard links when it can)."""
    for name in CONTEXT_FILES:
        shutil.copy2(IMAGES_DIR / name, directory / name)
    wheels = directory / "wheelhouse"
    wheels.mkdir()
    for wheel in sorted(p.wheelhouse.iterdir()) if p.wheelhouse else []:
        if wheel.is_file():
            try:
                os.link(wheel, wheels / wheel.name)
            except OSError:
                shutil.copy2(wheel, wheels / wheel.name)


def build(p: Plan, secrets: Secrets, log: Callable[[str], None] = print, *, engine: str = "docker") -> None:
    """Build one image with BuildKit (or Podman's Buildah), each line of its output to log;
    InfrastructureError with the last line on failure."""
    docker = podman_cli() if engine == "podman" else docker_cli()
    tail: list[str] = []

    def line(text: str) -> None:
        log(text)
        if text.strip():
            tail[:] = [text]

    with tempfile.TemporaryDirectory(prefix="convmatrix-build-") as tmp:
        make_context(p, Path(tmp))
        command = build_command(p, Path(tmp), secrets, docker, engine=engine)
        code = popen.stream(command, env=dict(os.environ, DOCKER_BUILDKIT="1"), echo=False, on_line=line)
    if code == popen.NOT_STARTED:
        raise InfrastructureError(f"{engine}: cannot run {docker}: {tail[0] if tail else 'not found'}")
    if code != 0:
        raise InfrastructureError(f"{p.cell.id}: image build failed (exit {code}): {tail[0] if tail else 'no output'}")
