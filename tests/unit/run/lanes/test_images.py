from __future__ import annotations

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
