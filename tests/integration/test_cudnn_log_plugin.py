"""The cuDNN API-log fault plugin (tests/plugins/convmatrix_cudnn_log.py) in a real suite run, and
its conv wrapper alone: with cuDNN off the fault must not fire.

The log text is real: tests/data/cudnn_logs/onnxruntime_23244_cudnn9_ci.log, quoted from
https://github.com/microsoft/onnxruntime/pull/23244.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

import pytest

from convmatrix.results.cudnn_log import parse, read
from convmatrix.results.families import SIGNATURE, classify
from suiterun import PLUGINS, Run, run_suite

pytestmark = pytest.mark.slow

LOG = Path(__file__).parents[1] / "data" / "cudnn_logs" / "onnxruntime_23244_cudnn9_ci.log"
CASE = "conv2d-fp32-k3-p1"


def plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("convmatrix_cudnn_log_under_test", PLUGINS / "convmatrix_cudnn_log.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_with_log(tmp_path: Path, env: dict[str, str]) -> Run:
    spec = tmp_path / "cudnn_log_faults.json"
    spec.write_text(json.dumps({CASE: str(LOG)}))
    path = os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))
    return run_suite(tmp_path / "results", "-p", "convmatrix_cudnn_log", cases=(CASE,),
                     env_extra={"CONVMATRIX_CUDNN_LOG_FAULTS": str(spec), "PYTHONPATH": path, **env})


def assert_failed_with_signature(run: Run) -> None:
    record = run.by_case()[CASE]
    assert record["status"] == "failed", run.output
    assert classify(record["message"], status=record["status"], exc_type=record["exc_type"]) == SIGNATURE


def test_a_rerun_with_logging_on_leaves_cudnns_reason(tmp_path: Path) -> None:
    cudnn_log = tmp_path / "cudnn.log"
    frontend_log = tmp_path / "frontend.log"
    run = run_with_log(tmp_path, {"CUDNN_LOGLEVEL_DBG": "2", "CUDNN_LOGDEST_DBG": str(cudnn_log),
                                  "CUDNN_FRONTEND_LOG_INFO": "1", "CUDNN_FRONTEND_LOG_FILE": str(frontend_log)})
    assert_failed_with_signature(run)
    quoted = LOG.read_text(encoding="utf-8")
    assert cudnn_log.read_text(encoding="utf-8") == quoted
    assert frontend_log.read_text(encoding="utf-8") == quoted
    got = parse(read(cudnn_log))
    assert got is not None
    assert (got.status, got.reason, got.count) == ("CUDNN_STATUS_NOT_SUPPORTED", "core_engine.getStatus()", 3)


def test_without_a_log_destination_the_case_fails_and_nothing_is_written(tmp_path: Path) -> None:
    env = {"CUDNN_LOGDEST_DBG": "stderr", "CUDNN_FRONTEND_LOG_FILE": "stdout"}
    run = run_with_log(tmp_path, env)
    assert_failed_with_signature(run)
    assert not (tmp_path / "stderr").exists() and not (tmp_path / "stdout").exists()
    assert "core_engine.getStatus()" not in run.output


def test_the_fault_does_not_fire_with_cudnn_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    cudnn_log = tmp_path / "cudnn.log"
    monkeypatch.setenv("CUDNN_LOGDEST_DBG", str(cudnn_log))
    monkeypatch.delenv("CUDNN_FRONTEND_LOG_FILE", raising=False)
    faults = plugin()
    x, weight = torch.ones(1, 1, 4, 4), torch.ones(1, 1, 3, 3)
    with faults.patched(LOG.read_text(encoding="utf-8")):
        with pytest.raises(RuntimeError, match="CUDNN_STATUS_NOT_SUPPORTED"):
            torch.nn.functional.conv2d(x, weight)
        assert cudnn_log.read_text(encoding="utf-8").count("core_engine.getStatus()") == 4
        with torch.backends.cudnn.flags(enabled=False):
            out = torch.nn.functional.conv2d(x, weight)
    assert out.shape == (1, 1, 2, 2) and float(out.sum()) == 36.0
    assert torch.nn.functional.conv2d(x, weight).shape == (1, 1, 2, 2)  # the real conv is back


def test_spec_errors_are_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    faults = plugin()
    spec = tmp_path / "spec.json"
    monkeypatch.setenv("CONVMATRIX_CUDNN_LOG_FAULTS", str(spec))
    spec.write_text(json.dumps({"*": "missing.log"}))
    with pytest.raises(pytest.UsageError, match="no such log files"):
        faults.load_spec()
    spec.write_text(json.dumps(["not", "a", "mapping"]))
    with pytest.raises(pytest.UsageError, match="expected"):
        faults.load_spec()
    (tmp_path / "here.log").write_text("x")
    spec.write_text(json.dumps({"conv2d-*": "here.log"}))
    assert faults.log_for(faults.load_spec(), "conv2d-fp32-k3-p1") == tmp_path / "here.log"
    assert faults.log_for(faults.load_spec(), "conv1d-fp32-k3-p1") is None
