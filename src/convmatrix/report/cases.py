"""Which cases a report lists, in what order: every failing, not-run or changed case, worst
verdict first (results/verdicts.ORDER), failures the control shares last; the formats list the
same ones."""

from __future__ import annotations

from collections.abc import Iterable

from convmatrix.report.model import CaseRow
from convmatrix.results.outcomes import Delta, Outcome, Verdict
from convmatrix.results.read import Explanation
from convmatrix.results.verdicts import RANK

_PLAIN = frozenset({Verdict.OK, Verdict.CONTROL, Verdict.NO_CONTROL})
# Cases a human-read report lists (html: of each cell, the noteworthy first; text: in all); the
# rest are counted in a line, and the json report lists every one. The catalogue has a few hundred
# cases, so a cell normally shows all of them; a results.jsonl of 20,000 lines (rundir.MAX_LINES)
# half failing listed whole made a page of hundreds of MB.
MAX_LISTED = 300


def more_line(left: int, what: str = "cases") -> str:
    """The line that says how many were not listed, the same in every format."""
    return f"… and {left:,} more {what} (the json report lists them all)"


def noteworthy(case: CaseRow) -> bool:
    return (case.outcome.failing or case.outcome == Outcome.MISSING or case.verdict not in _PLAIN
            or case.delta not in (None, Delta.SAME))


def listed(cases: Iterable[CaseRow]) -> list[CaseRow]:
    """The noteworthy cases, most urgent first (stable: the report's order within a rank)."""
    return sorted((c for c in cases if noteworthy(c)), key=urgency)


def urgency(case: CaseRow) -> int:
    # A reader looks for the worst first (the order of verdicts); a failure the control shares last.
    return RANK.get(case.verdict, len(RANK))


def provenance(case: CaseRow) -> str:
    """Where a failing case comes from (its own public sources), in every format. Not a claim that
    this failure is known upstream: only a known-issues entry the failure matches says that
    (`known: … [matched: …]`), since a source describes its own failure, not every failure of the
    cases it inspired."""
    return "case from: " + " ".join(case.sources)


def explained(case: CaseRow) -> str | None:
    """The one line every format shows for a failing case that --explain re-ran: what cuDNN said
    (its status, sub-code and meaning, whether the GPU or the software is the cause, its reason),
    the backend PyTorch chose and by which path, and how the case ran without cuDNN."""
    found = case.explained
    if found is None or not case.outcome.failing:
        return None
    return explanation_line(found)


def first_difference(case: CaseRow) -> str | None:
    """The one line every format shows: the first line of the case's log the control's lacks."""
    if case.first_diff is None:
        return None
    return f"first line the control's log lacks (log.txt:{case.first_diff.line}): {case.first_diff.text.strip()}"


def explanation_line(found: Explanation) -> str:
    parts = []
    if found.status:
        code = f"{found.subcode}: " if found.subcode is not None else ""
        meaning = f" ({code}{found.meaning}{'; ' + found.cause if found.cause else ''})" if found.meaning else ""
        where = f" in {found.function}()" if found.function else ""
        parts.append(f"cuDNN said {found.status}{meaning}{where}" + (f": {found.reason}" if found.reason else ""))
    else:
        parts.append(_no_failure(found))
    if found.backend:
        path = f" ({found.cudnn_path.upper()})" if found.cudnn_path else ""
        parts.append(f"backend {found.backend}{path}")
    if found.cudnn_off:
        parts.append(f"without cuDNN: {found.cudnn_off}" + (", so cuDNN's path is the cause"
                                                            if found.cudnn_is_the_cause else ""))
    if found.log:
        parts.append(f"log {found.log}")
    return "explained: " + "; ".join(parts)


def _no_failure(found: Explanation) -> str:
    if not found.log:
        return "cuDNN wrote no log"
    if found.last_operation:
        # A kernel cuDNN queued faults later (asynchronously, after its call returned): name the work
        # it queued last. The log is read from its end, so a count of calls would be a part's count.
        return f"cuDNN's log names no failure; the last plan it executed: {found.last_operation}"
    return "cuDNN's log names no failure"


# The parameters a case view shows, in this order: what the conv is, then how it ran.
_SHOWN = ("op", "n", "c_in", "c_out", "size", "kernel", "stride", "padding", "dilation", "groups", "output_padding",
          "bias", "dtype", "autocast", "memory_format", "layout", "input_strides", "storage_offset",
          "weight_memory_format", "direction", "benchmark", "deterministic", "tf32", "via", "edge")


def parameters(case: CaseRow) -> str | None:
    """The case's parameters as one line (`op=conv2d n=2 c_in=8 ...`), so what failed can be read
    without the suite; fields at their defaults or null are left out."""
    params = case.params
    if not params:
        return None
    quiet = {"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "output_padding": 0, "bias": True,
             "storage_offset": 0}
    shown = []
    for key in _SHOWN:
        value = params.get(key)
        if value is None or (key in quiet and quiet[key] == value and type(value) is type(quiet[key])):
            continue
        shown.append(f"{key}={_value(value)}")
    return "parameters: " + " ".join(shown) if shown else None


# A results line is untrusted: its params are what it says (an input_strides of 200,000 numbers, a
# list in a list, a page of text), so each value shows at most SHOWN_ITEMS numbers and SHOWN_CHARS
# characters (the json report keeps the line's params as they are, JSON-escaped).
SHOWN_ITEMS = 8  # a conv's input has 5 dimensions at most
SHOWN_CHARS = 80


def _value(value: object) -> str:
    """One parameter's value in a few characters: a list of numbers as 2x8x6x6, anything else in
    a list as `?` (no nesting is walked), cut to SHOWN_CHARS."""
    if isinstance(value, list):
        items = ["?" if isinstance(v, list | dict) else str(v) for v in value[:SHOWN_ITEMS]]
        text = "x".join(items) + ("x..." if len(value) > SHOWN_ITEMS else "")
    else:
        text = str(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."
