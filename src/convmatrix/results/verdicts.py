"""The one order of outcomes (docs/contracts.md: Verdicts): a case's verdict from its own record
and the control's, a cell's as the worst of its cases and its own facts, and whether a verdict
fails a run. Everything that judges (the report in every format, prove, later the history and
the atlas) reads these functions; nothing above may excuse a worse case with a cell-level rule.

Here, below report/ and prove/, so that nothing needs the report to know a verdict."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Protocol

from convmatrix.results.outcomes import FAILING, Outcome, Verdict

# Worst first. Small and stable: the history database stores these words and the atlas
# publishes them, so a new verdict is a contract change (docs/contracts.md).
ORDER: tuple[Verdict, ...] = (
    Verdict.INVALID,
    Verdict.REGRESSION,
    Verdict.NOT_RUN,
    Verdict.UNSUPPORTED,
    Verdict.FALLBACK,
    Verdict.MEMORY,
    Verdict.SLOWER,
    Verdict.CHANGED,
    Verdict.FIXED,
    Verdict.OK,
    Verdict.DECLARED_SKIP,
)
RANK = {verdict: rank for rank, verdict in enumerate(ORDER)}
# Outside the order: the control itself, and a cell with nothing to be compared with. An
# unhealthy control is no verdict at all (exit 3, report/verdicts.judge).
OUTSIDE = frozenset({Verdict.CONTROL, Verdict.NO_CONTROL})
# What makes a run red under --fail-on regression (signature: INVALID, NOT_RUN and the signature).
RED = frozenset({Verdict.INVALID, Verdict.REGRESSION, Verdict.NOT_RUN})
# What a case that passed on both sides cost (Cost): red only under a --fail-on that names it.
COSTS = (Verdict.FALLBACK, Verdict.MEMORY, Verdict.SLOWER)
POLICIES = ("regression", "signature", *(str(v) for v in COSTS))
# A case failing with this family is one the runner's driver cannot run: unsupported, which is
# a fact about the runner, and only that case's verdict (never a cell's excuse).
DRIVER = "cuda_driver_insufficient"

# The members the per-case code below reads (case_verdict, Cost), as module names: on Python 3.11
# each read of `Verdict.OK` goes through the hook of EnumType.__getattr__ (0.1-0.2 µs, a hundred
# times a global's), and a fleet's report read seven a case: a twentieth of its instructions
# (callgrind, bench/run.py's report_merge_s).
_PASS, _SKIP, _MISSING = Outcome.PASS, Outcome.SKIP, Outcome.MISSING
_OK, _FIXED, _CHANGED, _REGRESSION = Verdict.OK, Verdict.FIXED, Verdict.CHANGED, Verdict.REGRESSION
_NOT_RUN, _UNSUPPORTED, _DECLARED_SKIP = Verdict.NOT_RUN, Verdict.UNSUPPORTED, Verdict.DECLARED_SKIP
_FALLBACK, _MEMORY, _SLOWER = Verdict.FALLBACK, Verdict.MEMORY, Verdict.SLOWER


class Recorded(Protocol):
    """A case's record as a verdict needs it (results.Case, a report row)."""

    @property
    def outcome(self) -> Outcome: ...

    @property
    def family(self) -> str | None: ...


class Costed(Recorded, Protocol):
    """What a case's cost needs of its record (results.Case)."""

    @property
    def backend(self) -> str | None: ...

    @property
    def peak_bytes(self) -> int | None: ...

    @property
    def forward_runs(self) -> tuple[float, ...]: ...

    @property
    def reference_ms(self) -> tuple[float, ...]: ...


# Backends that are a library's (cuDNN, MIOpen, oneDNN) and ATen's own native paths: a case whose
# control ran the one and that ran the other fell back (torch._C._select_conv_backend's names).
ACCELERATED = ("Cudnn", "Miopen", "Mkldnn")
NATIVE = ("Slow",)  # Slow2d, Slow3d, SlowDilated2d/3d, SlowTranspose2d/3d
MEMORY_BOUND = 1.5  # peak memory this many times the control's ...
MEMORY_FLOOR = 1 << 20  # ... and at least 1 MiB more: a few kB of a tiny case are no finding
SLOWER_BOUND = 1.5  # the time ratio's lower bound at least this: slower
MIN_RUNS = 3  # repeated timings each side needs before its time is judged
LOAD_BOUND = 1.25  # the reference workload this many times slower (or faster) than on the control: a loaded runner


