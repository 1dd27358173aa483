"""PyTorch's cuDNN repro snippets in a log as case entries (triage/snippets.py): each field read
from real snippets quoted from public reports, bf16 from the ConvolutionParams block, plain, gzip
and rank-prefixed logs, one case per distinct layer, a note for a traceback-only log, a case file
the suite's own reader takes, and a hostile log read in bounded time and memory with nothing in
it ever run.

The quoted logs (tests/data/logs/snippets/, each naming its source on its first line):
  todynet12.log       https://github.com/liuxz1011/TodyNet/issues/12
  pytorch_81106.log   https://github.com/pytorch/pytorch/issues/81106
  multiyolov5_11.log  https://github.com/TomMao23/multiyolov5/issues/11
  cdtnet_6.log        https://github.com/SuhyeonHa/CDTNet-PyTorch/issues/6
  pytorch_45729.log   https://github.com/pytorch/pytorch/pull/45729
  pytorch_53191.log   https://github.com/pytorch/pytorch/issues/53191
No public log with a bf16 (`torch.unsupported`) or a 2.x `memory_format = ...` block was found;
those snippets are written below in the form ConvShared.cpp prints (pytorch/pytorch at
7b2b3239feab2066310fac08b3b6b81517527db3, repro_from_args and operator<<(ConvolutionParams)).
"""

from __future__ import annotations

import builtins
import gzip
import os
import subprocess
import tomllib
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from catalogkit import catalog
from convmatrix.errors import BadInput
from convmatrix.triage import snippets
from testkit import REPO, load_suite_module

DATA = REPO / "tests" / "data" / "logs" / "snippets"
MARKER_LINE = (f"{snippets.MARKER}. If that doesn't trigger the error, please include your original repro script "
               "when reporting this issue.")


def current(*, shape: str = "[2, 64, 16, 16]", dtype: str = "unsupported", to: str = "",
            net: str = "Conv2d(64, 32, kernel_size=[3, 3], padding=[1, 1], stride=[2, 2], dilation=[1, 1], groups=2)",
            data_type: str = "CUDNN_DATA_BFLOAT16", memory: str = "ChannelsLast", pad: str = "[1, 1, 0]",
            deterministic: str = "True", block_deterministic: str = "true") -> list[str]:
    """A snippet as PyTorch 2.x prints it (ConvShared.cpp at 7b2b3239feab...: repro_from_args,
    then operator<<(ConvolutionParams) with its memory_format line), after its error line."""
    return [
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
        "non-contiguous input.",
        MARKER_LINE, "", "import torch",
        "torch.backends.cuda.matmul.allow_tf32 = False",
        "torch.backends.cudnn.benchmark = False",
        f"torch.backends.cudnn.deterministic = {deterministic}",
        "torch.backends.cudnn.allow_tf32 = False",
        f"data = torch.randn({shape}, dtype=torch.{dtype}, device='cuda', requires_grad=True){to}",
        f"net = torch.nn.{net}",
        f"net = net.cuda().{dtype}(){to}", "out = net(data)", "out.backward(torch.randn_like(out))",
        "torch.cuda.synchronize()", "", "ConvolutionParams ", f"    memory_format = {memory}",
        f"    data_type = {data_type}", f"    padding = {pad}", "    stride = [2, 2, 0]",
        "    dilation = [1, 1, 0]", "    groups = 2", f"    deterministic = {block_deterministic}",
        "    allow_tf32 = false", "input: TensorDescriptor 0x7f3c2c0", f"    type = {data_type}",
        "    nbDims = 4", "Pointer addresses: ", "    input: 0x7f0000000000",
    ]


CL = ".to(memory_format=torch.channels_last)"


def read(name: str) -> snippets.Found:
    return snippets.cases_from_log(str(DATA / name))


def only(found: snippets.Found) -> dict[str, Any]:
    assert len(found.cases) == 1, (found.cases, found.notes)
    return found.cases[0]


