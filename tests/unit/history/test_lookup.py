"""history/lookup.py: marks read from the database, over results from several hosts."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given

from convmatrix.history import backends, schema
from convmatrix.history.marks import Run, State, judge
from convmatrix.results import Case
from convmatrix.results.outcomes import Outcome
from convmatrix.results.verdicts import RED, case_verdict
from historykit import CASES, SIGNATURE, night, recorded, reported
from strategies import NightSequence, night_sequences
from testkit import env_json, record, write_result


def two_hosts(base: Path, n: int, red_on: tuple[str, ...]) -> Path:
    """Night n: ctrl and cand on hosts a and b; cand fails case b on the hosts in red_on."""
    run = base / f"night-{n:03d}"
    ended = f"2026-11-{n:02d}T02:00:00+00:00"
    for host in ("a", "b"):
        write_result(run, "ctrl", [record(c) for c in CASES], env=env_json("ctrl", ended=ended),
                     cell={"control": True, "ended": ended}, host=host)
        write_result(run, "cand", [record(c, "failed", SIGNATURE) if c == "b" and host in red_on else record(c)
                                   for c in CASES], env=env_json("cand", ended=ended), cell={"ended": ended}, host=host)
    return run


@pytest.mark.parametrize("first", [("a",), ("b",)])
def test_a_case_red_on_either_host_of_a_run_was_red_in_that_run(first: tuple[str, ...], tmp_path: Path) -> None:
    """Review of issue 36: two hosts' rows of one run were merged keeping one row's id, so a case
    red on the other host's row was lost: red again the next night read first-red, not recurring."""
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    assert recorded(two_hosts(tmp_path, 1, first), url) == 0
    _, report = reported(two_hosts(tmp_path, 2, ("a", "b")), url, tmp_path, "--fail-on", "never")
    states = {c["gpu"]: (c["history"] or {}).get("state") for c in report["cases"]
              if c["cell"] == "cand" and c["case"] == "b"}
    assert set(states.values()) == {"recurring"}, states


def states(report: dict[str, Any], cell: str = "cand") -> dict[str, str | None]:
    return {c["case"]: (c["history"] or {}).get("state") for c in report["cases"] if c["cell"] == cell}


def test_a_night_whose_control_was_sick_stores_no_red(history_url: str, tmp_path: Path) -> None:
    """Issue 45: a night whose control could not run stored every candidate case red, so the first
    real failure nights later read `recurring` and --fail-on first-red exited 0; the cases that
    never failed read `recovered`."""
    assert recorded(night(tmp_path, 1, sick=True), history_url) == 0
    assert recorded(night(tmp_path, 2), history_url) == 0
    code, report = reported(night(tmp_path, 3, broken=("b",)), history_url, tmp_path, "--fail-on", "first-red")
    assert states(report) == {"a": None, "b": "first-red", "c": None}
    assert code == 1
    with backends.opened(history_url) as engine, engine.connect() as conn:
        k, c = schema.cases.c, schema.cells.c
        night_one = conn.execute(sa.select(k.red, k.unjudged).select_from(schema.cases.join(schema.cells)
                                 .join(schema.runs)).where(schema.runs.c.run == "night-001", c.cell == "cand")).all()
    assert night_one and all(not red and why == "control-unhealthy" for red, why in night_one)


def test_an_optional_cell_that_could_not_run_is_never_first_red(history_url: str, tmp_path: Path) -> None:
    """Issue 45: the default matrix's optional host cell, not run on a runner without torch, was
    stored red: a fresh all-green night exited 1 under --fail-on first-red ("1 first-red: host@cpu")."""
    assert recorded(night(tmp_path, 1, optional_host=True), history_url) == 0
    code, report = reported(tmp_path / "night-001", history_url, tmp_path, "--fail-on", "first-red")
    assert code == 0
    assert all(cell["history"] is None for cell in report["cells"])
    assert recorded(night(tmp_path, 2, optional_host=True), history_url) == 0
    code, report = reported(tmp_path / "night-002", history_url, tmp_path, "--fail-on", "first-red")
    assert code == 0 and all(cell["history"] is None for cell in report["cells"])


def test_first_red_in_a_list_applies_to_the_findings_of_the_others_listed(history_url: str, tmp_path: Path) -> None:
    """Issue 48: `--fail-on fallback,first-red` fails on a fallback the first night it appears, not
    on the nights after it (recurring), and not on it under `first-red` alone (the regression
    policy's: a fallback is no regression)."""
    assert recorded(night(tmp_path, 1), history_url) == 0
    assert recorded(night(tmp_path, 2, fallback=("b",)), history_url) == 0
    code, report = reported(tmp_path / "night-002", history_url, tmp_path / "r2", "--fail-on", "fallback,first-red")
    assert (code, states(report)) == (1, {"a": None, "b": "first-red", "c": None})
    code, report = reported(tmp_path / "night-002", history_url, tmp_path / "plain", "--fail-on", "first-red")
    assert (code, states(report)) == (0, {"a": None, "b": None, "c": None})
    assert recorded(night(tmp_path, 3, fallback=("b",)), history_url) == 0
    code, report = reported(tmp_path / "night-003", history_url, tmp_path / "r3", "--fail-on", "fallback,first-red")
    assert (code, states(report)["b"]) == (0, "recurring")
    # A regression on night 4 is no finding of the fallback policy's list... unless it names regression.
    assert recorded(night(tmp_path, 4, broken=("a",), fallback=("b",)), history_url) == 0
    code, report = reported(tmp_path / "night-004", history_url, tmp_path / "r4", "--fail-on",
                            "regression,fallback,first-red")
    assert (code, states(report)) == (1, {"a": "first-red", "b": "recurring", "c": None})


