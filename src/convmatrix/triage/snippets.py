"""PyTorch's printed cuDNN repro snippets in a log, as case entries of a convmatrix case file.

What PyTorch prints, and where (every fact below was read in the PyTorch source named):

- The snippet is ``repro_from_args(params)`` in aten/src/ATen/native/cudnn/ConvShared.cpp (read at
  commits 7b2b3239feab2066310fac08b3b6b81517527db3 and 02f095500106364c5fa7da109f5dc0f35c320e41;
  before the split into ConvShared.cpp it was Conv.cpp, added by pull 45023 for 1.7). The v7 API's
  ``operator<<(ConvolutionArgs)`` prints it first, then the ``ConvolutionParams`` block, the
  input/output/weight descriptors and the pointer addresses; ``AT_CUDNN_CHECK_WITH_SHAPES`` (Conv_v7.cpp,
  aten/src/ATen/cuda/Exceptions.h) appends all of that, after a newline, to the message
  ``cuDNN error: CUDNN_STATUS_...``. So a snippet starts on its own line, right under the error.
- The v8 API (Conv_v8.cpp, read at 06ca69ca4e9b0fd02bf42f134440d33076bd1464) never prints one: its
  ``GET was unable to find an engine to execute this computation`` / ``FIND was unable to find ...``
  are plain ``TORCH_CHECK(false, ...)``, and its ``run_conv_plan`` uses ``AT_CUDNN_CHECK`` without
  the arguments. Such a log gets a note here, not a case.
- The snippet's lines, in order::

      import torch
      torch.backends.cuda.matmul.allow_tf32 = True|False
      torch.backends.cudnn.benchmark = True|False        (the global flag, benchmarkCuDNN())
      torch.backends.cudnn.deterministic = True|False    (params.deterministic)
      torch.backends.cudnn.allow_tf32 = True|False       (params.allow_tf32)
      data = torch.randn([N, C, ...], dtype=torch.float|half|double|unsupported, device='cuda', requires_grad=True)
             then .to(memory_format=torch.channels_last) or ...channels_last_3d where the params' format was
      net = torch.nn.Conv2d(C_in, C_out, kernel_size=[..], padding=[..], stride=[..], dilation=[..], groups=G)
      net = net.cuda().float|half|double|unsupported()   (and the same .to(memory_format=...))
      out = net(data)
      out.backward(torch.randn_like(out))
      torch.cuda.synchronize()

  ``dtype`` comes from a switch that knows CUDNN_DATA_FLOAT, _DOUBLE and _HALF only: bfloat16 (any
  other type too) prints ``torch.unsupported``, so the dtype is then read from the block's
  ``data_type = CUDNN_DATA_BFLOAT16`` (``cudnnTypeToString``). The net never names ``bias``, so the
  snippet's layer has nn.ConvNd's default bias (cuDNN's convolution never sees it: ConvShared.cpp's
  design note, "cuDNN convolutions does not handle bias"). The snippet always runs backward, whatever
  failed: a case is ``direction = "backward"`` (forward and backward), which runs the failing call.
- The ``ConvolutionParams`` block prints ``padding``/``stride``/``dilation`` with all ``max_dim`` = 3
  entries (``[1, 1, 0]`` for a 2-d conv), lower-case ``true``/``false``, and, since a later version,
  a first line ``memory_format = Contiguous|ChannelsLast|ChannelsLast3d``.
- The 1.7 pre-release of pull 45023 printed the snippet's own padding/stride/dilation with those 3
  entries too (``padding=[0, 0, 0]`` for a Conv2d; fixed by pull 45729, in 1.7.0): the extra
  entries are zeros and are dropped here.
- A transposed convolution is never named: its forward runs cuDNN's backward-data of the
  convolution whose params are printed (ConvShared.cpp, "Backward vs transpose convolutions"),
  so it shows as that ``ConvNd``, its input the transposed conv's output. A conv1d shows as the
  Conv2d of height 1 that cuDNN ran (Convolution.cpp's view1d_as_2d). A case is the
  convolution as printed: running it forward and backward makes the same cuDNN calls.

The log is untrusted. Nothing in it is evaluated or executed: every value is read by a regular
expression of digits and known words (no eval, no exec, no literal_eval), every number is bounded,
a line counts by its first LINE_CAP bytes (the rest is read past, never kept), at most MAX_CASES
distinct cases are kept (then reading stops, with a note), and notes are bounded too. Identical
cases (one per rank of a multi-rank job, one per step) are kept once. Lines are grouped by their
launcher tags (torchrun's ``[rank3]:``, ``srun --label``'s ``0:``), so the interleaved snippets of
two ranks are read apart.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convmatrix import tomlwrite
from convmatrix.errors import BadInput
from convmatrix.escape import one_line
from convmatrix.results.families import strip_ansi
from convmatrix.triage import ranks, scan

MARKER = "You can try to repro this exception using the following code snippet"
LINE_CAP = scan.LINE_CAP  # bytes of a line that count: the same rule as triage's
MAX_CASES = 1000
MAX_NOTES = 50
SNIPPET_LINES = 40  # the snippet (13 lines) and its ConvolutionParams block (10) fit with room
MAX_OPEN = 256  # snippets read at once (one per launcher tag); more tags than ranks is a hostile log
MAX_EXTENT = 1 << 40  # any one number of a case: suites/casefile.py refuses more
_ERROR_LOOKAHEAD = 3  # lines after a cuDNN error within which its snippet starts (it is the next line)

# Fast rejection of the ordinary line (most of a log), on raw bytes, before any decoding.
_NEEDLES_B = (MARKER.encode(), b"CUDNN_STATUS_", b"unable to find an engine", b"\x1b")
_NEEDLES = tuple(needle.decode() for needle in _NEEDLES_B)

_NUM = r"\d{1,15}"  # 15 digits: past MAX_EXTENT, far from Python's int-parsing limit
_LIST = r"\[\s*(?:" + _NUM + r"(?:\s*,\s*" + _NUM + r"){0,7})?\s*\]"
_FLAG = re.compile(r"torch\.backends\.cudnn\.(benchmark|deterministic|allow_tf32) = (True|False)")
_DATA = re.compile(
    r"data = torch\.randn\((" + _LIST + r"), dtype=torch\.(\w{1,20}), device='cuda', requires_grad=True\)"
    r"(?:\.to\(memory_format=torch\.(\w{1,20})\))?")
_NET = re.compile(
    r"net = torch\.nn\.Conv([123])d\((" + _NUM + r"), (" + _NUM + r"), kernel_size=(" + _LIST + r"), "
    r"padding=(" + _LIST + r"), stride=(" + _LIST + r"), dilation=(" + _LIST + r"), groups=(" + _NUM + r")"
    r"(?:, bias=(True|False))?\)")
_CAST = re.compile(r"net = net\.cuda\(\)\.(\w{1,20})\(\)(?:\.to\(memory_format=torch\.(\w{1,20})\))?")
_RUN = re.compile(r"out = net\(data\)")
_BACKWARD = re.compile(r"out\.backward\(")
_BLOCK_HEAD = re.compile(r"ConvolutionParams\s*")
_BLOCK_FIELD = re.compile(
    r"(memory_format|data_type|padding|stride|dilation|groups|deterministic|allow_tf32) = (\S.{0,200})")
_INT = re.compile(_NUM)
_ERROR = re.compile(r"CUDNN_STATUS_[A-Z_]{1,40}|(?:GET|FIND) was unable to find an engine")

# what repro_from_args prints, as the suite names it (double: the suite runs float64 since issue 50)
_TORCH_DTYPES = {"float": "float32", "half": "float16", "double": "float64"}
_CUDNN_DTYPES = {"CUDNN_DATA_FLOAT": "float32", "CUDNN_DATA_HALF": "float16", "CUDNN_DATA_BFLOAT16": "bfloat16",
                 "CUDNN_DATA_DOUBLE": "float64"}
_FORMATS = {"channels_last": "channels_last", "channels_last_3d": "channels_last_3d"}
_BLOCK_FORMATS = {"Contiguous": "contiguous", "ChannelsLast": "channels_last", "ChannelsLast3d": "channels_last_3d"}
_FIELD_ORDER = ("name", "op", "input", "out_channels", "kernel", "stride", "padding", "dilation", "groups",
                "output_padding", "bias", "dtype", "memory_format", "direction", "benchmark", "deterministic",
                "allow_tf32", "sources", "captured_from", "source")


@dataclass
class Found:
    """The case entries of a log's snippets, in the order first printed, and what a reader should
    know besides (a snippet that could not be read, an error that brought none, a limit reached)."""

    cases: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _Unreadable(Exception):
    """Why one snippet makes no case."""


@dataclass
class _Snippet:
    """One snippet being read: its first line and the lines of its launcher tag since."""

    start: int
    lines: list[str] = field(default_factory=list)
    in_block: bool = False
    done: bool = False

    def add(self, body: str) -> None:
        self.lines.append(body)
        text = body.strip()
        if _BLOCK_HEAD.fullmatch(text):
            self.in_block = True
        elif self.in_block and text.startswith("allow_tf32 = "):
            self.done = True  # the block's last field: what follows is descriptors and addresses
        if len(self.lines) >= SNIPPET_LINES:
            self.done = True


@dataclass
class _Waiting:
    """A cuDNN error line, and how many lines of its process came after it without a snippet."""

    line: int
    error: str
    since: int = 0


class _Reader:
    """Turns a log's lines, in order, into cases and notes (see the module's doc)."""

    def __init__(self, log: str) -> None:
        self.log = log if len(log) <= 400 else "..." + log[-400:]  # a case file's text fields are bounded
        self.prefix = _name_prefix(log)
        self.found = Found()
        self.open: dict[str, _Snippet] = {}  # launcher tags -> the snippet being read
        self.pending: dict[str, _Waiting] = {}  # tags -> a cuDNN error waiting for its snippet
        self.seen: dict[str, str] = {}  # a case's fields -> the name of the case that has them
        self.repeats = 0
        self.errors_without: dict[str, list[int]] = {}  # error text -> [first line, count] with no snippet
        self.notes_left_off = 0
        self.stopped = False

    # -- lines --------------------------------------------------------------------------------------
    def line(self, number: int, text: str) -> None:
        """One line (ANSI escapes already gone), numbered from 1."""
        tags, body = ranks.split_prefix(text)
        snippet = self.open.get(tags)
        if MARKER in body:
            if snippet is not None:
                self._close(tags)
            self.pending.pop(tags, None)
            if len(self.open) >= MAX_OPEN:
                self._close(next(iter(self.open)))
            self.open[tags] = _Snippet(number)
            return
        if snippet is not None:
            snippet.add(body)
            if snippet.done:
                self._close(tags)
            return
        waiting = self.pending.get(tags)
        if waiting is not None:
            # The snippet is the next line of the same process (the error message goes on); other
            # ranks' lines in between do not count.
            waiting.since += 1
            if waiting.since > _ERROR_LOOKAHEAD:
                del self.pending[tags]
                self._without(waiting.line, waiting.error)
        error = _ERROR.search(body)
        if error is not None and not body[:1].isspace() and not scan._is_warning(body):
            if tags in self.pending:
                earlier = self.pending.pop(tags)
                self._without(earlier.line, earlier.error)
            if len(self.pending) >= MAX_OPEN:
                oldest = self.pending.pop(next(iter(self.pending)))
                self._without(oldest.line, oldest.error)
            self.pending[tags] = _Waiting(number, error.group(0))

    def finish(self) -> Found:
        if self.stopped:
            self.open.clear()  # snippets begun past the cap are part of what was not read
        for tags in list(self.open):
            self._close(tags)
        for waiting in self.pending.values():
            self._without(waiting.line, waiting.error)
        self.pending = {}
        for error, (first, count) in self.errors_without.items():
            where = f"line {first}" + (f" (and {count - 1} more)" if count > 1 else "")
            why = ("the v8 API prints none" if "unable to find an engine" in error else
                   "PyTorch prints one only with the v7 API's convolution errors")
            self._note(f"{self.log}: {where}: a cuDNN error with a traceback only ({error}; no repro snippet: "
                       f"{why}); nothing to capture")
        if self.repeats:
            self._note(f"{self.log}: {self.repeats} snippet(s) repeated an earlier case (another rank or step): "
                       "kept once")
        if self.notes_left_off:
            self.found.notes.append(f"{self.log}: {self.notes_left_off} more note(s) left off")
        return self.found

    def _without(self, number: int, error: str) -> None:
        """A cuDNN error that brought no snippet: counted by its text (64 ranks, one note)."""
        if error in self.errors_without:
            self.errors_without[error][1] += 1
        elif len(self.errors_without) < MAX_NOTES:
            self.errors_without[error] = [number, 1]
        else:
            self.notes_left_off += 1

    def _note(self, text: str) -> None:
        if len(self.found.notes) < MAX_NOTES:
            self.found.notes.append(text)
        else:
            self.notes_left_off += 1

    # -- snippets -----------------------------------------------------------------------------------
    def _close(self, tags: str) -> None:
        snippet = self.open.pop(tags)
        try:
            fields = _parse_snippet(snippet.lines)
        except _Unreadable as exc:
            self._note(f"{self.log}: line {snippet.start}: a repro snippet that could not be read ({exc}); skipped")
            return
        key = json.dumps(fields, sort_keys=True)
        if key in self.seen:
            self.repeats += 1
            return
        if len(self.found.cases) >= MAX_CASES:
            self._note(f"{self.log}: line {snippet.start}: at most {MAX_CASES} cases are captured; the rest of the "
                       "log was not read")
            self.stopped = True
            return
        name = f"{self.prefix}_{fields['op']}_{len(self.found.cases) + 1}"
        self.seen[key] = name
        entry = {"name": name, **fields, "captured_from": f"{self.log}:{snippet.start}",
                 "source": f"captured by convmatrix cases --from-log from {self.log} line {snippet.start}"}
        self.found.cases.append({key: entry[key] for key in _FIELD_ORDER if key in entry})


def _name_prefix(log: str) -> str:
    """The log's file name as the start of its cases' names: lower-case letters, digits, '_'."""
    base = os.path.basename(log)
    for suffix in (".gz", ".log", ".txt", ".out", ".err"):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
    prefix = re.sub(r"[^a-z0-9]+", "_", base.lower()).strip("_")[:40]
    return prefix or "captured"


# -- one snippet ------------------------------------------------------------------------------------------
def _ints(text: str) -> list[int]:
    return [int(part) for part in _INT.findall(text)]


def _spatial(name: str, values: list[int], dims: int, least: int) -> list[int]:
    """A printed padding/stride/dilation/kernel list, one number per spatial dimension."""
    if len(values) > dims and len(values) == 3 and not any(values[dims:]):
        values = values[:dims]  # the 1.7 pre-release printed all of max_dim = 3 (pull 45729)
    if len(values) != dims:
        raise _Unreadable(f"{name} {values} for a {dims}-d convolution")
    for value in values:
        if not least <= value <= MAX_EXTENT:
            raise _Unreadable(f"{name} {values}: {value} is out of range")
    return values


def _one(found: dict[str, Any], key: str, value: Any) -> None:
    """Keep a field's value; the same field read twice with two values is a garbled snippet."""
    if key in found and found[key] != value:
        raise _Unreadable(f"two different {key} lines")
    found[key] = value