def fields(case: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in case.items() if key not in ("name", "captured_from", "source")}


# -- each field, from the quoted reports ---------------------------------------------------------------
def test_todynet_every_field() -> None:
    case = only(read("todynet12.log"))
    assert case == {
        "name": "todynet12_conv2d_1", "op": "conv2d", "input": [16, 27, 256, 45], "out_channels": 18,
        "kernel": [1, 3], "stride": [1, 1], "padding": [0, 1], "dilation": [1, 1], "groups": 1, "bias": True,
        "dtype": "float32", "memory_format": "contiguous", "direction": "backward", "benchmark": True,
        # deterministic off and TF32 on are torch's defaults: left to the run, not forced
        "captured_from": f"{DATA / 'todynet12.log'}:1",
        "source": f"captured by convmatrix cases --from-log from {DATA / 'todynet12.log'} line 1",
    }


def test_half_from_a_full_pytorch_report() -> None:
    case = only(read("pytorch_81106.log"))
    assert fields(case) == {
        "op": "conv2d", "input": [8, 1, 256, 256], "out_channels": 8, "kernel": [5, 5], "stride": [1, 1],
        "padding": [0, 0], "dilation": [1, 1], "groups": 1, "bias": True, "dtype": "float16",
        "memory_format": "contiguous", "direction": "backward",  # every flag at torch's default: none forced
    }
    # The snippet starts at the marker, under the error line (line 1 is the source comment).
    assert case["captured_from"].endswith("pytorch_81106.log:24")
    assert case["name"] == "pytorch_81106_conv2d_1"


def test_cut_reports_still_give_their_case() -> None:
    """Reports whose quoted text ends inside a descriptor: the snippet and block were whole."""
    yolo = only(read("multiyolov5_11.log"))
    assert (yolo["input"], yolo["out_channels"], yolo["kernel"], yolo["dtype"], yolo["benchmark"]) == (
        [8, 128, 52, 104], 2, [1, 1], "float16", True)
    cdt = only(read("cdtnet_6.log"))
    assert (cdt["input"], cdt["out_channels"], cdt["kernel"], cdt["padding"], cdt["dtype"]) == (
        [1, 39, 1024, 1024], 10, [3, 3], [1, 1], "float32")


def test_pre_release_three_entry_lists_and_a_cut_block() -> None:
    """PyTorch 1.7's pre-release printed padding=[0, 0, 0] for a Conv2d (pull 45729)."""
    case = only(read("pytorch_45729.log"))
    assert (case["input"], case["out_channels"], case["padding"], case["stride"], case["dilation"]) == (
        [128, 512, 7, 7], 2048, [0, 0], [1, 1], [1, 1])


def test_conv3d() -> None:
    case = only(read("pytorch_53191.log"))
    assert (case["op"], case["input"], case["kernel"], case["padding"], case["stride"], case["dilation"]) == (
        "conv3d", [1, 8, 8, 480, 640], [3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1])
    assert case["name"] == "pytorch_53191_conv3d_1"


# -- the 2.x form: bf16, memory formats, flags ---------------------------------------------------------
def test_bf16_comes_from_the_block_data_type() -> None:
    case = only(snippets.cases_from_text(current(to=CL)))
    assert case["dtype"] == "bfloat16"
    assert (case["memory_format"], case["groups"], case["stride"], case["out_channels"]) == (
        "channels_last", 2, [2, 2], 32)
    # Only what differs from torch's defaults is forced: deterministic on, TF32 off (benchmark off is the default).
    assert "benchmark" not in case and (case["deterministic"], case["allow_tf32"]) == (True, False)


def test_unsupported_without_a_block_type_is_a_note() -> None:
    lines = [line for line in current(to=CL) if "data_type" not in line]
    found = snippets.cases_from_text(lines, log="job.log")
    assert found.cases == []
    assert "job.log: line 2: a repro snippet that could not be read (dtype torch.unsupported with no " in found.notes[0]


