"""`convmatrix bisect`: the versions between two cells from the stack facts, the search over fake
step outcomes, a step's outcome from real results, and the command's exit codes."""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from convmatrix import matrix
from convmatrix.cli import bisect as bisect_cmd
from convmatrix.cli.main import parser
from convmatrix.errors import BadInput, InfrastructureError
from convmatrix.matrix import stacks
from convmatrix.matrix.cells import Cell
from convmatrix.prove import bisect
from convmatrix.prove.bisect import Outcome, StepResult
from testkit import record, write_result

SIG = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
OTHER = "CUDA error: an illegal memory access was encountered"
MATRIX = """
name = "bisect"
[axes]
lane = ["baremetal"]
torch = ["2.4.1", "2.5.1", "2.6.0"]
cuda = ["cu118", "cu124"]
cudnn = ["bundled", "9.3.0.75", "9.5.1.17", "9.8.0.87"]
python = ["3.11"]
[control]
torch = "2.5.1"
cuda = "cu124"
cudnn = "bundled"
"""


def cell(torch: str = "2.5.1", cuda: str = "cu124", cudnn: str = "bundled", **more: Any) -> Cell:
    return Cell(**{"lane": "baremetal", **more}, torch=torch, cuda=cuda, cudnn=cudnn, python="3.11")


# --- the versions between, from the real stack facts -------------------------------------------

def test_cudnn_versions_between_are_the_published_overrides_the_torch_accepts() -> None:
    plan = bisect.plan(cell(cudnn="9.3.0.75"), cell(cudnn="9.5.1.17"))
    assert (plan.axis, plan.package) == ("cudnn", "nvidia-cudnn-cu12")
    published = stacks.load().cudnn_wheels["nvidia-cudnn-cu12"]
    expected = [v for v in published
                if stacks.version_key("9.3.0.75") <= stacks.version_key(v) <= stacks.version_key("9.5.1.17")]
    assert list(plan.values) == expected == ["9.3.0.75", "9.4.0.58", "9.5.0.50", "9.5.1.17"]
    assert not plan.held and not plan.left_out


def test_bundled_is_the_pin_and_an_override_of_the_pin_is_not_run_twice() -> None:
    plan = bisect.plan(cell(), cell(cudnn="9.3.0.75"))
    pin = stacks.load().release("2.5.1").cudnn_pins["cu124"]  # type: ignore[union-attr]
    assert plan.values[0] == "bundled" and pin not in plan.values
    inner = plan.values[1:-1]
    assert all(stacks.version_key(pin) < stacks.version_key(v) < stacks.version_key("9.3.0.75") for v in inner)
    assert plan.label("bundled") == f"cuDNN bundled ({pin})"


def test_cudnn_never_leaves_the_pins_major_nor_goes_below_it() -> None:
    """Overrides of another major or older than the pin are no stack this torch loads (prune.py)."""
    plan = bisect.plan(cell(cudnn="9.8.0.87"), cell())  # backwards: the bad end is the older
    assert plan.values[0] == "9.8.0.87" and plan.values[-1] == "bundled"
    keys = [stacks.version_key(v) for v in plan.values[1:-1]]
    assert keys == sorted(keys, reverse=True)
    assert all(k[0] == 9 and k >= stacks.version_key("9.1.0.70") for k in keys)


def test_torch_versions_between_are_the_patches_and_minors_of_the_variant() -> None:
    plan = bisect.plan(cell(torch="2.4.0"), cell(torch="2.6.0"))
    facts = stacks.load()
    expected = sorted({p for r in facts.releases.values() if "cu124" in r.variants for p in r.patches
                       if stacks.version_key("2.4.0") <= stacks.version_key(p) <= stacks.version_key("2.6.0")},
                      key=stacks.version_key)
    assert plan.axis == "torch" and list(plan.values) == expected == ["2.4.0", "2.4.1", "2.5.0", "2.5.1", "2.6.0"]


