from __future__ import annotations

from convmatrix.matrix.cells import Cell
from convmatrix.results.stackcheck import mismatches


def test_override_expectation_and_match() -> None:
    cell = Cell(lane="baremetal", torch="2.5.1", cuda="cu124", cudnn="9.5.1.17", python="3.11")
    assert cell.expected() == {"torch": "2.5.1", "cuda": "12.4", "cudnn": 90501}
    assert mismatches(cell.expected(), {"torch": "2.5.1+cu124", "cuda": "12.4", "cudnn": 90501}) == []


def test_bundled_expectation_and_mismatch() -> None:
    cell = Cell(lane="baremetal", torch="2.5.1", cuda="cu124", cudnn="bundled", python="3.11")
    problems = mismatches(cell.expected(), {"torch": "2.4.0+cpu", "cuda": None, "cudnn": 90501})
    assert problems == [
        "torch: requested 2.5.1, observed 2.4.0+cpu",
        "cuda: requested 12.4, observed None",
        "cudnn: requested 90100, observed 90501",
    ]


def test_cudnn_error_is_shown_as_observed() -> None:
    cell = Cell(lane="baremetal", torch="2.5.1", cuda="cu124", cudnn="bundled", python="3.11")
    obs = {"torch": "2.5.1", "cuda": "12.4", "cudnn": None, "cudnn_error": "cuDNN version incompatibility"}
    assert mismatches(cell.expected(), obs) == ["cudnn: requested 90100, observed cuDNN version incompatibility"]


def test_host_and_unknown_pins_are_not_checked() -> None:
    assert mismatches(Cell(lane="host").expected(), {"torch": "anything"}) == []
    unknown = Cell(lane="baremetal", torch="2.11.0", cuda="cu128", cudnn="bundled", python="3.11")
    assert mismatches(unknown.expected(), {"torch": "2.11.0", "cuda": "12.8", "cudnn": 91900}) == []
