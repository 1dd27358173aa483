from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from convmatrix.errors import BadInput
from convmatrix.matrix.cells import Cell
from convmatrix.run.lanes import images


def cell(*, torch: str = "2.5.1", cuda: str = "cu124", cudnn: str = "bundled") -> Cell:
    return Cell(lane="container", torch=torch, cuda=cuda, cudnn=cudnn, python="3.11", base="convmatrix/base:bookworm",
                flavour="wheel")


def inputs(wheelhouse: Path | None = None, base_id: str = "sha256:base") -> images.Inputs:
    return images.read_inputs(wheelhouse, {"convmatrix/base:bookworm": base_id})


def test_build_args_follow_the_baremetal_install_plan() -> None:
    args = images.build_args(cell(cudnn="9.5.1.17"), "wheel", None)
    assert args["TORCH_ARGS"] == "torch==2.5.1"
    assert args["SOURCE_ARGS"] == ""
    assert args["CUDNN_SPEC"] == "nvidia-cudnn-cu12==9.5.1.17"
    assert args["PYTHON_VERSION"] == "3.11"
    other = images.build_args(cell(cuda="cu121"), "wheel", None)
    assert other["TORCH_ARGS"] == "--index-url https://download.pytorch.org/whl/cu121 torch==2.5.1"
    assert other["CUDNN_SPEC"] == ""


def test_wheelhouse_builds_install_from_it_alone(tmp_path: Path) -> None:
    args = images.build_args(cell(cuda="cpu", torch="2.13.0"), "wheel", tmp_path)
    assert args["SOURCE_ARGS"] == "--no-index --find-links /wheelhouse"
    assert args["TORCH_ARGS"] == "torch==2.13.0"


def test_hash_is_stable_and_moves_with_every_input(tmp_path: Path) -> None:
    base = images.plan(cell(), "wheel", inputs())
    assert images.plan(cell(), "wheel", inputs()).digest == base.digest
    assert base.tag == f"convmatrix/cell:{base.digest[:20]}"
    changed = [
        images.plan(cell(cudnn="9.5.1.17"), "wheel", inputs()),
        images.plan(cell(), "system", inputs()),
        images.plan(cell(), "wheel", inputs(base_id="sha256:other")),
        images.plan(cell(), "wheel", inputs(wheelhouse=tmp_path)),
    ]
    (tmp_path / "torch.whl").write_bytes(b"x")
    changed.append(images.plan(cell(), "wheel", inputs(wheelhouse=tmp_path)))
    digests = [p.digest for p in changed]
    assert base.digest not in digests and len(set(digests)) == len(digests)


def test_missing_wheelhouse_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no such directory"):
        inputs(wheelhouse=tmp_path / "none")


