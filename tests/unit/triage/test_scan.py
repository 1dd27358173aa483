"""Triage (src/convmatrix/triage/scan.py): a failed job's log to its first cause, family and fix.

Logs are built at test time the way torchrun leaves them: every line of a worker prefixed
``[rankN]:``, log-framework timestamps, thousands of training lines, a cuDNN "Plan failed" warning
on the failing rank well before its fatal error, NCCL watchdog timeouts of the other ranks and
the elastic ChildFailedError summary after it. The error texts are real ones; the URL above each
is where a user reported it (the same sources as tests/unit/results/test_families.py).
"""

from __future__ import annotations

import gzip
import io
import json
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from convmatrix import shipped
from convmatrix.cli import main as cli
from convmatrix.results.families import FAMILIES, SIGNATURE, classify
from convmatrix.triage import remedies, scan
from testkit import REPO

DATA = REPO / "tests" / "data" / "logs"

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


def scan_lines(lines: list[str], context: int = 100, newline: str = "\n") -> dict[str, Any]:
    return scan.scan(io.BytesIO((newline.join(lines) + newline).encode()), context)


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
    assert all("\r" not in line and "\x1b" not in line for line in r["context_before"])


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
    seen = {f["family"]: f for f in r["families"]}
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
    monkeypatch.setattr(scan, "CHUNK", 1000)
    chunked = scan_lines(lines)
    assert chunked == whole
    assert chunked["line"] == where["error"] and len(chunked["context_before"]) == 100


def test_context_option_and_short_logs() -> None:
    lines, where = build_log(ERRORS[SIGNATURE], before=20, warning=False)
    r = scan_lines(lines, context=5)
    assert r["context_before"] == lines[where["error"] - 6 : where["error"] - 1]
    r = scan_lines(lines, context=1000)
    assert r["context_before"] == lines[: where["error"] - 1]


def test_stored_elastic_log() -> None:
    r = scan.scan_path(str(DATA / "elastic_not_supported.log"))
    assert (r["family"], r["line"], r["rank"], r["node"], r["fatal"]) == (SIGNATURE, 14, 1, "gpu-node-17", True)
    assert r["first_warning"]["line"] == 6
    assert [c["line"] for c in r["collateral"]] == [15, 16, 17, 18, 27]