def test_torch_of_another_variant_is_not_between() -> None:
    """2.6 has no cu121 wheels: a cu121 bisect from 2.4.0 to 2.7... would not exist; 2.4 to 2.5 has it."""
    plan = bisect.plan(cell(torch="2.4.0", cuda="cu121"), cell(torch="2.5.1", cuda="cu121"))
    assert list(plan.values) == ["2.4.0", "2.4.1", "2.5.0", "2.5.1"]
    assert all("cu121" in (stacks.load().release(v).variants) for v in plan.values)  # type: ignore[union-attr]


def test_cuda_versions_between_are_the_variants_of_the_torch() -> None:
    plan = bisect.plan(cell(cuda="cu118"), cell(cuda="cu124"))
    assert plan.axis == "cuda" and list(plan.values) == ["cu118", "cu121", "cu124"]


def test_base_versions_between_are_the_listed_tags_in_order() -> None:
    good = cell(lane="container", base="ubuntu:20.04", base_in_id=True, flavour="wheel")
    bad = cell(lane="container", base="ubuntu:24.04", base_in_id=True, flavour="wheel")
    plan = bisect.plan(good, bad, bases=bisect.parse_bases("ubuntu:20.04,ubuntu:22.04,ubuntu:24.04"))
    assert plan.axis == "base" and list(plan.values) == ["ubuntu:20.04", "ubuntu:22.04", "ubuntu:24.04"]
    with pytest.raises(BadInput, match="--bases"):
        bisect.plan(good, bad)
    with pytest.raises(BadInput, match="not in the list"):
        bisect.plan(good, bad, bases=("ubuntu:20.04", "ubuntu:22.04"))


def test_default_axis_is_the_first_that_differs_and_the_others_are_held_at_the_good_cells_values() -> None:
    plan = bisect.plan(cell(), cell(torch="2.6.0", cudnn="9.8.0.87"))
    assert plan.axis == "cudnn"
    assert plan.held == {"torch": ("2.5.1", "2.6.0")}
    assert plan.bad.id == "baremetal-torch2.5.1-cu124-cudnn9.8.0.87-py3.11"  # torch held at the good cell's
    torch = bisect.plan(cell(), cell(torch="2.6.0", cudnn="9.8.0.87"), axis="torch")
    assert torch.held == {"cudnn": ("bundled", "9.8.0.87")} and list(torch.values) == ["2.5.1", "2.6.0"]


def test_an_axis_they_do_not_differ_on_is_bad_input() -> None:
    with pytest.raises(BadInput, match="do not differ on it"):
        bisect.plan(cell(), cell(cudnn="9.5.1.17"), axis="torch")
    with pytest.raises(BadInput, match="do not differ"):
        bisect.plan(cell(), cell(knobs="pad=8"))
    with pytest.raises(BadInput, match="host cell"):
        bisect.plan(Cell(lane="host"), cell())


def test_a_bad_end_no_cell_can_have_with_the_others_held_is_not_bisectable() -> None:
    # cudnn 9.8 on a cu118 torch 2.5.1 exists; held at cu118, torch 2.6.0's override exists too,
    # but an 8.x override never loads into a cuDNN 9 torch.
    good = cell(torch="2.1.2", cuda="cu118", cudnn="8.9.7.29")
    bad = cell(torch="2.5.1", cuda="cu118", cudnn="9.1.1.17")
    with pytest.raises(bisect.NotBisectable, match="no published stack") as caught:
        bisect.plan(good, bad, axis="cudnn")
    assert caught.value.exit_code == 1


# --- the search over fake outcomes -------------------------------------------------------------

def fake_plan(n: int) -> bisect.Plan:
    """n values after the good end (n + 1 in all): the positions the first bad can take."""
    values = tuple(f"9.{i}.0" for i in range(n + 1))
    good = cell(cudnn=values[0])
    return bisect.Plan(axis="cudnn", good=good, bad=bisect.with_value(good, "cudnn", values[-1]),
                       good_cell=good.id, bad_cell="bad", values=values, package="nvidia-cudnn-cu12")


def stepper(outcomes: Callable[..., Outcome]) -> tuple[Callable[[str], StepResult], list[str]]:
    ran: list[str] = []

    def run_step(value: str) -> StepResult:
        ran.append(value)
        outcome = outcomes(value, ran.count(value))
        return StepResult(outcome=outcome, seconds=1.0, families=("cudnn_not_supported",)
                          if outcome == Outcome.FAIL else (), detail="" if outcome == Outcome.PASS else "why")
    return run_step, ran


