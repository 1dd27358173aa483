"""PyTorch's printed repro snippets in a failed job's log, as `[[case]]` entries of a case file
(`convmatrix cases --from-log LOG`): the layer that failed in production becomes a regression case.

What PyTorch prints (aten/src/ATen/native/cudnn/ConvShared.cpp, `repro_from_args`, appended to a
cuDNN error of the v7 API's convolution path): "You can try to repro this exception using the
following code snippet...", then

    torch.backends.cudnn.benchmark = True|False          (and deterministic, allow_tf32)
    data = torch.randn([N, C, ...], dtype=torch.half, device='cuda', requires_grad=True)
           (then .to(memory_format=torch.channels_last) where the input was)
    net = torch.nn.Conv2d(C_in, C_out, kernel_size=[..], padding=[..], stride=[..], dilation=[..], groups=G)
    out = net(data)
    out.backward(torch.randn_like(out))

and a `ConvolutionParams` block whose `data_type = CUDNN_DATA_BFLOAT16` names the dtype the
snippet cannot: its dtype switch knows float, double and half only and prints
`torch.unsupported` for anything else. The snippet always builds a forward `ConvNd` with bias and
always runs backward, so a captured case is `direction = "backward"` with a bias; a conv1d shows as
the Conv2d of height 1 that cuDNN ran. The v8 API's "GET/FIND was unable to find an engine"
errors print no snippet: such a log gets a note, not a case.

The log is untrusted: nothing in it is evaluated; every number is read by a regular expression
of digits, lines count by their first LINE_CAP characters, and at most MAX_CASES distinct cases are
kept (a job of 64 ranks prints the same snippet 64 times: one case).
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from convmatrix.errors import BadInput
from convmatrix.results.families import strip_ansi
from convmatrix.triage import ranks

MARKER = "You can try to repro this exception using the following code snippet"
LINE_CAP = 16 << 10
MAX_CASES = 1000
SNIPPET_LINES = 60  # a snippet and its ConvolutionParams block fit well within this
MAX_NOTES = 20
# cuDNN errors a snippet could have come with; the v8 API's engine errors never bring one.
_ERRORS = re.compile(r"CUDNN_STATUS_[A-Z_]+|(?:GET|FIND) was unable to find an engine")
_FLAG = re.compile(r"torch\.backends\.cudnn\.(benchmark|deterministic|allow_tf32) = (True|False)")
_INTS = r"\[(\d+(?:, ?\d+)*)\]"
_DATA = re.compile(r"data = torch\.randn\(" + _INTS + r", dtype=torch\.(\w+), device='cuda', requires_grad=True\)"
                   r"(?:\.to\(memory_format=torch\.(channels_last|channels_last_3d)\))?")
_NET = re.compile(r"net = torch\.nn\.Conv([123])d\((\d+), (\d+), kernel_size=" + _INTS + r", padding=" + _INTS
                  + r", stride=" + _INTS + r", dilation=" + _INTS + r", groups=(\d+)\)")
_DATA_TYPE = re.compile(r"data_type = CUDNN_DATA_(\w+)")
_BLOCK_END = re.compile(r"\s*allow_tf32 = (?:true|false)\s*$")
_TORCH_DTYPES = {"float": "float32", "half": "float16"}
_CUDNN_DTYPES = {"FLOAT": "float32", "HALF": "float16", "BFLOAT16": "bfloat16"}


@dataclass
class Found:
    """The cases a log's snippets make, in the order they were first printed, and what else a
    reader should know (a snippet that could not be read, an error that brought none)."""

    cases: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def lines_of(path: str) -> Iterator[str]:
    """A log's lines (plain or gzip, by its magic bytes), each cut at LINE_CAP characters."""
    try:
        with open(path, "rb") as probe:
            zipped = probe.read(2) == b"\x1f\x8b"
        opener: Any = gzip.open if zipped else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
            while True:
                line = handle.readline(LINE_CAP)
                if not line:
                    return
                if not line.endswith("\n"):  # a longer line: the rest of it is read past, never kept
                    while True:
                        rest = handle.readline(LINE_CAP)
                        if not rest or rest.endswith("\n"):
                            break
                yield line.rstrip("\n")
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise BadInput(f"{path}: cannot read the log ({getattr(exc, 'strerror', None) or exc})") from None


def cases_from_log(path: str) -> Found:
    return cases_from_text(lines_of(path), name=path)