def test_stored_log_with_an_echo_and_a_wrapped_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A handled traceback that echoes the signature in code (line 6), a "Plan failed" warning wrapped
    by a viewer at 100 columns (lines 10-13), then the real failure (line 21)."""
    lines = (DATA / "echo_and_wrapped_warning.log").read_text().splitlines()
    r = every_path(tmp_path, monkeypatch, lines)
    assert (r["family"], r["line"], r["rank"], r["fatal"]) == (SIGNATURE, 21, 1, True)
    assert r["first_warning"]["line"] == 10
    assert [(f["line"], f["fatal"]) for f in r["families"]] == [(10, False)]
    assert [c["line"] for c in r["collateral"]] == [22, 23]


@pytest.mark.parametrize("prefilter", ["rg", "grep", "none"])
@pytest.mark.parametrize("family", [SIGNATURE, "cudnn_no_engine", "cuda_oom", "cudnn_library_missing"])
def test_file_with_and_without_the_grep_prefilter_agree_with_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, family: str, prefilter: str
) -> None:
    if prefilter == "rg" and shutil.which("rg") is None:
        pytest.skip("ripgrep is not installed here (.ci/run installs it)")
    if prefilter == "grep":  # as on a machine without ripgrep
        which = shutil.which
        monkeypatch.setattr(shutil, "which", lambda name: None if name == "rg" else which(name))
    monkeypatch.setenv("CONVMATRIX_TRIAGE_GREP", "0" if prefilter == "none" else "1")
    # A tiny backward read, so that the grep path reads the context lines back in several steps.
    monkeypatch.setattr(scan._FileLines, "BACK_BLOCK", 64)
    lines, where = build_log(ERRORS[family])
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    r = scan.scan_path(str(path))
    assert r == scan_lines(lines)
    assert (r["family"], r["line"], r["rank"]) == (family, where["error"], 3)
    assert len(r["context_before"]) == 100


def test_grep_prefilter_is_used_for_plain_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = scan._scan_with_grep

    def spy(path: str, context: int) -> dict[str, Any] | None:
        calls.append(path)
        return real(path, context)

    monkeypatch.setattr(scan, "_scan_with_grep", spy)
    path = write(tmp_path / "job.log", build_log(ERRORS["cuda_oom"])[0])
    assert scan.scan_path(str(path))["family"] == "cuda_oom"
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


def test_every_family_has_remedies_and_verification() -> None:
    for family in FAMILIES:
        assert remedies.remedies_for(family), family
        assert any(cmd.startswith("convmatrix run -m ") for cmd in remedies.verify_commands(family))
    assert "-k '" in remedies.verify_commands(SIGNATURE)[0]
    assert remedies.remedies_for(None) == [] and remedies.verify_commands(None) == []


def named_paths(commands: list[str]) -> list[Path]:
    """Every file or folder the commands name (the words with a slash that are not options' values
    the command writes: reports/...)."""
    words = [word for cmd in commands for word in shlex.split(cmd)]
    return [Path(w) for w in words if "/" in w and not w.startswith("reports/")]


def test_verify_commands_in_a_checkout_name_its_suite_and_fix_proof_matrix() -> None:
    """They used to name suites/ and matrix/examples/ relative to the current directory and run
    nox: only a checkout's top folder had those."""
    commands = remedies.verify_commands(SIGNATURE)
    assert commands == [
        f"python -m pytest {REPO / 'suites'} --results-dir reports/triage --cell-id triage -k '{remedies.SUITE_K[SIGNATURE]}'",
        f"convmatrix run -m {REPO / 'matrix' / 'examples' / 'fix-proof.toml'} --strict --out reports/runs/fix-proof",
        "convmatrix report reports/runs/fix-proof --fail-on signature",
    ]
    assert all(path.is_absolute() and path.exists() for path in named_paths(commands)), commands


def fake_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, fix_proof: bool) -> Path:
    """An installed convmatrix (site-packages/convmatrix, a space in its path) with the suite it
    carries, and the fix-proof matrix when the wheel has one."""
    package = tmp_path / "my venv" / "lib" / "python3.11" / "site-packages" / "convmatrix"
    (package / "suites").mkdir(parents=True)
    (package / "suites" / "conftest.py").write_text("")
    if fix_proof:
        (package / "matrix" / "examples").mkdir(parents=True)
        (package / "matrix" / "examples" / "fix-proof.toml").write_text("")
    monkeypatch.setattr(shipped, "PACKAGE", package)
    return package


def test_verify_commands_of_an_installed_wheel_name_its_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    package = fake_wheel(tmp_path, monkeypatch, fix_proof=True)
    commands = remedies.verify_commands("cuda_oom")
    assert commands == [
        f"python -m pytest '{package / 'suites'}' --results-dir reports/triage --cell-id triage -k 'conv3d'",
        f"convmatrix run -m '{package / 'matrix' / 'examples' / 'fix-proof.toml'}' --strict --out reports/runs/fix-proof",
        "convmatrix report reports/runs/fix-proof --fail-on signature",
    ]
    assert all(path.is_absolute() and path.exists() for path in named_paths(commands)), commands
    # The text triage prints them as they are (no nox, nothing relative to a checkout).
    lines, _ = build_log(ERRORS["cuda_oom"])
    code, out, _ = main([str(write(tmp_path / "job.log", lines))], capsys)
    assert code == 0 and all(f"  $ {cmd}\n" in out for cmd in commands) and "nox" not in out, out


