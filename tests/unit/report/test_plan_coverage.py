"""A green covers the plan (issue 19): a planned cell that did not run is NOT RUN in every format
and fails the report (an optional one is greyed and fails nothing); GPU generations the fleet
expects and no runner reported are NOT RUN; each cell is compared with the control from its own
host, and a host without one is INVALID. Plans are read as untrusted input."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from convmatrix.cli.main import main
from convmatrix.results import plans
from testkit import env_json, record, write_result

CASES = ["conv1d-fp16-k3", "conv2d-fp16-k3"]
SIGNATURE = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "capability": "9.0"}


def result(run: Path, cell: str, *, host: str, control: bool = False, failing: tuple[str, ...] = (),
           gpu: str = "cpu", driver: str | None = None, extra: dict[str, Any] | None = None) -> Path:
    records = [record(c, "failed", SIGNATURE) if c in failing else record(c) for c in CASES]
    env = env_json(cell, driver=driver, **({"device": "cuda", "gpus": [{**H100, "memory_mb": 1}]} if gpu != "cpu"
                                            else {}))
    meta = {"control": control, "lane": "baremetal", "gpu_key": gpu, "ended": "2026-12-02T00:02:00Z",
            "gpu": H100 if gpu != "cpu" else None, **(extra or {})}
    return write_result(run, cell, records, gpu=gpu, env=env, cell=meta, host=host)


def plan(run: Path, host: str, *entries: tuple[str, str], optional: tuple[str, ...] = (),
         fleet: tuple[str, ...] = ()) -> Path:
    return plans.write(run, host=host, selection={"matrix": "m.toml", "lanes": [], "cells": [], "shard": None},
                       fleet_gpus=fleet, expected=[plans.Expected(cell=c, gpu_key=g, host=host, optional=c in optional,
                                                                  lane="baremetal") for c, g in entries])


def reports(run: Path, tmp_path: Path, *extra: str) -> dict[str, str]:
    """Every format of the report, and the text report's exit code under each --fail-on."""
    out: dict[str, str] = {}
    for fmt in ("json", "markdown", "html", "junit", "text"):
        path = tmp_path / f"report.{fmt}"
        main(["report", str(run), *extra, "--format", fmt, "-o", str(path), "--fail-on", "never"])
        out[fmt] = path.read_text()
    return out


def codes(run: Path, *extra: str) -> dict[str, int]:
    return {fail_on: main(["report", str(run), *extra, "--fail-on", fail_on]) for fail_on in
            ("regression", "signature", "never")}


def not_run_cells(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in data["cells"] if c["verdict"] == "not-run"]


