"""One verdict everywhere (issue 20, item 3): text, json and junit agree on every cell; a failing
case the control never ran is a regression; cells of another suite version are not compared;
conflicting duplicate lines and malformed lines are named, never silently resolved."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from convmatrix.cli.main import main
from testkit import env_json, record, write_result

SIG = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
DONE = {"ended": "2026-12-02T00:02:00Z"}


def set_up_failed(run: Path, cell: str, **meta: Any) -> None:
    """What a failed install leaves: cell.json with the error, no env.json (the suite never ran)."""
    directory = write_result(run, cell, [], cell={"error": "install failed", "exit_code": 255, **DONE, **meta})
    (directory / "env.json").unlink()


def control(run: Path, **env: Any) -> None:
    write_result(run, "ctrl", [record("a"), record("b")], env=env_json("ctrl", **env),
                 cell={"control": True, **DONE})


def formats(run: Path, tmp_path: Path) -> tuple[dict[str, str], ET.Element, int]:
    """Each cell's verdict in the json report, the junit tree, and the text report's exit."""
    out = tmp_path / "r.json"
    main(["report", str(run), "--format", "json", "-o", str(out), "--fail-on", "never"])
    verdicts = {c["cell"]: c["verdict"] for c in json.loads(out.read_text())["cells"]}
    junit = tmp_path / "junit.xml"
    main(["report", str(run), "--format", "junit", "-o", str(junit), "--fail-on", "never"])
    return verdicts, ET.fromstring(junit.read_text()), main(["report", str(run)])


def failing_in_junit(root: ET.Element, cell: str) -> bool:
    suite = root.find(f"testsuite[@name='{cell}@cpu']")
    return suite is not None and int(suite.get("failures") or 0) > 0


@pytest.mark.parametrize(("name", "write"), [
    ("killed after its last case", lambda run: write_result(
        run, "cand", [record("a"), record("b")], env=env_json("cand", ended=None), cell={"exit_code": -15, **DONE})),
    ("stack mismatch", lambda run: write_result(
        run, "cand", [record("a"), record("b")], env=env_json("cand", torch="2.4.1"),
        cell={"expected": {"torch": "2.5.1"}, **DONE})),
    ("set-up failed", lambda run: set_up_failed(run, "cand")),
])
def test_junit_fails_every_cell_the_text_report_does_not_call_ok(tmp_path: Path, name: str, write: Any) -> None:
    run = tmp_path / "run"
    control(run)
    write(run)
    verdicts, junit, code = formats(run, tmp_path)
    # Red either way; a cell that never ran for the infrastructure, the only red one, exits 4.
    assert verdicts["cand"] == "invalid" and code == (4 if name == "set-up failed" else 1), name
    assert failing_in_junit(junit, "cand"), name
    failure = junit.find("testsuite[@name='cand@cpu']/testcase[@name='(verdict)']/failure")
    assert failure is not None and (failure.get("message") or "").startswith("INVALID: ")
    assert not failing_in_junit(junit, "ctrl")


def test_junit_fails_a_control_whose_set_up_failed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    set_up_failed(run, "ctrl", control=True)
    write_result(run, "cand", [record("a")], cell=DONE)
    _, junit, code = formats(run, tmp_path)
    assert code == 3
    failure = junit.find("testsuite[@name='ctrl@cpu']/testcase[@name='(verdict)']/failure")
    assert failure is not None and "CONTROL UNHEALTHY" in (failure.get("message") or "")
    assert failing_in_junit(junit, "cand")


def test_a_failing_case_the_control_never_ran_is_a_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    control(run)
    write_result(run, "cand", [record("a"), record("b"), record("c", "failed", SIG)], cell=DONE)
    verdicts, junit, code = formats(run, tmp_path)
    assert verdicts["cand"] == "regression" and code == 1 and failing_in_junit(junit, "cand")
    capsys.readouterr()
    main(["report", str(run), "--format", "json"])
    (case,) = [c for c in json.loads(capsys.readouterr().out)["cases"] if c["case"] == "c"]
    assert case["delta"] == "regression" and case["control_outcome"] is None


def test_a_passing_case_the_control_never_ran_is_new_and_fails_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    control(run)
    write_result(run, "cand", [record("a"), record("b"), record("c")], cell=DONE)
    verdicts, _, code = formats(run, tmp_path)
    assert verdicts["cand"] == "ok" and code == 0


def test_a_cell_of_another_suite_version_is_not_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    control(run, suite_version="aaaa1111")
    write_result(run, "cand", [record("a"), record("b", "failed", SIG)], env=env_json("cand", suite_version="bbbb2222"),
                 cell=DONE)
    verdicts, junit, code = formats(run, tmp_path)
    assert verdicts["cand"] == "invalid" and code == 1 and failing_in_junit(junit, "cand")
    capsys.readouterr()
    main(["report", str(run), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    (cell,) = [c for c in data["cells"] if c["cell"] == "cand"]
    assert "ran suite version bbbb2222, the control aaaa1111: not compared" in cell["problems"]
    assert all(c["delta"] is None for c in data["cases"] if c["cell"] == "cand")


def test_a_case_recorded_twice_with_conflicting_outcomes_is_named(tmp_path: Path) -> None:
    """The signature, then a pass, for one case: it read `ok` with no note."""
    run = tmp_path / "run"
    control(run)
    write_result(run, "cand", [record("a"), record("b", "failed", SIG), record("b")], cell=DONE)
    verdicts, junit, code = formats(run, tmp_path)
    assert verdicts["cand"] == "invalid" and code == 1 and failing_in_junit(junit, "cand")
    failure = junit.find("testsuite[@name='cand@cpu']/testcase[@name='(verdict)']/failure")
    assert failure is not None
    assert "results.jsonl:3: case b recorded again as pass, earlier as fail" in (failure.get("message") or "")


def test_one_object_over_two_lines_and_two_on_one_line_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Split inside a string, with two objects on the second line, the counts matched and the
    whole file was read as sound."""
    run = tmp_path / "run"
    control(run)
    cand = write_result(run, "cand", [record("a")], cell=DONE)
    first = json.dumps(record("b", "failed", "half one"))
    split = first.index("half one") + 4
    (cand / "results.jsonl").write_text(first[:split] + "\n" + first[split:] + ", " + json.dumps(record("c")) + "\n")
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{cand / 'results.jsonl'}:1: not a JSON object" in err
    assert f"{cand / 'results.jsonl'}:2: not a JSON object" in err


