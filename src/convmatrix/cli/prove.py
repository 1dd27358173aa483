"""The ``convmatrix prove`` subcommand: BEFORE and AFTER results to a fix proof (see prove/proof.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from convmatrix import results
from convmatrix.cli.output import write_output
from convmatrix.errors import BadInput
from convmatrix.prove import proof as prove
from convmatrix.prove import render as render_prove


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "prove", help="prove a fix: the signature gone on every GPU generation, nothing new failing",
        description="Exit 0 proven, 1 not proven, 2 inputs that differ or cannot be read, 3 a control "
                    "that is unhealthy or does not pass.")
    p.add_argument("before", help="the results with the signature (a run directory or a cell results directory)")
    p.add_argument("after", help="the results with the fix (may be the same run as BEFORE, with --pair)")
    p.add_argument("--pair", metavar="AXIS=OLD:NEW",
                   help="pair each BEFORE cell whose AXIS is OLD with the AFTER cell that differs only in "
                        "AXIS, being NEW (knobs=default:pad=8, cudnn=bundled:9.5.1.17); default: the same cell id")
    p.add_argument("--control", help="the known-good control cell id (default: the cell marked control)")
    p.add_argument("--allow-cpu", action="store_true",
                   help="accept a proof in which no GPU took part (every cell ran on the CPU, so cuDNN was never "
                        "exercised); without it such a proof is not proven")
    p.add_argument("--format", choices=render_prove.FORMATS, default="text")
    p.add_argument("-o", "--output", type=Path, help="write the proof here instead of stdout")


def load(path: str, side: str) -> results.Loaded:
    loaded = results.load([path])
    if loaded.errors:
        raise BadInput("\n".join(f"{side}: {e}" for e in loaded.errors))
    if not loaded.results:
        raise BadInput(f"{side} {path}: no results here")
    return loaded


def run(args: argparse.Namespace) -> int:
    pairing = prove.parse_pair(args.pair) if args.pair else None
    proof = prove.prove(load(args.before, "BEFORE"), load(args.after, "AFTER"), before_paths=[args.before],
                        after_paths=[args.after], pairing=pairing, control=args.control, allow_cpu=args.allow_cpu)
    write_output(render_prove.render(proof, args.format), args.output)
    prove.judge(proof)
    return 0
