"""`convmatrix matrix`: the expanded cells, and what was pruned and why."""

from __future__ import annotations

import argparse
import json
from typing import Any

from convmatrix import matrix
from convmatrix.run import cases as run_cases


def add_parser(sub: Any) -> None:
    m = sub.add_parser("matrix", help="the expanded cells, and what was pruned and why")
    m.add_argument(
        "-m", "--matrix", default=None,
        help=f"matrix file (default: $CONVMATRIX_MATRIX or {matrix.DEFAULT_MATRIX})",
    )
    m.add_argument("--format", choices=("table", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    loaded = matrix.load(args.matrix or matrix.default_matrix())
    # The case files it names are checked as `run` checks them (every problem a line, exit 2):
    # a matrix that `matrix` shows is one that `run` accepts.
    run_cases.check(list(loaded.cases))
    print(render_matrix(loaded, args.format), end="")
    return 0


def render_matrix(m: matrix.Matrix, fmt: str) -> str:
    from tabulate import tabulate

    cells = [
        {"id": c.id, **c.values(), "expected_cudnn": c.expected_cudnn(), "control": c == m.control} for c in m.cells
    ]
    pruned = [{**p.values, "reason": p.reason} for p in m.pruned]
    if fmt == "json":
        return json.dumps({"name": m.name, "path": str(m.path), "cells": cells, "pruned": pruned}, indent=2) + "\n"
    rows = [
        [
            f"{c['id']} (control)" if c["control"] else c["id"],
            c["lane"],
            c["torch"],
            c["cuda"],
            c["cudnn"] if c["cudnn"] != "bundled" else f"bundled {c['expected_cudnn']}".strip(),
            c["python"],
            c["base"],
        ]
        for c in cells
    ]
    out = [f"{m.path}: {m.name}: {len(cells)} cells, {len(pruned)} pruned", ""]
    out.append(
        tabulate(
            rows,
            headers=["cell", "lane", "torch", "cuda", "cudnn", "python", "base"],
            tablefmt="simple",
            disable_numparse=True,
        )
    )
    if pruned:
        prows = [[p["lane"], p["torch"], p["cuda"], p["cudnn"], p["python"], p["reason"]] for p in pruned]
        out += [
            "",
            "pruned:",
            tabulate(
                prows,
                headers=["lane", "torch", "cuda", "cudnn", "python", "why"],
                tablefmt="simple",
                disable_numparse=True,
            ),
        ]
    return "\n".join(out) + "\n"
