from __future__ import annotations

import pytest

from convmatrix.matrix.cells import Cell
from convmatrix.matrix.prune import impossible


def cell(*, torch: str = "2.5.1", cuda: str = "cu124", cudnn: str = "bundled", python: str = "3.11") -> Cell:
    return Cell(lane="baremetal", torch=torch, cuda=cuda, cudnn=cudnn, python=python)


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({}, None),
        ({"cudnn": "9.5.1.17"}, None),
        ({"torch": "2.99.0"}, "not a release convmatrix knows"),
        ({"torch": "2.5.7"}, "never published (torch 2.5: 2.5.0, 2.5.1)"),
        ({"cuda": "cu126"}, "never published for cu126"),
        ({"python": "3.8"}, "no wheels for Python 3.8 (supports 3.9-3.13)"),
        ({"python": "3.14"}, "no wheels for Python 3.14"),
        ({"cudnn": "8.9.7.29"}, "major 8"),
        ({"cudnn": "9.0.0.312"}, "older than the 9.1.0.70"),
        ({"cudnn": "9.5.1.99"}, "not a published version"),
        ({"cuda": "cpu", "cudnn": "9.5.1.17"}, "cpu builds load no cuDNN"),
        ({"torch": "2.15.0", "cuda": "cu132", "python": "3.14"}, None),
    ],
)
def test_impossible(kw: dict[str, str], reason: str | None) -> None:
    got = impossible(cell(**kw))
    if reason is None:
        assert got is None
    else:
        assert got is not None and reason in got


def test_host_is_always_possible() -> None:
    assert impossible(Cell(lane="host")) is None
