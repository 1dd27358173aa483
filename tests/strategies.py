"""Shared Hypothesis generators for the property tests (docs/contracts.md: Invariants).

A small deterministic profile runs in the default tests (tests/conftest.py registers it); the
long one runs in `nox -s properties` (`--hypothesis-profile long`). Each issue's property tests
draw from here, so that one generator of hostile or unusual input serves every reader."""

from __future__ import annotations

import json
import os
import stat
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


# --- hostile cell output: results lines, records and directory trees (issue 32) -----------------
#
# What a cell may leave for the harness to read: anything. These generate it for the readers'
# and the trees' property tests (tests/unit/results/test_reader_properties.py): JSON that is
# sound, wrongly typed, truncated, nested past every bound, or no JSON at all, as results lines
# and as cell.json, env.json and explain findings; and directory trees holding symlinks (out of
# the tree, to a FIFO, in a loop, dangling), FIFOs, odd names and depth past tree.MAX_DEPTH.

RESULT_KEYS = ("schema", "cell_id", "case", "nodeid", "status", "message", "exc_type", "warnings", "numeric",
               "duration_s", "params", "knobs", "device", "worker", "backend", "cudnn_path", "timing", "sources")
RECORD_KEYS = ("schema", "cell", "cell_id", "control", "ended", "started", "gpus", "knobs", "argv", "host",
               "expected", "observed", "evidence", "exit_code", "expected_skips", "cudnn_error", "torch",
               "cuda", "cudnn", "device", "lane", "image_id", "isolation", "case", "level", "cudnn", "activity",
               "log", "status", "cudnn_off", "cudnn_is_the_cause", "subcode")


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any JSON value: scalars of every type (huge ints, floats, odd text) nested in lists and objects."""
    scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
               | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=max_leaves)


@st.composite
def hostile_objects(draw: st.DrawFn, keys: tuple[str, ...] = RECORD_KEYS) -> dict[str, Any]:
    """An object whose keys are mostly the ones a reader looks for, each holding any JSON value."""
    known = draw(st.dictionaries(st.sampled_from(keys), json_values(), max_size=8))
    return {**draw(st.dictionaries(st.text(max_size=10), json_values(4), max_size=2)), **known}


def nested(depth: int, inner: str = "1") -> str:
    """A JSON text nested depth levels (lists, objects or both in turn)."""
    return "".join("[" if i % 3 else '{"a":' for i in range(depth)) + inner + "".join(
        "]" if i % 3 else "}" for i in reversed(range(depth)))


@st.composite
def hostile_json_texts(draw: st.DrawFn, keys: tuple[str, ...] = RECORD_KEYS) -> str:
    """A text a reader is handed as one JSON value: an object of the reader's keys, any value, one
    nested past the bounds (to 5,000 levels), cut short, a number past a float, or not JSON."""
    kind = draw(st.sampled_from(("object", "value", "deep", "cut", "number", "text")))
    if kind == "object":
        return json.dumps(draw(hostile_objects(keys)))
    if kind == "value":
        return json.dumps(draw(json_values()))
    if kind == "deep":
        return nested(draw(st.sampled_from((60, 65, 200, 1_100, 5_000))))
    if kind == "cut":
        text = json.dumps(draw(hostile_objects(keys)))
        return text[: draw(st.integers(0, max(0, len(text) - 1)))]
    if kind == "number":
        return draw(st.sampled_from(("1e999999", "-1e400", "9" * 5000, "NaN", "Infinity", '{"schema": 1e999}')))
    return draw(st.text(max_size=60))


@st.composite
def hostile_results_lines(draw: st.DrawFn) -> list[str]:
    """A results.jsonl's lines: sound ones (record()), ones with a hostile value in a results
    field, and hostile texts, mixed; a case id repeated or invalid now and then."""
    cases = st.sampled_from(("a", "b", "zz", "zz.json", "Zz", "../x", "", "a" * 200))
    sound = st.builds(lambda c, s: json.dumps(record(c, s)), cases, st.sampled_from(sorted(set(STATUS.values()))))
    spoiled = st.builds(lambda c, k, v: json.dumps({**record(c, "failed"), k: v}), cases,
                        st.sampled_from(RESULT_KEYS), json_values(6))
    return draw(st.lists(sound | spoiled | hostile_json_texts(RESULT_KEYS), max_size=8))


# One entry of a tree, under the root: its path (names), and what it is. A link names where it points:
# "outside" (a file outside the tree), "outside-dir", "outside-fifo", "loop" (itself), "up" (..),
# "dangling", or "inside" (the root's first file).
ODD_NAMES = st.sampled_from(("results.jsonl", "cell.json", "env.json", "explain", "blocking", "evidence",
                             "zz", "zz.json", "Zz", "-rf", " ", "new\nline", "tab\t", "é", "\U0001f600",
                             ".hidden", "..x", "a" * 255, "é" * 127, "x.partial", ".cell.json.1.tmp"))
LINK_TARGETS = ("outside", "outside-dir", "outside-fifo", "loop", "up", "dangling", "inside")


@dataclass(frozen=True)
class TreeEntry:
    parts: tuple[str, ...]
    kind: str  # file, dir, fifo, link
    data: bytes = b""
    target: str = ""


@st.composite
def hostile_trees(draw: st.DrawFn, max_entries: int = 10) -> list[TreeEntry]:
    """What a cell may leave in its directory: files, folders, FIFOs and links with odd names, a
    few levels deep, and now and then a chain of folders past tree.MAX_DEPTH (32)."""
    entries: list[TreeEntry] = []
    for _ in range(draw(st.integers(0, max_entries))):
        parents = tuple(draw(st.lists(ODD_NAMES, max_size=3)))
        name = draw(ODD_NAMES)
        kind = draw(st.sampled_from(("file", "dir", "fifo", "link", "link")))
        entries.append(TreeEntry((*parents, name), kind,
                                 data=draw(st.binary(max_size=64)) if kind == "file" else b"",
                                 target=draw(st.sampled_from(LINK_TARGETS)) if kind == "link" else ""))
    if draw(st.booleans()):
        depth = draw(st.sampled_from((5, 31, 33, 40)))
        entries.append(TreeEntry((*(f"d{i}" for i in range(depth)), "deep.txt"), "file", b"deep"))
    return entries


def plant(root: Path, entries: list[TreeEntry], outside: Path) -> None:
    """The entries made under root (an entry whose place is taken, or under a non-folder, is left
    out: the tree is what the file system allowed); links point at outside's file, folder and FIFO."""
    targets = {"outside": outside / "precious", "outside-dir": outside, "outside-fifo": outside / "fifo",
               "up": Path(".."), "dangling": outside / "missing", "inside": root / "results.jsonl"}
    for entry in entries:
        path = root.joinpath(*entry.parts)
        if any(root.joinpath(*entry.parts[:i]).is_symlink() for i in range(1, len(entry.parts))):
            continue  # under a link planted before: making it would write outside
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(path):
                continue
            if entry.kind == "file":
                path.write_bytes(entry.data)
            elif entry.kind == "dir":
                path.mkdir()
            elif entry.kind == "fifo":
                os.mkfifo(path)
            else:
                path.symlink_to(path if entry.target == "loop" else targets[entry.target])
        except OSError:
            continue  # a parent that is a file, a FIFO or a link: not made


