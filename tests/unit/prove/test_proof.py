"""`convmatrix prove` over results written the way the suite and the harness write them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from convmatrix import results
from convmatrix.cli.main import main
from convmatrix.errors import BadInput
from convmatrix.prove import proof as prove
from convmatrix.prove import render as render_prove
from testkit import env_json, record, write_result

SIG = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
OTHER = "CUDA error: an illegal memory access was encountered"
CONTROL = "baremetal-torch2.4.1-cu124-cudnnbundled-py3.11"
STACK = "baremetal-torch2.5.1-cu124-cudnnbundled-py3.11"
GPUS = {"cpu": None, "h200-sm90": {"index": 0, "name": "NVIDIA H200", "capability": "9.0"}}


def requested(cell: str, knobs: str) -> dict[str, Any]:
    torch = "2.4.1" if cell.startswith(CONTROL) else "2.5.1"
    cudnn = "9.5.1.17" if "cudnn9.5.1.17" in cell else "bundled"
    values = {"lane": "baremetal", "torch": torch, "cuda": "cu124", "cudnn": cudnn, "python": "3.11", "base": ""}
    return {**values, **({"knobs": knobs} if knobs != "default" else {})}


def cell(run: Path, cell_id: str, cases: dict[str, str | None], *, gpu: str = "cpu", knobs: str = "default",
         version: str = "v1", params: dict[str, Any] | None = None) -> Path:
    """A result: each case passes (None), skips ("skip") or fails with the message given."""
    records = [record(name, "skipped" if msg == "skip" else "failed" if msg else "passed",
                      None if msg == "skip" else msg, params=params or {}) for name, msg in cases.items()]
    meta = {"lane": "baremetal", "requested": requested(cell_id, knobs), "knobs": knobs, "expected": {},
            "control": cell_id == CONTROL, "gpu_key": gpu, "gpu": GPUS.get(gpu), "ended": "2026-12-02T00:02:00Z"}
    return write_result(run, cell_id, records, gpu=gpu, env=env_json(cell_id, suite_version=version), cell=meta)


def knob_run(run: Path, *, after: dict[str, str | None], gpus: tuple[str, ...] = ("cpu",),
             before: dict[str, str | None] | None = None) -> Path:
    """One run: the control, the stack under default knobs (the signature in case a), and +pad8."""
    for gpu in gpus:
        cell(run, CONTROL, {"a": None, "b": None}, gpu=gpu)
        cell(run, STACK, before or {"a": SIG, "b": None}, gpu=gpu)
        cell(run, f"{STACK}+pad8", after, gpu=gpu, knobs="pad=8")
    return run


def go(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["prove", *[str(a) for a in args]])
    out, err = capsys.readouterr()
    return code, out, err


PAIR = ("--pair", "knobs=default:pad=8")
CPU = "--allow-cpu"  # a proof whose AFTER ran on the CPU alone is no proof without it (issue 45)


def test_signature_gone_nothing_new_control_passing_is_proven(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = knob_run(tmp_path, after={"a": None, "b": None}, gpus=("cpu", "h200-sm90"))
    code, out, err = go(capsys, run, run, *PAIR)
    assert (code, err) == (0, ""), out
    assert "h200-sm90 (Hopper)" in out and "fail cudnn_not_supported" in out


@pytest.mark.parametrize(("after", "why"), [
    ({"a": SIG, "b": None}, "1 case(s) still fail with the signature"),
    ({"a": OTHER, "b": None}, "1 case(s) failed with the signature and now fail otherwise"),
    ({"a": "skip", "b": None}, "1 case(s) failed with the signature and did not run after"),
    ({"b": None}, "1 case(s) failed with the signature and did not run after"),
    ({"a": None, "b": OTHER}, "1 case(s) fail anew"),
    ({"a": None}, "AFTER has no result for 1 case(s) BEFORE ran: b"),
    # Issue 20, item 3: the fix "worked" by skipping what passed before: PROVEN, against the contract.
    ({"a": None, "b": "skip"}, "AFTER skipped 1 case(s) BEFORE ran: b"),
])
def test_anything_short_of_a_fix_is_not_proven(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               after: dict[str, str | None], why: str) -> None:
    run = knob_run(tmp_path, after=after)
    code, out, err = go(capsys, run, run, *PAIR, CPU)
    assert code == 1, out
    assert f"cpu: {STACK} → {STACK}+pad8: {why}" in out
    assert err.startswith("convmatrix: not proven: ")


def test_one_generation_still_failing_is_not_proven(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = knob_run(tmp_path, after={"a": None, "b": None}, gpus=("cpu",))
    cell(run, CONTROL, {"a": None, "b": None}, gpu="h200-sm90")
    cell(run, STACK, {"a": SIG, "b": None}, gpu="h200-sm90")
    cell(run, f"{STACK}+pad8", {"a": SIG, "b": None}, gpu="h200-sm90", knobs="pad=8")
    code, out, _ = go(capsys, run, run, *PAIR)
    assert code == 1
    # The one reason is the headline itself (issue 34 item 4): no list repeats it.
    assert f"NOT PROVEN: h200-sm90: {STACK} → {STACK}+pad8: 1 case(s) still fail with the signature" in out.splitlines()
    assert [line for line in out.splitlines() if line.startswith("- ")] == []


def test_a_proof_with_nothing_to_prove_says_one_thing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 34 item 4: the README's fix-proof example where nothing failed read "NOT PROVEN" over
    pairs saying "proven: nothing failed before or after". The reason is the first line; no pair
    says "proven" when the proof is not."""
    run = knob_run(tmp_path, before={"a": None, "b": None}, after={"a": None, "b": None})
    for fmt in ("text", "markdown"):
        code, out, _ = go(capsys, run, run, *PAIR, "--format", fmt, CPU)
        assert code == 1
        lines = [line for line in out.splitlines() if line.strip()]
        assert lines[1].startswith("no GPU took part in BEFORE or AFTER")  # the line after the title
        head = lines[2] if fmt == "text" else lines[0].removeprefix("## Fix proof: ")
        assert head == "NOT PROVEN: nothing failed with the signature in BEFORE: there is nothing to prove", out
        assert not re.search(r"(?<!NOT )\bproven\b", out.replace("NOT PROVEN", "")), out
        assert "nothing to prove: nothing failed before or after" in out


