"""results/known.py and known_issues.toml: the file validates, every entry is sourced, and each
entry matches a case and stack that meet it and nothing just outside any of its bounds."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convmatrix.errors import BadInput
from convmatrix.results import known
from convmatrix.results.known import KnownIssue, KnownIssuesError, Stack
from strategies import oom_messages

REPO = Path(__file__).resolve().parents[3]


def case(**changes: Any) -> dict[str, Any]:
    """A results line's params (the catalog's Case fields as JSON), a plain fp32 conv2d."""
    params: dict[str, Any] = {
        "op": "conv2d", "n": 2, "c_in": 8, "c_out": 8, "size": [16, 16], "kernel": [3, 3], "stride": 1,
        "padding": 1, "dilation": 1, "groups": 1, "dtype": "float32", "autocast": None,
        "memory_format": "contiguous", "layout": None, "backward": False, "direction": None,
        "output_padding": 0, "tf32": None, "benchmark": None, "deterministic": None, "via": None,
        "source": "test", "bias": True,
    }
    params.update(changes)
    return params


_CONV3D_HALF = case(op="conv3d", size=[8, 16, 16], kernel=[1, 3, 3], padding=[0, 1, 1], dtype="bfloat16")
# For each entry: a case and a stack that meet it (inside every bound, not on one).
MEETS: dict[str, tuple[dict[str, Any], Stack]] = {
    "plan-failed-warning-torch-2-3-0": (case(autocast="float16"), Stack(torch="2.3.0+cu121")),
    "int32-no-split-before-cudnn-9-3": (
        case(n=1, c_in=64, c_out=64, size=[6000, 6000], dtype="float16"), Stack(cudnn=90100)),
    "depthwise-int32-no-split-native-kernel": (
        case(n=1, c_in=2, c_out=2, size=[32800, 32800], groups=2), Stack(torch="2.7.0+cu126")),
    "depthwise-64bit-channels-last-cudnn-9-11": (
        case(n=1, c_in=256, c_out=256, size=[2900, 2900], groups=256, dtype="float16",
             memory_format="channels_last"), Stack(cudnn=91200)),
    "conv3d-half-wrong-results-cudnn-9-8": (_CONV3D_HALF, Stack(torch="2.8.0+cu128", cudnn=91002)),
    "conv3d-half-off-cudnn-torch-2-9-0": (_CONV3D_HALF, Stack(torch="2.9.0+cu128", cudnn=91500)),
    "conv3d-half-off-cudnn-before-9-15": (_CONV3D_HALF, Stack(torch="2.9.1+cu128", cudnn=91300)),
    "conv3d-tf32-broken-kernel-cudnn-9-10-2": (
        case(op="conv3d", size=[8, 8, 8], kernel=3), Stack(torch="2.8.0", cudnn=91300, capability="9.0")),
    "bf16-conv-needs-sm80": (case(dtype="bfloat16"), Stack(capability="7.5")),
    "dgrad-batch-over-65535-stride-cudnn-8-9-7": (
        case(n=70000, stride=2, dtype="float16", backward=True, direction="backward_input"), Stack(cudnn=8906)),
    "dgrad-algo0-workspace-cudnn-7-6-0": (case(backward=True), Stack(cudnn=7600)),
    "unusable-heuristic-algo-before-torch-1-5": (case(op="conv_transpose3d", size=[8, 8, 8], kernel=3),
                                                 Stack(torch="1.4.0")),
    "conv-memory-held-cudnn-9-18-1": (case(), Stack(cudnn=91801)),
}
ISSUES = known.load()
IDS = [issue.id for issue in ISSUES]
RANGES = ("torch", "cuda", "cudnn", "capability")


def by_id(ident: str) -> KnownIssue:
    return next(issue for issue in ISSUES if issue.id == ident)


def matches(issue: KnownIssue, params: dict[str, Any], stack: Stack) -> bool:
    return known.match(params, stack, issues=[issue]) == [issue]


# --- the file -------------------------------------------------------------------------------------
def test_the_file_validates_and_every_entry_is_sourced() -> None:
    assert 10 <= len(ISSUES) <= 25
    assert len(set(IDS)) == len(IDS)
    for issue in ISSUES:
        assert issue.source.startswith("https://"), issue.id
        assert issue.summary and issue.workaround, issue.id
        assert any(getattr(issue, fact) is not None for fact in RANGES), issue.id
    assert known.load() is ISSUES  # cached


def test_every_entry_has_a_case_that_meets_it() -> None:
    assert sorted(MEETS) == sorted(IDS)


def test_the_file_is_package_data() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "known_issues.toml" in pyproject["tool"]["setuptools"]["package-data"]["convmatrix.results"]


# --- matching: inside, on and just outside every bound --------------------------------------------
@pytest.mark.parametrize("ident", IDS)
def test_an_entry_matches_the_case_that_meets_it(ident: str) -> None:
    params, stack = MEETS[ident]
    issue = by_id(ident)
    assert issue in known.match(params, stack)
    assert matches(issue, params, stack)


def _below(fact: str, version: str) -> str | int:
    """The stack value just below a range bound."""
    if fact == "cudnn":
        return known.cudnn_number(version) - 1  # type: ignore[operator]
    numbers = [int(p) for p in version.split(".")]
    last = max(i for i, n in enumerate(numbers) if n > 0)
    numbers[last] -= 1
    numbers[last + 1:] = [99] * (len(numbers) - last - 1)
    return ".".join(map(str, numbers))


def with_fact(stack: Stack, fact: str, value: Any) -> Stack:
    changes: dict[str, Any] = {fact: value}
    return dataclasses.replace(stack, **changes)


def _at(fact: str, version: str) -> str | int:
    return known.cudnn_number(version) if fact == "cudnn" else version  # type: ignore[return-value]


@pytest.mark.parametrize("ident", IDS)
def test_ranges_are_min_inclusive_max_exclusive(ident: str) -> None:
    params, stack = MEETS[ident]
    issue = by_id(ident)
    for fact in RANGES:
        bound = getattr(issue, fact)
        if bound is None:
            continue
        if bound.min:
            assert matches(issue, params, with_fact(stack, fact, _at(fact, bound.min))), (fact, "min")
            assert not matches(issue, params, with_fact(stack, fact, _below(fact, bound.min))), fact
        if bound.max:
            assert not matches(issue, params, with_fact(stack, fact, _at(fact, bound.max))), fact
            assert matches(issue, params, with_fact(stack, fact, _below(fact, bound.max))), (fact, "max")


@pytest.mark.parametrize("ident", IDS)
def test_unknown_stack_facts_do_not_match(ident: str) -> None:
    params, stack = MEETS[ident]
    issue = by_id(ident)
    for fact in RANGES:
        if getattr(issue, fact) is not None:
            assert not matches(issue, params, with_fact(stack, fact, None)), fact
    assert not known.match(params, Stack(), issues=[issue])
    if issue.torch is not None:
        assert not matches(issue, params, dataclasses.replace(stack, torch="unknown"))


_SAME_RANK = {"conv2d": "conv_transpose2d", "conv3d": "conv_transpose3d", "conv_transpose3d": "conv3d",
              "conv_transpose2d": "conv2d", "conv1d": "conv_transpose1d", "conv_transpose1d": "conv1d"}


def _outside(issue: KnownIssue, params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The case moved just past each of the entry's case conditions, one at a time."""
    rank = len(params["size"]) if isinstance(params["size"], list) else 1
    out: list[tuple[str, dict[str, Any]]] = []
    if issue.ops:
        out.append(("ops", {**params, "op": _SAME_RANK[params["op"]]}))
    if issue.dtypes:
        other = next(d for d in ("float32", "float16", "bfloat16") if d not in issue.dtypes)
        out.append(("dtypes", {**params, "dtype": other, "autocast": None}))
    if issue.memory_formats:
        other = next(m for m in ("contiguous", "channels_last" if rank == 2 else "channels_last_3d")
                     if m not in issue.memory_formats)
        out.append(("memory_formats", {**params, "memory_format": other}))
    for name, arg in issue.when:
        table: dict[str, dict[str, Any]] = {
            "depthwise": {"groups": 1},
            "over_int32": {"size": [8] * rank, "n": 2},
            "int32_no_split": {"size": [8] * rank},
            "kernel_all_ones": {"kernel": 1, "padding": 0},
            "dgrad": {"op": params["op"].replace("conv_transpose", "conv"), "backward": False, "direction": None},
            "tf32": {"tf32": False},
            "min_batch": {"n": int(arg) - 1},
            "min_stride": {"stride": int(arg) - 1},
        }
        moved = table[name]
        out.append((f"when.{name}", {**params, **moved}))
    return out


