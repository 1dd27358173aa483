"""atlas/export.py: runs judged as `convmatrix report` judges them, made into a bundle with nothing
that names the fleet (issue 40): two runs on two stand-in GPUs and the real H200 run data export,
read back, and a scan of the bundle's text finds no path, host or user name, address, home folder
or UUID; what is kept is the report's verdicts, the stack as observed and the repro's fields."""

from __future__ import annotations

import datetime
import getpass
import json
import socket
from pathlib import Path

import pytest

from convmatrix.atlas import bundle, export
from convmatrix.atlas.model import Bundle
from convmatrix.atlas.scrub import Secrets
from convmatrix.cli import report as report_cmd
from convmatrix.prove import repro
from convmatrix.results import rundir
from convmatrix.results.read import numbered
from exportkit import (
    H100,
    H200_SLICE,
    IP,
    KNOBS,
    PARAMS,
    SHAPES,
    V100,
    bundle_text,
    cell_record,
    leaks,
    write_fallback_run,
    write_run,
)
from testkit import HOST, REPO, env_json, record, write_result

H200_RUNS = [REPO / "tests/data/gpu/h200-torch2.11-cudnn9.19/run", REPO / "tests/data/gpu/h200-torch2.11-cudnn9.19/rerun",
             REPO / "tests/data/gpu/h200-wheel-torch2.11/run"]
TODAY = datetime.date(2026, 12, 5)


def judged(*runs: Path) -> list[export.Judged]:
    made = []
    for run in runs:
        loaded, report = report_cmd.made([str(run)], None, [])
        made.append(export.Judged(path=run, results=loaded.results, report=report))
    return made


def exported(*runs: Path, fleet: str | None = "test-fleet") -> Bundle:
    return export.bundle_of(judged(*runs), fleet=fleet, today=TODAY)


def written(made: Bundle, path: Path) -> Path:
    path.write_bytes(bundle.write(made))
    assert bundle.read(path) == made  # what export makes, the reader takes
    return path


def test_two_runs_on_two_gpus_export_with_nothing_identifying(tmp_path: Path) -> None:
    one = write_run(tmp_path / "night-h100", tmp_path, H100)
    two = write_run(tmp_path / "night-v100", tmp_path, V100)
    made = exported(one, two)
    text = bundle_text(written(made, tmp_path / "b.json"))
    assert leaks(text, one, two, tmp_path) == []
    cells = [cell for run in made.runs for cell in run.cells]
    assert sorted({(c.gpu.model, c.gpu.generation) for c in cells}) == [("NVIDIA H100 80GB HBM3", "sm90"),
                                                                          ("Tesla V100-SXM2-16GB", "sm70")]
    failing = [case for cell in cells for case in cell.cases if case.outcome == "fail"]
    assert len(failing) == 2 and all(c.family == "cudnn_not_supported" and c.subcode == 3000 for c in failing)
    reason = failing[0].reason or ""
    # The scrubbed message keeps what says what failed, and nothing past its first line.
    assert reason.startswith("cudnn_not_supported: RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED in <path>")
    assert "<host>" in reason and "<user>" in reason and "<ip>" in reason and "second line" not in reason


def test_the_real_h200_runs_export_with_nothing_identifying(tmp_path: Path) -> None:
    for number, run in enumerate(H200_RUNS):
        made = exported(run)
        text = bundle_text(written(made, tmp_path / f"h200-{number}.json"))
        assert leaks(text, run, tmp_path) == [], run
        assert "h200box" not in text  # the host that ran it (its results' folder names)
        gpus = {(c.gpu.model, c.gpu.generation, c.stack.cudnn, c.stack.torch) for r in made.runs for c in r.cells}
        assert gpus == {("NVIDIA H200", "sm90", "9.19.0", "2.11.0+cu130")} or number == 2, gpus


