"""A failing case of a cell as a standalone script to hand upstream (`convmatrix repro`).

The script imports torch and the standard library only (no convmatrix, no numpy). It builds the
case exactly as the suite did in that cell (suites/test_conv.py): the shapes the cell ran (the
results line's `shapes`, a scaled-down variant's on the CPU), inputs seeded from
zlib.crc32(case id) and drawn in the suite's order (input, weight, bias, then the output gradient
and the double-backward vector, a slice's block and window where the suite's reference covered a
slice), the layout, memory format, dtype, autocast, bias, forced cuDNN settings, direction and way
of calling (eager, torch.compile, a CUDA graph). It compares the device's result with a float64
reference under the suite's derived bound (suites/tolerance.py) and exits 0 (passes), 1 (the
error reproduces) or 3 (its control fails too, or it cannot judge here).

Everything in a results directory is untrusted: the case id must be a records.CASE_ID, every
number written into the code is an int read from the JSON and written with repr(), every string
written into the code is one of a known set, and free text (messages, GPU names, paths) goes into
comments only, reduced to printable ASCII on one line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convmatrix import results
from convmatrix.errors import BadInput
from convmatrix.matrix.stacks import dotted_cudnn
from convmatrix.results import rundir
from convmatrix.results.read import MAX_SOURCES, SOURCE, numbered, result_dirs
from convmatrix.results.rundir import records

sizing = rundir.suite_module("sizing")  # the suite's budgets: which references cover a slice
catalog = rundir.suite_module("catalog")  # the suite's view arithmetic: a view that overlaps itself

SPATIAL_DIMS = {"conv1d": 1, "conv2d": 2, "conv3d": 3,
                "conv_transpose1d": 1, "conv_transpose2d": 2, "conv_transpose3d": 3}
DTYPES = ("float32", "float16", "bfloat16", "float64")
AUTOCAST_DTYPES = (None, "float16", "bfloat16")
MEMORY_FORMATS = {"contiguous": None, "channels_last": 2, "channels_last_3d": 3}
LAYOUTS = (None, "permuted", "sliced", "transposed", "nhwc_strided")
DIRECTIONS = ("forward", "backward", "backward_input", "backward_weight", "double_backward")
VIAS = (None, "compile", "cuda_graph")
DEVICES = ("cuda", "cpu")
MAX_INT = 1 << 40  # no dimension, stride or padding of a real conv comes near
MAX_PAD = 1024  # --pad-channels multiples a repro takes (the suite's knob is a small power of two)
# Values written into the header's install commands: only these shapes, so a pasted line is safe.
TORCH_VERSION = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}(?:(?:a|b|rc|\.dev|\.post)[0-9]{1,10})?", re.ASCII)
VARIANT = re.compile(r"cu[0-9]{2,3}|cpu|rocm[0-9]{1,2}(?:\.[0-9]{1,2}){0,2}", re.ASCII)
CUDNN_VERSION = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,4}){0,3}", re.ASCII)
INDEX_URL = "https://download.pytorch.org/whl/"
COMMENT_LIMIT = 300  # characters of one free-text value in a comment


@dataclass(frozen=True, kw_only=True)
class Spec:
    """A case as the cell ran it, every field checked: what the script builds."""

    case_id: str
    op: str
    dtype: str
    autocast: str | None
    input_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    bias_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    output_padding: tuple[int, ...]
    groups: int
    bias: bool
    memory_format: str | None  # channels_last, channels_last_3d or None (contiguous)
    layout: str | None
    # The input's own view as the conv got it (the results line's `view`: scaled, padded), and
    # the weight's memory format apart from the input's (None: the input's).
    input_strides: tuple[int, ...] | None = None
    storage_offset: int = 0
    weight_memory_format: str | None = None
    channels_last_knob: bool  # the cell's --channels-last on
    direction: str
    via: str | None
    benchmark: bool
    deterministic: bool
    allow_tf32: bool | None  # None: torch's default (on)
    cudnn_enabled: bool
    sliced: bool  # the suite's reference covered a slice (decided on the full-size case)
    scaled: bool  # the shapes differ from the params' (the CPU ran the scaled-down variant)
    device: str
    pad_to: int = 0  # the cell's --pad-channels multiple (0: none)
    # (groups, in per group, out per group, in per group padded, out per group padded), as the
    # suite's pad_plan makes it for the multiple; None: nothing padded.
    pad: tuple[int, int, int, int, int] | None = None

    @property
    def transposed(self) -> bool:
        return self.op.startswith("conv_transpose")


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where the case came from and the stack that ran it: the script's header (comments only)."""

    run: str
    cell: str
    status: str
    message: str
    sources: tuple[str, ...]
    env: dict[str, Any]
    requested: dict[str, Any]


# --- reading the run -----------------------------------------------------------------------------

def find_cell(run: Path, cell: str) -> results.CellResult:
    """The cell result in run named cell (its directory name, or its cell id when one directory
    has it); BadInput when there is none, several, or it cannot be read."""
    if not run.is_dir():
        raise BadInput(f"{run}: no such run directory")
    found = [p for p in result_dirs(run) if cell in (rundir.final_dir(p).name, rundir.final_dir(p).name.split("@")[0])]
    if not found:
        raise BadInput(f"{run}: no cell {_line(cell)!r} here")
    if len(found) > 1:
        raise BadInput(f"{run}: cell {_line(cell)!r} has {len(found)} results; name one: "
                       + ", ".join(p.name for p in found))
    loaded = results.load([found[0]])
    if loaded.errors:
        raise BadInput("\n".join(loaded.errors))
    if not loaded.results:
        raise BadInput(f"{found[0]}: no results here")
    return loaded.results[0]


def case_line(result: results.CellResult, case_id: str) -> dict[str, Any]:
    """The case's last results line (raw: the script needs fields the reader does not keep)."""
    if not records.CASE_ID.fullmatch(case_id):
        raise BadInput(f"{_line(case_id)[:80]!r}: not a case id (letters, digits, '_.+-', at most 160)")
    path = result.path / rundir.RESULTS
    try:
        text = rundir.read_plain(path, rundir.MAX_RESULTS, result.path).decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise BadInput(f"{path}: no results") from None
    except OSError as exc:
        raise BadInput(f"{path}: unreadable ({exc.strerror or exc})") from None
    line: dict[str, Any] | None = None
    for _number, record in numbered(text):
        if isinstance(record, dict) and record.get("case") == case_id:
            line = record
    if line is None:
        raise BadInput(f"{path}: no case {case_id}")
    problems = records.result_problems(line)
    if problems:
        raise BadInput(f"{path}: case {case_id}: {problems[0]}")
    return line


def failing_cases(result: results.CellResult) -> list[str]:
    return sorted(name for name, case in result.cases.items() if case.outcome.failing)


# --- checking a results line ---------------------------------------------------------------------

def _bad(case_id: str, field: str, what: str) -> BadInput:
    return BadInput(f"case {case_id}: {field}: {what}")