def test_a_wheel_without_the_fix_proof_matrix_names_no_command_that_needs_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = fake_wheel(tmp_path, monkeypatch, fix_proof=False)
    commands = remedies.verify_commands(SIGNATURE)
    assert commands == [
        f"python -m pytest '{package / 'suites'}' --results-dir reports/triage --cell-id triage "
        f"-k '{remedies.SUITE_K[SIGNATURE]}'",
    ]


# --- every path, one answer -------------------------------------------------------------------
def every_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str], context: int = 100) -> dict[str, Any]:
    """The result of the stream, gzip, ripgrep, GNU grep and pure-Python file paths, asserted equal;
    the stream also in tiny chunks and the grep path with tiny backward reads, so that chunk and
    read boundaries fall inside whatever the log holds."""
    data = ("\n".join(lines) + "\n").encode()
    plain = tmp_path / "job.log"
    plain.write_bytes(data)
    packed = tmp_path / "job.log.gz"
    packed.write_bytes(gzip.compress(data))
    results = {"stream": scan.scan(io.BytesIO(data), context), "gzip": scan.scan_path(str(packed), context)}
    with monkeypatch.context() as patch:
        patch.setattr(scan, "CHUNK", 97)
        results["stream in 97-byte chunks"] = scan.scan(io.BytesIO(data), context)
    which = shutil.which
    for prefilter in ("rg", "grep", "none"):
        if prefilter == "rg" and which("rg") is None:
            continue
        with monkeypatch.context() as patch:
            if prefilter == "grep":
                patch.setattr(shutil, "which", lambda name: None if name == "rg" else which(name))
                patch.setattr(scan._FileLines, "BACK_BLOCK", 64)
            patch.setenv("CONVMATRIX_TRIAGE_GREP", "0" if prefilter == "none" else "1")
            results[prefilter] = scan.scan_path(str(plain), context)
    for name, result in results.items():
        assert result == results["stream"], name
    return results["stream"]


# --- code is not a message --------------------------------------------------------------------
def test_source_that_a_traceback_echoes_is_code_not_the_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines, where = build_log(ERRORS["cuda_illegal_address"], warning=False)
    # Earlier, the same rank died of an unrelated error, in code that tests for the signature.
    handled = [
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "/workspace/train.py", line 95, in <module>',
        '[rank3]:     if "CUDNN_STATUS_NOT_SUPPORTED" in str(err):  # fall back to float32',
        '[rank3]:   File "/workspace/train.py", line 120, in step',
        # Python 3.13 echoes a statement over all its lines, with carets under them.
        "[rank3]:     out = torch.backends.cudnn.flags(",
        '[rank3]:         enabled=True, benchmark="CUDNN_STATUS_NOT_SUPPORTED" not in seen)',
        "[rank3]:         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '[rank3]:   File "/workspace/data.py", line 40, in __getitem__',
        "[rank3]:     raise OSError(f\"cuDNN error: CUDNN_STATUS_NOT_SUPPORTED in {path}\")",
        "[rank3]: ValueError: bad sample 17",
        # A warning's source line, under the warning, is code too.
        "[rank3]: /workspace/train.py:80: UserWarning: falling back to float32",
        '[rank3]:   warnings.warn("CUDNN_STATUS_NOT_SUPPORTED: falling back to float32")',
    ]
    lines[1000:1000] = handled
    for context in (100, 0):
        r = every_path(tmp_path, monkeypatch, lines, context)
        assert (r["family"], r["line"], r["rank"], r["fatal"]) == ("cuda_illegal_address", where["error"] + len(handled), 3, True)
        assert [f["family"] for f in r["families"]] == ["cuda_illegal_address"]


def test_the_exception_under_a_traceback_is_still_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 95, in <module>',
        "    out = model(x)",
        "  RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED",  # indented as deep as the frames: not an echo
        "terminate called after throwing an instance of 'c10::Error'",
        "  what():  CUDA error: an illegal memory access was encountered",  # C++, indented, not under a frame
    ]
    r = every_path(tmp_path, monkeypatch, lines)
    assert [(f["family"], f["line"], f["fatal"]) for f in r["families"]] == [
        (SIGNATURE, 4, True),
        ("cuda_illegal_address", 6, True),
    ]


