"""A model's convolutions as case entries (`convmatrix cases --from-model`), recorded on the CPU
with no memory for the model and no weights.

The model is built by the user's callable under ``torch.device("meta")`` (every parameter and
buffer a meta tensor: shapes and strides, no storage), cast on meta (``model.to(float16)`` under
FakeTensorMode fails; on meta it is a relabelling), and run on meta inputs of the given shapes
inside a ``TorchDispatchMode`` that sees each aten call as the model made it. Each convolution
(``aten.convolution``, ``aten._convolution``, and with ``--backward`` ``aten.convolution_backward``)
is read for its shapes, strides, groups, padding, stride, dilation, transposition, output padding
and dtype, and becomes a case entry of suites/casefile.py's keys; identical convolutions (the 16
bottleneck 3x3s of a ResNet stage) are one case with a call count.

What is observed and what is stamped:
- dtype, memory format (from the input's strides, or the weight's: PyTorch's convolution picks
  channels_last when either is), groups, padding, stride, dilation, transposition: observed.
- ``--autocast``: stamped. Autocast does not apply to meta tensors without CUDA (the meta device has
  no autocast dispatch key of its own), so the model runs in float32 and each case is written
  ``dtype = "float32"``, ``autocast = X``, which is what an autocast region hands cuDNN's
  convolution: a float32 module whose convolution runs in X. The file's header says so.
- The backend's own overloads (``aten.cudnn_convolution``, ``aten.mkldnn_convolution``, ...) are
  chosen below ``aten.convolution`` on a real device; on meta the call stops at
  ``aten.convolution``'s meta kernel, so they never show: recording them would need the device.

Bounds: the recording stops with BadInput (exit 2), nothing written, past MAX_SECONDS of wall
time (a SIGALRM on the main thread), past MAX_RSS_GROWTH of resident memory (read every
_RSS_EVERY aten calls: a meta model holds none, so growth means the callable built real tensors),
past MAX_CASES distinct convolutions, or when a parameter of the built model is off the meta device.
A callable that cannot be imported, or that raises, is one line naming it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convmatrix.errors import BadInput
from convmatrix.triage import snippets

MAX_SECONDS = 120.0  # a ResNet-50's forward and backward records in well under a second
MAX_RSS_GROWTH = 2 << 30  # bytes: a meta model holds no data; a few hundred MB of Python objects at most
MAX_CASES = 1000  # distinct convolutions; suites/casefile.py takes 10,000 a file, a model has a few hundred
MAX_INPUTS = 16
MAX_KWARGS = 64 << 10  # characters of --kwargs
MAX_CALLS = 10_000_000  # aten calls: a bound on a model that loops forever inside one op pattern
_RSS_EVERY = 512  # aten calls between two reads of /proc/self/statm
DTYPES = ("float32", "float16", "bfloat16")
_SHAPE = re.compile(r"[1-9][0-9]{0,9}(?:x[1-9][0-9]{0,9}){0,7}\Z")
_TARGET = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*\Z")
_FIELD_ORDER = ("name", "op", "input", "out_channels", "kernel", "stride", "padding", "dilation", "groups",
                "output_padding", "bias", "dtype", "autocast", "memory_format", "direction", "captured_from",
                "source")


class _Stop(BaseException):
    """A bound reached while recording (raised from the dispatch mode or the alarm). A
    BaseException, so that a model's own `except Exception` does not swallow it."""


@dataclass
class Recorded:
    """The distinct convolutions of one run, in the order first seen, and how often each ran."""

    cases: list[dict[str, Any]] = field(default_factory=list)
    counts: list[dict[str, int]] = field(default_factory=list)  # per case: forward, backward calls
    calls: int = 0  # convolution calls seen (forward and backward)
    aten_calls: int = 0
    notes: list[str] = field(default_factory=list)


def parse_shape(text: str) -> tuple[int, ...]:
    """`8x3x224x224` as a shape; BadInput naming --input otherwise."""
    if not _SHAPE.match(text):
        raise BadInput(f"--input {text!r}: expected extents joined by 'x', e.g. 8x3x224x224 (1 to 8 of them)")
    return tuple(int(part) for part in text.split("x"))