def test_build_command_passes_secrets_never_files_in_the_context(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("CERT")
    p = images.plan(cell(), "wheel", inputs())
    command = images.build_command(p, tmp_path / "ctx", images.Secrets(ca=ca), "docker")
    assert command[command.index("--secret") + 1] == f"id=ca,src={ca}"
    assert f"{images.LABEL_HASH}={p.digest}" in command
    assert f"{images.LABEL_CELL}={p.cell.id}" in command
    assert command[-1] == str(tmp_path / "ctx")
    (tmp_path / "ctx").mkdir()
    images.make_context(p, tmp_path / "ctx")
    assert sorted(x.name for x in (tmp_path / "ctx").iterdir()) == sorted([*images.CONTEXT_FILES, "wheelhouse"])


def test_docker_cli_prefers_the_configured_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVMATRIX_DOCKER", "/opt/docker")
    assert images.docker_cli() == "/opt/docker"


def test_each_torch_install_has_its_own_pip_cache_and_cudnn_overrides_share_it() -> None:
    """Issue 21, item 1: one pip cache mount was shared by every cell build of every stack."""
    bundled = images.build_args(cell(), "wheel", None)["CACHE_ID"]
    assert images.build_args(cell(cudnn="9.5.1.17"), "wheel", None)["CACHE_ID"] == bundled  # one torch layer
    assert images.build_args(cell(cuda="cu121"), "wheel", None)["CACHE_ID"] != bundled
    dockerfile = (images.IMAGES_DIR / "Dockerfile").read_text()
    mounts = [line for line in dockerfile.splitlines() if "--mount=type=cache" in line]
    assert mounts and all("id=convmatrix-pip-${CACHE_ID}" in line for line in mounts)



def test_podman_builds_the_same_dockerfile_with_the_same_secrets(tmp_path: Path) -> None:
    """Issue 26, item 1: Buildah takes the same --secret and build arguments; --progress is BuildKit's."""
    ca = tmp_path / "ca.pem"
    ca.write_text("CERT")
    p = images.plan(cell(), "wheel", inputs())
    docker = images.build_command(p, tmp_path / "ctx", images.Secrets(ca=ca), "docker")
    podman = images.build_command(p, tmp_path / "ctx", images.Secrets(ca=ca), "podman", engine="podman")
    assert "--progress=plain" in docker and "--progress=plain" not in podman
    assert podman[0] == "podman" and docker[1:] == [docker[1], "--progress=plain", *podman[2:]]
    assert podman[podman.index("--secret") + 1] == f"id=ca,src={ca}"


def shipped_env(dockerfile: str, cudnn_library_path: str, base: str | None) -> str:
    """The LD_LIBRARY_PATH images/Dockerfile's ENV line gives, its ${...} forms evaluated by sh (they
    mean there what BuildKit's shell lexer makes of them: ${X:+word}, ${X:-})."""
    line = next(x for x in dockerfile.splitlines() if x.startswith("ENV LD_LIBRARY_PATH="))
    value = line.removeprefix("ENV LD_LIBRARY_PATH=")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CUDNN_LIBRARY_PATH": cudnn_library_path}
    if base is not None:
        env["LD_LIBRARY_PATH"] = base
    done = subprocess.run(["sh", "-c", f'printf %s "{value}"'], env=env, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.mark.parametrize("base", [None, "", "/usr/local/cuda/lib64:/usr/local/nvidia/lib64"])
def test_only_a_folder_the_image_has_goes_on_ld_library_path(base: str | None) -> None:
    """Issue 47: the system flavour put /opt/cell/lib/python<X>/site-packages/nvidia/cudnn/lib on
    LD_LIBRARY_PATH, a folder its image does not have (its cuDNN is the base's; with python "image",
    not even a Python's name). Only the wheel flavour's CUDA torch, or a cuDNN override, names one."""
    dockerfile = (images.IMAGES_DIR / "Dockerfile").read_text()
    assert "ARG CUDNN_LIBRARY_PATH" in dockerfile
    wheel = images.build_args(cell(), "wheel", None)["CUDNN_LIBRARY_PATH"]
    assert wheel == "/opt/cell/lib/python3.11/site-packages/nvidia/cudnn/lib"
    system = Cell(lane="container", torch="image", cuda="image", cudnn="image", python="image",
                  base="nvcr.io/nvidia/pytorch:24.10-py3", flavour="system")
    assert images.build_args(system, "system", None)["CUDNN_LIBRARY_PATH"] == ""
    assert images.build_args(cell(cuda="cpu", torch="2.13.0"), "wheel", None)["CUDNN_LIBRARY_PATH"] == ""
    overridden = Cell(lane="container", torch="image", cuda="cu124", cudnn="9.5.1.17", python="3.11",
                      base="nvcr.io/nvidia/pytorch:24.10-py3", flavour="system")
    assert images.build_args(overridden, "system", None)["CUDNN_LIBRARY_PATH"] == wheel
    # The ENV line: the named folder first, then the base's own value; nothing named, the base's alone.
    assert shipped_env(dockerfile, "", base) == (base or "")
    assert shipped_env(dockerfile, wheel, base) == wheel + (f":{base}" if base else "")