def test_a_double_snippet_is_a_float64_case() -> None:
    """Issue 50: the suite runs float64, so cuDNN's double convolutions are captured, not refused."""
    case = only(snippets.cases_from_text(current(dtype="double", data_type="CUDNN_DATA_DOUBLE", memory="Contiguous")))
    assert case["dtype"] == "float64"


@pytest.mark.parametrize(("dtype", "data_type", "why"), [
    ("double", "CUDNN_DATA_FLOAT", "dtype torch.double but data_type = CUDNN_DATA_FLOAT"),
    ("unsupported", "CUDNN_DATA_INT8", "data_type = CUDNN_DATA_INT8: not a dtype the suite runs"),
    ("half", "CUDNN_DATA_FLOAT", "dtype torch.half but data_type = CUDNN_DATA_FLOAT"),
])
def test_dtypes_the_suite_cannot_run(dtype: str, data_type: str, why: str) -> None:
    found = snippets.cases_from_text(current(dtype=dtype, data_type=data_type, memory="Contiguous"))
    assert found.cases == []
    assert why in found.notes[0]


def test_channels_last_3d() -> None:
    net = "Conv3d(8, 8, kernel_size=[1, 3, 3], padding=[0, 1, 1], stride=[1, 2, 2], dilation=[1, 1, 2], groups=2)"
    lines = current(shape="[1, 8, 4, 16, 16]", net=net, to=".to(memory_format=torch.channels_last_3d)",
                    memory="ChannelsLast3d", pad="[0, 1, 1]", dtype="half", data_type="CUDNN_DATA_HALF")
    lines = [line.replace("stride = [2, 2, 0]", "stride = [1, 2, 2]").replace("dilation = [1, 1, 0]",
                                                                              "dilation = [1, 1, 2]")
             for line in lines]
    case = only(snippets.cases_from_text(lines))
    assert (case["op"], case["memory_format"], case["dtype"], case["dilation"], case["stride"]) == (
        "conv3d", "channels_last_3d", "float16", [1, 1, 2], [1, 2, 2])


@pytest.mark.parametrize(("change", "why"), [
    ({"memory": "Contiguous"}, "the snippet is channels_last but the block's memory_format = Contiguous"),
    ({"pad": "[2, 2, 0]"}, "the snippet's padding [1, 1] but the block's [2, 2, 0]"),
    ({"block_deterministic": "false"}, "the snippet's deterministic = True but the block's false"),
])
def test_a_snippet_its_block_contradicts_is_garbled(change: dict[str, str], why: str) -> None:
    found = snippets.cases_from_text(current(to=CL, **change))
    assert found.cases == []
    assert why in found.notes[0]


@pytest.mark.parametrize(("old", "new", "why"), [
    ("net = net.cuda().unsupported()", "net = net.cuda().half()", "data is torch.unsupported but the net is .half()"),
    ("Conv2d(64, 32,", "Conv2d(48, 32,", "Conv2d(48, 32, groups=2) on an input of 64 channels"),
    ("Conv2d(64, 32,", "Conv2d(64, 31,", "Conv2d(64, 31, groups=2) on an input of 64 channels"),
    ("[2, 64, 16, 16]", "[2, 64, 16]", "a Conv2d on a 3-d input [2, 64, 16]"),
    ("kernel_size=[3, 3]", "kernel_size=[3, 3, 3]", "kernel_size [3, 3, 3] for a 2-d convolution"),
    ("stride=[2, 2]", "stride=[0, 2]", "stride [0, 2]: 0 is out of range"),
])
def test_a_snippet_at_odds_with_itself_is_garbled(old: str, new: str, why: str) -> None:
    found = snippets.cases_from_text([line.replace(old, new) for line in current(to=CL)])
    assert found.cases == []
    assert why in found.notes[0]