def make_outside(folder: Path) -> Path:
    """A folder outside every tree under test: a file, a FIFO and a sub-folder that must not change."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "precious").write_text("keep me\n")
    (folder / "sub").mkdir(exist_ok=True)
    (folder / "sub" / "old").write_text("old\n")
    if not (folder / "fifo").exists():
        os.mkfifo(folder / "fifo")
    return folder


def snapshot(folder: Path) -> dict[str, tuple[str, bytes | None]]:
    """What is under folder, never following a link: each path's kind and a file's bytes."""
    seen: dict[str, tuple[str, bytes | None]] = {}
    for here, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(here) / name
            mode = path.lstat().st_mode
            kind = ("link" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode)
                    else "fifo" if stat.S_ISFIFO(mode) else "file")
            seen[str(path.relative_to(folder))] = (kind, path.read_bytes() if kind == "file" else None)
    return seen


# --- the history: a series of red/green nights (issue 36: history/marks.py) --------------------
def series_states(max_size: int = 60) -> st.SearchStrategy[list[bool]]:
    """A series' red (True) or green (False) runs, oldest first, tonight last."""
    return st.lists(st.booleans(), min_size=1, max_size=max_size)


# --- strided views of a conv input (issue 39: any view) -------------------------------------------

@dataclass(frozen=True, kw_only=True)
class View:
    """A shape, strides that lay it out densely in some order with gaps, and a smaller shape of the
    same rank (a scaled-down case's), each extent at least 1 and at most the first's."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    smaller: tuple[int, ...]


@st.composite
def views(draw: st.DrawFn, rank: int | None = None) -> View:
    rank = draw(st.integers(3, 5)) if rank is None else rank
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    order = draw(st.permutations(range(rank)))  # fastest dimension first
    strides = [0] * rank
    span = draw(st.integers(1, 3))  # the fastest dimension's step
    for d in order:
        strides[d] = span
        span = span * shape[d] * draw(st.sampled_from((1, 1, 1, 2, 3)))  # a gap now and then
    smaller = tuple(draw(st.integers(1, extent)) for extent in shape)
    return View(shape=shape, strides=tuple(strides), smaller=smaller)


# --- a40e: atlas bundles (issue 40: atlas/bundle.py) ---------------------------------------------
# Valid model.Bundle objects, every field drawn from what the reader takes at its edges (the
# longest texts, the widest versions, MIG profiles, nulls), for the write -> read round trip.
def _atlas_model() -> Any:
    from convmatrix.atlas import model  # here, not at the top: only the atlas's tests import it

    return model


ATLAS_FAMILIES = ("cudnn_not_supported", "cudnn_execution_failed", "cuda_illegal_address", "numeric_mismatch",
                  "crash", "timeout", "other")
# str.isprintable's own: no control, format or separator character but the space.
_printable_line = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, include_characters=" ",
                                        exclude_categories=("Cc", "Cf", "Zs", "Zl", "Zp")), max_size=300)
_versions = st.sampled_from(["2.11.0+cu130", "2.5.1", "2.13.0.dev20261201+cpu", "1.13.1+cu117", None])


@st.composite
def atlas_gpus(draw: st.DrawFn) -> Any:
    model = _atlas_model()
    capability = draw(st.sampled_from(["7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]))
    return model.Gpu(model=draw(st.sampled_from(["NVIDIA H200", "Tesla V100-SXM2-16GB", "NVIDIA A100 80GB PCIe",
                                                 "NVIDIA GeForce RTX 5090"])),
                     capability=capability, generation=f"sm{capability.replace('.', '')}",
                     mig=draw(st.one_of(st.none(), mig_profiles())))


@st.composite
def atlas_repros(draw: st.DrawFn) -> Any:
    model = _atlas_model()
    ints = st.integers(-(1 << 40), 1 << 40)
    values = st.one_of(st.none(), st.booleans(), ints, st.sampled_from(["conv2d", "float16", "channels_last"]),
                       st.lists(ints, max_size=8))
    names = st.from_regex(r"[a-z][a-z0-9_]{0,31}", fullmatch=True)
    shapes = st.one_of(st.none(), st.dictionaries(st.sampled_from(["input", "weight", "bias", "output"]),
                                                  st.lists(st.integers(0, 1 << 20), max_size=5)))
    return model.Repro(params=draw(st.dictionaries(names, values, max_size=6)), shapes=draw(shapes),
                       knobs=draw(st.dictionaries(names, values, max_size=3)),
                       device=draw(st.sampled_from(["cuda", "cpu"])))


@st.composite
def atlas_cases(draw: st.DrawFn) -> Any:
    model = _atlas_model()
    outcome = draw(st.sampled_from([o.value for o in Outcome]))
    return model.Case(
        case=draw(st.sampled_from([*CASE_NAMES, "conv2d-fp32-k1-bwd-over2g-pointwise_extreme-wide_channels",
                                   "x" * 160])),
        verdict=draw(st.sampled_from(["ok", "regression", "control", "not-run", "declared-skip"])),
        outcome=outcome, family=draw(st.one_of(st.none(), st.sampled_from(ATLAS_FAMILIES))),
        subcode=draw(st.one_of(st.none(), st.integers(0, 99_999))),
        reason=draw(st.one_of(st.none(), _printable_line)),
        known=tuple(draw(st.lists(st.sampled_from(["cudnn-9-sm70-depthwise", "pytorch-162574", "a"]), max_size=3))),
        sources=tuple(draw(st.lists(st.sampled_from(["https://github.com/pytorch/pytorch/issues/77844",
                                                     "http://example.org/a?b=c&d=e#f"]), max_size=2))),
        repro=draw(st.one_of(st.none(), atlas_repros())), cost=draw(st.one_of(st.none(), atlas_costs())))


_ratios = st.one_of(st.none(), st.floats(0, 1e9, allow_nan=False), st.sampled_from([0.0, 1.0, 51234.5, 1e9]))


def atlas_costs() -> Any:
    """A case's cost in a bundle (version 2): torch's backend names or none, ratios within the bound."""
    model = _atlas_model()
    names = st.one_of(st.none(), st.sampled_from(["Mkldnn", "Slow3d", "Cudnn", "MiopenTranspose", "SlowDilated2d"]))
    return st.builds(model.Cost, backend=names, control_backend=names, memory_ratio=_ratios, time_ratio=_ratios,
                     time_ratio_low=_ratios)


@st.composite
def atlas_bundles(draw: st.DrawFn, max_runs: int = 2, max_cells: int = 3, max_cases: int = 4) -> Any:
    model = _atlas_model()
    dates = st.dates().map(lambda d: d.isoformat())
    stacks = st.builds(model.Stack, torch=_versions, cuda=st.sampled_from(["13.0", "12.4", "11.8", None]),
                       cudnn=st.sampled_from(["9.19.0", "8.9.7", None]), driver=st.sampled_from(["580.159.04", None]),
                       image_digest=st.sampled_from([None, "sha256:" + "ab" * 32]),
                       lane=st.sampled_from(["host", "baremetal", "container"]))
    cells = st.builds(model.Cell, stack=stacks, gpu=atlas_gpus(),
                      verdict=st.sampled_from(["ok", "regression", "control", "no-control", "invalid"]),
                      control=st.booleans(), cases=st.lists(atlas_cases(), max_size=max_cases).map(tuple))
    runs = st.builds(model.Run, run=st.from_regex(r"[0-9a-f]{16}", fullmatch=True), date=dates,
                     cells=st.lists(cells, max_size=max_cells).map(tuple))
    return model.Bundle(fleet=draw(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", fullmatch=True)),
                        created=draw(dates), tool="0.1.0", runs=tuple(draw(st.lists(runs, max_size=max_runs))),
                        dropped=tuple(draw(st.lists(_printable_line, max_size=4))))


# A failure message quoting a fleet's own names among ordinary words (atlas/scrub.py).
_PLACEHOLDER_WORDS = {"url", "user", "host", "path", "uuid", "ip", "hex"}
atlas_names = st.from_regex(r"[a-z][a-z0-9-]{1,20}[a-z0-9]", fullmatch=True).filter(
    lambda n: n not in _PLACEHOLDER_WORDS)
atlas_ipv4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda parts: ".".join(map(str, parts)))
atlas_paths = st.lists(st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True).filter(lambda p: p not in (".", "..")),
                       min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))


@st.composite
def leaky_messages(draw: st.DrawFn) -> tuple[str, str, str, str, str]:
    """(message, host, user, ip, path): the message holds each, between words and punctuation."""
    host, user, ip, path = draw(atlas_names), draw(atlas_names), draw(atlas_ipv4), draw(atlas_paths)
    words = st.sampled_from(["RuntimeError:", "cuDNN", "error", "at", "on", "(", ")", ",", "CUDNN_STATUS_NOT_SUPPORTED",
                             "by", "from", "'", '"', "=", ":"])
    parts = [*draw(st.lists(words, max_size=6)), host, *draw(st.lists(words, max_size=3)), user,
             *draw(st.lists(words, max_size=3)), ip, draw(st.sampled_from(["", ":8080"])),
             *draw(st.lists(words, max_size=3)), path, *draw(st.lists(words, max_size=3))]
    order = draw(st.permutations(parts))
    return " ".join(order), host, user, ip, path


# --- a40s: the atlas site (issue 40: atlas/merge.py, atlas/site.py) ------------------------------
# The site is handed Bundle objects, not only what the reader let through: every free text of a
# drawn bundle (the reason, what was dropped, the GPU model and MIG profile, the fleet label, known
# ids and sources) may be markup, a spreadsheet formula or a link of another scheme.
ATLAS_MARKUP = ('<script>alert(1)</script>', '"><img src=x onerror=alert(2)>', "'><svg onload=alert(3)>",
                "</script><!--", "=HYPERLINK(\"http://x\")", "+1", "-1", "@SUM(A1)", "javascript:alert(4)",
                "a\u2028b\u202e", "&amp;&lt;", "\x1b[31mred")
atlas_texts = st.one_of(_printable_line, st.sampled_from(ATLAS_MARKUP),
                        st.lists(st.sampled_from(ATLAS_MARKUP), min_size=1, max_size=3).map("".join))


@st.composite
def atlas_hostile_bundles(draw: st.DrawFn) -> Any:
    """atlas_bundles with their free text replaced by atlas_texts (the whole bundle as objects)."""
    bundle = draw(atlas_bundles())

    def case(found: Any) -> Any:
        return replace(found, reason=draw(atlas_texts), known=(draw(atlas_texts),), sources=(draw(atlas_texts),))

    def cell(found: Any) -> Any:
        gpu = replace(found.gpu, model=draw(atlas_texts), mig=draw(st.one_of(st.none(), atlas_texts)))
        return replace(found, gpu=gpu, cases=tuple(case(c) for c in found.cases))

    runs = tuple(replace(r, cells=tuple(cell(c) for c in r.cells)) for r in bundle.runs)
    return replace(bundle, fleet=draw(atlas_texts), runs=runs, dropped=(draw(atlas_texts),))


# --- the browser tests' harness (tests/cdp.py): DevTools event logs -------------------------------
# What a page's event log may hold when a test acts, and what arrives after a click: Chromium
# interleaves events with the answers to calls, in any order, and a page that has loaded keeps its
# own Page.loadEventFired in the log (the stale event the atlas case-page test once took for the
# next page's: a CI failure), and a document on the way (a redirect) fires one of its own.
DEVTOOLS_EVENTS = ("Page.loadEventFired", "Page.frameNavigated", "Page.domContentEventFired",
                   "Runtime.consoleAPICalled", "Runtime.executionContextCreated", "Log.entryAdded")
devtools_logs = st.lists(st.sampled_from(DEVTOOLS_EVENTS).map(lambda m: {"method": m, "params": {}}), max_size=8)


# --- i45 atlas: bundles that claim one run ---------------------------------------------------------
# Bundles whose runs are claimed again by other bundles of the same fleet: some copies the same
# run (its cells and cases in another order, in a bundle of another day), some a different one
# (another date, a cell more, or forged: every case passed). Each run id is unique among the
# drawn bundles, so the claims made here are the only ones; the truth comes with them.
@dataclass(frozen=True)
class ClaimedRuns:
    bundles: tuple[Any, ...]  # model.Bundle, in the order drawn
    names: tuple[str, ...]  # each bundle's file name
    kept: frozenset[tuple[str, str]]  # (fleet, run id): claimed once, or only by copies of one content
    conflicts: frozenset[tuple[str, str]]  # claimed with different contents
    order: tuple[int, ...]  # another order to give them in (a permutation of range(len(bundles)))


@st.composite
def atlas_same_runs(draw: st.DrawFn, run: Any) -> Any:
    """The run as another export of it may hold it: cells and cases in another order."""
    cells = [replace(c, cases=tuple(draw(st.permutations(c.cases)))) for c in run.cells]
    return replace(run, cells=tuple(draw(st.permutations(cells))))


@st.composite
def atlas_different_runs(draw: st.DrawFn, run: Any) -> Any:
    """The run's id with other contents: always different, whatever the run held."""
    how = draw(st.sampled_from(["date", "more", "forged"]))
    if how == "date":
        day = draw(st.dates().map(lambda d: d.isoformat()).filter(lambda d: d != run.date))
        return replace(run, date=day)
    extra = draw(atlas_bundles(max_runs=1, max_cells=1).filter(lambda b: bool(b.runs and b.runs[0].cells)))
    added = extra.runs[0].cells[0]
    if how == "more":
        return replace(run, cells=(*run.cells, added))
    # forged: every case passed, and a passing cell more (so that an all-pass run still differs)
    def passing(cell: Any) -> Any:
        return replace(cell, verdict="ok", cases=tuple(replace(c, outcome="pass", verdict="ok", family=None,
                                                               subcode=None, reason=None, repro=None)
                                                       for c in cell.cases))

    return replace(run, cells=(*(passing(c) for c in run.cells), passing(added)))