# --- a wrapped warning stays a warning --------------------------------------------------------
def wrap(kind: str, width: int, rank: int = 3) -> list[str]:
    """PLAN_WARNING as printed by rank ``rank`` and wrapped: by a log viewer (the tag on the first
    piece only), by the program at a fixed width or at words (the tag on every piece)."""
    if kind == "viewer":
        line = f"[rank{rank}]: {PLAN_WARNING}"
        return [line[i : i + width] for i in range(0, len(line), width)]
    pieces = (
        textwrap.wrap(PLAN_WARNING, width)
        if kind == "words"
        else [PLAN_WARNING[i : i + width] for i in range(0, len(PLAN_WARNING), width)]
    )
    return [f"[rank{rank}]: {piece}" for piece in pieces]


WRAPS = [(kind, width) for kind in ("viewer", "fixed", "words") for width in (72, 80, 100, 120, 160)]


@pytest.mark.parametrize(("kind", "width"), WRAPS)
def test_a_wrapped_plan_failed_warning_is_a_warning_on_every_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, width: int
) -> None:
    pieces = wrap(kind, width)
    # The warning begins on its first piece; at words, the path may be a piece of its own.
    marked = next(i for i, p in enumerate(pieces) if "UserWarning" in p or "Plan failed with a" in p)
    first = 301 + (marked if kind == "words" else 0)
    lines, _ = build_log(None, warning=False, after_collateral=False, before=600)
    lines[300:300] = [*pieces, "[rank3]:   return F.conv2d(input, weight, bias, self.stride,"]
    for context in (100, 0):
        r = every_path(tmp_path, monkeypatch, lines, context)
        assert (r["family"], r["line"], r["rank"], r["fatal"]) == (SIGNATURE, first, 3, False)
        assert [(f["family"], f["fatal"]) for f in r["families"]] == [(SIGNATURE, False)]

    # With a real failure later, that is the cause, and the wrapped warning its first warning.
    lines, where = build_log(ERRORS[SIGNATURE], warning=False, before=600)
    lines[300:300] = pieces
    r = every_path(tmp_path, monkeypatch, lines)
    assert (r["family"], r["line"], r["fatal"]) == (SIGNATURE, where["error"] + len(pieces), True)
    assert r["first_warning"]["line"] == first


def test_an_error_after_a_warning_is_not_taken_into_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_supported = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
    lines = [
        "[rank1]: step 1",
        # A Python warning has no "(Triggered internally at ...)" to close it: it is one line.
        "[rank1]: /workspace/train.py:80: UserWarning: channels_last is slow on this GPU",
        f"[rank1]: {not_supported}",
        # A torch warning closed on its own line does not take the next one either.
        f"[rank2]: {PLAN_WARNING}",
        f"[rank2]: {not_supported}",
    ]
    r = every_path(tmp_path, monkeypatch, lines)
    assert [(f["line"], f["fatal"]) for f in r["families"]] == [(3, True)]
    assert (r["line"], r["rank"], r["fatal"]) == (3, 1, True)
    lines[2] = "[rank1]: step 2"
    r = every_path(tmp_path, monkeypatch, lines)
    assert (r["family"], r["line"], r["rank"], r["fatal"], r["first_warning"]) == (SIGNATURE, 5, 2, True, {
        "line": 4, "family": SIGNATURE, "text": lines[3]
    })


