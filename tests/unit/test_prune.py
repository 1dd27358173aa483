from __future__ import annotations

import pytest

from convmatrix.cells import Cell
from convmatrix.prune import impossible


def cell(**kw):
    values = {"lane": "baremetal", "torch": "2.5.1", "cuda": "cu124", "cudnn": "bundled", "python": "3.11"}
    values.update(kw)
    return Cell(**values)


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
def test_impossible(kw, reason):
    got = impossible(cell(**kw))
    if reason is None:
        assert got is None
    else:
        assert got is not None and reason in got


def test_host_is_always_possible():
    assert impossible(Cell(lane="host")) is None