@st.composite
def atlas_claimed_runs(draw: st.DrawFn) -> ClaimedRuns:
    model = _atlas_model()
    some = atlas_bundles(max_runs=3, max_cells=2, max_cases=2)
    drawn = [draw(some.filter(lambda b: bool(b.runs))), *draw(st.lists(some, max_size=2))]  # a run at least
    made, n = [], 0
    for found in drawn:  # a run id unique among them all: deadbeef00000000, deadbeef00000001, ...
        runs = []
        for run in found.runs:
            runs.append(replace(run, run=f"deadbeef{n:08x}"))
            n += 1
        made.append(replace(found, runs=tuple(runs)))
    claimed = [(b.fleet, run) for b in made for run in b.runs]
    conflicts = set()
    for index, differ in draw(st.lists(st.tuples(st.integers(0, len(claimed) - 1), st.booleans()), min_size=1,
                                       max_size=4)):
        fleet, run = claimed[index]
        copy = draw(atlas_different_runs(run) if differ else atlas_same_runs(run))
        if differ:
            conflicts.add((fleet, run.run))
        made.append(model.Bundle(fleet=fleet, created=draw(st.dates().map(lambda d: d.isoformat())),
                                 tool="0.1.0", runs=(copy,), dropped=()))
    keys = {(fleet, run.run) for fleet, run in claimed}
    return ClaimedRuns(bundles=tuple(made), names=tuple(f"bundle-{i}.json" for i in range(len(made))),
                       kept=frozenset(keys - conflicts), conflicts=frozenset(conflicts),
                       order=tuple(draw(st.permutations(range(len(made))))))


