"""The report as typed data, built from cell results: every cell and case compared with the
control on the same GPU. The renderers read it; report_json turns it into the versioned report
JSON of docs/contracts.md, the only place it becomes dicts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from convmatrix.history.marks import Mark, Marks
from convmatrix.report import verdicts
from convmatrix.results import families as classify
from convmatrix.results import known, libraries, night
from convmatrix.results.first_diff import Difference
from convmatrix.results.infra import Attempt, RootCause
from convmatrix.results.libraries import Library
from convmatrix.results.outcomes import FAILING, Delta, Outcome, Verdict
from convmatrix.results.read import Case, CellResult, Explanation, FirstCause, Loaded
from convmatrix.results.verdicts import COSTS, ORDER, OUTSIDE, Cost

REPORT_SCHEMA = 1
OBSERVED_KEYS = ("torch", "cuda", "cudnn", "cudnn_error", "python", "driver", "device", "hostname", "image_id",
                 "suite_version")


@dataclass(frozen=True, kw_only=True)
class Rerun:
    """A case's CUDA_LAUNCH_BLOCKING=1 re-run."""

    outcome: Outcome
    family: str | None
    message: str | None


# A fleet's report holds 200,000 of these: slots, not frozen, not keyword-only, for the reasons
# results.Case gives. case_rows passes the fields in order; every other caller names them.
@dataclass(slots=True)
class CaseRow:
    cell: str
    gpu: str  # the GPU key
    case: str
    knobs: Mapping[str, Any]
    outcome: Outcome
    family: str | None
    message: str | None
    warnings: tuple[str, ...]  # families of the warnings a case raised (a passing case keeps them)
    control_outcome: Outcome | None
    delta: Delta | None  # None on the control itself, or with no control to compare with
    evidence: str | None = None
    blocking: Rerun | None = None
    forward_ms: float | None = None
    slowdown: float | None = None
    fingerprint_changed: bool | None = None
    baseline_outcome: Outcome | None = None  # with --baseline: the same case in the earlier run
    baseline_delta: Delta | None = None
    timed: float | None = None  # its time against the control's beyond their noise (verdicts.timed_ratio)
    sources: tuple[str, ...] = ()  # public reports the case comes from ("case from"), when it fails
    explained: Explanation | None = None  # --explain: cuDNN's own reason (results.read.Explanation)
    first_diff: Difference | None = None  # the first line of its log section the control's lacks
    known: tuple[str, ...] = ()  # known upstream issues a failing case matches (results/known.py), annotated
    params: Mapping[str, Any] = field(default_factory=dict)  # the case's parameters (its results line's params)
    # Its place in the one order of outcomes (results/verdicts.py); control or no-control outside it.
    verdict: Verdict = Verdict.NO_CONTROL
    declared: str | None = None  # the reason of the [[expected_skip]] that declared its skip
    duration_s: float | None = None  # its wall time (results.jsonl duration_s), for the history
    history: Mark | None = None  # with --history: first-red, recurring, recovered or flaky (history/marks.py)
    unjudged: night.Unjudged | None = None  # why the night could not judge it (None: judged)
    cost: Cost | None = None  # passed on both: its backends, memory and time against the control's (the night's)

    @property
    def where(self) -> str:
        return f"{self.cell}@{self.gpu}"


@dataclass(frozen=True, kw_only=True)
class GpuInfo:
    key: str
    name: str
    capability: str | None
    generation: str


