"""`convmatrix gc`: remove the venvs, stored results and cell images that are old or over budget,
never what a running job holds (run/gc.py)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from convmatrix.escape import one_line
from convmatrix.matrix.cells import ENGINES
from convmatrix.run import gc as run_gc


def amount(text: str) -> float:
    """A number of days or GB. argparse names the option itself ("argument --keep-days: ...")."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def add_parser(sub: Any) -> None:
    g = sub.add_parser("gc", help="remove the venvs, stored results and cell images that are old or over budget",
                       description="Remove what convmatrix keeps between runs (in $CONVMATRIX_HOME, default "
                                   "~/.cache/convmatrix, and the engine's images labelled by convmatrix) that was "
                                   "unused for more than --keep-days, then the oldest of the rest while it all "
                                   "weighs more than --max-gb; never what a running job holds.")
    g.add_argument("--keep-days", type=amount, default=run_gc.KEEP_DAYS, metavar="N",
                   help=f"remove what was last used more than N days ago (default {run_gc.KEEP_DAYS:g})")
    g.add_argument("--max-gb", type=amount, default=None, metavar="G",
                   help="then remove the least recently used until what is left weighs at most G GB")
    g.add_argument("--dry-run", action="store_true", help="say what would be removed, and why; remove nothing")
    g.add_argument("--engine", choices=ENGINES, default="docker",
                   help="the engine whose cell images to weigh (default docker; Podman keeps its own store)")


def run(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(one_line(line), flush=True)  # paths and image tags may hold anything: no escape reaches the terminal

    run_gc.collect(keep_days=args.keep_days, max_gb=args.max_gb, dry_run=args.dry_run, say=say,
                   engine_name=args.engine)
    return 0