@pytest.mark.parametrize("n", range(1, 21))
def test_the_search_finds_the_first_bad_at_every_position_within_log2_n_steps(n: int) -> None:
    plan = fake_plan(n)
    index = {v: i for i, v in enumerate(plan.values)}
    for first_bad in range(1, n + 1):
        run_step, ran = stepper(lambda v, _, first_bad=first_bad: Outcome.FAIL if index[v] >= first_bad
                                else Outcome.PASS)
        answer = bisect.search(plan, run_step)
        assert answer.found and answer.exit_code == 0
        assert (answer.first_bad, answer.last_good) == (plan.values[first_bad], plan.values[first_bad - 1])
        assert len(ran) == answer.cell_runs <= math.ceil(math.log2(n)) + 3 == bisect.steps_bound(n) if n > 1 else 3
        assert ran[:3] == [plan.values[0], plan.values[-1], plan.values[0]]  # the ends, the good one twice
        assert answer.family == ("cudnn_not_supported",)


def test_a_flaky_good_end_is_not_bisectable() -> None:
    plan = fake_plan(8)
    run_step, ran = stepper(lambda v, times: Outcome.FAIL if v == plan.values[-1] or times == 2 else Outcome.PASS)
    answer = bisect.search(plan, run_step)
    assert not answer.found and answer.exit_code == 1
    assert "flaky" in (answer.reason or "") and len(ran) == 3


@pytest.mark.parametrize(("outcome", "said"), [(Outcome.PASS, "both ends pass"), (Outcome.ERROR, "does not fail")])
def test_a_bad_end_that_does_not_fail_is_not_bisectable(outcome: Outcome, said: str) -> None:
    plan = fake_plan(8)
    run_step, ran = stepper(lambda v, _: outcome if v == plan.values[-1] else Outcome.PASS)
    answer = bisect.search(plan, run_step)
    assert answer.exit_code == 1 and said in (answer.reason or "") and len(ran) == 2


def test_both_ends_failing_is_not_bisectable() -> None:
    plan = fake_plan(8)
    run_step, ran = stepper(lambda v, _: Outcome.FAIL)
    answer = bisect.search(plan, run_step)
    assert answer.exit_code == 1 and "both ends fail" in (answer.reason or "") and ran == [plan.values[0]]


def test_an_end_that_cannot_be_installed_is_infrastructure() -> None:
    plan = fake_plan(8)
    run_step, _ = stepper(lambda v, _: Outcome.SKIPPED if v == plan.values[-1] else Outcome.PASS)
    answer = bisect.search(plan, run_step)
    assert answer.infrastructure and answer.exit_code == InfrastructureError.exit_code
    assert "could not be run" in (answer.reason or "")


def test_an_install_failure_in_the_middle_is_skipped_and_said_and_the_search_goes_on() -> None:
    plan = fake_plan(8)  # 9.0.0 .. 9.8.0; the first bad is 9.6.0, and 9.4.0 will not install
    index = {v: i for i, v in enumerate(plan.values)}

    def outcome(value: str, _: int) -> Outcome:
        if value == "9.4.0":
            return Outcome.SKIPPED
        return Outcome.FAIL if index[value] >= 6 else Outcome.PASS
    run_step, ran = stepper(outcome)
    answer = bisect.search(plan, run_step)
    assert answer.found and (answer.first_bad, answer.last_good) == ("9.6.0", "9.5.0")
    assert "9.4.0" in ran and any(s.startswith("cuDNN 9.4.0: SKIPPED") for s in answer.skipped)
    assert "left out: cuDNN 9.4.0: SKIPPED: why" in bisect.render_text(answer)
    assert [s.result.outcome for s in answer.steps if s.value == "9.4.0"] == [Outcome.SKIPPED]


