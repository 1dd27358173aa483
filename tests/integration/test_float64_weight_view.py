"""Issue 50's case-file gaps through the real suite on the CPU: `dtype = "float64"` (cuDNN's double
convolutions) and a view of the weight (`weight_strides`, `weight_storage_offset`: a shard of a flat
parameter buffer) run as written, a scaled case keeps both, the results line records the weight's
view, and a wrong float64 result (one weight off by 1e-6 standard deviations) fails its bound."""

from __future__ import annotations

from pathlib import Path

import pytest

import suiterun

pytestmark = pytest.mark.slow

CASES = """
[[case]]
name = "double"
op = "conv2d"
input = [2, 8, 12, 12]
out_channels = 16
kernel = 3
padding = 1
dtype = "float64"
direction = "backward"

[[case]]
name = "shard"
op = "conv_transpose2d"
input = [2, 8, 12, 12]
out_channels = 4
kernel = 3
dtype = "float64"
weight_strides = [1, 8, 96, 32]
weight_storage_offset = 7
direction = "backward"

[[case]]
name = "shard_big"
op = "conv2d"
input = [8, 512, 64, 64]
out_channels = 512
kernel = 3
padding = 1
dtype = "bfloat16"
weight_strides = [9216, 18, 6, 2]
weight_storage_offset = 123456
"""
DOUBLE = "gaps-conv2d-fp64-k3-p1-bwd-double"
SHARD = "gaps-conv_transpose2d-fp64-k3-wview1x8x96x32-woffset7-bwd-shard"
BIG = "gaps-conv2d-bf16-k3-p1-wview9216x18x6x2-woffset123456-shard_big"


def test_float64_and_a_weight_view_run_on_the_cpu(tmp_path: Path) -> None:
    cases = tmp_path / "gaps.toml"
    cases.write_text(CASES)
    run = suiterun.run_suite(tmp_path / "run", "-q", "--cases", str(cases), "-k", "gaps")
    assert run.returncode == 0, run.output[-3000:]
    found = run.by_case()
    assert set(found) == {DOUBLE, SHARD, BIG}
    assert all(r["status"] == "passed" for r in found.values()), [(r["case"], r["message"]) for r in found.values()]
    assert found[DOUBLE]["numeric"]["unit_roundoff"] == 2.0**-53
    assert found[SHARD]["view"]["weight_strides"] == [1, 8, 96, 32]
    assert found[SHARD]["view"]["weight_storage_offset"] == 7
    # Scaled down, the weight's view keeps its order and gaps (every other element) and its offset's
    # alignment (123456 = 4096 * 30 + 576 -> 4096 + 576).
    big = found[BIG]
    assert big["scaled"] is True
    _out, per, kh, kw = big["shapes"]["weight"]
    assert big["view"]["weight_strides"] == [per * kh * kw * 2, kh * kw * 2, kw * 2, 2]
    assert big["view"]["weight_storage_offset"] == 4096 + 576


def test_a_wrong_float64_result_fails_its_bound(tmp_path: Path) -> None:
    cases = tmp_path / "gaps.toml"
    cases.write_text(CASES)
    run = suiterun.run_suite(tmp_path / "run", "-q", "--cases", str(cases), "-k", "double",
                             faults={"perturb": {DOUBLE: 1e-6}}, cases=(DOUBLE,))
    assert run.returncode == 1, run.output[-3000:]
    (record,) = run.records()
    assert record["status"] == "failed" and record["message"].startswith("numeric mismatch:"), record["message"]