@pytest.mark.parametrize("ident", IDS)
def test_a_case_just_outside_each_condition_does_not_match(ident: str) -> None:
    params, stack = MEETS[ident]
    issue = by_id(ident)
    for condition, moved in _outside(issue, params):
        assert not matches(issue, moved, stack), condition
    needed = {"ops": "op", "dtypes": "dtype", "memory_formats": "memory_format"}
    for field, key in needed.items():
        if getattr(issue, field):
            assert not matches(issue, {k: v for k, v in params.items() if k != key}, stack), key


def test_a_splittable_batch_past_2g_is_not_no_split() -> None:
    issue = by_id("int32-no-split-before-cudnn-9-3")
    # 1024 x 3 x 224 x 224 into 64 channels: 3.3e9 output elements, 3.2e6 per sample (pytorch#11065).
    big = case(n=1024, c_in=3, c_out=64, size=[224, 224])
    assert not matches(issue, big, Stack(cudnn=90100))
    assert matches(by_id("depthwise-64bit-channels-last-cudnn-9-11"),
                   case(n=1024, c_in=64, c_out=64, size=[224, 224], groups=64, memory_format="channels_last"),
                   Stack(cudnn=91200))


def test_tf32_null_is_the_default_of_on() -> None:
    params, stack = MEETS["conv3d-tf32-broken-kernel-cudnn-9-10-2"]
    issue = by_id("conv3d-tf32-broken-kernel-cudnn-9-10-2")
    assert matches(issue, {**params, "tf32": True}, stack) and matches(issue, {**params, "tf32": None}, stack)
    assert not matches(issue, {**params, "tf32": False}, stack)
    assert not matches(issue, {**params, "autocast": "bfloat16"}, stack)  # the compute dtype is bf16


