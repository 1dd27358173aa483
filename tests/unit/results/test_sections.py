"""Each case's section of a log (results/sections.py): its -v line, its failure block, its session."""

from __future__ import annotations

from convmatrix.results import sections

LOG = """============================= test session starts ==============================
suites/test_conv.py::test_conv[a] FAILED [ 50%]
suites/test_conv.py::test_conv[b-x] PASSED [100%]
=================================== FAILURES ===================================
_________________________ test_conv[a] _________________________
E   RuntimeError: boom
----------------------------- Captured stderr call -----------------------------
cudnn says no
_________________________ test_other _________________________
E   AssertionError
=========================== short test summary info ============================
FAILED suites/test_conv.py::test_conv[a] - RuntimeError: boom
======================= 1 failed, 1 passed in 0.85s =======================
"""


def test_a_case_starts_at_its_v_line_and_its_block_ends_at_the_next_header() -> None:
    found = sections.sections(LOG.splitlines(keepends=True))
    assert found["a"].started == 2 and found["a"].block == (5, 8)
    assert found["b-x"].started == 3 and found["b-x"].block is None
    assert found["a"].ended == found["b-x"].ended == 13
    assert set(found) == {"a", "b-x"}  # the summary's FAILED line starts nothing


def test_only_the_cases_asked_for_and_crlf_lines() -> None:
    found = sections.sections(LOG.replace("\n", "\r\n").splitlines(keepends=True), ["a"])
    assert set(found) == {"a"} and found["a"].block == (5, 8)


def test_a_block_at_the_end_of_a_cut_log_ends_there() -> None:
    found = sections.sections(LOG.splitlines()[:7])
    assert found["a"].block == (5, 7)
