"""A fleet-scale run as the nightly leaves it, for the report's size and layout checks (issue 34
item 6; issue 49): every cell of matrix/nightly.toml on four GPU generations, each with the
catalogue's cases.

- write_fleet: what a nightly of a fleet looks like (issue 49): mostly green, a few regressions
  of different families on some GPUs (the signature on Hopper and Blackwell, an illegal address
  on Ampere, an OOM on Ada, a numeric mismatch on every GPU), and an outage: three stacks that
  never installed anywhere (cell.json's error and nothing else, as
  orchestrate.record_setup_failure leaves them).
- write_nightly: the stress case: a tenth of every candidate's cases failing with the signature."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from convmatrix import matrix
from testkit import REPO, load_suite_module

GPUS = (("a100-sm80", "NVIDIA A100-SXM4-80GB", "8.0", "Ampere"), ("l4-sm89", "NVIDIA L4", "8.9", "Ada"),
        ("h100-sm90", "NVIDIA H100 80GB HBM3", "9.0", "Hopper"), ("b200-sm100", "NVIDIA B200", "10.0", "Blackwell"))
SIGNATURE = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
ILLEGAL = "CUDA error: an illegal memory access was encountered"
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 22.03 GiB"
NUMERIC = "AssertionError: numeric mismatch: max abs diff 0.0312 > atol 0.001"
STAMP = "2026-12-05T01:00:00Z"
NEVER_INSTALLED = 3  # candidates whose venv never installed (the index did not answer)
# write_fleet's regressions: (the cell's index in the matrix, the GPU keys it fails on, the cases'
# prefix, the message, how many cases).
REGRESSIONS = ((10, ("h100-sm90", "b200-sm100"), "conv1d", SIGNATURE, 6),
               (20, ("a100-sm80",), "conv3d", ILLEGAL, 3),
               (30, ("l4-sm89",), "conv2d", OOM, 1),
               (40, tuple(key for key, *_ in GPUS), "conv2d", NUMERIC, 2))

# Whether a case fails, and how: (cell index, GPU key, case index, case id) -> its message or None.
Failing = Callable[[int, str, int, str], "str | None"]


def write_fleet(root: Path) -> Path:
    """root/<cell>@<gpu>@runner: the realistic fleet (above); returns root."""
    cases = [c.id for c in load_suite_module("catalog").CASES]
    chosen: dict[tuple[int, str, str], str] = {}
    for n, keys, prefix, message, count in REGRESSIONS:
        for key in keys:
            for case in [c for c in cases if c.startswith(prefix)][:count]:
                chosen[(n, key, case)] = message

    def fails(n: int, key: str, _: int, case: str) -> str | None:
        return chosen.get((n, key, case))

    return write(root, fails)


def write_nightly(root: Path, failing: float = 0.10) -> Path:
    """root/<cell>@<gpu>@runner for each cell and GPU, a tenth of each candidate's cases failing
    with the signature; returns root."""
    every = max(1, round(1 / failing)) if failing else 0

    def fails(n: int, _: str, i: int, __: str) -> str | None:
        return SIGNATURE if every and (i + n) % every == 0 else None

    return write(root, fails)


def write(root: Path, fails: Failing) -> Path:
    loaded = matrix.load(REPO / "matrix" / "nightly.toml")
    cases = [c.id for c in load_suite_module("catalog").CASES]
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
            said = {case: None if control else fails(n, key, i, case) for i, case in enumerate(cases)}
            meta["exit_code"] = 1 if any(said.values()) else 0
            (directory / "cell.json").write_text(json.dumps(meta))
            torch = f"{cell.torch}+{cell.cuda}" if cell.torch else "2.13.0+cu126"  # the host lane: its own
            env = {"schema": 1, "cell_id": cell.id, "torch": torch, "cuda": "12.6",
                   "cudnn": 91002, "cudnn_error": None, "python": "3.11.7", "platform": "Linux",
                   "machine": "x86_64", "driver": "580.65", "device": "cuda", "gpus": [gpu], "lane": cell.lane,
                   "image_id": None, "hostname": "runner", "pid": 1, "started": STAMP, "ended": STAMP,
                   "knobs": {}, "argv": []}
            (directory / "env.json").write_text(json.dumps(env))
            lines = []
            for case, message in said.items():
                lines.append(json.dumps({
                    "schema": 1, "cell_id": cell.id, "case": case, "nodeid": f"suites/test_conv.py::test_conv[{case}]",
                    "params": {}, "device": "cuda", "status": "failed" if message else "passed",
                    "knobs": {"device": "cuda", "cudnn_benchmark": False, "cudnn_deterministic": False,
                              "channels_last": False, "pad_channels": 0},
                    "exc_type": message.split(":")[0] if message and message.startswith("Assert") else
                    "RuntimeError" if message else None, "message": message,
                    "warnings": [], "numeric": None, "duration_s": 0.01, "worker": "main",
                    "started": STAMP, "ended": STAMP}) + "\n")
            (directory / "results.jsonl").write_text("".join(lines))
    return root
