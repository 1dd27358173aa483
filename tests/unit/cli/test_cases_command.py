"""`convmatrix cases` (cli/cases.py): case files listed as the suite runs them, and a failed job's
log made into one (`--from-log`, triage/snippets.py), or a model's convolutions
(`--from-model`, triage/from_model.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from convmatrix.cli.main import main
from testkit import REPO

# Quoted from https://github.com/liuxz1011/TodyNet/issues/12 (the snippet as the report shows it).
TODYNET = REPO / "tests" / "data" / "logs" / "snippets" / "todynet12.log"


def test_the_command_writes_a_case_file_that_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "prod.toml"
    assert main(["cases", "--from-log", str(TODYNET), "-o", str(out)]) == 0
    assert "1 case(s) captured" in capsys.readouterr().err
    assert main(["cases", str(out)]) == 0
    assert "prod-conv2d-fp32-k1x3-p0x1-bwd-bench_on-todynet12_conv2d_1" in capsys.readouterr().out


def test_the_command_on_a_log_without_snippets_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "job.log"
    log.write_text("RuntimeError: FIND was unable to find an engine to execute this computation\n")
    assert main(["cases", "--from-log", str(log)]) == 2
    err = capsys.readouterr().err
    assert "traceback only" in err and "no repro snippet to capture" in err


def test_files_and_from_log_together_are_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cases", str(TODYNET), "--from-log", str(TODYNET)]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["cases"]) == 2
    assert "name case files" in capsys.readouterr().err


# Issue 32, item 7: the file is written in the format its name says, as the suite reads it.
def test_a_json_output_is_json_and_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cap.json"
    assert main(["cases", "--from-log", str(TODYNET), "-o", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))  # TOML here was the old bug: not JSON at all
    assert len(data["case"]) == 1 and "Captured by `convmatrix cases --from-log`" in data["description"]
    capsys.readouterr()
    assert main(["cases", str(out)]) == 0
    assert "cap-conv2d-fp32-k1x3-p0x1-bwd-bench_on-todynet12_conv2d_1" in capsys.readouterr().out


def test_a_toml_output_is_toml(tmp_path: Path) -> None:
    out = tmp_path / "cap.toml"
    assert main(["cases", "--from-log", str(TODYNET), "-o", str(out)]) == 0
    assert len(tomllib.loads(out.read_text(encoding="utf-8"))["case"]) == 1


@pytest.mark.parametrize("name", ["cap.txt", "cap", "cap.TOML", "cap.yaml"])
def test_an_output_of_no_case_file_format_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      name: str) -> None:
    assert main(["cases", "--from-log", str(TODYNET), "-o", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "a case file is named .toml (TOML) or .json (JSON)" in err
    assert not (tmp_path / name).exists()


def test_from_model_writes_resnet50s_cases_that_list_and_run_on_the_cpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # torchvision through modelzoo, whose import makes PyPI's torchvision importable beside the CPU
    # torch: the recording's interpreter (issue 46) imports the target itself.
    hub = tmp_path / "torch_home"
    hub.mkdir()
    monkeypatch.setenv("TORCH_HOME", str(hub))
    out = tmp_path / "rn50.toml"
    target = "modelzoo:torchvision.models.resnet50"
    assert main(["cases", "--from-model", target, "--input", "8x3x224x224", "--dtype",
                 "float16", "--channels-last", "--backward", "-o", str(out)]) == 0
    assert f"23 case(s) from 106 convolution call(s) of {target}" in capsys.readouterr().err
    assert list(hub.iterdir()) == []
    text = out.read_text()
    head = " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    assert head.startswith(f"Recorded by `convmatrix cases --from-model {target}` on inputs "
                           "8x3x224x224 forward and backward, on the meta device")
    assert len(tomllib.loads(text)["case"]) == 23
    assert main(["cases", str(out)]) == 0
    listed = capsys.readouterr().out
    assert listed.startswith("23 cases from")
    assert "rn50-conv2d-fp16-k7-s2-p3-channels_last-nobias-bwd_weight-resnet50_1" in listed
    # The CPU lane runs them, scaled down (the first: 2x3x14x14 for 8x3x224x224).
    assert "2x3x14x14" in listed
    ids = ["rn50-conv2d-fp16-k7-s2-p3-channels_last-nobias-bwd_weight-resnet50_1",
           "rn50-conv2d-fp16-k3-p1-channels_last-nobias-bwd-resnet50_3"]
    done = subprocess.run([sys.executable, "-m", "pytest", *(f"suites/test_conv.py::test_conv[{i}]" for i in ids),
                           "--cases", str(out), "-q", "-p", "no:cacheprovider"], cwd=REPO, capture_output=True,
                          text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout


def test_from_model_stamps_autocast_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tiny.json"
    assert main(["cases", "--from-model", "modelzoo:tiny", "--input", "2x4x16x16", "--autocast", "float16",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["cases", str(out), "--format", "json"]) == 0
    listed = capsys.readouterr().out
    assert '"autocast": "float16"' in listed and '"dtype": "float32"' in listed
    assert "stamped by the tool, not observed" in out.read_text()


@pytest.mark.parametrize(("argv", "message"), [
    (["--from-model", "modelzoo:tiny", "--input", "2x3x16x16"], "the model raised RuntimeError on inputs 2x3x16x16"),
    (["--from-model", "no_such_module_i38:m", "--input", "1x1x4x4"], "cannot import no_such_module_i38"),
    (["--from-model", "modelzoo:tiny"], "name the model's input shapes with --input"),
    (["--from-model", "modelzoo:tiny", "--input", "2x4x16x16", "--kwargs", "{\"depth\": 2}"],
     "the callable raised TypeError"),
    (["--from-model", "modelzoo:tiny", "--input", "2x4x16x16", "--dtype", "float16", "--autocast", "float16"],
     "--autocast runs a float32 model"),
    (["--input", "2x4x16x16"], "cases: --input goes with --from-model"),
    (["x.toml", "--from-model", "modelzoo:tiny"], "one of them"),
])
def test_from_model_failures_are_one_line_exit_2_and_write_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    out = tmp_path / "never.toml"
    assert main(["cases", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


# Issue 39: a [case.sweep] is listed as the cases it expands to, counted; past its bound, exit 2.
SWEPT = ('[[case]]\nname = "a"\nop = "conv2d"\ninput = [31, 4, 8, 8]\nout_channels = 4\nkernel = 3\n'
         '[case.sweep]\nbatch = [31, 32]\nkernel = [1, 3]\ndtype = ["float32", "bfloat16"]\n')


def test_a_2x2x2_sweep_lists_8_cases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "prod.toml"
    path.write_text(SWEPT)
    assert main(["cases", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"8 cases from {path}\n")
    assert sum(1 for line in out.splitlines() if line.startswith("prod-conv2d-")) == 8


def test_a_sweep_past_its_bound_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "prod.toml"
    path.write_text(SWEPT.replace("dtype = [", "out_channels = [" + ", ".join(map(str, range(1, 70))) + "]\ndtype = ["))
    proc = subprocess.run([sys.executable, "-m", "convmatrix", "cases", str(path)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"convmatrix: {path}: case 1 (a): sweep: 2 x 2 x 69 x 2 = 552 cases, at most "
                                        "256 a [[case]] table"]


# --- issue 39: any view, and the catalogue's 2^31 pairs ----------------------------------------------
VIEWS = ('[[case]]\nname = "t"\nop = "conv_transpose1d"\ninput = [1, 1024, 1]\nout_channels = 1\nkernel = 1\n'
         'input_strides = [1024, 1, 1]\n\n'
         '[[case]]\nname = "cl"\nop = "conv2d"\ninput = [2, 8, 6, 6]\nout_channels = 4\nkernel = 3\n'
         'memory_format = "channels_last"\nweight_memory_format = "contiguous"\n\n'
         '[[case]]\nname = "big"\nop = "conv2d"\ninput = [16, 256, 64, 64]\nout_channels = 256\nkernel = 3\n'
         'input_strides = [2097152, 1, 32768, 512]\nstorage_offset = 5\n')


def test_a_cases_view_is_listed_with_the_cpus_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "views.toml"
    path.write_text(VIEWS)
    assert main(["cases", str(path)]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("views-")}
    assert "strides 1024x1x1 " in rows["views-conv_transpose1d-fp32-k1-view1024x1x1-t"]
    assert "channels_last, weight contiguous" in rows["views-conv2d-fp32-k3-channels_last-weight_contiguous-cl"]
    big = rows["views-conv2d-fp32-k3-view2097152x1x32768x512-offset5-big"]
    assert "strides 2097152x1x32768x512+5" in big and "2x8x12x12 strides 2304x1x192x16+5" in big
    assert main(["cases", str(path), "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[2]["cpu_view"] == {"input_strides": [2304, 1, 192, 16], "storage_offset": 5}


def test_a_bad_view_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "views.toml"
    path.write_text(VIEWS.replace("[1024, 1, 1]", "[1024, -1, 1]"))
    proc = subprocess.run([sys.executable, "-m", "convmatrix", "cases", str(path)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"convmatrix: {path}: case 1 (t): input_strides: [1024, -1, 1]: a negative "
                                        "stride is no view as_strided builds"]


def test_the_catalogue_lists_each_case_past_2g_with_its_pair(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cases", "--catalog"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    ids = [row[0] for row in rows if row]
    at = ids.index("conv2d-fp32-k3-p1-over2g-int32_split_batch-n1024")
    assert ids[at + 1:at + 3] == ["conv2d-fp32-k3-p1-below2g-int32_split_batch-n1024",
                                  "conv2d-fp32-k3-p1-over2g-above2g-int32_split_batch-n1024"]
    below, above = (next(row for row in rows if row and row[0] == ids[at + k]) for k in (1, 2))
    assert below[1] == "668x3x224x224" and "below" in below and "skipped" in below
    assert above[1] == "669x3x224x224" and "above" in above
    assert sum(1 for row in rows if "below" in row[7:9]) == 12
    assert main(["cases", "--catalog", "x.toml"]) == 2


def test_one_case_is_one_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 49: `convmatrix cases` of a file of one case printed "1 cases"."""
    path = tmp_path / "one.toml"
    path.write_text(SWEPT.split("[case.sweep]")[0])
    assert main(["cases", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"1 case from {path}\n")