# --- i45 the judged night: sequences of nights (results/night.py, history/lookup.py) -------------
@dataclass(frozen=True)
class NightPlan:
    """One night of historykit's small run: which of cand's cases fail, whether the control was
    sick (every candidate unjudged), whether an optional host cell could not run."""

    broken: tuple[str, ...]
    sick: bool
    optional_host: bool


@dataclass(frozen=True)
class NightSequence:
    nights: tuple[NightPlan, ...]  # night n+1 is nights[n], in time order
    order: tuple[int, ...]  # the order they are recorded in (night numbers, 1-based)
    report_first: tuple[bool, ...]  # per step of order: its report rendered before it is recorded


@st.composite
def night_sequences(draw: st.DrawFn, cases: tuple[str, ...] = ("a", "b", "c"), max_nights: int = 5) -> NightSequence:
    count = draw(st.integers(min_value=2, max_value=max_nights))
    nights = tuple(NightPlan(broken=tuple(draw(st.lists(st.sampled_from(cases), unique=True, max_size=2))),
                             sick=draw(st.booleans()) and draw(st.booleans()),  # one night in four
                             optional_host=draw(st.booleans()))
                   for _ in range(count))
    order = tuple(draw(st.permutations(range(1, count + 1))))
    return NightSequence(nights=nights, order=order,
                         report_first=tuple(draw(st.booleans()) for _ in order))


# --- i45 reader: results files with duplicate and malformed lines ---
# Issue 45 (results/read.py read_cases, numbered): a results.jsonl as a cell may leave it, each
# line known for what it is, so a test knows what the reader must make of it. Sound lines for a
# few cases; a case recorded again (the same line twice, byte for byte; the same outcome and family
# in other words; another outcome or family); and malformed lines: one object split over two lines
# (between two fields, where the comma a whole-file read puts at a line break makes it whole
# again, or inside a string), two objects on one line, a line cut short, blank lines.

REREAD_CASES = ("conv2d-a", "conv2d-b", "conv3d-a")


@dataclass(frozen=True, kw_only=True)
class JsonlLine:
    """One line of a results.jsonl (no line break): a sound line's case, outcome and family, or
    bad (malformed: the reader names it), or neither (blank)."""

    text: str
    case: str | None = None
    outcome: Outcome | None = None
    family: str | None = None
    bad: bool = False


def jsonl_text(lines: list[JsonlLine]) -> str:
    return "".join(line.text + "\n" for line in lines)


def _fields(rec: dict[str, Any]) -> list[str]:
    """A record's `"key": value` members, as json.dumps writes them."""
    return [f"{json.dumps(key)}: {json.dumps(value)}" for key, value in rec.items()]


@st.composite
def sound_jsonl_lines(draw: st.DrawFn, cases: tuple[str, ...] = REREAD_CASES) -> JsonlLine:
    name = draw(st.sampled_from(cases))
    outcome, family = draw(results)
    # duration_s: the same outcome and family in other words (a line not byte for byte the same)
    rec = record(name, STATUS[outcome], MESSAGES.get(family), duration_s=draw(st.sampled_from((0.01, 0.5))))
    return JsonlLine(text=json.dumps(rec), case=name, outcome=outcome, family=family)


MALFORMED = ("split", "split-then-two", "split-in-string", "two", "cut")
# The ones a whole-file read (one json.loads of the lines joined by commas) takes for sound, when
# the counts match: a split between fields, two objects on a line joined by a comma.
WHOLE_FILE_SOUND = ("split", "split-then-two", "two-comma")


@st.composite
def malformed_jsonl_lines(draw: st.DrawFn, cases: tuple[str, ...] = REREAD_CASES,
                          kinds: tuple[str, ...] = MALFORMED) -> list[JsonlLine]:
    """One or two lines a reader must name (bad), each made of sound records."""
    one, two = draw(sound_jsonl_lines(cases)), draw(sound_jsonl_lines(cases))
    kind = draw(st.sampled_from(kinds))
    if kind in ("split", "split-then-two"):
        # At a member boundary, the comma dropped: each half alone is no JSON; "," between them is.
        members = _fields(json.loads(one.text))
        at = draw(st.integers(1, len(members) - 1))
        tail = ", ".join(members[at:]) + "}" + (f", {two.text}" if kind == "split-then-two" else "")
        return [JsonlLine(text="{" + ", ".join(members[:at]), bad=True), JsonlLine(text=tail, bad=True)]
    if kind == "split-in-string":
        at = one.text.index('"case": "') + len('"case": "') + 2
        return [JsonlLine(text=one.text[:at], bad=True), JsonlLine(text=one.text[at:], bad=True)]
    if kind in ("two", "two-comma"):
        joints = (", ", ",") if kind == "two-comma" else ("", " ", ", ", ",")
        return [JsonlLine(text=one.text + draw(st.sampled_from(joints)) + two.text, bad=True)]
    return [JsonlLine(text=one.text[:draw(st.integers(1, len(one.text) - 1))], bad=True)]