def test_a_message_cut_mid_word_on_every_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [
        "[rank0]: step 1",
        "[rank0]: RuntimeError: CUDA error: an illeg",  # the rest of the phrase, without a needle, follows
        "al memory access was encountered",
        "[rank1]: RuntimeError: Unable to find a valid cu",
        "[rank1]: DNN algorithm to run convolution",
        # cut by a viewer in mid-word, the rest with a needle of its own
        "[rank2]: RuntimeError: CUDA error: no kernel image is availa",
        "ble for execution on the device. CUDA kernel errors might be asynchronously reported",
        # a line that ends a sentence is not continued by the next message, even without a tag
        "[rank3]: RuntimeError: CUDA error: misaligned address.",
        "cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510",
    ]
    r = every_path(tmp_path, monkeypatch, lines)
    assert [(f["family"], f["line"], f["rank"]) for f in r["families"]] == [
        ("cuda_illegal_address", 2, 0),
        ("cudnn_no_algorithm", 4, 1),
        ("cuda_no_kernel_image", 6, 2),
        ("cuda_oom", 9, None),
    ]


# --- pathological logs: bounded, linear, every line classified once ---------------------------------
def test_a_line_counts_by_its_first_line_cap_bytes_on_every_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = "CUDA out of memory"
    inside = "x" * (scan.LINE_CAP - len(marker)) + marker  # ends exactly at the cap
    beyond = "x" * (scan.LINE_CAP - len(marker) + 1) + marker  # one byte past it
    lines = ["step 1", beyond + " and more", "step 2", inside + " and more", "step 3"]
    r = every_path(tmp_path, monkeypatch, lines, context=2)
    assert (r["family"], r["line"]) == ("cuda_oom", 4)
    assert r["text"] == inside and r["context_before"] == [beyond[: scan.LINE_CAP], "step 2"]


def test_every_line_is_classified_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [f"[rank{i % 4}]: CUDA_VISIBLE_DEVICES={i % 4} step {i} cudnn.benchmark=True" for i in range(300)]
    lines[50] = "[rank2]: RuntimeError: cuDNN error: CUDNN_STATUS_NOT_"
    lines[51] = "[rank2]: SUPPORTED"
    lines[120:120] = wrap("fixed", 80)
    lines += [f"[rank{i % 4}]: [Rank {i % 4}] Watchdog caught collective operation timeout: CUDA step {i}" for i in range(300)]
    calls: list[str] = []
    real = classify

    def counting(message: str | None, **kwargs: object) -> str | None:
        calls.append(message or "")
        return real(message)

    monkeypatch.setattr("convmatrix.triage.scan.classify", counting)
    r = every_path(tmp_path, monkeypatch, lines)
    assert (r["family"], r["line"]) == (SIGNATURE, 51)
    paths = 6 if shutil.which("rg") else 5
    seen = Counter(line for message in calls for line in message.split("\n"))
    assert max(seen.values()) == paths  # each line once per path, in one message
    assert len(calls) <= paths * len(lines)


MEASURE = """
import json, os, shutil, sys, tracemalloc
from convmatrix.triage import scan
path, prefilter, context, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
scan.CHUNK = chunk
which = shutil.which
if prefilter == "grep":
    scan.shutil.which = lambda name: None if name == "rg" else which(name)
os.environ["CONVMATRIX_TRIAGE_GREP"] = "0" if prefilter == "none" else "1"
tracemalloc.start()
r = scan.scan_path(path, context)
print(json.dumps({"peak": tracemalloc.get_traced_memory()[1], "family": r["family"], "line": r["line"],
                  "families": len(r["families"]), "collateral": len(r["collateral"])}))
"""


