"""Triage (src/convmatrix/triage.py): a failed job's log to its first cause, family and fix.

Logs are built at test time the way torchrun leaves them: every line of a worker prefixed
``[rankN]:``, log-framework timestamps, thousands of training lines, a cuDNN "Plan failed" warning
on the failing rank well before its fatal error, NCCL watchdog timeouts of the other ranks and
the elastic ChildFailedError summary after it. The error texts are real ones; the URL above each
is where a user reported it (the same sources as tests/test_classify.py).
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

import pytest

from convmatrix import cli, remedies, triage
from convmatrix.classify import FAMILIES, SIGNATURE

DATA = Path(__file__).parent / "data" / "logs"

PLAN_WARNING = (
    "/usr/lib/python3.11/site-packages/torch/nn/modules/conv.py:456: UserWarning: Plan failed with a "
    "cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: cudnnFinalize Descriptor Failed "
    "cudnn_status: CUDNN_STATUS_NOT_SUPPORTED (Triggered internally at "
    "../aten/src/ATen/native/cudnn/Conv_v8.cpp:919.)"
)

# family -> the fatal error as the failing rank printed it (first line carries the marker).
ERRORS: dict[str, str] = {
    # https://github.com/pytorch/pytorch/issues/88380
    SIGNATURE: "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you "
    "passed in a non-contiguous input.",
    # derived: PyTorch's "GET was unable to find an engine" (aten/src/ATen/native/cudnn/Conv_v8.cpp)
    "cudnn_no_engine": "RuntimeError: GET was unable to find an engine to execute this computation",
    # https://github.com/pytorch/pytorch/issues/16417-era reports (try_all, Conv.cpp)
    "cudnn_no_algorithm": "RuntimeError: Unable to find a valid cuDNN algorithm to run convolution",
    # https://github.com/TerryPei/EfficientVMamba/issues/23
    "cuda_no_kernel_image": "RuntimeError: CUDA error: no kernel image is available for execution on the "
    "device\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
    # https://github.com/murong-xu/CADS/issues/4
    "cuda_oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a "
    "total capacity of 31.47 GiB of which 12.73 GiB is free.",
    # https://github.com/pytorch/pytorch/issues/48945
    "cuda_illegal_address": "RuntimeError: CUDA error: an illegal memory access was encountered",
    # https://github.com/m-bain/whisperX/issues/1297
    "cudnn_library_missing": "Unable to load any of {libcudnn_cnn.so.9.1.0, libcudnn_cnn.so.9.1, "
    "libcudnn_cnn.so.9, libcudnn_cnn.so}\nInvalid handle. Cannot load symbol cudnnCreateConvolutionDescriptor",
    # https://github.com/jwyang/faster-rcnn.pytorch/issues/662
    "cudnn_version_mismatch": "RuntimeError: cuDNN version mismatch: PyTorch was compiled against 7102 "
    "but linked against 7600",
    # derived: PyTorch's "cuDNN error: <status>" template with a cuDNN 9 sub-code
    "cudnn_arch_mismatch": "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH",
    # https://github.com/lllyasviel/Fooocus/issues/1313 wording of the CUDA runtime
    "cuda_driver_insufficient": "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA "
    "runtime version",
    "cudnn_execution_failed": "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
}

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/workspace/train.py", line 211, in <module>',
    "    main()",
    '  File "/workspace/train.py", line 187, in main',
    "    out = model(images)",
    '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/conv.py", line 549, in _conv_forward',
    "    return F.conv2d(",
    "           ^^^^^^^^^",
]


def filler(rank: int, step: int) -> str:
    return (
        f"[rank{rank}]: 2024-06-01 12:{step // 60 % 60:02d}:{step % 60:02d},123 - INFO - train.py:120 - "
        f"step {step} loss {1 / (step + 1):.5f} lr 3.0e-04 grad_norm 1.07 img/s 812.4"
    )


def build_log(
    error: str | None,
    *,
    before: int = 3000,
    warning: bool = True,
    failing_rank: int = 3,
    ranks: int = 4,
    after_collateral: bool = True,
) -> tuple[list[str], dict[str, int]]:
    """The log's lines, and where things are (1-based line numbers)."""
    lines = [
        "W1202 12:00:00.000000 140 torch/distributed/run.py:779] Setting OMP_NUM_THREADS environment "
        "variable for each process to be 1 in default, to avoid your system being overloaded"
    ]
    lines += [f"[rank{r}]: 2024-06-01 12:00:00,000 - INFO - using device cuda:{r}, world size {ranks}" for r in range(ranks)]
    lines += ["[rank0]: 2024-06-01 12:00:00,500 - INFO - torch.cuda.max_memory_allocated() = 12.3 GiB"]
    where: dict[str, int] = {}
    step = 0
    for i in range(before):
        if warning and i == before - 50:
            lines.append(f"[rank{failing_rank}]: {PLAN_WARNING}")
            where["warning"] = len(lines)
            lines.append(f"[rank{failing_rank}]:   return F.conv2d(input, weight, bias, self.stride,")
            continue
        lines.append(filler(i % ranks, step))
        step += i % ranks == ranks - 1
    if error is not None:
        lines += [f"[rank{failing_rank}]: {t}" for t in TRACEBACK]
        first, *rest = error.split("\n")
        lines.append(f"[rank{failing_rank}]: {first}")
        where["error"] = len(lines)
        lines += [f"[rank{failing_rank}]: {t}" for t in rest]
    if after_collateral:
        other = (failing_rank + 1) % ranks
        lines += [filler(other, step + k) for k in range(5)]
        lines.append(
            f"[rank{other}]:[E1202 12:10:03.000000 141 ProcessGroupNCCL.cpp:616] [Rank {other}] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600001 milliseconds before timing out."
        )
        where["watchdog"] = len(lines)
        lines += [
            "W1202 12:10:04.000000 140 torch/distributed/elastic/multiprocessing/api.py:858] Sending process "
            "142 closing signal SIGTERM",
            "E1202 12:10:05.000000 140 torch/distributed/elastic/multiprocessing/api.py:833] failed "
            f"(exitcode: 1) local_rank: {failing_rank} (pid: 143) of binary: /usr/bin/python3",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
            "============================================================",
            "train.py FAILED",
            "------------------------------------------------------------",
            "Root Cause (first observed failure):",
            "[0]:",
            "  time      : 2024-06-01_12:10:05",
            "  host      : gpu-node-17",
            f"  rank      : {failing_rank} (local_rank: {failing_rank})",
            "  exitcode  : 1 (pid: 143)",
            "  error_file: <N/A>",
            "============================================================",
        ]
    return lines, where