# A fleet's night holds one per case that passed on both sides (200,000 of them): slots, not
# frozen and made positionally, for the reasons results.Case gives (a frozen __init__ sets each
# field through object.__setattr__: a fifth of judging a fleet went into making these). cost_of,
# the one place that makes them, passes the fields in order; nothing changes a Cost once made.
@dataclass(slots=True)
class Cost:
    """What a case that passed on both sides cost against the control's same case (cost_of)."""

    backend: str | None = None  # the backend it ran (results line `backend`)
    control_backend: str | None = None  # the control's
    memory_ratio: float | None = None  # its peak memory / the control's (None: not both measured)
    time_ratio: float | None = None  # the median of its forward runs / the control's
    time_low: float | None = None  # the ratio's lower bound: its fastest run / the control's slowest
    unsure: str | None = None  # why a slowdown beyond the bound was not claimed (a loaded runner)
    extra_bytes: int = 0  # its peak memory minus the control's
    load: float = 1.0  # its reference workload's slowest over the control's fastest (at least 1)

    # What it cost, worked out once when it is made (__post_init__), not by a property at each
    # read: the night reads its verdict and the JSON its fallback for each of a fleet's 200,000
    # cases, and the chain of four property calls was a sixth of judging and writing them.
    fallback: bool = field(init=False)  # the control ran a library's backend (ACCELERATED), it ATen's own (NATIVE)
    memory: bool = field(init=False)  # its peak memory at least MEMORY_BOUND times the control's, MEMORY_FLOOR more
    slower: bool = field(init=False)  # its time's lower bound, over the runner's load, at least SLOWER_BOUND
    verdict: Verdict = field(init=False)  # the worst of them: fallback, then memory, then slower; ok when none

    def __post_init__(self) -> None:
        backend, control = self.backend, self.control_backend
        self.fallback = bool(control and backend and control.startswith(ACCELERATED) and backend.startswith(NATIVE))
        self.memory = (self.memory_ratio is not None and self.memory_ratio >= MEMORY_BOUND
                       and self.extra_bytes >= MEMORY_FLOOR)
        self.slower = self.unsure is None and self.time_low is not None and self.time_low / self.load >= SLOWER_BOUND
        self.verdict = _FALLBACK if self.fallback else _MEMORY if self.memory else _SLOWER if self.slower else _OK

    def words(self) -> str:
        """`Mkldnn → Slow3d; memory x13.8; time x3.1 (at least x2.6)` (with the multiplication
        sign): what every format says."""
        said = []
        if self.fallback:
            said.append(f"{self.control_backend} → {self.backend}")
        if self.memory_ratio is not None:
            said.append(f"memory ×{self.memory_ratio:.2f}")
        if self.time_ratio is not None:
            low = f" (at least ×{self.time_low:.2f})" if self.time_low is not None else ""
            said.append(f"time ×{self.time_ratio:.2f}{low}")
        if self.load > 1.0 and self.time_ratio is not None:
            said.append(f"runner load ×{self.load:.2f}")
        if self.unsure:
            said.append(f"timing unsure: {self.unsure}")
        return "; ".join(said)


def cost_of(control: Costed, case: Costed, timed: bool = True) -> Cost:
    """A case that passed on both sides against the control's: the backends, the ratio of peak
    memory, and the time ratio with its lower bound. timed: both cells were measured the same way
    (results/night.timing_comparable); otherwise no time is compared.

    The time's statistic: the ratio of the medians of the repeated forward calls, claimed slower
    only when its distribution-free lower bound, the candidate's fastest run over the control's
    slowest, is at least SLOWER_BOUND: every candidate run slower than every control run by that
    much, after dividing out the runner's load: each case also times a fixed reference workload (a
    matmul, suites/README.md) before each of its runs and after the last, and the bound is divided
    by the candidate's slowest reference over the control's fastest (when above 1). Noise only adds
    time, so a noisy control run lowers the bound, never raises it. Where that load is above
    LOAD_BOUND (or either side has no reference), a slowdown is not claimed at all and the cost
    says the timing was unsure.

    By construction no load escapes the division: a slowdown is claimed only where every run of
    both sides is bracketed by references (bracketed), so a burst of load that slowed a run
    slowed a reference beside it, and the slowest reference divides it out. Records whose two
    references stood only before and after all the runs (a burst in between went unseen: a real
    run of a clean candidate beside a control read `slower`) never claim a slowdown."""
    memory_ratio, extra = None, 0
    if case.peak_bytes is not None and control.peak_bytes:
        memory_ratio = round(case.peak_bytes / control.peak_bytes, 3)
        extra = case.peak_bytes - control.peak_bytes
    time_ratio = time_low = None
    unsure, load = None, 1.0
    mine, theirs = case.forward_runs, control.forward_runs
    if timed and len(mine) >= MIN_RUNS and len(theirs) >= MIN_RUNS and min(mine) > 0 and min(theirs) > 0:
        time_ratio = round(statistics.median(mine) / statistics.median(theirs), 3)
        time_low = round(min(mine) / max(theirs), 3)
        load = load_of(control.reference_ms, case.reference_ms)
        if time_low >= SLOWER_BOUND:
            unsure = bracketed(control, "the control's") or bracketed(case, "its") \
                or load_unsure(control.reference_ms, case.reference_ms)
    return Cost(case.backend, control.backend, memory_ratio, time_ratio, time_low, unsure, extra, load)  # field order


