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
pass makes the cell `disagree`, and the site shows both (docs/atlas.md).

A run is one fleet's label and run id. Two bundles that claim one run with the same records (a
nightly and a weekly export of it) give it once; with different records they are a conflict (a
forged all-pass bundle beside the real one, whichever is given first): the atlas keeps neither
copy and names the run and the bundles instead. Nothing the merge keeps depends on the order the
bundles are given in but the order of the fleets' labels."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from convmatrix.atlas import bundle as bundle_file
from convmatrix.atlas.model import Bundle, Case, Cell, Gpu, Libraries, Run, Stack
from convmatrix.atlas.sources import version_key
from convmatrix.results import libraries as audit

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
    # What its cells loaded where it differs from what they installed (libraries_line) -> its runs.
    libraries: dict[str, set[str]] = field(default_factory=dict)

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


@dataclass(frozen=True)
class Conflict:
    """A run (fleet label and run id) that bundles gave with different records: neither is kept."""

    fleet: str
    run: str
    bundles: tuple[str, ...]  # the names of the bundles that claim it, sorted, each once
    versions: int  # how many different records of it they hold

    @property
    def said(self) -> str:
        return (f"fleet {self.fleet}: run {self.run} given with different contents by {', '.join(self.bundles)}; "
                "neither is counted")


@dataclass
class Atlas:
    cells: dict[tuple[Row, Column], AtlasCell] = field(default_factory=dict)
    fleets: list[str] = field(default_factory=list)
    bundles: int = 0
    notes: list[str] = field(default_factory=list)  # what was left out of the merge, and why
    runs: dict[tuple[str, str], str] = field(default_factory=dict)  # the runs kept: (fleet, run id) -> date
    conflicts: list[Conflict] = field(default_factory=list)  # sorted by fleet and run id

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


def same(a: Run, b: Run) -> bool:
    """Whether two copies of a run hold the same records in the same order (a run exported twice):
    == over the dataclasses, fast, and each repro's fields as JSON, since == takes True for 1 there
    (the reader lets both through a repro's params and knobs; everywhere else it checks the type)."""
    if a != b:
        return False
    return all(x.repro is None or bundle_file.canonical(bundle_file.plain(x.repro))
               == bundle_file.canonical(bundle_file.plain(y.repro))
               for ca, cb in zip(a.cells, b.cells, strict=True) for x, y in zip(ca.cases, cb.cases, strict=True))


def normal(run: Run) -> tuple[str, Run]:
    """What a run says in one canonical form (its day, and its cells with their cases, as sorted
    JSON: another export of the same run may list them in another order), and the run so ordered."""
    keyed = []
    for cell in run.cells:
        cases = sorted(((bundle_file.canonical(bundle_file.plain(case)).decode(), case) for case in cell.cases),
                       key=lambda kc: kc[0])
        value = {"stack": bundle_file.plain(cell.stack), "gpu": bundle_file.plain(cell.gpu), "verdict": cell.verdict,
                 "control": cell.control, "cases": [key for key, _ in cases],
                 "libraries": bundle_file.plain(cell.libraries)}
        keyed.append((bundle_file.canonical(value).decode(),
                      Cell(stack=cell.stack, gpu=cell.gpu, verdict=cell.verdict, control=cell.control,
                           cases=tuple(case for _, case in cases), libraries=cell.libraries)))
    keyed.sort(key=lambda kc: kc[0])
    return (json.dumps([run.date, [key for key, _ in keyed]], separators=(",", ":")),
            Run(run=run.run, date=run.date, cells=tuple(cell for _, cell in keyed)))


def merge(bundles: Iterable[Bundle], names: Sequence[str] | None = None) -> Atlas:
    """The bundles in one table. A run a fleet gave twice with the same records (two exports that
    overlap: tonight's and last week's) is counted once, and said in the notes; one given with
    different records is a conflict, kept out of the table whole. names are the bundles' file names,
    for the conflicts to name them (by default each bundle's checksum)."""
    given = list(bundles)
    if names is not None and len(names) != len(given):
        raise ValueError(f"{len(names)} name(s) for {len(given)} bundle(s)")
    atlas = Atlas(bundles=len(given))
    claims: dict[tuple[str, str], list[tuple[int, Run]]] = {}
    for index, bundle in enumerate(given):
        if bundle.fleet not in atlas.fleets:
            atlas.fleets.append(bundle.fleet)
        for run in bundle.runs:
            claims.setdefault((bundle.fleet, run.run), []).append((index, run))
    kept: list[tuple[str, Run]] = []
    for (fleet, ident), copies in sorted(claims.items()):
        run = copies[0][1]
        if len(copies) > 1 and not all(same(run, copy) for _, copy in copies[1:]):
            forms = [normal(copy) for _, copy in copies]
            versions = len({form for form, _ in forms})
            if versions > 1:
                named = sorted({names[i] if names is not None else f"bundle sha256 {bundle_file.digest(given[i])[:12]}"
                                for i, _ in copies})
                atlas.conflicts.append(Conflict(fleet, ident, tuple(named), versions))
                continue
            run = forms[0][1]  # the same records listed otherwise: merged in their one order, whichever came first
        if len(copies) > 1:
            atlas.notes += [f"fleet {fleet}: run {ident} given twice; the first copy kept"] * (len(copies) - 1)
        kept.append((fleet, run))
    # Runs merged by fleet, day and id, not as given: a case page's records are in that order.
    for fleet, run in sorted(kept, key=lambda fr: (fr[0], fr[1].date, fr[1].run)):
        atlas.runs[(fleet, run.run)] = run.date
        add(atlas, fleet, run)
    atlas.runs = dict(sorted(atlas.runs.items()))
    return atlas


# A swap the bundle's cuDNN files do not show (another CUDA library's, results/libraries.kept).
OTHER_SWAP = "a CUDA library from outside the cell's packages with another version (not among its cuDNN files)"


def libraries_line(found: Libraries | None) -> str | None:
    """The report's stack line (results/libraries.stack_line, the one formatter) of what a bundle
    keeps of a cell's library audit: `cuDNN 9.4.0 (wheel) · libcudnn_cnn 9.2.1 from LD_LIBRARY_PATH`
    where what it loaded differs from what it installed; None where they agree or nothing was kept."""
    if found is None or not found.swapped:
        return None
    rows = tuple(audit.Library(name=f"{f.name}.so", family="cudnn", path="", loaded=True, version=f.version,
                               package=None, origin=f.origin) for f in found.cudnn)
    return audit.stack_line(rows) or OTHER_SWAP


def add(atlas: Atlas, fleet: str, run: Run) -> None:
    """One kept run of a fleet into the table."""
    for cell in run.cells:
        row = Row(cell.stack.torch, cell.stack.cuda, cell.stack.cudnn)
        column = Column(cell.gpu.capability, cell.gpu.mig)
        here = atlas.cells.setdefault((row, column), AtlasCell(row, column))
        tally = here.tallies.setdefault(fleet, Tally(fleet))
        tally.runs[run.run] = worse(tally.runs.get(run.run), cell_status(cell))
        tally.dates.add(run.date)
        tally.models.add(cell.gpu.model)
        line = libraries_line(cell.libraries)
        if line is not None:
            tally.libraries.setdefault(line, set()).add(run.run)
        for case in cell.cases:
            if failing(case):
                tally.families[family_of(case)] += 1
                if case.subcode is not None:
                    tally.subcodes[case.subcode] += 1
            here.cases.setdefault(case.case, []).append(Seen(
                fleet=fleet, run=run.run, date=run.date, stack=cell.stack, gpu=cell.gpu, case=case))
