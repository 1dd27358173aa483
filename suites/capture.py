"""The recorder of `convmatrix cases --from-model`, run in an interpreter of its own.

    python -I suites/capture.py FD      (the request, JSON, on stdin; messages on file descriptor FD)

convmatrix (src/convmatrix/triage/from_model.py) starts this script in a child process of the same
Python, in a session of its own, and hands it a request on stdin: the callable `MODULE:CALLABLE`,
its keyword arguments (or --config, the dict a transformers or diffusers class is built from), the
input shapes and each one's own dtype, dtype, autocast, channels_last, backward, the bound on
distinct cases and the parent's `sys.path` (so the callable imports as it would in convmatrix's own
process, while `-I` keeps the environment's PYTHON* variables and the working folder out). This
script imports no convmatrix: like the rest of suites/ it needs torch and the standard library only.

It says what it does on FD, one JSON object a line, and nothing else goes there (what the model
prints goes to stdout and stderr, which the parent reads apart and never puts in the case file):

    {"torch": {"rss": BYTES, "version": "2.13.0"}}    torch imported: the memory baseline
    {"phase": "import" | "build" | "build_cpu" | "run" | "hand_over"}
    {"done": {"cases": [...], "counts": [...], "calls": N, "aten_calls": N, "notes": [...]}}
    {"error": "one line"}                               the user's code failed, or a bound was hit

then leaves with os._exit(0) (no atexit handler or lingering thread of the model's runs after). Any
other end (an exit of the model's own, a signal, the parent's kill past its wall-clock or memory
bound) is told by the parent in one line. The parent enforces the bounds: this script keeps only
the ones that need the dispatch mode (distinct cases, aten calls).

How a model is recorded: it is built by the callable under ``torch.device("meta")`` (every
parameter and buffer a meta tensor: shapes and strides, no storage), cast on meta
(``model.to(float16)`` under FakeTensorMode fails; on meta it is a relabelling), and run on meta
inputs of the given shapes inside a ``TorchDispatchMode`` that sees each aten call as the model made
it. Each convolution (``aten.convolution``, ``aten._convolution``, and with backward
``aten.convolution_backward``) is read for its shapes, strides, groups, padding, stride, dilation,
transposition, output padding and dtype, and becomes a case entry of casefile.py's keys; identical
convolutions (the 16 bottleneck 3x3s of a ResNet stage) are one case with a call count. A builder
that reads a tensor's value (`.item()`, as YOLO-style builders do to learn their strides) cannot
run on meta: the model is then built for real on the CPU (under the parent's same bounds), moved to
meta, and recorded as any other; the file's header says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import re
import signal
import sys
from typing import Any, Mapping, Sequence

MAX_CALLS = 10_000_000  # aten calls: a bound on a model that loops forever inside one op pattern
FIELD_ORDER = ("name", "op", "input", "out_channels", "kernel", "stride", "padding", "dilation", "groups",
               "output_padding", "bias", "dtype", "autocast", "memory_format", "direction", "captured_from",
               "source")
# What torch says when code reads a meta tensor's value (.item(), bool(), .tolist(), .numpy(), an
# op with a data-dependent shape): the builder needs real tensors.
_READS_VALUES = re.compile(r"\bmeta\b", re.IGNORECASE)
# What a package's compiled ops say when they were built for another build of torch: PyPI's
# torchvision wheel is built for PyPI's (CUDA) torch, and beside a CPU-only torch its _C extension
# does not load, after which torchvision 0.28's meta registrations fail with this line.
_MISSING_OP = re.compile(r"operator ([A-Za-z_][A-Za-z0-9_]*)::[A-Za-z_][A-Za-z0-9_.]* does not exist")


class Failed(Exception):
    """The recording cannot go on: its one line, sent as the error."""


class Stop(BaseException):
    """A bound reached inside the dispatch mode. A BaseException, so that a model's own
    `except Exception` does not swallow it (one that swallows BaseException meets the parent's kill)."""


class Channel:
    """The messages to the parent: JSON lines on their own file descriptor."""

    def __init__(self, fd: int) -> None:
        os.set_inheritable(fd, False)  # the model's own subprocesses do not get it
        self.fd = fd

    def send(self, message: Mapping[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")
        while data:
            data = data[os.write(self.fd, data):]


def main(argv: Sequence[str]) -> None:
    channel = Channel(int(argv[1]))
    request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    _detach(int(request["parent"]))
    sys.path[:] = [str(p) for p in request["path"]]
    target = str(request["target"])
    try:
        done = record(channel, target, request)
    except Failed as exc:
        channel.send({"error": str(exc)})
    except Stop as exc:
        channel.send({"error": str(exc)})
    except BaseException as exc:  # an end that is not the recording's: told in one line
        channel.send({"error": f"--from-model {target}: the recorder failed: {type(exc).__name__}: {first_line(exc)}"})
    else:
        channel.send({"done": done})
    _leave()


def _detach(parent: int) -> None:
    """Stdin to /dev/null (the model reads no request), and die with the parent (Linux): a killed
    convmatrix leaves no recording running."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _leave() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def record(channel: Channel, target: str, request: Mapping[str, Any]) -> dict[str, Any]:
    inputs = [tuple(int(v) for v in shape) for shape in request["inputs"]]
    try:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401 (checked here, used below)
    except ImportError as exc:
        raise Failed(f"--from-model needs torch in this interpreter ({exc})") from None
    warm_up()
    channel.send({"torch": {"rss": rss(), "version": torch.__version__}})
    channel.send({"phase": "import"})
    make = load_callable(target)
    recorder = recorder_class()(target, inputs, request.get("autocast"), int(request["max_cases"]))
    torch_dtype = getattr(torch, str(request["dtype"]))
    channels_last = bool(request["channels_last"])
    backward = bool(request["backward"])
    kwargs = dict(request.get("kwargs") or {})
    config = request.get("config")
    if config is not None:
        make = configured(make, dict(config), target)
    input_dtypes = list(request.get("input_dtypes") or [None] * len(inputs))
    memory_format = {4: torch.channels_last, 5: torch.channels_last_3d}
    with recorder:
        channel.send({"phase": "build"})
        try:
            with torch.device("meta"):
                model = make(**kwargs)
        except Stop:
            raise
        except BaseException as exc:  # the user's callable: any end is theirs, told in one line
            if not reads_values(exc):
                raise Failed(f"--from-model {target}: the callable {raised(exc)}") from None
            channel.send({"phase": "build_cpu"})
            model = build_on_cpu(make, kwargs, target, exc)
            recorder.found_notes.append(
                f"The model was built on the CPU, then moved to the meta device: its builder reads tensor values "
                f"({first_line(exc)}), which meta tensors do not have.")
        if not isinstance(model, torch.nn.Module):
            raise Failed(f"--from-model {target}: returned a {type(model).__name__}, not a torch.nn.Module")
        named = [*model.named_parameters(), *model.named_buffers()]
        off = [(name, t) for name, t in named if t.device.type != "meta"]
        if off:
            raise Failed(f"--from-model {target}: {len(off)} parameter(s) or buffer(s) built off the meta device "
                         f"({off[0][0]} on {off[0][1].device}): build them on the default device so that no "
                         "memory is allocated")
        channel.send({"phase": "run"})
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
            for shape, own in zip(inputs, input_dtypes):
                # An input of its own dtype (an integer timestep, a grid) keeps it; the others are the model's.
                t = torch.empty(shape, device="meta", dtype=torch_dtype if own is None else getattr(torch, str(own)))
                if channels_last and len(shape) in memory_format and own is None:
                    t = t.to(memory_format=memory_format[len(shape)])
                tensors.append(t)
            recorder.on = True
            with torch.set_grad_enabled(backward):
                out = model(*tensors)
            if backward:
                grads = [t for t in tensors_in(out) if t.requires_grad]
                if not grads:
                    raise Failed(f"--from-model {target}: --backward, but no output of the model needs a gradient")
                torch.autograd.backward(grads, [torch.empty_like(t) for t in grads])
        except (Failed, Stop):
            raise
        except BaseException as exc:  # the user's model: any end is theirs, told in one line
            if isinstance(exc, SystemExit):
                raise Failed(f"--from-model {target}: the model called sys.exit({exc.code!r}) on inputs "
                             f"{shapes_text(inputs)}") from None
            raise Failed(f"--from-model {target}: the model raised {type(exc).__name__} on inputs "
                         f"{shapes_text(inputs)}: {first_line(exc)}") from None
    if recorder.stopped is not None:
        raise Failed(recorder.stopped)
    channel.send({"phase": "hand_over"})
    found: dict[str, Any] = recorder.result()
    if not found["cases"]:
        raise Failed(f"--from-model {target}: the model ran no convolution on inputs {shapes_text(inputs)}")
    return found


def configured(make: Any, config: dict[str, Any], target: str) -> Any:
    """The callable that builds a transformers or diffusers class from `config` (--config): a
    transformers model from its config_class (`Model(Model.config_class(**config))`, as
    `from_config` does without loading weights), a diffusers one with its from_config, called
    with the callable's keyword arguments either way. No weights are read."""
    config_class = getattr(make, "config_class", None)
    if isinstance(make, type) and config_class is not None and callable(config_class):
        def build(**kwargs: Any) -> Any:
            return make(config_class(**config), **kwargs)
        return build
    from_config = getattr(make, "from_config", None)
    if callable(from_config):
        def build_from(**kwargs: Any) -> Any:
            return from_config(config, **kwargs)
        return build_from
    raise Failed(f"--from-model {target}: --config needs a transformers class (with a config_class) or a diffusers "
                 "one (with from_config); give this callable's arguments with --kwargs")


def warm_up() -> None:
    """A convolution built and run on meta under the dispatch mode, before the bounds start: the
    mode's first call imports torch._dynamo (seconds), which is the recorder's cost, not the model's."""
    import torch

    with recorder_class()("warm:up", [], None, 1), torch.device("meta"):
        torch.nn.Conv2d(1, 1, 1)(torch.empty(1, 1, 1, 1))


def build_on_cpu(make: Any, kwargs: Mapping[str, Any], target: str, on_meta: BaseException) -> Any:
    """The model built for real on the CPU (its builder reads tensor values), then moved to meta."""
    import torch

    try:
        with torch.device("cpu"):
            model = make(**kwargs)
        if isinstance(model, torch.nn.Module):
            model = model.to(device="meta")
    except BaseException as exc:  # the user's callable, as in record
        raise Failed(f"--from-model {target}: the callable {raised(on_meta)} on the meta device (its builder "
                     f"reads tensor values), and built on the CPU it {raised(exc)}") from None
    return model


def load_callable(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except BaseException as exc:  # a user's module: any end of its import is theirs, one line
        raise Failed(f"--from-model {target}: cannot import {module_name}: {what(exc)}{mismatch_hint(exc)}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise Failed(f"--from-model {target}: {module_name} has no {attr}") from None
        except BaseException as exc:  # a lazy import that fails at the attribute: diffusers'
            raise Failed(f"--from-model {target}: cannot load {attr} from {module_name}: {what(exc, gist=True)}"
                         f"{mismatch_hint(exc)}") from None
    if not callable(obj):
        raise Failed(f"--from-model {target}: {attr} is not callable")
    return obj


def reads_values(exc: BaseException) -> bool:
    """Whether a builder failed on meta because it reads a tensor's value."""
    return isinstance(exc, Exception) and bool(_READS_VALUES.search(str(exc)))


def mismatch_hint(exc: BaseException) -> str:
    """A hint for an extension built against another torch build (else nothing): which torch is
    here, and that the package must be the release built for it."""
    found = _MISSING_OP.search(str(exc))
    if found is None:
        return ""
    import torch

    return (f" ({found.group(1)}'s compiled ops do not match torch {torch.__version__}: install the {found.group(1)} "
            f"release built for this torch, from the same index, e.g. both from PyPI)")


def raised(exc: BaseException) -> str:
    """`raised ValueError: ...`, or `called sys.exit(3)` for a SystemExit."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    return f"raised {type(exc).__name__}: {first_line(exc)}"


def what(exc: BaseException, gist: bool = False) -> str:
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {first_line(exc, gist)}"


def first_line(exc: BaseException, gist: bool = False) -> str:
    """The message's first line; with `gist`, the next one too where the first only leads to it
    (diffusers' "Failed to import ... because of the following error (look up to see its traceback):")."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    if gist and len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0][:300]} {lines[1][:300]}"
    return lines[0][:300]


def rss() -> int:
    """Resident bytes of this process (Linux's /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


# -- the dispatch mode ----------------------------------------------------------------------------

def recorder_class() -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode  # lazily: the parent loads no torch

    class Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
        """Sees every aten call; keeps the convolutions once `on` is set (after the model is built)."""

        def __init__(self, target: str, inputs: Sequence[tuple[int, ...]], autocast: str | None,
                     max_cases: int) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.target = target
            self.where = f"{target}({shapes_text(inputs)})"
            self.autocast = autocast
            self.on = False
            self.keys: dict[tuple[Any, ...], int] = {}
            self.cases: list[dict[str, Any]] = []
            self.counts: list[dict[str, int]] = []
            self.calls = 0  # convolution calls seen (forward and backward)
            self.aten_calls = 0
            self.found_notes: list[str] = []
            self.stopped: str | None = None  # the bound reached, said again should the model swallow its Stop
            self.max_cases = max_cases
            import torch  # lazily, as above

            aten = torch.ops.aten
            self.forward_ops = {aten.convolution.default, aten._convolution.default}
            self.backward_ops = {aten.convolution_backward.default}

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.aten_calls += 1
            if self.aten_calls > MAX_CALLS:
                self.stopped = f"--from-model {self.target}: over {MAX_CALLS} aten calls: is the model looping?"
                raise Stop(self.stopped)
            if self.on:
                if func in self.forward_ops:
                    self._add(forward_call(args), backward=False)
                elif func in self.backward_ops:
                    self._add(backward_call(args), backward=True)
            return func(*args, **(kwargs or {}))

        def _add(self, call: dict[str, Any] | None, *, backward: bool) -> None:
            if call is None:
                return
            self.calls += 1
            direction = call.pop("direction")
            key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in call.items()))
            index = self.keys.get(key)
            if index is None:
                if len(self.cases) >= self.max_cases:
                    self.stopped = (f"--from-model {self.target}: over {self.max_cases} distinct convolutions "
                                    "(a case file's bound here)")
                    raise Stop(self.stopped)
                index = len(self.cases)
                self.keys[key] = index
                self.cases.append({**call, "direction": None, "masks": set()})
                self.counts.append({"forward": 0, "backward": 0})
            self.counts[index]["backward" if backward else "forward"] += 1
            if direction is not None:
                self.cases[index]["masks"].add(direction)

        def result(self) -> dict[str, Any]:
            entries = []
            for number, (case, counts) in enumerate(zip(self.cases, self.counts), 1):
                masks: set[str] = case.pop("masks")
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
                entry = {**case, "name": f"{slug(self.target)}_{number}", "direction": direction,
                         "captured_from": self.where[:400],
                         "source": f"recorded by convmatrix cases --from-model from {self.where[:300]}: {calls}"}
                if self.autocast is not None:
                    entry["autocast"] = self.autocast
                if direction == "forward":
                    del entry["direction"]
                entries.append({k: entry[k] for k in FIELD_ORDER if k in entry})
            return {"cases": entries, "counts": self.counts, "calls": self.calls, "aten_calls": self.aten_calls,
                    "notes": self.found_notes}

    return Recorder


def forward_call(args: Sequence[Any]) -> dict[str, Any] | None:
    # aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    # (aten::_convolution has the same nine first, then the backend flags).
    x, weight, bias, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    return entry_of(x, weight, bias is not None, stride, padding, dilation, bool(transposed), output_padding,
                    int(groups), None)


def backward_call(args: Sequence[Any]) -> dict[str, Any] | None:
    # aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    #                            transposed, output_padding, groups, output_mask)
    _grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, mask = args[:11]
    direction = ("backward" if mask[0] and mask[1] else "backward_input" if mask[0] else
                 "backward_weight" if mask[1] else None)
    if direction is None:
        return None  # the bias's gradient alone: no convolution runs
    # Autograd hands bias_sizes [0] for a convolution without bias (and the bias's size with one).
    bias = bias_sizes is not None and len(bias_sizes) > 0 and all(int(v) > 0 for v in bias_sizes)
    return entry_of(x, weight, bias, stride, padding, dilation, bool(transposed), output_padding, int(groups),
                    direction)


def entry_of(x: Any, weight: Any, bias: bool, stride: Sequence[int], padding: Sequence[int],
             dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int,
             direction: str | None) -> dict[str, Any] | None:
    import torch  # lazily, as in record

    dims = x.dim() - 2
    if dims not in (1, 2, 3) or weight.dim() != dims + 2:
        return None  # an unbatched call is batched by torch before aten sees it; anything else is not a conv case
    kernel = list(weight.shape[2:])
    out_channels = int(weight.shape[1]) * groups if transposed else int(weight.shape[0])
    names = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float64: "float64"}
    entry: dict[str, Any] = {
        "op": f"conv_transpose{dims}d" if transposed else f"conv{dims}d",
        "input": [int(v) for v in x.shape], "out_channels": out_channels,
        "kernel": one_or_list(kernel), "stride": one_or_list(stride), "padding": one_or_list(padding),
        "dilation": one_or_list(dilation), "groups": groups, "bias": bias,
        "dtype": names.get(x.dtype, str(x.dtype)),
        "memory_format": memory_format_of(x, weight, dims),
        "direction": direction,
    }
    if transposed and any(output_padding):
        entry["output_padding"] = one_or_list(output_padding)
    return entry


def memory_format_of(x: Any, weight: Any, dims: int) -> str:
    """channels_last where PyTorch's convolution picks it: when the input's or the weight's strides
    are channels_last's (ATen's cudnn_conv_suggest_memory_format takes either). The strides are
    compared whole, as ATen's suggest_memory_format does, so a 1x1 weight, contiguous both ways,
    still tells. The weight decides in practice: the meta kernels of batch norm and pooling hand on
    contiguous outputs whatever their input's layout, where a device's keep channels_last."""
    if dims not in (2, 3):
        return "contiguous"
    for t in (x, weight):
        shape, strides = list(t.shape), list(t.stride())
        if strides == channels_last_strides(shape) and strides != contiguous_strides(shape):
            return "channels_last" if dims == 2 else "channels_last_3d"
    return "contiguous"


def contiguous_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return strides[::-1]


def channels_last_strides(shape: list[int]) -> list[int]:
    """N, C, *spatial laid out as N, *spatial, C (torch's channels_last and channels_last_3d)."""
    order = [1, *range(len(shape) - 1, 1, -1), 0]  # innermost first: C, then the last spatial dim out
    strides, step = [0] * len(shape), 1
    for dim in order:
        strides[dim] = step
        step *= max(shape[dim], 1)
    return strides


def one_or_list(values: Sequence[int]) -> Any:
    numbers = [int(v) for v in values]
    return numbers[0] if len(set(numbers)) == 1 else numbers


def tensors_in(out: Any) -> list[Any]:
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


def shapes_text(inputs: Sequence[tuple[int, ...]]) -> str:
    return ", ".join("x".join(str(v) for v in shape) for shape in inputs)


def slug(target: str) -> str:
    """The callable's name as the start of its cases' names (lower-case letters, digits, '_')."""
    name = target.rpartition(":")[2].rpartition(".")[2]
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:40] or "model"


if __name__ == "__main__":
    main(sys.argv)