def test_dgrad_covers_transposed_forward_and_the_grad_input_directions() -> None:
    issue = by_id("dgrad-algo0-workspace-cudnn-7-6-0")
    stack = Stack(cudnn=7600)
    assert matches(issue, case(op="conv_transpose2d", kernel=2, stride=2, padding=0), stack)
    for direction in ("backward", "backward_input", "double_backward"):
        assert matches(issue, case(backward=True, direction=direction), stack), direction
    assert not matches(issue, case(backward=True, direction="backward_weight"), stack)
    assert not matches(issue, case(), stack)


def test_the_family_filter() -> None:
    params, stack = MEETS["plan-failed-warning-torch-2-3-0"]
    issue = by_id("plan-failed-warning-torch-2-3-0")
    assert known.match(params, stack, family="cudnn_not_supported", issues=[issue]) == [issue]
    assert known.match(params, stack, family="numeric_mismatch", issues=[issue]) == []
    bf16 = by_id("bf16-conv-needs-sm80")  # lists no family: any
    assert known.match(case(dtype="bfloat16"), Stack(capability="7.0"), family="crash", issues=[bf16]) == [bf16]


def test_match_stack_needs_a_listed_family_and_the_ranges() -> None:
    stack = Stack(torch="2.3.0+cu121", cudnn=8902)
    found = [i.id for i in known.match_stack(stack, ["cudnn_not_supported"])]
    assert "plan-failed-warning-torch-2-3-0" in found and "dgrad-batch-over-65535-stride-cudnn-8-9-7" in found
    assert "bf16-conv-needs-sm80" not in found  # no family listed: never matched from a log
    assert known.match_stack(stack, []) == []
    assert "plan-failed-warning-torch-2-3-0" not in [
        i.id for i in known.match_stack(Stack(torch="2.3.1"), ["cudnn_not_supported"])]


