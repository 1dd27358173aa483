"""Run options given after `--` to the nox lane sessions: --out, --shard, --resume, --gpus,
--every-gpu, --rerun-blocking."""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from convmatrix.errors import BadInput

RUNS_DIR = Path("reports/runs")
LATEST = RUNS_DIR / "LATEST"


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    out: Path
    shard: tuple[int, int] | None  # (I, N), 1-based I
    resume: bool
    rerun_blocking: bool  # re-run failing cases with CUDA_LAUNCH_BLOCKING=1
    gpus: str | None
    every_gpu: bool = False  # one run per device instead of one per GPU generation
    suite_args: tuple[str, ...]  # passed to pytest unchanged (after a second `--`)


def new_run_dir() -> Path:
    return RUNS_DIR / time.strftime("%Y%m%d-%H%M%S")


def parse(args: Sequence[str], *, default_out: Path | None = None) -> RunOptions:
    args = list(args)
    suite_args: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, suite_args = args[:cut], args[cut + 1:]
    parser = argparse.ArgumentParser(prog="nox -s <lane> --", exit_on_error=False, add_help=False)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--shard")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--rerun-blocking", action="store_true")
    parser.add_argument("--gpus")
    parser.add_argument("--every-gpu", action="store_true")
    try:
        ns, unknown = parser.parse_known_args(args)
    except argparse.ArgumentError as exc:
        raise BadInput(f"run options: {exc}") from None
    if unknown:
        raise BadInput(f"run options: unknown {' '.join(unknown)} (suite options go after a second --)")
    if ns.gpus is not None and not re.fullmatch(r"[0-9]+(,[0-9]+)*", ns.gpus):
        raise BadInput(f"run options: --gpus {ns.gpus!r} is not a list of indices like 0,1")
    return RunOptions(
        out=ns.out or default_out or new_run_dir(),
        shard=parse_shard(ns.shard) if ns.shard else None,
        resume=ns.resume,
        rerun_blocking=ns.rerun_blocking,
        gpus=ns.gpus,
        every_gpu=ns.every_gpu,
        suite_args=tuple(suite_args),
    )


def parse_shard(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"([0-9]+)/([0-9]+)", text)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise BadInput(f"run options: --shard {text!r} is not I/N with 1 <= I <= N")
    return int(match[1]), int(match[2])


def in_shard(cell_id: str, all_ids: Sequence[str], shard: tuple[int, int] | None) -> bool:
    """Cells are dealt round-robin in id order, so every runner of a sharded job gets a fair share."""
    if shard is None:
        return True
    index, count = shard
    return sorted(all_ids).index(cell_id) % count == index - 1


def mark_latest(out: Path) -> None:
    RUNS_DIR.mkdir(parents=True, exist_ok=True)
    LATEST.write_text(f"{out}\n")


def latest() -> Path:
    try:
        return Path(LATEST.read_text().strip())
    except OSError:
        raise BadInput(f"{LATEST}: no run recorded yet: run `nox -s nightly` (or a lane) first") from None
