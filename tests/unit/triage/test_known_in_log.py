"""triage/known_in_log.py: a log's versions and families against the known issues, and the
`convmatrix triage` output that carries them."""

from __future__ import annotations

import codecs
import gzip
import json
import re
from pathlib import Path

import pytest

from convmatrix.cli.main import main
from convmatrix.results import known
from convmatrix.triage import known_in_log

COLLECT_ENV = """\
Collecting environment information...
PyTorch version: 2.3.0+cu121
Is debug build: False
CUDA used to build PyTorch: 12.1
cuDNN version: Probably one of the following:
/usr/lib/x86_64-linux-gnu/libcudnn.so.8.9.7
Versions of relevant libraries:
[pip3] nvidia-cudnn-cu12==8.9.2.26
[pip3] torch==2.3.0
"""
FAILURE = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
PLAN_FAILED = "plan-failed-warning-torch-2-3-0"


def ids(issues: list[known.KnownIssue]) -> list[str]:
    return [issue.id for issue in issues]


def test_collect_env_versions() -> None:
    stack = known_in_log.stack_from_lines(COLLECT_ENV.splitlines())
    # The wheel torch loads wins over the system library collect_env lists.
    assert stack == known.Stack(torch="2.3.0+cu121", cuda="12.1", cudnn=8902, capability=None)


@pytest.mark.parametrize(("lines", "stack"), [
    (["torch.backends.cudnn.version(): 90100", "[pip3] nvidia-cudnn-cu12==9.5.1.17", "torch.__version__ = '2.4.1+cu124'"],
     known.Stack(torch="2.4.1+cu124", cuda="12.4", cudnn=90100)),
    (["PyTorch: 2.1.0+cu121 (7bcf7da3) (<site-package>)", "       capability: 6.1"],
     known.Stack(torch="2.1.0+cu121", cuda="12.1", capability="6.1")),
    (["cuDNN version: 90100", "torch                    2.5.1", "compute capability (8, 0)"],
     known.Stack(torch="2.5.1", cudnn=90100, capability="8.0")),
    (["NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation."],
     known.Stack(capability="12.0")),
    (["cuDNN version: Could not collect", "torch: unknown"], known.Stack()),
])
def test_version_lines(lines: list[str], stack: known.Stack) -> None:
    assert known_in_log.stack_from_lines(lines) == stack


def test_from_log_matches_by_versions_and_family() -> None:
    lines = COLLECT_ENV.splitlines()
    assert PLAN_FAILED in ids(known_in_log.from_log(lines, ["cudnn_not_supported"]))
    assert known_in_log.from_log(lines, ["cuda_oom"]) == [] or PLAN_FAILED not in ids(
        known_in_log.from_log(lines, ["cuda_oom"]))
    assert known_in_log.from_log(lines, []) == []
    newer = [line.replace("2.3.0", "2.3.1") for line in lines]
    assert PLAN_FAILED not in ids(known_in_log.from_log(newer, ["cudnn_not_supported"]))
    assert PLAN_FAILED not in ids(known_in_log.from_log(["no versions here"], ["cudnn_not_supported"]))


def test_families_of_a_scan_result() -> None:
    result = {"family": "cudnn_not_supported", "families": [{"family": "cudnn_not_supported"}, {"family": "cuda_oom"}]}
    assert known_in_log.families_of(result) == ["cudnn_not_supported", "cuda_oom"]
    assert known_in_log.families_of({"family": None, "families": []}) == []


def test_read_head_plain_gzip_utf16(tmp_path: Path) -> None:
    text = COLLECT_ENV + FAILURE + "\n"
    plain, packed, wide = tmp_path / "a.log", tmp_path / "b.log.gz", tmp_path / "c.log"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    wide.write_bytes(codecs.BOM_UTF16_LE + text.replace("\n", "\r\n").encode("utf-16-le"))
    for path in (plain, packed, wide):
        head = known_in_log.read_head(str(path))
        assert "PyTorch version: 2.3.0+cu121" in [line.lstrip("\ufeff") for line in head], path