def scan_lines(lines: list[str], context: int = 100, newline: str = "\n") -> dict[str, object]:
    return triage.scan(io.BytesIO((newline.join(lines) + newline).encode()), context)


@pytest.mark.parametrize("family", sorted(ERRORS))
def test_first_cause_family_line_rank(family: str) -> None:
    lines, where = build_log(ERRORS[family])
    r = scan_lines(lines)
    assert r["family"] == family
    assert r["line"] == where["error"]
    assert r["rank"] == 3
    assert r["fatal"] is True
    before = r["context_before"]
    assert isinstance(before, list) and len(before) == 100
    assert before[-1] == lines[where["error"] - 2]
    assert before[0] == lines[where["error"] - 101]
    # The NOT_SUPPORTED warning 50 lines earlier is reported as the first warning, not the cause.
    assert r["first_warning"] == {"line": where["warning"], "family": SIGNATURE, "text": lines[where["warning"] - 1]}
    assert r["node"] == "gpu-node-17"  # from the elastic Root Cause block
    assert r["remedies"] == remedies.remedies_for(family) and r["remedies"]


def test_collateral_after_the_cause_is_marked_with_its_rank() -> None:
    lines, where = build_log(ERRORS[SIGNATURE])
    r = scan_lines(lines)
    collateral = r["collateral"]
    assert isinstance(collateral, list)
    assert all(c["collateral"] is True and c["line"] > where["error"] for c in collateral)
    watchdog = [c for c in collateral if "Watchdog caught" in c["text"]]
    assert [(c["line"], c["rank"]) for c in watchdog] == [(where["watchdog"], 0)]
    texts = " ".join(c["text"] for c in collateral)
    assert "ChildFailedError" in texts and "closing signal SIGTERM" in texts and "exitcode" in texts
    exits = [c for c in collateral if "exitcode  :" in c["text"]]
    assert [c["rank"] for c in exits] == [3]
    assert r["root_cause"] == {"host": "gpu-node-17", "rank": "3", "exitcode": "1"}


def test_collateral_before_the_cause_is_not_collateral() -> None:
    lines, where = build_log(ERRORS["cuda_oom"], after_collateral=False)
    watchdog = "[rank1]: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3)"
    lines.insert(10, watchdog)
    r = scan_lines(lines)
    assert r["line"] == where["error"] + 1
    assert r["collateral"] == []


