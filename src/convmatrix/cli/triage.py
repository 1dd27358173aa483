"""The ``convmatrix triage`` subcommand: a failed job's log to its first cause (see triage/scan.py)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from convmatrix.errors import BadInput
from convmatrix.escape import one_line
from convmatrix.results import known
from convmatrix.triage import known_in_log, remedies, scan


def _context(args: argparse.Namespace) -> int:
    value = str(args.context)
    try:
        n = int(value)
    except ValueError:
        raise BadInput(f"{args.logfile}: --context: not a number of lines: {value!r}") from None
    if n < 0:
        raise BadInput(f"{args.logfile}: --context must be >= 0, got {n}")
    return n


def add_parser(subparsers: Any) -> None:
    t = subparsers.add_parser("triage", help="a failed job's log: first cause, family, remedies, proof")
    t.add_argument("logfile", help="the log (plain or .gz); - for stdin")
    t.add_argument(
        "--context", default=str(scan.DEFAULT_CONTEXT), help="lines before the cause (default 100)"
    )
    t.add_argument("--format", choices=("text", "json"), default="text")


def run(args: argparse.Namespace) -> int:
    result = scan.scan_path(args.logfile, _context(args))
    for warning in result["warnings"]:  # a damaged .gz: what came before the damage is reported
        print(f"convmatrix: warning: {one_line(warning)}", file=sys.stderr)
    # Known upstream issues the log's versions and families point at (results/known_issues.toml).
    # The head is read for its stack once: the known issues and the proof both take it.
    stack = known_in_log.stack_from_lines(known_in_log.read_head(args.logfile))
    matches = known.match_stack(stack, known_in_log.families_of(result))
    # The proof on the log's own stack (issue 49), or the shipped example's, saying it read none.
    note, verify = remedies.proof_on_stack(result["family"], stack)
    if result["family"] is not None:
        result = {**result, "verify": verify, "stack": dataclasses.asdict(stack), "stack_note": note}
    if args.format == "json":
        print(json.dumps({**result, "known": [known_in_log.as_json(issue) for issue in matches]}, indent=2))
    else:
        print(render_text(result, args.logfile) + render_known(matches), end="")
    return 0


def render_known(matches: list[known.KnownIssue]) -> str:
    """One line per known issue the log points at, after the rest (a log cannot show a case's
    shape, so an entry's case conditions are named)."""
    out = []
    for issue in matches:
        when = f" [if the conv is: {issue.conditions}]" if issue.conditions else ""
        out.append(one_line(known.annotation(issue) + when))
    return "".join(line + "\n" for line in out)


def render_text(r: dict[str, Any], name: str) -> str:
    """The triage in words for a terminal: every text from the log through escape.one_line (a log
    may hold escape sequences, a title-setting OSC, a terminal reset)."""
    out: list[str] = []
    name = one_line(name)
    if r["family"] is None:
        out.append(f"{name}: no known failure signature found")
        return "\n".join(out) + "\n"
    where = ", ".join(
        f"{key} {r[key]}" for key in ("rank", "node", "device") if r[key] is not None
    ) or "rank unknown"
    verdict = "fatal" if r["fatal"] else "not fatal (warning only: the run survived it)"
    out.append(f"{name}: {r['family']} at line {r['line']} ({one_line(where)}), {verdict}")
    out.append(f"  {one_line(r['text'])}")
    if r["first_warning"]:
        w = r["first_warning"]
        out.append(f"first related warning: line {w['line']} ({w['family']})")
        out.append(f"  {one_line(w['text'])}")
    if r["context_before"]:
        out.append(f"context ({len(r['context_before'])} lines before line {r['line']}):")
        out.extend(f"  | {one_line(line)}" for line in r["context_before"])
    others = [f for f in r["families"] if f["family"] != r["family"]]
    if others:
        out.append("other families seen:")
        out.extend(
            f"  {f['family']} at line {f['line']}" + ("" if f["fatal"] else " (warning)") for f in others
        )
    if r["collateral"]:
        total = len(r["collateral"]) + r["collateral_omitted"]
        out.append(f"collateral ({total} lines after the cause, consequences of it):")
        out.extend(
            f"  line {c['line']}" + (f" rank {c['rank']}" if c["rank"] is not None else "") + f": {one_line(c['text'])}"
            for c in r["collateral"]
        )
        if r["collateral_omitted"]:
            out.append(f"  ... and {r['collateral_omitted']} more")
    out.append("remedies:")
    out.extend(f"  - {item}" for item in r["remedies"])
    out.append("verify the fix:")
    if r.get("stack_note"):
        out.append(f"  ({one_line(r['stack_note'])})")
    out.extend(f"  $ {cmd}" for cmd in r["verify"])
    return "\n".join(out) + "\n"