@st.composite
def reread_results_files(draw: st.DrawFn, max_parts: int = 10) -> list[JsonlLine]:
    """A results.jsonl's lines: sound ones, a sound line again (byte for byte, or its case with
    another or the same outcome and family), malformed ones and blank ones, in any order. Half
    of them (whole_file) hold no blank line and only the malformed lines that a whole-file read
    takes for sound, their counts matching now and then, as in issue 45."""
    whole_file = draw(st.booleans())
    parts: list[list[JsonlLine]] = []
    for _ in range(draw(st.integers(1, max_parts))):
        kind = draw(st.sampled_from(("sound", "sound", "again", "malformed", "blank")))
        sound = [line for part in parts for line in part if line.case is not None]
        if kind == "again" and sound:
            parts.append([draw(st.sampled_from(sound))])
        elif kind == "malformed":
            parts.append(draw(malformed_jsonl_lines(kinds=WHOLE_FILE_SOUND if whole_file else MALFORMED)))
        elif kind == "blank" and not whole_file:
            parts.append([JsonlLine(text=draw(st.sampled_from(("", " ", "\t", "  \r"))))])
        else:
            parts.append([draw(sound_jsonl_lines())])
    return [line for part in parts for line in part]


# --- i45 prove: BEFORE/AFTER fleets ---
# A fix proof across a fleet (prove/proof.py, issue 45): BEFORE and AFTER of one candidate and the
# control, on several hosts (or none: results from before hosts) and GPU keys. Each place's
# candidate failed with the signature BEFORE or not, is fixed AFTER or not; each control is healthy,
# fails a case, never finished, or is absent; AFTER may lack a place BEFORE had or add one (another
# host, another GPU key). Candidates always complete and run the same two cases, so that whether
# the proof holds follows from those facts alone (tests/unit/prove/test_proof_fleet_properties.py).
PROVE_HOSTS = ("h1", "h2", "h3")
PROVE_CASES = ("conv2d-a", "conv2d-b")  # conv2d-a is the one that may fail with the signature


@dataclass(frozen=True, kw_only=True)
class ProveFleet:
    before: tuple[CellResult, ...]
    after: tuple[CellResult, ...]
    allow_cpu: bool


def prove_cell(cell: str, gpu: str, host: str, signature: bool, *, control: bool = False,
               state: str = "healthy") -> CellResult:
    """A candidate (conv2d-a failing with the signature or passing) or a control in state
    healthy, failing (conv2d-b fails otherwise) or killed (the suite never finished)."""
    cases = {n: case(n, Outcome.PASS, None) for n in PROVE_CASES}
    if signature:
        cases["conv2d-a"] = case("conv2d-a", Outcome.FAIL, SIGNATURE)
    if state == "failing":
        cases["conv2d-b"] = case("conv2d-b", Outcome.FAIL, "numeric_mismatch")
    found = cell_result(cell, gpu, cases, control=control, facts=Facts(killed=state == "killed"))
    return replace(found, host=host, path=Path(f"run/{cell}@{gpu}" + (f"@{host}" if host else "")))


CONTROL_STATES = st.sampled_from(("healthy", "healthy", "healthy", "healthy", "failing", "killed", "absent"))


@st.composite
def prove_side(draw: st.DrawFn, places: list[tuple[str, str]], signature: st.SearchStrategy[bool],
               ill: bool) -> list[CellResult]:
    """Each place's control (healthy, or when ill any state) and candidate."""
    out = []
    for host, gpu in places:
        state = draw(CONTROL_STATES) if ill else "healthy"
        if state != "absent":
            out.append(prove_cell("ctrl", gpu, host, False, control=True, state=state))
        out.append(prove_cell("cand", gpu, host, draw(signature)))
    return out


@st.composite
def prove_fleets(draw: st.DrawFn) -> ProveFleet:
    """BEFORE: the candidate mostly failing with the signature somewhere; AFTER: mostly fixed, now
    and then still failing on one place, lacking a place, or on a place BEFORE never covered."""
    legacy = draw(st.integers(0, 3)) == 0  # BEFORE is an older run: no host recorded
    after_hosts = draw(st.lists(st.sampled_from(PROVE_HOSTS), unique=True, min_size=1, max_size=3))
    before_hosts = [""] if legacy else draw(st.lists(st.sampled_from(after_hosts), unique=True, min_size=1))
    gpus = draw(st.lists(st.sampled_from(GPU_KEYS), unique=True, min_size=1, max_size=2))
    before_places = [(h, g) for h in before_hosts for g in gpus]
    after_places = [(h, g) for h in after_hosts for g in gpus
                    if not (draw(st.integers(0, 7)) == 0 and h in before_hosts)]  # now and then one lacking
    if draw(st.integers(0, 4)) == 0:  # a GPU key BEFORE never covered
        extra = draw(st.sampled_from(GPU_KEYS))
        after_places += [(h, extra) for h in after_hosts if (h, extra) not in after_places]
    ill = draw(st.booleans())  # a fleet whose controls may be sick (each side drawn apart)
    before = draw(prove_side(before_places, st.integers(0, 3).map(bool), ill and draw(st.booleans())))
    after = draw(prove_side(after_places, st.integers(0, 6).map(lambda n: n == 0), ill and draw(st.booleans())))
    return ProveFleet(before=tuple(before), after=tuple(after), allow_cpu=draw(st.booleans()))


# --- i46 history text: what a cell's env.json may say (history/record.clean) -------------------------
ENV_FIELDS = ("torch", "cuda", "cudnn", "driver", "image_id", "suite_version", "python")


def env_values() -> st.SearchStrategy[dict[str, Any]]:
    """env.json fields holding any text (every code point: lone surrogates, NUL, escapes), numbers
    or nothing, as valid JSON carries them."""
    return st.dictionaries(st.sampled_from(ENV_FIELDS), st.one_of(st.text(max_size=300), st.integers(), st.none()),
                           max_size=len(ENV_FIELDS))


# --- i46 scrub and known-issue claims ---
# A place a message may name a file server, a user and a file by, with no name the exporter knows
# (atlas/scrub.py): a UNC share, host:/path, a file: URL, a PATH list whose later entry holds the
# user, a drive path with spaces; amid text that must come through as it is.
I46_LEGIT = ("RuntimeError:", "cuDNN", "error", "at", "on", "(", ")", ",", "CUDNN_STATUS_NOT_SUPPORTED", "by", "from",
             "'", '"', "=", ":", "torch", "2.5.1+cu124", "sm_90", "12:30", "16:9", "a:b", "9.18.1", "failed",
             "conv2d-fp16-k3-p1-depthwise-channels_last", "at::native::conv2d", "c10::Error", "float16/bfloat16",
             "1/2", "max abs error 3.1 > tolerance 0.01", "capability 9.0", "NVIDIA H200")


