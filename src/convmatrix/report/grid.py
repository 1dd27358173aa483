"""The matrix grid that the html, markdown and text reports share: stacks as rows, grouped by
torch and CUDA with cuDNN (and knobs) as sub-rows, GPU generations as columns, one cell result
at each crossing. Ids are abbreviated one way (matrix.cells.abbreviate), so that every format and
the live progress line name a stack the same way."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from convmatrix.matrix.cells import abbreviate
from convmatrix.matrix.values import IMAGE
from convmatrix.report.model import CellRow, Report
from convmatrix.results.outcomes import Outcome, Verdict

SHOUTED = (Verdict.REGRESSION, Verdict.INVALID, Verdict.NOT_RUN)
# Case verdicts a summary need not count: the plain ones, and those every case of a cell shares.
QUIET_CASES = frozenset({Verdict.OK, Verdict.CONTROL, Verdict.NO_CONTROL, Verdict.INVALID})
# Axes that tell sub-rows of one torch/CUDA group apart when they vary across the report.
_EXTRA_AXES = ("lane", "python", "base", "flavour")
_QUIET_KNOBS = frozenset({"device"})  # the same for every cell on a GPU: never a sub-row's name


@dataclass(frozen=True, kw_only=True)
class Column:
    key: str  # the GPU key: h200-sm90, cpu
    generation: str
    name: str
    capability: str | None = None  # "9.0", as the cell recorded it (else read from the key's -smNN)

    @property
    def header(self) -> str:
        return self.key if self.key == "cpu" else f"{self.generation} {self.key}"


@dataclass(frozen=True, kw_only=True)
class Row:
    cell: str  # the full cell id
    short: str  # abbreviate(cell)
    label: str  # the sub-row: cuDNN, and whatever else tells it from the other rows
    control: bool


@dataclass(frozen=True, kw_only=True)
class Group:
    title: str  # "torch 2.5.1 · cu124"
    rows: tuple[Row, ...]


@dataclass(frozen=True, kw_only=True)
class Mark:
    code: str  # its letter in the text grid's legend
    words: str  # what the markdown and html grids say


@dataclass(frozen=True, kw_only=True)
class Tally:
    passed: int
    skipped: int
    failed: int  # failed, crashed or timed out (by family)
    missing: int
    total: int


@dataclass(frozen=True, kw_only=True)
class Grid:
    columns: tuple[Column, ...]
    groups: tuple[Group, ...]
    entries: Mapping[tuple[str, str], CellRow]  # (cell id, GPU key) -> its result

    def entry(self, row: Row, column: Column) -> CellRow | None:
        return self.entries.get((row.cell, column.key))

    @property
    def rows(self) -> tuple[Row, ...]:
        return tuple(row for group in self.groups for row in group.rows)


def build(report: Report) -> Grid:
    columns: dict[str, Column] = {}
    for c in report.cells:  # a cell that recorded its GPU's capability names it for the column
        if c.gpu.key not in columns or (c.gpu.capability and not columns[c.gpu.key].capability):
            columns[c.gpu.key] = Column(key=c.gpu.key, generation=c.gpu.generation, name=c.gpu.name,
                                        capability=c.gpu.capability)
    first = {c.cell: c for c in reversed(report.cells)}  # one CellRow per stack, for its requested axes
    knobs = cell_knobs(report)
    members: dict[str, list[CellRow]] = {}
    for cell in first.values():
        members.setdefault(group_title(cell), []).append(cell)
    grouped: dict[str, list[Row]] = {}
    for title, cells in members.items():
        axes, shown_knobs = telling(cells, knobs)
        for cell in cells:
            label = sub_label(cell, axes, {k: v for k, v in knobs[cell.cell].items() if k in shown_knobs})
            grouped.setdefault(title, []).append(
                Row(cell=cell.cell, short=abbreviate(cell.cell), label=label, control=cell.cell == report.control))
    groups = [Group(title=title, rows=tuple(sorted(rows, key=row_order))) for title, rows
              in sorted(grouped.items(), key=lambda item: natural(item[0]))]
    return Grid(columns=tuple(sorted(columns.values(), key=column_order)), groups=tuple(groups),
                entries={(c.cell, c.gpu.key): c for c in report.cells})


_SM = re.compile(r"-sm([0-9]{2,3})(?:-|$)")
_SLICE = re.compile(r"-mig(?:[0-9]+c-)?[0-9]+g-([0-9]+)gb")
_MEMORY = re.compile(r"([0-9]+)\s*GB", re.IGNORECASE)


def column_order(column: Column) -> tuple[bool, tuple[int, ...], int, tuple[tuple[int, int | str], ...]]:
    """GPU columns by generation: compute capability (8.0 Ampere, 8.9 Ada, 9.0 Hopper, 10.0
    Blackwell), then memory (a MIG slice's from its profile, a whole GPU's from its name), then
    the key; the CPU last. A key's name sorted Blackwell before Hopper and Ada."""
    capability: tuple[int, ...] = ()
    if column.capability and re.fullmatch(r"[0-9]{1,2}\.[0-9]{1,2}", column.capability):
        capability = tuple(int(p) for p in column.capability.split("."))
    elif sm := _SM.search(column.key):
        capability = (int(sm.group(1)[:-1]), int(sm.group(1)[-1]))
    memory = _SLICE.search(column.key) or _MEMORY.search(column.name)
    # Memory not named (NVIDIA L4, NVIDIA H200) goes after the named of its capability.
    size = int(memory.group(1)) if memory else 1 << 20
    return column.key == "cpu" or not capability, capability, size, natural(column.key)


