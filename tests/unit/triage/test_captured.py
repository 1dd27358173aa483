"""PyTorch's repro snippets in a log as case entries (triage/captured.py, `convmatrix cases
--from-log`): every field read, bf16 from the ConvolutionParams block, plain, gzip and
rank-prefixed logs, one case per distinct layer, a note for a log with a traceback only, and
nothing in a hostile log ever evaluated."""

from __future__ import annotations

import gzip
import tomllib
from pathlib import Path

import pytest

from convmatrix.cli.main import main
from convmatrix.triage import captured
from testkit import REPO

# Quoted from https://github.com/liuxz1011/TodyNet/issues/12 (the snippet as the report shows it).
TODYNET = REPO / "tests" / "data" / "logs" / "snippets" / "todynet12.log"


def snippet(*, shape: str = "[4, 64, 32, 32]", dtype: str = "torch.half", memory: str = "",
            net: str = "Conv2d(64, 30, kernel_size=[3, 3], padding=[1, 1], stride=[2, 2], dilation=[1, 1], groups=2)",
            data_type: str = "CUDNN_DATA_HALF", benchmark: str = "False") -> list[str]:
    """A snippet in the form ConvShared.cpp's repro_from_args prints (PyTorch 2.x)."""
    return [
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
        "non-contiguous input.",
        f"{captured.MARKER}. If that doesn't trigger the error, please include your original repro script when "
        "reporting this issue.", "", "import torch",
        "torch.backends.cuda.matmul.allow_tf32 = False",
        f"torch.backends.cudnn.benchmark = {benchmark}",
        "torch.backends.cudnn.deterministic = False",
        "torch.backends.cudnn.allow_tf32 = True",
        f"data = torch.randn({shape}, dtype={dtype}, device='cuda', requires_grad=True){memory}",
        f"net = torch.nn.{net}",
        "net = net.cuda().half()", "out = net(data)", "out.backward(torch.randn_like(out))",
        "torch.cuda.synchronize()", "", "ConvolutionParams ", f"    data_type = {data_type}",
        "    padding = [1, 1, 0]", "    stride = [2, 2, 0]", "    dilation = [1, 1, 0]", "    groups = 2",
        "    deterministic = false", "    allow_tf32 = true", "input: TensorDescriptor 0x7f3c2c0",
    ]


def test_a_real_snippet_becomes_a_case_with_every_field() -> None:
    found = captured.cases_from_log(str(TODYNET))
    (case,) = found.cases
    assert case == {
        "name": "captured_1", "op": "conv2d", "input": [16, 27, 256, 45], "out_channels": 18,
        "kernel": [1, 3], "padding": [0, 1], "stride": [1, 1], "dilation": [1, 1], "groups": 1, "bias": True,
        "dtype": "float32", "memory_format": "contiguous", "direction": "backward", "benchmark": True,
        "captured_from": f"{TODYNET}:1", "source": f"captured by convmatrix cases --from-log from {TODYNET} line 1",
    }
    assert found.notes == []


def test_bf16_comes_from_the_params_block_and_channels_last_from_the_data_line() -> None:
    lines = snippet(dtype="torch.unsupported", data_type="CUDNN_DATA_BFLOAT16",
                    memory=".to(memory_format=torch.channels_last)")
    (case,) = captured.cases_from_text(lines).cases
    assert (case["dtype"], case["memory_format"], case["groups"], case["stride"]) == (
        "bfloat16", "channels_last", 2, [2, 2])


def test_a_gzip_log_of_several_ranks_gives_each_distinct_layer_once(tmp_path: Path) -> None:
    one = snippet()
    other = snippet(shape="[2, 16, 8, 8, 8]", dtype="torch.float", data_type="CUDNN_DATA_FLOAT",
                    net="Conv3d(16, 8, kernel_size=[3, 3, 3], padding=[1, 1, 1], stride=[1, 1, 1], "
                        "dilation=[1, 1, 1], groups=1)",
                    memory=".to(memory_format=torch.channels_last_3d)")
    text = [f"[rank{r}]: \x1b[31m{line}" if line else f"[rank{r}]: " for r in range(4) for line in one]
    text += ["0: " + line for line in other]
    log = tmp_path / "job.log.gz"
    with gzip.open(log, "wt") as handle:
        handle.write("\n".join(text) + "\n")
    found = captured.cases_from_log(str(log))
    assert [c["op"] for c in found.cases] == ["conv2d", "conv3d"]
    assert found.cases[1]["memory_format"] == "channels_last_3d" and found.cases[1]["input"] == [2, 16, 8, 8, 8]
    assert [c["name"] for c in found.cases] == ["captured_1", "captured_2"]


def test_a_traceback_only_says_so_and_captures_nothing() -> None:
    found = captured.cases_from_text(["Traceback (most recent call last):", '  File "train.py", line 3',
                                      "RuntimeError: GET was unable to find an engine to execute this computation"])
    assert found.cases == []
    (note,) = found.notes
    assert "line 3" in note and "traceback only" in note and "v8" in note


@pytest.mark.parametrize("evil", [
    "data = torch.randn([__import__('os').system('touch /tmp/pwned')], dtype=torch.half, device='cuda', "
    "requires_grad=True)",
    "data = torch.randn([4, 64, 32, 32], dtype=torch.half, device='cuda', requires_grad=True); import os",
])
def test_a_hostile_snippet_is_read_never_run(evil: str) -> None:
    lines = [evil if line.startswith("data = ") else line for line in snippet()]
    found = captured.cases_from_text(lines)
    if found.cases:  # the second: the data line's own form is read, the rest of the line ignored
        assert found.cases[0]["input"] == [4, 64, 32, 32]
    else:
        assert "could not be read" in found.notes[0]
    assert not Path("/tmp/pwned").exists()


def test_a_huge_line_and_many_snippets_stay_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(captured, "MAX_CASES", 5)
    lines = ["x" * (10 * captured.LINE_CAP)]
    for n in range(1, 50):
        lines += snippet(shape=f"[{n}, 64, 32, 32]")
    log = tmp_path / "big.log"
    log.write_text("\n".join(lines) + "\n")
    found = captured.cases_from_log(str(log))
    assert len(found.cases) == 5 and any("at most 5 cases" in note for note in found.notes)


def test_a_mismatched_snippet_is_named_not_guessed() -> None:
    found = captured.cases_from_text(snippet(shape="[4, 32, 32, 32]"))
    assert found.cases == [] and "an input of 32 channels into Conv2d(64" in found.notes[0]


def test_the_toml_reads_back_as_the_cases() -> None:
    found = captured.cases_from_text(snippet(dtype="torch.unsupported", data_type="CUDNN_DATA_BFLOAT16"),
                                     name='we"ird\nname')
    data = tomllib.loads(captured.to_toml(found.cases, 'we"ird\nname'))
    assert data["case"] == found.cases


def test_the_command_writes_a_case_file_that_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "prod.toml"
    assert main(["cases", "--from-log", str(TODYNET), "-o", str(out)]) == 0
    assert "1 case(s) captured" in capsys.readouterr().err
    assert main(["cases", str(out)]) == 0
    assert "prod-conv2d-fp32-k1x3-p0x1-bwd-bench_on-captured_1" in capsys.readouterr().out


def test_the_command_on_a_log_without_snippets_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "job.log"
    log.write_text("RuntimeError: FIND was unable to find an engine to execute this computation\n")
    assert main(["cases", "--from-log", str(log)]) == 2
    err = capsys.readouterr().err
    assert "traceback only" in err and "no repro snippet to capture" in err
