"""User case files through the real suite and the real harness (issue 22): `--cases` beside the
catalog, `-k <stem>` selecting a file's cases, every direction checked against its reference
(and failing on a wrong conv), the shapes a scaled case ran recorded, and a bad file stopping the
suite (exit 4) and the harness (exit 2) before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from convmatrix.results import rundir
from suiterun import run_suite
from testkit import REPO

pytestmark = pytest.mark.slow

CASES = """
[[case]]
name = "fwd"
op = "conv1d"
input = [2, 12, 40]
out_channels = 8
kernel = 5
padding = 2
bias = false
dtype = "float16"
sources = ["https://github.com/pytorch/pytorch/issues/136812"]

[[case]]
name = "dgrad"
op = "conv2d"
input = [2, 8, 12, 10]
out_channels = 16
kernel = 3
layout = "nhwc_strided"
direction = "backward_input"

[[case]]
name = "wgrad"
op = "conv_transpose2d"
input = [2, 8, 8, 8]
out_channels = 4
kernel = 4
stride = 2
padding = 1
dtype = "bfloat16"
memory_format = "channels_last"
direction = "backward_weight"

[[case]]
name = "penalty"
op = "conv2d"
input = [2, 6, 10, 10]
out_channels = 12
kernel = 3
padding = 2
dilation = 2
groups = 3
direction = "double_backward"