def test_annotation_and_conditions() -> None:
    issue = by_id("conv3d-half-wrong-results-cudnn-9-8")
    text = known.annotation(issue)
    assert text == (f"known: {issue.summary} (fixed in {issue.fixed_in}; workaround: {issue.workaround}) "
                    f"{issue.source}")
    assert "\n" not in text
    assert issue.conditions == "conv3d; float16/bfloat16; contiguous; kernel_all_ones=false"
    assert "(not fixed upstream; workaround: " in known.annotation(by_id("bf16-conv-needs-sm80"))
    assert by_id("plan-failed-warning-torch-2-3-0").conditions == ""


@pytest.mark.parametrize(("value", "number"), [
    ("90100", 90100), (8907, 8907), ("8.9.2", 8902), ("9.1.0.70", 90100), ("9.10.2.21", 91002),
    ("Could not collect", None), (None, None), ("0", None), ("", None),
])
def test_cudnn_number(value: str | int | None, number: int | None) -> None:
    assert known.cudnn_number(value) == number


@pytest.mark.parametrize(("text", "numbers"), [
    ("2.3.0+cu121", (2, 3, 0)), ("2.9.0.dev20250801", (2, 9, 0)), ("2.6.0a0+git1234", (2, 6, 0)),
    ("8.6", (8, 6, 0)), ("12", (12, 0, 0)), ("unknown", None), ("", None),
])
def test_version_numbers(text: str, numbers: tuple[int, ...] | None) -> None:
    assert known.version_numbers(text) == numbers


# --- a bad file: one clear error naming the entry and the field ------------------------------------
GOOD = '''
[[issue]]
id = "x-1"
summary = "s"
source = "https://example.org/x"
fixed_in = ""
workaround = "w"
cudnn = { min = "9.1.0", max = "9.2.0" }
'''


@pytest.mark.parametrize(("edit", "field"), [
    (('source = "https://example.org/x"', 'source = "http://example.org/x"'), "source"),
    (('summary = "s"\n', ""), "summary"),
    (('summary = "s"', 'summary = "two\\nlines"'), "summary"),
    (('id = "x-1"', 'id = "Bad Id"'), "id"),
    (('cudnn = { min = "9.1.0", max = "9.2.0" }', 'cudnn = { min = "9.2.0", max = "9.1.0" }'), "cudnn"),
    (('cudnn = { min = "9.1.0", max = "9.2.0" }', 'cudnn = { min = "9.1" }'), "cudnn.min"),
    (('cudnn = { min = "9.1.0", max = "9.2.0" }', 'cudnn = { low = "9.1.0" }'), "cudnn.low"),
    (('cudnn = { min = "9.1.0", max = "9.2.0" }', 'ops = ["conv2d"]'), "torch/cuda/cudnn/capability"),
    (('workaround = "w"', 'workaround = "w"\nops = ["conv4d"]'), "ops"),
    (('workaround = "w"', 'workaround = "w"\nfamilies = ["cudnn_whatever"]'), "families"),
    (('workaround = "w"', 'workaround = "w"\ncolour = "red"'), "colour"),
    (('max = "9.2.0" }', 'max = "9.2.0" }\n[issue.when]\nmin_batch = true'), "when.min_batch"),
    (('max = "9.2.0" }', 'max = "9.2.0" }\n[issue.when]\nbig = true'), "when.big"),
    (('workaround = "w"', 'workaround = "w"\nmessage = "(unclosed"'), "message"),
    (('workaround = "w"', 'workaround = "w"\nmessage = ""'), "message"),
    (('workaround = "w"', 'workaround = "w"\nmessage = 3'), "message"),
    (('workaround = "w"', 'workaround = "w"\nmessage = "' + "a" * 201 + '"'), "message"),
    (('max = "9.2.0" }', 'max = "9.2.0" }\n[issue.when]\noom_fits_gpu = 1'), "when.oom_fits_gpu"),
])
def test_a_bad_entry_is_one_clear_error(edit: tuple[str, str], field: str) -> None:
    assert known.parse(GOOD, "k.toml")[0].id == "x-1"
    text = GOOD.replace(*edit)
    assert text != GOOD
    with pytest.raises(KnownIssuesError) as raised:
        known.parse(text, "k.toml")
    message = str(raised.value)
    assert isinstance(raised.value, BadInput) and len(raised.value.lines()) == 1
    assert message.startswith("k.toml: issue ") and f": {field}: " in message, message
    if field != "id":
        assert "issue 'x-1'" in message


