"""Fix proof: `convmatrix prove BEFORE AFTER [--pair AXIS=OLD:NEW]` (docs/contracts.md: Fix proof).

Each cell@gpu of BEFORE is paired with its counterpart in AFTER: the same cell id on the same GPU
key, or with --pair the cell that differs from it only in that axis (OLD in BEFORE, NEW in AFTER;
the two may be one run). The inputs must be the same (suite version, each case's parameters).
A fix is proven when, on every GPU generation, every case that failed with the signature before
passes after, nothing fails that did not fail (or failed otherwise) before, and the known-good
control is healthy and passes every case in both. Exit 0 proven, 1 not proven, 3 a control is
not healthy or not passing, 2 inputs that cannot be compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from convmatrix.errors import BadInput, NotGreen, UnhealthyControl
from convmatrix.matrix import knobs, values
from convmatrix.report import verdicts
from convmatrix.results import families
from convmatrix.results.outcomes import Outcome
from convmatrix.results.read import Case, CellResult, Loaded

SIGNATURE = families.SIGNATURE


class Change(StrEnum):
    """What became of one case between BEFORE and AFTER (only cases worth a line get one)."""

    FIXED = "fixed"  # failed with the signature, passes
    STILL_SIGNATURE = "still-signature"  # failed with the signature, still does
    FAILS_OTHERWISE = "fails-otherwise"  # failed with the signature, now fails another way
    NOT_RUN = "not-run"  # failed with the signature, skipped or absent after: nothing shown
    NEW_FAILURE = "new-failure"  # did not fail before (or failed another way), fails after
    STILL_FAILS = "still-fails"  # failed before, not with the signature, fails the same way after

    @property
    def blocks(self) -> bool:
        return self not in (Change.FIXED, Change.STILL_FAILS)

    @property
    def phrase(self) -> str:
        return _PHRASES[self]


_PHRASES = {
    Change.FIXED: "fixed",
    Change.STILL_SIGNATURE: "still fail with the signature",
    Change.FAILS_OTHERWISE: "failed with the signature and now fail otherwise",
    Change.NOT_RUN: "failed with the signature and did not run after",
    Change.NEW_FAILURE: "fail anew",
    Change.STILL_FAILS: "still fail as before (not the signature)",
}


class Verdict(StrEnum):
    PROVEN = "proven"
    NOT_PROVEN = "not-proven"
    UNHEALTHY_CONTROL = "unhealthy-control"


@dataclass(frozen=True, kw_only=True)
class Pairing:
    """--pair AXIS=OLD:NEW; None stands for "the same cell id"."""

    axis: str
    old: str
    new: str

    @property
    def text(self) -> str:
        return f"{self.axis}={self.old}:{self.new}"


@dataclass(frozen=True, kw_only=True)
class CaseLine:
    case: str
    before: Outcome
    before_family: str | None
    after: Outcome
    after_family: str | None
    change: Change


@dataclass(frozen=True, kw_only=True)
class Pair:
    gpu: str
    generation: str
    before: str  # cell id in BEFORE
    after: str | None  # its counterpart in AFTER; None when AFTER has none
    lines: tuple[CaseLine, ...] = ()
    problems: tuple[str, ...] = ()  # why this pair cannot be judged (incomplete, missing cases)

    @property
    def signature_before(self) -> bool:
        return any(line.before_family == SIGNATURE for line in self.lines)

    @property
    def proven(self) -> bool:
        return self.after is not None and not self.problems and not any(line.change.blocks for line in self.lines)

    @property
    def state(self) -> str:
        """What the pair says, in the words of the proof's verdict (decide): a pair where nothing
        failed with the signature before proves nothing, whatever happens after."""
        if not self.proven:
            return "NOT proven"
        if not self.signature_before:
            quiet = "nothing failed before or after" if not self.lines else "no case failed with the signature before"
            return f"nothing to prove: {quiet}"
        return "proven"


@dataclass(frozen=True, kw_only=True)
class ControlCheck:
    gpu: str
    side: str  # "BEFORE" or "AFTER"
    cell: str | None
    ok: bool
    reason: str | None


@dataclass(frozen=True, kw_only=True)
class Proof:
    before: tuple[str, ...]
    after: tuple[str, ...]
    pairing: Pairing | None
    pairs: tuple[Pair, ...]
    unpaired: tuple[str, ...]  # BEFORE cell@gpu with no counterpart and no signature: not judged
    controls: tuple[ControlCheck, ...]
    verdict: Verdict
    reasons: tuple[str, ...]  # why it is not proven (or the control not healthy)


def parse_pair(text: str) -> Pairing:
    """AXIS=OLD:NEW. A base image holds colons too: the one split where both sides are valid."""
    axis, eq, rest = text.partition("=")
    if not eq or axis not in values.AXES:
        raise BadInput(f"--pair {text!r}: expected AXIS=OLD:NEW with AXIS one of {', '.join(values.AXES)}")
    splits = [(rest[:i], rest[i + 1:]) for i, ch in enumerate(rest) if ch == ":"]
    valid = [(old, new) for old, new in splits
             if values.check(axis, old) is None and values.check(axis, new) is None]
    if len(valid) != 1:
        why = "no split of OLD:NEW gives two valid values" if not valid else "it splits into OLD:NEW more than one way"
        raise BadInput(f"--pair {text!r}: {why} ({axis}: {_expected(axis)})")
    old, new = valid[0]
    if axis == "knobs":
        old, new = knobs.canonical(old) or knobs.DEFAULT, knobs.canonical(new) or knobs.DEFAULT
    if old == new:
        raise BadInput(f"--pair {text!r}: OLD and NEW are the same")
    return Pairing(axis=axis, old=old, new=new)


def _expected(axis: str) -> str:
    return (values.check(axis, None) or "").removeprefix("None is not ")


def axis_values(result: CellResult) -> dict[str, str] | None:
    """The axis values a result was requested with (cell.json), knobs spelt canonically with
    "default" for none; None when it has no cell.json (a direct suite run), so no --pair."""
    if not result.requested:
        return None
    found = {k: str(v) for k, v in result.requested.items() if k in values.AXES}
    try:
        found["knobs"] = knobs.canonical(found.get("knobs", "")) or knobs.DEFAULT
    except ValueError:
        raise BadInput(f"{result.path / 'cell.json'}: field 'requested' knobs: {found.get('knobs', '')[:80]!r} is "
                       "not a knob set") from None
    return found


def counterpart(result: CellResult, after: Sequence[CellResult], pairing: Pairing | None) -> CellResult | None:
    same_gpu = [r for r in after if r.gpu_key == result.gpu_key]
    if pairing is None:
        return next((r for r in same_gpu if r.cell == result.cell), None)
    wanted = axis_values(result)
    if wanted is None:
        return None
    wanted[pairing.axis] = pairing.new
    return next((r for r in same_gpu if axis_values(r) == wanted), None)


def is_before(result: CellResult, pairing: Pairing | None) -> bool:
    if pairing is None:
        return True
    found = axis_values(result)
    return found is not None and found.get(pairing.axis) == pairing.old


def case_line(name: str, was: Case | None, now: Case | None) -> CaseLine | None:
    """The case's line, or None when it is not worth one (passed or skipped both times, ...)."""
    before = was.outcome if was else Outcome.MISSING
    after = now.outcome if now else Outcome.MISSING
    b_family = was.family if was and was.outcome.failing else None
    a_family = now.family if now and now.outcome.failing else None
    if b_family == SIGNATURE:
        change = (Change.FIXED if after == Outcome.PASS else Change.STILL_SIGNATURE if a_family == SIGNATURE
                  else Change.FAILS_OTHERWISE if after.failing else Change.NOT_RUN)
    elif after.failing:
        change = Change.STILL_FAILS if before.failing and b_family == a_family else Change.NEW_FAILURE
    else:
        return None
    return CaseLine(case=name, before=before, before_family=b_family, after=after, after_family=a_family,
                    change=change)


