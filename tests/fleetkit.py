"""A fleet-scale run as the nightly leaves it, for the report's size and layout checks (issue 34
item 6): every cell of matrix/nightly.toml on four GPU generations, each with the catalogue's
cases, a tenth of a candidate's cases failing with the signature, and a few cells that never
installed (cell.json's error and nothing else, as orchestrate.record_setup_failure leaves them)."""

from __future__ import annotations

import json
from pathlib import Path

from convmatrix import matrix
from testkit import REPO, load_suite_module

GPUS = (("a100-sm80", "NVIDIA A100-SXM4-80GB", "8.0", "Ampere"), ("l4-sm89", "NVIDIA L4", "8.9", "Ada"),
        ("h100-sm90", "NVIDIA H100 80GB HBM3", "9.0", "Hopper"), ("b200-sm100", "NVIDIA B200", "10.0", "Blackwell"))
SIGNATURE = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
STAMP = "2026-12-05T01:00:00Z"
NEVER_INSTALLED = 3  # candidates whose venv never installed (the index did not answer)


def write_nightly(root: Path, failing: float = 0.10) -> Path:
    """root/<cell>@<gpu>@runner for each cell and GPU; returns root."""
    loaded = matrix.load(REPO / "matrix" / "nightly.toml")
    cases = [c.id for c in load_suite_module("catalog").CASES]
    every = max(1, round(1 / failing)) if failing else 0
    for n, cell in enumerate(loaded.cells):
        control = cell == loaded.control
        broken = not control and n <= NEVER_INSTALLED
        for key, name, capability, generation in GPUS:
            directory = root / f"{cell.id}@{key}@runner"
            directory.mkdir(parents=True)
            gpu = {"index": 0, "name": name, "capability": capability, "generation": generation}
            meta = {"schema": 1, "cell": cell.id, "lane": cell.lane, "requested": cell.values(), "knobs": "default",
                    "expected": {}, "control": control, "gpu_key": key, "host": "runner", "gpu": gpu,
                    "python": "python3", "started": STAMP, "ended": STAMP, "matrix": "matrix/nightly.toml"}
            if broken:
                meta.update(error="venv install failed: pip could not reach https://download.pytorch.org/whl/cu126",
                            exit_code=255)
                (directory / "cell.json").write_text(json.dumps(meta))
                continue
            meta["exit_code"] = 1
            (directory / "cell.json").write_text(json.dumps(meta))
            torch = f"{cell.torch}+{cell.cuda}" if cell.torch else "2.13.0+cu126"  # the host lane: its own
            env = {"schema": 1, "cell_id": cell.id, "torch": torch, "cuda": "12.6",
                   "cudnn": 91002, "cudnn_error": None, "python": "3.11.7", "platform": "Linux",
                   "machine": "x86_64", "driver": "580.65", "device": "cuda", "gpus": [gpu], "lane": cell.lane,
                   "image_id": None, "hostname": "runner", "pid": 1, "started": STAMP, "ended": STAMP,
                   "knobs": {}, "argv": []}
            (directory / "env.json").write_text(json.dumps(env))
            lines = []
            for i, case in enumerate(cases):
                bad = not control and every and (i + n) % every == 0
                lines.append(json.dumps({
                    "schema": 1, "cell_id": cell.id, "case": case, "nodeid": f"suites/test_conv.py::test_conv[{case}]",
                    "params": {}, "device": "cuda", "status": "failed" if bad else "passed",
                    "knobs": {"device": "cuda", "cudnn_benchmark": False, "cudnn_deterministic": False,
                              "channels_last": False, "pad_channels": 0},
                    "exc_type": "RuntimeError" if bad else None, "message": SIGNATURE if bad else None,
                    "warnings": [], "numeric": None, "duration_s": 0.01, "worker": "main",
                    "started": STAMP, "ended": STAMP}) + "\n")
            (directory / "results.jsonl").write_text("".join(lines))
    return root
