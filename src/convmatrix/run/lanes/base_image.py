"""The local base image `convmatrix/base:bookworm`, made from Debian packages (issue 3).

No container registry is reachable in air-gapped clusters or in this project's CI, so the
container lane's base image is built from the Debian mirror that apt already uses: debootstrap
into a temporary directory, then `tar | docker import` (or `podman import`: `--engine podman`).
Stdlib and the engine's CLI only, so that it runs before anything else is installed
(`python -m convmatrix.run.lanes.base_image [--engine podman]`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from convmatrix.errors import BadInput, ConvmatrixError
from convmatrix.matrix.cells import ENGINES
from convmatrix.run.lanes.images import podman_cli

TAG = "convmatrix/base:bookworm"
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
DEBOOTSTRAP_SBIN = Path("/usr/sbin/debootstrap")
# python3-venv is what the wheel flavour installs into; pip for `python3 -m pip` inside venvs.
INCLUDE = ("python3", "python3-venv", "python3-pip")
IMPORT_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
    f"LABEL convmatrix.base={SUITE}",
)
# debootstrap mounts these inside the target; a failed run can leave them mounted, and deleting
# the tree through a live /proc or /sys mount must never happen.
GUEST_MOUNTS = ("proc", "sys", "dev/pts", "dev")

Log = Callable[[str], object]


def default_docker() -> str:
    """$CONVMATRIX_DOCKER, else Debian's client (it can do BuildKit builds), else `docker` on PATH."""
    if env := os.environ.get("CONVMATRIX_DOCKER"):
        return env
    return "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"


def engine_cli(engine: str) -> str:
    """The CLI that imports into that engine's store: Docker's (default_docker), or Podman's."""
    return podman_cli() if engine == "podman" else default_docker()