def _int(case_id: str, field: str, value: Any, low: int = 0) -> int:
    if type(value) is not int or not low <= value <= MAX_INT:
        raise _bad(case_id, field, f"expected an integer from {low} to {MAX_INT}, got {_shown(value)}")
    return value


def _ints(case_id: str, field: str, value: Any, rank: int, low: int = 0) -> tuple[int, ...]:
    """An int, or a list of rank ints, as rank ints."""
    if type(value) is int:
        return (_int(case_id, field, value, low),) * rank
    if not isinstance(value, list) or len(value) != rank:
        raise _bad(case_id, field, f"expected an integer or {rank} of them, got {_shown(value)}")
    return tuple(_int(case_id, field, v, low) for v in value)


def _shape(case_id: str, field: str, value: Any, rank: int) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) != rank:
        raise _bad(case_id, field, f"expected {rank} dimensions, got {_shown(value)}")
    return tuple(_int(case_id, field, v, 1) for v in value)


def _choice(case_id: str, field: str, value: Any, allowed: Iterable[object]) -> Any:
    allowed = tuple(allowed)
    if (value is not None and not isinstance(value, str | bool)) or value not in allowed:
        raise _bad(case_id, field, f"{_shown(value)} is not one of {', '.join(map(str, allowed))}")
    return value


def _shown(value: Any) -> str:
    return repr(_line(str(value))[:60]) if isinstance(value, str) else _line(repr(value))[:60]


def output_size(transposed: bool, size: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                padding: Sequence[int], dilation: Sequence[int], output_padding: Sequence[int]) -> tuple[int, ...]:
    """catalog.Case.output_size, from checked ints."""
    if transposed:
        return tuple((i - 1) * s - 2 * p + d * (k - 1) + op + 1
                     for i, k, s, p, d, op in zip(size, kernel, stride, padding, dilation, output_padding, strict=True))
    return tuple((i + 2 * p - d * (k - 1) - 1) // s + 1
                 for i, k, s, p, d in zip(size, kernel, stride, padding, dilation, strict=True))


def spec_of(line: dict[str, Any], env: dict[str, Any], device: str | None = None) -> Spec:
    """The case of one results line, every field checked (BadInput names the first bad one)."""
    case_id = line.get("case")
    if not isinstance(case_id, str) or not records.CASE_ID.fullmatch(case_id):
        raise BadInput(f"not a case id: {_shown(case_id)}")
    params = line.get("params")
    if not isinstance(params, dict) or not params:
        raise _bad(case_id, "params", "none on its results line (a crashed or timed-out case records none)")
    op = _choice(case_id, "params.op", params.get("op"), SPATIAL_DIMS)
    rank = SPATIAL_DIMS[op]
    transposed = op.startswith("conv_transpose")
    dtype = _choice(case_id, "params.dtype", params.get("dtype"), DTYPES)
    autocast = _choice(case_id, "params.autocast", params.get("autocast"), AUTOCAST_DTYPES)
    if autocast is not None and dtype != "float32":
        raise _bad(case_id, "params.autocast", "autocast cases take float32 inputs")
    memory_format = _choice(case_id, "params.memory_format", params.get("memory_format", "contiguous"), MEMORY_FORMATS)
    if MEMORY_FORMATS[memory_format] not in (None, rank):
        raise _bad(case_id, "params.memory_format", f"{memory_format} needs another spatial rank")
    layout = _choice(case_id, "params.layout", params.get("layout"), LAYOUTS)
    backward = _choice(case_id, "params.backward", params.get("backward", False), (True, False))
    direction = _choice(case_id, "params.direction", params.get("direction"), (None, *DIRECTIONS))
    direction = direction or ("backward" if backward else "forward")
    via = _choice(case_id, "params.via", params.get("via"), VIAS)
    if via == "cuda_graph" and direction != "forward":
        raise _bad(case_id, "params.via", "a cuda_graph case is forward only")
    bias = _choice(case_id, "params.bias", params.get("bias", True), (True, False))
    forced = {name: _choice(case_id, f"params.{name}", params.get(name), (None, True, False))
              for name in ("benchmark", "deterministic", "tf32")}
    kernel = _ints(case_id, "params.kernel", params.get("kernel"), rank, 1)
    stride = _ints(case_id, "params.stride", params.get("stride", 1), rank, 1)
    padding = _ints(case_id, "params.padding", params.get("padding", 0), rank)
    dilation = _ints(case_id, "params.dilation", params.get("dilation", 1), rank, 1)
    output_padding = _ints(case_id, "params.output_padding", params.get("output_padding", 0), rank)
    if any(output_padding) and not transposed:
        raise _bad(case_id, "params.output_padding", "applies to transposed ops only")
    n = _int(case_id, "params.n", params.get("n"), 1)
    c_in = _int(case_id, "params.c_in", params.get("c_in"), 1)
    c_out = _int(case_id, "params.c_out", params.get("c_out"), 1)
    groups = _int(case_id, "params.groups", params.get("groups", 1), 1)
    if c_in % groups or c_out % groups:
        raise _bad(case_id, "params.groups", f"{groups} does not divide the channels ({c_in} in, {c_out} out)")
    size = _ints(case_id, "params.size", params.get("size"), rank, 1)
    full_groups = groups
    full = _shapes(transposed, n, c_in, c_out, groups, size, kernel, stride, padding, dilation, output_padding)
    if any(extent < 1 for extent in full["output"][2:]):
        raise _bad(case_id, "params.kernel", "the output would be empty")
    ran = full
    shapes = line.get("shapes")
    if shapes is not None:
        if not isinstance(shapes, dict):
            raise _bad(case_id, "shapes", f"expected an object, got {_shown(shapes)}")
        ran = {"input": _shape(case_id, "shapes.input", shapes.get("input"), rank + 2),
               "weight": _shape(case_id, "shapes.weight", shapes.get("weight"), rank + 2),
               "bias": _shape(case_id, "shapes.bias", shapes.get("bias"), 1),
               "output": _shape(case_id, "shapes.output", shapes.get("output"), rank + 2)}
        groups = _consistent(case_id, ran, transposed, kernel, stride, padding, dilation, output_padding)
    if layout is not None and memory_format != "contiguous":
        raise _bad(case_id, "params.layout", "a layout tweak applies to contiguous inputs only")
    if layout == "transposed" and (ran["input"][0] < 2 or ran["input"][1] < 2):
        raise _bad(case_id, "params.layout", "a transposed layout needs a batch and channels of 2 or more")
    weight_format = _choice(case_id, "params.weight_memory_format", params.get("weight_memory_format"),
                            (None, *MEMORY_FORMATS))
    if weight_format is not None and MEMORY_FORMATS[weight_format] not in (None, rank):
        raise _bad(case_id, "params.weight_memory_format", f"{weight_format} needs another spatial rank")
    if params.get("weight_strides") is not None:
        # A weight view (issue 50) is a case-file field the script does not build yet: said, not dropped.
        raise _bad(case_id, "params.weight_strides", "the repro script does not build a weight view yet (run the "
                   "case with the suite: pytest suites --cases FILE -k ID)")
    knobs: dict[str, Any] = line["knobs"] if isinstance(line.get("knobs"), dict) else {}
    pad_to = _int(case_id, "knobs.pad_channels", knobs.get("pad_channels", 0))
    if pad_to > MAX_PAD:
        raise _bad(case_id, "knobs.pad_channels", f"{pad_to}: not a channel multiple up to {MAX_PAD}")
    c_in_ran = ran["weight"][0] if transposed else ran["input"][1]
    c_out_ran = ran["output"][1]
    pad = pad_plan(c_in_ran, c_out_ran, groups, pad_to)
    view = _view(case_id, line, params, full["input"], ran["input"] if pad is None else
                 (ran["input"][0], pad[0] * pad[3], *ran["input"][2:]))
    if view is not None and layout is not None:
        raise _bad(case_id, "params.input_strides", "a layout and the view's strides, not both")
    if view is not None and memory_format != "contiguous":
        # As the suite's Case refuses it: the script would rewrite the view it claims to build.
        raise _bad(case_id, "params.input_strides", "a memory_format and the view's strides, not both")
    run_benchmark = _choice(case_id, "knobs.cudnn_benchmark", knobs.get("cudnn_benchmark", False), (True, False))
    run_deterministic = _choice(case_id, "knobs.cudnn_deterministic", knobs.get("cudnn_deterministic", False),
                                (True, False))
    if device is None:
        seen = env.get("device") if env.get("device") in DEVICES else line.get("device")
        device = seen if seen in DEVICES else "cuda"
    _choice(case_id, "--device", device, DEVICES)
    return Spec(
        case_id=case_id, op=op, dtype=dtype, autocast=autocast,
        input_shape=ran["input"], weight_shape=ran["weight"], bias_shape=ran["bias"], output_shape=ran["output"],
        stride=stride, padding=padding, dilation=dilation, output_padding=output_padding, groups=groups,
        bias=bias, memory_format=None if memory_format == "contiguous" else memory_format, layout=layout,
        channels_last_knob=_choice(case_id, "knobs.channels_last", knobs.get("channels_last", False), (True, False)),
        direction=direction, via=via,
        benchmark=run_benchmark if forced["benchmark"] is None else forced["benchmark"],
        deterministic=run_deterministic if forced["deterministic"] is None else forced["deterministic"],
        allow_tf32=forced["tf32"],
        cudnn_enabled=_choice(case_id, "knobs.cudnn_enabled", knobs.get("cudnn_enabled", True), (True, False)),
        sliced=_sliced(full, transposed, c_in, c_out, full_groups),
        scaled=ran != full, device=device,
        pad_to=pad_to if pad_to > 1 else 0, pad=pad,
        input_strides=None if view is None else view[0], storage_offset=0 if view is None else view[1],
        weight_memory_format=weight_format,
    )