def test_forward_only_and_no_flags() -> None:
    """A snippet without its backward line (edited, or cut) runs forward; flags it lacks stay unset."""
    lines = [line for line in current(dtype="half", data_type="CUDNN_DATA_HALF", memory="Contiguous")
             if "backward" not in line and "torch.backends" not in line]
    case = only(snippets.cases_from_text(lines))
    assert case["direction"] == "forward"
    assert not {"benchmark", "deterministic", "allow_tf32"} & set(case)


# -- log forms -----------------------------------------------------------------------------------------
def test_gzip_by_magic_bytes(tmp_path: Path) -> None:
    plain = (DATA / "pytorch_81106.log").read_bytes()
    zipped = tmp_path / "job-81106.txt"  # no .gz name: the magic bytes say gzip
    zipped.write_bytes(gzip.compress(plain))
    case = only(snippets.cases_from_log(str(zipped)))
    assert fields(case) == fields(only(read("pytorch_81106.log")))
    assert case["captured_from"] == f"{zipped}:24"
    assert case["name"] == "job_81106_conv2d_1"


def test_truncated_gzip_keeps_what_came_before(tmp_path: Path) -> None:
    text = "\n".join(current(to=CL)) + "\n" + "x" * 200_000
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(gzip.compress(text.encode())[:-40])
    found = snippets.cases_from_log(str(cut))
    assert only(found)["dtype"] == "bfloat16"
    assert any("truncated gzip" in note for note in found.notes)


def test_not_gzip_and_missing_are_bad_input(tmp_path: Path) -> None:
    fake = tmp_path / "x.log.gz"
    fake.write_text("plain")
    with pytest.raises(BadInput, match="not a gzip file"):
        snippets.cases_from_log(str(fake))
    with pytest.raises(BadInput, match="No such file"):
        snippets.cases_from_log(str(tmp_path / "missing.log"))


def test_utf16_log(tmp_path: Path) -> None:
    path = tmp_path / "windows.log"
    path.write_bytes("\r\n".join(current(to=CL)).encode("utf-16"))
    assert only(snippets.cases_from_log(str(path)))["dtype"] == "bfloat16"


def test_rank_prefixed_interleaved_and_deduplicated(tmp_path: Path) -> None:
    """Four ranks print the same snippet, their lines interleaved, with ANSI colours; rank 2's layer
    differs. torchrun's [rankN]: and [defaultN]: tags and srun's "N: " are all read apart."""
    same = current(to=CL)
    other = current(to=CL, shape="[4, 64, 16, 16]")
    streams = [[f"[rank{rank}]: \x1b[31m{line}\x1b[0m" for line in (other if rank == 2 else same)]
               for rank in range(4)]
    streams.append([f"[default7]:{line}" for line in same])
    streams.append([f"3: {line}" for line in same])
    lines = ["[rank0]: Epoch 3 step 1200"]
    for row in range(max(len(stream) for stream in streams)):
        lines += [stream[row] for stream in streams if row < len(stream)]
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    found = snippets.cases_from_log(str(path))
    assert [case["input"] for case in found.cases] == [[2, 64, 16, 16], [4, 64, 16, 16]]
    assert [case["name"] for case in found.cases] == ["train_conv2d_1", "train_conv2d_2"]
    assert found.cases[0]["captured_from"] == f"{path}:8"  # rank 0's marker: line 2 + 6 streams
    assert found.notes == [f"{path}: 4 snippet(s) repeated an earlier case (another rank or step): kept once"]


def test_line_numbers_across_the_reads_of_a_file(tmp_path: Path) -> None:
    """The last lines of a file come in a read of their own (scan's blocks): numbered on."""
    path = tmp_path / "tail.log"
    lines = [f"step {number}" for number in range(50)] + current(dtype="half")[:13]  # up to out.backward
    path.write_text("\n".join(lines))  # no newline at the end either
    found = snippets.cases_from_log(str(path))
    assert (only(found)["captured_from"], only(found)["direction"]) == (f"{path}:52", "backward")