def parse_target(text: str) -> tuple[str, str]:
    """`MODULE:CALLABLE` (dotted on both sides) as its two halves."""
    if not _TARGET.match(text):
        raise BadInput(f"--from-model {text!r}: expected MODULE:CALLABLE, e.g. torchvision.models:resnet50")
    module, _, name = text.partition(":")
    return module, name


def parse_kwargs(text: str | None) -> dict[str, Any]:
    """--kwargs: a JSON object of the callable's keyword arguments (bounded: a few settings)."""
    if text is None:
        return {}
    if len(text) > MAX_KWARGS:
        raise BadInput(f"--kwargs: over {MAX_KWARGS} characters")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"--kwargs: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BadInput("--kwargs: expected a JSON object of keyword arguments, e.g. '{\"num_classes\": 10}'")
    return value


# What a package's compiled ops say at import when they were built for another build of torch:
# PyPI's torchvision wheel is built for PyPI's (CUDA) torch, and beside a CPU-only torch its _C
# extension does not load, after which torchvision 0.28's meta registrations fail with this line.
_MISSING_OP = re.compile(r"operator ([A-Za-z_][A-Za-z0-9_]*)::[A-Za-z_][A-Za-z0-9_.]* does not exist")


def _mismatch_hint(exc: BaseException) -> str:
    """A hint for an extension built against another torch build (else nothing): which torch is
    here, and that the package must be the release built for it."""
    found = _MISSING_OP.search(str(exc))
    if found is None:
        return ""
    import torch

    return (f" ({found.group(1)}'s compiled ops do not match torch {torch.__version__}: install the {found.group(1)} "
            f"release built for this torch, from the same index, e.g. both from PyPI)")