def _parse_snippet(lines: list[str]) -> dict[str, Any]:
    """The lines after the marker (tags removed) as a case's fields; _Unreadable says why not."""
    seen: dict[str, Any] = {}
    block: dict[str, str] = {}
    in_block = False
    for line in lines:
        text = line.strip()
        if _BLOCK_HEAD.fullmatch(text):
            in_block = True
            continue
        if in_block:
            match = _BLOCK_FIELD.fullmatch(text)
            if match is not None:
                block.setdefault(match.group(1), match.group(2).strip())
            continue
        if match := _FLAG.fullmatch(text):
            _one(seen, match.group(1), match.group(2) == "True")
        elif match := _DATA.fullmatch(text):
            _one(seen, "data", match.groups())
        elif match := _NET.fullmatch(text):
            _one(seen, "net", match.groups())
        elif match := _CAST.fullmatch(text):
            _one(seen, "cast", match.groups())
        elif _RUN.fullmatch(text):
            seen["run"] = True
        elif _BACKWARD.match(text):
            seen["backward"] = True
    if "data" not in seen or "net" not in seen:
        raise _Unreadable("no `data = torch.randn(...)` and `net = torch.nn.ConvNd(...)` lines in the printed form")
    shape_text, torch_dtype, data_format = seen["data"]
    dims_text, c_in_text, c_out_text, kernel_text, padding_text, stride_text, dilation_text, groups_text, bias = (
        seen["net"])
    dims = int(dims_text)
    shape = _ints(shape_text)
    if len(shape) != dims + 2:
        raise _Unreadable(f"a Conv{dims}d on a {len(shape)}-d input {shape}")
    if not all(1 <= extent <= MAX_EXTENT for extent in shape):
        raise _Unreadable(f"input {shape} out of range")
    c_in, c_out, groups = int(c_in_text), int(c_out_text), int(groups_text)
    if not (1 <= c_out <= MAX_EXTENT and 1 <= groups <= MAX_EXTENT):
        raise _Unreadable("out_channels or groups out of range")
    if c_in != shape[1] or c_in % groups or c_out % groups:
        raise _Unreadable(f"Conv{dims}d({c_in}, {c_out}, groups={groups}) on an input of {shape[1]} channels")
    fields: dict[str, Any] = {
        "op": f"conv{dims}d", "input": shape, "out_channels": c_out,
        "kernel": _spatial("kernel_size", _ints(kernel_text), dims, 1),
        "stride": _spatial("stride", _ints(stride_text), dims, 1),
        "padding": _spatial("padding", _ints(padding_text), dims, 0),
        "dilation": _spatial("dilation", _ints(dilation_text), dims, 1),
        "groups": groups,
        "bias": bias != "False",  # never printed: nn.ConvNd's default, True, unless a log says otherwise
        "dtype": _dtype(torch_dtype, block, seen.get("cast")),
        "memory_format": _memory_format(data_format, block, dims),
    }
    if seen.get("backward"):
        fields["direction"] = "backward"
    elif seen.get("run"):
        fields["direction"] = "forward"
    for flag in ("benchmark", "deterministic", "allow_tf32"):
        if flag in seen:
            fields[flag] = seen[flag]
    _check_block(fields, block, dims)
    # A setting at torch's default (benchmark and deterministic off, cuDNN's TF32 on) is left to the
    # run, as the catalog's cases leave it: only what the job changed is forced by the case (a
    # forced allow_tf32 would also make the case GPU-only, and the CPU lane could not run it).
    for flag, default in (("benchmark", False), ("deterministic", False), ("allow_tf32", True)):
        if fields.get(flag) is default:
            del fields[flag]
    return fields