def peak_memory(path: Path, prefilter: str, context: int, chunk: int) -> dict[str, Any]:
    """scan.scan_path in a fresh interpreter: the peak of what Python allocated, and the answer."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(path), prefilter, str(context), str(chunk)],
        capture_output=True, text=True, check=True, timeout=300,
    )
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def memory_bound(context: int, chunk: int) -> int:
    """What the rules allow: a few chunks (the block, the read, the carry) and the kept lines
    (context before the cause, the lines around a candidate, the collateral), each possibly as
    bytes and as text of up to 4 bytes a character."""
    kept = context + scan.LOOKAHEAD + scan.LOOKBACK + scan.MAX_COLLATERAL
    return 6 * chunk + 4 * scan.LINE_CAP * kept + (1 << 20)


PREFILTERS = ["rg", "grep", "none", "gzip"]


@pytest.mark.parametrize("prefilter", PREFILTERS)
def test_a_50_mb_line_without_newline_is_bounded_in_memory(tmp_path: Path, prefilter: str) -> None:
    if prefilter == "rg" and shutil.which("rg") is None:
        pytest.skip("ripgrep is not installed here (.ci/run installs it)")
    head = b"[rank0]: step 1 on cuda:0\n[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    # A needle at its start makes it a candidate; the signature at its end is past the cap.
    long_line = b"[rank0]: CUDA_VISIBLE_DEVICES=0 " + b"x" * 50_000_000 + b" cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"
    path = tmp_path / ("job.log.gz" if prefilter == "gzip" else "job.log")
    path.write_bytes(gzip.compress(head + long_line, 1) if prefilter == "gzip" else head + long_line)
    chunk = 1 << 18
    found = peak_memory(path, prefilter, scan.DEFAULT_CONTEXT, chunk)
    assert found["peak"] < memory_bound(scan.DEFAULT_CONTEXT, chunk)
    assert (found["family"], found["line"], found["families"]) == ("cuda_illegal_address", 2, 1)


@pytest.mark.parametrize("prefilter", PREFILTERS)
def test_a_needle_on_every_line_is_bounded_in_memory(tmp_path: Path, prefilter: str) -> None:
    if prefilter == "rg" and shutil.which("rg") is None:
        pytest.skip("ripgrep is not installed here (.ci/run installs it)")
    cause = b"[rank0]: RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED\n"
    # Every line after the cause is collateral (and a candidate): 3000 lines of 4 kB.
    pad = b"x" * 4000
    after = b"".join(
        b"[rank%d]: [Rank %d] Watchdog caught collective operation timeout: CUDA step %d %s\n" % (i % 8, i % 8, i, pad)
        for i in range(3_000)
    )
    path = tmp_path / ("job.log.gz" if prefilter == "gzip" else "job.log")
    path.write_bytes(gzip.compress(cause + after, 1) if prefilter == "gzip" else cause + after)
    chunk = 1 << 18
    found = peak_memory(path, prefilter, 0, chunk)
    assert found["peak"] < memory_bound(0, chunk)
    assert (found["family"], found["line"], found["collateral"]) == (SIGNATURE, 1, scan.MAX_COLLATERAL)


# --- gzip and stdin -----------------------------------------------------------------------------
def cut_gzip(lines: list[str], keep: float) -> bytes:
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    return data[: int(len(data) * keep)]


@pytest.mark.parametrize("damage", ["cut", "corrupt"])
def test_a_damaged_gzip_reports_what_was_found_before_the_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    lines, where = build_log(ERRORS["cudnn_no_engine"], before=3000)
    lines += [filler(k % 4, k) for k in range(30000)]  # the cut falls in here
    data = cut_gzip(lines, 0.6)
    if damage == "corrupt":
        data = cut_gzip(lines, 1.0)
        middle = len(data) // 2
        data = data[:middle] + bytes(b ^ 0x5A for b in data[middle : middle + 64]) + data[middle + 64 :]
    path = tmp_path / "job.log.gz"
    path.write_bytes(data)
    code, out, err = main([str(path), "--format", "json"], capsys)
    r = json.loads(out)
    assert code == 0
    assert (r["family"], r["line"], r["rank"], r["fatal"]) == ("cudnn_no_engine", where["error"], 3, True)
    assert err.count("\n") == 1 and err.startswith(f"convmatrix: warning: {path}: ")
    assert r["warnings"] == [err.removeprefix("convmatrix: warning: ").rstrip("\n")]
    assert ("truncated" if damage == "cut" else "corrupt") in err and "lines before it" in err
    # The same through stdin, in text form.
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(data))))
    code, out, err = main(["-"], capsys)
    assert code == 0 and f"cudnn_no_engine at line {where['error']}" in out
    assert err.startswith("convmatrix: warning: <stdin>: ") and err.count("\n") == 1


def test_a_gzip_cut_in_its_header_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.log.gz"
    path.write_bytes(cut_gzip(["x"], 1.0)[:5])
    code, out, err = main([str(path)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"convmatrix: {path}: ")


def test_closed_stdin_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    done = subprocess.run(
        ["bash", "-c", '"$0" -m convmatrix triage - <&-', sys.executable], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (2, "", "convmatrix: <stdin>: standard input is closed\n")
    monkeypatch.setattr("sys.stdin", None)
    assert main(["-"], capsys) == (2, "", "convmatrix: <stdin>: standard input is closed\n")


# --- the result ------------------------------------------------------------------------------------
def test_families_keep_each_line_s_own_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines, where = build_log(ERRORS["cuda_oom"].replace("GPU 0 ", "the GPU "))
    lines[where["error"] - 1] = ERRORS["cuda_oom"].replace("GPU 0 ", "the GPU ")  # no [rank3]: tag
    r = every_path(tmp_path, monkeypatch, lines)
    assert (r["rank"], r["rank_source"], r["node"]) == (3, "root_cause", "gpu-node-17")  # completed
    oom = [f for f in r["families"] if f["family"] == "cuda_oom"]
    assert oom == [{"family": "cuda_oom", "line": where["error"], "rank": None, "fatal": True, "text": lines[where["error"] - 1]}]


def test_triage_stops_at_its_time_bound_and_says_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 21, item 8: a 5.5 MB gzip of 20 million matching lines kept triage busy past 300 s.
    With the bound at nothing, it stops after its first block (of two: 9 MB of lines), reports what
    it found and says so."""
    lines = [f"[rank0]: step {i} loss 0.125 lr 3.0e-04 grad_norm 1.07 img/s 812.4\n" for i in range(150_000)]
    lines.insert(10, "[rank0]: RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.\n")
    path = tmp_path / "job.log.gz"
    path.write_bytes(gzip.compress("".join(lines).encode()))
    monkeypatch.setattr(scan, "TIME_BASE_S", 0.0)
    monkeypatch.setattr(scan, "TIME_PER_MB_S", 0.0)
    result = scan.scan_path(str(path), context=0)
    assert result["family"] == "cudnn_not_supported" and result["line"] == 11
    (said,) = [w for w in result["warnings"] if "time bound" in w]
    assert said.startswith(f"{path}: stopped after ") and "the rest was not read" in said
    stopped_at = int(said.split(" at line ")[1].split(":")[0])
    assert 0 < stopped_at < len(lines)
    assert cli.main(["triage", str(path)]) == 0
    assert "time bound" in capsys.readouterr().err