def test_mangled_log_ansi_crlf_and_a_broken_identifier() -> None:
    lines, _ = build_log(None, warning=False, after_collateral=False)
    lines = [f"\x1b[32m{line}\x1b[0m" if i % 7 == 0 else line for i, line in enumerate(lines)]
    lines += [f"[rank2]: {t}" for t in TRACEBACK]
    lines += [
        "[rank2]: \x1b[31m2024-06-01T12:00:00.123Z ERROR RuntimeError: cuDNN error: CUDNN_STATUS_NOT_",
        "[rank2]: SUPPORTED_SHAPE\x1b[0m",
    ]
    r = scan_lines(lines, newline="\r\n")
    assert (r["family"], r["line"], r["rank"], r["fatal"]) == (SIGNATURE, len(lines) - 1, 2, True)
    assert all("\r" not in line and "\x1b" not in line for line in r["context_before"])  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "broken",
    [
        ("CUDNN_STATUS_NOT_SUPPORTED_ARCH_", "MISMATCH"),
        ("CUDNN_STATUS_NOT_SUPPORTED", "_ARCH_MISMATCH"),
    ],
)
def test_sibling_broken_across_lines_is_not_the_signature(broken: tuple[str, str]) -> None:
    lines, _ = build_log(None, warning=False, after_collateral=False, before=200)
    lines += [f"[rank0]: RuntimeError: cuDNN error: {broken[0]}", f"[rank0]: {broken[1]}"]
    r = scan_lines(lines)
    assert (r["family"], r["line"], r["rank"]) == ("cudnn_arch_mismatch", len(lines) - 1, 0)


def test_warning_only_log_is_not_fatal() -> None:
    lines, where = build_log(None, after_collateral=False)
    r = scan_lines(lines)
    assert r["family"] == SIGNATURE
    assert r["fatal"] is False
    assert r["line"] == where["warning"]
    assert r["rank"] == 3
    assert r["first_warning"] is None and r["context_before"] == []


def test_first_fatal_wins_over_later_ones_and_families_lists_all() -> None:
    lines, where = build_log(ERRORS["cuda_illegal_address"], failing_rank=1)
    lines.insert(len(lines) - 3, f"[rank2]: {ERRORS[SIGNATURE]}")
    r = scan_lines(lines)
    assert (r["family"], r["line"], r["rank"]) == ("cuda_illegal_address", where["error"], 1)
    seen = {f["family"]: f for f in r["families"]}  # type: ignore[union-attr]
    assert seen[SIGNATURE]["fatal"] is False  # the Plan failed warning came first ...
    assert seen["cuda_illegal_address"]["line"] == where["error"]


def test_rank_from_env_and_device() -> None:
    r = scan_lines(["starting", "LOCAL_RANK=5 RuntimeError: CUDA error: an illegal memory access was encountered"])
    assert (r["rank"], r["rank_source"]) == (5, "LOCAL_RANK")
    r = scan_lines(["host42: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB on cuda:6"])
    assert (r["rank"], r["rank_source"], r["device"], r["node"]) == (6, "device", "cuda:6", "host42")


def test_small_chunks_give_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    lines, where = build_log(ERRORS["cudnn_no_engine"])
    whole = scan_lines(lines)
    monkeypatch.setattr(triage, "CHUNK", 1000)
    chunked = scan_lines(lines)
    assert chunked == whole
    assert chunked["line"] == where["error"] and len(chunked["context_before"]) == 100  # type: ignore[arg-type]


def test_context_option_and_short_logs() -> None:
    lines, where = build_log(ERRORS[SIGNATURE], before=20, warning=False)
    r = scan_lines(lines, context=5)
    assert r["context_before"] == lines[where["error"] - 6 : where["error"] - 1]
    r = scan_lines(lines, context=1000)
    assert r["context_before"] == lines[: where["error"] - 1]


def test_stored_elastic_log() -> None:
    r = triage.scan_path(str(DATA / "elastic_not_supported.log"))
    assert (r["family"], r["line"], r["rank"], r["node"], r["fatal"]) == (SIGNATURE, 14, 1, "gpu-node-17", True)
    assert r["first_warning"]["line"] == 6  # type: ignore[index]
    assert [c["line"] for c in r["collateral"]] == [15, 16, 17, 18, 27]  # type: ignore[index]