def _dtype(torch_dtype: str, block: dict[str, str], cast: tuple[str, str | None] | None) -> str:
    if cast is not None and cast[0] != torch_dtype:
        raise _Unreadable(f"data is torch.{torch_dtype} but the net is .{cast[0]}()")
    from_block = _CUDNN_DTYPES.get(block.get("data_type", ""))
    if torch_dtype in _TORCH_DTYPES:
        dtype = _TORCH_DTYPES[torch_dtype]
        if "data_type" in block and from_block != dtype:
            raise _Unreadable(f"dtype torch.{torch_dtype} but data_type = {block['data_type']}")
        return dtype
    if torch_dtype == "unsupported" and from_block is not None:
        return from_block  # bfloat16: repro_from_args's dtype switch knows float, double and half only
    if torch_dtype == "unsupported":
        what = f"data_type = {block['data_type']}" if "data_type" in block else "no ConvolutionParams data_type"
        raise _Unreadable(f"dtype torch.unsupported with {what}: not a dtype the suite runs")
    raise _Unreadable(f"dtype torch.{torch_dtype}: not a dtype the suite runs (float32, float16, bfloat16, float64)")


def _memory_format(data_format: str | None, block: dict[str, str], dims: int) -> str:
    if data_format is not None and data_format not in _FORMATS:
        raise _Unreadable(f"memory format torch.{data_format}")
    memory_format = _FORMATS[data_format] if data_format is not None else "contiguous"
    if (memory_format == "channels_last" and dims != 2) or (memory_format == "channels_last_3d" and dims != 3):
        raise _Unreadable(f"{memory_format} for a {dims}-d convolution")
    printed = _BLOCK_FORMATS.get(block.get("memory_format", ""))
    if printed is not None and printed != memory_format:
        # Both come from params.memory_format in the versions that print the block's line.
        raise _Unreadable(f"the snippet is {memory_format} but the block's memory_format = {block['memory_format']}")
    return memory_format


