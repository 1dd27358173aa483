"""suites/conftest.py's CasesRan and AfterConvs (issue 47): on a GPU run, the `audit-after-convs`
line that the main process or xdist's controller writes once every process has ended. No GPU here:
the hooks are called as pytest and xdist call them (a worker's `workeroutput`, a node that died),
and the line is read back the way the harness reads every line (suites/records.py, the families)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from convmatrix.results import families
from testkit import REPO, load_suite_module

conftest = load_suite_module("conftest")
libaudit = conftest.libaudit
records = conftest.records

WHEEL_LIB = "/v/lib/python3.11/site-packages/nvidia/cudnn/lib"
TABLE = {"libraries": [{"name": "libcudnn.so.9", "path": f"{WHEEL_LIB}/libcudnn.so.9"},
                       {"name": "libcudnn_cnn.so.9", "path": f"{WHEEL_LIB}/libcudnn_cnn.so.9"}]}


def settings(results: Path, worker: str = "main") -> Any:
    return conftest.Settings(knobs={"device": "cuda"}, worker=worker, results_dir=str(results), cell_id="cand",
                             isolation=None)


def lines(results: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (results / "results.jsonl").read_text().splitlines()]


def with_audit(results: Path, table: dict[str, Any] | None = TABLE) -> None:
    (results / "results.jsonl").write_text(json.dumps({"case": libaudit.AUDIT_CASE, "audit": table}) + "\n")


def ran(counter: Any, *nodeids: str) -> None:
    for nodeid in nodeids:
        counter.pytest_runtest_call(SimpleNamespace(nodeid=nodeid))


def worker(mapped: list[str], ran: int = 3) -> SimpleNamespace:
    return SimpleNamespace(workeroutput={conftest.AFTER_CONVS_KEY: {"ran": ran, "mapped": mapped}})


def test_the_controller_judges_what_its_workers_mapped_and_counts_the_one_that_died(tmp_path: Path) -> None:
    with_audit(tmp_path)
    counter = conftest.CasesRan()  # the controller's: it runs no case
    after = conftest.AfterConvs(settings(tmp_path, "controller"), counter)
    after.pytest_testnodedown(worker([f"{WHEEL_LIB}/libcudnn.so.9"]), None)
    after.pytest_testnodedown(worker(["/opt/cudnn92/lib/libcudnn_cnn.so.9", "/usr/lib/libcuda.so.1"]), None)
    after.pytest_testnodedown(SimpleNamespace(), "worker 'gw2' crashed")  # no workeroutput: it died
    after.pytest_sessionfinish(SimpleNamespace())
    _audit, line = lines(tmp_path)
    assert records.result_problems(line) == []  # a line the harness accepts as it is
    assert (line["case"], line["nodeid"], line["status"], line["cell_id"]) == (
        "audit-after-convs", "suites/test_audit.py::audit-after-convs", "failed", "cand")
    assert line["message"].startswith("CUDA library swap: libcudnn_cnn.so.9 mapped after the conv cases ran from "
                                      "/opt/cudnn92/lib/libcudnn_cnn.so.9")
    assert families.classify(line["message"], status=line["status"], exc_type=line["exc_type"]) == \
        "cuda_library_swapped"
    facts = line["after_convs"]
    assert (facts["processes"], facts["lost"], facts["unnamed"]) == (2, 1, ["/usr/lib/libcuda.so.1"])


def test_the_main_process_judges_its_own_maps_once_and_a_continued_run_adds_no_second_line(tmp_path: Path) -> None:
    with_audit(tmp_path, {"libraries": []})  # nothing named: whatever this process mapped is no swap
    counter = conftest.CasesRan()
    ran(counter, "suites/test_audit.py::test_audit[audit-cuda-libraries]", "suites/test_conv.py::test_conv[a]")
    assert counter.ran == 1  # the audit is not a conv case
    conftest.AfterConvs(settings(tmp_path), counter).pytest_sessionfinish(SimpleNamespace())
    line = lines(tmp_path)[-1]
    assert (line["case"], line["status"], line["worker"]) == ("audit-after-convs", "passed", "main")
    assert line["after_convs"]["mapped"] == libaudit.mapped()
    conftest.AfterConvs(settings(tmp_path), counter).pytest_sessionfinish(SimpleNamespace())
    assert len(lines(tmp_path)) == 2


def test_no_line_without_a_conv_case_run_or_without_the_audits_line(tmp_path: Path) -> None:
    with_audit(tmp_path)
    counter = conftest.CasesRan()
    ran(counter, "suites/test_audit.py::test_audit[audit-cuda-libraries]")  # an audit-only run
    conftest.AfterConvs(settings(tmp_path), counter).pytest_sessionfinish(SimpleNamespace())
    assert len(lines(tmp_path)) == 1
    with_audit(tmp_path, None)  # the audit deselected or unrecorded: nothing to judge against
    ran(counter, "suites/test_conv.py::test_conv[a]")
    conftest.AfterConvs(settings(tmp_path), counter).pytest_sessionfinish(SimpleNamespace())
    assert len(lines(tmp_path)) == 1


def test_a_worker_hands_its_count_and_maps_to_the_controller() -> None:
    counter = conftest.CasesRan()
    ran(counter, "suites/test_conv.py::test_conv[a]", "suites/test_conv.py::test_conv[b]")
    config = SimpleNamespace(workeroutput={})
    counter.pytest_sessionfinish(SimpleNamespace(config=config))
    handed = config.workeroutput[conftest.AFTER_CONVS_KEY]
    assert handed["ran"] == 2 and handed["mapped"] == libaudit.mapped()
    counter.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace()))  # not a worker: nothing to hand


def suite(results: Path, *args: str, device: str = "cuda",
          keyword: str = "audit or conv2d-fp32-k3-p1-nobias-below2g") -> list[dict[str, Any]]:
    """A real suite session's lines. With --device cuda on this GPU-less machine the conv cases fail
    (no CUDA), which is all this needs: they ran, so the line is due (the CPU build of torch maps
    no CUDA library, so it passes)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    subprocess.run([sys.executable, "-m", "pytest", str(REPO / "suites"), "-q", "--device", device, "--results-dir",
                    str(results), "--cell-id", "c", "-k", keyword, *args],
                   env=env, capture_output=True, text=True, timeout=600, check=False)
    return lines(results)


def test_a_gpu_session_writes_the_line_in_process_and_under_xdist(tmp_path: Path) -> None:
    for args, processes in ((("--in-process",), 1), (("-n", "2"), 2)):
        written = suite(tmp_path / str(processes), *args)
        after = [line for line in written if line["case"] == "audit-after-convs"]
        assert len(after) == 1, [line["case"] for line in written]
        assert after[0]["status"] == "passed" and records.result_problems(after[0]) == []
        assert after[0]["after_convs"]["processes"] == processes and after[0]["after_convs"]["lost"] == 0
        assert written[-1]["case"] == "audit-after-convs"  # written once every process has ended


def test_no_line_in_a_cpu_session_or_an_audit_only_one(tmp_path: Path) -> None:
    for name, device, keyword in (("cpu", "cpu", "audit or conv2d-fp32-k3-p1-nobias-below2g"),
                                  ("audit-only", "cuda", "audit-cuda-libraries")):
        cases = [line["case"] for line in suite(tmp_path / name, "--in-process", device=device, keyword=keyword)]
        assert "audit-cuda-libraries" in cases and "audit-after-convs" not in cases, cases