@pytest.mark.parametrize("prefilter", ["rg", "grep", "none"])
@pytest.mark.parametrize("family", [SIGNATURE, "cudnn_no_engine", "cuda_oom", "cudnn_library_missing"])
def test_file_with_and_without_the_grep_prefilter_agree_with_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, family: str, prefilter: str
) -> None:
    if prefilter == "rg" and shutil.which("rg") is None:
        pytest.skip("ripgrep is not installed here (.ci/run installs it)")
    if prefilter == "grep":  # as on a machine without ripgrep
        which = shutil.which
        monkeypatch.setattr(triage.shutil, "which", lambda name: None if name == "rg" else which(name))
    monkeypatch.setenv("CONVMATRIX_TRIAGE_GREP", "0" if prefilter == "none" else "1")
    # Tiny windows, so that the grep path reloads and extends its window and reads context backwards.
    monkeypatch.setattr(triage._SeekScanner, "_WINDOW", 64)
    monkeypatch.setattr(triage._SeekScanner, "_BACK", 200)
    lines, where = build_log(ERRORS[family])
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    r = triage.scan_path(str(path))
    assert r == scan_lines(lines)
    assert (r["family"], r["line"], r["rank"]) == (family, where["error"], 3)
    assert len(r["context_before"]) == 100  # type: ignore[arg-type]


def test_grep_prefilter_is_used_for_plain_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = triage._scan_with_grep

    def spy(path: str, context: int) -> dict[str, object] | None:
        calls.append(path)
        return real(path, context)

    monkeypatch.setattr(triage, "_scan_with_grep", spy)
    path = write(tmp_path / "job.log", build_log(ERRORS["cuda_oom"])[0])
    assert triage.scan_path(str(path))["family"] == "cuda_oom"
    assert calls == [str(path)]


# --- the command ------------------------------------------------------------------------------
def main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`convmatrix triage ...` through the real command line."""
    code = cli.main(["triage", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def write(path: Path, lines: list[str]) -> Path:
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def test_cli_json_and_gzip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines, where = build_log(ERRORS["cudnn_no_algorithm"])
    code, out, _ = main([str(write(tmp_path / "job.log.gz", lines)), "--format", "json"], capsys)
    r = json.loads(out)
    assert code == 0
    assert (r["family"], r["line"], r["rank"], r["fatal"]) == ("cudnn_no_algorithm", where["error"], 3, True)
    assert any("fix-proof.toml" in cmd for cmd in r["verify"])


def test_cli_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines, where = build_log(ERRORS[SIGNATURE])
    code, out, _ = main([str(write(tmp_path / "job.log", lines)), "--context", "20"], capsys)
    assert code == 0
    assert f"cudnn_not_supported at line {where['error']} (rank 3, node gpu-node-17" in out
    assert "context (20 lines before" in out and "collateral (" in out
    assert "torch.backends.cudnn.benchmark = False" in out and "--fail-on signature" in out


def test_cli_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    lines, where = build_log(ERRORS["cuda_oom"])
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(data))))
    code, out, _ = main(["-", "--format", "json"], capsys)
    r = json.loads(out)
    assert (code, r["family"], r["line"], r["rank"]) == (0, "cuda_oom", where["error"], 3)


def test_cli_nothing_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines, _ = build_log(None, warning=False, after_collateral=False, before=500)
    path = write(tmp_path / "ok.log", lines)
    code, out, _ = main([str(path)], capsys)
    assert code == 0 and "no known failure signature found" in out
    code, out, _ = main([str(path), "--format", "json"], capsys)
    r = json.loads(out)
    assert (code, r["family"], r["line"], r["rank"], r["fatal"]) == (0, None, None, None, False)


@pytest.mark.parametrize(
    ("name", "content", "extra", "why"),
    [
        ("missing.log", None, [], "No such file or directory"),
        ("fake.log.gz", b"plain text\n", [], "not a gzip file"),
        ("job.log", b"x\n", ["--context", "-3"], "--context must be >= 0"),
        ("job.log", b"x\n", ["--context", "many"], "not a number of lines"),
    ],
)
def test_cli_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes | None, extra: list[str], why: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    code, out, err = main([str(path), *extra], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"convmatrix: {path}: ") and why in err


def test_truncated_gzip_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cut.log.gz"
    path.write_bytes(gzip.compress("".join(f"{i * 7919 % 100003} {i}\n" for i in range(20000)).encode())[:2000])
    code, _, err = main([str(path)], capsys)
    assert code == 2 and err.startswith(f"convmatrix: {path}: ")


def test_every_family_has_remedies_and_verification() -> None:
    for family in FAMILIES:
        assert remedies.remedies_for(family), family
        assert any("nox -s baremetal" in cmd for cmd in remedies.verify_commands(family))
    assert "-k '" in remedies.verify_commands(SIGNATURE)[0]
    assert remedies.remedies_for(None) == [] and remedies.verify_commands(None) == []
