"""`convmatrix prove` over real suite runs (CPU): a knob fix, where a fault raises the signature in
every conv whose input channels are not a multiple of 8, so that `--pad-channels 8` removes it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import suiterun
from convmatrix.cli.main import main
from testkit import REPO, ran

STACK = "baremetal-torch2.5.1-cu124-cudnn9.5.1.17-py3.11"
CONTROL = "baremetal-torch2.5.1-cu124-cudnnbundled-py3.11"
SELECT = "channels_last_odd or whisper"  # odd channel counts (the fault fires) and aligned ones (it never does)
UNALIGNED = {"unaligned": {"*": 8}}
GPUS = {"a100-sm80": ("NVIDIA A100-SXM4-80GB", "8.0"), "h200-sm90": ("NVIDIA H200", "9.0")}


def cell_json(cell_id: str, cudnn: str, knobs: str, *, control: bool = False) -> dict[str, Any]:
    requested = {"lane": "baremetal", "torch": "2.5.1", "cuda": "cu124", "cudnn": cudnn, "python": "3.11",
                 "base": "", **({"knobs": knobs} if knobs != "default" else {})}
    return {"schema": 1, "cell": cell_id, "lane": "baremetal", "requested": requested, "knobs": knobs,
            "expected": {}, "control": control, "gpu_key": "cpu", "gpu": None, "python": "py",
            "started": "2026-12-02T00:00:00Z", "ended": "2026-12-02T00:02:00Z", "exit_code": 0, "evidence": {}}


def run_cell(out: Path, cell_id: str, meta: dict[str, Any], *args: str, faults: dict[str, Any] | None) -> Path:
    directory = out / f"{cell_id}@cpu"
    run = suiterun.run_suite(directory, "-q", "-k", SELECT, *args, faults=faults, cell_id=cell_id)
    assert run.returncode in (0, 1), run.output
    meta["exit_code"] = run.returncode
    (directory / "cell.json").write_text(json.dumps(meta))
    return directory


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run, as `convmatrix run` leaves a matrix with knobs = ["default", "pad=8"]: the control,
    and the failing stack with and without padding, both under the fault."""
    out = tmp_path_factory.mktemp("knobs")
    run_cell(out, CONTROL, cell_json(CONTROL, "bundled", "default", control=True), faults=None)
    run_cell(out, STACK, cell_json(STACK, "9.5.1.17", "default"), faults=UNALIGNED)
    run_cell(out, f"{STACK}+pad8", cell_json(f"{STACK}+pad8", "9.5.1.17", "pad=8"), "--pad-channels", "8",
             faults=UNALIGNED)
    return out


def on_gpus(run: Path, dest: Path, still_failing: str | None = None) -> Path:
    """The run's results as if from two GPU generations (the suite ran on the CPU; cell.json names
    the GPU). On `still_failing`, the padded cell's results are those of the unpadded run."""
    for key, (name, capability) in GPUS.items():
        for source in sorted(run.glob("*@cpu")):
            cell = source.name.removesuffix("@cpu")
            results = run / f"{STACK}@cpu" if key == still_failing and cell == f"{STACK}+pad8" else source
            target = dest / f"{cell}@{key}"
            shutil.copytree(results, target)
            meta = json.loads((source / "cell.json").read_text())
            meta.update(gpu_key=key, gpu={"index": 0, "name": name, "capability": capability})
            (target / "cell.json").write_text(json.dumps(meta))
    return dest


def prove(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["prove", *args])
    return code, capsys.readouterr().out


def test_the_fault_fails_unpadded_cases_with_the_signature_and_padding_removes_it(run: Path) -> None:
    lines = [json.loads(x) for x in (run / f"{STACK}@cpu" / "results.jsonl").read_text().splitlines()]
    failed = {r["case"] for r in lines if r["status"] == "failed"}
    assert failed and all("channels_last_odd" in case for case in failed)
    assert all("CUDNN_STATUS_NOT_SUPPORTED" in r["message"] for r in lines if r["status"] == "failed")
    padded = [json.loads(x) for x in (run / f"{STACK}+pad8@cpu" / "results.jsonl").read_text().splitlines()]
    assert {r["status"] for r in padded} <= {"passed", "skipped"}
    assert {r["knobs"]["pad_channels"] for r in padded} == {8}


