"""One judged night (docs/contracts.md: The judged night): a run's results judged once, here, by
the one order of outcomes (results/verdicts.py), and read by every consumer. The report renders
it, the history stores it and judges it only against earlier nights, prove pairs two of them,
export publishes the report made of it. None of them decides red again: each asks this module.

For each host, GPU key, cell and case it holds the verdict, the family, and whether it could be
judged at all (`Unjudged`): a case whose control is sick, a cell that is the control, an optional
cell that never ran, a cell the infrastructure stopped. Those are never red in the history: a
night whose control could not run says nothing about its candidates' cases, and marking them
red there made every later real failure `recurring` instead of `first-red`."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from convmatrix.errors import BadInput
from convmatrix.gpus import CPU_KEY
from convmatrix.matrix import stacks
from convmatrix.results import families, libraries
from convmatrix.results.first_diff import Difference
from convmatrix.results.outcomes import FAILING, Outcome, Verdict
from convmatrix.results.read import EPOCH, Case, CellResult, Loaded
from convmatrix.results.verdicts import DRIVER, OUTSIDE, RED, Cost, case_verdict, cell_verdict, cost_of, declared, fails


class Unjudged(StrEnum):
    """Why a cell or a case has no verdict of its own (None: it was judged). Stored in the history
    (cells.unjudged, cases.unjudged) and never red there."""

    CONTROL = "control"  # the control itself: the standard, not judged against itself
    NO_CONTROL = "no-control"  # nothing to compare with (no control named, none on this GPU anywhere)
    CONTROL_UNHEALTHY = "control-unhealthy"  # its control is sick, or ran only on another host
    EXCUSED = "excused"  # an optional cell that did not run (and recorded nothing)
    INFRASTRUCTURE = "infrastructure"  # it never ran a case, for a cause of the infrastructure
    NOT_COMPARED = "not-compared"  # another suite version than its control's


@dataclass(frozen=True, kw_only=True)
class Health:
    healthy: bool
    reason: str | None
    absent: bool = False  # no control result at all on this GPU (nothing to judge against)
    elsewhere: tuple[str, ...] = ()  # absent on this host, but it ran on these (its cells: INVALID)


SICK = Health(healthy=False, reason=None)  # no health known: nothing to compare with


# A fleet's night holds 200,000 of these: slots, as results.Case; judge_cell makes them
# positionally, in field order.
@dataclass(slots=True)
class JudgedCase:
    case: str
    record: Case | None  # the cell's own record (None: the control ran it, this cell has none)
    control: Case | None  # the control's record of the same case on the same place
    verdict: Verdict
    unjudged: Unjudged | None  # None: judged by the one function
    declared: str | None = None  # the reason of the [[expected_skip]] that declared its skip
    first_diff: Difference | None = None  # the first log line of its section the control's lacks
    cost: Cost | None = None  # passed on both sides: its backends, memory and time against the control's

    @property
    def outcome(self) -> Outcome:
        return self.record.outcome if self.record is not None else Outcome.MISSING

    @property
    def family(self) -> str | None:
        return self.record.family if self.record is not None else None

    @property
    def red(self) -> bool:
        """Red for the history (first-red, recurring): judged, and failing under the regression policy."""
        return self.unjudged is None and self.verdict in RED


@dataclass(frozen=True, kw_only=True)
class JudgedCell:
    result: CellResult  # as judged (a driver's refusal or a contradiction added to it)
    place: str  # the GPU key, `<gpu-key>@<host>` in a night of several hosts
    against: CellResult | None  # the control it was compared with (None: none)
    fact: Verdict | None  # its own fact before its cases (cell_fact)
    verdict: Verdict
    cases: tuple[JudgedCase, ...]
    unjudged: Unjudged | None

    @property
    def cell(self) -> str:
        return self.result.cell

    @property
    def where(self) -> str:
        return f"{self.result.cell}@{self.place}"

    @property
    def excused(self) -> bool:
        return self.unjudged == Unjudged.EXCUSED

    @property
    def signature(self) -> bool:
        # a list of the records' families, not a property call a case in a generator (a report asks
        # this of each of a fleet's cells, 200 cases each)
        return families.SIGNATURE in [c.record.family for c in self.cases if c.record is not None]

    @property
    def did_not_run(self) -> bool:
        return self.result.did_not_run

    @property
    def found(self) -> frozenset[Verdict]:
        """Its cases' verdicts (a cell whose worst is a regression may hold a fallback too)."""
        return frozenset(c.verdict for c in self.cases)

    def fails(self, policy: str = "regression") -> bool:
        """Whether it makes the run red under policy (what the report's exit code counts)."""
        return red(self, policy)

    @property
    def red(self) -> bool:
        """Red for the history: judged (an infrastructure outage, an excused or unjudged cell never
        is), and failing under the regression policy."""
        return self.unjudged is None and red(self, "regression")