def _view(case_id: str, line: dict[str, Any], params: dict[str, Any], own: tuple[int, ...],
          shape: tuple[int, ...]) -> tuple[tuple[int, ...], int] | None:
    """(strides, storage offset) of the case's own view as the conv got it, checked: the results
    line's `view` (what the cell built: scaled, padded), else the params' where the line has none
    and the shape is the params' own; None for a case without one. A view that overlaps itself
    cannot hold the input's values: refused, as the case file's checks refuse it."""
    if params.get("input_strides") is None:
        return None
    seen = line.get("view")
    if isinstance(seen, dict) and seen.get("input_strides") is not None:
        field, strides, offset = "view", seen.get("input_strides"), seen.get("storage_offset", 0)
    else:
        field, strides, offset = "params", params.get("input_strides"), params.get("storage_offset", 0)
    if type(strides) is not list:
        raise _bad(case_id, f"{field}.input_strides", f"expected {len(shape)} integers, got {_shown(strides)}")
    found = _ints(case_id, f"{field}.input_strides", strides, len(shape))
    start = _int(case_id, f"{field}.storage_offset", offset)
    if field == "params" and shape != own:
        raise _bad(case_id, "view", "missing for a case run at another shape than its params' (scaled or padded)")
    if catalog.view_extent(shape, found, start) > MAX_INT:
        raise _bad(case_id, f"{field}.input_strides", f"the view reaches past {MAX_INT} elements")
    if catalog.view_overlaps(shape, found):
        raise _bad(case_id, f"{field}.input_strides", f"{list(found)}: the view of {list(shape)} overlaps itself")
    return found, start


