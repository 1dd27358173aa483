"""Torch-carrying base images for the `system` flavour, made here because no registry is
reachable: convmatrix/base:bookworm with torch in its system Python (tests/torch_base/Dockerfile),
standing in for NGC's nvcr.io/nvidia/pytorch or pytorch/pytorch. Importable as `torchbases`.

Each is tagged by name (convmatrix-test/torch-base:2.5) and labelled with a hash of its recipe (the
Dockerfile, the pip arguments, the base's id): an image whose label matches is reused as it is,
so only the first run on a machine builds (a minute or two each), and a changed recipe rebuilds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from convmatrix.run.lanes import base_image, container
from convmatrix.run.lanes.images import docker_cli
from testkit import REPO

RECIPE = REPO / "tests" / "torch_base" / "Dockerfile"
LABEL = "convmatrix.test.recipe"


@dataclass(frozen=True, kw_only=True)
class TorchBase:
    tag: str
    pip_args: tuple[str, ...]  # what `pip install` gets; /wheels is the wheelhouse, bind-mounted
    torch: str  # the version its torch reports (torch.__version__)


# The base in production (the control of an upgrade) and the candidate. torch 2.5.1 is PyPI's own
# build (cu124, with the CUDA libraries as nvidia-* wheels: about 3 GB through the package
# index; it runs on the CPU too); 2.13.0+cpu is the CPU build from the test wheelhouse (no CPU
# wheel index is reachable here, so these are the two versions that install).
CURRENT = TorchBase(tag="convmatrix-test/torch-base:2.5", pip_args=("torch==2.5.1",), torch="2.5.1+cu124")
CANDIDATE = TorchBase(tag="convmatrix-test/torch-base:2.13",
                      pip_args=("--no-index", "--find-links", "/wheels", "torch==2.13.0"), torch="2.13.0+cpu")


def recipe_hash(base: TorchBase, base_id: str) -> str:
    content = RECIPE.read_bytes() + "\0".join([*base.pip_args, base_id]).encode()
    return hashlib.sha256(content).hexdigest()


def label_of(tag: str) -> str | None:
    """The recipe label of a local image, or None when there is no such image."""
    done = subprocess.run([docker_cli(), "image", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL}"}}}}',
                           tag], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def ensure(base: TorchBase, wheelhouse: Path) -> str:
    """The base's tag, built first unless an image of this recipe is already here."""
    digest = recipe_hash(base, base_image.ensure())
    if label_of(base.tag) == digest:
        return base.tag
    with tempfile.TemporaryDirectory(prefix="torch-base-") as tmp:
        context = Path(tmp)
        shutil.copy(RECIPE, context / "Dockerfile")
        (context / "wheels").mkdir()
        for wheel in wheelhouse.glob("*.whl") if "/wheels" in base.pip_args else ():
            try:
                os.link(wheel, context / "wheels" / wheel.name)
            except OSError:  # another filesystem
                shutil.copy2(wheel, context / "wheels" / wheel.name)
        command = [docker_cli(), "build", "--progress=plain", "--tag", base.tag, "--label", f"{LABEL}={digest}",
                   "--build-arg", f"BASE={base_image.TAG}", "--build-arg", f"PIP_ARGS={' '.join(base.pip_args)}"]
        secrets = container.secrets()  # the proxy's CA, as the cell images get it: never in a layer
        if secrets.ca is not None:
            command += ["--secret", f"id=ca,src={secrets.ca}"]
        done = subprocess.run([*command, str(context)], capture_output=True, text=True, timeout=3600,
                              check=False, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert done.returncode == 0, f"building {base.tag} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return base.tag


NO_ENSUREPIP = """FROM {base}
RUN rm -rf /usr/lib/python3.*/ensurepip && ! python3 -m venv /tmp/probe
"""


def build_layer(tag: str, dockerfile: str, *, with_ca: bool = False, timeout: float = 600) -> str:
    """A layer over another image from a Dockerfile alone (no context), built with BuildKit; with_ca:
    the proxy's CA as a secret, as the cell images get it (never in a layer)."""
    with tempfile.TemporaryDirectory(prefix="test-layer-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(dockerfile)
        command = [docker_cli(), "build", "--progress=plain", "--tag", tag]
        secrets = container.secrets() if with_ca else None
        if secrets is not None and secrets.ca is not None:
            command += ["--secret", f"id=ca,src={secrets.ca}"]
        done = subprocess.run([*command, tmp], capture_output=True, text=True, timeout=timeout, check=False,
                              env={**os.environ, "DOCKER_BUILDKIT": "1"})
    assert done.returncode == 0, f"building {tag} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return tag


def without_ensurepip(base: str) -> str:
    """The base with `python3 -m venv` broken as on an Ubuntu base without python3-venv (NGC's):
    a layer that removes ensurepip (seconds; BuildKit caches it)."""
    return build_layer(f"{base}-no-ensurepip", NO_ENSUREPIP.format(base=base))


# Stand-ins for the bases the wheel flavour meets (issue 25, item 2), each a layer over
# convmatrix/base:bookworm that removes with dpkg what the real one lacks (no registry is reachable):
# Debian's or Ubuntu's python3 without python3-venv (no ensurepip), and NVIDIA's nvidia/cuda
# runtime images, which carry no Python at all.
PLAIN_BASES = {
    "convmatrix-test/plain-base:no-venv":
        "RUN dpkg --purge python3-venv python3.11-venv && ! python3 -m venv /tmp/probe && python3 -m pip --version\n",
    # An air-gapped runner's: no python3-venv, and apt reaches no mirror (pip, from the wheelhouse, must do).
    "convmatrix-test/plain-base:no-venv-offline":
        "RUN dpkg --purge python3-venv python3.11-venv && rm -rf /etc/apt/sources.list.d/* "
        "&& echo 'deb http://127.0.0.1:9/debian bookworm main' > /etc/apt/sources.list\n",
    "convmatrix-test/plain-base:no-python":
        "RUN apt-get purge -y -qq --auto-remove 'python3*' 'libpython3*' >/dev/null && ! command -v python3\n",
}


def plain_base(tag: str) -> str:
    """One of PLAIN_BASES, built over the base image (seconds; BuildKit caches the layer)."""
    return build_layer(tag, f"FROM {base_image.TAG}\n{PLAIN_BASES[tag]}")


# A CUDA base image's own cuDNN on LD_LIBRARY_PATH, as NVIDIA's cudnn-runtime and NGC images carry
# one: here the real libcudnn.so.9 and libcudnn_graph.so.9 of another release (9.5.1.17, from its
# PyPI wheel), which the cell's torch wheel must not mix into the cuDNN its own wheel pins.
SYSTEM_CUDNN_TAG = "convmatrix-test/plain-base:system-cudnn"
SYSTEM_CUDNN = """FROM {base}
RUN --mount=type=secret,id=ca --mount=type=cache,target=/root/.cache/pip \\
    if [ -f /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi; \\
    python3 -m pip download -q --no-deps --only-binary=:all: -d /tmp/w nvidia-cudnn-cu12==9.5.1.17 \\
    && mkdir -p /usr/lib/cudnn-system \\
    && python3 -c "import zipfile,glob; z=zipfile.ZipFile(glob.glob('/tmp/w/*.whl')[0]); \\
[open('/usr/lib/cudnn-system/'+n,'wb').write(z.read('nvidia/cudnn/lib/'+n)) \\
for n in ('libcudnn.so.9', 'libcudnn_graph.so.9')]" \\
    && rm -rf /tmp/w
ENV LD_LIBRARY_PATH=/usr/lib/cudnn-system
"""


def system_cudnn_base() -> str:
    """SYSTEM_CUDNN_TAG, built over the base image (one 600 MB wheel download, cached)."""
    return build_layer(SYSTEM_CUDNN_TAG, SYSTEM_CUDNN.format(base=base_image.TAG), with_ca=True, timeout=1800)