@dataclass(frozen=True, kw_only=True)
class Night:
    run: str  # its key: --run-id, else the names of the run directories
    at: datetime.datetime  # the one time all its shards share (UTC; shared_time)
    control: str | None
    health: Mapping[str, Health]  # per place; empty without a control
    cells: tuple[JudgedCell, ...]
    no_gpu: bool  # no GPU took part: every cell that ran, ran on the CPU (cuDNN never exercised)
    # Some cell ran its library audit alone (`run --audit-only`): its verdict is the audit's, its
    # other cases neither passed nor went missing (audit_case_only); the history refuses the night.
    audit_only: bool = False


AUDIT_ONLY_RUN = "an audit-only run (convmatrix run --audit-only)"


def refuse_audit_only(judged: Night, why: str, where: str = "") -> None:
    """The one check that keeps a night of the library audit alone (`run --audit-only`: one case
    of each cell ran) out of whatever reads a cell whole: the history (`record`, `report
    --history`), the atlas (`export RUN`) and a fix proof (`prove`). BadInput (exit 2), one line:
    `where` (the run, as `BEFORE <path>: `), then why it is refused."""
    if judged.audit_only:
        raise BadInput(f"{where}{AUDIT_ONLY_RUN} {why}")


class Flagged(Protocol):
    """What `red` reads of a cell (a JudgedCell, a report's CellRow)."""

    @property
    def verdict(self) -> Verdict: ...

    @property
    def signature(self) -> bool: ...

    @property
    def excused(self) -> bool: ...

    @property
    def found(self) -> frozenset[Verdict]: ...


def red(cell: Flagged, policy: str = "regression") -> bool:
    """A cell red under policy (results.verdicts.fails): every view, the exit code and the history ask this."""
    return fails(cell.verdict, policy=policy, signature=cell.signature, excused=cell.excused, found=cell.found)


def case_fails(verdict: Verdict, policy: str = "regression") -> bool:
    """A case's verdict that fails a run under policy (a fallback under --fail-on fallback)."""
    return fails(verdict, policy=policy)


def case_red(verdict: Verdict) -> bool:
    """A case's verdict that fails a run under the regression policy (the views mark it red)."""
    return verdict in RED


# Differ: given a cell, its control and its failing cases, the first line of each case's log
# section the control's lacks (results.first_diff); the cli hands it in, so judging reads no log.
Differ = Callable[[CellResult, CellResult, list[str]], dict[str, Difference]]


def judge(results: Sequence[CellResult], control: str | None, *, run: str = "", at: datetime.datetime | None = None,
          differ: Differ | None = None) -> Night:
    """Every cell against the control on its own place: its GPU key, and, when the results come
    from more than one host, its host too: a cell is never judged against a control that ran on
    another machine."""
    place = places(results)
    by_place = {place(r): r for r in results if r.cell == control}
    keys = sorted({place(r) for r in results})
    # Without a control there is nothing to be healthy or not: every verdict is no-control.
    health = {key: place_health(key, by_place, results, control, place) for key in keys} if control else {}
    cells = []
    for result in sorted(results, key=lambda r: (r.cell != control, r.cell, place(r))):
        where = place(result)
        against = by_place.get(where)
        if result.cell != control and not result.unsupported and (why := driver_insufficient(result)):
            result = replace(result, unsupported=why)  # the reason its unsupported cases show
        if result.not_run and result.cases:
            # Marked not run, yet it recorded cases: what it recorded is judged, and the cell
            # cannot be taken as it reads (an optional not-run never hides a failure it recorded).
            result = replace(result, problems=(*result.problems, f"marked not run ({result.not_run}) yet it "
                                               f"recorded {len(result.cases)} case(s)"), not_run=None)
        other_suite = suite_mismatch(result, against)
        if other_suite:
            # Another suite ran other cases, or the same ones otherwise: nothing to compare.
            result, against = replace(result, problems=(*result.problems, other_suite)), None
        if result.audit_only or (against is not None and against.audit_only and result.cell != control):
            result, against = audit_case_only(result), audit_case_only(against) if against is not None else None
        cells.append(judge_cell(result, against, control, where, health.get(where), differ,
                                Unjudged.NOT_COMPARED if other_suite else None))
    return Night(run=run, at=at or EPOCH, control=control, health=health, cells=tuple(cells),
                 no_gpu=no_gpu(results), audit_only=any(r.audit_only for r in results))


