"""Many fleets' bundles merged into one table: rows are stacks (torch x CUDA x cuDNN, as the cells
observed them), columns GPU generations (a MIG profile a column of its own under its GPU's
generation), and each cell of the table keeps every fleet's runs apart.

What a run says of a stack on a GPU is absolute, not against its fleet's control (each fleet has
its own control, so "ok" in one and "ok" in another need not mean the same): the run **failed**
there when a case failed (outcome fail, crash or timeout, other than a driver too old for the
stack, which is the runner's fact: verdict `unsupported`), **passed** when the cell ran and no
case failed, and is **other** when the cell never ran or did not complete (`invalid`, `not-run`,
`unsupported`). Each case keeps its one verdict for the pages.

Disagreement is kept, never averaged away: a fleet whose runs all fail beside one whose runs all
pass makes the cell `disagree`, and the site shows both (docs/atlas.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from convmatrix.atlas.model import Bundle, Case, Cell, Gpu, Stack
from convmatrix.atlas.sources import version_key

FAIL, PASS, OTHER = "fail", "pass", "other"
DISAGREE, FLAKY = "disagree", "flaky"  # a cell's status beside FAIL, PASS, OTHER
# A cell that never ran, or did not complete: it says nothing of the stack (results/outcomes.Verdict).
NOT_RAN = frozenset({"invalid", "not-run", "unsupported"})
FAILING_OUTCOMES = frozenset({"fail", "crash", "timeout"})
UNCLASSIFIED = "unclassified"  # a failing case without a family


@dataclass(frozen=True)
class Row:
    """A stack as a row of the table: what torch, CUDA and cuDNN the cells observed."""

    torch: str | None
    cuda: str | None
    cudnn: str | None

    @property
    def label(self) -> str:
        return f"torch {self.torch or '?'} · CUDA {self.cuda or 'none'} · cuDNN {self.cudnn or 'none'}"

    def sort_key(self) -> tuple[int, int, int, str]:
        return (version_key(self.torch) or -1, version_key(self.cuda) or -1, version_key(self.cudnn) or -1,
                f"{self.torch}|{self.cuda}|{self.cudnn}")


@dataclass(frozen=True)
class Column:
    """A GPU generation (by compute capability), or a MIG profile under it."""

    capability: str
    mig: str | None = None

    @property
    def generation(self) -> str:
        return "sm" + self.capability.replace(".", "")

    @property
    def key(self) -> str:
        return f"{self.generation} {self.mig}" if self.mig else self.generation

    def sort_key(self) -> tuple[int, str]:
        return version_key(self.capability) or -1, self.mig or ""


@dataclass(frozen=True, kw_only=True)
class Seen:
    """One case of one cell of one run: what a case page lists."""

    fleet: str
    run: str
    date: str
    stack: Stack
    gpu: Gpu
    case: Case

    @property
    def failing(self) -> bool:
        return failing(self.case)


@dataclass
class Tally:
    """One fleet's runs of one stack on one column."""

    fleet: str
    runs: dict[str, str] = field(default_factory=dict)  # run id -> FAIL, PASS or OTHER
    families: Counter[str] = field(default_factory=Counter)  # failing cases by family
    subcodes: Counter[int] = field(default_factory=Counter)
    dates: set[str] = field(default_factory=set)
    models: set[str] = field(default_factory=set)  # the GPU models it ran on

    def count(self, status: str) -> int:
        return sum(1 for s in self.runs.values() if s == status)

    @property
    def status(self) -> str:
        """FAIL when its runs that ran all failed, PASS when they all passed, FLAKY for both, OTHER for none."""
        failed, passed = self.count(FAIL), self.count(PASS)
        return FLAKY if failed and passed else FAIL if failed else PASS if passed else OTHER

    @property
    def first(self) -> str:
        return min(self.dates, default="")

    @property
    def last(self) -> str:
        return max(self.dates, default="")


