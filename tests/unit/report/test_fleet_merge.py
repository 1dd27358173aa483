"""`convmatrix report DIR...` over result directories copied from many runners (issue 10):
a column per GPU generation with the control's health per generation, the same cell@gpu twice
(the newest kept, the notes naming the one dropped), and shards 1/N..N/N together equal to the
unsharded run. The 1,000 cells x 200 cases timing is bench/fleet_merge.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from convmatrix import matrix
from convmatrix.cli.main import main
from convmatrix.run import options
from testkit import env_json, record, write_result

GPUS = {  # gpu key: (name, capability), three generations
    "h100-sm90": ("NVIDIA H100 80GB HBM3", "9.0"),
    "a100-sm80": ("NVIDIA A100-SXM4-80GB", "8.0"),
    "l4-sm89": ("NVIDIA L4", "8.9"),
}
CASES = ["conv1d-fp16-k3", "conv2d-fp16-k3", "conv3d-bf16-k3"]
SIGNATURE = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."


def runner_result(run: Path, cell: str, gpu: str, *, control: bool, failing: tuple[str, ...] = (),
                  ended: str = "2026-12-02T00:01:00Z") -> Path:
    """One cell's results as a GPU runner's `convmatrix run` leaves them."""
    name, capability = GPUS[gpu]
    records = [record(case, "failed", SIGNATURE) if case in failing else record(case) for case in CASES]
    env = env_json(cell, device="cuda", ended=ended,
                   gpus=[{"index": 0, "name": name, "capability": capability, "memory_mb": 81920}])
    return write_result(run, cell, records, gpu=gpu, env=env,
                        cell={"gpu_key": gpu, "gpu": {"index": 0, "name": name, "capability": capability},
                              "control": control, "lane": "baremetal"})


def report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code = main(["report", *args, "--format", "json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def three_runners(tmp_path: Path) -> list[Path]:
    """A results directory per runner, each a GPU generation: control and candidate; the
    candidate hits the signature on the L4 only."""
    runs = []
    for gpu in GPUS:
        run = tmp_path / f"runner-{gpu}"
        runner_result(run, "control", gpu, control=True)
        runner_result(run, "candidate", gpu, control=False, failing=("conv2d-fp16-k3",) if gpu == "l4-sm89" else ())
        runs.append(run)
    return runs


def test_three_gpu_generations_merge_into_three_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = three_runners(tmp_path)
    code, data, _ = report(capsys, *map(str, runs))
    assert set(data["control"]["per_gpu"]) == set(GPUS)
    assert all(health == {"healthy": True, "reason": None} for health in data["control"]["per_gpu"].values())
    verdicts = {(c["cell"], c["gpu"]["key"]): c["verdict"] for c in data["cells"]}
    assert verdicts == {**{("control", g): "control" for g in GPUS},
                        ("candidate", "h100-sm90"): "ok", ("candidate", "a100-sm80"): "ok",
                        ("candidate", "l4-sm89"): "regression"}
    assert code == 1  # the regression on the L4
    main(["report", *map(str, runs), "--format", "text", "--fail-on", "never", "--color", "never"])
    text = capsys.readouterr().out
    lines = text.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("stack")))
    assert lines[header - 1].split() == ["Ampere", "Ada", "Hopper"]  # a column per generation, in its order
    assert lines[header].split()[1:] == ["a100-sm80", "l4-sm89", "h100-sm90"]


def test_the_same_cell_twice_keeps_the_newest_and_says_which_was_dropped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = three_runners(tmp_path)
    # The L4 candidate run again on a second L4 runner later, after the fix: it passes.
    rerun = tmp_path / "runner-l4-second"
    newer = runner_result(rerun, "candidate", "l4-sm89", control=False, ended="2026-12-03T00:01:00Z")
    code, data, _ = report(capsys, *map(str, runs), str(rerun))
    cells = {(c["cell"], c["gpu"]["key"]): c for c in data["cells"]}
    assert len(data["cells"]) == 6 and cells["candidate", "l4-sm89"]["verdict"] == "ok"
    assert cells["candidate", "l4-sm89"]["path"] == str(newer)
    (note,) = [n for n in data["notes"] if "two results" in n]
    assert note.startswith("candidate@l4-sm89: two results; kept " + str(newer))
    assert f"dropped {tmp_path / 'runner-l4-sm89' / 'candidate@l4-sm89'}" in note
    assert code == 0


@pytest.mark.parametrize("shards", [1, 2, 3, 5, 7, 51])
def test_shards_1_to_n_cover_every_cell_exactly_once(shards: int) -> None:
    ids = [c.id for c in matrix.load("matrix/nightly.toml").cells]
    dealt = [[i for i in ids if options.in_shard(i, ids, (index, shards))] for index in range(1, shards + 1)]
    assert sorted(i for shard in dealt for i in shard) == sorted(ids)
    assert max(map(len, dealt)) - min(map(len, dealt)) <= 1  # round-robin: a fair share each


def test_shards_together_report_as_the_unsharded_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cells = ["control", *(f"cell{i:02d}" for i in range(10))]
    whole, shards = tmp_path / "whole", 3
    for cell in cells:
        failing = ("conv1d-fp16-k3",) if cell in ("cell03", "cell07") else ()
        for run in (whole, tmp_path / f"shard{[options.in_shard(cell, cells, (i, shards)) for i in (1, 2, 3)].index(True) + 1}"):
            runner_result(run, cell, "h100-sm90", control=cell == "control", failing=failing)
    _, unsharded, _ = report(capsys, str(whole), "--fail-on", "never")
    _, merged, _ = report(capsys, *(str(tmp_path / f"shard{i}") for i in (1, 2, 3)), "--fail-on", "never")

    def without_paths(data: dict[str, Any]) -> dict[str, Any]:
        for cell in data["cells"]:
            cell.pop("path")
        return {**data, "cells": sorted(data["cells"], key=lambda c: c["cell"]),
                "cases": sorted(data["cases"], key=lambda c: (c["cell"], c["case"]))}

    assert without_paths(merged) == without_paths(unsharded)
    assert {c["cell"] for c in merged["cells"] if c["verdict"] == "regression"} == {"cell03", "cell07"}