[[case]]
name = "big_penalty"
op = "conv3d"
input = [2, 64, 32, 128, 128]
out_channels = 64
kernel = 3
padding = 1
autocast = "bfloat16"
memory_format = "channels_last_3d"
direction = "double_backward"
benchmark = true
"""
IDS = {
    "fwd": "prod-conv1d-fp16-k5-p2-nobias-fwd",
    "dgrad": "prod-conv2d-fp32-k3-nhwc_strided-bwd_input-dgrad",
    "wgrad": "prod-conv_transpose2d-bf16-k4-s2-p1-channels_last-bwd_weight-wgrad",
    "penalty": "prod-conv2d-fp32-k3-p2-dilated2-g3-double_bwd-penalty",
    "big_penalty": "prod-conv3d-fp32-autocast_bf16-k3-p1-channels_last_3d-double_bwd-bench_on-big_penalty",
}


@pytest.fixture
def prod(tmp_path: Path) -> Path:
    path = tmp_path / "prod.toml"
    path.write_text(CASES)
    return path


def test_a_case_file_runs_beside_the_catalog_and_k_selects_it(tmp_path: Path, prod: Path) -> None:
    run = run_suite(tmp_path / "r", "--cases", str(prod), "-k", "prod")
    assert run.returncode == 0, run.output[-3000:]
    records = run.by_case()
    assert set(records) == set(IDS.values())
    for name, case in IDS.items():
        record = records[case]
        assert record["status"] == "passed", (case, record["message"])
        assert record["params"]["tag"] == name and record["params"]["prefix"] == "prod"
    # The grads each direction checks are what its numeric covers; the scaled case says what ran.
    big = records[IDS["big_penalty"]]
    assert big["scaled"] is True and big["params"]["c_in"] == 64
    assert big["shapes"]["input"] != [2, 64, 32, 128, 128] and big["shapes"]["input"][1] < 64
    assert records[IDS["fwd"]]["sources"] == ["https://github.com/pytorch/pytorch/issues/136812"]


def test_every_direction_fails_on_a_wrong_conv(tmp_path: Path, prod: Path) -> None:
    run = run_suite(tmp_path / "r", "--cases", str(prod), "-k", "prod",
                    faults={"drop_group": {"prod-*": True}})
    assert run.returncode == 1, run.output[-3000:]
    records = run.by_case()
    for case in IDS.values():
        assert records[case]["status"] == "failed", case
        assert records[case]["message"].startswith("numeric mismatch:"), records[case]["message"]
    assert "grad_input" in records[IDS["dgrad"]]["message"] or "output" in records[IDS["dgrad"]]["message"]


def test_a_bad_case_file_stops_the_suite_before_any_case(tmp_path: Path, prod: Path) -> None:
    prod.write_text(CASES.replace('direction = "backward_input"', 'direction = "backwards"'))
    run = run_suite(tmp_path / "r", "--cases", str(prod))
    assert run.returncode == 4, run.output[-2000:]
    assert f"{prod}: case 2 (dgrad): direction: 'backwards': expected one of" in run.output
    assert not (tmp_path / "r" / "results.jsonl").exists()


def harness(out: Path, matrix: Path, *suite: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "convmatrix", "run", "-m", str(matrix), "--out", str(out), "--", *suite]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                          env=dict(os.environ, CONVMATRIX_PYTHON=sys.executable))


def test_the_matrix_key_and_the_option_reach_the_host_lane(tmp_path: Path, prod: Path) -> None:
    more = tmp_path / "more.json"
    more.write_text(json.dumps({"case": [{"name": "extra", "op": "conv3d", "input": [1, 2, 4, 4, 4],
                                          "out_channels": 2, "kernel": 1}]}))
    matrix = tmp_path / "m.toml"
    matrix.write_text('name = "cases"\ncases = ["prod.toml"]\n[axes]\nlane = ["host"]\n')
    out = tmp_path / "run"
    done = harness(out, matrix, "--cases", str(more), "-k", "prod or more")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (cell,) = [p for p in out.iterdir() if p.name.startswith("host@")]
    lines = [json.loads(line) for line in (cell / "results.jsonl").read_text().splitlines()]
    assert {r["case"] for r in lines} == {*IDS.values(), "more-conv3d-fp32-k1-extra"}
    recorded = json.loads((cell / "cell.json").read_text())["cases"]
    assert [(c["path"], c["stem"], c["cases"]) for c in recorded] == [(str(prod.resolve()), "prod", 5),
                                                                     (str(more), "more", 1)]


def test_a_bad_case_file_stops_the_harness_with_exit_2_before_any_cell(tmp_path: Path, prod: Path) -> None:
    prod.write_text(CASES.replace("groups = 3", "groups = 5"))
    matrix = tmp_path / "m.toml"
    matrix.write_text('name = "cases"\ncases = ["prod.toml"]\n[axes]\nlane = ["host"]\n')
    out = tmp_path / "run"
    done = harness(out, matrix)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.strip() == (f"convmatrix: {prod.resolve()}: case 4 (penalty): groups: 5 does not divide the "
                                   "channels (6 in, 12 out)")
    assert not out.exists()


def test_a_log_with_a_repro_snippet_becomes_a_case_that_runs(tmp_path: Path) -> None:
    """Issue 22: `convmatrix cases --from-log` on a real snippet (TodyNet#12), then the suite on it."""
    log = REPO / "tests" / "data" / "logs" / "snippets" / "todynet12.log"
    case_file = tmp_path / "todynet.toml"
    done = subprocess.run([sys.executable, "-m", "convmatrix", "cases", "--from-log", str(log), "-o", str(case_file)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    run = run_suite(tmp_path / "r", "--cases", str(case_file), "-k", "todynet")
    assert run.returncode == 0, run.output[-3000:]
    (record,) = run.records()
    assert record["case"] == "todynet-conv2d-fp32-k1x3-p0x1-bwd-bench_on-todynet12_conv2d_1"
    assert record["status"] == "passed" and record["params"]["n"] == 16


def test_explain_reruns_a_failing_case_with_cudnns_log_and_without_cudnn(tmp_path: Path) -> None:
    """Issue 23: `--explain` on the host lane. A test plugin plays a cuDNN that declines the case and
    writes real cuDNN 9 log text (quoted from onnxruntime#23244) where CUDNN_LOGDEST_DBG points;
    with cuDNN off the conv runs. The report says what cuDNN said and that its path is the cause."""
    case = "conv2d-fp32-k3-p1"
    quoted = REPO / "tests" / "data" / "cudnn_logs" / "onnxruntime_23244_cudnn9_ci.log"
    spec = tmp_path / "faults.json"
    spec.write_text(json.dumps({case: str(quoted)}))
    matrix = tmp_path / "m.toml"
    matrix.write_text('name = "explain"\n[axes]\nlane = ["host"]\n')
    out = tmp_path / "run"
    env = dict(os.environ, CONVMATRIX_PYTHON=sys.executable, CONVMATRIX_CUDNN_LOG_FAULTS=str(spec),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "tests" / "plugins"), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "convmatrix", "run", "-m", str(matrix), "--out", str(out), "--explain", "--",
               "-k", case, "-p", "convmatrix_cudnn_log"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (cell,) = [p for p in out.iterdir() if p.name.startswith("host@")]
    folder = cell / "explain" / rundir.explain_name(case)  # named by a digest of the id (issue 32)
    assert (folder / "cudnn.log").read_text().count("CUDNN_STATUS_NOT_SUPPORTED") >= 1
    found = json.loads((cell / "explain" / f"{rundir.explain_name(case)}.json").read_text())
    assert found["status"] == "failed" and found["cudnn_off"] == "passed" and found["cudnn_is_the_cause"] is True
    assert found["cudnn"]["status"].startswith("CUDNN_STATUS_NOT_SUPPORTED") and found["log"] == f"explain/{rundir.explain_name(case)}/cudnn.log"
    assert found["backend"] == "Mkldnn" and found["cudnn_path"] is None  # the CPU's choice, honestly recorded
    text = subprocess.run([sys.executable, "-m", "convmatrix", "report", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert "explained: cuDNN said CUDNN_STATUS_NOT_SUPPORTED" in text.stdout, text.stdout[-3000:]
    assert "without cuDNN: passed, so cuDNN's path is the cause" in text.stdout


def test_a_suite_that_plants_links_at_its_end_never_leads_the_harness_outside(tmp_path: Path) -> None:
    """Issue 32, items 1 and 2, on the host lane with a real suite: a test plugin fails one case,
    then, as its session ends, makes explain/ and blocking/ links to a folder outside and plants
    the harness's temporary names (`.cell.json.<ppid>.tmp`) as links to files there. The re-runs
    and the harness's writes stay inside the cell; the folder outside is as it was."""
    case = "conv2d-fp32-k3-p1"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me\n")
    matrix = tmp_path / "m.toml"
    matrix.write_text('name = "plant"\n[axes]\nlane = ["host"]\n')
    out = tmp_path / "run"
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"raise": {case: "boom"}}))
    env = dict(os.environ, CONVMATRIX_PYTHON=sys.executable, CONVMATRIX_PLANT_OUTSIDE=str(outside),
               CONVMATRIX_FAULTS=str(faults),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "tests" / "plugins"), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, "-m", "convmatrix", "run", "-m", str(matrix), "--out", str(out), "--rerun-blocking",
               "--explain", "--", "-k", case, "-p", "convmatrix_faults", "-p", "convmatrix_plant"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in outside.iterdir()) == ["precious"]
    assert (outside / "precious").read_text() == "keep me\n"
    (cell,) = [p for p in out.iterdir() if p.name.startswith("host@")]
    for name in ("explain", "blocking"):
        assert (cell / name).is_dir() and not (cell / name).is_symlink()
    assert (cell / "blocking" / "log.txt").is_file() and (cell / "explain" / f"{rundir.explain_name(case)}.json").is_file()
    assert "explain/ was a symlink" in done.stdout + done.stderr
    assert json.loads((cell / "cell.json").read_text())["exit_code"] == 1