def test_a_generation_after_lacks_is_not_proven(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = knob_run(tmp_path, after={"a": None, "b": None})
    cell(run, CONTROL, {"a": None, "b": None}, gpu="h200-sm90")
    cell(run, STACK, {"a": SIG, "b": None}, gpu="h200-sm90")
    code, out, _ = go(capsys, run, run, *PAIR)
    assert code == 1 and f"h200-sm90: {STACK} → (none): no counterpart in AFTER" in out


def test_nothing_to_prove_without_the_signature_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "r"
    cell(run, CONTROL, {"a": None})
    cell(run, STACK, {"a": None})
    code, out, _ = go(capsys, run, run, CPU)
    assert code == 1 and "nothing failed with the signature in BEFORE" in out


@pytest.mark.parametrize("control", [{"a": None, "b": OTHER}, None])
def test_a_control_failing_or_absent_gives_no_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      control: dict[str, str | None] | None) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    cell(before, CONTROL, {"a": None, "b": None})
    cell(before, STACK, {"a": SIG, "b": None})
    if control is not None:
        cell(after, CONTROL, control)
    cell(after, STACK, {"a": None, "b": None})
    code, out, err = go(capsys, before, after, CPU)
    assert code == 3, out
    assert f"control {CONTROL} on cpu in AFTER: " in err


def test_separate_runs_pair_by_id_or_by_an_axis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    cell(before, CONTROL, {"a": None})
    cell(before, STACK, {"a": SIG})
    cell(after, CONTROL, {"a": None})
    override = STACK.replace("cudnnbundled", "cudnn9.5.1.17")
    cell(after, override, {"a": None})
    code, out, _ = go(capsys, before, after, "--pair", "cudnn=bundled:9.5.1.17", CPU)
    assert code == 0, out
    assert f"{STACK} → {override}: proven" in out
    code, out, _ = go(capsys, before, after, CPU)  # by id: the stack has no counterpart, so it proves nothing
    assert code == 1 and "no counterpart in AFTER" in out


@pytest.mark.parametrize(("change", "line"), [
    ({"version": "v2"}, "suite versions differ (v1 in BEFORE, v2 in AFTER)"),
    ({"params": {"kernel": 5}}, "case parameters differ for 2 case(s): a, b"),
])
def test_inputs_that_differ_are_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          change: dict[str, Any], line: str) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    for run, extra in ((before, {}), (after, change)):
        cell(run, CONTROL, {"a": None, "b": None})
        cell(run, STACK, {"a": SIG, "b": None} if run == before else {"a": None, "b": None}, **extra)
    code, _, err = go(capsys, before, after)
    assert code == 2
    assert line in err and f"{STACK}@cpu and {STACK}@cpu" in err