def finding(cell: CellRow) -> bool:
    """A cell to look at: red, or not plainly fine (another verdict than control or ok, or a mark)."""
    return cell.verdict not in (Verdict.CONTROL, Verdict.OK) or bool(marks(cell))


@dataclass(frozen=True, kw_only=True)
class Look:
    """One line of the cells to look at: a stack and the GPUs (in column order) on which it said
    the same thing (a stack that failed to build on four GPUs is one line, not four)."""

    cell: str
    rows: tuple[CellRow, ...]
    words: str  # its summary, the GPU's key said <gpu> where it names one of several
    # The image as shipped loads other libraries than the cell as it ran (CellRow.shipped_line): a
    # line of its own, after the verdicts' lines, whatever the cell's verdict (it judges nothing).
    shipped: bool = False

    @property
    def gpus(self) -> str:
        return ", ".join(r.gpu.key for r in self.rows)

    @property
    def where(self) -> str:
        return self.rows[0].where if len(self.rows) == 1 else f"{self.cell} on {self.gpus}"


def look(report: Report) -> list[Look]:
    """The cells to look at, a stack's identical lines across GPUs as one: red ones first, then
    the other findings, each in the report's order."""
    order = {c.key: n for n, c in enumerate(sorted(
        {c.gpu.key: Column(key=c.gpu.key, generation=c.gpu.generation, name=c.gpu.name, capability=c.gpu.capability)
         for c in report.cells}.values(), key=column_order))}
    shared: dict[tuple[str, str], list[CellRow]] = {}
    for cell in report.cells:
        if finding(cell):
            shared.setdefault((cell.cell, summary(cell).replace(cell.gpu.key, "<gpu>")), []).append(cell)
    shipped: dict[tuple[str, str], list[CellRow]] = {}
    for cell in report.cells:
        if cell.shipped_line:
            shipped.setdefault((cell.cell, cell.shipped_line), []).append(cell)
    found = []
    for (name, words), rows in shared.items():
        rows.sort(key=lambda r: order[r.gpu.key])
        found.append(Look(cell=name, rows=tuple(rows), words=summary(rows[0]) if len(rows) == 1 else words))
    found.sort(key=lambda line: not any(report.red(r) for r in line.rows))
    for (name, words), rows in shipped.items():
        rows.sort(key=lambda r: order[r.gpu.key])
        found.append(Look(cell=name, rows=tuple(rows), words=words, shipped=True))
    return found