@pytest.mark.parametrize(("text", "why"), [
    ("[[issue]\n", "not TOML"),
    ("", r"no \[\[issue\]\] entries"),
    ("title = 'x'\n" + GOOD, "unknown top-level key 'title'"),
    (GOOD + GOOD, "issue 'x-1': id: used twice"),
])
def test_a_bad_file_is_one_clear_error(text: str, why: str) -> None:
    with pytest.raises(KnownIssuesError, match=why):
        known.parse(text, "k.toml")


# --- issue 34: a link is attached only when the failure matches what its source reports ------------
def test_a_message_pattern_must_be_found_in_the_failure_it_annotates() -> None:
    """An entry that quotes the error's words annotates a failure only when its message has them;
    without a failure to annotate (triage's log matching, the meets tests) messages are not checked."""
    bf16 = by_id("bf16-conv-needs-sm80")
    assert bf16.message
    params, stack = MEETS[bf16.id]
    said = "RuntimeError: getCudnnDataTypeFromScalarType() not supported for BFloat16"
    assert known.match(params, stack, message=said, failed=True, issues=[bf16]) == [bf16]
    assert known.match(params, stack, message="CUDNN_STATUS_NOT_SUPPORTED", failed=True, issues=[bf16]) == []
    assert known.match(params, stack, message=None, failed=True, issues=[bf16]) == []
    assert known.match(params, stack, issues=[bf16]) == [bf16]


def test_matched_says_which_facts_of_the_failure_met_the_entry() -> None:
    dgrad = by_id("dgrad-batch-over-65535-stride-cudnn-8-9-7")
    stack = MEETS[dgrad.id][1]
    why = known.matched(dgrad, stack, "cudnn_not_supported")
    assert why == "family cudnn_not_supported; dgrad=true; min_batch=65536; min_stride=2; cuDNN 8.9.6 in [-inf, 8.9.7)"
    assert known.annotation(dgrad, why).endswith(f"{dgrad.source} [matched: {why}]")
    bf16 = by_id("bf16-conv-needs-sm80")  # its source states no family: the line does not claim one
    assert known.matched(bf16, MEETS[bf16.id][1], "other").startswith(
        "any family (the source states none); message /not supported for BFloat16/; bfloat16; capability 7.5 in")


# --- issue 46: a claim no wider than its source ----------------------------------------------------
HELD = "conv-memory-held-cudnn-9-18-1"
HONEST_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 30.00 GiB. GPU 0 has a total capacity "
              "of 22.05 GiB of which 21.80 GiB is free. Including non-PyTorch memory, this process has 250.00 MiB "
              "memory in use.")
_NOT_SUPPORTED = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
_MISMATCH = "AssertionError: numeric mismatch: max abs error 3.1 > tolerance 0.01"
_OOM_FITS = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
             "22.05 GiB of which 1.50 GiB is free.")