def audit_case_only(result: CellResult) -> CellResult:
    """A cell as an audit-only comparison sees it: its library audit case alone (results/libraries.CASE).
    Where either side ran only the audit (`run --audit-only`), the conv cases the other side ran are
    not compared: they did not run, which is neither a pass nor a case missing (not-run)."""
    if result.cases.keys() <= {libraries.CASE}:
        return result
    return replace(result, cases={k: v for k, v in result.cases.items() if k == libraries.CASE},
                   blocking={k: v for k, v in result.blocking.items() if k == libraries.CASE})


def judge_cell(result: CellResult, against: CellResult | None, control: str | None, where: str,
               known: Health | None, differ: Differ | None, other_suite: Unjudged | None) -> JudgedCell:
    fact = cell_fact(result, control, known)
    healthy = bool((known or SICK).healthy)
    # A cell that did not run (or that the runner refused before it ran) has nothing to compare:
    # NOT RUN or UNSUPPORTED says so once, not a case "missing" each.
    ran = not result.not_run and not (result.unsupported and not result.cases) and not result.did_not_run
    is_control = result.cell == control
    compared = against is not None and not is_control and ran and fact not in OUTSIDE and healthy
    unjudged = unjudged_cell(result, is_control, fact, healthy, other_suite)
    # A case not compared is not judged: why is its cell's reason, else (a cell INVALID for its
    # own reasons beside a sick control) its control's.
    why = None if compared else (unjudged or (Unjudged.CONTROL_UNHEALTHY if control is not None and not healthy
                                              else Unjudged.NO_CONTROL))
    skips = result.expected_skips
    timed = compared and timing_comparable(result, against, fact)
    cases = []
    # Read once per cell, not per case (a fleet's night judges 200,000 cases here).
    controls = against.cases if against is not None else {}
    passed, ok, declared_skip = Outcome.PASS, Verdict.OK, Verdict.DECLARED_SKIP
    not_compared = fact or Verdict.NO_CONTROL
    # Positional calls: a keyword is matched by name at each of a fleet's 200,000 calls.
    for name, case in sorted(result.cases.items()):
        base = controls.get(name)
        reason = declared(name, skips) if skips and case.outcome == Outcome.SKIP else None
        own = case_verdict(base, case, reason is not None) if compared else not_compared
        cost = None
        if compared and base is not None and case.outcome == passed and base.outcome == passed:
            # Passed on both: what it cost. The worst of fallback, memory and slower is its verdict.
            cost = cost_of(base, case, timed)
            if own == ok:
                own = cost.verdict
        cases.append(JudgedCase(name, case, base, own, why,  # in field order: see JudgedCase
                                reason if reason is not None and own == declared_skip else None, None, cost))
    if against is not None and not is_control and ran:
        # What the control ran and this cell did not: never a pass by omission (not-run). A set
        # difference first: most cells ran every case.
        for name in sorted(against.cases.keys() - result.cases.keys()):
            cases.append(JudgedCase(name, None, against.cases[name],
                                    Verdict.NOT_RUN if compared else (fact or Verdict.NOT_RUN), why))
    if differ is not None and against is not None and not is_control:
        failing = [c.case for c in cases if c.record is not None and c.record.outcome in FAILING]
        found = differ(result, against, failing) if failing else {}
        for judged in cases:
            judged.first_diff = found.get(judged.case)
    verdict = cell_verdict(fact, (c.verdict for c in cases))
    return JudgedCell(result=result, place=where, against=against, fact=fact, verdict=verdict, cases=tuple(cases),
                      unjudged=unjudged)