def test_a_knob_fix_is_proven(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = prove(capsys, str(run), str(run), "--pair", "knobs=default:pad=8")
    assert code == 1, out  # the suite ran on the CPU: cuDNN was never exercised, so no proof (issue 45)
    assert out.splitlines()[1].startswith("no GPU took part in BEFORE or AFTER")
    code, out = prove(capsys, str(run), str(run), "--pair", "knobs=default:pad=8", "--allow-cpu")
    assert code == 0, out
    assert out.splitlines()[1].startswith("no GPU took part in BEFORE or AFTER")
    assert out.splitlines()[3].startswith("PROVEN on the CPU alone")
    assert f"{STACK} → {STACK}+pad8: proven" in out
    assert "fail cudnn_not_supported" in out and "fixed" in out


def test_one_generation_still_failing_is_not_proven(run: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    both = on_gpus(run, tmp_path / "both")
    code, out = prove(capsys, str(both), str(both), "--pair", "knobs=default:pad=8")
    assert code == 0, out
    assert "a100-sm80 (Ampere)" in out and "h200-sm90 (Hopper)" in out
    one = on_gpus(run, tmp_path / "one", still_failing="a100-sm80")
    code, out = prove(capsys, str(one), str(one), "--pair", "knobs=default:pad=8", "--format", "markdown")
    assert code == 1, out
    assert out.startswith("## Fix proof: NOT PROVEN")
    assert f"a100-sm80: {STACK} → {STACK}+pad8: 4 case(s) still fail with the signature" in out
    assert "h200-sm90:" not in out.split("###")[0]  # the reasons name only the failing generation


def test_an_unpadded_after_is_the_signature_still_there(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Proving the stack against itself: nothing changed, so nothing is proven.
    code, out = prove(capsys, str(run / f"{STACK}@cpu"), str(run / f"{STACK}@cpu"), "--control", STACK,
                      "--allow-cpu")
    assert code == 3, out  # the stack is no known-good control: it fails cases
    code, out = prove(capsys, str(run), str(run), "--allow-cpu")
    assert code == 1 and "still fail with the signature" in out


def test_convmatrix_run_runs_each_knob_set_with_its_options(tmp_path: Path) -> None:
    """The host lane through `convmatrix run`, a knobs axis, the fault: the default cell fails
    with the signature, its +pad8 sibling ran padded and passes, and each records its knob set."""
    matrix = tmp_path / "m.toml"
    matrix.write_text('name = "k"\n[axes]\nlane = ["host"]\nknobs = ["default", "pad=8"]\n')
    spec = tmp_path / "faults.json"
    spec.write_text(json.dumps(UNALIGNED))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(CONVMATRIX_PYTHON=sys.executable, CONVMATRIX_FAULTS=str(spec),
               PYTHONPATH=os.pathsep.join(filter(None, [str(suiterun.PLUGINS), env.get("PYTHONPATH")])))
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "convmatrix", "run", "-m", str(matrix), "--out", str(out), "--",
                           "-k", "channels_last_odd", "-p", "convmatrix_faults"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for cell, knobs, pad, failing in (("host", "default", 0, True), ("host+pad8", "pad=8", 8, False)):
        meta = json.loads((ran(out, cell) / "cell.json").read_text())
        assert meta["knobs"] == knobs and meta["exit_code"] == (1 if failing else 0)
        lines = [json.loads(x) for x in (ran(out, cell) / "results.jsonl").read_text().splitlines()]
        assert lines and {r["knobs"]["pad_channels"] for r in lines} == {pad}
        assert any(r["status"] == "failed" for r in lines) == failing