@dataclass(frozen=True, kw_only=True)
class CellRow:
    cell: str
    gpu: GpuInfo  # its key is the cell's place: the GPU key, `<gpu-key>@<host>` in a report of several hosts
    host: str | None = None  # the machine that ran it (None: not recorded)
    lane: str
    path: str
    stack: Mapping[str, Any]  # what the cell requested
    observed: Mapping[str, Any]  # what the suite saw (env.json)
    mismatches: tuple[str, ...]
    problems: tuple[str, ...]
    counts: Mapping[str, int]  # outcome or family -> cases
    signature: bool
    warning_signature: bool
    first_cause: FirstCause | None
    regressions: int
    fixed: int
    slowdown: float | None
    fingerprint_changed: int
    verdict: Verdict
    baseline_regressions: int | None = None
    optional: bool = False  # the matrix marked the cell optional (a not-run fails nothing)
    not_run: str | None = None  # why it did not run (verdict not-run)
    unsupported: str | None = None  # why this runner cannot run it (verdict unsupported)
    verdicts: Mapping[str, int] = field(default_factory=dict)  # case verdict -> cases, worst first
    infra_cause: RootCause | None = None  # why it could not install, build, start or finish (results/infra.py)
    owed: int | None = None  # a cell that did not run: the cases its control ran, which it owed
    attempts: tuple[Attempt, ...] = ()  # --retries: its earlier attempts (this row is the last)
    history: Mark | None = None  # with --history: the cell's own mark (history/marks.py)
    unjudged: night.Unjudged | None = None  # why the night could not judge it (None: judged)
    libraries: tuple[Library, ...] = ()  # the library audit's table (results/libraries.py)
    libraries_line: str | None = None  # what was loaded from where, when it differs from what was installed
    # The image as shipped (without the harness's LD_LIBRARY_PATH), when it loads other libraries
    # than the cell as it ran: shown in Cells to look at, never judged (results/libraries.shipped_line).
    shipped_line: str | None = None

    @property
    def where(self) -> str:
        return f"{self.cell}@{self.gpu.key}"

    @property
    def did_not_run(self) -> bool:
        """It ran no case, for a cause of the infrastructure: one line in every format, no case rows."""
        return self.infra_cause is not None and not self.counts

    @property
    def found(self) -> frozenset[Verdict]:
        """Its cases' verdicts (results.verdicts.fails reads a fallback under a worse cell verdict)."""
        return frozenset(Verdict(v) for v in self.verdicts)

    @property
    def refused(self) -> bool:
        """Refused by the runner before it ran (its driver too old): no case to count."""
        return self.verdict == Verdict.UNSUPPORTED and not self.verdicts

    @property
    def excused(self) -> bool:
        """An optional cell that never ran and recorded nothing: its NOT RUN fails nothing."""
        return self.unjudged == night.Unjudged.EXCUSED

    @property
    def gpu_key(self) -> str:
        return self.gpu.key

    @property
    def stack_mismatch(self) -> bool:
        return bool(self.mismatches)


@dataclass(frozen=True, kw_only=True)
class Report:
    control: str | None
    health: Mapping[str, night.Health]  # per GPU key; empty without a control
    cells: tuple[CellRow, ...]
    cases: tuple[CaseRow, ...]
    notes: tuple[str, ...] = ()  # what the reader should know of the inputs (a duplicate dropped)
    baseline: bool = False
    # The --fail-on the views describe (results.verdicts.POLICIES): what is red in every format is
    # what the exit code counts (report.verdicts.failing); `never` changes the exit alone.
    policy: str = "regression"
    history: bool = False  # judged against a history database (--history): rows carry their marks
    judged: night.Night | None = None  # what it renders: the one judged night (results/night.py)

    def red(self, cell: CellRow) -> bool:
        return verdicts.failing(cell, self.policy)


def build(results: Sequence[CellResult], control: str | None, notes: Sequence[str] = (),
          differ: night.Differ | None = None) -> Report:
    """The results judged once (results/night.judge), then rendered as rows."""
    return of_night(night.judge(results, control, differ=differ), notes)


def of_night(judged: night.Night, notes: Sequence[str] = ()) -> Report:
    """The report of a judged night: a row per cell and case, each with the night's verdict. The
    report judges nothing itself (results/night.py does, once, for every consumer)."""
    cells, cases = [], []
    for cell in judged.cells:
        rows = case_rows(cell)
        annotate_known(cell.result, rows)
        cases += rows
        made = cell_row(cell, rows)
        if cell.result.did_not_run and cell.against is not None and cell.unjudged != night.Unjudged.CONTROL:
            made = replace(made, owed=len(cell.against.cases))  # the counts say what it owed, not a row per case
        cells.append(made)
    return Report(control=judged.control, health=judged.health, cells=tuple(cells), cases=tuple(cases),
                  notes=(*notes, *host_notes([c.result for c in judged.cells])), judged=judged)