def load_callable(target: str) -> Any:
    module_name, attr = parse_target(target)
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # a user's module: any error on import is theirs, told in one line
        raise BadInput(f"--from-model {target}: cannot import {module_name}: {type(exc).__name__}: "
                       f"{_first_line(exc)}{_mismatch_hint(exc)}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise BadInput(f"--from-model {target}: {module_name} has no {attr}") from None
    if not callable(obj):
        raise BadInput(f"--from-model {target}: {attr} is not callable")
    return obj


def record(target: str, inputs: Sequence[tuple[int, ...]], *, dtype: str = "float32", autocast: str | None = None,
           channels_last: bool = False, backward: bool = False, kwargs: Mapping[str, Any] | None = None,
           max_seconds: float = MAX_SECONDS, max_rss_growth: int = MAX_RSS_GROWTH,
           max_cases: int = MAX_CASES) -> Recorded:
    """Every convolution `target`'s model runs on meta inputs of `inputs` shapes, as case entries."""
    if dtype not in DTYPES:
        raise BadInput(f"--dtype {dtype}: expected one of {', '.join(DTYPES)}")
    if autocast is not None and autocast not in ("float16", "bfloat16"):
        raise BadInput(f"--autocast {autocast}: expected float16 or bfloat16")
    if autocast is not None and dtype != "float32":
        raise BadInput("--autocast runs a float32 model (the autocast dtype is the convolutions'): drop --dtype")
    if not inputs or len(inputs) > MAX_INPUTS:
        raise BadInput(f"--input: give 1 to {MAX_INPUTS} input shapes")
    try:
        import torch  # lazily: only --from-model needs torch, and the CLI runs where there is none
        from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401 (checked here, used below)
    except ImportError as exc:
        raise BadInput(f"--from-model needs torch in this interpreter ({exc})") from None
    make = load_callable(target)
    recorder = _recorder_class()(target, inputs, autocast, max_rss_growth, max_cases)
    torch_dtype = getattr(torch, dtype)
    memory_format = {4: torch.channels_last, 5: torch.channels_last_3d}
    with _deadline(max_seconds, target), recorder:
        try:
            with torch.device("meta"):
                model = make(**dict(kwargs or {}))
        except Exception as exc:  # the user's callable: any error is theirs, told in one line
            raise BadInput(f"--from-model {target}: the callable raised {type(exc).__name__}: "
                           f"{_first_line(exc)}") from None
        if not isinstance(model, torch.nn.Module):
            raise BadInput(f"--from-model {target}: returned a {type(model).__name__}, not a torch.nn.Module")
        off = [name for name, t in [*model.named_parameters(), *model.named_buffers()] if t.device.type != "meta"]
        if off:
            raise BadInput(f"--from-model {target}: {len(off)} parameter(s) or buffer(s) built off the meta device "
                           f"({off[0]} on {dict([*model.named_parameters(), *model.named_buffers()])[off[0]].device}):"
                           " build them on the default device so that no memory is allocated")
        try:
            model = model.to(dtype=torch_dtype)
            if channels_last:
                # Module.to(memory_format=channels_last) refuses a 5-d parameter (a Conv3d's): each
                # tensor takes its rank's channels-last format, as the inputs do.
                for t in [*model.parameters(), *model.buffers()]:
                    if t.dim() in memory_format:
                        t.data = t.data.to(memory_format=memory_format[t.dim()])
            model.train(backward)
            tensors = []
            for shape in inputs:
                t = torch.empty(shape, device="meta", dtype=torch_dtype)
                if channels_last and len(shape) in memory_format:
                    t = t.to(memory_format=memory_format[len(shape)])
                tensors.append(t)
            recorder.on = True
            with torch.set_grad_enabled(backward):
                out = model(*tensors)
            if backward:
                grads = [t for t in _tensors(out) if t.requires_grad]
                if not grads:
                    raise BadInput(f"--from-model {target}: --backward, but no output of the model needs a gradient")
                torch.autograd.backward(grads, [torch.empty_like(t) for t in grads])
        except BadInput:
            raise
        except Exception as exc:  # the user's model: any error is theirs, told in one line
            raise BadInput(f"--from-model {target}: the model raised {type(exc).__name__} on inputs "
                           f"{_shapes(inputs)}: {_first_line(exc)}") from None
    found: Recorded = recorder.result()
    if not found.cases:
        raise BadInput(f"--from-model {target}: the model ran no convolution on inputs {_shapes(inputs)}")
    return found


def header(target: str, inputs: Sequence[tuple[int, ...]], found: Recorded, *, autocast: str | None,
           backward: bool, seconds: float) -> str:
    """What the case file's header says: where the cases come from, what was stamped."""
    said = (f"Recorded by `convmatrix cases --from-model {target}` on inputs {_shapes(inputs)}"
            f"{' forward and backward' if backward else ' forward'}, on the meta device (no weights, no "
            f"memory): {found.calls} convolution call(s) as {len(found.cases)} distinct case(s) in {seconds:.2f} s; "
            "each case's source says how many calls it stands for.")
    if autocast is not None:
        said += (f" autocast = {autocast} is stamped by the tool, not observed: autocast does not apply to meta "
                 "tensors, so the model ran in float32 and each convolution is written as a float32 case run "
                 f"under {autocast} autocast.")
    return said


def to_case_file(cases: list[dict[str, Any]], said: str, suffix: str) -> str:
    """The recorded cases as a case file in its suffix's format (snippets.case_file, --from-log's writer too)."""
    return snippets.case_file(cases, said, suffix)


# -- the dispatch mode ----------------------------------------------------------------------------

def _recorder_class() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode  # lazily: torch only for --from-model

    class _Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
        """Sees every aten call; keeps the convolutions once `on` is set (after the model is built)."""

        def __init__(self, target: str, inputs: Sequence[tuple[int, ...]], autocast: str | None,
                     max_rss_growth: int, max_cases: int) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.target = target
            self.where = f"{target}({_shapes(inputs)})"
            self.autocast = autocast
            self.on = False
            self.keys: dict[tuple[Any, ...], int] = {}
            self.found = Recorded()
            self.max_cases = max_cases
            self.rss_base = _rss()
            self.max_rss = self.rss_base + max_rss_growth
            import torch  # lazily, as above

            aten = torch.ops.aten
            self.forward_ops = {aten.convolution.default, aten._convolution.default}
            self.backward_ops = {aten.convolution_backward.default}

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            found = self.found
            found.aten_calls += 1
            if found.aten_calls % _RSS_EVERY == 0:
                self._check_bounds()
            if self.on:
                if func in self.forward_ops:
                    self._add(_forward_call(args), backward=False)
                    self._check_bounds()
                elif func in self.backward_ops:
                    self._add(_backward_call(args), backward=True)
                    self._check_bounds()
            return func(*args, **(kwargs or {}))

        def _check_bounds(self) -> None:
            if self.found.aten_calls > MAX_CALLS:
                raise _Stop(f"--from-model {self.target}: over {MAX_CALLS} aten calls: is the model looping?")
            rss = _rss()
            if rss > self.max_rss:
                grown = (self.max_rss - self.rss_base) >> 20
                raise _Stop(f"--from-model {self.target}: the recording grew past {grown} MiB of memory: does the "
                            "model build tensors off the meta device?")

        def _add(self, call: dict[str, Any] | None, *, backward: bool) -> None:
            if call is None:
                return
            self.found.calls += 1
            direction = call.pop("direction")
            key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in call.items()))
            index = self.keys.get(key)
            if index is None:
                if len(self.found.cases) >= self.max_cases:
                    raise _Stop(f"--from-model {self.target}: over {self.max_cases} distinct convolutions "
                                "(a case file's bound here)")
                index = len(self.found.cases)
                self.keys[key] = index
                self.found.cases.append({**call, "direction": None, "masks": set()})
                self.found.counts.append({"forward": 0, "backward": 0})
            self.found.counts[index]["backward" if backward else "forward"] += 1
            if direction is not None:
                self.found.cases[index]["masks"].add(direction)

        def result(self) -> Recorded:
            found = self.found
            entries = []
            for number, (case, counts) in enumerate(zip(found.cases, found.counts, strict=True), 1):
                masks = case.pop("masks")
                case.pop("direction")
                # A case that ran backward runs its forward too (the suite's "backward" is both);
                # a first layer, whose input needs no gradient, computes the weight's alone.
                if not masks:
                    direction = "forward"
                elif masks == {"backward_weight"}:
                    direction = "backward_weight"
                elif masks == {"backward_input"}:
                    direction = "backward_input"
                else:
                    direction = "backward"
                calls = f"{counts['forward']} forward call(s)"
                if counts["backward"]:
                    calls += f" and {counts['backward']} backward call(s)"
                entry = {**case, "name": f"{_slug(self.target)}_{number}", "direction": direction,
                         "captured_from": self.where[:400],
                         "source": f"recorded by convmatrix cases --from-model from {self.where[:300]}: {calls}"}
                if self.autocast is not None:
                    entry["autocast"] = self.autocast
                if direction == "forward":
                    del entry["direction"]
                entries.append({k: entry[k] for k in _FIELD_ORDER if k in entry})
            found.cases = entries
            return found

    return _Recorder