def pad_plan(c_in: int, c_out: int, groups: int, multiple: int) -> tuple[int, int, int, int, int] | None:
    """What the suite's --pad-channels does to a case (suites/test_conv.py, pad_plan; the same
    arithmetic, since the script must build the convolution the cell ran): (groups, in per group,
    out per group, in per group padded, out per group padded), the new group count first; None
    when nothing is padded. A depthwise conv gets more (zero) groups; others pad each group."""
    if multiple <= 1:
        return None
    in_g, out_g = c_in // groups, c_out // groups
    if groups == c_in and groups > 1:  # depthwise, as the catalog's Case.depthwise says
        new_groups = -(-groups // multiple) * multiple
        plan = (new_groups, in_g, out_g, in_g, out_g)
    else:
        step = multiple // math.gcd(multiple, groups)
        plan = (groups, in_g, out_g, -(-in_g // step) * step, -(-out_g // step) * step)
    if (plan[0], plan[3], plan[4]) == (groups, in_g, out_g):
        return None
    return plan


def _shapes(transposed: bool, n: int, c_in: int, c_out: int, groups: int, size: tuple[int, ...],
            kernel: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...], dilation: tuple[int, ...],
            output_padding: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """catalog.Case.shapes, from checked ints."""
    weight = (c_in, c_out // groups, *kernel) if transposed else (c_out, c_in // groups, *kernel)
    out = output_size(transposed, size, kernel, stride, padding, dilation, output_padding)
    return {"input": (n, c_in, *size), "weight": weight, "bias": (c_out,), "output": (n, c_out, *out)}


def _consistent(case_id: str, ran: dict[str, tuple[int, ...]], transposed: bool, kernel: tuple[int, ...],
                stride: tuple[int, ...], padding: tuple[int, ...], dilation: tuple[int, ...],
                output_padding: tuple[int, ...]) -> int:
    """The groups of the shapes the cell ran (a scaled case has fewer), checked against the params:
    the script must build one conv, not a set of numbers that disagree."""
    x, weight, bias, out = ran["input"], ran["weight"], ran["bias"], ran["output"]
    c_in, c_out = x[1], out[1]
    per_group = weight[1]
    lead, total = (c_in, c_out) if transposed else (c_out, c_in)
    if weight[0] != lead or total % per_group or weight[2:] != kernel:
        raise _bad(case_id, "shapes.weight", f"{list(weight)} does not fit input {list(x)} and output {list(out)}")
    groups = total // per_group
    if c_in % groups or c_out % groups:
        raise _bad(case_id, "shapes.weight", f"groups {groups} do not divide the channels")
    if bias != (c_out,):
        raise _bad(case_id, "shapes.bias", f"{list(bias)} is not ({c_out},)")
    want = (x[0], c_out, *output_size(transposed, x[2:], kernel, stride, padding, dilation, output_padding))
    if out != want:
        raise _bad(case_id, "shapes.output", f"{list(out)} is not what the conv makes of the input ({list(want)})")
    return groups


def _sliced(full: dict[str, tuple[int, ...]], transposed: bool, c_in: int, c_out: int, groups: int) -> bool:
    """sizing.sliced of the full-size case: its float64 reference too costly, so a slice."""
    kernel = math.prod(full["weight"][2:])
    macs = (math.prod(full["input"]) * (c_out // groups) * kernel if transposed
            else math.prod(full["output"]) * (c_in // groups) * kernel)
    biggest = max(math.prod(full[name]) for name in ("input", "weight", "output"))
    return bool(macs > sizing.REFERENCE_BUDGET_MACS or biggest > sizing.REFERENCE_BUDGET_ELEMENTS)


# --- the header --------------------------------------------------------------------------------

_NOT_PRINTABLE = re.compile(r"[^\x20-\x7e]")


def comment_text(value: object, limit: int = COMMENT_LIMIT) -> str:
    """Free text for a comment: printable ASCII (anything else '?'), one line, bounded."""
    text = " ".join(_NOT_PRINTABLE.sub("?", str(value)).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _line(text: str) -> str:
    return comment_text(text, 200)


def install_lines(env: dict[str, Any], requested: dict[str, Any]) -> list[str]:
    """pip commands that install the stack the cell observed (each value matched a strict shape,
    so the line is safe to paste), or why one cannot be given."""
    torch_seen = env.get("torch") if isinstance(env.get("torch"), str) else ""
    version, _, label = str(torch_seen).partition("+")
    variant = requested.get("cuda")
    if not (isinstance(variant, str) and VARIANT.fullmatch(variant)):
        variant = label if VARIANT.fullmatch(label) else None
    if not TORCH_VERSION.fullmatch(version):
        lines = ["(the cell's torch version is unknown: install the torch it names above by hand)"]
    elif variant is None:
        lines = [f"pip install torch=={version}    (the CUDA variant is unknown: add --index-url {INDEX_URL}<variant>)"]
    else:
        lines = [f"pip install torch=={version} --index-url {INDEX_URL}{variant}"]
    cudnn = requested.get("cudnn")
    if isinstance(cudnn, str) and cudnn not in ("bundled", "image", ""):
        if CUDNN_VERSION.fullmatch(cudnn):
            major = re.match(r"cu(1[0-9])", variant or "")
            lines.append(f"pip install nvidia-cudnn-cu{major[1] if major else '12'}=={cudnn}"
                         "    (the cell overrode the cuDNN torch bundles)")
        else:
            lines.append("(the cell overrode torch's cuDNN with a version not shown here: not a version number)")
    return lines


def header(spec: Spec, where: Provenance) -> list[str]:
    env = where.env
    cudnn = env.get("cudnn")
    cudnn_text = (f"{cudnn} ({dotted_cudnn(cudnn)})" if type(cudnn) is int and 0 < cudnn < 10**7
                  else comment_text(env.get("cudnn_error") or "unknown", 120))
    gpus = [g for g in env.get("gpus") or [] if isinstance(g, dict)]
    gpu_text = "; ".join(f"{comment_text(g.get('name'), 80)}, capability {comment_text(g.get('capability'), 10)}"
                         for g in gpus[:4]) or "none recorded"
    lines = [
        "#!/usr/bin/env python3",
        f"# convmatrix repro: {spec.case_id}",
        "#",
        "# A standalone reproduction of one conv case of a convmatrix run: torch and the standard library only.",
        f"#   run:     {comment_text(where.run)}",
        f"#   cell:    {comment_text(where.cell)}",
        f"#   status:  {comment_text(where.status, 40)}: {comment_text(where.message)}",
        *[f"#   source:  {comment_text(url)}" for url in where.sources],
        "#",
        "# The stack the cell observed (its env.json):",
        f"#   torch {comment_text(env.get('torch'), 60)}, CUDA {comment_text(env.get('cuda'), 30)}, "
        f"cuDNN {cudnn_text}",
        f"#   driver {comment_text(env.get('driver'), 60)}; GPU: {gpu_text}",
        f"#   python {comment_text(env.get('python'), 60)}, {comment_text(env.get('platform'), 120)}",
        "# To install that stack:",
        *[f"#   {line}" for line in install_lines(env, where.requested)],
        "#",
        f"# Run: python THIS_FILE [--device cuda|cpu]   (default: {spec.device}, the device the cell ran on)",
        "# Exit status: 0 the case passes; 1 the error reproduces (an exception, or a result beyond the bound);",
        "#   3 the control fails too (or this machine cannot run the case: no CUDA, no CPU kernel for its dtype).",
        "# The control: the float64 reference on the CPU (and, on CUDA, the same case with cuDNN off), both",
        "#   calling torch.nn.functional under torch.backends.cudnn.flags(enabled=False); it runs before the",
        "#   case, so that a sticky CUDA error in the case cannot take it down.",
        "# Inputs: exactly the suite's (suites/test_conv.py): input, weight, bias, then the output gradient and the",
        "#   double-backward vector, drawn in that order from torch.Generator().manual_seed(zlib.crc32(case id)),",
        "#   rounded to the dtype (a tensor over 2^24 elements repeats one seeded block of 1,000,003 values).",
    ]
    if spec.scaled:
        lines.append("# Shapes: the scaled-down variant the cell's CPU ran (its results line's `shapes`), "
                     "not the params'.")
    if spec.pad is not None:
        groups, in_g, out_g, new_in, new_out = spec.pad
        lines.append(f"# Padded: the cell ran with --pad-channels {spec.pad_to}, so the conv runs as the suite ran it,")
        lines.append(f"#   with zero channels added: {spec.groups} group(s) of {in_g} in / {out_g} out become {groups} "
                     f"of {new_in} in / {new_out} out; the output is cut back to the case's channels before it is")
        lines.append("#   compared, and the reference is the unpadded case.")
    if spec.sliced:
        lines.append("# The reference covers a slice, as the suite's did: the last 4 output positions per spatial")
        lines.append("#   dimension of the last batch entry (the last 16 output channels when groups == 1).")
    return lines


# --- the script ----------------------------------------------------------------------------------

def constants(spec: Spec) -> list[str]:
    """The case as Python constants: ints, bools, None and strings of known sets, each by repr()."""
    values: list[tuple[str, object, str]] = [
        ("CASE_ID", spec.case_id, "the suite's case id: the seed is zlib.crc32 of it"),
        ("OP", spec.op, "torch.nn.functional.<OP>, looked up at each call"),
        ("DTYPE", spec.dtype, "the inputs' dtype"),
        ("AUTOCAST", spec.autocast, "torch.autocast's dtype, or None"),
        ("INPUT_SHAPE", spec.input_shape, ""),
        ("WEIGHT_SHAPE", spec.weight_shape, ""),
        ("BIAS_SHAPE", spec.bias_shape, ""),
        ("OUTPUT_SHAPE", spec.output_shape, ""),
        ("STRIDE", spec.stride, ""),
        ("PADDING", spec.padding, ""),
        ("DILATION", spec.dilation, ""),
        ("OUTPUT_PADDING", spec.output_padding, "transposed ops only"),
        ("GROUPS", spec.groups, ""),
        ("BIAS", spec.bias, "False: the conv gets None (the reference adds zeros)"),
        ("MEMORY_FORMAT", spec.memory_format, "input and weight in this memory format, or None"),
        ("LAYOUT", spec.layout, "the input's non-contiguous layout: permuted, sliced, transposed, nhwc_strided"),
        ("INPUT_STRIDES", spec.input_strides, "the input's own view (as_strided over a zeroed buffer), or None"),
        ("STORAGE_OFFSET", spec.storage_offset, "the view's storage offset"),
        ("WEIGHT_MEMORY_FORMAT", spec.weight_memory_format, "the weight's memory format apart from the "
                                                            "input's, or None"),
        ("CHANNELS_LAST_KNOB", spec.channels_last_knob, "the cell's --channels-last on"),
        ("DIRECTION", spec.direction, "forward, backward, backward_input, backward_weight, double_backward"),
        ("VIA", spec.via, "None (eager), compile (torch.compile) or cuda_graph"),
        ("BENCHMARK", spec.benchmark, "torch.backends.cudnn.benchmark"),
        ("DETERMINISTIC", spec.deterministic, "torch.backends.cudnn.deterministic"),
        ("ALLOW_TF32", spec.allow_tf32, "torch.backends.cudnn.allow_tf32 (None: torch's default, on)"),
        ("CUDNN_ENABLED", spec.cudnn_enabled, "torch.backends.cudnn.enabled for the case"),
        ("SLICED", spec.sliced, "the reference covers a slice, as the suite's did"),
        ("DEFAULT_DEVICE", spec.device, "the device the cell ran on"),
        ("PAD", spec.pad, "the cell's --pad-channels: (groups, in/group, out/group, padded in/group, "
                          "padded out/group), or None"),
    ]
    lines = []
    for name, value, note in values:
        _check_literal(value)
        lines.append(f"{name} = {value!r}" + (f"  # {note}" if note else ""))
    return lines


_KNOWN_STRINGS = frozenset((*SPATIAL_DIMS, *DTYPES, *MEMORY_FORMATS, *(x for x in LAYOUTS if x), *DIRECTIONS,
                            *(x for x in VIAS if x), *DEVICES))


def _check_literal(value: object) -> None:
    """What may be written into the code: ints, bools, None, a case id or a known word, and tuples of ints."""
    if value is None or isinstance(value, bool) or type(value) is int:
        return
    if isinstance(value, tuple) and all(type(v) is int for v in value):
        return
    if isinstance(value, str) and (value in _KNOWN_STRINGS or records.CASE_ID.fullmatch(value)):
        return
    raise ValueError(f"not a literal repro writes into code: {value!r}")


def script(spec: Spec, where: Provenance) -> str:
    """The whole script: header comments, the case's constants, then the fixed body."""
    return "\n".join([*header(spec, where), "", *BODY_IMPORTS, "", *constants(spec), "", BODY.strip("\n"), ""])


def provenance(result: results.CellResult, line: dict[str, Any]) -> Provenance:
    message = line.get("message") if isinstance(line.get("message"), str) else ""
    exc_type = line.get("exc_type") if isinstance(line.get("exc_type"), str) else ""
    first = (str(message).strip().splitlines() or [""])[0]
    return Provenance(
        run=str(result.path.parent), cell=result.path.name, status=str(line.get("status")),
        message=f"{exc_type}: {first}" if exc_type else first,
        sources=_sources(line.get("sources")),
        env=result.observed, requested=result.requested if isinstance(result.requested, dict) else {},
    )


def _sources(listed: object) -> tuple[str, ...]:
    """The line's https URLs (read.SOURCE: printable ASCII, no space), at most 8 of them."""
    if not isinstance(listed, list):
        return ()
    return tuple(url for url in listed[:MAX_SOURCES] if isinstance(url, str) and SOURCE.fullmatch(url))[:8]


def repro(run: Path, cell: str, case_id: str, device: str | None = None) -> str:
    """The script for one case of one cell."""
    result = find_cell(run, cell)
    line = case_line(result, case_id)
    return script(spec_of(line, result.observed, device), provenance(result, line))


def repro_all(run: Path, cell: str, device: str | None = None) -> tuple[dict[str, str], list[str]]:
    """A script per failing case of the cell, and one line per failing case that cannot have one."""
    result = find_cell(run, cell)
    made: dict[str, str] = {}
    refused: list[str] = []
    for case_id in failing_cases(result):
        try:
            line = case_line(result, case_id)
            made[case_id] = script(spec_of(line, result.observed, device), provenance(result, line))
        except BadInput as exc:
            refused.append(str(exc))
    return made, refused


BODY_IMPORTS = [
    "import argparse",
    "import importlib.metadata",
    "import math",
    "import platform",
    "import shutil",
    "import subprocess",
    "import sys",
    "import zlib",
    "",
    "import torch",
]

# The fixed part of every script (Python 3.8 syntax, torch 2.4 and later). Kept beside the suite's
# own code it mirrors: seeded/make_inputs, place_input, run_on_device, reference/sliced_reference
# (suites/test_conv.py) and bound/evaluate/magnitudes (suites/tolerance.py).
BODY = r'''
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
FORMATS = {"channels_last": torch.channels_last, "channels_last_3d": torch.channels_last_3d,
           "contiguous": torch.contiguous_format}
SPATIAL = len(INPUT_SHAPE) - 2
TRANSPOSED = OP.startswith("conv_transpose")
COMPUTE = AUTOCAST or DTYPE
BACKWARD = DIRECTION != "forward"
TILE_LIMIT = 1 << 24  # a tensor over this many elements repeats one seeded block (suites/test_conv.py)
TILE_BLOCK = 1000003
SLICE_POSITIONS = 4  # suites/sizing.py
SLICE_CHANNELS = 16
EXIT_PASSES, EXIT_REPRODUCES, EXIT_CONTROL_FAILS = 0, 1, 3

# The suite's derived bound (suites/tolerance.py has the derivation): an element y of the output or
# of a gradient sums T terms t; it must satisfy
#     |got - y| <= tol = u_out * |y| + min(T + 1, C) * u * A + (T + 1) * eta,   A = sum |t|
# A is the same op in float64 on absolute values; u the unit roundoff of any rounding inside the sum
# (float32 2^-24; TF32 2^-11 for float32 on CUDA unless allow_tf32 is off; float16 2^-11; bfloat16
# 2^-8), u_out that of the stored result, eta half the smallest subnormal; min(T + 1, C): the
# deterministic bound gamma_(T+1) for short sums, else C = 10, about 9 standard deviations of the
# worst-order rounding error of zero-mean random data (1.11 u A, whatever T).
# float64 (2^-53) counts twice: the reference rounds in float64 as the device does.
SAFETY = 10.0
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "tf32": 2.0 ** -11, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8,
                 "float64": 2.0 ** -53}
STORED_AS = {"float32": "float32", "tf32": "float32", "float16": "float16", "bfloat16": "bfloat16",
             "float64": "float64"}
UNDERFLOW = {"float32": 2.0 ** -150, "float16": 2.0 ** -25, "bfloat16": 2.0 ** -134, "float64": 2.0 ** -1075}
COMPUTATIONS = {"float64": 2}


def first_line(exc):
    text = str(exc).strip().splitlines()
    return "%s: %s" % (type(exc).__name__, text[0] if text else "")


def versions(device):
    """The stack this process loaded: python -m torch.utils.collect_env's key lines, plus the
    cuDNN wheel (collect_env misses it) and the cuDNN torch actually loaded."""
    print("== versions ==")
    print("python: %s (%s)" % (sys.version.split()[0], platform.platform()))
    print("torch: %s" % torch.__version__)
    print("torch.version.cuda: %s" % torch.version.cuda)
    try:
        loaded = torch.backends.cudnn.version()
    except Exception as exc:  # a cuDNN that does not match torch's build says so here
        loaded = "unusable (%s)" % first_line(exc)
    if isinstance(loaded, int):
        major = loaded // 10000 if loaded >= 90000 else loaded // 1000
        rest = loaded % 10000 if loaded >= 90000 else loaded % 1000
        loaded = "%d (%d.%d.%d)" % (loaded, major, rest // 100, rest % 100)
    print("torch.backends.cudnn.version(): %s" % loaded)
    for dist in ("nvidia-cudnn-cu11", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13"):
        try:
            print("%s: %s" % (dist, importlib.metadata.version(dist)))
        except importlib.metadata.PackageNotFoundError:
            pass
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            print("GPU %d: %s, capability %d.%d" % ((index, torch.cuda.get_device_name(index))
                                                  + torch.cuda.get_device_capability(index)))
    if shutil.which("nvidia-smi"):
        try:
            done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=60)
            print("driver: %s" % (done.stdout.strip().splitlines() or ["unknown"])[0])
        except (OSError, subprocess.SubprocessError) as exc:
            print("driver: unknown (%s)" % exc)
    print("device: %s" % device)


def conv(x, weight, bias, padding=None, output_padding=None, groups=None):
    # Looked up at each call, not at import: a patch of torch.nn.functional (a sitecustomize.py)
    # reaches the case and the control alike.
    fn = getattr(torch.nn.functional, OP)
    extra = {"output_padding": OUTPUT_PADDING if output_padding is None else output_padding} if TRANSPOSED else {}
    return fn(x, weight, bias, stride=STRIDE, padding=PADDING if padding is None else padding,
              dilation=DILATION, groups=GROUPS if groups is None else groups, **extra)


def pad_dim(t, dim, groups, per, new_groups, new_per):
    """Dimension dim seen as (groups, per), zero-padded to (new_groups, new_per), as the suite pads."""
    shape = t.shape
    t = t.reshape(*shape[:dim], groups, per, *shape[dim + 1:])
    t = torch.nn.functional.pad(t, [0, 0] * (t.dim() - dim - 2) + [0, new_per - per, 0, new_groups - groups])
    return t.reshape(*shape[:dim], new_groups * new_per, *shape[dim + 1:])


def unpad_dim(t, dim, new_groups, new_per, groups, per):
    t = t.unflatten(dim, (new_groups, new_per))
    return t[(slice(None),) * dim + (slice(0, groups), slice(0, per))].flatten(dim, dim + 1)


def padded(x, weight, bias):
    """Input, weight and bias with the zero channels the cell's --pad-channels added, and the
    group count the padded conv takes (the case's own when nothing is padded)."""
    if PAD is None:
        return x, weight, bias, GROUPS
    groups, in_g, out_g, new_in, new_out = PAD
    x = pad_dim(x, 1, GROUPS, in_g, groups, new_in)
    if TRANSPOSED:
        weight = pad_dim(pad_dim(weight, 0, GROUPS, in_g, groups, new_in), 1, 1, out_g, 1, new_out)
    else:
        weight = pad_dim(pad_dim(weight, 0, GROUPS, out_g, groups, new_out), 1, 1, in_g, 1, new_in)
    if bias is not None:
        bias = pad_dim(bias, 0, GROUPS, out_g, groups, new_out)
    return x, weight, bias, groups


def numel(shape):
    return math.prod(shape)


def seeded(shape, generator, dtype, device):
    """Seeded standard normals rounded to dtype; a huge tensor repeats one seeded block."""
    count = numel(shape)
    if count <= TILE_LIMIT:
        return torch.randn(shape, generator=generator).to(dtype).to(device)
    block = torch.randn(TILE_BLOCK, generator=generator).to(dtype).to(device)
    return block.repeat(-(-count // TILE_BLOCK))[:count].view(shape)


def slice_plan():
    """Where the suite's sliced reference looks: the last SLICE_POSITIONS output positions of each
    spatial dimension of the last batch entry (the last SLICE_CHANNELS output channels when
    groups == 1), and the input window they read."""
    last = INPUT_SHAPE[0] - 1
    c_out = OUTPUT_SHAPE[1]
    co = slice(max(0, c_out - SLICE_CHANNELS), c_out) if GROUPS == 1 else slice(0, c_out)
    blocks, windows, pads, offsets = [], [], [], []
    for o, length, k, s, p, d in zip(OUTPUT_SHAPE[2:], INPUT_SHAPE[2:], WEIGHT_SHAPE[2:], STRIDE, PADDING,
                                     DILATION):
        o0, o1 = max(0, o - SLICE_POSITIONS), o - 1
        blocks.append(slice(o0, o1 + 1))
        if TRANSPOSED:
            lo = max(0, -(-(o0 + p - d * (k - 1)) // s))
            hi = min(length - 1, (o1 + p) // s)
            windows.append(slice(lo, hi + 1))
            offsets.append(o0 + p - lo * s)
        else:
            lo, hi = o0 * s - p, o1 * s - p + d * (k - 1)
            windows.append(slice(max(lo, 0), min(hi, length - 1) + 1))
            pads.append((max(lo, 0) - lo, hi - min(hi, length - 1)))
    plan = {
        "output": (slice(last, last + 1), co) + tuple(blocks),
        "grad_input": (slice(last, last + 1), slice(None)) + tuple(windows),
        "grad_weight": ((slice(None), co) if TRANSPOSED else (co,)) if GROUPS == 1 else (),
        "want": [b.stop - b.start for b in blocks], "pads": pads, "offsets": offsets, "co": co,
    }
    plan["double_grad_weight"] = plan["grad_weight"]
    return plan


def make_inputs(device):
    """input, weight, bias, then the output gradient and the double-backward vector, drawn in the
    suite's order (the reference draws the last two after its forward pass; nothing in between
    draws), so every tensor equals the suite's."""
    generator = torch.Generator().manual_seed(zlib.crc32(CASE_ID.encode("utf-8")))
    dtype, compute = DTYPES[DTYPE], DTYPES[COMPUTE]
    made = {}
    for name, shape in (("input", INPUT_SHAPE), ("weight", WEIGHT_SHAPE), ("bias", BIAS_SHAPE)):
        made[name] = seeded(shape, generator, dtype, device if numel(shape) > TILE_LIMIT else "cpu")
    if not BIAS:
        made["bias"] = torch.zeros_like(made["bias"])
    made["grad_output"] = made["vector"] = None
    if not BACKWARD:
        return made
    if SLICED:  # the suite draws the block's gradient (and the window's vector), zero elsewhere
        plan = slice_plan()
        block = (1, plan["co"].stop - plan["co"].start) + tuple(plan["want"])
        grad = torch.zeros(OUTPUT_SHAPE, dtype=compute, device=device)
        grad[plan["output"]] = torch.randn(block, generator=generator).to(compute).to(device)
        made["grad_output"] = grad
        if DIRECTION == "double_backward":
            window = (1, INPUT_SHAPE[1]) + tuple(w.stop - w.start for w in plan["grad_input"][2:])
            vector = torch.zeros(INPUT_SHAPE, dtype=compute, device=device)
            vector[plan["grad_input"]] = torch.randn(window, generator=generator).to(compute).to(device)
            made["vector"] = vector
        return made
    made["grad_output"] = torch.randn(OUTPUT_SHAPE, generator=generator).to(compute)
    if DIRECTION == "double_backward":
        made["vector"] = torch.randn(INPUT_SHAPE, generator=generator).to(compute)
    return made


def place_input(x, fmt):
    """The input in the case's non-contiguous layout, then in the memory format (differentiable)."""
    if LAYOUT == "permuted":  # last two dims swapped in memory, as after a permute
        x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif LAYOUT == "sliced":  # every other element of a buffer twice as wide
        buffer = x.new_zeros(tuple(x.shape[:-1]) + (2 * x.shape[-1],))
        buffer[..., ::2] = x
        x = buffer[..., ::2]
    elif LAYOUT == "transposed":  # N and C swapped in memory
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
    elif LAYOUT == "nhwc_strided":  # channels last in memory, as x.permute(0, 3, 1, 2) of (N, H, W, C) leaves it
        x = x.movedim(1, -1).contiguous().movedim(-1, 1)
    elif INPUT_STRIDES is not None:  # the case's own view: x copied into a buffer just large enough
        extent = STORAGE_OFFSET + sum((n - 1) * s for n, s in zip(x.shape, INPUT_STRIDES)) + 1
        buffer = x.new_zeros(extent)
        buffer.as_strided(x.shape, INPUT_STRIDES, STORAGE_OFFSET).copy_(x)
        x = buffer.as_strided(x.shape, INPUT_STRIDES, STORAGE_OFFSET)
    if fmt is not None:
        x = x.contiguous(memory_format=fmt)
    return x


def memory_format(rank):
    if MEMORY_FORMAT is not None:
        return FORMATS[MEMORY_FORMAT]
    if CHANNELS_LAST_KNOB and rank == 4:
        return torch.channels_last
    if CHANNELS_LAST_KNOB and rank == 5:
        return torch.channels_last_3d
    return None


def captured(eager):
    """The conv captured in a CUDA graph (after warm-up calls on a side stream), replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            eager()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = eager()

    def replay():
        graph.replay()
        return static

    return replay


def run_case(made, device, via):
    """The conv on the device as the suite ran it: output and the direction's gradients."""
    x_leaf = made["input"].to(device).detach().requires_grad_(BACKWARD and DIRECTION != "backward_weight")
    w_leaf = made["weight"].to(device).detach().requires_grad_(BACKWARD and DIRECTION != "backward_input")
    bias = made["bias"].to(device) if BIAS else None
    x, weight, bias, groups = padded(x_leaf, w_leaf, bias)
    x = place_input(x, memory_format(x.dim()))
    fmt = FORMATS[WEIGHT_MEMORY_FORMAT] if WEIGHT_MEMORY_FORMAT is not None else memory_format(weight.dim())
    weight = weight.contiguous(memory_format=fmt) if fmt is not None else weight

    def call(x, weight, bias):
        return conv(x, weight, bias, groups=groups)

    if via == "compile":  # fullgraph: a graph break would run the conv eagerly
        call = torch.compile(call, fullgraph=True, dynamic=False)

    def eager():
        if AUTOCAST is None:
            return call(x, weight, bias)
        with torch.autocast(device_type=device, dtype=DTYPES[AUTOCAST]):
            return call(x, weight, bias)

    forward = captured(eager) if via == "cuda_graph" and device == "cuda" else eager

    def backward(out):
        grad = made["grad_output"].to(device=device, dtype=out.dtype)
        if PAD is not None:  # the padded output channels get zero gradient
            grad = pad_dim(grad, 1, GROUPS, PAD[2], PAD[0], PAD[4])
        if DIRECTION == "double_backward":  # as a gradient penalty: grad_input kept differentiable
            grad_input, grad_weight = torch.autograd.grad(out, (x_leaf, w_leaf), grad, create_graph=True)
            vector = made["vector"].to(device=device, dtype=grad_input.dtype)
            (double,) = torch.autograd.grad(grad_input, (w_leaf,), vector)
            return {"grad_input": grad_input.detach(), "grad_weight": grad_weight.detach(),
                    "double_grad_weight": double}
        leaves = [(name, leaf) for name, leaf in (("grad_input", x_leaf), ("grad_weight", w_leaf))
                  if leaf.requires_grad]
        found = torch.autograd.grad(out, [leaf for _, leaf in leaves], grad)
        return dict(zip([name for name, _ in leaves], found))

    if device == "cuda":  # the suite's warm-up call (benchmark mode searches here)
        warm = forward()
        if BACKWARD:
            backward(warm)
        del warm
        torch.cuda.synchronize()
    out = forward()
    if out.dtype != DTYPES[COMPUTE]:
        raise AssertionError("autocast ran %s in %s, not %s" % (OP, out.dtype, COMPUTE))
    got = {}
    if BACKWARD:
        got.update(backward(out))
    if PAD is not None:  # the case's own channels, as the suite compares them
        out = unpad_dim(out, 1, PAD[0], PAD[4], GROUPS, PAD[2])
    got["output"] = out.detach()
    if device == "cuda":  # kernel errors surface asynchronously: make them surface here
        torch.cuda.synchronize()
    return got


def evaluate(forward, x, weight, bias, grad=None, vector=None):
    """forward in float64 and the gradients the direction takes (tolerance.evaluate)."""
    x, weight = (t.detach().requires_grad_(grad is not None) for t in (x, weight))
    out = forward(x, weight, bias)
    found = {"output": out.detach()}
    if grad is None:
        return found
    grad_input, grad_weight = torch.autograd.grad(out, (x, weight), grad, create_graph=vector is not None)
    found.update(grad_input=grad_input.detach(), grad_weight=grad_weight.detach())
    if vector is not None:
        (found["double_grad_weight"],) = torch.autograd.grad(grad_input, (weight,), vector)
    return found


def reference(made):
    """The float64 results on the CPU from the inputs as the device computes with them (autocast
    rounds them), with their sums of |terms| (the same ops on absolute values), the index of the
    device tensor each covers and how many terms an element sums at most."""
    compute = DTYPES[COMPUTE]
    kernel = numel(WEIGHT_SHAPE[2:])
    terms = {"output": INPUT_SHAPE[1] // GROUPS * kernel + 1, "grad_input": OUTPUT_SHAPE[1] // GROUPS * kernel}
    if SLICED:
        plan = slice_plan()
        index = plan
        x = made["input"][plan["grad_input"]].cpu().to(compute).double()
        weight = made["weight"][plan["grad_weight"]].cpu().to(compute).double()
        bias = made["bias"][plan["co"]].cpu().to(compute).double()
        grad = made["grad_output"][plan["output"]] if BACKWARD else None
        vector = made["vector"][plan["grad_input"]] if made["vector"] is not None else None
        zeros = (0,) * SPATIAL
        terms["grad_weight"] = terms["double_grad_weight"] = numel(plan["want"])

        def forward(x, weight, bias):
            if TRANSPOSED:  # no output padding: the window's output is cut to the block instead
                full = conv(x, weight, None, padding=zeros, output_padding=zeros)
                short = [max(0, off + n - size) for off, n, size in zip(plan["offsets"], plan["want"], full.shape[2:])]
                full = torch.nn.functional.pad(full, [amount for extra in reversed(short) for amount in (0, extra)])
                out = full[(slice(None), slice(None)) + tuple(slice(off, off + n)
                                                              for off, n in zip(plan["offsets"], plan["want"]))]
            else:
                flat = [amount for pair in reversed(plan["pads"]) for amount in pair]
                out = conv(torch.nn.functional.pad(x, flat), weight, None, padding=zeros)
            return out + bias.view((1, -1) + (1,) * SPATIAL)
    else:
        index = dict.fromkeys(("output", "grad_input", "grad_weight", "double_grad_weight"), ())
        x, weight, bias = (made[name].cpu().to(compute).double() for name in ("input", "weight", "bias"))
        grad, vector = made["grad_output"], made["vector"]
        terms["grad_weight"] = terms["double_grad_weight"] = INPUT_SHAPE[0] * max(numel(INPUT_SHAPE[2:]),
                                                                                  numel(OUTPUT_SHAPE[2:]))

        def forward(x, weight, bias):
            return conv(x, weight, bias)

    grad = None if grad is None else grad.cpu().double()
    vector = None if vector is None else vector.cpu().double()
    exact = evaluate(forward, x, weight, bias, grad, vector)
    size = evaluate(forward, x.abs(), weight.abs(), bias.abs(), None if grad is None else grad.abs(),
                    None if vector is None else vector.abs())
    return {name: (exact[name], size[name], index[name], terms[name]) for name in exact}


def precision(device):
    if COMPUTE == "float32" and device != "cpu" and ALLOW_TF32 is not False:
        return "tf32"
    return COMPUTE


def compare(got, expected, device):
    """Each tensor's worst |got - y| / tol (above 1 is a mismatch, NaN too), and what failed."""
    name_of = precision(device)
    u, stored = UNIT_ROUNDOFF[name_of], STORED_AS[name_of]
    failing = []
    for name, (ref, magnitude, index, terms) in expected.items():
        if name not in got:
            continue
        part = got[name][index].detach().to("cpu", torch.float64)
        if part.shape != ref.shape:
            failing.append("%s has shape %s, the reference %s" % (name, tuple(part.shape), tuple(ref.shape)))
            continue
        tol = COMPUTATIONS.get(name_of, 1) * (UNIT_ROUNDOFF[stored] * ref.abs() + min(terms + 1, SAFETY) * u
                                              * magnitude + (terms + 1) * UNDERFLOW[stored])
        err = (part - ref).abs()
        ratio = torch.nan_to_num(err / tol, nan=math.inf)
        worst = float(ratio.max()) if ratio.numel() else 0.0
        print("  %s: max |got - ref| = %.3g, worst |got - ref| / tol = %.3g (u = %.3g, %s, T = %d, C = %g)"
              % (name, float(err.max()) if err.numel() else 0.0, worst, u, name_of, terms, SAFETY))
        if not worst <= 1.0:
            failing.append("%s is %.3g times its tolerance" % (name, worst))
    return failing


def main():
    parser = argparse.ArgumentParser(description="convmatrix repro of " + CASE_ID)
    parser.add_argument("--device", choices=("cuda", "cpu"), default=DEFAULT_DEVICE)
    device = parser.parse_args().device
    versions(device)
    print("== case %s: %s, %s, direction %s ==" % (CASE_ID, OP, COMPUTE, DIRECTION))
    if device == "cuda" and not torch.cuda.is_available():
        print("CANNOT JUDGE: CUDA is not available here (try --device cpu)")
        return EXIT_CONTROL_FAILS
    if VIA == "cuda_graph" and device != "cuda":
        print("note: the case replays a CUDA graph; on the CPU it runs eagerly")
    torch.backends.cudnn.benchmark = BENCHMARK
    torch.backends.cudnn.deterministic = DETERMINISTIC
    if ALLOW_TF32 is not None:
        torch.backends.cudnn.allow_tf32 = ALLOW_TF32
    made = make_inputs(device)

    # The control first: the float64 reference (and on CUDA the case with cuDNN off).
    control = []
    expected = None
    try:
        with torch.backends.cudnn.flags(enabled=False):
            expected = reference(made)
    except Exception as exc:
        control.append("the float64 reference raised %s" % first_line(exc))
    if device == "cuda" and expected is not None:
        print("-- control: the case with cuDNN off")
        try:
            with torch.backends.cudnn.flags(enabled=False):
                control += compare(run_case(made, device, None), expected, device)
        except Exception as exc:
            control.append("the case with cuDNN off raised %s" % first_line(exc))

    print("-- the case%s" % ("" if CUDNN_ENABLED else " (cuDNN off, as in the cell)"))
    torch.backends.cudnn.enabled = CUDNN_ENABLED
    failed = None
    cannot = None
    try:
        got = run_case(made, device, VIA)
        print("output sum (float64): %r" % float(got["output"].double().sum()))
        if expected is not None:
            failing = compare(got, expected, device)
            if failing:
                failed = "numeric mismatch: " + "; ".join(failing) + " (%s)" % precision(device)
    except Exception as exc:
        failed = "%s: %s" % (type(exc).__name__, str(exc).strip())
        if device == "cpu" and any("not implemented for '%s'" % name in str(exc) for name in ("Half", "BFloat16")):
            cannot = "this torch has no CPU kernel for the case's dtype"
    if failed:
        print("REPRODUCES: " + failed)
    if control or cannot:
        print("CONTROL FAILS TOO: " + "; ".join(control + ([cannot] if cannot else [])))
        return EXIT_CONTROL_FAILS
    if failed:
        return EXIT_REPRODUCES
    print("PASSES: the case ran and matched the float64 reference within its bound")
    return EXIT_PASSES


if __name__ == "__main__":
    sys.exit(main())
'''
