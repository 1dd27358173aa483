"""Triage throughput against grep -F of the signature, on one generated multi-rank log.

    python bench/triage_throughput.py [--mb N] [--no-prefilter] [--python PY]

Writes a torchrun-style log of about N MB (8 ranks of training lines, a few harmless "cuda"
mentions, a cuDNN "Plan failed" warning and the fatal CUDNN_STATUS_NOT_SUPPORTED near the end)
into a temporary directory, times `grep -F CUDNN_STATUS_NOT_SUPPORTED FILE` and
`python -m convmatrix triage FILE --format json` (PYTHONPATH=src), each on a warm page cache, and
prints MB/s of each and the ratio ours/grep. ``--no-prefilter`` times triage's pure-Python scan
(what gzip and stdin get) instead of its ripgrep/grep prefilter. ``--python PY`` times the convmatrix
installed for that interpreter (a venv the wheel went into) instead of this checkout's src/: with
PATH cut to a folder without rg it shows what an install gets from the ripgrep wheel alone.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIGNATURE_LINE = (
    "[rank5]: RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in "
    "a non-contiguous input.\n"
)


def write_log(path: Path, mb: int) -> int:
    """Write the log; return the 1-based line of the fatal error."""
    target = mb * 1_000_000
    block_lines = []
    for step in range(1000):
        rank = step % 8
        block_lines.append(
            f"[rank{rank}]: 2024-06-01 12:{step // 60 % 60:02d}:{step % 60:02d},123 - INFO - train.py:120 - "
            f"step {step} loss {1 / (step + 1):.5f} lr 3.0e-04 grad_norm 1.07 img/s 812.4\n"
        )
        if step % 250 == 0:
            block_lines.append(f"[rank{rank}]: 2024-06-01 12:00:00,000 - INFO - peak memory on cuda:{rank} 12.3 GiB\n")
    block = "".join(block_lines).encode()
    lines_per_block = len(block_lines)
    blocks = max(1, target // len(block))
    line = 0
    with path.open("wb") as out:
        for i in range(blocks):
            out.write(block)
            line += lines_per_block
            if i == blocks - 2:
                out.write(
                    b"[rank5]: UserWarning: Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:"
                    b" cudnnFinalize Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_SUPPORTED\n"
                )
                line += 1
        out.write(SIGNATURE_LINE.encode())
        fatal = line + 1
        out.write(block[:5000].rsplit(b"\n", 1)[0] + b"\n")
    return fatal


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, bytes]:
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, env=env, check=False)
    return time.perf_counter() - start, done.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=500, help="log size in MB (default 500)")
    ap.add_argument("--no-prefilter", action="store_true", help="time the pure-Python scan (gzip, stdin)")
    ap.add_argument("--python", help="time the convmatrix installed for this interpreter, not src/")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.log"
        fatal = write_log(path, args.mb)
        size = path.stat().st_size / 1e6
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=False)  # warm the page cache
        grep_s, _ = timed(["grep", "-F", "CUDNN_STATUS_NOT_SUPPORTED", str(path)])
        python = args.python or sys.executable
        env = dict(os.environ) if args.python else {**os.environ, "PYTHONPATH": str(REPO / "src")}
        if args.no_prefilter:
            env["CONVMATRIX_TRIAGE_GREP"] = "0"
        ours_s, out = timed([python, "-m", "convmatrix", "triage", str(path), "--format", "json"], env)
        try:
            result = json.loads(out)
            found = f"family={result['family']} line={result['line']} (expected {fatal}) rank={result['rank']}"
        except (ValueError, KeyError):
            found = f"no JSON result: {out[:200]!r}"
        # Asked of the timed interpreter: the rg its own ripgrep wheel put beside it counts too.
        ask = "from convmatrix.triage.scan import ripgrep; print(ripgrep() or '')"
        rg = subprocess.run([python, "-c", ask], env=env, capture_output=True, text=True, check=False).stdout.strip()
        prefilter = f"ripgrep ({rg})" if rg else "grep" if shutil.which("grep") else "none (pure Python)"
        if args.no_prefilter:
            prefilter = "none (pure Python)"
        print(f"log: {size:.0f} MB, {fatal} lines; triage prefilter: {prefilter}")
        print(f"grep -F:          {grep_s:6.2f} s  {size / grep_s:8.0f} MB/s")
        print(f"convmatrix triage: {ours_s:6.2f} s  {size / ours_s:8.0f} MB/s  {found}")
        print(f"ratio ours/grep:  {grep_s / ours_s:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