def _forward_call(args: Sequence[Any]) -> dict[str, Any] | None:
    # aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    # (aten::_convolution has the same nine first, then the backend flags).
    x, weight, bias, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    return _entry(x, weight, bias is not None, stride, padding, dilation, bool(transposed), output_padding,
                  int(groups), None)


def _backward_call(args: Sequence[Any]) -> dict[str, Any] | None:
    # aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    #                            transposed, output_padding, groups, output_mask)
    _grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, mask = args[:11]
    direction = ("backward" if mask[0] and mask[1] else "backward_input" if mask[0] else
                 "backward_weight" if mask[1] else None)
    if direction is None:
        return None  # the bias's gradient alone: no convolution runs
    # Autograd hands bias_sizes [0] for a convolution without bias (and the bias's size with one).
    bias = bias_sizes is not None and len(bias_sizes) > 0 and all(int(v) > 0 for v in bias_sizes)
    return _entry(x, weight, bias, stride, padding, dilation, bool(transposed), output_padding, int(groups),
                  direction)


def _entry(x: Any, weight: Any, bias: bool, stride: Sequence[int], padding: Sequence[int],
           dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int,
           direction: str | None) -> dict[str, Any] | None:
    import torch  # lazily, as in record

    dims = x.dim() - 2
    if dims not in (1, 2, 3) or weight.dim() != dims + 2:
        return None  # an unbatched call is batched by torch before aten sees it; anything else is not a conv case
    kernel = list(weight.shape[2:])
    out_channels = int(weight.shape[1]) * groups if transposed else int(weight.shape[0])
    entry: dict[str, Any] = {
        "op": f"conv_transpose{dims}d" if transposed else f"conv{dims}d",
        "input": [int(v) for v in x.shape], "out_channels": out_channels,
        "kernel": _one_or_list(kernel), "stride": _one_or_list(stride), "padding": _one_or_list(padding),
        "dilation": _one_or_list(dilation), "groups": groups, "bias": bias,
        "dtype": {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(x.dtype,
                                                                                                     str(x.dtype)),
        "memory_format": _memory_format(x, weight, dims),
        "direction": direction,
    }
    if transposed and any(output_padding):
        entry["output_padding"] = _one_or_list(output_padding)
    return entry


def _memory_format(x: Any, weight: Any, dims: int) -> str:
    """channels_last where PyTorch's convolution picks it: when the input's or the weight's strides
    are channels_last's (ATen's cudnn_conv_suggest_memory_format takes either). The strides are
    compared whole, as ATen's suggest_memory_format does, so a 1x1 weight, contiguous both ways,
    still tells. The weight decides in practice: the meta kernels of batch norm and pooling hand on
    contiguous outputs whatever their input's layout, where a device's keep channels_last."""
    if dims not in (2, 3):
        return "contiguous"
    for t in (x, weight):
        shape, strides = list(t.shape), list(t.stride())
        if strides == _channels_last_strides(shape) and strides != _contiguous_strides(shape):
            return "channels_last" if dims == 2 else "channels_last_3d"
    return "contiguous"


def _contiguous_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return strides[::-1]


def _channels_last_strides(shape: list[int]) -> list[int]:
    """N, C, *spatial laid out as N, *spatial, C (torch's channels_last and channels_last_3d)."""
    order = [1, *range(len(shape) - 1, 1, -1), 0]  # innermost first: C, then the last spatial dim out
    strides, step = [0] * len(shape), 1
    for dim in order:
        strides[dim] = step
        step *= max(shape[dim], 1)
    return strides


def _one_or_list(values: Sequence[int]) -> Any:
    values = [int(v) for v in values]
    return values[0] if len(set(values)) == 1 else values


# -- bounds and helpers ---------------------------------------------------------------------------

@contextlib.contextmanager
def _deadline(seconds: float, target: str) -> Iterator[None]:
    """A wall-clock bound on building and running the model (SIGALRM raises _Stop in the main thread,
    in Python code between two bytecodes or when the current aten call returns; elsewhere no alarm),
    and every bound reached inside as one line of BadInput."""
    alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")

    def expire(_signum: int, _frame: Any) -> None:
        raise _Stop(f"--from-model {target}: recording took over {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire) if alarm else None
    if alarm:
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Stop as exc:
        raise BadInput(str(exc)) from None
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _rss() -> int:
    """Resident bytes of this process (Linux's /proc; 0 elsewhere, where the bound does not apply)."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _tensors(out: Any) -> list[Any]:
    """Every tensor in a model's output: a tensor, a tuple or list, a dict, or a dataclass-like
    output object (diffusers' DecoderOutput, transformers' ModelOutput are dicts or have fields)."""
    import torch  # lazily, as in record

    found: list[Any] = []
    stack = [out]
    seen = 0
    while stack and seen < 10_000:
        seen += 1
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif hasattr(item, "__dataclass_fields__"):
            stack.extend(getattr(item, name, None) for name in item.__dataclass_fields__)
    return found


def _shapes(inputs: Sequence[tuple[int, ...]]) -> str:
    return ", ".join("x".join(str(v) for v in shape) for shape in inputs)


def _slug(target: str) -> str:
    """The callable's name as the start of its cases' names (lower-case letters, digits, '_')."""
    name = target.rpartition(":")[2].rpartition(".")[2]
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:40] or "model"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else "(no message)"

