"""The atlas site's load-and-filter time at scale, printed, never asserted (issue 40: goal under a
second for a 10,000-row atlas). Needs chromium and websocket-client (tests/requirements.txt).

    python bench/atlas.py                 # 10,000 stacks (grid rows) x 4 GPU generations, 2 fleets
    python bench/atlas.py --rows 2000     # a smaller one

A row is a stack (torch x CUDA x cuDNN) of the grid, each with a cell on every generation from each
fleet (a tenth failing, some fleets disagreeing), so the page holds rows x generations cells and the
CSV rows x generations x fleets measured rows. The bundles are made as model objects (no export), the
site is written by atlas/site.py, and chromium (headless, tests/cdp.py) opens index.html from disk:
`load` is navigation start to the load event (the page parsed, styled, and site.js's first pass
done), then each filter is timed from the change to the next frame after it (layout included).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

import cdp  # noqa: E402
from convmatrix.atlas import merge, site, sources  # noqa: E402
from convmatrix.atlas.model import Bundle, Case, Cell, Gpu, Run, Stack  # noqa: E402

GPUS = (Gpu(model="Tesla V100", capability="7.0", generation="sm70"),
        Gpu(model="NVIDIA A100", capability="8.0", generation="sm80"),
        Gpu(model="NVIDIA H200", capability="9.0", generation="sm90"),
        Gpu(model="NVIDIA B200", capability="10.0", generation="sm100"))
FAMILIES = ("cudnn_not_supported", "cudnn_arch_mismatch", "numeric_mismatch", "crash")


def stack(i: int) -> Stack:
    return Stack(torch=f"2.{i // 400}.{i % 400 // 40}+cu12{i % 10}", cuda=f"12.{i % 10}", cudnn=f"9.{i % 40}.{i % 7}",
                 driver="570.86.10", image_digest=None, lane="baremetal")


def bundles(rows: int, fleets: int) -> list[Bundle]:
    made = []
    for f in range(fleets):
        cells = []
        for i in range(rows):
            for g, gpu in enumerate(GPUS):
                fails = (i * 7 + g * 3 + f * (i % 3 == 0)) % 10 == 0
                case = (Case(case=f"conv2d-fp16-{i % 50}", verdict="regression", outcome="fail",
                             family=FAMILIES[(i + g) % len(FAMILIES)], subcode=3000 + i % 5, reason="bench")
                        if fails else Case(case=f"conv2d-fp16-{i % 50}", verdict="ok", outcome="pass"))
                cells.append(Cell(stack=stack(i), gpu=gpu, verdict="regression" if fails else "ok", cases=(case,)))
        made.append(Bundle(fleet=f"fleet-{f}", created="2026-12-05", tool="bench",
                           runs=(Run(run=f"{f:016x}", date="2026-12-05", cells=tuple(cells)),)))
    return made


def change(element: str, value: str, event: str = "change") -> str:
    return (f"(e => {{ e.value = {json.dumps(value)}; e.dispatchEvent(new Event('{event}')); }})"
            f"(document.getElementById('{element}'));")


FILTERS = (
    ("GPU generation sm90", change("f-gen", "2")),
    ("torch (the newest)", change("f-gen", "") + "(t => { t.value = t.options[t.options.length - 1].value;"
     " t.dispatchEvent(new Event('change')); })(document.getElementById('f-torch'));"),
    ("cuDNN 9.10 to 9.20", change("f-torch", "") + change("f-cudnn-min", "9.10", "input")
     + change("f-cudnn-max", "9.20", "input")),
    ("family crash", change("f-family", "crash")),
    ("search 'fleet-1 3002'", change("f-search", "fleet-1 3002", "input")),
)


def timed(page: cdp.Page, script: str) -> float:
    """Milliseconds from the change to the frame after it (layout and paint included)."""
    return float(page.evaluate("new Promise(done => { const t0 = performance.now(); " + script +
                               " document.body.offsetHeight; requestAnimationFrame(() => setTimeout(() =>"
                               " done(performance.now() - t0), 0)); })"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000, help="stacks: rows of the grid (default 10,000)")
    parser.add_argument("--fleets", type=int, default=2)
    args = parser.parse_args()
    executable = cdp.chromium()
    if executable is None:
        sys.exit("no chromium on PATH (apt-get install chromium)")
    started = time.perf_counter()
    atlas = merge.merge(bundles(args.rows, args.fleets))
    with tempfile.TemporaryDirectory(prefix="convmatrix-atlas-bench-") as folder:
        out = Path(folder) / "site"
        count = site.publish(out, atlas, sources.load())
        built = time.perf_counter() - started
        size = (out / "index.html").stat().st_size
        csv_rows = sum(1 for _ in (out / "atlas.csv").open()) - 1
        print(f"atlas: {len(atlas.rows):,} grid rows x {len(atlas.columns)} columns, {args.fleets} fleets, "
              f"{csv_rows:,} CSV rows; {count:,} files written in {built:.1f} s; index.html {size / 1e6:.1f} MB")
        with cdp.browser(executable) as page:
            page.open((out / "index.html").as_uri())
            load = float(page.evaluate("(() => { const n = performance.getEntriesByType('navigation')[0];"
                                       " return n.loadEventEnd - n.startTime; })()"))
            shown = page.evaluate("document.getElementById('shown').textContent")
            print(f"load (navigation start to the load event, {shown} rows match): {load:.0f} ms")
            worst = 0.0
            for name, script in FILTERS:
                spent = timed(page, script)
                worst = max(worst, spent)
                left = page.evaluate("document.getElementById('shown').textContent")
                print(f"filter {name}: {spent:.0f} ms ({left} rows match)")
            total = load + worst
            print(json.dumps({"rows": len(atlas.rows), "load_ms": round(load), "worst_filter_ms": round(worst),
                              "load_and_filter_ms": round(total), "goal_ms": 1000,
                              "ratio_to_goal": round(total / 1000, 2)}))


if __name__ == "__main__":
    main()