@dataclass
class AtlasCell:
    row: Row
    column: Column
    tallies: dict[str, Tally] = field(default_factory=dict)  # by fleet
    cases: dict[str, list[Seen]] = field(default_factory=dict)  # by case id

    @property
    def status(self) -> str:
        """The fleets' statuses kept apart: DISAGREE when one fleet fails where another passes."""
        statuses = {t.status for t in self.tallies.values()} - {OTHER}
        if not statuses:
            return OTHER
        if len(statuses) > 1:
            return DISAGREE
        return statuses.pop()

    @property
    def disagree(self) -> bool:
        return self.status == DISAGREE

    def runs(self, status: str) -> int:
        return sum(t.count(status) for t in self.tallies.values())

    @property
    def families(self) -> Counter[str]:
        return sum((t.families for t in self.tallies.values()), Counter())

    @property
    def subcodes(self) -> Counter[int]:
        return sum((t.subcodes for t in self.tallies.values()), Counter())

    @property
    def first(self) -> str:
        return min((t.first for t in self.tallies.values() if t.first), default="")

    @property
    def last(self) -> str:
        return max((t.last for t in self.tallies.values()), default="")

    def failing_cases(self, family: str) -> dict[str, list[Seen]]:
        """The cases that failed with this family in some run, each with every run's record of it
        (passing ones too: another fleet passing it stands beside the failure)."""
        return {case: seen for case, seen in sorted(self.cases.items())
                if any(s.failing and family_of(s.case) == family for s in seen)}


@dataclass
class Atlas:
    cells: dict[tuple[Row, Column], AtlasCell] = field(default_factory=dict)
    fleets: list[str] = field(default_factory=list)
    bundles: int = 0
    notes: list[str] = field(default_factory=list)  # what was left out of the merge, and why

    @property
    def rows(self) -> list[Row]:
        return sorted({row for row, _ in self.cells}, key=Row.sort_key)

    @property
    def columns(self) -> list[Column]:
        return sorted({column for _, column in self.cells}, key=Column.sort_key)


def failing(case: Case) -> bool:
    """A case that says the stack fails here: it failed, and not for want of a newer driver."""
    return case.outcome in FAILING_OUTCOMES and case.verdict != "unsupported"


def family_of(case: Case) -> str:
    return case.family or UNCLASSIFIED


def cell_status(cell: Cell) -> str:
    if any(failing(case) for case in cell.cases):
        return FAIL
    return OTHER if cell.verdict in NOT_RAN else PASS


def worse(a: str | None, b: str) -> str:
    """Two cells of one run on one stack and column (two lanes, two knob sets): a failure in
    either is the run's failure there."""
    order = {FAIL: 0, PASS: 1, OTHER: 2}
    return b if a is None or order[b] < order[a] else a


def merge(bundles: Iterable[Bundle]) -> Atlas:
    """The bundles in one table. A run a fleet gave twice (two exports that overlap: tonight's
    and last week's) is counted once, the first copy kept, and said in the notes."""
    atlas = Atlas()
    seen_runs: set[tuple[str, str]] = set()
    for bundle in bundles:
        atlas.bundles += 1
        if bundle.fleet not in atlas.fleets:
            atlas.fleets.append(bundle.fleet)
        for run in bundle.runs:
            if (bundle.fleet, run.run) in seen_runs:
                atlas.notes.append(f"fleet {bundle.fleet}: run {run.run} given twice; the first copy kept")
                continue
            seen_runs.add((bundle.fleet, run.run))
            for cell in run.cells:
                row = Row(cell.stack.torch, cell.stack.cuda, cell.stack.cudnn)
                column = Column(cell.gpu.capability, cell.gpu.mig)
                here = atlas.cells.setdefault((row, column), AtlasCell(row, column))
                tally = here.tallies.setdefault(bundle.fleet, Tally(bundle.fleet))
                tally.runs[run.run] = worse(tally.runs.get(run.run), cell_status(cell))
                tally.dates.add(run.date)
                tally.models.add(cell.gpu.model)
                for case in cell.cases:
                    if failing(case):
                        tally.families[family_of(case)] += 1
                        if case.subcode is not None:
                            tally.subcodes[case.subcode] += 1
                    here.cases.setdefault(case.case, []).append(Seen(
                        fleet=bundle.fleet, run=run.run, date=run.date, stack=cell.stack, gpu=cell.gpu, case=case))
    return atlas