def judge_pair(was: CellResult, now: CellResult) -> Pair:
    names = sorted(set(was.cases) | set(now.cases))
    lines = tuple(line for name in names if (line := case_line(name, was.cases.get(name), now.cases.get(name))))
    problems = [f"BEFORE {p}" for p in (*was.problems, *was.stack_mismatch)]
    problems += [f"AFTER {p}" for p in (*now.problems, *now.stack_mismatch)]
    # A case BEFORE ran that AFTER did not run (no result, or skipped) is no proof of anything: a
    # fix that skips what it cannot do proves nothing (the signature ones say so themselves).
    ran = {n: c for n, c in was.cases.items()
           if c.outcome != Outcome.SKIP and not (c.outcome.failing and c.family == SIGNATURE)}
    gone = sorted(n for n in ran if n not in now.cases)
    skipped = sorted(n for n in ran if n in now.cases and now.cases[n].outcome == Outcome.SKIP)
    if gone:
        problems.append(f"AFTER has no result for {len(gone)} case(s) BEFORE ran: {', '.join(gone[:3])}")
    if skipped:
        problems.append(f"AFTER skipped {len(skipped)} case(s) BEFORE ran: {', '.join(skipped[:3])}")
    return Pair(gpu=was.gpu_key, generation=str(was.gpu.get("generation") or was.gpu_key), before=was.cell,
                after=now.cell, lines=lines, problems=tuple(problems))


def same_inputs(was: CellResult, now: CellResult) -> list[str]:
    """Why two results are not runs of the same suite on the same cases ([] when they are)."""
    where = f"{was.cell}@{was.gpu_key} and {now.cell}@{now.gpu_key}"
    problems = []
    versions = was.observed.get("suite_version"), now.observed.get("suite_version")
    if versions[0] != versions[1]:
        problems.append(f"{where}: suite versions differ ({versions[0]} in BEFORE, {versions[1]} in AFTER)")
    differ = sorted(n for n in set(was.cases) & set(now.cases) if was.cases[n].params != now.cases[n].params)
    if differ:
        problems.append(f"{where}: case parameters differ for {len(differ)} case(s): {', '.join(differ[:3])}")
    return problems