def test_the_time_bound_grows_with_the_input() -> None:
    assert scan.time_bound(0) == scan.TIME_BASE_S
    assert scan.time_bound(100_000_000) == scan.TIME_BASE_S + 100 * scan.TIME_PER_MB_S


def test_an_input_of_unknown_size_is_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream whose size nothing tells (stdin, /dev/zero) stops at UNSIZED_MAX_S."""
    monkeypatch.setattr(scan, "UNSIZED_MAX_S", 0.0)

    class Endless:
        def read(self, size: int = -1) -> bytes:
            return b"[rank0]: step 1 loss 0.1\n" * max(1, (size if size > 0 else 1 << 16) // 26)

    result = scan.scan(Endless(), context=0, name="<stdin>")
    assert any("time bound" in w for w in result["warnings"])



def test_ripgrep_is_found_beside_the_interpreter_before_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25, item 4: the ripgrep wheel puts `rg` in the venv's bin, which is not on PATH unless
    the venv is activated; triage finds it there first."""
    import sys

    from convmatrix.triage import scan as scan_module

    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text("")
    rg = venv_bin / "rg"
    rg.write_text("#!/bin/sh\n")
    rg.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert scan_module.ripgrep() == str(rg)
    rg.chmod(0o644)  # not executable: not used
    assert scan_module.ripgrep() is None
