"""--explain (run/explain.py): the logging variables of cuDNN 8 and 9, its frontend and PyTorch,
pointed into the case's own directory as the suite sees it; what the re-runs found."""

from __future__ import annotations

import json
from pathlib import Path

from convmatrix.run import explain, runner
from testkit import REPO


def test_every_logging_variable_points_into_the_case_directory_as_the_suite_sees_it() -> None:
    env = explain.logging_env("warn")
    assert env["CUDNN_LOGLEVEL_DBG"] == "2" and explain.logging_env("info")["CUDNN_LOGLEVEL_DBG"] == "3"
    assert env["CUDNN_LOGERR_DBG"] == env["CUDNN_LOGWARN_DBG"] == "1" and "CUDNN_LOGINFO_DBG" not in env
    assert explain.logging_env("info")["CUDNN_LOGINFO_DBG"] == "1"
    assert env["CUDNN_FRONTEND_LOG_INFO"] == env["TORCH_CUDNN_V8_API_DEBUG"] == "1"
    local = runner.with_results(env, "/runs/x@cpu@h/explain/c")
    assert local["CUDNN_LOGDEST_DBG"] == "/runs/x@cpu@h/explain/c/cudnn.log"
    assert local["CUDNN_FRONTEND_LOG_FILE"] == "/runs/x@cpu@h/explain/c/cudnn_frontend.log"
    assert runner.with_results(env, "/results")["CUDNN_LOGDEST_DBG"] == "/results/cudnn.log"  # a container's


def test_only_a_valid_case_id_becomes_a_folder() -> None:
    assert explain.case_of("suites/test_conv.py::test_conv[conv2d-fp16-k3]") == "conv2d-fp16-k3"
    assert explain.case_of("suites/test_conv.py::test_conv[../../etc]") is None
    assert explain.case_of("suites/test_conv.py::other") is None


def test_found_reads_cudnns_word_and_both_reruns(tmp_path: Path) -> None:
    folder = tmp_path / "explain" / "c"
    (folder / "cudnn_off").mkdir(parents=True)
    quoted = REPO / "tests" / "data" / "cudnn_logs" / "onnxruntime_23244_cudnn9_ci.log"
    (folder / "cudnn.log").write_text(quoted.read_text())
    (folder / "results.jsonl").write_text(json.dumps({"status": "failed", "backend": "Cudnn", "cudnn_path": "find"})
                                          + "\n")
    (folder / "cudnn_off" / "results.jsonl").write_text(json.dumps({"status": "passed"}) + "\n")
    found = explain.found(folder, "c", "warn")
    assert found["cudnn_is_the_cause"] is True and found["cudnn_path"] == "find" and found["log"] == "explain/c/cudnn.log"
    assert found["cudnn"]["status"].startswith("CUDNN_STATUS_NOT_SUPPORTED")
    (folder / "cudnn_off" / "results.jsonl").write_text(json.dumps({"status": "failed"}) + "\n")
    (folder / "cudnn.log").unlink()
    again = explain.found(folder, "c", "warn")
    assert again["cudnn_is_the_cause"] is False and again["cudnn"] is None and again["log"] is None


def test_a_huge_cudnn_log_keeps_its_end_and_a_link_is_removed(tmp_path: Path) -> None:
    folder = tmp_path / "explain" / "c"
    folder.mkdir(parents=True)
    log = folder / "cudnn.log"
    log.write_bytes(b"early line\n" * 200_000 + b"E! CuDNN (v90100) function cudnnBackendFinalize() called:\n")
    explain.keep_end(log, folder, limit=1 << 16)
    kept = log.read_bytes()
    assert len(kept) <= (1 << 16) + 200 and kept.startswith(b"[convmatrix: the first ")
    assert kept.endswith(b"cudnnBackendFinalize() called:\n")
    secret = tmp_path / "secret"
    secret.write_text("x" * 100)
    (folder / "cudnn_frontend.log").symlink_to(secret)
    explain.keep_end(folder / "cudnn_frontend.log", folder, limit=10)
    assert not (folder / "cudnn_frontend.log").exists() and secret.read_text() == "x" * 100