def annotate_known(result: CellResult, rows: list[CaseRow]) -> None:
    """Each failing case that matches a known upstream issue (its params on the stack the cell
    observed) gets that issue's one-line annotation, the same file triage reads."""
    failing = [row for row in rows if row.outcome in FAILING and row.case in result.cases]
    if not failing:
        return
    observed = result.observed
    stack = known.Stack(torch=_text(observed.get("torch")), cuda=_text(observed.get("cuda")),
                        cudnn=known.cudnn_number(observed.get("cudnn")),
                        capability=_text((result.gpu or {}).get("capability")))
    for row in failing:
        case = result.cases[row.case]
        row.known = tuple(
            known.annotation(issue, known.matched(issue, stack, case.family))
            for issue in known.match(case.params, stack, family=case.family, message=case.message, failed=True))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def host_notes(results: Sequence[CellResult]) -> list[str]:
    """With results from several hosts: which, and the driver each ran (a difference there can
    explain a difference in the results)."""
    hosts: dict[str, set[str]] = {}
    for r in results:
        if r.host:
            hosts.setdefault(r.host, set()).add(str(r.observed.get("driver") or "no driver"))
    if len(hosts) <= 1:
        return []
    listed = ", ".join(f"{h} (driver {', '.join(sorted(d))})" for h, d in sorted(hosts.items()))
    drivers = {d for ds in hosts.values() for d in ds}
    differ = "; the drivers differ" if len(drivers) > 1 else ""
    return [f"results from {len(hosts)} hosts: {listed}{differ}; each cell is compared with the control "
            f"from its own host"]


def case_rows(cell: night.JudgedCell) -> list[CaseRow]:
    result, control = cell.result, cell.against
    compared = control is not None and cell.unjudged != night.Unjudged.CONTROL and cell.fact not in OUTSIDE
    timed = verdicts.timing_comparable(result, control, cell.fact)
    gpu, blocking, explained = cell.place, result.blocking, result.explained
    # Looked up once per cell, not per row (a fleet's report makes 200,000 rows here).
    delta, fingerprint_changed = verdicts.delta, verdicts.fingerprint_changed
    slowdown, timed_ratio = verdicts.slowdown, verdicts.timed_ratio
    rows = []
    for judged in cell.cases:
        case, base = judged.record, judged.control
        if case is None:
            rows.append(missing_row(cell, judged))
            continue
        cost = judged.cost
        # A case that passed at a cost says what it cost where a failure says its message, so every
        # format shows it in its place (Cost.words: the backends, then each ratio).
        costly = cost is not None and judged.verdict in COSTS and case.message is None
        message = cost.words() if cost is not None and costly else case.message
        rows.append(CaseRow(  # in field order: see CaseRow
            result.cell, gpu, judged.case, case.knobs, case.outcome, case.family, message, case.warnings,
            base.outcome if base else None,  # control_outcome
            delta(base, case) if compared else None,
            case.evidence,
            rerun(blocking.get(judged.case)) if blocking else None,
            case.forward_ms,
            slowdown(base, case) if timed else None,
            fingerprint_changed(base, case),
            None,  # baseline_outcome
            None,  # baseline_delta
            timed_ratio(base, case) if timed else None,
            case.sources,
            explained.get(judged.case) if explained else None,
            judged.first_diff,
            (),  # known: annotate_known fills it
            case.params,
            judged.verdict,
            judged.declared,
            case.duration_s,
            None,  # history
            judged.unjudged,
            judged.cost,
        ))
    return rows


