"""Container-lane build figures, printed, never asserted (needs a Docker engine and
convmatrix/base:bookworm: `nox -s base-image`).

    python bench/container_build.py noop      # a no-op `convmatrix build` over an up-to-date 65-cell matrix
    python bench/container_build.py reuse     # rebuild after changing only the cuDNN override

noop: every cell's image is made "up to date" with a stand-in (an empty image carrying the cell's
content-hash label, imported in a blink), then `convmatrix build` is timed against the plain
alternative a script would run: one `docker image inspect` per cell.

reuse: builds torch 2.5.1 (cu124, from PyPI) with its bundled cuDNN, then the same stack with
a cuDNN 9.5.1.17 override, and prints the second build's seconds, whether the torch layer came
from the cache, and the megabytes pip downloaded for it.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from convmatrix.matrix import load  # noqa: E402
from convmatrix.run.lanes import container, containers, images  # noqa: E402

BASE = "convmatrix/base:bookworm"
NOOP_MATRIX = f"""
name = "bench-noop"
[axes]
lane = ["container"]
torch = ["2.4.0", "2.4.1", "2.5.0", "2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0"]
cuda = ["cu118", "cu121", "cu124", "cu126", "cu128"]
cudnn = ["bundled", "9.5.1.17", "9.10.2.21"]
python = ["3.11"]
[container]
base = "{BASE}"
"""
REUSE_MATRIX = f"""
name = "bench-reuse"
[axes]
lane = ["container"]
torch = ["2.5.1"]
cuda = ["cu124"]
cudnn = ["bundled", "9.5.1.17"]
python = ["3.11"]
[container]
base = "{BASE}"
"""


def empty_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w"):
        pass
    return buf.getvalue()


def noop(tmp: Path) -> None:
    path = tmp / "m.toml"
    path.write_text(NOOP_MATRIX)
    matrix = load(path)
    with containers.client() as engine:
        plans = container.plans(engine, matrix, matrix.lane("container"), None)
        built = containers.built_digests(engine)
    docker = images.docker_cli()
    for p in plans:  # stand-ins: an empty image under the cell's tag, with its hash label
        if p.digest not in built:
            subprocess.run([docker, "import", "--change", f"LABEL {images.LABEL_HASH}={p.digest}", "-", p.tag],
                           input=empty_tar(), capture_output=True, check=True)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "convmatrix", "build", "-m", str(path)], capture_output=True,
                          text=True, check=True, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    ours = time.perf_counter() - start
    assert done.stdout.count("up to date") == len(plans), done.stdout
    start = time.perf_counter()
    for p in plans:
        subprocess.run([docker, "image", "inspect", p.tag], capture_output=True, check=True)
    plain = time.perf_counter() - start
    print(f"cells: {len(plans)} (all up to date)")
    print(f"convmatrix build (no-op, whole command): {ours:6.2f} s")
    print(f"plain: docker image inspect per cell:    {plain:6.2f} s")
    print(f"ratio plain/ours: {plain / ours:.1f}x")
    for p in plans:
        subprocess.run([docker, "rmi", p.tag], capture_output=True, check=False)


def reuse(tmp: Path) -> None:
    path = tmp / "m.toml"
    path.write_text(REUSE_MATRIX)
    matrix = load(path)
    for cell in matrix.lane("container"):
        lines: list[str] = []
        start = time.perf_counter()
        container.build_all(matrix, [cell.id], log=lines.append)
        seconds = time.perf_counter() - start
        text = "\n".join(lines)
        megabytes = sum(float(m) * (1024 if unit == "GB" else 1 if unit == "MB" else 1 / 1024)
                        for m, unit in re.findall(r"Downloading \S+ \(([\d.]+) (kB|MB|GB)\)", text))
        print(f"{cell.id}: {seconds:6.1f} s, pip downloaded {megabytes:7.1f} MB, "
              f"torch layer cached: {torch_layer_cached(lines)}")


def torch_layer_cached(lines: list[str]) -> bool:
    """BuildKit's plain progress: "#9 [stage-0 4/6] RUN ... pip-install torch==2.5.1", then "#9 CACHED"."""
    steps = [ln.split()[0] for ln in lines if ln.startswith("#") and " RUN " in ln and "torch==" in ln]
    return bool(steps) and f"{steps[0]} CACHED" in lines


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "noop"
    with tempfile.TemporaryDirectory() as tmp:
        {"noop": noop, "reuse": reuse}[which](Path(tmp))