def parse_mirror(sources: str, suite: str = SUITE) -> str | None:
    """The first enabled deb URI serving `suite` in a deb822 sources file (None if there is none)."""
    for stanza in _deb822_stanzas(sources):
        if stanza.get("enabled", "yes").lower() == "no":
            continue
        if "deb" in stanza.get("types", "").split() and suite in stanza.get("suites", "").split():
            uris = stanza.get("uris", "").split()
            if uris:
                return uris[0].rstrip("/")
    return None


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    """Stanzas as {lower-case field: value}; continuation lines are joined, comments dropped."""
    stanzas: list[dict[str, str]] = [{}]
    key = ""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if stanzas[-1]:
                stanzas.append({})
            continue
        if line[0].isspace() and key:
            stanzas[-1][key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            stanzas[-1][key] = value.strip()
    return [s for s in stanzas if s]


def apt_mirror(path: Path = SOURCES) -> str:
    """The mirror apt on this machine uses for bookworm, so debootstrap goes where apt can go."""
    try:
        return parse_mirror(path.read_text()) or DEFAULT_MIRROR
    except OSError:
        return DEFAULT_MIRROR


def ensure(*, tag: str = TAG, force: bool = False, docker: str | None = None, engine: str = "docker",
           log: Log = print) -> str:
    """The id of image `tag` in that engine's store (through the CLI `docker`), built from Debian
    packages when it is missing (or when `force`)."""
    docker = docker or engine_cli(engine)
    if not force:
        found = image_id(docker, tag, engine)
        if found:
            log(f"base image {tag} is up to date ({found[:19]})")
            return found
    debootstrap = _require_build_tools()
    if force:
        image_id(docker, tag, engine)  # fails early, before minutes of debootstrap, when the engine is down
    return _build(docker, tag, debootstrap, log)


def image_id(docker: str, tag: str, engine: str = "docker") -> str | None:
    """The local image id of `tag`, None when there is no such image; BadInput, naming the engine,
    when its CLI is missing or cannot answer."""
    try:
        proc = subprocess.run(
            [docker, "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        install = "podman" if engine == "podman" else "docker.io (as root: .ci/docker-up)"
        raise BadInput(f"{engine} CLI not found ({docker}): install {install}") from None
    if proc.returncode == 0:
        return proc.stdout.strip()
    if "no such image" in proc.stderr.lower() or "image not known" in proc.stderr.lower():  # docker, podman
        return None
    reason = _first_line(proc.stderr)
    if engine == "podman":  # no daemon: the CLI reads its own store
        raise BadInput(f"podman could not read its image store through {docker}: {reason}")
    raise BadInput(f"Docker daemon not reachable through {docker}: {reason}; start it (as root: .ci/docker-up)")


def _require_build_tools() -> str:
    # /usr/sbin is not on a non-root PATH; look there too so the error says "needs root", not "missing".
    debootstrap = shutil.which("debootstrap") or (str(DEBOOTSTRAP_SBIN) if DEBOOTSTRAP_SBIN.exists() else None)
    if debootstrap is None:
        raise BadInput("debootstrap not found: install it (apt-get install debootstrap, or .ci/docker-up)")
    if os.geteuid() != 0:
        raise BadInput("building the base image needs root (debootstrap): run it as root, e.g. sudo nox -s base-image")
    return debootstrap


def _build(docker: str, tag: str, debootstrap: str, log: Log) -> str:
    mirror = apt_mirror()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="convmatrix-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        try:
            log(f"debootstrap {SUITE} from {mirror} (a few minutes)")
            _debootstrap(debootstrap, root, mirror)
            _slim(root)
            log(f"{Path(docker).name} import as {tag}")
            found = _import(docker, root, tag)
        finally:
            _unmount_guest(root)
    log(f"base image {tag} built in {time.monotonic() - started:.0f} s ({found[:19]})")
    return found


def _debootstrap(debootstrap: str, root: Path, mirror: str) -> None:
    # minbase: only essential + apt; debootstrap never installs Recommends, which keeps it small.
    cmd = [debootstrap, "--variant=minbase", f"--include={','.join(INCLUDE)}", SUITE, str(root), mirror]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = _last_line(proc.stdout + proc.stderr)
        raise BadInput(f"debootstrap from {mirror} failed ({tail}): check the mirror is reachable, then retry")


def _slim(root: Path) -> None:
    """Drop what apt can fetch again: downloaded .debs and package lists are not needed at run time."""
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*_*"):
        for path in root.glob(pattern):
            path.unlink()


def _import(docker: str, root: Path, tag: str) -> str:
    changes = [arg for change in IMPORT_CHANGES for arg in ("--change", change)]
    # --numeric-owner: the host's user names must not remap the guest's files.
    tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    try:
        proc = subprocess.run(
            [docker, "import", *changes, "-", tag], stdin=tar.stdout, capture_output=True, text=True, check=False
        )
    finally:
        if tar.stdout is not None:
            tar.stdout.close()
        tar_rc = tar.wait()
    if proc.returncode != 0 or tar_rc != 0:
        why = _first_line(proc.stderr) or f"tar exit {tar_rc}"
        raise BadInput(f"{Path(docker).name} import of {tag} failed: {why}")
    return proc.stdout.strip()


def _unmount_guest(root: Path) -> None:
    for sub in GUEST_MOUNTS:
        mount = root / sub
        if os.path.ismount(mount):
            subprocess.run(["umount", "-l", str(mount)], check=False)


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m convmatrix.run.lanes.base_image", description=__doc__)
    parser.add_argument("--tag", default=TAG, help=f"image tag (default {TAG})")
    parser.add_argument("--force", action="store_true", help="rebuild even when the tag exists")
    parser.add_argument("--engine", choices=ENGINES, default="docker",
                        help="the engine whose image store gets it (default docker)")
    args = parser.parse_args(argv)
    try:
        print(ensure(tag=args.tag, force=args.force, engine=args.engine))
    except ConvmatrixError as exc:
        print(f"convmatrix: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