def cases_from_text(lines: Iterable[str], *, name: str = "-") -> Found:
    """Every snippet among the lines, as case entries (see the module's doc)."""
    found = Found()
    seen: dict[str, int] = {}
    window: list[tuple[int, str]] = []  # the lines of the snippet being read: (line number, text)
    errors_without: list[int] = []  # lines of a cuDNN error that no snippet followed
    pending_error: int | None = None
    for number, raw in enumerate(lines, 1):
        _prefix, text = ranks.split_prefix(strip_ansi(raw[:LINE_CAP]))
        text = text.lstrip("# ").rstrip() if text.startswith("#") else text.rstrip()
        if MARKER in text:
            if window:
                _take(window, name, found, seen)
            window = [(number, text)]
            pending_error = None
            continue
        if window:
            window.append((number, text))
            if len(window) >= SNIPPET_LINES or _block_ended(window):
                _take(window, name, found, seen)
                window = []
            continue
        if _ERRORS.search(text):
            if pending_error is not None:
                errors_without.append(pending_error)
            pending_error = number
        if len(found.cases) >= MAX_CASES:
            found.notes.append(f"{name}: at most {MAX_CASES} cases are captured; the rest of the log was not read")
            return found
    if window:
        _take(window, name, found, seen)
    if pending_error is not None:
        errors_without.append(pending_error)
    if errors_without and not found.cases:
        found.notes.append(f"{name}: line {errors_without[0]}: a cuDNN error with a traceback only, no repro snippet "
                           "(PyTorch prints one on the v7 API's errors, not for the v8 API's \"unable to find an "
                           "engine\"): nothing to capture there; a case file can still name that layer by hand")
    found.notes = found.notes[:MAX_NOTES]
    return found


def _block_ended(window: list[tuple[int, str]]) -> bool:
    """The ConvolutionParams block's last field (its own lower-case `allow_tf32 = true`) is read."""
    return _BLOCK_END.match(window[-1][1]) is not None


def _take(window: list[tuple[int, str]], name: str, found: Found, seen: dict[str, int]) -> None:
    start = window[0][0]
    entry = parse(" \n".join(text for _, text in window))
    if isinstance(entry, str):
        if len(found.notes) < MAX_NOTES:
            found.notes.append(f"{name}: line {start}: a repro snippet that could not be read ({entry}); skipped")
        return
    key = json.dumps(entry, sort_keys=True)
    if key in seen:  # the same layer printed again (another rank, another step)
        return
    seen[key] = start
    number = len(found.cases) + 1
    entry = {"name": f"captured_{number}", **entry, "captured_from": f"{name}:{start}",
             "source": f"captured by convmatrix cases --from-log from {name} line {start}"}
    found.cases.append(entry)


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def parse(snippet: str) -> dict[str, Any] | str:
    """One snippet's text as a case entry, or why it cannot be one."""
    data, net = _DATA.search(snippet), _NET.search(snippet)
    if data is None or net is None:
        return "no `data = torch.randn(...)` or `net = torch.nn.ConvNd(...)` line in the expected form"
    shape = _ints(data.group(1))
    dims = int(net.group(1))
    if len(shape) != dims + 2:
        return f"a {dims}d conv on a {len(shape)}-d input"
    dtype = _TORCH_DTYPES.get(data.group(2))
    block = _DATA_TYPE.search(snippet)
    if block is not None and (dtype is None or block.group(1) == "BFLOAT16"):
        dtype = _CUDNN_DTYPES.get(block.group(1))  # torch.unsupported: bf16 among others
    if dtype is None:
        return f"dtype torch.{data.group(2)} with no ConvolutionParams data_type this suite runs"
    flags = {key: value == "True" for key, value in _FLAG.findall(snippet)}
    c_in, c_out = int(net.group(2)), int(net.group(3))
    if shape[1] != c_in:
        return f"an input of {shape[1]} channels into Conv{dims}d({c_in}, ...)"
    entry: dict[str, Any] = {
        "op": f"conv{dims}d", "input": shape, "out_channels": c_out,
        "kernel": _ints(net.group(4)), "padding": _ints(net.group(5)), "stride": _ints(net.group(6)),
        "dilation": _ints(net.group(7)), "groups": int(net.group(8)), "bias": True, "dtype": dtype,
        "memory_format": data.group(3) or "contiguous", "direction": "backward",
    }
    # A setting at torch's default (benchmark and deterministic off, cuDNN's TF32 on) is left to
    # the run, as the catalog's cases leave it; only what the job changed is forced by the case.
    for flag, default in (("benchmark", False), ("deterministic", False), ("allow_tf32", True)):
        if flag in flags and flags[flag] != default:
            entry[flag] = flags[flag]
    return entry


def to_toml(cases: list[dict[str, Any]], log: str) -> str:
    """A case file of the captured cases (the keys suites/casefile.py reads)."""
    out = [f"# Captured by `convmatrix cases --from-log` from {_comment(log)}: each PyTorch repro snippet in",
           "# the log, as the cuDNN call saw it (the snippet always runs backward, and a conv1d shows as",
           "# the Conv2d of height 1 that cuDNN ran). Rename the cases; add `sources` for upstream reports.", ""]
    for case in cases:
        out.append("[[case]]")
        out += [f"{key} = {_value(value)}" for key, value in case.items()]
        out.append("")
    return "\n".join(out)


def _comment(text: str) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:200]


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    return json.dumps(str(value))  # a JSON string is a TOML basic string for printable text and escapes
