"""Fix proof: `convmatrix prove BEFORE AFTER [--pair AXIS=OLD:NEW]` (docs/contracts.md: Fix proof).

Each cell@gpu@host of BEFORE is paired with its counterpart in AFTER: the same cell id on the same
GPU key and host (a result with no host, from before hosts were recorded, pairs on its GPU key
alone), or with --pair the cell that differs from it only in that axis (OLD in BEFORE, NEW in
AFTER; the two may be one run). The inputs must be the same (suite version, each case's
parameters). An AFTER cell no BEFORE cell pairs with is judged by its own verdict in the AFTER
night (results/night.py): prove never judges a cell itself. A fix is proven when, on every GPU
generation and host, every case that failed with the signature before passes after, nothing fails
that did not fail (or failed otherwise) before, no AFTER cell fails with the signature or is red
against the AFTER control, the known-good control is healthy and passes every case on every host
and GPU key of both sides, and a GPU took part (or --allow-cpu). Exit 0 proven, 1 not proven, 3 a
control is not healthy or not passing, 2 inputs that cannot be compared. Neither the order of the
results nor of the hosts changes the proof.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from convmatrix.errors import BadInput, NotGreen, UnhealthyControl
from convmatrix.matrix import knobs, values
from convmatrix.results import families, night
from convmatrix.results.outcomes import Outcome
from convmatrix.results.outcomes import Verdict as CellVerdict
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
    host: str = ""  # the host both ran on ("" none recorded)
    place: str = ""  # where, as the proof names it: the GPU key, `<gpu-key>@<host>` in a proof of several hosts
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
class Lone:
    """An AFTER cell that no BEFORE cell pairs with (a GPU key, a host or a cell BEFORE lacks):
    judged by its own verdict in the AFTER night, against the AFTER control on its place."""

    gpu: str
    generation: str
    host: str
    place: str
    cell: str
    verdict: CellVerdict  # the AFTER night's
    why: str | None  # why it blocks the proof (None: it does not)


@dataclass(frozen=True, kw_only=True)
class ControlCheck:
    place: str  # the GPU key, `<gpu-key>@<host>` in a proof of several hosts
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
    lone: tuple[Lone, ...] = ()  # AFTER cells no BEFORE cell pairs with, judged by the AFTER night
    no_gpu: str | None = None  # the sides in which no GPU took part ("AFTER", "BEFORE or AFTER"), else None
    allow_cpu: bool = False  # --allow-cpu: a proof on the CPU alone may be proven

    @property
    def cpu_notice(self) -> str | None:
        """The line under the title of a proof in which no GPU took part (None: one did)."""
        if self.no_gpu is None:
            return None
        then = ("--allow-cpu accepts it as a proof on the CPU alone" if self.allow_cpu
                else "it proves nothing without --allow-cpu")
        return (f"no GPU took part in {self.no_gpu}: every cell that ran, ran on the CPU, so cuDNN was never "
                f"exercised; {then}")


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


def is_before(result: CellResult, pairing: Pairing | None) -> bool:
    if pairing is None:
        return True
    found = axis_values(result)
    return found is not None and found.get(pairing.axis) == pairing.old


def is_after(result: CellResult, pairing: Pairing | None) -> bool:
    if pairing is None:
        return True
    found = axis_values(result)
    return found is not None and found.get(pairing.axis) == pairing.new


def pairs_with(was: CellResult, now: CellResult, pairing: Pairing | None) -> bool:
    """The same GPU key and host (either without a host: from before hosts, it pairs as on the
    one host there was), and the same cell id or, with --pair, the same axis values but AXIS."""
    if was.gpu_key != now.gpu_key or (was.host and now.host and was.host != now.host):
        return False
    if pairing is None:
        return was.cell == now.cell
    wanted = axis_values(was)
    if wanted is None:
        return False
    wanted[pairing.axis] = pairing.new
    return axis_values(now) == wanted


def order(result: CellResult) -> tuple[str, str, str, str]:
    """One order of results, whatever the order of the folders and of the loader."""
    return result.gpu_key, result.host, result.cell, str(result.path)


def labeller(*sides: Sequence[CellResult]) -> Callable[[str, str], str]:
    """How the proof names a GPU key on a host: the key alone on one host, `<gpu-key>@<host>` in
    a proof of several (a result with no host keeps the key alone)."""
    if len({r.host for side in sides for r in side if r.host}) <= 1:
        return lambda gpu, host: gpu
    return lambda gpu, host: f"{gpu}@{host}" if host else gpu


def generation(result: CellResult) -> str:
    return str(result.gpu.get("generation") or result.gpu_key)


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


def judge_pair(was: CellResult, now: CellResult, place: Callable[[str, str], str]) -> Pair:
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
    host = now.host or was.host
    return Pair(gpu=was.gpu_key, generation=generation(was), before=was.cell, after=now.cell, lines=lines,
                problems=tuple(problems), host=host, place=place(was.gpu_key, host))


def same_inputs(was: CellResult, now: CellResult) -> list[str]:
    """Why two results are not runs of the same suite on the same cases ([] when they are)."""
    where = " and ".join(f"{r.cell}@{r.gpu_key}" + (f"@{r.host}" if r.host else "") for r in (was, now))
    problems = []
    versions = was.observed.get("suite_version"), now.observed.get("suite_version")
    if versions[0] != versions[1]:
        problems.append(f"{where}: suite versions differ ({versions[0]} in BEFORE, {versions[1]} in AFTER)")
    differ = sorted(n for n in set(was.cases) & set(now.cases) if was.cases[n].params != now.cases[n].params)
    if differ:
        problems.append(f"{where}: case parameters differ for {len(differ)} case(s): {', '.join(differ[:3])}")
    return problems


def control_checks(results: Sequence[CellResult], judged: night.Night, control: str | None, side: str,
                   where: Iterable[CellResult], place: Callable[[str, str], str]) -> list[ControlCheck]:
    """The control on each host and GPU key where a cell of the proof ran, and wherever it ran
    itself: healthy (the night's health of that place) and passing every case."""
    at = night.places(results)
    found: dict[str, list[CellResult]] = {}
    for result in (*where, *(r for r in results if r.cell == control)):
        found.setdefault(at(result), []).append(result)
    standards = {c.place: c for c in judged.cells if c.cell == control}
    checks = []
    for key, there in found.items():
        named = min(place(r.gpu_key, r.host) for r in [r for r in there if r.cell == control] or there)
        if control is None:
            checks.append(ControlCheck(place=named, side=side, cell=None, ok=False,
                                       reason="no cell is marked control: name one with --control"))
            continue
        health = judged.health.get(key) or night.health(None)
        standard = standards.get(key)
        failing = sorted({c.case for c in standard.cases if c.record is not None and c.outcome.failing}
                         if standard is not None else set())
        reason = (health.reason or ("unhealthy" if not health.healthy else None)
                  or (f"the known-good control failed {len(failing)} case(s): {', '.join(failing[:3])}"
                      if failing else None))
        checks.append(ControlCheck(place=named, side=side, cell=control, ok=reason is None, reason=reason))
    return sorted(checks, key=lambda c: (c.place, c.reason or ""))


def lone_cell(result: CellResult, cell: night.JudgedCell, place: Callable[[str, str], str]) -> Lone:
    """An AFTER cell with no BEFORE counterpart, as the AFTER night judged it (cell)."""
    signature = sorted({c.case for c in cell.cases if c.record is not None and c.outcome.failing
                        and c.family == SIGNATURE})
    why = None
    if signature:
        why = f"{len(signature)} case(s) fail with the signature in AFTER: {shown(signature)}"
    elif cell.fails():
        red = sorted({c.case for c in cell.cases if c.red})
        said = [*([shown(red)] if red else []), *cell.result.problems, *cell.result.stack_mismatch]
        if cell.result.not_run:
            said.append(f"not run: {cell.result.not_run}")
        why = f"{cell.verdict.value} against the AFTER control" + (f": {'; '.join(said)}" if said else "")
    return Lone(gpu=result.gpu_key, generation=generation(result), host=result.host,
                place=place(result.gpu_key, result.host), cell=result.cell, verdict=cell.verdict, why=why)


def shown(names: Sequence[str], most: int = 3) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


AUDIT_ONLY_WHY = ("is no fix proof's input: its cells ran their library audit alone, no conv case ran; "
                  "prove over full runs")


def prove(before: Loaded, after: Loaded, *, before_paths: Sequence[str], after_paths: Sequence[str],
          pairing: Pairing | None, control: str | None = None, allow_cpu: bool = False) -> Proof:
    """Pair, check the inputs (BadInput when they differ), judge every pair, every AFTER cell no
    pair holds (by the AFTER night's verdict) and every control on every place of both sides."""
    # One known-good control for both sides: named, else the one BEFORE (else AFTER) marks.
    control = control or night.control_id(before.results, None) or night.control_id(after.results, None)
    was_night = night.judge(before.results, control)
    now_night = was_night if after is before else night.judge(after.results, control)
    # A run of the library audit alone ran none of the conv cases a proof pairs: refused before
    # anything else is said of it (as the history and the atlas refuse it).
    for side, sided, paths in (("BEFORE", was_night, before_paths), ("AFTER", now_night, after_paths)):
        night.refuse_audit_only(sided, AUDIT_ONLY_WHY, f"{side} {', '.join(paths)}: ")
    place = labeller(before.results, after.results)
    olds = [r for r in sorted(before.results, key=order) if is_before(r, pairing) and r.cell != control]
    news = [r for r in sorted(after.results, key=order) if is_after(r, pairing) and r.cell != control]
    pairs: list[Pair] = []
    unpaired: list[str] = []
    mismatched: list[str] = []
    matched: set[int] = set()
    covered: list[CellResult] = []  # the BEFORE cells of the proof (paired, or with the signature)
    for was in olds:
        nows = [n for n in news if pairs_with(was, n, pairing)]
        if not nows:
            if any(c.outcome.failing and c.family == SIGNATURE for c in was.cases.values()):
                covered.append(was)
                pairs.append(Pair(gpu=was.gpu_key, generation=generation(was), before=was.cell, after=None,
                                  problems=("no counterpart in AFTER",), host=was.host,
                                  place=place(was.gpu_key, was.host),
                                  lines=tuple(line for n, c in sorted(was.cases.items())
                                              if (line := case_line(n, c, None)))))
            else:
                unpaired.append(f"{was.cell}@{place(was.gpu_key, was.host)}")
            continue
        covered.append(was)
        for now in nows:
            matched.add(id(now))
            mismatched += same_inputs(was, now)
            pairs.append(judge_pair(was, now, place))
    if mismatched:
        raise BadInput("the inputs differ, so BEFORE and AFTER cannot be compared:\n"
                       + "\n".join(sorted(set(mismatched))))
    at = night.places(after.results)
    judged = {(c.cell, c.place): c for c in now_night.cells}
    lone = [lone_cell(n, judged[n.cell, at(n)], place) for n in news if id(n) not in matched]
    pairs.sort(key=lambda p: (p.gpu, p.host, p.before, p.after or ""))
    lone.sort(key=lambda c: (c.gpu, c.host, c.cell))
    controls = [*control_checks(before.results, was_night, control, "BEFORE", covered, place),
                *control_checks(after.results, now_night, control, "AFTER", news, place)]
    no_gpu = ("BEFORE or AFTER" if was_night.no_gpu and now_night.no_gpu else "AFTER" if now_night.no_gpu
              else None)
    verdict, reasons = decide(pairs, controls, lone, no_gpu=no_gpu, allow_cpu=allow_cpu)
    return Proof(before=tuple(before_paths), after=tuple(after_paths), pairing=pairing, pairs=tuple(pairs),
                 unpaired=tuple(sorted(unpaired)), controls=tuple(controls), verdict=verdict, reasons=tuple(reasons),
                 lone=tuple(lone), no_gpu=no_gpu, allow_cpu=allow_cpu)


def decide(pairs: Sequence[Pair], controls: Sequence[ControlCheck], lone: Sequence[Lone] = (), *,
           no_gpu: str | None = None, allow_cpu: bool = False) -> tuple[Verdict, list[str]]:
    sick = [f"control {c.cell or '(none)'} on {c.place} in {c.side}: {c.reason}" for c in controls if not c.ok]
    if sick:
        return Verdict.UNHEALTHY_CONTROL, sick
    reasons = []
    if no_gpu is not None and not allow_cpu:
        reasons.append(f"no GPU took part in {no_gpu}: cuDNN was never exercised, so the CPU alone proves "
                       "nothing (--allow-cpu accepts it)")
    if not pairs:
        reasons.append("no cell of BEFORE has a counterpart in AFTER")
    elif not any(p.signature_before for p in pairs):
        reasons.append("nothing failed with the signature in BEFORE: there is nothing to prove")
    else:
        reasons += [f"{p.place or p.gpu}: {p.before} → {p.after or '(none)'}: {why}" for p in pairs if not p.proven
                    for why in pair_failures(p)]
    reasons += [f"{c.place}: {c.cell} (no counterpart in BEFORE): {c.why}" for c in lone if c.why]
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
