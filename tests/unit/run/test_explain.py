"""--explain (run/explain.py): the logging variables of cuDNN 8 and 9, its frontend and PyTorch,
pointed into the case's own directory as the suite sees it; what the re-runs found."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from convmatrix.run import explain, runner
from testkit import REPO

# A real run of the suite on an H200 through the harness with --explain=info (its README.md).
H200 = REPO / "tests" / "data" / "gpu" / "h200-torch2.11-cudnn9.19"
H200_CELL = H200 / "run" / "host@h200-sm90@h200box"
ILLEGAL = "conv2d-fp32-k1-bwd-over2g-pointwise_extreme-wide_channels"
SLOW = "conv_transpose3d-fp16-k4-s2-p1-over2g-int32_other_ops-out4g"


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
    (folder / "results.jsonl").write_text(json.dumps({
        "status": "failed", "backend": "Cudnn", "cudnn_path": "find",
        "message": "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
    }) + "\n")
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


def test_h200_a_log_without_a_failure_is_named_with_the_last_plan_it_executed() -> None:
    # Seen: the illegal memory access of a backward 1x1 conv to 262144 channels left cuDNN 9.19's
    # info log of successful calls only; explain.json said "log": null, the report "cuDNN wrote no log".
    found = explain.found(H200_CELL / "explain" / ILLEGAL, ILLEGAL, "info")
    assert found["cudnn"] is None and found["log"] == f"explain/{ILLEGAL}/cudnn.log"
    assert found["activity"]["last_operation"] == "CONVOLUTION_BACKWARD_FILTER"
    assert found["cudnn_off"] == "passed" and found["cudnn_is_the_cause"] is True and found["backend"] == "Cudnn"


def test_h200_a_timeout_with_cudnn_that_passes_without_it_blames_cudnns_path() -> None:
    # Seen: the transposed conv3d to 2.1e9 output elements ran past 90 s with cuDNN (GET) and
    # passed in 2.5 s with cuDNN off; explain.json said cudnn_is_the_cause: false.
    found = explain.found(H200_CELL / "explain" / SLOW, SLOW, "info")
    assert found["status"] == "timeout" and found["cudnn_off"] == "passed" and found["cudnn_is_the_cause"] is True
    assert found["log"] == f"explain/{SLOW}/cudnn.log"  # cut short: the killed process never flushed it


def test_h200_engine_rejection_warnings_do_not_explain_another_failure(tmp_path: Path) -> None:
    # The captured warnings of a call that passed, behind the captured illegal-address failure:
    # they are cuDNN choosing an engine, not why the case failed.
    folder = tmp_path / "explain" / ILLEGAL
    shutil.copytree(H200_CELL / "explain" / ILLEGAL, folder)
    shutil.copy(H200 / "capture" / "cudnn-big_single_sample-L2.log", folder / "cudnn.log")
    found = explain.found(folder, ILLEGAL, "warn")
    assert found["cudnn"] is None and found["log"] == f"explain/{ILLEGAL}/cudnn.log"
    # The same warnings behind a NOT_SUPPORTED failure are its explanation.
    record = json.loads((folder / "results.jsonl").read_text().splitlines()[0])
    record.update(exc_type="RuntimeError", message="cuDNN error: CUDNN_STATUS_NOT_SUPPORTED")
    (folder / "results.jsonl").write_text(json.dumps(record) + "\n")
    found = explain.found(folder, ILLEGAL, "warn")
    assert found["cudnn"]["status"] == "CUDNN_STATUS_NOT_SUPPORTED"
    assert found["cudnn"]["reason"] == "!isValidSetting(name, c)"


def test_h200_what_the_fixed_code_wrote_on_the_gpu_is_what_it_derives_here() -> None:
    # rerun/: --explain (warning level) with this code on the H200; its explain.json, read back.
    cell = H200 / "rerun" / "host@h200-sm90@h200box"
    written = json.loads((cell / "explain" / f"{ILLEGAL}.json").read_text())
    assert written == explain.found(cell / "explain" / ILLEGAL, ILLEGAL, "warn")
    assert written["log"] == f"explain/{ILLEGAL}/cudnn.log" and written["cudnn"] is None
    assert written["activity"]["last_operation"] is None  # the warning level dumps no plans


def test_h200_an_illegal_access_is_explained_by_cudnns_error_not_by_its_engine_warnings(tmp_path: Path) -> None:
    # The captured failure, its log the captured warnings of a passing call followed by the
    # CUDA_LAUNCH_BLOCKING=1 run's error block: the error is the explanation.
    folder = tmp_path / "explain" / ILLEGAL
    shutil.copytree(H200_CELL / "explain" / ILLEGAL, folder)
    (folder / "cudnn.log").write_text((H200 / "capture" / "cudnn-big_single_sample-L2.log").read_text()
                                      + "\n" + (H200 / "blocking" / "cudnn.log").read_text())
    found = explain.found(folder, ILLEGAL, "info")
    assert found["cudnn"]["status"] == "CUDNN_STATUS_EXECUTION_FAILED_CUDART"
    assert found["cudnn"]["reason"].startswith("err 700 an illegal memory access") and found["cudnn_is_the_cause"]