def _alnum_runs(text: str) -> set[str]:
    return set("".join(c if c.isalnum() else " " for c in text.lower()).split())


_I46_WORDS = _alnum_runs(" ".join(I46_LEGIT)) | {"share", "users", "usr", "bin", "opt", "lib", "file", "pt"}
# Names no legitimate word holds (a name that is also a word of the text could not be told apart).
i46_names = atlas_names.filter(lambda n: not _alnum_runs(n) & _I46_WORDS)
i46_legit_lines = st.lists(st.sampled_from(I46_LEGIT), min_size=1, max_size=4).map(" ".join)


@st.composite
def hostile_locations(draw: st.DrawFn) -> tuple[str, str, str, str]:
    """(place, host, user, leaf): one place in one of the shapes, naming a user and a file, and a
    host where the shape has one."""
    host, user, leaf = draw(i46_names), draw(i46_names), draw(i46_names)
    domain = draw(st.sampled_from(["", ".lab", ".corp.example"]))
    dirs = "/".join([*draw(st.lists(st.sampled_from(["export", "home", "data", "srv"]), max_size=2)), user])
    shape = draw(st.sampled_from(["unc", "unc-slash", "unc-long", "drive-spaces", "host-path", "user-host-path",
                                  "file-1", "file-3", "file-host", "path-list"]))
    if shape == "path-list":
        entries = draw(st.lists(st.sampled_from(["/usr/bin", "/opt/x/bin", "/usr/local/cuda/lib64", "~/bin"]),
                                min_size=1, max_size=3))
        own = draw(st.sampled_from([f"/{dirs}/{leaf}", f"/net/{host}/{user}/{leaf}", f"{dirs}/{leaf}",
                                    f"~{user}/{leaf}"]))
        entries.insert(draw(st.integers(1, len(entries))), own)  # never the first
        prefix = draw(st.sampled_from(["", "PATH=", "LD_LIBRARY_PATH=", "export PATH="]))
        return prefix + ":".join(entries), host, user, leaf
    scheme = draw(st.sampled_from(["file", "FILE", "File"]))
    place = {
        "unc": f"\\\\{host}{domain}\\share\\{user}\\{leaf}.pt",
        "unc-slash": f"//{host}{domain}/share/{user}/{leaf}.pt",
        "unc-long": f"\\\\?\\C:\\Users\\{user}\\{leaf}",
        "drive-spaces": f"D:\\Users\\{user}\\My Models\\{leaf} v2\\m.pt",
        "host-path": f"{host}{domain}:/{dirs}/{leaf}",
        "user-host-path": f"{user}@{host}{domain}:/{dirs}/{leaf}",
        "file-1": f"{scheme}:/{dirs}/{leaf}",
        "file-3": f"{scheme}:///{dirs}/{leaf}",
        "file-host": f"{scheme}://{host}{domain}/{dirs}/{leaf}",
    }[shape]
    return place, host, user, leaf


@st.composite
def hostile_location_messages(draw: st.DrawFn) -> tuple[str, str, str, str]:
    """(message, host, user, leaf): a hostile location amid legitimate words, space-separated."""
    place, host, user, leaf = draw(hostile_locations())
    words = st.lists(st.sampled_from(I46_LEGIT), max_size=4)
    return " ".join([*draw(words), place, *draw(words)]), host, user, leaf


# A CUDA out-of-memory message as PyTorch words it (2.1+: "GPU 0 has a total capacity of ...";
# before: "(GPU 0; ... total capacity; ...)"), the request fitting the GPU's whole capacity or not.
_OOM_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def _size(value: int, unit: str) -> str:
    return f"{value} bytes" if unit == "bytes" else f"{value / 100:.2f} {unit}"


@st.composite
def oom_messages(draw: st.DrawFn, fits: bool | None = None) -> tuple[str, bool]:
    """(message, whether the request is at most the capacity); `fits` picks one side."""
    capacity = draw(st.integers(100, 19_200))  # hundredths of a GiB: 1.00 to 192.00 GiB
    side = draw(st.booleans()) if fits is None else fits
    if side:
        unit = draw(st.sampled_from(list(_OOM_UNITS)))
        ceiling = capacity * (1 << 30) // _OOM_UNITS[unit] if unit != "bytes" else 1 << 20
        request = draw(st.integers(1, min(ceiling, 10**7)))
        said = _size(request, unit)
    else:
        said = _size(draw(st.integers(capacity + 1, capacity * 20 + 1)), "GiB")
    total = _size(capacity, "GiB")
    free = _size(draw(st.integers(0, capacity)), "GiB")
    gpu = draw(st.sampled_from(["GPU 0", "GPU 3", "the GPU"]))
    message = draw(st.sampled_from([
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {said}. {gpu} has a total capacity of "
        f"{total} of which {free} is free. Including non-PyTorch memory, this process has 1.00 GiB memory in use.",
        f"RuntimeError: CUDA out of memory. Tried to allocate {said} ({gpu}; {total} total capacity; "
        f"0 bytes already allocated; {free} free; 2.00 MiB reserved in total by PyTorch)",
    ]))
    return message, side


# --- i46 logs read through the owner's fd ---
#
# What a cell may leave as its log.txt while the harness reads it (run/evidence.write,
# triage/scan.first_cause, the report's first cause): a symlink to a file outside the cell, a FIFO,
# a directory, a huge sparse file or a normal log, put there before the read or swapped in and out
# during it by a process the cell left behind; the rest of the cell is a hostile_trees draw
# (planted with plant). The readers must read nothing outside the cell and each read with a bound.
import contextlib  # noqa: E402  (this section's own; the sections above do not need them)
import subprocess  # noqa: E402
import sys  # noqa: E402
from collections.abc import Iterator  # noqa: E402

LOG_KINDS = ("outside-link", "fifo", "dir", "sparse", "normal")
LOG_SWAPS = ("before", "during")
OUTSIDE_MARK = "OUTSIDE-SECRET"  # on every line of the outside file: seen anywhere, it was read
SPARSE_SIZE = 2 << 30  # a sparse log's size: far past any bound, and no disk


@dataclass(frozen=True)
class LogCase:
    kind: str  # what log.txt is (LOG_KINDS)
    swap: str  # "before": it is that from the start; "during": swapped with the real log while read
    tree: tuple[TreeEntry, ...]  # the rest of the cell


