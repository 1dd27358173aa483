"""Issue 45: prove judges every AFTER cell, on every host and GPU key, and no proof is made on the
CPU alone. Each test here failed on prove before the issue (PROVEN, or a control not seen)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from convmatrix import results
from convmatrix.cli.main import main
from convmatrix.prove import proof as prove
from convmatrix.prove import render as render_prove
from testkit import env_json, record, write_result

SIG = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
OTHER = "CUDA error: an illegal memory access was encountered"
GPUS = {"cpu": None, "h200-sm90": {"index": 0, "name": "NVIDIA H200", "capability": "9.0"},
        "a100-sm80": {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "capability": "8.0"}}
Cases = Mapping[str, str | None]
FINE: Cases = {"a": None, "b": None}
BROKEN: Cases = {"a": SIG, "b": None}  # case a fails with the signature


def cell(run: Path, cell_id: str, cases: Cases, *, gpu: str = "h200-sm90", host: str | None = None,
         killed: bool = False) -> Path:
    """A result on gpu (and host: None is a result from before hosts): each case passes (None),
    skips ("skip") or fails with the message given; killed: the suite never finished."""
    records = [record(name, "skipped" if msg == "skip" else "failed" if msg else "passed",
                      None if msg == "skip" else msg) for name, msg in cases.items()]
    meta: dict[str, Any] = {"lane": "baremetal", "requested": {}, "expected": {}, "control": cell_id == "ctrl",
                            "gpu_key": gpu, "gpu": GPUS[gpu], "ended": "2026-12-02T00:02:00Z"}
    env = env_json(cell_id, suite_version="v1", **({"ended": None} if killed else {}))
    return write_result(run, cell_id, records, gpu=gpu, host=host, env=env, cell=meta)


def side(run: Path, cand: Mapping[str, Cases], *, gpu: str = "h200-sm90",
         control: Mapping[str, Cases] | None = None) -> Path:
    """The control and the candidate on each host named (cand: host -> its cases)."""
    for host, cases in cand.items():
        cell(run, "ctrl", (control or {}).get(host, FINE), gpu=gpu, host=host or None)
        cell(run, "cand", cases, gpu=gpu, host=host or None)
    return run


def go(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["prove", *[str(a) for a in args]])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("fixed", "failing"), [("h1", "h2"), ("h2", "h1")])
def test_a_fix_on_one_host_still_failing_on_another_is_not_proven(tmp_path: Path, fixed: str, failing: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """(a): the candidate is fixed on one host, still fails with the signature on the other."""
    before = side(tmp_path / "before", {"h1": BROKEN, "h2": BROKEN})
    after = side(tmp_path / "after", {fixed: FINE, failing: BROKEN})
    code, out, err = go(capsys, before, after)
    assert code == 1, out
    assert f"h200-sm90@{failing}: cand → cand: 1 case(s) still fail with the signature" in out
    assert f"h200-sm90@{fixed}:" not in out.split("\n\n")[1]  # the reasons name only the failing host
    assert err.startswith("convmatrix: not proven: ")


@pytest.mark.parametrize(("message", "why"), [
    (SIG, "1 case(s) fail with the signature in AFTER: a"),
    (OTHER, "regression against the AFTER control: a"),
])
def test_a_new_gpu_key_failing_in_after_is_seen(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                message: str, why: str) -> None:
    """(b): a GPU key BEFORE never covered fails in AFTER: it is judged by its own verdict."""
    before = side(tmp_path / "before", {"": BROKEN})
    after = side(tmp_path / "after", {"": FINE})
    side(after, {"": {"a": message, "b": None}}, gpu="a100-sm80")
    code, out, _ = go(capsys, before, after)
    assert code == 1, out
    assert f"a100-sm80: cand (no counterpart in BEFORE): {why}" in out


def test_a_new_host_failing_in_after_is_seen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(b) on a host: BEFORE ran on h1 alone, AFTER on h1 (fixed) and h2 (the signature)."""
    before = side(tmp_path / "before", {"h1": BROKEN})
    after = side(tmp_path / "after", {"h1": FINE, "h2": BROKEN})
    code, out, _ = go(capsys, before, after)
    assert code == 1, out
    assert "h200-sm90@h2: cand (no counterpart in BEFORE): 1 case(s) fail with the signature in AFTER: a" in out


