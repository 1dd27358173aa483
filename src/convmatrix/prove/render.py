"""A fix proof (prove.Proof) as text for a terminal or log, or as markdown for a CI job summary:
the verdict first, then per GPU generation each case that failed with the signature before and
what it does after (and anything that newly fails), the AFTER cells no BEFORE cell pairs with, then
the controls and the unpaired cells. A proof in which no GPU took part says so on the line after
its title, in every format."""

from __future__ import annotations

from collections.abc import Iterable

from convmatrix.escape import markdown_cell, markdown_line, one_line
from convmatrix.prove.proof import CaseLine, Pair, Proof, Verdict
from convmatrix.report.markdown import row
from convmatrix.results.outcomes import Outcome

FORMATS = ("text", "markdown")
HEADERS = ["case", "before", "after", "change"]
HEADLINES = {
    Verdict.PROVEN: "PROVEN: the signature is gone on every GPU generation and host, nothing new fails, the control "
                    "passes in both",
    Verdict.NOT_PROVEN: "NOT PROVEN",
    Verdict.UNHEALTHY_CONTROL: "NO VERDICT: a control is unhealthy or does not pass",
}
PROVEN_ON_CPU = ("PROVEN on the CPU alone (--allow-cpu): the signature is gone, nothing new fails, the control "
                 "passes in both")
SHOWN_UNPAIRED = 5


def render(proof: Proof, fmt: str) -> str:
    return (markdown if fmt == "markdown" else text)(proof)


def outcome(o: Outcome, family: str | None) -> str:
    return f"{o.value} {family}" if family else o.value


def cells_of(line: CaseLine) -> list[str]:
    return [line.case, outcome(line.before, line.before_family), outcome(line.after, line.after_family),
            line.change.value]


def by_generation(pairs: Iterable[Pair]) -> dict[str, list[Pair]]:
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(f"{pair.gpu} ({pair.generation})" if pair.generation != pair.gpu else pair.gpu,
                          []).append(pair)
    return groups


def header(proof: Proof) -> str:
    pairing = f"--pair {proof.pairing.text}" if proof.pairing else "the same cell ids"
    return f"BEFORE {' '.join(proof.before)}, AFTER {' '.join(proof.after)}, paired by {pairing}"


def control_lines(proof: Proof) -> list[str]:
    lines = [f"control {c.cell or '(none)'} on {c.place} in {c.side}: {c.reason}" for c in proof.controls if not c.ok]
    if lines:
        return lines
    passing: dict[str, list[str]] = {}
    for check in proof.controls:
        places = passing.setdefault(str(check.cell), [])
        if check.place not in places:
            places.append(check.place)
    return [f"control {cell} passes in BEFORE and AFTER on {', '.join(sorted(places))}"
            for cell, places in passing.items()]


LONE_TITLE = "AFTER cells no BEFORE cell pairs with (judged against the AFTER control)"


def lone_lines(proof: Proof) -> list[str]:
    """Each AFTER cell no BEFORE cell pairs with that blocks the proof, then the others in a line."""
    lines = [f"{c.cell}@{c.place}: {c.verdict.value}: {c.why}" for c in proof.lone if c.why]
    fine = [f"{c.cell}@{c.place} ({c.verdict.value})" for c in proof.lone if not c.why]
    if fine:
        more = f" and {len(fine) - SHOWN_UNPAIRED} more" if len(fine) > SHOWN_UNPAIRED else ""
        lines.append(f"nothing against the proof: {', '.join(fine[:SHOWN_UNPAIRED])}{more}")
    return lines


def unpaired_line(proof: Proof) -> list[str]:
    if not proof.unpaired:
        return []
    shown = ", ".join(proof.unpaired[:SHOWN_UNPAIRED])
    more = f" and {len(proof.unpaired) - SHOWN_UNPAIRED} more" if len(proof.unpaired) > SHOWN_UNPAIRED else ""
    return [f"not paired (no counterpart in AFTER, no signature before): {shown}{more}"]


def pair_title(pair: Pair) -> str:
    on = f" on {pair.host}" if pair.place and pair.place != pair.gpu else ""
    return f"{pair.before} → {pair.after or '(no counterpart)'}{on}: {pair.state}"


def headline(proof: Proof) -> str:
    """The verdict and, when it is not proven, its first reason: the reason is the first line."""
    said = PROVEN_ON_CPU if proof.verdict == Verdict.PROVEN and proof.no_gpu else HEADLINES[proof.verdict]
    if proof.verdict != Verdict.NOT_PROVEN or not proof.reasons:
        return said
    more = f" (and {len(proof.reasons) - 1} more reason(s), below)" if len(proof.reasons) > 1 else ""
    return f"{said}: {proof.reasons[0]}{more}"


def notice(proof: Proof) -> list[str]:
    """The line under the title of a proof in which no GPU took part (none when one did)."""
    said = proof.cpu_notice
    return [said] if said else []


def further_reasons(proof: Proof) -> list[str]:
    """The reasons the headline did not give (all of them for a verdict that states none)."""
    return list(proof.reasons[1:] if proof.verdict == Verdict.NOT_PROVEN else proof.reasons)


def text(proof: Proof) -> str:
    out = [f"convmatrix prove: {one_line(header(proof))}", *notice(proof), "", one_line(headline(proof))]
    out += [f"- {one_line(r)}" for r in further_reasons(proof)]
    for generation, pairs in by_generation(proof.pairs).items():
        out += ["", one_line(generation)]
        for pair in pairs:
            out.append(f"  {one_line(pair_title(pair))}")
            out += [f"    ! {one_line(p)}" for p in pair.problems]
            if pair.lines:
                from tabulate import tabulate  # here: it imports importlib.metadata (slow start-up)

                table = tabulate([[one_line(c) for c in cells_of(line)] for line in pair.lines], headers=HEADERS,
                                 tablefmt="simple",
                                 disable_numparse=True)
                out += [f"    {row}" for row in table.splitlines()]
    if proof.lone:
        out += ["", LONE_TITLE, *(f"  {one_line(line)}" for line in lone_lines(proof))]
    out += ["", *(one_line(line) for line in control_lines(proof) + unpaired_line(proof))]
    return "\n".join(out) + "\n"


def markdown(proof: Proof) -> str:
    out = [f"## Fix proof: {markdown_line(headline(proof))}", *(markdown_line(n) for n in notice(proof)), "",
           markdown_line(header(proof)), ""]
    out += [f"- {markdown_line(r)}" for r in further_reasons(proof)]
    for generation, pairs in by_generation(proof.pairs).items():
        out += ["", f"### {markdown_line(generation)}", ""]
        for pair in pairs:
            out += [f"**{markdown_line(pair_title(pair))}**", ""]
            out += [f"- {markdown_line(p)}" for p in pair.problems]
            if pair.lines:
                out += [row(map(markdown_cell, HEADERS)), row(["---"] * len(HEADERS))]
                out += [row(map(markdown_cell, cells_of(line))) for line in pair.lines]
            out.append("")
    if proof.lone:
        out += ["", f"### {markdown_line(LONE_TITLE)}", "", *(f"- {markdown_line(line)}" for line in lone_lines(proof)),
                ""]
    out += [f"- {markdown_line(line)}" for line in control_lines(proof) + unpaired_line(proof)]
    return "\n".join(out) + "\n"