# For each entry: the failure its source describes (params, stack, family, message), as the report
# and the atlas meet it (a failure annotated: the family and the message are checked).
SOURCE_EXAMPLES: dict[str, tuple[dict[str, Any], Stack, str, str]] = {
    # pytorch#121834: the warning torch 2.3.0 prints for each plan it tries and skips
    "plan-failed-warning-torch-2-3-0": (
        case(autocast="float16"), Stack(torch="2.3.0+cu121"), "cudnn_not_supported",
        "UserWarning: Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: cudnnFinalize "
        "Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_SUPPORTED"),
    # pytorch#134890: a sample past 2^31 elements kept off cuDNN < 9.3: the fallback's memory
    "int32-no-split-before-cudnn-9-3": (
        case(n=1, c_in=64, c_out=64, size=[6000, 6000], dtype="float16"), Stack(cudnn=90100), "cuda_oom", _OOM_FITS),
    # pytorch#152816 / #153101's test: Conv2d(2, 2, 3, padding=1, groups=2) on 1x2x32800x32800
    "depthwise-int32-no-split-native-kernel": (
        case(n=1, c_in=2, c_out=2, size=[32800, 32800], groups=2), Stack(torch="2.7.0+cu126"), "other",
        "RuntimeError: depthwise conv failed"),
    # pytorch#163171's test: the batch-splittable 100x2x3280x3280 channels_last depthwise conv
    "depthwise-64bit-channels-last-cudnn-9-11": (
        case(n=100, c_in=2, c_out=2, size=[3280, 3280], groups=2, memory_format="channels_last"),
        Stack(cudnn=91200), "numeric_mismatch", _MISMATCH),
    # pytorch#163539: bf16 conv3d, kernel not 1x1x1, on the cuDNN 9.10.2 torch 2.8 ships
    "conv3d-half-wrong-results-cudnn-9-8": (
        _CONV3D_HALF, Stack(torch="2.8.0+cu128", cudnn=91002), "numeric_mismatch", _MISMATCH),
    "conv3d-half-off-cudnn-torch-2-9-0": (
        _CONV3D_HALF, Stack(torch="2.9.0+cu128", cudnn=91002), "cuda_oom", _OOM_FITS),
    "conv3d-half-off-cudnn-before-9-15": (
        _CONV3D_HALF, Stack(torch="2.9.1+cu128", cudnn=91002), "cuda_oom", _OOM_FITS),
    "conv3d-tf32-broken-kernel-cudnn-9-10-2": (
        case(op="conv3d", size=[8, 8, 8], kernel=3), Stack(torch="2.8.0", cudnn=91002, capability="9.0"),
        "numeric_mismatch", _MISMATCH),
    # pytorch#81139 (and the error pytorch#88571 quotes): a bf16 Conv2d on a pre-Ampere GPU
    "bf16-conv-needs-sm80": (
        case(dtype="bfloat16", c_in=3, c_out=3, kernel=5, padding=0, size=[10, 10], n=8), Stack(capability="7.0"),
        "other", "RuntimeError: getCudnnDataTypeFromScalarType() not supported for BFloat16"),
    # cuDNN 8.9.7's notes: backward data, batch > 65,535 and stride > 1
    "dgrad-batch-over-65535-stride-cudnn-8-9-7": (
        case(n=65536, stride=2, backward=True, direction="backward_input"), Stack(cudnn=8906),
        "cudnn_not_supported", _NOT_SUPPORTED),
    "dgrad-algo0-workspace-cudnn-7-6-0": (
        case(backward=True), Stack(cudnn=7600), "cudnn_not_supported", _NOT_SUPPORTED),
    "unusable-heuristic-algo-before-torch-1-5": (
        case(op="conv_transpose3d", size=[8, 8, 8], kernel=3), Stack(torch="1.4.0"), "cudnn_not_supported",
        _NOT_SUPPORTED),
    # cuDNN 9.18.1's notes: memory held until the process ends, not growing: an OOM it can explain
    # asks for no more than the GPU holds
    HELD: (case(), Stack(cudnn=91801), "cuda_oom", _OOM_FITS),
}


def test_every_entry_has_the_example_its_source_describes() -> None:
    assert sorted(SOURCE_EXAMPLES) == sorted(IDS)


@pytest.mark.parametrize("ident", IDS)
def test_each_entry_claims_the_example_its_source_describes(ident: str) -> None:
    params, stack, family, message = SOURCE_EXAMPLES[ident]
    issue = by_id(ident)
    assert not issue.families or family in issue.families
    assert issue in known.match(params, stack, family=family, message=message, failed=True)


@pytest.mark.parametrize("cudnn", [91801, 92800, 91900, 90900])
def test_an_honest_oom_is_not_claimed_as_memory_cudnn_holds(cudnn: int) -> None:
    """Issue 46: an OOM asking for more than the GPU has, on cuDNN 9.28 (or 9.18.1 itself), was
    annotated "known: cuDNN 9.18.1 lists a known issue ... released when the process ends"."""
    held = by_id(HELD)
    assert held not in known.match(case(), Stack(cudnn=cudnn), family="cuda_oom", message=HONEST_OOM, failed=True)
    assert held not in known.match_stack(Stack(cudnn=cudnn), ["cuda_oom"])  # a log: no message to weigh


