"""The library audit's child started with the session (issue 47: the audit's cost to a cell):
suites/libaudit.py Child and suites/conftest.py EarlyAudit. The child imports this interpreter's
torch (the tests' CPU build), so these are real children, not stand-ins."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from suiterun import run_suite
from testkit import REPO, load_suite_module

conftest = load_suite_module("conftest")
libaudit = conftest.libaudit


def test_a_child_started_now_is_read_later_with_its_stages_and_exit() -> None:
    child = libaudit.Child(dict(os.environ))
    ran = child.result()
    assert ran["exit"] == 0, ran["stderr"]
    assert [stage["stage"] for stage in ran["stages"]][::len(ran["stages"]) - 1] == ["torch", "done"]
    assert libaudit.run_child(dict(os.environ))["stages"][-1]["stage"] == ran["stages"][-1]["stage"]


def test_a_child_past_its_time_is_killed_and_says_so(tmp_path: Path) -> None:
    """The timeout counts from the child's start, not from when it is read."""
    (tmp_path / "sitecustomize.py").write_text("import time\ntime.sleep(60)\n")
    child = libaudit.Child({**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=1.0)
    time.sleep(1.0)
    started = time.monotonic()
    ran = child.result()
    assert time.monotonic() - started < 5 and ran["exit"] is None and ran["stages"] == []
    assert child.proc.returncode is not None  # reaped


def test_stop_kills_and_reaps_an_unread_child(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import time\ntime.sleep(60)\n")
    child = libaudit.Child({**os.environ, "PYTHONPATH": str(tmp_path)})
    child.stop()
    assert child.proc.returncode is not None
    child.stop()  # twice: nothing left to do


def test_shipped_env_is_the_image_without_the_harness_addition_or_none() -> None:
    env = {"LD_LIBRARY_PATH": "/wheel/lib:/usr/local/cuda/lib64", "CONVMATRIX_SHIPPED_LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}
    assert libaudit.shipped_env(env)["LD_LIBRARY_PATH"] == "/usr/local/cuda/lib64"
    assert "LD_LIBRARY_PATH" not in libaudit.shipped_env({**env, "CONVMATRIX_SHIPPED_LD_LIBRARY_PATH": ""})
    assert libaudit.shipped_env({**env, "CONVMATRIX_SHIPPED_LD_LIBRARY_PATH": env["LD_LIBRARY_PATH"]}) is None
    assert libaudit.shipped_env({"LD_LIBRARY_PATH": "/x"}) is None  # not a container cell


def options(case_timeout: Any = 0.0) -> Any:
    """A pytest config as EarlyAudit reads it: the session's --case-timeout."""
    return SimpleNamespace(getoption=lambda name, default=None: case_timeout if name == "case_timeout" else default)


def early(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shipped: str | None = None, asleep: bool = True,
          case_timeout: Any = 0.0) -> Any:
    """An EarlyAudit in a planted environment; asleep: its children sleep first (a sitecustomize of
    their own), so that only a kill ends them soon."""
    if asleep:
        (tmp_path / "sitecustomize.py").write_text("import time\ntime.sleep(60)\n")
        monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("LD_LIBRARY_PATH", "/wheel/lib")
    if shipped is not None:
        monkeypatch.setenv("CONVMATRIX_SHIPPED_LD_LIBRARY_PATH", shipped)
    else:
        monkeypatch.delenv("CONVMATRIX_SHIPPED_LD_LIBRARY_PATH", raising=False)
    return conftest.EarlyAudit(options(case_timeout))


def test_early_audit_starts_one_child_a_environment_and_stops_them_when_the_audit_is_deselected(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    plain = early(monkeypatch, tmp_path)
    assert [c.env["LD_LIBRARY_PATH"] for c in plain.children] == ["/wheel/lib"]
    plain.stop()
    both = early(monkeypatch, tmp_path, shipped="")
    assert len(both.children) == 2 and "LD_LIBRARY_PATH" not in both.children[1].env
    procs = [c.proc for c in both.children]
    both.pytest_collection_modifyitems([SimpleNamespace(nodeid="suites/test_conv.py::test_conv[a]")])
    assert both.children == [] and all(p.returncode is not None for p in procs)
    assert both.take(dict(os.environ)) is None  # nothing left to take


def test_early_audit_gives_a_child_only_to_the_environment_it_started_in(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    taken = early(monkeypatch, tmp_path, asleep=False)
    taken.pytest_collection_modifyitems([SimpleNamespace(nodeid="suites/test_audit.py::test_audit[audit-cuda-libraries]")])
    assert len(taken.children) == 1  # the audit is selected: kept for it
    assert taken.take({**os.environ, "LD_LIBRARY_PATH": "/elsewhere"}) is None  # another environment
    # What pytest sets while a case runs is no other environment.
    ran = taken.take({**os.environ, "PYTEST_CURRENT_TEST": "suites/test_audit.py::test_audit (call)"})
    assert ran is not None and ran["exit"] == 0 and ran["stages"][-1]["stage"] == "done", ran
    assert taken.children == []  # taken once
    taken.pytest_unconfigure()


SUITES = str(REPO / "suites")


def test_wanted_only_where_the_cases_run_and_not_to_list_them() -> None:
    def config(args: tuple[str, ...] = (SUITES,), **option: Any) -> Any:
        options = {"collectonly": False, "keyword": "", "markexpr": "", "continue_run": False, **option}
        return SimpleNamespace(args=list(args), invocation_params=SimpleNamespace(dir=REPO),
                               option=SimpleNamespace(**options),
                               getoption=lambda name, default=None: options.get(name, default))

    assert conftest.EarlyAudit.wanted(config())
    assert conftest.EarlyAudit.wanted(config(numprocesses=0))
    assert not conftest.EarlyAudit.wanted(config(numprocesses=2))  # xdist's controller: no case here
    assert not conftest.EarlyAudit.wanted(config(collectonly=True))
    assert not conftest.EarlyAudit.wanted(config(continue_run=True))  # a continued run: its audit is recorded
    worker = config()
    worker.workerinput = {"workerid": "gw0"}
    assert not conftest.EarlyAudit.wanted(worker)
    assert not conftest.EarlyAudit.wanted(config(keyword="conv2d-fp32"))  # -k leaves the audit out
    assert not conftest.EarlyAudit.wanted(config(("suites/test_conv.py::test_conv[conv2d-fp32-k3-p1]",)))


@pytest.mark.parametrize(("args", "named"), [
    ((), True),  # pytest's own default: the current folder (the repository here)
    (("suites",), True), (("suites/",), True), ((".",), True), (("suites/test_audit.py",), True),
    (("suites/test_audit.py::test_audit[audit-cuda-libraries]",), True),
    (("suites/test_conv.py",), False), (("suites/test_conv.py::test_conv[x]", "suites/test_conv.py::test_conv[y]"), False),
    (("tests",), False), (("suites/test_conv.py", "suites/test_audit.py"), True),
])
def test_named_by_the_paths_on_the_command_line(args: tuple[str, ...], named: bool) -> None:
    assert conftest.EarlyAudit.named(list(args), str(REPO)) is named


@pytest.mark.parametrize(("keyword", "kept"), [
    ("", True), ("audit", True), ("audit-cuda-libraries", True), ("AUDIT", True), ("not conv", True),
    ("audit or conv2d", True), ("conv2d", False), ("not audit", False), ("test_conv", False),
    ("not zoo and not large", True), ("audit and not zoo", True), ("((", True),  # cannot tell: kept
])
def test_selects_as_pytests_k_does(keyword: str, kept: bool) -> None:
    assert conftest.EarlyAudit.selects(keyword, conftest.AUDIT_KEYWORDS) is kept


@pytest.mark.parametrize(("marks", "kept"), [("", True), ("not slow", True), ("gpu", False), ("not gpu", True),
                                             ("model or gpu", False), ("parametrize", True)])
def test_selects_as_pytests_m_does(marks: str, kept: bool) -> None:
    assert conftest.EarlyAudit.selects(marks, conftest.AUDIT_MARKS, exact=True) is kept


def test_a_suite_run_takes_both_early_children_and_records_both_tables(tmp_path: Path) -> None:
    """The audit case in a real in-process run, with a shipped environment: both tables recorded,
    the same as the audit started by the case would give (this CPU build of torch loads none)."""
    run = run_suite(tmp_path / "R", "--in-process", "-k", "audit-cuda-libraries",
                    env_extra={"LD_LIBRARY_PATH": str(tmp_path / "no-such-lib"), "CONVMATRIX_SHIPPED_LD_LIBRARY_PATH": ""})
    assert run.returncode == 0, run.output
    (line,) = [json.loads(x) for x in (tmp_path / "R" / "results.jsonl").read_text().splitlines()]
    assert line["status"] == "passed" and line["audit"]["exit"] == 0
    assert line["audit"]["early"] is True  # the child started with the session was the one read
    assert line["audit"]["as_shipped"]["ld_library_path"] is None
    assert line["audit"]["ld_library_path"] == str(tmp_path / "no-such-lib")
    assert line["audit"]["libraries"] == libaudit.audit(dict(os.environ))["libraries"] == []  # CPU torch: none


@pytest.mark.parametrize(("keyword", "marks"), [("audit or conv2d-fp32-k3", ""), ("conv2d-fp32-k3", ""),
                                                ("not zoo", "not gpu"), ("", "gpu")])
def test_the_guess_agrees_with_pytests_own_collection(keyword: str, marks: str) -> None:
    """What pytest itself keeps of the suite under -k and -m, against EarlyAudit's guess."""
    import subprocess
    import sys

    listed = subprocess.run([sys.executable, "-m", "pytest", "suites", "--collect-only", "-q", "-p", "no:randomly",
                             "-k", keyword, "-m", marks], cwd=REPO, capture_output=True, text=True, timeout=600,
                            env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")})
    kept = "test_audit.py::test_audit[audit-cuda-libraries]" in listed.stdout
    guess = (conftest.EarlyAudit.selects(keyword, conftest.AUDIT_KEYWORDS)
             and conftest.EarlyAudit.selects(marks, conftest.AUDIT_MARKS, exact=True))
    assert guess is kept, listed.stdout[-2000:] + listed.stderr[-2000:]


@pytest.mark.parametrize(("case_timeout", "child"), [
    (900.0, 870.0), (100.0, 80.0), (2, 1.6), (0.0, libaudit.CHILD_TIMEOUT), (-1.0, libaudit.CHILD_TIMEOUT), (None, libaudit.CHILD_TIMEOUT),
    (float("inf"), libaudit.CHILD_TIMEOUT), (float("nan"), libaudit.CHILD_TIMEOUT), ("900", libaudit.CHILD_TIMEOUT),
])
def test_the_childs_time_is_the_cases_own_limit_else_the_default(case_timeout: Any, child: float) -> None:
    assert libaudit.child_timeout(case_timeout) == child


def test_early_children_get_the_sessions_case_timeout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The harness gives every case 900 s: the audit's child waits nearly as long (870 s), not the
    300 s of its own that a loaded runner's cold torch import outran."""
    both = early(monkeypatch, tmp_path, shipped="", case_timeout=900.0)
    assert [c.timeout for c in both.children] == [870.0, 870.0]
    both.stop()
    plain = early(monkeypatch, tmp_path, case_timeout=0.0)
    assert [c.timeout for c in plain.children] == [libaudit.CHILD_TIMEOUT]
    plain.stop()


def test_a_child_past_its_time_is_the_cases_timeout_not_a_missing_library(tmp_path: Path) -> None:
    """Before, a child killed for time made the audit say `cuDNN library missing`, an
    infrastructure family, so a control on a loaded runner (a cold torch import) went unhealthy
    (exit 3): the likeliest cause of CI's exit 3 in test_audit_runs (a), whose control had no
    libraries line. A slow child is the case's `timeout`; the conv cases are judged as ever."""
    slow = tmp_path / "slow"
    slow.mkdir()
    # Only the audit's child sleeps (`libaudit.py --child`): the session itself starts at once.
    (slow / "sitecustomize.py").write_text("import sys, time\nif '--child' in sys.argv:\n    time.sleep(60)\n")
    # The child gets 8 s of the case's 10 (child_timeout): the case says so before the watchdog would.
    run = run_suite(tmp_path / "R", "--in-process", "--case-timeout", "10", "-k", "audit or conv1d-fp32-k3-p1 and not zoo",
                    env_extra={"PYTHONPATH": str(slow)})
    lines = {json.loads(x)["case"]: json.loads(x) for x in (tmp_path / "R" / "results.jsonl").read_text().splitlines()}
    audit = lines[libaudit.AUDIT_CASE]
    assert audit["status"] == "timeout", run.output
    assert audit["message"].startswith("the library audit's loading process ran past its 8 s timeout"), audit["message"]
    assert audit["audit"]["exit"] is None and audit["audit"]["findings"] == []
    assert lines["conv1d-fp32-k3-p1"]["status"] == "passed"
    from convmatrix.results import families
    assert families.classify(audit["message"], status=audit["status"]) == "timeout"


@pytest.mark.parametrize(("code", "stderr", "missing"), [
    (None, "", False),  # killed for time, cuDNN said nothing: no finding, the case's timeout
    (None, "Unable to load any of {libcudnn_cnn.so.9.4.0, libcudnn_cnn.so.9}", True),  # cuDNN said it first
    (-6, "", True),  # it died by itself (cuDNN aborts)
    (-9, "", True),
    (1, "", True),
])
def test_only_a_child_killed_for_time_in_silence_is_no_finding(code: int | None, stderr: str, missing: bool) -> None:
    table = libaudit.audit({}, {"stages": [], "exit": code, "stderr": stderr})
    assert any(f.startswith(libaudit.MISSING) for f in table["findings"]) is missing
    assert libaudit.ran_past(table) is (not missing)