@st.composite
def log_cases(draw: st.DrawFn, max_entries: int = 4) -> LogCase:
    return LogCase(kind=draw(st.sampled_from(LOG_KINDS)), swap=draw(st.sampled_from(LOG_SWAPS)),
                   tree=tuple(draw(hostile_trees(max_entries=max_entries))))


def outside_log(folder: Path, text: str) -> Path:
    """A file outside every cell that looks like a failing log (text's lines), each line marked
    with OUTSIDE_MARK, so that a reader led to it finds a failure there and shows the mark."""
    path = folder / "outside-log.txt"
    path.write_text("".join(f"{line} {OUTSIDE_MARK}\n" for line in text.splitlines()))
    return path


def log_object(where: Path, kind: str, real: Path, outside: Path) -> None:
    """What log.txt is for kind, made at where: a link to outside, a FIFO, a directory, a sparse
    file of SPARSE_SIZE starting with real's bytes, or (normal) a hard link to real."""
    if kind == "outside-link":
        where.symlink_to(outside)
    elif kind == "fifo":
        os.mkfifo(where)
    elif kind == "dir":
        where.mkdir()
    elif kind == "sparse":
        where.write_bytes(real.read_bytes())
        os.truncate(where, SPARSE_SIZE)
    else:
        os.link(real, where)


_SWAP = """
import os, sys
log, real, obj, kind = sys.argv[1:5]
tmp = log + ".swap"
print("ready", flush=True)
while True:
    try:
        if kind == "dir":
            os.unlink(log); os.mkdir(log); os.rmdir(log); os.link(real, log)
        else:
            os.link(obj, tmp, follow_symlinks=False); os.replace(tmp, log)
            os.link(real, tmp); os.replace(tmp, log)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
"""


def put_back(log: Path, real: Path) -> None:
    """log a hard link to real again, whatever a swap left there."""
    for path in (log, log.with_name(log.name + ".swap")):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        elif os.path.lexists(path):
            path.unlink()
    os.link(real, log)