def test_the_held_memory_entry_is_bounded_to_the_release_that_lists_it() -> None:
    held = by_id(HELD)
    assert held.cudnn == known.Range(min="9.18.1", max="9.19.0")
    assert held not in known.match(case(), Stack(cudnn=92800), family="cuda_oom", message=_OOM_FITS, failed=True)


def _version_outside(fact: str, bound: known.Range) -> st.SearchStrategy[str | int | None]:
    """A stack value outside [min, max) (or unknown), compared here by its numbers, not by known.py."""
    def key(version: str) -> tuple[int, ...]:
        return tuple(int(p) for p in version.split("."))

    if fact == "cudnn":
        low = known.cudnn_number(bound.min) if bound.min else None
        high = known.cudnn_number(bound.max) if bound.max else None
        sides: list[st.SearchStrategy[int | None]] = [st.none()]
        if low is not None:
            sides.append(st.integers(1000, low - 1))
        if high is not None:
            sides.append(st.integers(high, 99_999))
        return st.one_of(sides)
    parts = 2 if fact in ("cuda", "capability") else 3
    numbers = st.tuples(*[st.integers(0, 20)] * parts)
    outside = numbers.filter(lambda n: (bool(bound.min) and n < key(bound.min)) or (bool(bound.max) and n >= key(bound.max)))
    suffix = st.sampled_from(["", "+cu121", ".dev20250801", "a0+git1234"]) if fact == "torch" else st.just("")
    return st.one_of(st.none(), st.builds(lambda n, s: ".".join(map(str, n)) + s, outside, suffix))


_OTHER_MESSAGES = st.one_of(st.sampled_from([_NOT_SUPPORTED, _MISMATCH, HONEST_OOM, "RuntimeError: bad", ""]), st.text(max_size=80))


@st.composite
def failures_outside(draw: st.DrawFn, issue: KnownIssue) -> tuple[dict[str, Any], Stack, str, str, list[str]]:
    """A failure of the entry's family (its source's example) moved outside one or more of its
    conditions: a version range, an op, dtype, memory format, a [when] predicate, the message."""
    params, stack, family, message = SOURCE_EXAMPLES[issue.id]
    params = dict(params)
    if issue.families:
        family = draw(st.sampled_from(issue.families))
    moves = [f"range.{fact}" for fact in RANGES if getattr(issue, fact) is not None]
    moves += [field for field in ("dtypes", "memory_formats", "directions", "ops") if getattr(issue, field)]
    moves += [f"when.{name}" for name, _ in (*issue.when, *issue.message_when)]
    moves += ["message"] if issue.message else []
    chosen = draw(st.lists(st.sampled_from(moves), min_size=1, unique=True))
    if "when.dgrad" in chosen and "ops" in chosen:
        chosen.remove("ops")  # moving the op to a transposed one would make it dgrad again
    rank = len(params["size"]) if isinstance(params["size"], list) else 1
    for move in sorted(chosen, key=lambda m: m == "ops"):
        kind, _, name = move.partition(".")
        if kind == "range":
            stack = with_fact(stack, name, draw(_version_outside(name, getattr(issue, name))))
        elif move == "dtypes":
            params.update(dtype=draw(st.sampled_from([d for d in known.DTYPES if d not in issue.dtypes])), autocast=None)
        elif move == "memory_formats":
            fitting = {"contiguous", "channels_last" if rank == 2 else "channels_last_3d"} - set(issue.memory_formats)
            params["memory_format"] = draw(st.sampled_from(sorted(fitting)))
        elif move == "directions":
            params.update(direction=draw(st.sampled_from([d for d in known.DIRECTIONS if d not in issue.directions])))
        elif move == "ops":
            params["op"] = draw(st.sampled_from([o for o, r in known.SPATIAL_DIMS.items()
                                                 if r == rank and o not in issue.ops]))
        elif move == "message":
            message = draw(_OTHER_MESSAGES.filter(lambda m: re.search(issue.message, m) is None))
        else:
            arg = dict((*issue.when, *issue.message_when))[name]
            params, message = draw(_predicate_outside(name, arg, params, rank, message))
    return params, stack, family, message, chosen