def test_a_driver_too_old_seen_at_run_time_is_unsupported_not_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20, item 4: a cu124 cell on a 470 driver (the cu118 control runs) was a regression."""
    run = tmp_path / "run"
    insufficient = "RuntimeError: CUDA driver version is insufficient for CUDA runtime version"
    write_result(run, "ctrl", [record("a"), record("b")], env=env_json("ctrl", driver="470.82.01"),
                 cell={"control": True, "requested": {"cuda": "cu118"}, **DONE})
    write_result(run, "cand", [record("a", "failed", insufficient), record("b", "failed", insufficient)],
                 env=env_json("cand", driver="470.82.01"), cell={"requested": {"cuda": "cu124"}, **DONE})
    verdicts, junit, code = formats(run, tmp_path)
    assert verdicts["cand"] == "unsupported" and code == 0 and not failing_in_junit(junit, "cand")
    skipped = junit.find("testsuite[@name='cand@cpu']/testcase[@name='(verdict)']/skipped")
    assert skipped is not None and "driver 470.82.01 < 525.60.13 for cu124" in (skipped.get("message") or "")
    capsys.readouterr()
    main(["report", str(run)])
    text = capsys.readouterr().out
    assert "UNSUPPORTED (driver 470.82.01 < 525.60.13 for cu124)" in text
    assert text.splitlines()[1] == "verdicts: 1 control, 1 unsupported"
    # among the alerts, after the one that says no GPU took part (a run on the CPU)
    assert "UNSUPPORTED on this runner: 1 cell(s)" in text.splitlines()[4]
    for fmt in ("markdown", "html"):  # every format says the same
        path = tmp_path / f"r.{fmt}"
        assert main(["report", str(run), "--format", fmt, "-o", str(path)]) == 0
        said = path.read_text()
        assert "UNSUPPORTED (driver 470.82.01 &lt; 525.60.13 for cu124)" in said
        assert said.index("UNSUPPORTED on this runner") < said.index("cand")


def test_a_system_base_that_never_ran_reads_not_observed_in_every_format(tmp_path: Path) -> None:
    """A system base whose build failed wrote no env.json: every format calls it INVALID, and none
    claims the suite saw its cuDNN ("cuDNN none (observed)" was shown before)."""
    run = tmp_path / "run"
    stack = {"lane": "container", "torch": "image", "cuda": "image", "cudnn": "image", "python": "image",
             "flavour": "system"}
    write_result(run, "ctrl", [record("a"), record("b")], env=env_json("ctrl"),
                 cell={"control": True, "lane": "container", "requested": {**stack, "base": "ngc:24.10"}, **DONE})
    set_up_failed(run, "cand", lane="container", requested={**stack, "base": "ngc:25.01"})
    verdicts, junit, code = formats(run, tmp_path)
    assert verdicts == {"ctrl": "control", "cand": "invalid"} and code == 4 and failing_in_junit(junit, "cand")
    shown = {}
    for fmt in ("text", "markdown", "html"):
        out = tmp_path / f"r.{fmt}"
        main(["report", str(run), "--format", fmt, "-o", str(out), "--fail-on", "never"])
        shown[fmt] = out.read_text()
    for fmt, text in shown.items():
        assert "cuDNN (not observed) · ngc:25.01" in text, fmt
        assert "(observed) · ngc:24.10" in text and "cuDNN none (observed) · ngc:25.01" not in text, fmt
    cand = next(c for c in json.loads((tmp_path / "r.json").read_text())["cells"] if c["cell"] == "cand")
    assert cand["observed"] == {}


# Issue 31: the two candidates that read green, and the run-wide setting no format stated.
DRIVER = "RuntimeError: The NVIDIA driver on your system is too old (found version 11040)."
CONV1D = [f"conv1d-fp16-k{k}" for k in range(6)]


def every_format(run: Path, tmp_path: Path) -> dict[str, str]:
    """The report in each format, written with --fail-on never as the nightly writes them."""
    out = {}
    for fmt in ("text", "markdown", "html", "json", "junit"):
        path = tmp_path / f"r.{fmt}"
        main(["report", str(run), "--format", fmt, "-o", str(path), "--fail-on", "never"])
        out[fmt] = path.read_text()
    return out


def says_red(said: dict[str, str], cell: str, verdict: str, word: str) -> None:
    """Every format shows the cell with this verdict, and junit fails it."""
    (row,) = [c for c in json.loads(said["json"])["cells"] if c["cell"] == cell]
    assert row["verdict"] == verdict and row["fails"] is True
    assert failing_in_junit(ET.fromstring(said["junit"]), cell)
    assert any(line.startswith(f"  {cell}") and word in line for line in said["text"].splitlines()), said["text"]
    assert f"{word}" in said["markdown"] and f'class="v v-{verdict}"' in said["html"]


def test_a_candidate_that_skipped_every_case_the_control_passed_is_not_run_and_red(tmp_path: Path) -> None:
    """It read `ok 0/6`, exit 0, junit failures="0": a skip for a case the control ran is no pass."""
    run = tmp_path / "run"
    write_result(run, "ctrl", [record(c) for c in CONV1D], cell={"control": True, **DONE})
    write_result(run, "cand", [record(c, "skipped", "no CPU kernel for this case here") for c in CONV1D], cell=DONE)
    said = every_format(run, tmp_path)
    says_red(said, "cand", "not-run", "NOT RUN")
    cases = [c for c in json.loads(said["json"])["cases"] if c["cell"] == "cand"]
    assert {c["verdict"] for c in cases} == {"not-run"} and len(cases) == 6
    assert main(["report", str(run)]) == 1


def test_a_driver_line_never_excuses_a_signature_failure(tmp_path: Path) -> None:
    """One case with the driver's message made the whole cell `unsupported`, exit 0, though its
    next case failed with NOT_SUPPORTED on a case the control passed."""
    run = tmp_path / "run"
    write_result(run, "ctrl", [record(c) for c in CONV1D], cell={"control": True, **DONE})
    write_result(run, "cand", [record(CONV1D[0], "failed", DRIVER), record(CONV1D[1], "failed", SIG),
                               *(record(c) for c in CONV1D[2:])], cell=DONE)
    said = every_format(run, tmp_path)
    says_red(said, "cand", "regression", "REGR")
    verdicts = {c["case"]: c["verdict"] for c in json.loads(said["json"])["cases"] if c["cell"] == "cand"}
    assert verdicts[CONV1D[0]] == "unsupported" and verdicts[CONV1D[1]] == "regression"
    assert main(["report", str(run)]) == 1


def test_many_families_in_one_cell_take_the_worst(tmp_path: Path) -> None:
    """Real failure texts of many families in one cell: each classified, the verdict still the worst."""
    texts = [DRIVER, SIG, "RuntimeError: CUDA error: an illegal memory access was encountered",
             "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
             "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"]
    run = tmp_path / "run"
    names = [f"c{i}" for i in range(len(texts))]
    write_result(run, "ctrl", [record(n) for n in names], cell={"control": True, **DONE})
    write_result(run, "cand", [record(n, "failed", t) for n, t in zip(names, texts, strict=True)], cell=DONE)
    said = every_format(run, tmp_path)
    says_red(said, "cand", "regression", "REGR")


def test_a_declared_skip_is_shown_as_declared_and_fails_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_result(run, "ctrl", [record(c) for c in CONV1D], cell={"control": True, **DONE})
    skips = [{"cases": ["conv1d-*"], "reason": "no fp16 conv1d on this CPU"}]
    write_result(run, "cand", [record(c, "skipped", "no CPU kernel") for c in CONV1D],
                 cell={"expected_skips": skips, **DONE})
    said = every_format(run, tmp_path)
    (row,) = [c for c in json.loads(said["json"])["cells"] if c["cell"] == "cand"]
    assert row["verdict"] == "declared-skip" and row["fails"] is False
    assert not failing_in_junit(ET.fromstring(said["junit"]), "cand")
    assert "declared: no fp16 conv1d on this CPU" in said["junit"]
    assert main(["report", str(run)]) == 0


def test_a_declared_skip_never_hides_a_failure(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_result(run, "ctrl", [record(c) for c in CONV1D], cell={"control": True, **DONE})
    skips = [{"cases": ["conv1d-*"], "reason": "expected"}]
    write_result(run, "cand", [record(CONV1D[0], "failed", SIG), *(record(c, "skipped") for c in CONV1D[1:5])],
                 cell={"expected_skips": skips, **DONE})
    said = every_format(run, tmp_path)
    verdicts = {c["case"]: c["verdict"] for c in json.loads(said["json"])["cases"] if c["cell"] == "cand"}
    # the failure is a regression, a case with no line at all is not-run: neither is declared away
    assert verdicts[CONV1D[0]] == "regression" and verdicts[CONV1D[5]] == "not-run"
    says_red(said, "cand", "regression", "REGR")


def test_a_run_with_cudnn_off_says_so_at_the_top_of_every_format(tmp_path: Path) -> None:
    """`-- --cudnn-enabled off` ran a whole run without cuDNN, and no format said so."""
    run = tmp_path / "run"
    off = {"device": "cpu", "cudnn_benchmark": False, "cudnn_deterministic": False, "cudnn_enabled": False}
    write_result(run, "ctrl", [record(c, knobs=off) for c in CONV1D], cell={"control": True, **DONE})
    write_result(run, "cand", [record(c, knobs=off) for c in CONV1D], cell=DONE)
    said = every_format(run, tmp_path)
    line = ("SETTINGS: cuDNN DISABLED (torch.backends.cudnn.enabled = False): no convolution ran through cuDNN, "
            "in 2 of 2 cell(s) that ran")
    assert said["text"].splitlines()[4].startswith(f"! {line}")  # after the one that no GPU took part
    assert said["markdown"].index(line) < said["markdown"].index("| stack |")
    assert said["html"].index(line) < said["html"].index('<section id="grid">')
    assert json.loads(said["json"])["settings"][0].startswith(line)


def test_a_knob_set_that_asks_for_a_setting_is_no_run_wide_setting(tmp_path: Path) -> None:
    run = tmp_path / "run"
    det = {"device": "cpu", "cudnn_benchmark": False, "cudnn_deterministic": True}
    write_result(run, "ctrl", [record(c) for c in CONV1D], cell={"control": True, **DONE})
    write_result(run, "cand+det_on", [record(c, knobs=det) for c in CONV1D],
                 cell={"requested": {"knobs": "deterministic=on"}, **DONE})
    assert json.loads(every_format(run, tmp_path)["json"])["settings"] == []


def test_infrastructure_alone_exits_4_and_beside_a_finding_1(tmp_path: Path) -> None:
    run = tmp_path / "run"
    control(run)
    set_up_failed(run, "cand")
    assert formats(run, tmp_path)[2] == 4  # nothing red is a finding: the infrastructure failed
    write_result(run, "regressed", [record("a"), record("b", status="failed", message="boom")], env=env_json("regressed"),
                 cell=DONE)
    verdicts, _, code = formats(run, tmp_path)
    assert verdicts["regressed"] == "regression" and code == 1  # a finding beside it: the finding's exit


def test_the_library_audits_finding_reads_the_same_in_every_format(tmp_path: Path) -> None:
    """Issue 47: a candidate whose cuDNN sub-libraries came from LD_LIBRARY_PATH is red in every
    format, each naming the same stack line and the offending path; the control says nothing of it."""
    import html

    from convmatrix.results import libraries
    from exportkit import AUDIT_SWAP, write_audit_run

    run = write_audit_run(tmp_path / "run")
    line = libraries.stack_line(libraries.table({"schema": 1, "libraries": AUDIT_SWAP}))
    assert line == "cuDNN 9.4.0 (wheel) · libcudnn_cnn, libcudnn_ops 9.2.1 from LD_LIBRARY_PATH"
    said = {}
    for fmt in ("text", "markdown", "html", "json", "junit"):
        out = tmp_path / f"report.{fmt}"
        assert main(["report", str(run), "--format", fmt, "-o", str(out)]) == 1, fmt
        said[fmt] = out.read_text()
    cells = {c["cell"]: c for c in json.loads(said["json"])["cells"]}
    assert [cells[c]["libraries_line"] for c in ("host", "host+swapped")] == [None, line]
    (audit,) = [c for c in json.loads(said["json"])["cases"]
                if c["cell"] == "host+swapped" and c["case"] == "audit-cuda-libraries"]
    assert (audit["verdict"], audit["family"]) == ("regression", "cuda_library_swapped")
    for fmt in ("text", "markdown"):
        assert line in said[fmt] and said[fmt].count(": libraries: cuDNN") == 1, fmt  # the candidate's alone
    # The offending path: the text table cuts messages to its column, the others carry them whole.
    assert "/secret/cudnn92/lib/libcudnn_cnn.so.9" in said["markdown"] and "LD_LIBRARY_PATH /secret/" in said["text"]
    assert html.escape(line) in said["html"] and "/secret/cudnn92/lib/libcudnn_cnn.so.9" in said["html"]
    failure = ET.fromstring(said["junit"]).find(
        "testsuite/testcase[@name='audit-cuda-libraries']/failure")
    assert failure is not None and "/secret/cudnn92/lib/libcudnn_cnn.so.9" in (failure.get("message") or "") + (
        failure.text or "")