@pytest.mark.parametrize(("text", "pairing"), [
    ("knobs=default:pad=8", ("knobs", "default", "pad=8")),
    ("knobs=channels_last=on,deterministic=on:default", ("knobs", "deterministic=on,channels_last=on", "default")),
    ("cudnn=bundled:9.5.1.17", ("cudnn", "bundled", "9.5.1.17")),
    ("base=python:3.11-slim:nvcr.io/nvidia/pytorch:24.10-py3",
     ("base", "python:3.11-slim", "nvcr.io/nvidia/pytorch:24.10-py3")),
])
def test_pair_parses_even_values_with_colons(text: str, pairing: tuple[str, str, str]) -> None:
    parsed = prove.parse_pair(text)
    assert (parsed.axis, parsed.old, parsed.new) == pairing


@pytest.mark.parametrize("text", ["knobs", "gpu=a:b", "cudnn=bundled", "cudnn=bundled:bundled", "knobs=pad=8:pad=x",
                                  "knobs=default:default"])
def test_a_bad_pair_is_bad_input(text: str) -> None:
    with pytest.raises(BadInput) as err:
        prove.parse_pair(text)
    assert str(err.value).startswith(f"--pair {text!r}: ")


def test_markdown_is_one_table_per_pair(tmp_path: Path) -> None:
    run = tmp_path / "r"
    cell(run, CONTROL, {"x_y.z+1": None})
    cell(run, STACK, {"x_y.z+1": SIG})
    cell(run, f"{STACK}+pad8", {"x_y.z+1": None}, knobs="pad=8")

    loaded = results.load([run])
    proof = prove.prove(loaded, loaded, before_paths=[str(run)], after_paths=[str(run)],
                        pairing=prove.parse_pair("knobs=default:pad=8"), allow_cpu=True)
    assert proof.verdict == prove.Verdict.PROVEN
    text = render_prove.render(proof, "markdown")
    assert "| x_y.z+1 | fail cudnn_not_supported | pass | fixed |" in text
    assert text.startswith("## Fix proof: PROVEN on the CPU alone")


def test_a_case_id_that_could_break_a_table_or_a_path_is_a_bad_line(tmp_path: Path) -> None:
    """Issue 21, item 2: case ids are checked against the one pattern the suite makes."""
    run = tmp_path / "r"
    cell(run, CONTROL, {"x|y": None, "../../x": None, "ok": None})

    loaded = results.load([run])
    assert len([e for e in loaded.errors if "field 'case': not a case id" in e]) == 2
    (result,) = loaded.results
    assert set(result.cases) == {"ok"}


@pytest.mark.parametrize("side", ["BEFORE", "AFTER"])
def test_an_audit_only_run_is_refused_naming_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     side: str) -> None:
    """Issue 47: `run --audit-only` ran each cell's library audit alone; its conv cases did not run,
    so it proves nothing (as record, report --history and export refuse it): exit 2, one line."""
    before, after = tmp_path / "before", tmp_path / "after"
    audit = "audit-cuda-libraries"
    for run in (before, after):
        only = (run == before) == (side == "BEFORE")
        cases: dict[str, str | None] = {audit: None} if only else {audit: None, "a": SIG if run == before else None}
        for cell_id in (CONTROL, STACK):
            path = cell(run, cell_id, cases if cell_id == STACK else {k: None for k in cases})
            if only:
                meta = json.loads((path / "cell.json").read_text())
                (path / "cell.json").write_text(json.dumps({**meta, "audit_only": True}))
    code, out, err = go(capsys, before, after, CPU)
    assert code == BadInput.exit_code == 2 and out == ""
    refused = before if side == "BEFORE" else after
    assert err.count("\n") == 1 and f"{side} {refused}: an audit-only run (convmatrix run --audit-only)" in err
    with pytest.raises(BadInput, match="is no fix proof's input"):
        prove.prove(results.load([str(before)]), results.load([str(after)]), before_paths=[str(before)],
                    after_paths=[str(after)], pairing=None, allow_cpu=True)