def group_title(cell: CellRow) -> str:
    torch, cuda = cell.stack.get("torch"), cell.stack.get("cuda")
    if torch and cuda and IMAGE not in (torch, cuda):
        return f"torch {torch} · {cuda}"
    lane = cell.stack.get("lane") or cell.lane
    seen = cell.observed.get("torch")
    # No requested torch (the host lane, a direct suite run, a system base's own): grouped by what
    # the suite saw.
    return f"{lane or 'direct'} · torch {seen} (observed)" if seen else f"{lane or 'direct'} · (not observed)"


def telling(cells: list[CellRow], knobs: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], set[str]]:
    """The fewest axes and knobs, beside cuDNN, that tell a group's rows apart, taken in the order
    of _EXTRA_AXES then the knobs' names: a label names what distinguishes its row within its
    group and no more (a fleet's labels listed every axis that varied anywhere and were cut). The
    full stack is the row's cell id, which every format shows beside or over the label."""
    def key(cell: CellRow, axes: list[str], names: set[str]) -> tuple[str, ...]:
        return (str(cell.stack.get("cudnn") or ""), *(str(cell.stack.get(a) or "") for a in axes),
                *(repr(knobs[cell.cell].get(k)) for k in sorted(names)))

    axes: list[str] = []
    names: set[str] = set()
    candidates = [*((a, None) for a in _EXTRA_AXES if len({str(c.stack.get(a) or "") for c in cells}) > 1),
                  *((None, k) for k in sorted(varying([knobs[c.cell] for c in cells])))]
    for axis, knob in candidates:
        if len({key(c, axes, names) for c in cells}) == len(cells):
            break
        if axis is not None:
            axes.append(axis)
        elif knob is not None:
            names.add(knob)
    return axes, names


def sub_label(cell: CellRow, axes: Iterable[str], knobs: Mapping[str, Any]) -> str:
    cudnn = cell.stack.get("cudnn")
    if not cudnn:
        return abbreviate(cell.cell)  # no matrix axes to name it by (host lane, direct run): its id
    if cudnn == IMAGE:  # a system base's own cuDNN, named by what the suite saw, and the base always
        # No env.json (the base was never pulled, the build failed): nothing was seen, not "none".
        seen = cell.observed.get("cudnn")
        parts = [f"cuDNN {seen or 'none'} (observed)" if "cudnn" in cell.observed else "cuDNN (not observed)"]
        axes = ["base", *(a for a in axes if a != "base")]
    else:
        parts = [f"cuDNN {cudnn}"]
    parts += [str(cell.stack[a]) for a in axes if cell.stack.get(a)]
    parts += [f"{k}={v}" for k, v in sorted(knobs.items())]
    return " · ".join(parts)


def cell_knobs(report: Report) -> dict[str, dict[str, Any]]:
    """Per stack, the knob values every one of its cases ran with (a suite option such as
    --cudnn-benchmark on applies to the whole run)."""
    common: dict[str, dict[str, Any]] = {c.cell: {} for c in report.cells}
    started: set[str] = set()
    for case in report.cases:
        items = {k: v for k, v in case.knobs.items() if k not in _QUIET_KNOBS}
        if case.outcome == Outcome.MISSING:
            continue
        if case.cell not in started:
            common[case.cell] = dict(items)
            started.add(case.cell)
        else:
            common[case.cell] = {k: v for k, v in common[case.cell].items() if items.get(k) == v}
    return common


def varying(knob_sets: Iterable[Mapping[str, Any]]) -> set[str]:
    """The knobs whose values differ between stacks that recorded them: only those name a
    sub-row. A stack that recorded no value (it never ran a case: an install that failed) makes
    nothing vary; counting its absence named every knob on every row of a fleet's grid."""
    sets = list(knob_sets)
    names = {k for s in sets for k in s}
    return {k for k in names if len({repr(s[k]) for s in sets if k in s}) > 1}


def row_order(row: Row) -> tuple[bool, tuple[tuple[int, int | str], ...]]:
    """The wheel's own cuDNN (bundled) first in its group, then overrides by version."""
    return "cuDNN bundled" not in row.label, natural(row.label)


def natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders 2.10 after 2.9 and cu128 after cu126."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text) if p)


def tally(cell: CellRow) -> Tally:
    counts = dict(cell.counts)
    passed, skipped, missing = (counts.pop(str(o), 0) for o in (Outcome.PASS, Outcome.SKIP, Outcome.MISSING))
    failed = sum(counts.values())
    return Tally(passed=passed, skipped=skipped, failed=failed, missing=missing,
                 total=passed + skipped + failed + missing)


def marks(cell: CellRow) -> tuple[Mark, ...]:
    """What the grid flags beside a cell's verdict, most telling first."""
    found = []
    if cell.signature:
        found.append(Mark(code="S", words="SIGNATURE"))
    elif cell.warning_signature:
        found.append(Mark(code="w", words="(signature in warnings only)"))
    if cell.stack_mismatch:
        found.append(Mark(code="M", words="STACK MISMATCH"))
    if cell.baseline_regressions:
        found.append(Mark(code=f"B{cell.baseline_regressions}", words=f"+{cell.baseline_regressions} since baseline"))
    return tuple(found)


def summary(cell: CellRow) -> str:
    """One matrix entry in words: the verdict, the pass count, each failure family with its count
    (a cell that did not run: why)."""
    if cell.did_not_run:
        return f"{cell_word(cell)}: {did_not_run(cell)}"
    if cell.not_run is not None:
        return f"{cell_word(cell)}: {cell.not_run or 'no result'}"
    if cell.refused:
        return f"UNSUPPORTED ({cell.unsupported})"
    counts = dict(cell.counts)
    passed = counts.pop(Outcome.PASS, 0)
    skipped = counts.pop(Outcome.SKIP, 0)
    parts = [f"{passed} pass" + (f", {skipped} skip" if skipped else "")]
    parts += [f"{family}×{n}" for family, n in counts.items()]
    # The cases' own verdicts that are not plainly ok, worst first: where the cell's comes from.
    parts += [f"{n} case(s) {verdict_word(Verdict(v))}" for v, n in cell.verdicts.items() if v not in QUIET_CASES]
    parts += [m.words for m in marks(cell)]
    if cell.verdict == Verdict.UNSUPPORTED:
        return f"UNSUPPORTED ({cell.unsupported}): {', '.join(parts)}"
    # A worse verdict than unsupported still says why some of its cases could not run here.
    parts += [f"unsupported: {cell.unsupported}"] if cell.verdicts.get(Verdict.UNSUPPORTED) else []
    return f"{verdict_word(cell.verdict)}: {', '.join(parts)}"


def did_not_run(cell: CellRow) -> str:
    """A cell that ran no case for a cause of the infrastructure, in one line: the cause, the first
    decisive line of its log and the log's path, and how many cases it owed (never listed one by one)."""
    assert cell.infra_cause is not None
    owed = f"; owed {cell.owed} case(s)" if cell.owed else ""
    # A cell not tried (what it needs was found down by another) says so, and whose line it shows.
    head = cell.not_run if cell.not_run and cell.not_run.startswith("not tried") else "did not run"
    return f"{head}: {cell.infra_cause.words()}{owed}"


def verdict_word(verdict: Verdict) -> str:
    if verdict == Verdict.NOT_RUN:
        return "NOT RUN"
    if verdict == Verdict.UNSUPPORTED:
        return "UNSUPPORTED"
    if verdict == Verdict.DECLARED_SKIP:
        return "declared skip"
    return verdict.upper() if verdict in SHOUTED else str(verdict)


def cell_word(cell: CellRow) -> str:
    """A cell's verdict in words; an optional cell that did not run is said quietly: it fails nothing."""
    if quiet(cell):
        return "not run (optional)"
    return verdict_word(cell.verdict)


def quiet(cell: CellRow) -> bool:
    """Shown greyed: an optional cell that did not run."""
    return cell.verdict == Verdict.NOT_RUN and cell.excused