@st.composite
def _predicate_outside(draw: st.DrawFn, name: str, arg: bool | int, params: dict[str, Any], rank: int,
                       message: str) -> tuple[dict[str, Any], str]:
    small = st.lists(st.integers(4, 64), min_size=rank, max_size=rank)
    if name == "oom_fits_gpu":
        return params, draw(oom_messages(fits=not arg))[0]
    if name in ("min_batch", "min_stride"):
        low = draw(st.integers(1, int(arg) - 1))
        return {**params, **({"n": low} if name == "min_batch" else {"stride": low})}, message
    big = {"size": [1 << 31] * rank}  # past 2^31 elements in one sample (the arithmetic only)
    moved: dict[str, Any] = {  # the predicate made to say the opposite of arg
        "depthwise": {"groups": 1} if arg else {"groups": params["c_in"], "c_out": params["c_in"]},
        "over_int32": {"size": draw(small), "n": draw(st.integers(1, 8))} if arg else big,
        "int32_no_split": {"size": draw(small)} if arg else big,
        "kernel_all_ones": {"kernel": 3, "padding": 1} if arg else {"kernel": 1, "padding": 0},
        "dgrad": {"op": params["op"].replace("conv_transpose", "conv"),
                  **draw(st.sampled_from([{"backward": False, "direction": None},
                                          {"backward": True, "direction": "backward_weight"},
                                          {"backward": False, "direction": "forward"}]))}
        if arg else {"backward": True, "direction": "backward_input"},
        "tf32": {"tf32": not arg},
    }[name]
    return {**params, **moved}, message


@pytest.mark.parametrize("ident", IDS)
@given(data=st.data())
def test_a_failure_of_the_family_outside_any_condition_is_not_claimed(ident: str, data: st.DataObject) -> None:
    """Issue 46: a claim is printed only when all of an entry's conditions hold."""
    issue = by_id(ident)
    params, stack, family, message, moved = data.draw(failures_outside(issue))
    assert issue not in known.match(params, stack, family=family, message=message, failed=True), moved


@given(oom_messages(fits=False), st.one_of(st.sampled_from([91801, 91900, 92800]), st.integers(1000, 99_999)),
       st.sampled_from([case(), _CONV3D_HALF]))
def test_no_oom_past_the_gpus_capacity_is_claimed_as_held_memory(drawn: tuple[str, bool], cudnn: int,
                                                                 params: dict[str, Any]) -> None:
    message, _ = drawn
    assert by_id(HELD) not in known.match(params, Stack(cudnn=cudnn), family="cuda_oom", message=message, failed=True)


@pytest.mark.parametrize(("message", "sizes"), [
    (HONEST_OOM, (30 * 2**30, 22.05 * 2**30)),
    ("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.2 GiB already "
     "allocated; 3.75 MiB free; 14.6 GiB reserved in total by PyTorch)", (20 * 2**20, 15.78 * 2**30)),
    ("CUDA out of memory. Tried to allocate 512 bytes. the GPU has a total capacity of 1.00 GiB of which 0 bytes is free",
     (512, 2**30)),
    ("CUDA out of memory. Tried to allocate 2.00 GiB", None),
    ("CUDNN_STATUS_ALLOC_FAILED", None),
])
def test_oom_sizes_reads_both_wordings(message: str, sizes: tuple[float, float] | None) -> None:
    assert known.oom_sizes(message) == sizes


def test_a_message_predicate_is_no_case_condition_and_a_log_cannot_answer_it() -> None:
    held = by_id(HELD)
    assert held.message_when == (("oom_fits_gpu", True),) and held.when == () and held.needs_message
    assert held.conditions == ""  # triage prints no "[if the conv is: ...]" for it
    stack = SOURCE_EXAMPLES[HELD][1]
    assert known.match(case(), stack, family="cuda_oom", message=None, failed=True, issues=[held]) == []
    assert known.match(case(), stack, family="cuda_oom", message="CUDNN_STATUS_ALLOC_FAILED", failed=True,
                       issues=[held]) == []
    assert known.match_stack(stack, ["cuda_oom"], issues=[held]) == []
    assert known.matched(held, stack, "cuda_oom") == "family cuda_oom; oom_fits_gpu=true; cuDNN 9.18.1 in [9.18.1, 9.19.0)"