def missing_row(cell: night.JudgedCell, judged: night.JudgedCase) -> CaseRow:
    """A case the control ran and this cell did not: never a pass by omission (not-run)."""
    return CaseRow(cell=cell.result.cell, gpu=cell.place, case=judged.case, knobs={}, outcome=Outcome.MISSING,
                   family=None, message="the control ran this case; this cell has no result for it",
                   warnings=(), control_outcome=judged.control.outcome if judged.control else None,
                   delta=Delta.MISSING, verdict=judged.verdict, unjudged=judged.unjudged)


def rerun(case: Case | None) -> Rerun | None:
    return None if case is None else Rerun(outcome=case.outcome, family=case.family, message=case.message)


def cell_row(cell: night.JudgedCell, cases: list[CaseRow]) -> CellRow:
    result = cell.result
    audited = result.cases.get(libraries.CASE)
    # Each a list comprehension, then C: a generator's frame per row cost more than the counting
    # (a fleet's report makes 1,000 of these over 200 rows each).
    deltas = [c.delta for c in cases if c.delta]
    said = Counter([c.verdict for c in cases])
    outcomes = Counter([c.family or c.outcome for c in cases])
    warned = {w for c in cases for w in c.warnings}
    return CellRow(
        cell=result.cell,
        gpu=GpuInfo(key=cell.place, name=str(result.gpu.get("name")),
                    capability=result.gpu.get("capability"), generation=str(result.gpu.get("generation"))),
        host=result.host or None,
        lane=result.lane,
        path=str(result.path),
        stack=result.requested,
        observed={k: result.observed.get(k) for k in OBSERVED_KEYS if k in result.observed},
        mismatches=result.stack_mismatch,
        problems=result.problems,
        counts={str(key): n for key, n in sorted(outcomes.items())},
        signature=cell.signature,
        warning_signature=classify.SIGNATURE in warned,
        # Stored by the harness when the cell finished (or worked out by the cli for an older
        # directory): the report reads it and never scans a log itself.
        first_cause=result.first_cause if not FAILING.isdisjoint([c.outcome for c in cases]) else None,
        regressions=deltas.count(Delta.REGRESSION),
        fixed=deltas.count(Delta.FIXED),
        slowdown=verdicts.typical_slowdown([c.timed for c in cases]),
        fingerprint_changed=[c.fingerprint_changed for c in cases].count(True),
        verdict=cell.verdict,  # the night's: the worst of its fact and its cases' verdicts
        verdicts={str(v): said[v] for v in (*ORDER, *sorted(OUTSIDE)) if said[v]},
        optional=result.optional,
        not_run=result.not_run,
        unsupported=result.unsupported,
        infra_cause=result.infra_cause,
        attempts=result.attempts,
        unjudged=cell.unjudged,
        libraries=audited.libraries if audited else (),
        libraries_line=libraries.stack_line(audited.libraries) if audited else None,
        shipped_line=libraries.shipped_line(audited.libraries, audited.shipped) if audited else None,
    )


def with_baseline(report: Report, baseline: Loaded) -> Report:
    """Each case also against the same cell@gpu in an earlier run (say, last night's)."""
    earlier = {(r.cell, r.gpu_key): r for r in baseline.results}
    cases = []
    for case in report.cases:
        old = earlier.get((case.cell, case.gpu))
        before = old.cases.get(case.case) if old else None
        cases.append(replace(case, baseline_outcome=before.outcome if before else None,
                             baseline_delta=verdicts.delta(before, case) if old else None))
    regressed = Counter(c.where for c in cases if c.baseline_delta == Delta.REGRESSION)
    cells = tuple(replace(cell, baseline_regressions=regressed[cell.where]) for cell in report.cells)
    return replace(report, cases=tuple(cases), cells=cells, baseline=True)


def with_history(report: Report, marks: Marks) -> Report:
    """Each cell and case with its mark against the history (history.lookup.marks): first-red,
    recurring, recovered, flaky, or none. Apart from the deltas against the control."""
    cases = tuple(replace(case, history=marks.cases.get((case.where, case.case))) for case in report.cases)
    cells = tuple(replace(cell, history=marks.cells.get(cell.where)) for cell in report.cells)
    return replace(report, cases=cases, cells=cells, history=True)
