"""Known upstream problems: the facts in known_issues.toml and the one matcher of them.

The report annotates a failing case with the entries its params and stack meet (`match`,
`annotation`); triage matches a log's versions and failure families (`match_stack`). The file's
header documents the schema: version ranges are [min, max), min inclusive and max exclusive,
either side optional.

No false "known" claims: an entry whose range needs a stack fact the stack does not have (None,
or a version that cannot be read) does not match, and neither does an entry whose case condition
needs a params field the results line does not have. A failure is claimed only when every
condition of the entry holds: its family, case conditions, ranges, and what its message must say
(a pattern; an OOM's request against the GPU's capacity); a log with no message to weigh
(match_stack) claims no entry that needs one. Standard library only.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from convmatrix.errors import BadInput
from convmatrix.matrix.stacks import cudnn_int, dotted_cudnn
from convmatrix.results import rundir
from convmatrix.results.families import FAMILIES

FILE = "known_issues.toml"
# The vocabulary of a case is the catalog's own (suites/vocabulary.py, which suites/catalog.py
# takes its names from, loaded by its path), so that a facts entry can name nothing the suite does
# not run. The vocabulary alone: the catalog builds every case, a tenth of a second of each report.
_VOCABULARY = rundir.suite_module("vocabulary")
INT32_MAX: int = _VOCABULARY.INT32_MAX
SPATIAL_DIMS: dict[str, int] = dict(_VOCABULARY.SPATIAL_DIMS)
DTYPES: tuple[str, ...] = tuple(_VOCABULARY.DTYPES)
MEMORY_FORMATS: tuple[str, ...] = tuple(_VOCABULARY.MEMORY_FORMATS)
LAYOUTS: tuple[str, ...] = tuple("none" if layout is None else layout for layout in _VOCABULARY.LAYOUTS)  # "none": null
DIRECTIONS: tuple[str, ...] = tuple(_VOCABULARY.DIRECTIONS)
_GRAD_INPUT = frozenset({"backward", "backward_input", "double_backward"})
# [issue.when] predicates and the TOML type each takes.
PREDICATES: dict[str, type] = {
    "depthwise": bool,
    "over_int32": bool,
    "int32_no_split": bool,
    "kernel_all_ones": bool,
    "dgrad": bool,
    "tf32": bool,
    "min_batch": int,
    "min_stride": int,
}
# [issue.when] predicates on the failure's message (checked where a failure is annotated).
MESSAGE_PREDICATES: dict[str, type] = {
    "oom_fits_gpu": bool,
}
# A CUDA OOM as PyTorch words it: the request, and the GPU's total capacity (2.1+: "has a total
# capacity of 22.05 GiB"; before: "(GPU 0; 22.05 GiB total capacity; ...").
_SIZE = r"(\d+(?:\.\d+)?)\s?(bytes|KiB|MiB|GiB|TiB)\b"
_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_OOM_REQUEST = re.compile(r"\bTried to allocate " + _SIZE)
_OOM_CAPACITY = re.compile(r"\btotal capacity of " + _SIZE + "|" + _SIZE + r" total capacity\b")
# Stack facts a range may bound, and the form of their version strings in the file.
_VERSION_FORMS = {
    "torch": re.compile(r"\d+\.\d+\.\d+"),
    "cuda": re.compile(r"\d+\.\d+"),
    "cudnn": re.compile(r"\d+\.\d+\.\d+"),
    "capability": re.compile(r"\d+\.\d+"),
}
_LISTS = {
    "ops": tuple(SPATIAL_DIMS),
    "dtypes": DTYPES,
    "memory_formats": MEMORY_FORMATS,
    "layouts": LAYOUTS,
    "directions": DIRECTIONS,
    "families": FAMILIES,
}
_TEXT = ("id", "summary", "source", "fixed_in", "workaround")
_KEYS = frozenset({*_TEXT, *_VERSION_FORMS, *_LISTS, "when", "message"})
MAX_MESSAGE_PATTERN = 200  # a message pattern names what the source quotes, not a program
_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,79}")
_LEADING_VERSION = re.compile(r"\s*v?(\d+(?:\.\d+)*)")


class KnownIssuesError(BadInput):
    """known_issues.toml is not what the schema says: the message names the entry and field."""


@dataclass(frozen=True)
class Range:
    """[min, max): min inclusive, max exclusive; "" = unbounded on that side."""

    min: str = ""
    max: str = ""

    def __str__(self) -> str:
        return f"[{self.min or '-inf'}, {self.max or 'inf'})"


@dataclass(frozen=True, kw_only=True)
class KnownIssue:
    id: str
    summary: str
    source: str
    fixed_in: str  # "" = not fixed (or not known to be)
    workaround: str
    families: tuple[str, ...] = ()  # () = any family
    torch: Range | None = None  # None = any version
    cuda: Range | None = None
    cudnn: Range | None = None
    capability: Range | None = None
    ops: tuple[str, ...] = ()  # () = any
    dtypes: tuple[str, ...] = ()
    memory_formats: tuple[str, ...] = ()
    layouts: tuple[str, ...] = ()
    directions: tuple[str, ...] = ()
    when: tuple[tuple[str, bool | int], ...] = ()  # (predicate, value) pairs, all must hold
    message: str = ""  # a regular expression the failure's message must contain; "" = any
    message_when: tuple[tuple[str, bool | int], ...] = ()  # MESSAGE_PREDICATES, all must hold

    @property
    def needs_message(self) -> bool:
        """Whether a claim rests on the failure's words (a pattern or a message predicate)."""
        return bool(self.message or self.message_when)

    @property
    def conditions(self) -> str:
        """The case conditions in words ("" when there are none), e.g.
        "conv3d; float16/bfloat16; contiguous; kernel_all_ones=false"."""
        parts = ["/".join(values) for values in
                 (self.ops, self.dtypes, self.memory_formats, self.layouts, self.directions) if values]
        parts += [f"{name}={str(value).lower()}" for name, value in self.when]
        return "; ".join(parts)