def test_traceback_only_log_gets_the_note(tmp_path: Path) -> None:
    """The v8 API's engine errors (Conv_v8.cpp at 06ca69ca: a plain TORCH_CHECK) bring no snippet."""
    lines = [
        "/usr/lib/python3/site-packages/torch/nn/modules/conv.py:456: UserWarning: Plan failed with a "
        "CuDNNError: cuDNN error: CUDNN_STATUS_BAD_PARAM",
        "Traceback (most recent call last):",
        '  File "train.py", line 9, in <module>',
        '    if "CUDNN_STATUS_NOT_SUPPORTED" in str(err):',
        "RuntimeError: GET was unable to find an engine to execute this computation",
        "[rank1]: RuntimeError: GET was unable to find an engine to execute this computation",
        "done",
    ]
    path = tmp_path / "v8.log"
    path.write_text("\n".join(lines) + "\n")
    found = snippets.cases_from_log(str(path))
    assert found.cases == []
    assert found.notes == [
        f"{path}: line 5 (and 1 more): a cuDNN error with a traceback only (GET was unable to find an engine; "
        "no repro snippet: the v8 API prints none); nothing to capture"]


def test_a_status_error_without_a_snippet_and_one_with() -> None:
    """A snippet starts on the line after its error (one message); four lines later is too late."""
    lines = ["RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", "", "", "", "", *current(to=CL)[1:]]
    found = snippets.cases_from_text(lines, log="mixed.log")
    assert only(found)["captured_from"] == "mixed.log:6"
    assert found.notes == [
        "mixed.log: line 1: a cuDNN error with a traceback only (CUDNN_STATUS_EXECUTION_FAILED; no repro snippet: "
        "PyTorch prints one only with the v7 API's convolution errors); nothing to capture"]


# -- the case file -------------------------------------------------------------------------------------
def test_to_toml_is_a_case_file_the_suite_reads(tmp_path: Path) -> None:
    logs = ["todynet12.log", "pytorch_81106.log", "multiyolov5_11.log", "cdtnet_6.log", "pytorch_45729.log",
            "pytorch_53191.log"]
    cases = [case for log in logs for case in read(log).cases]
    cases += snippets.cases_from_text(current(to=CL), log="inline").cases
    assert len({case["name"] for case in cases}) == len(cases) == 7
    path = tmp_path / "captured.toml"
    path.write_text(snippets.to_toml(cases, "a\nlog \"name\" \\ \x00"))
    casefile = load_suite_module("casefile")
    made = casefile.load([str(path)], catalog.Case)
    assert [case.tag for case in made] == [case["name"] for case in cases]
    bf16 = made[-1]
    assert (bf16.dtype, bf16.memory_format, bf16.direction, bf16.groups) == ("bfloat16", "channels_last", "backward", 2)
    assert path.read_text().splitlines()[0].startswith("# Captured by `convmatrix cases --from-log` from a?log ")


def test_to_toml_escapes_every_string() -> None:
    nasty = 'q"uote \\ back\nnew\ttab \x00 \x7f \u2028 \U0001f600 \ud800 é'
    text = snippets.to_toml([{"name": "n", "source": nasty, "input": [1, 2], "bias": False,
                              "weird key": "x"}], nasty)
    data = tomllib.loads(text)
    assert data["case"][0]["source"] == nasty.replace("\ud800", "\ufffd")
    assert data["case"][0]["weird key"] == "x"
    assert (data["case"][0]["input"], data["case"][0]["bias"]) == ([1, 2], False)
    with pytest.raises(TypeError):
        snippets.to_toml([{"name": "n", "ratio": None}], "log")  # no TOML form (tomlwrite.value)