def test_an_old_night_rendered_again_gives_its_own_marks(history_url: str, tmp_path: Path) -> None:
    """Issue 45: the past of a run was every other recorded run, later ones too: night 1 rendered
    after night 6 read flaky, and night 3 (first-red, exit 1 on its night) exited 0."""
    broken = {1: (), 2: (), 3: ("b",), 4: (), 5: ("b",), 6: ()}
    said = {}
    for n, fails in broken.items():
        assert recorded(night(tmp_path, n, broken=fails), history_url) == 0
        said[n] = reported(tmp_path / f"night-{n:03d}", history_url, tmp_path / f"r{n}", "--fail-on", "first-red")
    for n in broken:
        again = reported(tmp_path / f"night-{n:03d}", history_url, tmp_path / f"again{n}", "--fail-on", "first-red")
        assert again == said[n], n
    assert said[3][0] == 1 and states(said[3][1])["b"] == "first-red"
    assert states(said[1][1])["b"] is None


def test_a_key_recorded_again_with_another_time_is_refused(history_url: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert recorded(night(tmp_path, 1), history_url, "--run-id", "n") == 0
    assert recorded(night(tmp_path, 2), history_url, "--run-id", "n") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run n is recorded at 2026-11-01T02:00:00" in err[0]
    # Shards sharing the night's time add their own cells.
    shard = tmp_path / "shard"
    write_result(shard, "ctrl", [record(c) for c in CASES], env=env_json("ctrl"), cell={"control": True}, host="h2")
    write_result(shard, "cand", [record(c) for c in CASES], env=env_json("cand"), cell={}, host="h2")
    assert recorded(shard, history_url, "--run-id", "n", "--at", "2026-11-01T02:00:00Z") == 0
    assert "2 cells added" in capsys.readouterr().out


def model_marks(seq: NightSequence, tonight: int, recorded_before: set[int]) -> tuple[int, dict[str, str | None]]:
    """The reference model, from the verdict function alone: a night whose control is sick judges
    nothing (exit 3); a case is red when case_verdict against the healthy control fails the
    regression policy; its past is the judged nights recorded with an earlier time."""
    plan = seq.nights[tonight - 1]
    if plan.sick:
        return 3, {}

    def red(n: int, name: str) -> bool:
        ctrl = Case(case=name, outcome=Outcome.PASS, family=None, message=None, knobs={}, warnings=())
        broken = name in seq.nights[n - 1].broken
        mine = Case(case=name, outcome=Outcome.FAIL if broken else Outcome.PASS,
                    family="cudnn_not_supported" if broken else None, message=None, knobs={}, warnings=())
        return case_verdict(ctrl, mine) in RED

    past = sorted(n for n in recorded_before if n < tonight and not seq.nights[n - 1].sick)
    said: dict[str, str | None] = {}
    for name in CASES:
        series = [(Run(run=f"night-{n:03d}", at=datetime.datetime(2026, 11, n, 2)), red(n, name)) for n in past]
        now = red(tonight, name)
        mark = judge([*series, (Run(run="tonight", at=datetime.datetime(2026, 11, tonight, 2)), now)])
        said[name] = str(mark.state) if mark is not None and (now or any(r for _, r in series)) else None
    first = any(state == "first-red" for state in said.values())
    cell = judge([*((Run(run=str(n), at=datetime.datetime(2026, 11, n, 2)),
                     any(red(n, c) for c in CASES)) for n in past),
                  (Run(run="t", at=datetime.datetime(2026, 11, tonight, 2)), any(red(tonight, c) for c in CASES))])
    return (1 if first or (cell is not None and cell.state == State.FIRST_RED) else 0), said


@given(seq=night_sequences())
def test_marks_follow_the_reference_model(seq: NightSequence, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Generated sequences of nights (sick controls, an optional cell that could not run), recorded
    in any order, each rendered before or after its own recording: every report's case marks and
    its exit under --fail-on first-red are the reference model's."""
    base = tmp_path_factory.mktemp("nights")
    url = f"sqlite:///{base / 'h.sqlite'}"
    for n, plan in enumerate(seq.nights, 1):
        night(base, n, plan.broken, sick=plan.sick, optional_host=plan.optional_host)
    done: set[int] = set()
    for step, n in enumerate(seq.order):
        for render in ((True, False) if seq.report_first[step] else (False,)):
            if not render:
                assert recorded(base / f"night-{n:03d}", url) == 0
                done.add(n)
            if render or not seq.report_first[step]:
                if not done:
                    continue  # nothing recorded yet: no history to read
                code, report = reported(base / f"night-{n:03d}", url, base / f"r{step}", "--fail-on", "first-red")
                want_code, want = model_marks(seq, n, done)
                assert code == want_code, (n, done)
                if want_code != 3:
                    assert states(report) == want, (n, done)
