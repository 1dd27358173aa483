"""The first line of a failing case's log section that the control's lacks (results/first_diff.py):
normalised for what differs between any two runs, pytest's framing left out, and bounded."""

from __future__ import annotations

from pathlib import Path

from convmatrix import results
from convmatrix.cli.main import main
from convmatrix.results import first_diff
from testkit import REPO, env_json, record, write_result

CASE = "conv2d-fp16-k3-p1"


def section(*body: str, status: str = "FAILED") -> list[str]:
    return [
        "============================= test session starts ==============================",
        f"suites/test_conv.py::test_conv[{CASE}] {status} [ 50%]",
        "suites/test_conv.py::test_conv[conv1d-fp32-k3-p1] PASSED [100%]",
        "=================================== FAILURES ===================================",
        f"____________________________ test_conv[{CASE}] ____________________________",
        "",
        "    def test_conv(case, device):",
        ">       got = run_on_device(run, inputs)",
        "",
        *body,
        "suites/test_conv.py:120: RuntimeError",
        "=========================== short test summary info ============================",
    ]


def write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


COMMON = ["W! CuDNN (v90100 17) function cudnnBackendFinalize() called:",
          "w!     Info: Time: 2026-12-01T10:00:00.123456 (0d+0h+0m+1s since start)",
          "w!     Process=4242; Thread=4243; GPU=0; Handle=0x55d0c0a3b2c0; StreamId=0x0."]


def test_the_first_line_the_control_lacks_after_normalising(tmp_path: Path) -> None:
    mine = write(tmp_path / "cell" / "log.txt", section(
        *[line.replace("4242", "977").replace("0x55d0c0a3b2c0", "0x7f00aa").replace("10:00:00.123456", "11:12:13.5")
          for line in COMMON],
        "E       RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
        "non-contiguous input."))
    theirs = write(tmp_path / "control" / "log.txt", section(*COMMON, status="PASSED"))
    found = first_diff.first_differences(mine, theirs, [CASE])
    (difference,) = found.values()
    assert difference.text.startswith("E       RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED")
    assert mine.read_text().splitlines()[difference.line - 1] == difference.text


def test_a_line_the_control_has_too_is_no_difference(tmp_path: Path) -> None:
    same = section(*COMMON, "E       RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED")
    mine = write(tmp_path / "cell" / "log.txt", same)
    theirs = write(tmp_path / "control" / "log.txt", [line.replace("2026-12-01T10", "2026-12-02T09") for line in same])
    assert first_diff.first_differences(mine, theirs, [CASE]) == {}


def test_numbers_addresses_and_ids_normalise_but_words_do_not() -> None:
    assert first_diff.normalise("Handle=0xdeadbeef pid 123 took 4.5 ms at 2026-01-02T03:04:05Z") == \
        first_diff.normalise("Handle=0x1 pid 9 took 0.25 ms at 2025-11-30T23:59:59Z")
    assert first_diff.normalise("CUDNN_STATUS_NOT_SUPPORTED_SHAPE") != first_diff.normalise("CUDNN_STATUS_SUCCESS")


def test_a_case_either_side_never_ran_or_an_unreadable_log_gives_nothing(tmp_path: Path) -> None:
    mine = write(tmp_path / "cell" / "log.txt", section("E   boom"))
    theirs = write(tmp_path / "control" / "log.txt", ["nothing here"])
    assert first_diff.first_differences(mine, theirs, [CASE]) == {}
    link = tmp_path / "control2" / "log.txt"
    link.parent.mkdir()
    link.symlink_to(mine)
    assert first_diff.first_differences(mine, link, [CASE]) == {}


def test_the_report_shows_it_in_every_format(tmp_path: Path, capsys: object) -> None:
    run = tmp_path / "run"
    control = write_result(run, "control", [record(CASE), record("conv1d-fp32-k3-p1")], env=env_json("control"),
                           cell={"control": True})
    cell = write_result(run, "cell", [record(CASE, status="failed", message="cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"),
                                      record("conv1d-fp32-k3-p1")], env=env_json("cell"), cell={})
    write(control / "log.txt", section(*COMMON, status="PASSED"))
    write(cell / "log.txt", section(*COMMON, "E       RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"))
    for fmt, expected in (("text", "first line the control's log lacks (log.txt:"),
                          ("markdown", "first line the control"), ("html", 'class="first-diff"'),
                          ("json", '"first_diff": {"line": ')):
        out = tmp_path / f"report.{fmt}"
        main(["report", str(run), "--format", fmt, "-o", str(out), "--control", "control"])
        assert expected in out.read_text(), fmt
    loaded = results.load([str(run)])
    assert {r.cell for r in loaded.results} == {"control", "cell"}


H200_RERUN = REPO / "tests/data/gpu/h200-torch2.11-cudnn9.19/rerun/host@h200-sm90@h200box/log.txt"
H200_CASE = "conv2d-fp32-k1-bwd-over2g-pointwise_extreme-wide_channels"


def test_on_the_h200s_real_log_the_first_line_is_the_error_not_pytests_arguments(tmp_path: Path) -> None:
    """Issue 34 item 2: the H200's failure block starts with pytest's dump of the test's arguments
    (`case = Case(...)`, `device = 'cuda'`) and a long traceback's `x.py:469: in run_on_device`;
    the first line the control lacks is the error the failure raised."""
    lines = H200_RERUN.read_text().splitlines()
    assert any(line.startswith("case = Case(") for line in lines)  # the framing is there to skip
    control = write(tmp_path / "control" / "log.txt", [line for line in lines if "::test_conv[" in line])
    (found,) = first_diff.first_differences(H200_RERUN, control, [H200_CASE]).values()
    assert found.text == "E           torch.AcceleratorError: CUDA error: an illegal memory access was encountered"


def test_arguments_are_framing_in_the_traceback_but_printed_lines_are_evidence(tmp_path: Path) -> None:
    """pytest's "name = repr" lines (ReprFuncArgs, and --showlocals' padded names) are skipped
    before the block's Captured sections; a line the code printed there is what it wrote."""
    body = ("case = Case(op='conv2d', n=2)", "device = 'cpu', request = <FixtureRequest>",
            "x          = 3", "/suites/test_conv.py:469: in run_on_device",
            "----------------------------- Captured stdout call -----------------------------",
            "workspace = 2048 MiB asked, 0 granted")
    mine = write(tmp_path / "cell" / "log.txt", section(*body))
    theirs = write(tmp_path / "control" / "log.txt", section(status="FAILED"))
    (found,) = first_diff.first_differences(mine, theirs, [CASE]).values()
    assert found.text == "workspace = 2048 MiB asked, 0 granted"


def test_a_log_line_of_gigabytes_is_read_a_capped_piece_at_a_time(tmp_path: Path) -> None:
    """Issue 46 (logs read bounded): `for raw in handle` read a line without a break whole, so a
    256 MiB log of one line held 256 MiB before the line cap cut it. Now at most LINE_CAP bytes of
    a line are held, and no more than LOG_LIMIT bytes are read."""
    import tracemalloc

    log = tmp_path / "log.txt"
    with open(log, "wb") as fh:
        fh.write(b"E   RuntimeError: boom")
        fh.truncate(256 << 20)  # sparse: no disk, no line break
    tracemalloc.start()
    try:
        lines = first_diff._read(log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(lines) == 1 and lines[0].startswith("E   RuntimeError: boom") and len(lines[0]) <= first_diff.LINE_CAP
    assert peak < 8 << 20, f"{peak:,} bytes held"
