from __future__ import annotations

from pathlib import Path

from convmatrix import install
from convmatrix.cells import Cell


def cell(**kw):
    values = {"lane": "baremetal", "torch": "2.5.1", "cuda": "cu124", "cudnn": "bundled", "python": "3.11"}
    values.update(kw)
    return Cell(**values)


def test_pypi_default_variant_installs_from_pypi():
    assert install.steps(cell()) == [["torch==2.5.1"], list(install.SUITE_REQUIREMENTS)]


def test_other_variant_uses_its_pytorch_index():
    first = install.steps(cell(cuda="cu121"))[0]
    assert first == ["--index-url", "https://download.pytorch.org/whl/cu121", "torch==2.5.1"]


def test_override_is_installed_last():
    plan = install.steps(cell(cudnn="9.5.1.17"))
    assert plan[-1] == ["nvidia-cudnn-cu12==9.5.1.17"]
    assert plan[0] == ["torch==2.5.1"]


def test_wheelhouse_means_no_index_anywhere(tmp_path: Path):
    plan = install.steps(cell(cuda="cu118", cudnn="9.5.1.17"), wheelhouse=tmp_path)
    for step in plan:
        assert step[:3] == ["--no-index", "--find-links", str(tmp_path)]
        assert "--index-url" not in step
    assert plan[-1][-1] == "nvidia-cudnn-cu11==9.5.1.17"