def _check_block(fields: dict[str, Any], block: dict[str, str], dims: int) -> None:
    """The ConvolutionParams block, where it printed a field whole, says what the snippet does
    (repro_from_args and operator<< print the same params); a log that differs is garbled."""
    for key in ("padding", "stride", "dilation"):
        text = block.get(key, "")
        if re.fullmatch(_LIST, text):
            values = _ints(text)
            if values[:dims] != fields[key] or any(values[dims:]):
                raise _Unreadable(f"the snippet's {key} {fields[key]} but the block's {text}")
    if block.get("groups", "").isdigit() and len(block["groups"]) <= 15 and int(block["groups"]) != fields["groups"]:
        raise _Unreadable(f"the snippet's groups {fields['groups']} but the block's {block['groups']}")
    for key in ("deterministic", "allow_tf32"):
        if key in fields and block.get(key) in ("true", "false") and (block[key] == "true") != fields[key]:
            raise _Unreadable(f"the snippet's {key} = {fields[key]} but the block's {block[key]}")


# -- logs -------------------------------------------------------------------------------------------------
def cases_from_text(lines: Iterable[str], *, log: str = "-") -> Found:
    """Every snippet among ``lines`` (text, one line each; each counts by its first LINE_CAP
    characters) as case entries; ``log`` names the source in the entries and notes."""
    reader = _Reader(log)
    for number, line in enumerate(lines, 1):
        text = line[:LINE_CAP]
        if not reader.open and not reader.pending and not any(needle in text for needle in _NEEDLES):
            continue
        reader.line(number, strip_ansi(text.rstrip("\r\n")))
        if reader.stopped:
            break
    return reader.finish()


