"""results/known.py and known_issues.toml: the file validates, every entry is sourced, and each
entry matches a case and stack that meet it and nothing just outside any of its bounds."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import pytest

from convmatrix.errors import BadInput
from convmatrix.results import known
from convmatrix.results.known import KnownIssue, KnownIssuesError, Stack

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
    "conv-memory-held-cudnn-9-18-1": (case(), Stack(cudnn=91900)),
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