def control_checks(results: Sequence[CellResult], control: str | None, side: str,
                   gpus: Sequence[str]) -> list[ControlCheck]:
    """The control on each GPU the pairs cover: healthy (verdicts.health) and passing every case."""
    checks = []
    for gpu in gpus:
        if control is None:
            checks.append(ControlCheck(gpu=gpu, side=side, cell=None, ok=False,
                                       reason="no cell is marked control: name one with --control"))
            continue
        found = next((r for r in results if r.cell == control and r.gpu_key == gpu), None)
        health = verdicts.health(found)
        failing = sorted(n for n, c in found.cases.items() if c.outcome.failing) if found else []
        reason = health.reason or (f"the known-good control failed {len(failing)} case(s): {', '.join(failing[:3])}"
                                   if failing else None)
        checks.append(ControlCheck(gpu=gpu, side=side, cell=control, ok=reason is None, reason=reason))
    return checks


def prove(before: Loaded, after: Loaded, *, before_paths: Sequence[str], after_paths: Sequence[str],
          pairing: Pairing | None, control: str | None = None) -> Proof:
    """Pair, check the inputs (BadInput when they differ), judge every pair and the controls."""
    pairs: list[Pair] = []
    unpaired: list[str] = []
    mismatched: list[str] = []
    for was in sorted(before.results, key=lambda r: (r.gpu_key, r.cell)):
        if not is_before(was, pairing):
            continue
        now = counterpart(was, after.results, pairing)
        if now is None:
            signature = any(c.outcome.failing and c.family == SIGNATURE for c in was.cases.values())
            if signature:
                pairs.append(Pair(gpu=was.gpu_key, generation=str(was.gpu.get("generation") or was.gpu_key),
                                  before=was.cell, after=None, problems=("no counterpart in AFTER",),
                                  lines=tuple(line for n, c in sorted(was.cases.items())
                                              if (line := case_line(n, c, None)))))
            else:
                unpaired.append(f"{was.cell}@{was.gpu_key}")
            continue
        mismatched += same_inputs(was, now)
        pairs.append(judge_pair(was, now))
    if mismatched:
        raise BadInput("the inputs differ, so BEFORE and AFTER cannot be compared:\n" + "\n".join(mismatched))
    gpus = sorted({p.gpu for p in pairs})
    # One known-good control for both sides: named, else the one BEFORE (else AFTER) marks.
    control = control or verdicts.control_id(before.results, None) or verdicts.control_id(after.results, None)
    controls = [*control_checks(before.results, control, "BEFORE", gpus),
                *control_checks(after.results, control, "AFTER", gpus)]
    verdict, reasons = decide(pairs, controls)
    return Proof(before=tuple(before_paths), after=tuple(after_paths), pairing=pairing, pairs=tuple(pairs),
                 unpaired=tuple(unpaired), controls=tuple(controls), verdict=verdict, reasons=tuple(reasons))


def decide(pairs: Sequence[Pair], controls: Sequence[ControlCheck]) -> tuple[Verdict, list[str]]:
    sick = [f"control {c.cell or '(none)'} on {c.gpu} in {c.side}: {c.reason}" for c in controls if not c.ok]
    if sick:
        return Verdict.UNHEALTHY_CONTROL, sick
    if not pairs:
        return Verdict.NOT_PROVEN, ["no cell of BEFORE has a counterpart in AFTER"]
    if not any(p.signature_before for p in pairs):
        return Verdict.NOT_PROVEN, ["nothing failed with the signature in BEFORE: there is nothing to prove"]
    reasons = [f"{p.gpu}: {p.before} → {p.after or '(none)'}: {why}" for p in pairs if not p.proven
               for why in pair_failures(p)]
    return (Verdict.NOT_PROVEN, reasons) if reasons else (Verdict.PROVEN, [])


def pair_failures(pair: Pair) -> list[str]:
    counts: dict[Change, int] = {}
    for line in pair.lines:
        if line.change.blocks:
            counts[line.change] = counts.get(line.change, 0) + 1
    return [*pair.problems, *(f"{n} case(s) {change.phrase}" for change, n in counts.items())]


def judge(proof: Proof) -> None:
    """The proof as an exit: 0 proven, NotGreen (1) not proven, UnhealthyControl (3)."""
    if proof.verdict == Verdict.UNHEALTHY_CONTROL:
        raise UnhealthyControl("\n".join(proof.reasons))
    if proof.verdict == Verdict.NOT_PROVEN:
        raise NotGreen("not proven: " + (proof.reasons[0] if len(proof.reasons) == 1
                                         else f"{len(proof.reasons)} reasons, first: {proof.reasons[0]}"))