def test_read_head_reads_only_the_head_and_survives_damage(tmp_path: Path) -> None:
    late = tmp_path / "late.log"
    late.write_text("x" * 100 + "\n" + COLLECT_ENV)
    assert known_in_log.stack_from_lines(known_in_log.read_head(str(late), limit=50)) == known.Stack()
    damaged = tmp_path / "damaged.log.gz"
    data = gzip.compress((COLLECT_ENV + "step\n" * 200_000).encode())
    damaged.write_bytes(data[: len(data) // 2])
    assert known_in_log.stack_from_lines(known_in_log.read_head(str(damaged))).torch == "2.3.0+cu121"
    bomb = tmp_path / "big.log.gz"  # the head of a large gzip, not all of it
    bomb.write_bytes(gzip.compress(COLLECT_ENV.encode() + b"\0" * (64 << 20)))
    head = known_in_log.read_head(str(bomb))
    assert sum(len(line) for line in head) <= known_in_log.HEAD
    assert known_in_log.read_head("-") == [] and known_in_log.read_head(str(tmp_path)) == []
    assert known_in_log.read_head(str(tmp_path / "missing.log")) == []


# --- the command -------------------------------------------------------------------------------------
def test_triage_text_prints_known_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "job.log"
    log.write_text(COLLECT_ENV + "step 1\n" + FAILURE + "\n")
    assert main(["triage", str(log)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    known_lines = [line for line in lines if line.startswith("known: ")]
    issue = next(i for i in known.load() if i.id == PLAN_FAILED)
    assert known.annotation(issue) in known_lines
    assert lines.index(known_lines[0]) > max(i for i, line in enumerate(lines) if line.startswith("verify") or "$ " in line)
    assert any("[if the conv is: dgrad=true" in line for line in known_lines)  # conditions a log cannot check


def test_triage_json_adds_a_known_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "job.log.gz"
    log.write_bytes(gzip.compress((COLLECT_ENV + FAILURE + "\n").encode()))
    assert main(["triage", str(log), "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["family"] == "cudnn_not_supported"
    entry = next(e for e in result["known"] if e["id"] == PLAN_FAILED)
    assert entry["annotation"].startswith("known: ") and entry["source"].startswith("https://")
    assert set(entry) == {"id", "summary", "source", "fixed_in", "workaround", "conditions", "annotation"}


def test_triage_without_versions_claims_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "job.log"
    log.write_text("step 1\n" + FAILURE + "\n")
    assert main(["triage", str(log), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["known"] == []
    assert main(["triage", str(log)]) == 0
    assert "known: " not in capsys.readouterr().out


def _unfiltered(lines: list[str]) -> known.Stack:
    """stack_from_lines without its line prefilter: every pattern on every line."""
    saved = known_in_log._MENTION
    known_in_log._MENTION = re.compile("")  # matches every line
    try:
        return known_in_log.stack_from_lines(lines)
    finally:
        known_in_log._MENTION = saved


@pytest.mark.parametrize("line", [
    "PyTorch version: 2.3.0+cu121", "torch.__version__: 2.4.1", "[pip3] torch==2.3.0",
    "PyTorch: 2.1.0+cu121", "  torch 2.5.1  ", "torch.backends.cudnn.version(): 90100",
    "TORCH.BACKENDS.CUDNN.VERSION(): 90100", "CUDNN.VERSION() 8902", "[pip3] nvidia-cudnn-cu12==9.1.0.70",
    "cuDNN version: 8.9.2", "/usr/lib/libcudnn_ops.so.9.1.0", "torch.version.cuda: 12.1",
    "CUDA used to build PyTorch: 12.4", "CAPABILITY: 8.6", "compute Capability (9, 0)",
    "GPU with CUDA capability sm_120 is not compatible",
])
def test_the_line_prefilter_passes_every_line_a_pattern_reads(line: str) -> None:
    # Among a training log's lines, each version line is read as with every pattern on every line
    # (a prefilter that missed a spelling, IGNORECASE ones above all, would lose the fact).
    noise = [f"[rank{r}]: step {r} loss 0.1 img/s 812.4 peak memory on cuda:{r}" for r in range(8)]
    lines = [*noise, line, *noise]
    assert known_in_log.stack_from_lines(lines) == _unfiltered(lines) != known.Stack()