def test_verdicts_are_the_reports(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", tmp_path, H100)
    _loaded, report = report_cmd.made([str(run)], None, [])
    made = exported(run)
    [cells] = [r.cells for r in made.runs]
    assert [(c.verdict, c.control) for c in cells] == [(str(r.verdict), r.cell == report.control) for r in report.cells]
    assert [(c.case, c.verdict, c.outcome) for cell in cells for c in cell.cases] == \
        [(r.case, str(r.verdict), str(r.outcome)) for r in report.cases]
    assert [c.verdict for c in cells] == ["control", "regression"]


def test_a_failing_case_carries_the_fields_repro_reads(tmp_path: Path) -> None:
    """The atlas writes the script from the bundle: spec_of gives the same case from the Repro as
    from the results line itself; a case file's own text (source, tag, workload) is not kept."""
    run = H200_RUNS[0]
    made = exported(run)
    result = judged(run)[0].results[0]
    lines = {line["case"]: line for _n, line in numbered(rundir.read_plain(result.path / "results.jsonl", 1 << 28)
                                                          .decode())}
    failing = [case for r in made.runs for cell in r.cells for case in cell.cases if case.repro is not None]
    assert len(failing) == 2
    for case in failing:
        assert case.repro is not None
        from_bundle = {"case": case.case, "params": dict(case.repro.params), "shapes": case.repro.shapes,
                       "knobs": dict(case.repro.knobs)}
        assert repro.spec_of(from_bundle, {"device": case.repro.device}) == repro.spec_of(lines[case.case],
                                                                                         result.observed)
        assert not {"source", "tag", "workload", "sources", "prefix"} & set(case.repro.params)
    passing = [c for r in made.runs for cell in r.cells for c in cell.cases if c.outcome == "pass"]
    assert passing and all(c.repro is None and c.reason is None for c in passing)


def test_sources_only_on_public_hosts(tmp_path: Path) -> None:
    sources = ["https://github.com/pytorch/pytorch/issues/162574", "https://jira.corp.example.com/browse/GPU-7",
               "https://user:pw@github.com/x", "https://github.com:8443/x", "https://10.0.0.1/x",
               "https://docs.nvidia.com/deeplearning/cudnn/"]
    made = exported(write_run(tmp_path / "run", tmp_path, H100, sources=sources))
    kept = [c.sources for r in made.runs for cell in r.cells for c in cell.cases if c.sources]
    assert kept == [("https://github.com/pytorch/pytorch/issues/162574", "https://docs.nvidia.com/deeplearning/cudnn/")]
    assert "4 case sources off the public hosts" in made.dropped


def test_a_mig_slice_is_its_profile_and_a_gpu_without_a_record_its_key(tmp_path: Path) -> None:
    made = exported(write_run(tmp_path / "run", tmp_path, H200_SLICE))
    assert {(c.gpu.model, c.gpu.mig) for c in made.runs[0].cells} == {("NVIDIA H200", "3g.71gb")}
    # A record whose name fits no model pattern, without a MIG profile: the key says both.
    bare, key = tmp_path / "bare", "a100-sxm4-80gb-sm80-mig1c-3g-40gb-plus-me"
    write_result(bare, "host", [record("a")], gpu=key, env=env_json("host", device="cuda"), host=HOST,
                 cell={"gpu_key": key, "gpu": {"index": 0, "name": "A100 <b>x</b>", "capability": "8.0"}, "lane": "host"})
    [cell] = exported(bare).runs[0].cells
    assert (cell.gpu.model, cell.gpu.capability, cell.gpu.generation, cell.gpu.mig) == \
        ("a100-sxm4-80gb", "8.0", "sm80", "1c.3g.40gb+me")


def test_cpu_cells_and_odd_versions_are_dropped_and_counted(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_result(run, "cpu-cell", [record("a")], env=env_json("cpu-cell"), cell={"gpu_key": "cpu", "lane": "host"})
    env = env_json("odd", torch="2.5.1 (built by alice@box)", cudnn=90100, device="cuda", driver="555.1 beta",
                   image_id="sha256:" + "a" * 64)
    write_result(run, "odd", [record("a")], gpu=H100[0], env=env, cell={"gpu_key": H100[0], "gpu": H100[1],
                                                                     "lane": "container"})
    made = exported(run)
    [cell] = made.runs[0].cells
    assert (cell.stack.torch, cell.stack.cudnn, cell.stack.driver, cell.stack.image_digest, cell.stack.lane) == \
        (None, "9.1.0", None, "sha256:" + "a" * 64, "container")
    assert "1 CPU-only cells" in made.dropped
    assert "1 observed torch values that fit no version pattern" in made.dropped
    assert "1 observed driver values that fit no version pattern" in made.dropped


def test_run_ids_are_opaque_stable_and_dates_have_no_time(tmp_path: Path) -> None:
    one = write_run(tmp_path / "night-1", tmp_path, H100, ended="2026-12-04T23:59:58.123+00:00")
    two = write_run(tmp_path / "night-2", tmp_path, H100, ended="2026-12-05T23:59:58.456+00:00")
    first, again = exported(one, two), exported(one, two)
    assert [r.run for r in first.runs] == [r.run for r in again.runs]
    assert len({r.run for r in first.runs}) == 2 and all(bundle.RUN_ID.fullmatch(r.run) for r in first.runs)
    assert [r.date for r in first.runs] == ["2026-12-04", "2026-12-05"]
    assert first.created == "2026-12-05" and "night" not in json.dumps(bundle.write(first).decode())


def test_without_a_label_the_fleet_is_opaque(tmp_path: Path) -> None:
    made = exported(write_run(tmp_path / "run", tmp_path, H100), fleet=None)
    assert made.fleet.startswith("anon-") and bundle.FLEET.fullmatch(made.fleet)


@pytest.mark.parametrize(("status", "subcode", "meaning"), [
    ("CUDNN_STATUS_NOT_SUPPORTED_SHAPE", 3002, "no engine supports this tensor shape"),
    ("CUDNN_STATUS_BAD_PARAM", 2000, "an invalid argument was passed"),
])
def test_the_reason_is_built_from_what_explain_found(tmp_path: Path, status: str, subcode: int,
                                                     meaning: str) -> None:
    """cuDNN's status and sub-code from --explain, with the meaning from convmatrix's own table: the
    explain file's own texts (cuDNN's reason, which may quote anything) are not used."""
    run = write_run(tmp_path / "run", tmp_path, H100)
    cell = next(p for p in run.iterdir() if p.name.startswith("host+pad8@"))
    (cell / rundir.EXPLAIN).mkdir()
    (cell / rundir.EXPLAIN / f"{rundir.explain_name('conv2d-b')}.json").write_text(json.dumps(
        {"schema": 1, "case": "conv2d-b", "cudnn": {"status": status, "subcode": subcode, "meaning": "from /home/x",
                                                   "reason": f"seen on {tmp_path}"}}))
    [failing] = [c for r in exported(run).runs for cell_ in r.cells for c in cell_.cases if c.outcome == "fail"]
    assert (failing.subcode, failing.reason) == (subcode, f"cudnn_not_supported: {status} ({subcode}): {meaning}")


def test_names_in_unusual_places_are_dropped_not_exported(tmp_path: Path) -> None:
    """A case id, a GPU model, a torch build label, a repro's word or a public source's URL that
    names the host, the user or an address is left out whole (and counted), as the message is
    scrubbed: each fits its pattern, so the patterns alone let it through."""
    run, ended = tmp_path / "run", "2026-12-04T23:59:58.123+00:00"
    user = getpass.getuser()
    env = env_json("c", torch=f"2.11.0+{HOST}", cuda="13.0", cudnn=91900, driver="580.159.04", device="cuda",
                   hostname=socket.gethostname(), started=ended, ended=ended)
    sources = [f"https://github.com/{HOST}/convs/issues/1", f"https://github.com/pytorch/pytorch/issues/1#{user}",
               "https://github.com/x/y?access_token=ghp_0123", "https://:ghp_0123@github.com/x/y",
               "https://github.com/pytorch/pytorch/issues/162574"]
    words = {"layout": HOST, "dtype": IP, "via": "gpu-7.corp.example.com"}
    cases = [(f"conv2d-{HOST}", {}), (f"conv2d-{IP}", {}), (f"conv2d-{user}-fp16", {}),
             ("conv2d-GPU-5b2dd5e9-7a3c-4f1e-9d4a-0c8e2f6a1b02", {}), ("conv2d-kept", words)]
    good = [record(case, params=PARAMS, shapes=SHAPES, knobs=KNOBS, device="cuda") for case, _ in cases]
    bad = [record(case, "failed", "boom", params={**PARAMS, **extra}, shapes=SHAPES, knobs={**KNOBS, "channels_last": HOST},
                  device="cuda", sources=sources) for case, extra in cases]
    gpu = (f"{HOST}-sm90", {**H100[1], "name": f"NVIDIA H100 {HOST}"})
    write_result(run, "host", good, gpu=gpu[0], env=env, cell=cell_record(gpu, control=True, ended=ended), host=HOST)
    write_result(run, "host+pad8", bad, gpu=gpu[0], env=env, cell=cell_record(gpu, control=False, ended=ended),
                 host=HOST)
    made = exported(run)
    text = bundle_text(written(made, tmp_path / "b.json")) + "\n".join(export.show(made))
    assert leaks(text, run, tmp_path) == [] and "corp.example" not in text and "ghp_" not in text
    assert "<host>" not in text  # dropped whole, not scrubbed into another value
    cells = made.runs[0].cells
    assert {c.gpu.model for c in cells} == {"unknown"} and {c.stack.torch for c in cells} == {None}
    assert [[case.case for case in cell.cases] for cell in cells] == [["conv2d-kept"], ["conv2d-kept"]]
    [failing] = cells[1].cases
    assert failing.sources == ("https://github.com/pytorch/pytorch/issues/162574",)
    assert failing.repro is not None and not set(words) & set(failing.repro.params)
    assert "channels_last" not in failing.repro.knobs
    assert "8 cases whose id names a host, a user, a path or an address" in made.dropped


def test_a_gpu_key_whose_model_fits_no_pattern_is_an_unknown_model() -> None:
    """What the key says is fitted as the record is: else export wrote a bundle its reader refuses."""
    gpu = export.gpu_of("a<b>!-sm90", None, Secrets())
    assert gpu is not None and (gpu.model, gpu.generation) == ("unknown", "sm90")


def test_a_fallback_carries_its_backends_and_ratios_and_a_green_case_no_cost(tmp_path: Path) -> None:
    """Issue 48: the bundle (version 2) carries a fallback's backends and ratios, as every format
    does; a case that passed at no cost carries none (200,000 of them would double a bundle)."""
    made = exported(write_fallback_run(tmp_path / "run"))
    written(made, tmp_path / "b.json")
    (cell,) = [c for c in made.runs[0].cells if not c.control]
    fell, green = cell.cases
    assert (fell.verdict, green.verdict, green.cost) == ("fallback", "ok", None)
    assert fell.cost is not None
    assert (fell.cost.control_backend, fell.cost.backend, fell.cost.memory_ratio) == ("Cudnn", "Slow3d", 14.0)