def test_an_invalid_after_cell_with_no_counterpart_is_not_proven(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    before = side(tmp_path / "before", {"": BROKEN})
    after = side(tmp_path / "after", {"": FINE})
    cell(after, "other", FINE, killed=True)
    code, out, _ = go(capsys, before, after)
    assert code == 1, out
    assert "h200-sm90: other (no counterpart in BEFORE): invalid against the AFTER control" in out


def test_a_new_cell_passing_in_after_proves_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = side(tmp_path / "before", {"": BROKEN})
    after = side(tmp_path / "after", {"": FINE})
    cell(after, "other", FINE)
    code, out, _ = go(capsys, before, after)
    assert code == 0, out


@pytest.mark.parametrize("sick", ["h1", "h2"])
@pytest.mark.parametrize("how", ["fails", "killed"])
def test_an_unhealthy_control_on_any_host_gives_no_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           sick: str, how: str) -> None:
    """(c): the AFTER control on one of two hosts fails a case, or never finished."""
    before = side(tmp_path / "before", {"h1": BROKEN, "h2": BROKEN})
    after = tmp_path / "after"
    for host in ("h1", "h2"):
        ill = host == sick
        cell(after, "ctrl", {"a": None, "b": OTHER} if ill and how == "fails" else FINE, host=host,
             killed=ill and how == "killed")
        cell(after, "cand", FINE, host=host)
    code, out, err = go(capsys, before, after)
    assert code == 3, out
    assert f"control ctrl on h200-sm90@{sick} in AFTER: " in err
    assert f"control ctrl on h200-sm90@{'h2' if sick == 'h1' else 'h1'} in AFTER" not in err


def test_an_unhealthy_before_control_on_a_second_host_gives_no_verdict(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    before = side(tmp_path / "before", {"h1": BROKEN, "h2": BROKEN}, control={"h2": {"a": None, "b": OTHER}})
    after = side(tmp_path / "after", {"h1": FINE, "h2": FINE})
    code, _, err = go(capsys, before, after)
    assert code == 3 and "control ctrl on h200-sm90@h2 in BEFORE: " in err


def test_an_after_control_missing_on_a_host_gives_no_verdict(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    before = side(tmp_path / "before", {"h1": BROKEN, "h2": BROKEN})
    after = side(tmp_path / "after", {"h1": FINE})
    cell(after, "cand", FINE, host="h2")
    code, _, err = go(capsys, before, after)
    assert code == 3 and "control ctrl on h200-sm90@h2 in AFTER: no control on host h2" in err


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_a_proof_on_the_cpu_alone_says_so_and_is_not_proven(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             fmt: str) -> None:
    """(d): no GPU took part, so cuDNN was never exercised: the line after the title says so."""
    before = side(tmp_path / "before", {"": BROKEN}, gpu="cpu")
    after = side(tmp_path / "after", {"": FINE}, gpu="cpu")
    code, out, err = go(capsys, before, after, "--format", fmt)
    assert code == 1, out
    lines = out.splitlines()
    assert lines[1].startswith("no GPU took part in BEFORE or AFTER"), out
    assert "every generation" not in out
    assert "--allow-cpu" in err
    code, out, _ = go(capsys, before, after, "--format", fmt, "--allow-cpu")
    assert code == 0, out
    assert out.splitlines()[1].startswith("no GPU took part in BEFORE or AFTER"), out
    assert "PROVEN on the CPU alone" in out and "every generation" not in out


def test_a_proof_whose_after_ran_on_the_cpu_alone_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = side(tmp_path / "before", {"": BROKEN})
    side(before, {"": BROKEN}, gpu="cpu")
    after = side(tmp_path / "after", {"": FINE}, gpu="cpu")
    for extra in ((), ("--allow-cpu",)):
        code, out, _ = go(capsys, before, after, *extra)
        assert code == 1, out  # and the GPU's candidate has no counterpart in AFTER
        assert out.splitlines()[1].startswith("no GPU took part in AFTER"), out


def test_results_without_a_host_pair_as_one_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = side(tmp_path / "before", {"": BROKEN})  # an older run: no host recorded
    after = side(tmp_path / "after", {"h1": FINE})
    code, out, _ = go(capsys, before, after)
    assert code == 0, out
    assert "cand → cand: proven" in out


def test_the_proof_does_not_depend_on_the_order_of_results_or_the_names_of_hosts(tmp_path: Path) -> None:
    before = side(tmp_path / "before", {"h1": BROKEN, "h2": BROKEN, "h3": BROKEN})
    after = side(tmp_path / "after", {"h1": FINE, "h2": BROKEN, "h3": FINE})
    b, a = results.load([before]), results.load([after])
    first = prove.prove(b, a, before_paths=["B"], after_paths=["A"], pairing=None)
    assert first.verdict == prove.Verdict.NOT_PROVEN
    shown = render_prove.render(first, "text")
    for seed in range(5):
        rng = random.Random(seed)
        shuffled_b, shuffled_a = list(b.results), list(a.results)
        rng.shuffle(shuffled_b)
        rng.shuffle(shuffled_a)
        again = prove.prove(results.Loaded(results=shuffled_b), results.Loaded(results=shuffled_a),
                            before_paths=["B"], after_paths=["A"], pairing=None)
        assert again == first
        assert render_prove.render(again, "text") == shown