@contextlib.contextmanager
def swapping(log: Path, real: Path, obj: Path, kind: str) -> Iterator[None]:
    """Another process (a cell's leftover) putting obj (a directory, for kind "dir") in log's
    place and the real log back, as fast as it can, until the block ends; then log is real again."""
    proc = subprocess.Popen([sys.executable, "-c", _SWAP, str(log), str(real), str(obj), kind],
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        put_back(log, real)


def bytes_read() -> int:
    """The bytes this process has read so far (all its threads; read, pread and sendfile): what a
    bound on reads is checked by."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


# --- i46 model capture ---
# A user's model that misbehaves (issue 46: `convmatrix cases --from-model` records in a child
# interpreter): what it does (tests/capturezoo.py's DOINGS: end the interpreter, print, sleep,
# swallow every exception in a loop, allocate real memory, raise) and where (at its module's
# import, in its builder, in its forward); `arg` is the exit status or the error's number.
CAPTURE_DOINGS = ("exit", "print", "sleep", "swallow", "allocate", "raise")
CAPTURE_PLACES = ("import", "build", "forward")


@dataclass(frozen=True)
class Misbehaviour:
    what: str
    where: str
    arg: int


@st.composite
def misbehaviours(draw: st.DrawFn) -> Misbehaviour:
    what = draw(st.sampled_from(CAPTURE_DOINGS))
    return Misbehaviour(what=what, where=draw(st.sampled_from(CAPTURE_PLACES)),
                        arg=draw(st.sampled_from((0, 1, 3)) if what == "exit" else st.integers(0, 99)))


# --- i47 library audit ---
# A loaded cuDNN as suites/libaudit.py's table has it: the shim, graph and the other sub-libraries,
# each from one of the places a file can come from, with one version or another.

AUDIT_ORIGINS = ("wheel", "torch-lib", "LD_LIBRARY_PATH", "ld cache", "system path")
AUDIT_SUBLIBRARIES = ("libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9",
                      "libcudnn_engines_precompiled.so.9", "libcudnn_heuristic.so.9",
                      "libcudnn_engines_tensor_ir.so.9")
AUDIT_VERSIONS = ("9.1.0", "9.2.1", "9.4.0", "9.20.0", "9.23.0")


@st.composite
def audit_rows(draw: st.DrawFn, version: str | None = None) -> list[dict[str, Any]]:
    """Rows of one cuDNN, every file of `version` (drawn when None), each from a drawn origin and
    folder, loaded or only what the loader would pick."""
    version = version or draw(st.sampled_from(AUDIT_VERSIONS))
    names = ["libcudnn.so.9", *draw(st.lists(st.sampled_from(AUDIT_SUBLIBRARIES[1:]), unique=True, max_size=6))]
    names.insert(1, AUDIT_SUBLIBRARIES[0])
    rows = []
    for name in names:
        folder = draw(st.sampled_from(("/v/site-packages/nvidia/cudnn/lib", "/other/lib", "/usr/lib/x86_64-linux-gnu")))
        rows.append({"name": name, "family": "cudnn", "path": f"{folder}/{name}", "loaded": draw(st.booleans()),
                     "version": version, "package": None, "origin": draw(st.sampled_from(AUDIT_ORIGINS)),
                     "asked_by": None, "via": None})
    rows[0]["loaded"] = rows[1]["loaded"] = True
    return rows


# How the audit's child ended: its exit (None: killed for time, negative: a signal) and its stderr,
# noise among cuDNN's own lines, those that say a sub-library could not load among them.
AUDIT_UNLOADABLE = ("Unable to load any of {libcudnn_cnn.so.9.4.0, libcudnn_cnn.so.9.4, libcudnn_cnn.so.9}",
                    "Invalid handle. Cannot load symbol cudnnCnnVersionCheck")
AUDIT_OTHER_LINES = ("Could not load library libcudnn_ops.so.9", "CUDNN_STATUS_NOT_INITIALIZED",
                     "UserWarning: Failed to initialize NumPy", "Segmentation fault")


@st.composite
def audit_child_ends(draw: st.DrawFn) -> dict[str, Any]:
    """What libaudit.Child.result gives: no stages, an exit and a stderr of drawn lines."""
    code = draw(st.one_of(st.none(), st.just(0), st.integers(-15, -1), st.integers(1, 255)))
    lines = draw(st.lists(st.sampled_from((*AUDIT_UNLOADABLE, *AUDIT_OTHER_LINES)) | _printable_line, max_size=6))
    return {"stages": [], "exit": code, "stderr": "\n".join(lines)}


# --- i48 fallbacks ---
# Timings of one stack against itself on a runner whose load is the same for the conv and the
# reference workload beside it: `noise` multiplies each run by at most 1.2 (noise only adds time).
def self_timings(draw_floats: Any = None) -> st.SearchStrategy[tuple[tuple[float, ...], tuple[float, ...],
                                                                      tuple[float, ...], tuple[float, ...]]]:
    """(control runs, candidate runs, control references, candidate references): the same stack,
    the candidate on a runner `load` times as loaded (1 to 50), each run with its own noise."""
    noise = st.floats(min_value=1.0, max_value=1.2, allow_nan=False)

    @st.composite
    def made(draw: st.DrawFn) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
        base = draw(st.floats(min_value=0.01, max_value=1000.0, allow_nan=False))
        reference = draw(st.floats(min_value=0.1, max_value=10.0, allow_nan=False))
        load = draw(st.floats(min_value=1.0, max_value=50.0, allow_nan=False))
        runs = draw(st.integers(min_value=3, max_value=6))
        control = tuple(base * draw(noise) for _ in range(runs))
        candidate = tuple(base * load * draw(noise) for _ in range(runs))
        refs = (tuple(reference * draw(noise) for _ in range(runs + 1)),
                tuple(reference * load * draw(noise) for _ in range(runs + 1)))
        return control, candidate, refs[0], refs[1]

    return made()


def bursty_self_timings() -> st.SearchStrategy[tuple[tuple[float, ...], tuple[float, ...],
                                                      tuple[float, ...], tuple[float, ...]]]:
    """(control runs, candidate runs, control references, candidate references) of one stack on a
    runner whose load changes from moment to moment (1 to 50 each), as the suite records them: a
    reference before each run and after the last (or, as records before issue 48's fix, two: before
    and after all runs). A run's load lies between the loads of the two references it stands
    between (the load moves, it does not jump and come back unseen); unbracketed runs see any."""
    noise = st.floats(min_value=1.0, max_value=1.2, allow_nan=False)
    loads = st.floats(min_value=1.0, max_value=50.0, allow_nan=False)

    @st.composite
    def side(draw: st.DrawFn, base: float, reference: float, runs: int, beside: bool) -> tuple[tuple[float, ...], tuple[float, ...]]:
        at = [draw(loads) for _ in range(runs + 1)] if beside else [draw(loads), draw(loads)]
        timed = []
        for i in range(runs):
            low, top = (min(at[i], at[i + 1]), max(at[i], at[i + 1])) if beside else (1.0, 50.0)
            timed.append(base * draw(st.floats(min_value=low, max_value=top, allow_nan=False)) * draw(noise))
        return tuple(timed), tuple(reference * load * draw(noise) for load in at)

    @st.composite
    def made(draw: st.DrawFn) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
        base = draw(st.floats(min_value=0.01, max_value=1000.0, allow_nan=False))
        reference = draw(st.floats(min_value=0.1, max_value=10.0, allow_nan=False))
        runs = draw(st.integers(min_value=3, max_value=6))
        control = draw(side(base, reference, runs, draw(st.booleans())))
        candidate = draw(side(base, reference, runs, draw(st.booleans())))
        return control[0], candidate[0], control[1], candidate[1]

    return made()


# --- i50 model zoo ---
# A weight view (issue 50: `weight_strides`, `weight_storage_offset`): a conv's weight laid out in
# some order of its dimensions with gaps now and then, at some offset, as a shard of a flat
# parameter buffer hands it to cuDNN; shapes from tiny to past the CPU's budget, so that the
# scaled-down variant is drawn too. Drawn as a case file's [[case]] table.
@st.composite
def weight_view_entries(draw: st.DrawFn) -> dict[str, Any]:
    dims = draw(st.integers(1, 3))
    op = draw(st.sampled_from((f"conv{dims}d", f"conv_transpose{dims}d")))
    groups = draw(st.sampled_from((1, 1, 2)))
    c_in = groups * draw(st.sampled_from((1, 3, 8, 64, 320)))
    c_out = groups * draw(st.sampled_from((1, 4, 8, 96, 512)))
    kernel = draw(st.integers(1, 3))
    size = [draw(st.sampled_from((kernel, 8, 24, 96 if dims < 3 else 16))) for _ in range(dims)]
    transposed = op.startswith("conv_transpose")
    weight = [c_in, c_out // groups] if transposed else [c_out, c_in // groups]
    weight += [kernel] * dims
    order = draw(st.permutations(range(dims + 2)))  # the weight's fastest dimension first
    strides = [0] * (dims + 2)
    span = draw(st.integers(1, 2))
    for d in order:
        strides[d] = span
        span = span * weight[d] * draw(st.sampled_from((1, 1, 2)))
    return {"name": "w", "op": op, "input": [draw(st.integers(1, 4)), c_in, *size], "out_channels": c_out,
            "kernel": kernel, "groups": groups, "weight_strides": strides,
            "weight_storage_offset": draw(st.sampled_from((0, 1, 7, 4096, 1 << 20))),
            "dtype": draw(st.sampled_from(("float32", "float64", "bfloat16")))}


# --- i51 explore ---------------------------------------------------------------------------------

def explore_configs() -> Any:
    """Configurations as explore draws them (explore/space.draw), from a drawn seed."""
    import random as _random

    from convmatrix.explore import space as _space

    return st.integers(0, 2**32 - 1).map(lambda seed: _space.draw(_random.Random(seed)))


# --- issue 50: a case file's [provenance] table, as a hostile file may write it ------------------

PROVENANCE_FIELDS = ("package", "version", "model", "inputs", "dtype", "config", "kwargs", "backward",
                     "channels_last", "torch", "recorded_by", "matched", "notes")


@st.composite
def hostile_provenance(draw: st.DrawFn) -> Any:
    """A [provenance] value: anything JSON, or a table of its own field names (and near misses) holding
    anything JSON, long text and control characters included."""
    names = st.sampled_from(PROVENANCE_FIELDS) | st.text(max_size=12)
    # Texts about the 2,000-character bound, of one repeated character (control ones included).
    long = st.builds(lambda ch, n: ch * n, st.characters(max_codepoint=0x3000), st.integers(1990, 2010))
    values = json_values(8) | long
    return draw(st.dictionaries(names, values, max_size=8) | json_values(8))

# --- i47 as shipped ---
# A container cell's audit as run and as shipped (suites/test_audit.py `audit.as_shipped`): the
# same image seen with and without the harness's LD_LIBRARY_PATH, each a table of audit_rows.
@st.composite
def shipped_pairs(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(as run, as shipped): the same rows, or rows some of which another folder, version or
    nothing at all stands for; a path or version may hold any text (an untrusted results line)."""
    ran = draw(audit_rows())
    shipped = [dict(row) for row in ran]
    for row in shipped:
        change = draw(st.sampled_from(("same", "same", "version", "path", "gone")))
        if change == "version":
            row["version"] = draw(st.sampled_from(AUDIT_VERSIONS))
        elif change == "path":
            row["path"] = draw(st.one_of(st.sampled_from(("/usr/lib/x86_64-linux-gnu/x.so.9", None)),
                                         st.text(max_size=30)))
            row["origin"] = draw(st.sampled_from(AUDIT_ORIGINS))
        elif change == "gone":
            row["name"] = ""  # dropped below
    return ran, [row for row in shipped if row["name"]]