def timing_comparable(result: CellResult, control: CellResult | None, fact: Verdict | None) -> bool:
    """Whether a cell's timings may be set against its control's at all: both ran whole (no
    problem recorded, no fact of the cell's own such as INVALID or not-run, every case the control
    ran: a cell killed mid-run on a loaded machine showed "SLOWER x33.5"), on the same host, in
    this run (neither a stored result reused from another: another night's load is not this
    stack's speed)."""
    return (control is not None and control is not result and fact is None
            and not result.problems and not control.problems
            and result.host == control.host and not result.reused and not control.reused
            and control.cases.keys() <= result.cases.keys())


def unjudged_cell(result: CellResult, is_control: bool, fact: Verdict | None, healthy: bool,
                  other_suite: Unjudged | None) -> Unjudged | None:
    """Why a cell has no verdict of its own, or None. A cell INVALID for its own reasons (it did
    not complete, ran another stack) is judged: that is a finding about it."""
    if is_control:
        return Unjudged.CONTROL
    if result.optional and result.not_run is not None and not result.cases:
        return Unjudged.EXCUSED
    if result.did_not_run:
        return Unjudged.INFRASTRUCTURE
    if other_suite is not None:
        return other_suite
    if fact == Verdict.NO_CONTROL:
        return Unjudged.NO_CONTROL
    if not healthy and fact != Verdict.NOT_RUN and not (fact == Verdict.INVALID and own_invalid(result)):
        return Unjudged.CONTROL_UNHEALTHY
    return None


def own_invalid(result: CellResult) -> bool:
    """INVALID for the cell's own reasons, whatever its control: it did not complete, recorded
    nothing, or ran another stack."""
    return bool(result.problems or not result.cases or result.stack_mismatch)


def no_gpu(results: Sequence[CellResult]) -> bool:
    """No GPU took part: no cell that ran a case ran it on a GPU (a night on the CPU alone, or
    one where every GPU cell failed to start). cuDNN was then never exercised."""
    return not any(r.gpu_key != CPU_KEY and r.cases for r in results)


def control_id(results: Sequence[CellResult], given: str | None) -> str | None:
    """--control wins; else the cell the matrix marked as control in its cell.json."""
    if given:
        if not any(r.cell == given for r in results):
            raise BadInput(f"--control {given}: no results for that cell")
        return given
    marked = sorted({r.cell for r in results if r.marked_control})
    if len(marked) > 1:
        raise BadInput(f"several cells are marked control ({', '.join(marked)}): pick one with --control")
    return marked[0] if marked else None


def health(control: CellResult | None) -> Health:
    """A control that did not complete, ran another stack, or hit the environment is unhealthy."""
    if control is None:
        return Health(healthy=False, reason="the control has no result on this GPU", absent=True)
    if control.not_run:
        return Health(healthy=False, reason=f"the control did not run: {control.not_run}")
    if control.unsupported:
        return Health(healthy=False, reason=f"this runner cannot run the control: {control.unsupported}")
    if control.did_not_run and control.infra_cause is not None:
        return Health(healthy=False, reason=f"the control did not run: {control.infra_cause.words()}")
    if control.problems:
        return Health(healthy=False, reason="; ".join(control.problems))
    if control.stack_mismatch:
        return Health(healthy=False, reason="stack mismatch: " + "; ".join(control.stack_mismatch))
    infra = sorted(control.families() & families.INFRASTRUCTURE)
    if infra:
        return Health(healthy=False, reason=f"infrastructure failure on the control: {', '.join(infra)}")
    if not control.cases:
        return Health(healthy=False, reason="the control recorded no cases")
    return Health(healthy=True, reason=None)


def cell_fact(result: CellResult, control: str | None, known: Health | None) -> Verdict | None:
    """What a cell's own facts say before its cases do (None: nothing; its cases decide): not-run
    when it was planned and never ran, control, unsupported when the runner refused it before it
    ran, INVALID when it did not complete or is not comparable, no-control. The cell's verdict is
    then the worst of this and its cases' (results.verdicts.cell_verdict): no fact excuses a case."""
    if result.not_run:
        return Verdict.NOT_RUN  # planned and not run: it covers nothing, the control included
    if result.cell == control:
        return Verdict.CONTROL
    if result.unsupported and not result.cases:
        return Verdict.UNSUPPORTED  # refused before it ran: the runner's driver is too old for it
    if own_invalid(result):
        # It did not complete, never ran cases, or ran another stack than requested: whatever it
        # recorded covers less than it claims, so it can be neither green nor compared.
        return Verdict.INVALID
    if control is None or known is None:
        return Verdict.NO_CONTROL
    if not known.healthy:
        # No verdicts from a sick (or absent) control: say which. A control that ran only on
        # another host is no control for this one: never green, INVALID.
        return Verdict.NO_CONTROL if known.absent and not known.elsewhere else Verdict.INVALID
    return None