def test_a_skipped_value_right_at_the_change_leaves_a_gap_that_is_not_bisectable() -> None:
    plan = fake_plan(8)
    index = {v: i for i, v in enumerate(plan.values)}

    def outcome(value: str, _: int) -> Outcome:
        if value == "9.6.0":
            return Outcome.ERROR
        return Outcome.FAIL if index[value] >= 6 else Outcome.PASS
    run_step, _ = stepper(outcome)
    answer = bisect.search(plan, run_step)
    assert answer.exit_code == 1 and not answer.found
    assert "between cuDNN 9.5.0 (good) and cuDNN 9.7.0 (bad)" in (answer.reason or "")
    assert "9.6.0" in (answer.reason or "")


def test_the_answer_is_printed_and_written_as_json() -> None:
    plan = bisect.plan(cell(cudnn="9.3.0.75"), cell(cudnn="9.5.1.17"))
    run_step, _ = stepper(lambda v, _: Outcome.FAIL if v in ("9.4.0.58", "9.5.0.50", "9.5.1.17") else Outcome.PASS)
    answer = bisect.search(plan, run_step)
    text = bisect.render_text(answer)
    assert "cuDNN 9.4.0.58: FAIL (1.0 s)" in text
    assert text.endswith("first bad: nvidia-cudnn-cu12 9.4.0.58; last good: 9.3.0.75; 4 steps\n")
    data = json.loads(bisect.render_json(answer))
    assert (data["first_bad"], data["last_good"], data["cell_runs"], data["exit_code"]) == ("9.4.0.58", "9.3.0.75", 4, 0)
    assert [s["role"] for s in data["steps"][:3]] == ["good end", "bad end", "good end again"]


# --- a step's outcome, from results as the harness writes them ---------------------------------

def test_a_step_fails_only_with_the_bad_ends_family(tmp_path: Path) -> None:
    write_result(tmp_path / "a", "c", [record("x"), record("y", "failed", SIG)])
    write_result(tmp_path / "b", "c", [record("x"), record("y", "failed", OTHER)])
    write_result(tmp_path / "c", "c", [record("x"), record("y", "skipped")])
    write_result(tmp_path / "d", "c", [record("y", "skipped")])
    from convmatrix import results

    def judged(where: str, family: tuple[str, ...] | None) -> StepResult:
        return bisect.judge(results.load([tmp_path / where]).results, family)
    assert judged("a", None).outcome == Outcome.FAIL and judged("a", None).families == ("cudnn_not_supported",)
    assert judged("a", ("cudnn_not_supported",)).outcome == Outcome.FAIL
    assert judged("b", ("cudnn_not_supported",)).outcome == Outcome.ERROR
    assert judged("c", ("cudnn_not_supported",)).outcome == Outcome.PASS
    assert judged("d", ("cudnn_not_supported",)).outcome == Outcome.ERROR
    assert bisect.judge([], None).outcome == Outcome.ERROR


def test_each_step_is_an_ordinary_cell_run_of_a_generated_one_cell_matrix(tmp_path: Path,
                                                                          write_matrix: Callable[[str], Path]) -> None:
    """The CellRunner with the orchestrator faked: one matrix per step holding the step's cell as
    its only cell and control, a run directory each, the stored result reused except on a rerun."""
    source = matrix.load(write_matrix(MATRIX))
    plan = bisect.plan(source.cell("baremetal-torch2.5.1-cu124-cudnn9.3.0.75-py3.11"),
                       source.cell("baremetal-torch2.5.1-cu124-cudnn9.5.1.17-py3.11"))
    calls: list[tuple[str, bool]] = []

    def fake_run(m: matrix.Matrix, cells: Any, opts: Any, log: Any, *, strict: bool, selection: Any) -> None:
        (only,) = m.cells
        assert m.control == only and list(cells) == [only] and strict
        calls.append((only.cudnn, opts.reuse_results))
        if only.cudnn == "9.5.0.50":
            raise InfrastructureError(f"1 cell(s) could not run here: {only.id}: install failed")
        failing = stacks.version_key(only.cudnn) >= stacks.version_key("9.4.0.58")
        write_result(opts.out, only.id, [record("a"), record("b", "failed" if failing else "passed",
                                                           SIG if failing else None)])
    from convmatrix.run import options

    opts = options.parse(["--out", str(tmp_path / "bisect")])
    runner = bisect.CellRunner(source, plan, opts, lambda line: None, run=fake_run)
    answer = bisect.search(plan, runner)
    assert answer.found and (answer.first_bad, answer.last_good) == ("9.4.0.58", "9.3.0.75")
    assert calls[:3] == [("9.3.0.75", True), ("9.5.1.17", True), ("9.3.0.75", False)]  # the rerun is a real run
    steps = sorted(p.name for p in (tmp_path / "bisect").iterdir())
    assert steps[:3] == ["01-9.3.0.75", "02-9.5.1.17", "03-9.3.0.75"] and "matrices" in steps
    generated = matrix.load(tmp_path / "bisect" / "matrices" / "01-9.3.0.75.toml")
    assert [c.id for c in generated.cells] == [plan.good.id] and generated.control == plan.good


