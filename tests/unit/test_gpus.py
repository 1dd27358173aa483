from __future__ import annotations

import pytest

from convmatrix import gpus

SMI = """0, NVIDIA H200, 9.0, 143771
1, NVIDIA GeForce RTX 4090, 8.9, 24564
"""


def test_parse_smi_and_keys() -> None:
    found = gpus.parse_smi(SMI)
    assert [g.key for g in found] == ["h200-sm90", "geforce-rtx-4090-sm89"]
    assert [g.generation for g in found] == ["Hopper", "Ada"]
    assert found[0].memory_mb == 143771


def test_select() -> None:
    found = gpus.parse_smi(SMI)
    assert gpus.select(found, None) == found
    assert [g.index for g in gpus.select(found, "1")] == [1]
    assert gpus.select(found, "7") == []


def test_discover_without_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("convmatrix.gpus.shutil.which", lambda name: None)
    assert gpus.discover() == []
