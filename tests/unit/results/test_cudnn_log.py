"""cuDNN's own reason from its API log (src/convmatrix/results/cudnn_log.py) and the status table it
explains with (STATUS_MEANING in src/convmatrix/results/families.py).

Real logs are quoted in tests/data/cudnn_logs/, one file per public source, its URL on the first
line. Where no public log shows a form verbatim, the text below is marked "constructed" and built
from the real lines' layout (header and severity letters as in karpathy/llm.c#366, status and
"Reason:" as in microsoft/onnxruntime#23244) with another status name.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from convmatrix.results import families
from convmatrix.results.cudnn_log import REASON_LIMIT, Activity, Explained, activity, parse, read

LOGS = Path(__file__).parents[2] / "data" / "cudnn_logs"
# Logs this project captured on an H200 (torch 2.11.0+cu130, cuDNN 9.19.0): see its README.md.
H200 = Path(__file__).parents[2] / "data" / "gpu" / "h200-torch2.11-cudnn9.19"


def log(name: str) -> str:
    return read(LOGS / name)


# --- the real logs ------------------------------------------------------------------------------
def test_every_quoted_log_names_its_source() -> None:
    files = sorted(LOGS.glob("*.log"))
    assert len(files) >= 4
    for path in files:
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# source: https://"), path


def test_cudnn9_error_log_llm_c() -> None:
    # https://github.com/karpathy/llm.c/issues/366: cuDNN 9.1.1, E! blocks of EXECUTION_FAILED.
    got = parse(log("llm_c_366_cudnn9_error.log"))
    assert got == Explained(status="CUDNN_STATUS_EXECUTION_FAILED", subcode=5000,
                            meaning="the GPU program failed to execute", cause="unknown",
                            reason="rtc->loadModule()", function=None, line=2, count=2, error=True)
    # The quote starts mid-message (no header above line 2); the second message has its header.
    second = parse("\n".join(log("llm_c_366_cudnn9_error.log").split("\n")[9:]))
    assert second is not None and second.function == "cudnnBackendFinalize" and second.line == 2


def test_cudnn9_warnings_in_a_ci_log_onnxruntime() -> None:
    # https://github.com/microsoft/onnxruntime/pull/23244: cuDNN 9.6, bare "Warning:" lines (the
    # last error string) behind a CI's timestamps; three engines' tracebacks, three messages.
    got = parse(log("onnxruntime_23244_cudnn9_ci.log"))
    assert got is not None
    assert (got.status, got.subcode, got.cause) == ("CUDNN_STATUS_NOT_SUPPORTED", 3000, "unknown")
    assert got.reason == "core_engine.getStatus()"
    assert got.function is None  # the header above is an I! one: not the failing call
    assert (got.line, got.count) == (10, 3)


def test_h200_cudnn9_19_engine_rejections_of_a_call_that_passed() -> None:
    # Captured: a conv over one 1x1x46341x46343 fp16 sample passed, and cuDNN 9.19's warning level
    # still logged NOT_SUPPORTED for each engine it ruled out, with the 9.x sub-status names.
    text = read(H200 / "capture" / "cudnn-big_single_sample-L2.log")
    got = parse(text)
    assert got is not None and got.error is False
    assert (got.status, got.subcode, got.function) == ("CUDNN_STATUS_NOT_SUPPORTED", 3000, "cudnnBackendFinalize")
    assert got.reason == "!isValidSetting(name, c)"
    assert "CUDNN_STATUS_NOT_SUPPORTED_SHAPE; Reason: leading_dim_in_bits_in % 128 != 0" in text
    assert activity(text) == Activity(executions=0, last_operation=None, last_call="cudnnBackendFinalize")


@pytest.mark.parametrize("name", ["ok_fp16_nhwc", "find_bf16_conv3d", "det_dilated_tconv3d"])
def test_h200_a_warning_of_success_is_no_failure(name: str) -> None:
    # Captured: every call at the warning level opens with "Warning: CUDNN_STATUS_SUCCESS; Reason:
    # cuDNN Library configuration is set to AUTO ..." (a W! message that is no failure).
    text = read(H200 / "capture" / f"cudnn-{name}-L2.log")
    assert "W! CuDNN (v91900 56) function cudnnBackendFinalize() called:" in text
    assert "Warning: CUDNN_STATUS_SUCCESS" in text and parse(text) is None


def test_h200_info_level_names_the_last_plan_executed() -> None:
    # Captured (its end): the info level dumps each execution plan, then cudnnBackendExecute.
    text = read(H200 / "capture" / "cudnn-big_single_sample-L3.log")
    got = activity(text)
    assert got is not None and got.last_operation == "CONVOLUTION_FORWARD" and got.executions >= 1
    assert got.last_call == "cudnnBackendDestroyDescriptor"


def test_activity_takes_the_operation_before_the_last_execute() -> None:
    # Constructed from the captured layout: a later plan's dump that was never executed is not it.
    def block(function: str, *lines: str) -> str:
        return "\n".join([f"I! CuDNN (v91900 56) function {function}() called:", *lines, "i! Time: x", ""]) + "\n"
    text = (block("cudnnBackendFinalize", "i!     operation: type=CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:")
            + block("cudnnBackendExecute")
            + block("cudnnBackendFinalize",
                    "i!     operation: type=CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:"))
    assert activity(text) == Activity(executions=1, last_operation="CONVOLUTION_FORWARD",
                                      last_call="cudnnBackendFinalize")
    assert activity("no header here\n" * 3) is None
    assert activity("i!  operation: type=CUDNN_BACKEND_OPERATION_" + "A" * 100_000 + "_DESCRIPTOR") is None


@pytest.mark.parametrize("name", ["cudnn_frontend_39_cudnn8_info.log", "nvidia_docs_cudnn9_info.log"])
def test_info_only_logs_explain_nothing(name: str) -> None:
    # https://github.com/NVIDIA/cudnn-frontend/issues/39 (cuDNN 8.2.4, I! blocks) and NVIDIA's
    # troubleshooting page (cuDNN 9's documented layout, no severity letters): no failure in them.
    assert parse(log(name)) is None


# --- the formats --------------------------------------------------------------------------------
CUDNN9_SHAPE = (  # constructed: cuDNN 9 W! block, a sub-code, its traceback
    "W! CuDNN (v90100 70) function cudnnBackendFinalize() called:\n"
    "w!         Warning: CUDNN_STATUS_NOT_SUPPORTED_SHAPE; Reason: kernel dims must be at most 32\n"
    "w!         Warning: CUDNN_STATUS_NOT_SUPPORTED; Reason: finalize_internal()\n"
    "w! Time: 2024-05-28T07:01:07.960496 (0d+0h+0m+0s since start)\n"
    "w! Process=1234; Thread=5678; GPU=0; Handle=0x55d0c0a0; StreamId=0x0.\n"
)
CUDNN8_ERROR = (  # constructed: cuDNN 8 E! block, no second number in the version
    "E! CuDNN (v8907) function cudnnConvolutionForward() called:\n"
    "e!     Error: CUDNN_STATUS_NOT_SUPPORTED; Reason: cudnnGetConvolutionForwardWorkspaceSize()\n"
    "e! Time: 2024-01-31T01:25:00.161165 (0d+0h+0m+15s since start)\n"
    "e! Process=19896; Thread=15116; GPU=0; Handle=0x1; StreamId=0x0 (defaultStream).\n"
)


def test_cudnn9_warning_with_a_subcode() -> None:
    got = parse(CUDNN9_SHAPE)
    assert got == Explained(status="CUDNN_STATUS_NOT_SUPPORTED_SHAPE", subcode=3002,
                            meaning="no engine supports this tensor shape", cause="software",
                            reason="kernel dims must be at most 32", function="cudnnBackendFinalize",
                            line=2, count=1, error=False)


def test_cudnn8_error_keeps_cudnn8_number() -> None:
    got = parse(CUDNN8_ERROR)
    assert got is not None
    assert (got.status, got.subcode, got.function) == ("CUDNN_STATUS_NOT_SUPPORTED", 9, "cudnnConvolutionForward")
    assert got.reason == "cudnnGetConvolutionForwardWorkspaceSize()"


def test_documented_layout_without_letters() -> None:
    # constructed on the documented cuDNN 9 layout (nvidia_docs_cudnn9_info.log), with a failure.
    text = ("cuDNN (v90300) function cudnnBackendFinalize() called:\n"
            "    Error: CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH; Reason: needs sm_80 at: 800 <= arch\n"
            "Time: 2024-01-21T14:14:21.366171 (0d+0h+1m+5s since start)\n"
            "Process: 21264, Thread: 21264, cudnn_handle: NULL, cudnn_stream: NULL.\n")
    got = parse(text)
    assert got is not None
    assert (got.status, got.subcode, got.cause, got.function) == (
        "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH", 3007, "gpu", "cudnnBackendFinalize")


@pytest.mark.parametrize(("line", "status", "subcode", "cause"), [
    # The frontend's exception text, as PyTorch's "Plan failed" warning quotes it
    # (https://github.com/ultralytics/ultralytics/issues/12606).
    ("CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: cudnnFinalize Descriptor Failed cudnn_status: "
     "CUDNN_STATUS_NOT_SUPPORTED", "CUDNN_STATUS_NOT_SUPPORTED", 3000, "unknown"),
    # https://github.com/modelscope/ms-swift/issues/6931
    ("RuntimeError: CUDNN_BACKEND_TENSOR_DESCRIPTOR cudnnFinalize failedptrDesc->finalize() cudnn_status: "
     "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED", "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED", 1008, "environment"),
    # constructed: old frontends printed the number
    ("[cudnn_frontend] ERROR: cudnnFinalize failed cudnn_status: 3010", "CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT",
     3010, "gpu"),
])
def test_frontend_lines(line: str, status: str, subcode: int, cause: str) -> None:
    got = parse(line)
    assert got is not None
    assert (got.status, got.subcode, got.cause, got.count) == (status, subcode, cause, 1)


def test_a_number_after_the_name_is_the_subcode() -> None:
    got = parse("w!   Warning: CUDNN_STATUS_NOT_SUPPORTED_PADDING (3011); Reason: pad > kernel\n")
    assert got is not None and (got.subcode, got.reason) == (3011, "pad > kernel")


def test_frontend_log_without_a_status_explains_nothing() -> None:
    # https://github.com/karpathy/llm.c/issues/366: the frontend's own line names no status.
    assert parse("[cudnn_frontend] Error: No execution plans built successfully.\n") is None


def test_priority_error_then_warning_then_other_error() -> None:
    other_error = "E! CuDNN (v90100 1) function cudnnA() called:\ne!   Error: CUDNN_STATUS_BAD_PARAM; Reason: a\n\n"
    warning_ns = "W! CuDNN (v90100 1) function cudnnB() called:\nw!   Warning: CUDNN_STATUS_NOT_SUPPORTED_LAYOUT; Reason: b\n\n"
    error_ns = "E! CuDNN (v90100 1) function cudnnC() called:\ne!   Error: CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE; Reason: c\n\n"
    all_three = parse(other_error + warning_ns + error_ns)
    assert all_three is not None
    assert (all_three.function, all_three.reason, all_three.count) == ("cudnnC", "c", 3)
    two = parse(other_error + warning_ns)
    assert two is not None and (two.function, two.status) == ("cudnnB", "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT")
    one = parse(other_error)
    assert one is not None and (one.function, one.cause, one.line) == ("cudnnA", "software", 2)


def test_what_is_no_failure() -> None:
    assert parse("") is None
    # Warnings other than NOT_SUPPORTED, SUCCESS, and info lines echoing a status value.
    assert parse("w!   Warning: CUDNN_STATUS_DEPRECATED; Reason: old API\n") is None
    assert parse("e!   Error: CUDNN_STATUS_SUCCESS; Reason: none\n") is None
    assert parse("i!     status: type=cudnnStatus_t; val=CUDNN_STATUS_NOT_SUPPORTED (9);\n") is None
    assert parse("2025-01-06T09:18:22Z i!   Error: CUDNN_STATUS_NOT_SUPPORTED; Reason: x\n") is None


def test_an_unknown_newer_subcode_explains_as_its_base() -> None:
    got = parse("Error: CUDNN_STATUS_NOT_SUPPORTED_SOMETHING_NEW; Reason: x")
    assert got is not None
    assert (got.status, got.subcode, got.cause) == ("CUDNN_STATUS_NOT_SUPPORTED_SOMETHING_NEW", None, "unknown")


def test_crlf_and_line_numbers() -> None:
    got = parse(CUDNN9_SHAPE.replace("\n", "\r\n"))
    assert got is not None and (got.line, got.reason) == (2, "kernel dims must be at most 32")


# --- hostile input ------------------------------------------------------------------------------
def test_reason_is_one_line_cut_and_clean() -> None:
    got = parse("e! Error: CUDNN_STATUS_NOT_SUPPORTED; Reason: a\x00b\tc\x1b[31m" + "x" * 2000)
    assert got is not None
    assert len(got.reason) == REASON_LIMIT
    assert got.reason.startswith("ab c[31m")


@pytest.mark.parametrize("line", [
    "E! CuDNN (v9 function " + "a" * (1 << 20),
    "Error: CUDNN_STATUS_" + "A" * (1 << 20),
    "Error: CUDNN_STATUS_NOT_SUPPORTED; Reason: " + "Reason: " * (1 << 17),
    "cudnn_status: " * (1 << 16),
    "Warning: " * (1 << 17) + "CUDNN_STATUS_X",
    "\x00" * (1 << 20),
])
def test_a_megabyte_line_is_quick(line: str) -> None:
    begin = time.perf_counter()
    parse(line)
    parse(line + "\n" + CUDNN8_ERROR)
    assert time.perf_counter() - begin < 2.0


def test_nul_bytes_around_a_message() -> None:
    got = parse("\x00" * 1000 + "\n" + CUDNN9_SHAPE + "\x00" * 1000)
    assert got is not None and (got.status, got.line) == ("CUDNN_STATUS_NOT_SUPPORTED_SHAPE", 3)


def test_read_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    target = tmp_path / "cudnn.log"
    target.write_text(CUDNN9_SHAPE)
    link = tmp_path / "link.log"
    link.symlink_to(target)
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)  # no writer: an open without O_NONBLOCK would hang here
    for path in (link, fifo, tmp_path):
        with pytest.raises(OSError, match=r"not a regular file|symbolic links"):
            read(path)
    with pytest.raises(FileNotFoundError):
        read(tmp_path / "missing.log")
    assert read(target) == CUDNN9_SHAPE


def test_read_takes_the_end_of_a_big_file(tmp_path: Path) -> None:
    path = tmp_path / "cudnn.log"
    size = 50 << 20
    tail = "\n" + CUDNN8_ERROR
    with path.open("wb") as handle:  # sparse: 50 MB of NUL bytes, then the failure
        handle.seek(size - len(tail))
        handle.write(tail.encode())
    begin = time.perf_counter()
    text = read(path)
    got = parse(text)
    assert time.perf_counter() - begin < 5.0
    assert len(text.encode()) <= 1 << 20
    assert text.endswith(CUDNN8_ERROR)
    assert got is not None and got.function == "cudnnConvolutionForward"
    small = read(path, limit=len(CUDNN8_ERROR) + 10)
    assert small == CUDNN8_ERROR  # the partial first line is dropped


def test_read_replaces_undecodable_bytes(tmp_path: Path) -> None:
    path = tmp_path / "cudnn.log"
    path.write_bytes(b"\xff\xfe" + CUDNN8_ERROR.encode())
    assert read(path).startswith("\ufffd\ufffdE! CuDNN")


# --- the table ----------------------------------------------------------------------------------
def test_every_status_name_has_a_meaning_and_a_cause() -> None:
    assert set(families.STATUS_MEANING) == set(families._STATUS_FAMILY)
    for name, (meaning, cause) in families.STATUS_MEANING.items():
        assert meaning and cause in families.CAUSES, name


@pytest.mark.parametrize(("number", "cause"), [
    (3000, "unknown"), (3001, "software"), (3002, "software"), (3003, "software"), (3004, "software"),
    (3005, "environment"), (3006, "environment"), (3007, "gpu"), (3008, "environment"),
    (3009, "environment"), (3010, "gpu"), (3011, "software"), (3012, "software"), (3013, "software"),
    (3014, "software"),
])
def test_not_supported_subcodes(number: int, cause: str) -> None:
    name = families.status_name(number)
    assert name is not None and name.startswith("CUDNN_STATUS_NOT_SUPPORTED")
    assert families.status_code(name) == number
    assert families.explain_status(name)[1] == cause


def test_explain_status_and_status_code() -> None:
    assert families.explain_status(" cudnn_status_not_supported_layout ") == (
        "no engine supports this memory layout", "software")
    assert families.explain_status("NOT_A_STATUS") == ("unknown cuDNN status", "unknown")
    assert families.status_code("CUDNN_STATUS_NOT_SUPPORTED", cudnn8=True) == 9
    assert families.status_code("CUDNN_STATUS_NOT_SUPPORTED_SHAPE", cudnn8=True) == 3002
    assert families.status_code("CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING") == 11  # cuDNN 8 only
    assert families.status_code("CUDNN_STATUS_NOPE") is None


def test_h200_the_error_block_of_an_illegal_access_under_launch_blocking() -> None:
    # Captured: the illegal-address case's repro script under CUDA_LAUNCH_BLOCKING=1 at the info
    # level (its end): cuDNN 9.19's E! block names the CUDA runtime's err 700 in its input transform.
    text = read(H200 / "blocking" / "cudnn.log")
    got = parse(text)
    assert got is not None and got.error is True and got.function == "cudnnBackendExecute"
    assert (got.status, got.subcode, got.cause) == ("CUDNN_STATUS_EXECUTION_FAILED_CUDART", 5003, "unknown")
    assert got.reason == "err 700 an illegal memory access was encountered != cudaSuccess :: cudaGetLastError()"
    assert "Reason: x_tensor.transformInput(" in text
    found = activity(text)
    assert found is not None and found.last_operation == "CONVOLUTION_BACKWARD_FILTER"


def test_without_warnings_only_errors_explain() -> None:
    # The captured warnings of a call that passed, then the captured error block: the NOT_SUPPORTED
    # warning ranks first, unless only errors count (a failure that is no cuDNN status).
    text = read(H200 / "capture" / "cudnn-big_single_sample-L2.log") + "\n" + read(H200 / "blocking" / "cudnn.log")
    ranked = parse(text)
    assert ranked is not None and ranked.status == "CUDNN_STATUS_NOT_SUPPORTED" and ranked.error is False
    errors_only = parse(text, warnings=False)
    assert errors_only is not None and errors_only.status == "CUDNN_STATUS_EXECUTION_FAILED_CUDART"
    assert parse(read(H200 / "capture" / "cudnn-big_single_sample-L2.log"), warnings=False) is None