def test_a_step_matrix_is_valid_toml_whatever_its_paths_hold(tmp_path: Path,
                                                            write_matrix: Callable[[str], Path]) -> None:
    """Issue 32, item 7: a wheelhouse path outside the BMP was written by json.dumps as a surrogate
    pair, which tomllib refuses; the step matrix reads back with the source's paths as they were."""
    source = matrix.load(write_matrix(MATRIX))
    odd = tmp_path / "wheels \U0001f600 \u00e9"
    step = bisect.step_matrix(dataclasses.replace(source, wheelhouse=odd), source.cells[0], "step")
    data = tomllib.loads(step)
    assert data["wheelhouse"] == str(odd) and data["name"] == "step"


# --- the command -------------------------------------------------------------------------------

def test_the_command_parses_suite_options_after_a_double_dash() -> None:
    top = parser()  # main's, which registers bisect
    args = top.parse_args(["bisect", "-m", "m.toml", "--good", "a", "--bad", "b", "--", "-k", "conv2d-fp32"])
    assert args.suite_args == ["-k", "conv2d-fp32"] and args.axis is None


def test_an_unknown_cell_is_bad_input(write_matrix: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = write_matrix(MATRIX)
    top = parser()
    args = top.parse_args(["bisect", "-m", str(path), "--good", "nope",
                           "--bad", "baremetal-torch2.5.1-cu124-cudnn9.5.1.17-py3.11"])
    with pytest.raises(BadInput, match="no cell 'nope'") as caught:
        bisect_cmd.run(args)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("how", ["matrix", "option", "neither"])
def test_a_step_on_a_cpu_runner_runs_when_the_source_or_the_command_allows_it(
        how: str, tmp_path: Path, write_matrix: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46: every step matrix bisect wrote was refused on a runner without a GPU ("pass
    --allow-cpu"): bisect had no --allow-cpu, and the source matrix's allow_cpu = true was not
    carried into its steps. The orchestrator's own refusal (refuse_cpu) is what the steps meet."""
    from convmatrix.run import options, orchestrate

    monkeypatch.delenv(options.ALLOW_CPU, raising=False)
    source = matrix.load(write_matrix(("allow_cpu = true\n" if how == "matrix" else "") + MATRIX))
    plan = bisect.plan(source.cell("baremetal-torch2.5.1-cu124-cudnn9.3.0.75-py3.11"),
                       source.cell("baremetal-torch2.5.1-cu124-cudnn9.5.1.17-py3.11"))
    top = parser()
    args = top.parse_args(["bisect", "--good", "a", "--bad", "b", *(["--allow-cpu"] if how == "option" else [])])
    opts = options.parse(["--out", str(tmp_path / "b"), *(["--allow-cpu"] if args.allow_cpu else [])])
    refused: list[str] = []

    def run_like_orchestrate(m: matrix.Matrix, cells: Any, opts: Any, log: Any, *, strict: bool, selection: Any) -> None:
        try:
            orchestrate.refuse_cpu(m, cells, opts, specs=[])
        except BadInput as exc:
            refused.append(str(exc))
            raise
        write_result(opts.out, cells[0].id, [record("a")])

    runner = bisect.CellRunner(source, plan, opts, lambda line: None, run=run_like_orchestrate)
    if how == "neither":
        with pytest.raises(BadInput, match="allow-cpu"):
            runner("9.3.0.75")
    else:
        runner("9.3.0.75")
        assert refused == []
