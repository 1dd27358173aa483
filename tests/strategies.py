"""Shared Hypothesis generators for the property tests (docs/contracts.md: Invariants).

A small deterministic profile runs in the default tests (tests/conftest.py registers it); the
long one runs in `nox -s properties` (`--hypothesis-profile long`). Each issue's property tests
draw from here, so that one generator of hostile or unusual input serves every reader."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from convmatrix.results import Case, CellResult
from convmatrix.results.outcomes import Outcome
from testkit import record

# --- results: control and candidate cells (issue 31: the order of verdicts) ---

CASE_NAMES = ("conv1d-a", "conv1d-b", "conv2d-a", "conv2d-b", "conv3d-a", "conv_transpose2d-a")
GPU_KEYS = ("cpu", "h100-sm90", "h200-sm90")
SIGNATURE = "cudnn_not_supported"
DRIVER = "cuda_driver_insufficient"
# (outcome, family) as a results line's status and message classify them (results/families.py).
RESULTS: tuple[tuple[Outcome, str | None], ...] = (
    (Outcome.PASS, None),
    (Outcome.SKIP, None),
    (Outcome.FAIL, SIGNATURE),
    (Outcome.FAIL, DRIVER),
    (Outcome.FAIL, "numeric_mismatch"),
    (Outcome.FAIL, "cuda_illegal_address"),
    (Outcome.FAIL, "other"),
    (Outcome.CRASH, "crash"),
    (Outcome.TIMEOUT, "timeout"),
)
# The same as real messages, for generators that write results lines a reader classifies.
MESSAGES: dict[str | None, str | None] = {
    None: None,
    SIGNATURE: "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in "
               "a non-contiguous input.",
    DRIVER: "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).",
    "numeric_mismatch": "AssertionError: numeric mismatch: max abs error 3.1 > tolerance 0.01",
    "cuda_illegal_address": "RuntimeError: CUDA error: an illegal memory access was encountered",
    "other": "ValueError: something else went wrong",
}
STATUS = {Outcome.PASS: "passed", Outcome.SKIP: "skipped", Outcome.FAIL: "failed", Outcome.CRASH: "crashed",
          Outcome.TIMEOUT: "timeout"}

results = st.sampled_from(RESULTS)
passing = st.just((Outcome.PASS, None))


def case(name: str, outcome: Outcome, family: str | None) -> Case:
    return Case(case=name, outcome=outcome, family=family, message=MESSAGES.get(family), knobs={}, warnings=())


@st.composite
def case_sets(draw: st.DrawFn, names: tuple[str, ...] = CASE_NAMES, healthy: bool = False) -> dict[str, Case]:
    """Some of the cases, each with an outcome; healthy: passes and skips only (a control)."""
    chosen = draw(st.lists(st.sampled_from(names), unique=True, min_size=1))
    drawn = st.sampled_from(RESULTS[:2]) if healthy else st.one_of(passing, results)
    return {n: case(n, *draw(drawn)) for n in chosen}


@dataclass(frozen=True, kw_only=True)
class Facts:
    """What a cell's own record may say besides its cases."""

    killed: bool = False
    mismatch: bool = False
    skips: tuple[tuple[tuple[str, ...], str], ...] = ()  # its [[expected_skip]] entries


facts = st.builds(
    Facts,
    killed=st.booleans(),
    mismatch=st.booleans(),
    skips=st.lists(st.tuples(st.lists(st.sampled_from(("conv1d-*", "conv2d-a", "*-b", "nothing")), min_size=1,
                                      max_size=2).map(tuple), st.just("declared")), max_size=2).map(tuple),
)


def cell_result(cell: str, gpu: str, cases: dict[str, Case], *, control: bool = False,
                facts: Facts = Facts()) -> CellResult:
    problems = ("the suite did not finish (env.json has no end time)",) if facts.killed else ()
    return CellResult(cell=cell, gpu_key=gpu, gpu={"name": gpu, "capability": None, "generation": gpu},
                      lane="baremetal", path=Path(f"run/{cell}@{gpu}"), marked_control=control, cases=cases,
                      problems=problems, stack_mismatch=("torch: 2.4.1 requested, 2.5.1 seen",) if facts.mismatch
                      else (), expected_skips=facts.skips)


@dataclass(frozen=True, kw_only=True)
class Run:
    """A run's results: one control per GPU key it covers, candidates on any key."""

    results: tuple[CellResult, ...]

    def candidates(self) -> list[CellResult]:
        return [r for r in self.results if r.cell != "ctrl"]

    def control_on(self, gpu: str) -> CellResult | None:
        return next((r for r in self.results if r.cell == "ctrl" and r.gpu_key == gpu), None)


@st.composite
def runs(draw: st.DrawFn, max_candidates: int = 3, sick_controls: bool = True) -> Run:
    """A control on some GPU keys (healthy, or with any outcomes when sick_controls) and
    candidates with any outcomes, facts and expected skips, on the same or other keys."""
    gpus = draw(st.lists(st.sampled_from(GPU_KEYS), unique=True, min_size=1, max_size=2))
    out = []
    for gpu in gpus:
        sick = sick_controls and draw(st.booleans())
        out.append(cell_result("ctrl", gpu, draw(case_sets(healthy=not sick)), control=True))
    for n in range(draw(st.integers(1, max_candidates))):
        gpu = draw(st.sampled_from([*gpus, "h100-sm90"] if draw(st.booleans()) else gpus))
        if any(r.cell == f"cand{n}" and r.gpu_key == gpu for r in out):
            continue
        out.append(cell_result(f"cand{n}", gpu, draw(case_sets()), facts=draw(facts)))
    return Run(results=tuple(out))


def with_case(result: CellResult, name: str, outcome: Outcome, family: str | None) -> CellResult:
    return replace(result, cases={**result.cases, name: case(name, outcome, family)})


def without_case(result: CellResult, name: str) -> CellResult:
    return replace(result, cases={n: c for n, c in result.cases.items() if n != name})


def lines(cases: dict[str, Case]) -> list[dict[str, Any]]:
    """A cell's cases as results lines (testkit.record), for tests that go through the reader."""
    return [record(c.case, STATUS[c.outcome], c.message) for c in cases.values() if c.outcome in STATUS]


# --- GPUs: what nvidia-smi may name a GPU and a MIG profile (issue 37) -------------------------

# A GPU's name as nvidia-smi prints it: printable text, "NVIDIA" or not, any case and punctuation
# (the key keeps lower-case ASCII words), up to long product names.
def gpu_names() -> st.SearchStrategy[str]:
    return st.text(st.characters(min_codepoint=32, max_codepoint=0x24F), max_size=80)


def mig_profiles() -> st.SearchStrategy[str]:
    """A MIG profile in NVIDIA's naming: [<c>c.]<g>g.<m>gb, with a media-extension suffix or not."""
    compute = st.sampled_from(["", "1c.", "2c.", "3c."])
    size = st.builds(lambda g, m: f"{g}g.{m}gb", st.integers(1, 7), st.integers(5, 1999))
    suffix = st.sampled_from(["", "+me", "-me", "+gfx", "+me.all"])
    return st.builds(lambda c, s, x: c + s + x, compute, size, suffix)


# --- the history: a series of red/green nights (issue 36: history/marks.py) --------------------
def series_states(max_size: int = 60) -> st.SearchStrategy[list[bool]]:
    """A series' red (True) or green (False) runs, oldest first, tonight last."""
    return st.lists(st.booleans(), min_size=1, max_size=max_size)