# -- a hostile log -------------------------------------------------------------------------------------
@pytest.fixture
def no_code_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything evaluates, executes or starts a process while a log is read."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"code from a log was run: {args!r:.200}")
    for name in ("eval", "exec"):
        monkeypatch.setattr(builtins, name, refuse)
    monkeypatch.setattr(os, "system", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


@pytest.mark.usefixtures("no_code_runs")
def test_injection_in_a_shape_parses_as_nothing(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    attacks = [
        f"[__import__('os').system('touch {pwned}'), 64, 16, 16]",
        f"[2, 64, 16, 16] + [__import__('os').system('touch {pwned}')]",
        "[2, 64, 16, 16]); import os; os.system('id'); (",
        "[2, 64, 16, 16e9999]",
        "[" + "9" * 5000 + ", 64, 16, 16]",
        "[2, 64, 16, 16, 16, 16, 16, 16, 16, 16]",
    ]
    lines: list[str] = []
    for attack in attacks:
        lines += current(to=CL, shape=attack)
    lines += current(to=CL, net="Conv2d(64, 32, kernel_size=[__import__('os').getpid()], padding=[1, 1], "
                                "stride=[2, 2], dilation=[1, 1], groups=2)")
    path = tmp_path / "evil.log"
    path.write_text("\n".join(lines) + "\n")
    found = snippets.cases_from_log(str(path))
    assert found.cases == []
    assert len(found.notes) == len(attacks) + 1
    assert all("a repro snippet that could not be read" in note for note in found.notes)
    assert not pwned.exists()


@pytest.mark.usefixtures("no_code_runs")
def test_a_huge_line_counts_by_its_first_16_kib(tmp_path: Path) -> None:
    path = tmp_path / "huge.log"
    with path.open("w") as handle:
        handle.write("x" * (64 << 20) + "\n")  # one 64 MiB line, no newline for 64 MiB
        handle.write("y" * snippets.LINE_CAP + snippets.MARKER + "\n")  # a marker past the first 16 KiB: no snippet
        handle.write("\n".join(current(to=CL)) + "\n")
    tracemalloc.start()
    try:
        found = snippets.cases_from_log(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert only(found)["captured_from"] == f"{path}:4"
    assert found.notes == []  # the marker past line 2's first 16 KiB began nothing
    assert peak < 24 << 20  # a few of triage's 4 MiB chunks, never the 64 MiB line
    long_text = ["z" * (1 << 20) + snippets.MARKER, *current(to=CL)[1:]]
    from_text = snippets.cases_from_text(long_text)
    assert (only(from_text)["captured_from"], from_text.notes) == ("-:2", [])


@pytest.mark.usefixtures("no_code_runs")
def test_a_hundred_thousand_snippets_stop_at_the_cap(tmp_path: Path) -> None:
    net = "net = torch.nn.Conv2d(64, 32, kernel_size=[3, 3], padding=[1, 1], stride=[2, 2], dilation=[1, 1], groups=2)"
    path = tmp_path / "flood.log"
    with path.open("w") as handle:
        for number in range(100_000):  # the snippet's lines that matter, each input its own
            handle.write(f"{MARKER_LINE}\ndata = torch.randn([{number + 1}, 64, 16, 16], dtype=torch.half, "
                         f"device='cuda', requires_grad=True)\n{net}\nout.backward(torch.randn_like(out))\n\n")
    found = snippets.cases_from_log(str(path))
    assert len(found.cases) == snippets.MAX_CASES
    assert len({case["name"] for case in found.cases}) == snippets.MAX_CASES
    assert found.cases[-1]["input"] == [snippets.MAX_CASES, 64, 16, 16]
    assert f"at most {snippets.MAX_CASES} cases are captured; the rest of the log was not read" in found.notes[-1]


def test_many_repeats_and_many_bad_snippets_keep_notes_bounded() -> None:
    bad = current(to=CL, shape="[1, 2]")
    lines = current(to=CL) * 3000 + bad * 500
    found = snippets.cases_from_text(lines)
    assert len(found.cases) == 1
    assert len(found.notes) == snippets.MAX_NOTES + 1
    assert found.notes[-1] == "-: 451 more note(s) left off"  # 450 bad snippets, then the repeats