@dataclass(frozen=True)
class Stack:
    """What is known of the stack a case ran on; None = unknown (matches no range)."""

    torch: str | None = None  # torch.__version__, "2.3.0+cu121"
    cuda: str | None = None  # torch.version.cuda, "12.1"
    cudnn: int | None = None  # torch.backends.cudnn.version(), 90100 or 8907
    capability: str | None = None  # "9.0"


# -- loading ---------------------------------------------------------------------------------------
@functools.cache
def load() -> tuple[KnownIssue, ...]:
    """The entries of the known_issues.toml beside this module, checked (KnownIssuesError if not)."""
    text = resources.files("convmatrix.results").joinpath(FILE).read_text(encoding="utf-8")
    return parse(text, FILE)


def parse(text: str, name: str = FILE) -> tuple[KnownIssue, ...]:
    """A known-issues file's entries; KnownIssuesError naming the entry and field on a bad one."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KnownIssuesError(f"{name}: not TOML: {exc}") from None
    extra = sorted(set(raw) - {"issue"})
    if extra:
        raise KnownIssuesError(f"{name}: unknown top-level key {extra[0]!r} (only [[issue]] tables)")
    entries = raw.get("issue", [])
    if not isinstance(entries, list) or not entries:
        raise KnownIssuesError(f"{name}: no [[issue]] entries")
    issues: list[KnownIssue] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries, 1):
        issue = _entry(entry, f"{name}: issue {index}")
        if issue.id in seen:
            raise KnownIssuesError(f"{name}: issue {issue.id!r}: id: used twice")
        seen.add(issue.id)
        issues.append(issue)
    return tuple(issues)


def _entry(entry: Any, where: str) -> KnownIssue:
    if not isinstance(entry, dict):
        raise KnownIssuesError(f"{where}: not a table")
    ident = entry.get("id")
    if isinstance(ident, str) and _ID.fullmatch(ident):
        where = f"{where.rsplit(': issue ', 1)[0]}: issue {ident!r}"

    def bad(field: str, problem: str) -> KnownIssuesError:
        return KnownIssuesError(f"{where}: {field}: {problem}")

    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise bad(unknown[0], "unknown field")
    text: dict[str, str] = {}
    for field in _TEXT:
        value = entry.get(field)
        if not isinstance(value, str):
            raise bad(field, "missing or not a string")
        if "\n" in value or "\r" in value or value != value.strip():
            raise bad(field, "must be one line without surrounding spaces")
        if not value and field != "fixed_in":
            raise bad(field, "empty")
        text[field] = value
    if not _ID.fullmatch(text["id"]):
        raise bad("id", "lower-case letters, digits and '-', up to 80")
    if not re.fullmatch(r"https://[!-~]+", text["source"]):
        raise bad("source", "an https:// URL")
    ranges = {fact: _range(entry, fact, bad) for fact in _VERSION_FORMS if fact in entry}
    if not ranges:
        raise bad("torch/cuda/cudnn/capability", "an entry needs at least one version range")
    lists = {field: _list(entry, field, bad) for field in _LISTS}
    message = _message(entry, bad)
    when = _when(entry, bad)
    return KnownIssue(
        id=text["id"], summary=text["summary"], source=text["source"], fixed_in=text["fixed_in"],
        workaround=text["workaround"], families=lists["families"], torch=ranges.get("torch"),
        cuda=ranges.get("cuda"), cudnn=ranges.get("cudnn"), capability=ranges.get("capability"),
        ops=lists["ops"], dtypes=lists["dtypes"], memory_formats=lists["memory_formats"],
        layouts=lists["layouts"], directions=lists["directions"], when=tuple(w for w in when if w[0] in PREDICATES),
        message=message, message_when=tuple(w for w in when if w[0] in MESSAGE_PREDICATES),
    )


def _message(entry: dict[str, Any], bad: Any) -> str:
    value = entry.get("message", "")
    if not isinstance(value, str) or "\n" in value or len(value) > MAX_MESSAGE_PATTERN:
        raise bad("message", f"one line of at most {MAX_MESSAGE_PATTERN} characters")
    if "message" in entry and not value:
        raise bad("message", "empty (leave it out to match any message)")
    try:
        re.compile(value)
    except re.error as exc:
        raise bad("message", f"not a regular expression: {exc}") from None
    return value


def _range(entry: dict[str, Any], fact: str, bad: Any) -> Range:
    value = entry[fact]
    if not isinstance(value, dict) or not value:
        raise bad(fact, 'a table { min = "...", max = "..." } with min, max or both')
    extra = sorted(set(value) - {"min", "max"})
    if extra:
        raise bad(f"{fact}.{extra[0]}", "unknown bound (min or max)")
    form = _VERSION_FORMS[fact]
    for side in ("min", "max"):
        bound = value.get(side, "")
        if not isinstance(bound, str) or (side in value and not form.fullmatch(bound)):
            raise bad(f"{fact}.{side}", f"a version like {'9.10.2' if form.pattern.count('.') == 2 else '8.0'}")
    low, high = value.get("min", ""), value.get("max", "")
    if low and high and _fact_key(fact, low) >= _fact_key(fact, high):
        raise bad(fact, f"min {low} is not below max {high} (the range is [min, max))")
    return Range(min=low, max=high)


def _list(entry: dict[str, Any], field: str, bad: Any) -> tuple[str, ...]:
    value = entry.get(field, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad(field, "a list of strings")
    for item in value:
        if item not in _LISTS[field]:
            raise bad(field, f"unknown value {item!r} (one of {', '.join(_LISTS[field])})")
    return tuple(value)


def _when(entry: dict[str, Any], bad: Any) -> tuple[tuple[str, bool | int], ...]:
    value = entry.get("when", {})
    if not isinstance(value, dict):
        raise bad("when", "a table of predicates")
    out: list[tuple[str, bool | int]] = []
    for name, arg in value.items():
        kind = PREDICATES.get(name, MESSAGE_PREDICATES.get(name))
        if kind is None:
            raise bad(f"when.{name}", f"unknown predicate (one of {', '.join([*PREDICATES, *MESSAGE_PREDICATES])})")
        if kind is int and (isinstance(arg, bool) or not isinstance(arg, int) or arg < 1):
            raise bad(f"when.{name}", "a whole number >= 1")
        if kind is bool and not isinstance(arg, bool):
            raise bad(f"when.{name}", "true or false")
        out.append((name, arg))
    return tuple(out)


# -- versions ----------------------------------------------------------------------------------------
def version_numbers(text: str) -> tuple[int, ...] | None:
    """The leading release numbers of a version, padded to three: "2.3.0+cu121" -> (2, 3, 0),
    "2.9.0.dev20250801" -> (2, 9, 0), "8.6" -> (8, 6, 0); None when it starts with no number."""
    found = _LEADING_VERSION.match(text)
    if found is None:
        return None
    numbers = tuple(int(part) for part in found.group(1).split("."))
    return (*numbers, 0, 0, 0)[:max(3, len(numbers))]


def cudnn_number(text: str | int | None) -> int | None:
    """A cuDNN version as torch.backends.cudnn.version() encodes it, from that integer ("90100",
    8907) or a dotted version ("8.9.2", "9.1.0.70"); None when it is neither."""
    if text is None or isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if text > 0 else None
    value = text.strip()
    if value.isascii() and value.isdigit():
        return int(value) if int(value) > 0 else None
    if re.fullmatch(r"\d+\.\d+\.\d+(?:\.\d+)*", value):
        return cudnn_int(value)
    return None


def _fact_key(fact: str, version: str) -> tuple[int, ...]:
    if fact == "cudnn":
        return (cudnn_int(version),)
    numbers = version_numbers(version)
    assert numbers is not None, version  # the file's versions are checked by form
    return numbers


def _in_range(fact: str, bound: Range | None, stack: Stack) -> bool:
    """Whether the stack's fact is in the range; True for no range, False for an unknown fact."""
    if bound is None:
        return True
    value = getattr(stack, fact)
    if value is None:
        return False
    if fact == "cudnn":
        key: tuple[int, ...] | None = (value,) if isinstance(value, int) and not isinstance(value, bool) else None
    else:
        key = version_numbers(value) if isinstance(value, str) else None
    if key is None:
        return False
    return (not bound.min or key >= _fact_key(fact, bound.min)) and (
        not bound.max or key < _fact_key(fact, bound.max))