def bracketed(record: Costed, whose: str) -> str | None:
    """Why a side's runs are not each bracketed by a reference timing (None: they are): a
    reference before every run and one after the last."""
    if len(record.reference_ms) < len(record.forward_runs) + 1:
        return (f"{whose} {len(record.forward_runs)} runs had {len(record.reference_ms)} reference timing(s), "
                f"not one beside each")
    return None


def load_of(control: Sequence[float], case: Sequence[float]) -> float:
    """The candidate's slowest reference over the control's fastest, at least 1 (1: none to say)."""
    if not control or not case or min(control) <= 0:
        return 1.0
    return max(1.0, max(case) / min(control))


def load_unsure(control: Sequence[float], case: Sequence[float]) -> str | None:
    """Why the two cells' timings cannot be set against each other (None: they can): the
    reference workload took another time on one than on the other (the runner was loaded)."""
    if not control or not case or min(control) <= 0 or min(case) <= 0:
        return "no reference timing on both sides"
    load = max(case) / min(control)
    if load > LOAD_BOUND:
        return f"the reference workload ran ×{load:.2f} the control's (a loaded runner)"
    return None


def geometric(ratios: Iterable[float]) -> float | None:
    known = [r for r in ratios if r > 0]
    return round(math.exp(sum(math.log(r) for r in known) / len(known)), 3) if known else None


def worst(verdicts: Iterable[Verdict], default: Verdict = Verdict.OK) -> Verdict:
    """The worst of verdicts in the order (default when there are none)."""
    return min(verdicts, key=RANK.__getitem__, default=default)


def case_verdict(control: Recorded | None, case: Recorded | None, declared: bool = False) -> Verdict:
    """One case against the control's same case on the same host and GPU (the control is there and
    healthy: the cell's facts decide otherwise). control None: the control has no record of the
    case; case None (or outcome missing): the candidate has none. declared: the matrix declares
    this case's skip on this cell expected ([[expected_skip]])."""
    if case is None:
        return _NOT_RUN if control is not None else _OK
    outcome = case.outcome
    if outcome == _PASS:  # first: nearly every case of a fleet passed (200,000 a night)
        if control is None or control.outcome == _PASS:
            return _OK
        return _FIXED if control.outcome in FAILING else _CHANGED
    if outcome == _MISSING:
        return _NOT_RUN if control is not None else _OK
    if outcome in FAILING:
        if case.family == DRIVER:
            return _UNSUPPORTED
        if control is not None and control.outcome in FAILING and control.family == case.family:
            return _OK  # fails as on the control: the control is not known-good for it (an alert)
        # It passes on the control, fails otherwise there, or the control never ran it: a failure
        # is never excused by the control's silence.
        return _REGRESSION
    # A skip (the one outcome left).
    if control is None or control.outcome == _SKIP:
        return _OK
    # The control ran it (passed or failed) and this cell did not: not-run, unless declared.
    return _DECLARED_SKIP if declared else _NOT_RUN


def in_cell(fact: Verdict | None, own: Verdict) -> Verdict:
    """A case's verdict within its cell: a fact outside the order (the control, no control) is
    every case's; otherwise the case keeps its own (the cell's worst then covers the fact)."""
    return fact if fact in OUTSIDE else own


def cell_verdict(fact: Verdict | None, cases: Iterable[Verdict]) -> Verdict:
    """A cell's verdict: its fact when that is outside the order (control, no-control), else the
    worst of its fact (invalid, not-run, unsupported) and every case's verdict."""
    if fact in OUTSIDE:
        return fact
    return worst([*([fact] if fact is not None else []), *cases])


def policies(policy: str) -> frozenset[str]:
    """A --fail-on list (`regression,fallback`) as its policies (results.verdicts.POLICIES only)."""
    return frozenset(p.strip() for p in policy.split(",") if p.strip())


def fails(verdict: Verdict, *, policy: str = "regression", signature: bool = False,
          excused: bool = False, found: Iterable[Verdict] = ()) -> bool:
    """Whether a cell with this verdict makes the run red: INVALID and NOT_RUN always (excused: an
    optional cell that never ran), REGRESSION under the regression policy, a signature failure under
    the signature policy, a case's fallback, memory or slower under the policy of that name. policy
    is one or a comma-separated list (`regression,fallback`): red under any of them. found: the
    verdicts of its cases (a cell whose worst is a regression may hold a fallback too). The exit
    code (report/verdicts.judge) and every view ask this."""
    if verdict == Verdict.NOT_RUN and excused:
        return False
    if verdict in (Verdict.INVALID, Verdict.NOT_RUN):
        return True
    named = policies(policy)
    if "signature" in named and signature and verdict not in OUTSIDE:
        return True
    if "regression" in named and verdict == Verdict.REGRESSION:
        return True
    if verdict in OUTSIDE:
        return False
    return any(str(v) in named for v in (verdict, *found) if v in COSTS)


def declared(case: str, skips: Iterable[tuple[tuple[str, ...], str]]) -> str | None:
    """The reason of the first expected skip whose case globs match the case id, else None."""
    for globs, reason in skips:
        if any(fnmatchcase(case, glob) for glob in globs):
            return reason
    return None
