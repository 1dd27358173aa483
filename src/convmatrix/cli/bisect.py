"""The ``convmatrix bisect`` subcommand: the first published version between a good and a bad cell,
on one axis, by running real cells (see prove/bisect.py)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from convmatrix import interrupts, matrix
from convmatrix.cli.output import write_output
from convmatrix.errors import InfrastructureError, NotGreen
from convmatrix.escape import one_line
from convmatrix.prove import bisect
from convmatrix.run import options

FORMATS = ("text", "json")
BISECTS = Path("reports/bisect")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bisect", help="find the first published version (cuDNN, torch, CUDA, base) where the selected cases fail",
        description="Each step is an ordinary cell run into --out. Exit 0 found, 1 not bisectable (both ends "
                    "agree, a flaky good end, a gap that cannot be judged), 2 bad input, 4 an end could not "
                    "be installed. Suite options after --.")
    p.add_argument("-m", "--matrix", default=None, help="matrix file (default as for `matrix`)")
    p.add_argument("--good", required=True, metavar="CELL", help="a cell of the matrix that passes the selected cases")
    p.add_argument("--bad", required=True, metavar="CELL", help="a cell of the matrix that fails them")
    p.add_argument("--axis", choices=bisect.AXES, default=None,
                   help="the axis to bisect (default: the first that differs, in the order cudnn, torch, cuda, "
                        "base); the others are held at the good cell's values")
    p.add_argument("--bases", metavar="TAG,TAG,...", help="--axis base: the base tags to bisect over, in order")
    p.add_argument("--out", type=Path, help="the steps' run directories (default reports/bisect/<stamp>/)")
    p.add_argument("--no-reuse", action="store_true",
                   help="run every step, even where a stored result of the same stack exists (--reuse-results)")
    p.add_argument("--gpus", help="run the steps on these GPU indices (as `run --gpus`)")
    p.add_argument("--allow-cpu", action="store_true",
                   help="run CUDA stacks on a runner without a GPU, on its CPU (as `run --allow-cpu`; the "
                        "matrix's allow_cpu = true and $CONVMATRIX_ALLOW_CPU=1 say the same)")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("-o", "--output", type=Path, help="write the answer here instead of stdout")
    p.add_argument("suite_args", nargs="*", metavar="SUITE OPTION",
                   help="after --: the suite's options for every step (-k to select the cases)")


def run(args: argparse.Namespace) -> int:
    loaded = matrix.load(args.matrix or matrix.default_matrix())
    good, bad = loaded.cell(args.good), loaded.cell(args.bad)
    plan = bisect.plan(good, bad, axis=args.axis, bases=bisect.parse_bases(args.bases))
    out = args.out or BISECTS / time.strftime("%Y%m%d-%H%M%S")
    run_options = ["--out", str(out), *(["--gpus", args.gpus] if args.gpus else []),
                   *(["--allow-cpu"] if args.allow_cpu else []), "--", *args.suite_args]
    opts = options.parse(run_options)
    live = sys.stdout if args.format == "text" and args.output is None else sys.stderr

    def say(line: str) -> None:
        print(one_line(line), file=live, flush=True)

    def harness(line: str) -> None:  # what the lanes say: beside the steps, never in the answer
        print(f"  {one_line(line)}", file=sys.stderr, flush=True)

    for line in bisect.header_lines(plan):
        say(line)
    runner = bisect.CellRunner(loaded, plan, opts, harness, reuse=not args.no_reuse)
    with interrupts.interruptible():
        interrupts.die_with_parent()
        answer = bisect.search(plan, runner, on_step=lambda step: say(bisect.step_line(plan, step)))
    if args.format == "json":
        write_output(bisect.render_json(answer, out), args.output)
    elif args.output is not None:
        write_output(bisect.render_text(answer), args.output)
    else:
        write_output("".join(f"{line}\n" for line in bisect.answer_lines(answer)), None)
    if answer.infrastructure:
        raise InfrastructureError(answer.reason or "an end could not be run")
    if not answer.found:
        raise NotGreen(f"not bisectable: {answer.reason}")
    return 0