def cases_from_log(path: str) -> Found:
    """Every snippet in the log at ``path``: plain text, gzip (by its magic bytes) or UTF-16 with a
    BOM, read in constant memory by triage's own readers (scan.py)."""
    with scan.open_log(path) as (handle, kind):
        if kind == "gzip":
            unzip = scan._Gunzip(handle, path)
            reader, count = _read_stream(unzip, path)
            if unzip.problem is not None:
                if unzip.produced == 0:
                    raise BadInput(f"{path}: {unzip.problem}")
                reader._note(f"{path}: {unzip.problem}; read the {count} lines before it")
            return reader.finish()
        return _read_stream(scan.utf16_as_utf8(handle) if kind == "utf16" else handle, path)[0].finish()


def _raw_lines(stream: scan.Readable, name: str) -> Iterator[bytes]:
    """A stream's lines, each its first LINE_CAP bytes without the newline (scan's blocks)."""
    for data, cut in scan._blocks(stream, name):
        block = data[:cut]
        pieces = block.split(b"\n")
        if block.endswith(b"\n"):
            pieces.pop()
        for piece in pieces:
            yield piece[:LINE_CAP]


def _read_stream(stream: scan.Readable, name: str) -> tuple[_Reader, int]:
    reader = _Reader(name)
    number = 0
    for number, raw in enumerate(_raw_lines(stream, name), 1):
        if not reader.open and not reader.pending and not any(needle in raw for needle in _NEEDLES_B):
            continue
        reader.line(number, scan._clean(raw))
        if reader.stopped:
            break
    return reader, number