def stack_matches(issue: KnownIssue, stack: Stack) -> bool:
    """Whether every version range of the entry holds on the stack (an unknown fact: no)."""
    return all(_in_range(fact, getattr(issue, fact), stack) for fact in _VERSION_FORMS)


# -- case conditions --------------------------------------------------------------------------------
class _Unknown(Exception):
    """The params cannot answer a condition (a field missing or malformed)."""


def _field(params: Mapping[str, Any], key: str) -> Any:
    if key not in params:
        raise _Unknown(key)
    return params[key]


def _int(params: Mapping[str, Any], key: str) -> int:
    value = _field(params, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Unknown(key)
    return value


def _dims(params: Mapping[str, Any], key: str, rank: int, default: int | None = None) -> tuple[int, ...]:
    """An int-or-list field as one int per spatial dimension."""
    value = params.get(key, default) if default is not None else _field(params, key)
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * rank
    if isinstance(value, list | tuple) and len(value) == rank and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    raise _Unknown(key)


def _rank(params: Mapping[str, Any]) -> int:
    op = _field(params, "op")
    if op not in SPATIAL_DIMS:
        raise _Unknown("op")
    return SPATIAL_DIMS[op]


def _shapes(params: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Input, weight and output shapes, as the catalog's Case.shapes works them out."""
    rank = _rank(params)
    transposed = str(params["op"]).startswith("conv_transpose")
    n, c_in, c_out, groups = (_int(params, k) for k in ("n", "c_in", "c_out", "groups"))
    if groups < 1:
        raise _Unknown("groups")
    size, kernel, stride, padding = (_dims(params, k, rank) for k in ("size", "kernel", "stride", "padding"))
    dilation = _dims(params, "dilation", rank)
    output_padding = _dims(params, "output_padding", rank, default=0)
    if transposed:
        out = tuple((i - 1) * s - 2 * p + d * (k - 1) + o + 1
                    for i, k, s, p, d, o in zip(size, kernel, stride, padding, dilation, output_padding, strict=True))
        weight = (c_in, c_out // groups, *kernel)
    else:
        out = tuple((i + 2 * p - d * (k - 1) - 1) // s + 1
                    for i, k, s, p, d in zip(size, kernel, stride, padding, dilation, strict=True))
        weight = (c_out, c_in // groups, *kernel)
    return {"input": (n, c_in, *size), "weight": weight, "output": (n, c_out, *out)}


def _direction(params: Mapping[str, Any]) -> str:
    direction = params.get("direction")
    if direction is None:
        backward = _field(params, "backward")
        if not isinstance(backward, bool):
            raise _Unknown("backward")
        return "backward" if backward else "forward"
    if direction not in DIRECTIONS:
        raise _Unknown("direction")
    return str(direction)


def _compute_dtype(params: Mapping[str, Any]) -> str:
    return str(params.get("autocast") or _field(params, "dtype"))


def _predicate(name: str, arg: bool | int, params: Mapping[str, Any]) -> bool:
    if name == "depthwise":
        groups, c_in = _int(params, "groups"), _int(params, "c_in")
        return (groups == c_in and groups > 1) == arg
    if name == "over_int32":
        return any(math.prod(shape) > INT32_MAX for shape in _shapes(params).values()) == arg
    if name == "int32_no_split":
        shapes = _shapes(params)
        per_sample = (math.prod(shapes["input"][1:]), math.prod(shapes["output"][1:]))
        return any(count > INT32_MAX for count in per_sample) == arg
    if name == "kernel_all_ones":
        return all(k == 1 for k in _dims(params, "kernel", _rank(params))) == arg
    if name == "dgrad":
        dgrad = str(params["op"]).startswith("conv_transpose") if "op" in params else False
        return (dgrad or _direction(params) in _GRAD_INPUT) == arg
    if name == "tf32":
        tf32 = params.get("tf32")
        if tf32 is not None and not isinstance(tf32, bool):
            raise _Unknown("tf32")
        return (tf32 is not False) == arg  # null: the run's setting, cuDNN's default of on
    if name == "min_batch":
        return _int(params, "n") >= arg
    if name == "min_stride":
        return max(_dims(params, "stride", _rank(params))) >= arg
    raise _Unknown(name)


def case_matches(issue: KnownIssue, params: Mapping[str, Any]) -> bool:
    """Whether the case (a results line's params) meets every case condition of the entry (a
    condition the params cannot answer: no)."""
    try:
        if issue.ops and _field(params, "op") not in issue.ops:
            return False
        if issue.dtypes and _compute_dtype(params) not in issue.dtypes:
            return False
        if issue.memory_formats and _field(params, "memory_format") not in issue.memory_formats:
            return False
        if issue.layouts and (params.get("layout") or "none") not in issue.layouts:
            return False
        if issue.directions and _direction(params) not in issue.directions:
            return False
        return all(_predicate(name, arg, params) for name, arg in issue.when)
    except (_Unknown, TypeError, ValueError, ZeroDivisionError):
        return False


# -- the matcher ------------------------------------------------------------------------------------
def oom_sizes(message: str) -> tuple[float, float] | None:
    """(bytes asked for, the GPU's total capacity in bytes) as a CUDA OOM message prints them;
    None when it prints not both."""
    request, capacity = _OOM_REQUEST.search(message), _OOM_CAPACITY.search(message)
    if request is None or capacity is None:
        return None
    value, unit = (capacity.group(1), capacity.group(2)) if capacity.group(1) else (capacity.group(3),
                                                                                    capacity.group(4))
    return float(request.group(1)) * _UNITS[request.group(2)], float(value) * _UNITS[unit]


def _message_predicate(name: str, arg: bool | int, message: str) -> bool:
    if name == "oom_fits_gpu":
        sizes = oom_sizes(message)
        return sizes is not None and (sizes[0] <= sizes[1]) == arg
    return False


def message_matches(issue: KnownIssue, message: str | None) -> bool:
    """Whether the failure's message says what the entry's source does: its pattern found, each
    message predicate holding (none of either: yes; one and no message, or a message that cannot
    answer it: no, a claim needs the words)."""
    if not issue.needs_message:
        return True
    if message is None:
        return False
    if issue.message and re.search(issue.message, message) is None:
        return False
    return all(_message_predicate(name, arg, message) for name, arg in issue.message_when)


def match(params: Mapping[str, Any], stack: Stack, *, family: str | None = None,
          message: str | None = None, failed: bool = False,
          issues: Iterable[KnownIssue] | None = None) -> list[KnownIssue]:
    """The known issues a case (a results line's params) on a stack meets, in file order. With
    `family` (the case's failure family), an entry that lists families must list it; with
    `failed` (a failure being annotated), an entry's message pattern must be found in `message`;
    without them neither is checked. `issues` defaults to load()."""
    return [
        issue for issue in (load() if issues is None else issues)
        if stack_matches(issue, stack) and case_matches(issue, params)
        and (family is None or not issue.families or family in issue.families)
        and (not failed or message_matches(issue, message))
    ]


_FACT_NAMES = {"torch": "torch", "cuda": "CUDA", "cudnn": "cuDNN", "capability": "capability"}


def matched(issue: KnownIssue, stack: Stack, family: str | None) -> str:
    """What a failure met of the entry, in words, for the report to say why it links the source:
    "family cudnn_not_supported; message /.../; conv3d; float16; cuDNN 9.2.0 in [9.1.0, 9.3.0)".
    An entry whose source states no family says so, rather than claiming one."""
    if not issue.families:
        parts = ["any family (the source states none)"]
    else:
        parts = [f"family {family}" if family in issue.families else f"families {'/'.join(issue.families)}"]
    if issue.message:
        parts.append(f"message /{issue.message}/")
    parts += [f"{name}={str(value).lower()}" for name, value in issue.message_when]
    if issue.conditions:
        parts.append(issue.conditions)
    for fact, name in _FACT_NAMES.items():
        bound = getattr(issue, fact)
        if bound is not None:
            seen = getattr(stack, fact)
            parts.append(f"{name} {dotted_cudnn(seen) if fact == 'cudnn' else seen} in {bound}")
    return "; ".join(parts)


def match_stack(stack: Stack, families: Iterable[str], *,
                issues: Iterable[KnownIssue] | None = None) -> list[KnownIssue]:
    """Version and family-level matching, for a log with no case params: the entries that list a
    family among `families` and whose ranges all hold on the stack. Their case conditions are not
    checked (KnownIssue.conditions says what they are); an entry whose claim rests on the
    failure's message (KnownIssue.needs_message) is not matched: a log's families weigh no words."""
    seen = set(families)
    return [issue for issue in (load() if issues is None else issues)
            if seen.intersection(issue.families) and not issue.needs_message and stack_matches(issue, stack)]


def annotation(issue: KnownIssue, why: str = "") -> str:
    """The one line every report format shows for a matched entry; `why` (matched()) says what of
    the failure met the entry."""
    fixed = f"fixed in {issue.fixed_in}" if issue.fixed_in else "not fixed upstream"
    said = f"known: {issue.summary} ({fixed}; workaround: {issue.workaround}) {issue.source}"
    return f"{said} [matched: {why}]" if why else said