def driver_insufficient(result: CellResult) -> str | None:
    """A cell whose cases failed because the driver is older than its CUDA runtime needs: the
    runner cannot run this stack (unsupported), which is no regression of the stack."""
    if not any(c.family == DRIVER for c in result.cases.values()):
        return None
    driver = str(result.observed.get("driver") or "unknown")
    cuda = str(result.requested.get("cuda") or "")
    known = stacks.driver_too_old(driver, cuda) if cuda else None
    return known or f"driver {driver} too old for CUDA {result.observed.get('cuda') or cuda or '?'} (seen at run time)"


def suite_mismatch(result: CellResult, control: CellResult | None) -> str | None:
    """Why a cell cannot be compared with its control: another version of the suite ran it."""
    if control is None or control is result:
        return None
    mine, theirs = result.observed.get("suite_version"), control.observed.get("suite_version")
    if mine and theirs and mine != theirs:
        return f"ran suite version {mine}, the control {theirs}: not compared"
    return None


def places(results: Sequence[CellResult]) -> Callable[[CellResult], str]:
    """A result's column: its GPU key on one host, `<gpu-key>@<host>` when the results come from
    several."""
    # Results from before hosts were recorded (host "") and a generation no runner reported (not
    # run "on any host") name no host: they join the one host there is.
    if len({r.host for r in results if r.host}) <= 1:
        return lambda r: r.gpu_key
    return lambda r: f"{r.gpu_key}@{r.host}" if r.host else r.gpu_key if r.not_run else f"{r.gpu_key}@?"


def place_health(key: str, by_place: Mapping[str, CellResult], results: Sequence[CellResult],
                 control: str | None, place: Callable[[CellResult], str]) -> Health:
    found = by_place.get(key)
    if found is not None:
        return health(found)
    gpu = key.partition("@")[0]
    elsewhere = sorted({r.host or "?" for r in results if r.cell == control and r.gpu_key == gpu})
    if not elsewhere:
        return health(None)
    host = key.partition("@")[2]
    return Health(healthy=False, absent=True, elsewhere=tuple(elsewhere),
                  reason=f"no control on host {host}; one ran on {', '.join(elsewhere)}")


def run_key(loaded: Loaded, given: str | None) -> str:
    """A night's key: --run-id, else the names of the run directories given (a nightly's
    reports/runs/<stamp>), else of the folders holding the cell directories given."""
    if given is not None:
        # Printable: a NUL is no PostgreSQL text, and the key is shown in every history line.
        if not given.strip() or len(given) > 200 or not given.isprintable():
            raise BadInput(f"--run-id {given[:200]!r}: 1 to 200 printable characters")
        return given
    names = sorted({Path(p).resolve().name for p in loaded.run_dirs}
                   or {r.path.resolve().parent.name for r in loaded.results})
    key = "+".join(names)
    if not key or len(key) > 200:
        raise BadInput("the run has no usable name (over 200 characters, or none): give --run-id")
    return key


AT_VARIABLE = "CONVMATRIX_RUN_AT"


def shared_time(loaded: Loaded, given: str | None = None) -> datetime.datetime:
    """The one time of a night, which every shard of it shares: --at (or $CONVMATRIX_RUN_AT: a
    fleet whose runners each keep their own run directory gives them its pipeline's start), else
    when the first of the run directories' plans was written (every `convmatrix run` writes its
    plan before any cell; a --resume keeps it: results/plans.write), else, for a run from before
    plans, its first cell's end, else now. UTC."""
    if given:
        at = parse_time(given)
        if at is None:
            raise BadInput(f"--at {given[:64]!r}: not an ISO-8601 time (2026-12-07T01:00:00+00:00)")
        return at.astimezone(datetime.UTC)
    if loaded.planned:
        return min(loaded.planned).astimezone(datetime.UTC)
    ended = [r.ended for r in loaded.results if r.ended != EPOCH]
    return (min(ended) if ended else datetime.datetime.now(datetime.UTC)).astimezone(datetime.UTC)


def parse_time(text: str) -> datetime.datetime | None:
    try:
        at = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=datetime.UTC)