# -- the case file ----------------------------------------------------------------------------------------
def _comment(text: str) -> str:
    """Text for a TOML comment: one line, no control characters."""
    return "".join(char if char.isprintable() else "?" for char in text)[:300]


_CAPTURED = ("each a PyTorch cuDNN repro snippet of that log, as the convolution cuDNN ran: the snippet's "
             "ConvNd (a transposed conv shows as the conv whose backward it runs, a conv1d as a Conv2d of "
             "height 1), run forward and backward. Rename the cases; add `sources` for upstream reports.")
CASE_FILE_FORMATS = (".toml", ".json")  # what suites/casefile.py reads: TOML by the suffix, else JSON


def suffix_of(output: Path | None) -> str:
    """The case file's format by its name, as suites/casefile.py reads it: .toml is TOML, .json JSON
    (stdout gets TOML); another name is BadInput. --from-log and --from-model both ask here."""
    suffix = ".toml" if output is None else output.suffix
    if suffix not in CASE_FILE_FORMATS:
        raise BadInput(f"-o {one_line(str(output))}: a case file is named .toml (TOML) or .json (JSON)")
    return suffix


def to_case_file(cases: list[dict[str, Any]], source_log: str, suffix: str) -> str:
    """The captured cases as a case file in the format its name's suffix says (case_file)."""
    return case_file(cases, _captured(cases, source_log), suffix)


def to_toml(cases: list[dict[str, Any]], source_log: str) -> str:
    """The captured cases as a TOML case file, with a header naming the log."""
    return case_file(cases, _captured(cases, source_log), ".toml")


def _captured(cases: list[dict[str, Any]], source_log: str) -> str:
    return f"Captured by `convmatrix cases --from-log` from {_comment(source_log)}: {len(cases)} case(s), {_CAPTURED}"


def case_file(cases: list[dict[str, Any]], said: str, suffix: str) -> str:
    """A case file (suites/casefile.py's keys) in the format of its name's suffix, as the suite
    reads it (a .toml file as TOML, any other as JSON): `said` is JSON's `description` or the TOML
    header's comment lines. The one case-file writer of --from-log and --from-model."""
    if suffix == ".json":
        return json.dumps({"description": said, "case": cases}, indent=1) + "\n"
    printable = "".join(char if char.isprintable() else "?" for char in said)  # a comment is one line each
    out = ["# " + line for line in textwrap.wrap(printable, 96)]
    for case in cases:
        out += ["", "[[case]]"]
        out += [f"{tomlwrite.key(key)} = {tomlwrite.value(value)}" for key, value in case.items()]
    return "\n".join(out) + "\n"