def test_a_planned_cell_recorded_as_not_run_is_red_in_every_format(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result(run, "control", host="a", control=True)
    result(run, "candidate", host="a")
    write_result(run, "container-x", [], host="a", cell={
        "lane": "container", "gpu_key": "cpu", "not_run": "the docker engine is not reachable", "ended": "x"})
    plan(run, "a", ("control", "cpu"), ("candidate", "cpu"), ("container-x", "cpu"))
    formats = reports(run, tmp_path)
    (cell,) = not_run_cells(json.loads(formats["json"]))
    assert cell["cell"] == "container-x" and cell["not_run"] == "the docker engine is not reachable"
    assert "NOT RUN" in formats["text"] and "the docker engine is not reachable" in formats["text"]
    assert "⛔ NOT RUN: the docker engine is not reachable" in formats["markdown"]
    assert 'class="v v-not-run"' in formats["html"] and "the docker engine is not reachable" in formats["html"]
    failure = ET.fromstring(formats["junit"]).find(".//testsuite[@name='container-x@cpu']/testcase/failure")
    assert failure is not None and "docker engine" in (failure.get("message") or "")
    assert codes(run) == {"regression": 1, "signature": 1, "never": 0}


def test_a_planned_cell_with_no_result_at_all_is_not_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    result(run, "control", host="a", control=True)
    path = plan(run, "a", ("control", "cpu"), ("vanished", "cpu"))
    assert main(["report", str(run), "--format", "json"]) == 1
    (cell,) = not_run_cells(json.loads(capsys.readouterr().out))
    assert cell["cell"] == "vanished" and cell["not_run"] == f"no result on a (planned by {path})"
    main(["report", str(run)])
    assert "1 cell(s) NOT RUN: vanished@cpu" in capsys.readouterr().err


def test_an_optional_cell_that_did_not_run_is_greyed_and_fails_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result(run, "control", host="a", control=True)
    write_result(run, "host", [], host="a", cell={"lane": "host", "gpu_key": "cpu", "optional": True,
                                                  "not_run": "python3 has no torch", "ended": "x"})
    plan(run, "a", ("control", "cpu"), ("host", "cpu"), optional=("host",))
    formats = reports(run, tmp_path)
    (cell,) = not_run_cells(json.loads(formats["json"]))
    assert cell["optional"] is True
    assert "not run (optional): python3 has no torch" in formats["text"]
    assert 'v-not-run quiet' in formats["html"] and "▫️ not run (optional)" in formats["markdown"]
    assert ET.fromstring(formats["junit"]).find(".//testsuite[@name='host@cpu']/testcase/skipped") is not None
    assert codes(run) == {"regression": 0, "signature": 0, "never": 0}


def test_a_generation_the_fleet_expects_and_no_runner_reported_is_not_run_for_every_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    result(run, "control", host="a", control=True, gpu="h100-sm90")
    result(run, "candidate", host="a", gpu="h100-sm90")
    plan(run, "a", ("control", "h100-sm90"), ("candidate", "h100-sm90"))
    assert main(["report", str(run), "--format", "json"]) == 0
    capsys.readouterr()
    assert main(["report", str(run), "--format", "json", "--expect-gpu", "h100-sm90,a100-sm80"]) == 1
    missing = not_run_cells(json.loads(capsys.readouterr().out))
    assert sorted((c["cell"], c["gpu"]["key"]) for c in missing) == [("candidate", "a100-sm80"),
                                                                     ("control", "a100-sm80")]
    assert all("no runner reported GPU a100-sm80" in c["not_run"] for c in missing)
    assert missing[0]["gpu"]["generation"] == "Ampere"
    # The matrix's [fleet] table, carried by the plan, expects the same.
    plan(run, "a", ("control", "h100-sm90"), ("candidate", "h100-sm90"), fleet=("a100-sm80",))
    assert main(["report", str(run)]) == 1


def test_a_mig_slice_the_fleet_expects_is_a_column_of_its_own_with_its_generation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37: a slice key is a GPU key like any other: expected and missing, it is NOT RUN
    there, in its GPU's generation, beside the whole GPU's results."""
    run = tmp_path / "run"
    result(run, "control", host="a", control=True, gpu="h100-sm90")
    result(run, "candidate", host="a", gpu="h100-sm90")
    plan(run, "a", ("control", "h100-sm90"), ("candidate", "h100-sm90"))
    assert main(["report", str(run), "--format", "json", "--expect-gpu", "h200-sm90-mig3g-71gb"]) == 1
    missing = not_run_cells(json.loads(capsys.readouterr().out))
    assert sorted((c["cell"], c["gpu"]["key"]) for c in missing) == [("candidate", "h200-sm90-mig3g-71gb"),
                                                                     ("control", "h200-sm90-mig3g-71gb")]
    assert {(c["gpu"]["generation"], c["gpu"]["capability"]) for c in missing} == {("Hopper", "9.0")}


@pytest.mark.parametrize("key", ["../x", "H100", "a/b", "a@b", "", "h200", "h200-sm90-mig3g.71gb"])
def test_a_bad_expected_gpu_key_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str) -> None:
    run = tmp_path / "run"
    result(run, "control", host="a", control=True)
    assert main(["report", str(run), "--expect-gpu", key]) == 2
    assert "--expect-gpu" in capsys.readouterr().err


def test_each_cell_is_compared_with_the_control_of_its_own_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Host a's control fails conv2d (a bad node), b's passes: a's candidate, failing the same way,
    is no regression on a; b's candidate, failing it, is one on b."""
    run = tmp_path / "run"
    result(run, "control", host="a", control=True, failing=("conv2d-fp16-k3",), driver="550.54")
    result(run, "candidate", host="a", failing=("conv2d-fp16-k3",), driver="550.54")
    result(run, "control", host="b", control=True, driver="560.35")
    result(run, "candidate", host="b", failing=("conv2d-fp16-k3",), driver="560.35")
    assert main(["report", str(run), "--format", "json", "--fail-on", "never"]) == 0
    data = json.loads(capsys.readouterr().out)
    verdicts = {(c["cell"], c["host"]): (c["verdict"], c["gpu"]["key"]) for c in data["cells"]}
    assert verdicts == {("control", "a"): ("control", "cpu@a"), ("control", "b"): ("control", "cpu@b"),
                        ("candidate", "a"): ("ok", "cpu@a"), ("candidate", "b"): ("regression", "cpu@b")}
    (note,) = [n for n in data["notes"] if n.startswith("results from 2 hosts")]
    assert "a (driver 550.54)" in note and "b (driver 560.35)" in note and "the drivers differ" in note


def test_a_host_without_a_control_is_invalid_never_green(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    result(run, "control", host="a", control=True)
    result(run, "candidate", host="a")
    result(run, "candidate", host="c")
    assert main(["report", str(run), "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    (cell,) = [c for c in data["cells"] if c["host"] == "c"]
    assert cell["verdict"] == "invalid"
    assert data["control"]["per_gpu"]["cpu@c"]["reason"] == "no control on host c; one ran on a"
    assert main(["report", str(run)]) == 1
    assert "INVALID: candidate@cpu@c" in capsys.readouterr().err


def test_two_hosts_runs_of_one_cell_are_two_results_not_a_duplicate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    result(run, "control", host="a", control=True)
    result(run, "control", host="b", control=True)
    main(["report", str(run), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert sorted(c["host"] for c in data["cells"]) == ["a", "b"]
    assert not [n for n in data["notes"] if "two results" in n]


def test_results_from_before_hosts_were_recorded_still_report_as_one_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    write_result(run, "control", [record(c) for c in CASES], cell={"control": True, "ended": "x"})
    write_result(run, "candidate", [record(c) for c in CASES], cell={"ended": "x"})
    assert main(["report", str(run), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {c["gpu"]["key"] for c in data["cells"]} == {"cpu"} and {c["host"] for c in data["cells"]} == {None}


@pytest.mark.parametrize(("content", "field"), [
    ({"schema": 1, "host": "a", "expected": "everything"}, "'expected'"),
    ({"schema": 1, "host": "../../etc", "expected": []}, "'host'"),
    ({"schema": 1, "host": "a", "expected": [{"cell": "x", "gpu_key": "cpu"}]}, "'optional'"),
    ({"schema": 1, "host": "a", "expected": [{"cell": 5, "gpu_key": "cpu", "optional": False}]}, "'cell'"),
    ({"schema": 1, "host": "a", "expected": [{"cell": "x", "gpu_key": "cpu", "optional": False,
                                             "host": "a/b"}]}, "'host'"),
    ({"schema": 9, "host": "a", "expected": []}, "schema 9"),
])
def test_a_malformed_plan_is_one_line_and_exit_2_and_the_results_still_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: dict[str, Any], field: str
) -> None:
    run = tmp_path / "run"
    result(run, "control", host="a", control=True)
    (run / plans.PLANS).mkdir()
    (run / plans.PLANS / "a-0.json").write_text(json.dumps(content))
    assert main(["report", str(run)]) == 2
    out, err = capsys.readouterr()
    (line,) = [e for e in err.splitlines() if "a-0.json" in e]
    assert field in line and "control" in out


def test_a_plan_that_is_a_symlink_or_huge_is_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    result(run, "control", host="a", control=True)
    folder = run / plans.PLANS
    folder.mkdir()
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    os.symlink(secret, folder / "a-link.json")
    assert main(["report", str(run)]) == 2
    assert "a-link.json: not a plain file" in capsys.readouterr().err
    (folder / "a-link.json").unlink()
    monkeypatch.setattr(plans, "MAX_BYTES", 10)
    (folder / "a-big.json").write_text(json.dumps({"schema": 1, "host": "a", "expected": []}))
    assert main(["report", str(run)]) == 2
    assert "more than a plan holds" in capsys.readouterr().err


@pytest.mark.parametrize("host", ["../x", "a/b", "a@b", "-x"])
def test_a_host_in_cell_json_that_could_escape_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], host: str
) -> None:
    run = tmp_path / "run"
    result(run, "control", host="a", control=True)
    bad = result(run, "candidate", host="b")
    meta = json.loads((bad / "cell.json").read_text())
    (bad / "cell.json").write_text(json.dumps({**meta, "host": host}))
    assert main(["report", str(run)]) == 2
    assert "field 'host': not a host name" in capsys.readouterr().err


def test_results_from_before_hosts_beside_one_hosts_are_one_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A direct suite run (no host recorded) beside a harness run: one host, compared as before."""
    run = tmp_path / "run"
    write_result(run, "control", [record(c) for c in CASES], cell={"control": True, "ended": "x"})
    result(run, "candidate", host="vm")
    assert main(["report", str(run), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {c["gpu"]["key"] for c in data["cells"]} == {"cpu"}
    assert not [n for n in data["notes"] if n.startswith("results from")]
