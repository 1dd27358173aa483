"""Every catalog case: run on the device, compare with a float64 CPU reference.

The device side calls torch.nn.functional.<op>, looked up at call time, so that a plugin that
patches it reaches the suite; the reference calls torch.<op>, the same kernel entry point
left alone by such patches, so an injected fault never leaks into the reference.

On CPU a case too big for a quick run runs as its scaled-down variant (sizing.scaled); on CUDA a
case skips when free memory cannot hold it (sizing.need_mb). A case whose full float64
reference would cost too much is checked on a slice (sizing.sliced): a block of output positions
of the last batch entry (and the last output channels when groups == 1), computed from the
matching input window; for backward such a case back-propagates a gradient that is zero outside
that block, so grad_input (on the window) and grad_weight are exact from the slice too.

Each compared element must lie within the rounding-error bound of what the device computes:
tolerance.py says how it is derived, from the sum of |terms| per element that the reference
computes alongside (the same op in float64 on absolute values).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import math
import re
import statistics
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Tuple

import pytest
import torch
import torch.nn.functional as F

import sizing
import tolerance
from catalog import CASES, Case
from catalog import view_extent as catalog_view_extent

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
MEMORY_FORMATS = {"channels_last": torch.channels_last, "channels_last_3d": torch.channels_last_3d}
# Significant digits the output is rounded to before it is hashed, by precision.
FINGERPRINT_DIGITS = {"float32": 5, "tf32": 3, "float16": 3, "bfloat16": 2}
FINGERPRINT_CHUNK = 1 << 24
SHA_LIMIT = 1 << 26  # beyond this many output elements, the hash covers an evenly strided sample
# Tensors larger than this are filled by repeating one seeded block (generated on the CPU, so
# the values are the same on every device and stack) instead of drawing every element.
TILE_LIMIT = 1 << 24
TILE_BLOCK = 1_000_003  # a prime, so the repetition does not line up with rows
# A CPU build of torch may lack a reduced-precision kernel; on CUDA the same text is a failure.
# Timed forward calls after the first (whose output is checked): their median is forward_ms, and
# their spread tells a slower stack from a noisy one (convmatrix flags a stack only when its runs
# and the control's do not overlap). Fewer on the CPU, where every call is slower.
REPEATS = {"cuda": 5, "cpu": 3}
MISSING_CPU_KERNEL = re.compile(r"not implemented for '(?:Half|BFloat16)'")
# torch.compile's build failing for want of a compiler (inductor's C++ check; Triton's launcher).
NO_TOOLCHAIN = re.compile(r"InvalidCxxCompiler|No working C\+\+ compiler|Failed to find C compiler")

Tensors = Dict[str, torch.Tensor]
Index = Tuple[Any, ...]
GRADIENTS = ("grad_input", "grad_weight", "double_grad_weight")


@dataclass(frozen=True)
class Expected:
    """A reference tensor, the part of the device tensor it covers, and what bounds its error:
    the sum of |terms| of each element and how many terms an element sums at most."""

    ref: torch.Tensor
    index: Index
    magnitude: torch.Tensor
    terms: int


@dataclass(frozen=True)
class Remedy:
    """The remedy knobs of the run: --channels-last and --pad-channels."""

    channels_last: bool
    pad_channels: int


def _param(case: Case) -> object:
    marks = []
    if case.backward:
        marks.append(pytest.mark.backward)
    if sizing.is_large(case):
        marks.append(pytest.mark.large)
    if case.workload is not None:
        marks.append(pytest.mark.model)
    if case.needs_gpu:
        marks.append(pytest.mark.gpu)
    if case.via == "compile":
        marks.append(pytest.mark.compiled)
    return pytest.param(case, id=case.id, marks=marks)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The catalog's cases, then those of the run's --cases files (conftest.UserCases)."""
    if "case" in metafunc.fixturenames:
        user = metafunc.config.pluginmanager.get_plugin("convmatrix_cases")
        cases = (*CASES, *(user.cases if user is not None else ()))
        metafunc.parametrize("case", [_param(case) for case in cases])


def test_conv(case: Case, device: str, request: pytest.FixtureRequest,
              record_numeric: Callable[[dict[str, float]], None],
              record_facts: Callable[..., None]) -> None:
    record_facts(need_mb=sizing.need_mb(case), trigger=case.trigger, sources=list(case.sources),
                 scaled=False, shapes=None, view=None, timing=None, fingerprint=None, backend=None, cudnn_path=None)
    if device == "cpu" and case.needs_gpu:
        pytest.skip("the case needs CUDA: " + case.gpu_reason)
    if device == "cpu" and case.via == "compile" and not asked_for_compiled(request.config):
        # Inductor's CPU code is not cuDNN's path, and it differs by the CPU's ISA and toolchain
        # (torch 2.13 trips its own stride check on a bf16 channels_last_3d conv where oneDNN
        # lacks AVX-512): a default CPU run would judge the machine, not the stack.
        pytest.skip("the case needs CUDA, or -m compiled on the CPU: inductor's CPU code depends on the "
                    "CPU's ISA and a C++ toolchain, not on cuDNN")
    if device == "cuda":
        free, _total = torch.cuda.mem_get_info()
        if sizing.need_bytes(case) > free:
            pytest.skip(f"the case needs {sizing.need_mb(case)} MiB, the GPU has "
                        f"{free // sizing.MIB} MiB free")
    run = sizing.scaled(case) if device == "cpu" else case
    # The shapes the device ran: a scaled case's differ from its params (a repro builds these).
    record_facts(scaled=run is not case,
                 shapes={name: list(shape) for name, shape in sizing.shapes(run).items()})
    remedy = Remedy(request.config.getoption("channels_last") == "on",
                    request.config.getoption("pad_channels"))
    generator = torch.Generator().manual_seed(zlib.crc32(case.id.encode("utf-8")))
    with forced_settings(case):
        inputs = make_inputs(run, generator, device)
        expected, drawn = reference(run, inputs, generator, sizing.sliced(case), device)
        try:
            got, timing, computed = run_on_device(run, inputs, drawn, device, remedy, record_facts)
        except Exception as exc:
            if device == "cpu" and MISSING_CPU_KERNEL.search(str(exc)):
                pytest.skip(f"this torch has no CPU kernel for the case's dtype: {exc}")
            if case.via == "compile" and NO_TOOLCHAIN.search(f"{type(exc).__name__}: {exc}"):
                # The environment, not cuDNN: inductor builds its kernels with a C/C++ compiler
                # (Triton's launcher on CUDA too), which a slim or CUDA runtime image may lack.
                first = str(exc).strip().splitlines()[:1]
                pytest.skip(f"torch.compile cannot build kernels here (no working C/C++ compiler): "
                            f"{first[0] if first else type(exc).__name__}")
            raise
    record_facts(timing=timing,
                 fingerprint=fingerprint(got["output"], precision(run, device), computed))
    checks = [compare(run, device, name, got[name][want.index], want)
              for name, want in expected.items()]
    record_numeric(max(checks, key=_badness).numeric())
    failing = [check.describe() for check in checks if not check.ok]
    if failing:
        # The prefix is how a classifier tells a wrong answer from a test bug.
        raise AssertionError(f"numeric mismatch: {'; '.join(failing)} ({precision(run, device)})")


def asked_for_compiled(config: pytest.Config) -> bool:
    """Whether the run selects compiled cases by marker (`-m compiled`, not `-m "not compiled"`)."""
    expression = str(config.getoption("markexpr") or "")
    return re.search(r"(?<!not )\bcompiled\b", expression) is not None


@contextlib.contextmanager
def forced_settings(case: Case) -> Iterator[None]:
    """The cuDNN settings the case forces, the run's global ones restored afterwards."""
    cudnn = torch.backends.cudnn
    saved = (cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32)
    try:
        if case.benchmark is not None:
            cudnn.benchmark = case.benchmark
        if case.deterministic is not None:
            cudnn.deterministic = case.deterministic
        if case.tf32 is not None:
            cudnn.allow_tf32 = case.tf32
        yield
    finally:
        cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32 = saved


# --- inputs and reference ---------------------------------------------------------------------

def seeded(shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype,
           device: str) -> torch.Tensor:
    """Seeded values rounded to dtype; a huge tensor repeats one seeded block, built on device."""
    count = sizing.numel(shape)
    if count <= TILE_LIMIT:
        return torch.randn(shape, generator=generator).to(dtype).to(device)
    block = torch.randn(TILE_BLOCK, generator=generator).to(dtype).to(device)
    return block.repeat(-(-count // TILE_BLOCK))[:count].view(shape)


def make_inputs(case: Case, generator: torch.Generator, device: str = "cpu") -> Tensors:
    """Seeded inputs in the case's input dtype (so already rounded to it): on the CPU, except
    for tensors too big to build there, which are built on the device."""
    found = sizing.shapes(case)
    dtype = TORCH_DTYPES[case.dtype]
    made = {name: seeded(found[name], generator, dtype, device if sizing.numel(found[name]) > TILE_LIMIT
                         else "cpu")
            for name in ("input", "weight", "bias")}
    if not case.bias:  # the device gets None; the reference adds zeros, which cost no error
        made["bias"] = torch.zeros_like(made["bias"])
    return made


def convolve(fn: Callable[..., torch.Tensor], case: Case, x: torch.Tensor, weight: torch.Tensor,
             bias: torch.Tensor | None, padding: Any = None,
             groups: int | None = None) -> torch.Tensor:
    extra = {"output_padding": case.expand(case.output_padding)} if case.transposed else {}
    return fn(x, weight, bias, stride=case.expand(case.stride),
              padding=case.expand(case.padding) if padding is None else padding,
              dilation=case.expand(case.dilation),
              groups=case.groups if groups is None else groups, **extra)


@dataclass(frozen=True)
class Drawn:
    """What the device run back-propagates: the output's gradient (backward cases) and the
    vector v whose product with grad_input a double backward differentiates again."""

    grad_output: torch.Tensor | None = None
    vector: torch.Tensor | None = None


def reference(case: Case, inputs: Tensors, generator: torch.Generator, sliced: bool,
              device: str) -> tuple[dict[str, Expected], Drawn]:
    """float64 results from the inputs as the device computes with them (autocast rounds),
    and what the device run back-propagates."""
    if sliced:
        return sliced_reference(case, inputs, generator, device)
    compute = TORCH_DTYPES[case.compute_dtype]
    x, weight, bias = (inputs[name].cpu().to(compute).double()
                       for name in ("input", "weight", "bias"))

    def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return convolve(getattr(torch, case.op), case, x, weight, bias)

    exact, size = reference_sums(case, forward, x, weight, bias, generator)
    found = sizing.shapes(case)
    grad_weight_terms = case.n * max(sizing.numel(found["input"][2:]),
                                     sizing.numel(found["output"][2:]))
    expected = expectations(case, exact, size, dict.fromkeys(("output", *GRADIENTS), ()),
                            {"output": reduction_size(case, "output") + 1,  # + the bias
                             "grad_input": reduction_size(case, "grad_input"),
                             "grad_weight": grad_weight_terms,
                             # wgrad again, of v (input-shaped) against grad_output
                             "double_grad_weight": grad_weight_terms})
    if exact.grad_output is None:
        return expected, Drawn()
    return expected, Drawn(exact.grad_output.to(compute),
                           None if exact.double_vector is None else exact.double_vector.to(compute))


def reference_sums(case: Case, forward: tolerance.Forward, x: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor,
                   generator: torch.Generator) -> tuple[tolerance.Sums, tolerance.Sums]:
    """forward in float64 (and for a backward case its gradients, for a seeded output gradient
    drawn after the forward pass), then the same on absolute values: the sums of |terms|."""
    compute = TORCH_DTYPES[case.compute_dtype]

    def draw(shape: torch.Size) -> torch.Tensor:
        return torch.randn(shape, generator=generator).to(compute).double()

    exact = tolerance.evaluate(forward, x, weight, bias, draw if case.backward else None,
                               draw if case.kind == "double_backward" else None)
    return exact, tolerance.magnitudes(forward, x, weight, bias, exact.grad_output, exact.double_vector)


def expectations(case: Case, exact: tolerance.Sums, size: tolerance.Sums, index: dict[str, Index],
                 terms: dict[str, int]) -> dict[str, Expected]:
    """What each compared tensor must match: output, and the gradients the case's direction
    computes (catalog.DIRECTION_GRADS)."""
    return {name: Expected(getattr(exact, name), index[name], getattr(size, name), terms[name])
            for name in ("output", *case.grads)}


def sliced_reference(case: Case, inputs: Tensors, generator: torch.Generator,
                     device: str) -> tuple[dict[str, Expected], Drawn]:
    """The reference on a block of output positions of the last batch entry (and the last
    output channels when groups == 1), from the input window those positions read."""
    compute = TORCH_DTYPES[case.compute_dtype]
    out_size = sizing.output_size(case)
    last = case.n - 1
    co = slice(max(0, case.c_out - sizing.SLICE_CHANNELS), case.c_out) if case.groups == 1 \
        else slice(0, case.c_out)
    blocks: list[slice] = []
    windows: list[slice] = []
    pads: list[tuple[int, int]] = []  # zero padding of the window (non-transposed only)
    offsets: list[int] = []  # where the block starts in the window's output (transposed only)
    for o, length, k, s, p, d in zip(out_size, case.expand(case.size), case.expand(case.kernel),
                                     case.expand(case.stride), case.expand(case.padding),
                                     case.expand(case.dilation)):
        o0, o1 = max(0, o - sizing.SLICE_POSITIONS), o - 1
        blocks.append(slice(o0, o1 + 1))
        if case.transposed:
            lo = max(0, -(-(o0 + p - d * (k - 1)) // s))
            hi = min(length - 1, (o1 + p) // s)
            windows.append(slice(lo, hi + 1))
            offsets.append(o0 + p - lo * s)
        else:
            lo, hi = o0 * s - p, o1 * s - p + d * (k - 1)
            windows.append(slice(max(lo, 0), min(hi, length - 1) + 1))
            pads.append((max(lo, 0) - lo, hi - min(hi, length - 1)))
    window_index = (slice(last, last + 1), slice(None), *windows)
    weight_index = ((slice(None), co) if case.transposed else (co,)) if case.groups == 1 else ()
    x = inputs["input"][window_index].cpu().to(compute).double()
    weight = inputs["weight"][weight_index].cpu().to(compute).double()
    bias = inputs["bias"][co].cpu().to(compute).double()
    zeros = (0,) * case.spatial_dims
    want = [b.stop - b.start for b in blocks]

    def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        if case.transposed:
            # No output padding: the window's output is cut to the block instead.
            window_case = dataclasses.replace(case, output_padding=0)
            full = convolve(getattr(torch, case.op), window_case, x, weight, None, padding=zeros)
            short = [max(0, off + n - size) for off, n, size in zip(offsets, want, full.shape[2:])]
            full = F.pad(full, [amount for extra in reversed(short) for amount in (0, extra)])
            out = full[(slice(None), slice(None),
                        *[slice(off, off + n) for off, n in zip(offsets, want)])]
        else:
            flat_pads = [amount for pair in reversed(pads) for amount in pair]
            out = convolve(getattr(torch, case.op), case, F.pad(x, flat_pads), weight, None,
                           padding=zeros)
        return out + bias.view(1, -1, *([1] * case.spatial_dims))

    exact, size = reference_sums(case, forward, x, weight, bias, generator)
    out_index = (slice(last, last + 1), co, *blocks)
    expected = expectations(case, exact, size,
                            {"output": out_index, "grad_input": window_index,
                             "grad_weight": weight_index, "double_grad_weight": weight_index},
                            {"output": reduction_size(case, "output") + 1,  # + the bias
                             "grad_input": reduction_size(case, "grad_input"),
                             "grad_weight": sizing.numel(want),
                             # v lives on the window only; grad_output on the block
                             "double_grad_weight": sizing.numel(want)})
    if exact.grad_output is None:
        return expected, Drawn()
    grad_out = torch.zeros(sizing.shapes(case)["output"], dtype=compute, device=device)
    grad_out[out_index] = exact.grad_output.to(compute).to(device)
    vector = None
    if exact.double_vector is not None:  # zero outside the window, as grad_output is outside the block
        vector = torch.zeros(sizing.shapes(case)["input"], dtype=compute, device=device)
        vector[window_index] = exact.double_vector.to(compute).to(device)
    return expected, Drawn(grad_out, vector)


# --- the device run -----------------------------------------------------------------------------

def pad_plan(case: Case, multiple: int) -> tuple[int, int, int, int, int] | None:
    """(groups, in per group, out per group, in per group padded, out per group padded) for
    --pad-channels, and the new group count first; None when nothing needs padding.

    groups == 1: C_in and C_out up to the multiple. Depthwise: more (zero) groups, so that it
    stays depthwise. Other groups: each group's channels padded alike, so that the totals are
    multiples (each group keeps its own channels first, zeros after)."""
    if multiple <= 1:
        return None
    in_g, out_g = case.c_in // case.groups, case.c_out // case.groups
    if case.depthwise:
        groups = -(-case.groups // multiple) * multiple
        plan = (groups, in_g, out_g, in_g, out_g)
    else:
        step = multiple // math.gcd(multiple, case.groups)
        plan = (case.groups, in_g, out_g, -(-in_g // step) * step, -(-out_g // step) * step)
    groups, _, _, new_in, new_out = plan
    if (groups, new_in, new_out) == (case.groups, in_g, out_g):
        return None
    return plan


def pad_dim(t: torch.Tensor, dim: int, groups: int, per: int, new_groups: int,
            new_per: int) -> torch.Tensor:
    """Dimension dim seen as (groups, per), zero-padded to (new_groups, new_per)."""
    shape = t.shape
    t = t.reshape(*shape[:dim], groups, per, *shape[dim + 1:])
    pads = [0, 0] * (t.dim() - dim - 2) + [0, new_per - per, 0, new_groups - groups]
    t = F.pad(t, pads)
    return t.reshape(*shape[:dim], new_groups * new_per, *shape[dim + 1:])


def unpad_dim(t: torch.Tensor, dim: int, new_groups: int, new_per: int, groups: int,
              per: int) -> torch.Tensor:
    t = t.unflatten(dim, (new_groups, new_per))  # type: ignore[no-untyped-call]  # torch leaves it untyped
    index = (slice(None),) * dim + (slice(0, groups), slice(0, per))
    return t[index].flatten(dim, dim + 1)


def memory_format_for(case: Case, remedy: Remedy, rank: int) -> torch.memory_format | None:
    """The memory format input and weight go in: the case's, or channels_last by the knob."""
    if case.memory_format != "contiguous":
        return MEMORY_FORMATS[case.memory_format]
    if remedy.channels_last and rank == 4:
        return torch.channels_last
    if remedy.channels_last and rank == 5:
        return torch.channels_last_3d
    return None  # conv1d inputs stay as they are


def weight_format_for(case: Case, remedy: Remedy, rank: int) -> torch.memory_format | None:
    """The weight's memory format: the case's weight_memory_format where it sets one (contiguous:
    an NCHW weight beside a channels_last input), else the input's (memory_format_for)."""
    if case.weight_memory_format is not None:
        return MEMORY_FORMATS.get(case.weight_memory_format, torch.contiguous_format)
    return memory_format_for(case, remedy, rank)


def run_on_device(case: Case, inputs: Tensors, drawn: Drawn, device: str, remedy: Remedy,
                  record_facts: Callable[..., None] | None = None) -> tuple[Tensors, dict[str, Any], dict[str, Any]]:
    grad_out = drawn.grad_output
    # backward_input and backward_weight differentiate one leaf, so that cuDNN runs dgrad or
    # wgrad alone; a double backward needs both (grad_input, then its gradient to the weight).
    x_leaf = inputs["input"].to(device).detach().requires_grad_(case.backward and case.kind != "backward_weight")
    w_leaf = inputs["weight"].to(device).detach().requires_grad_(case.backward and case.kind != "backward_input")
    bias: torch.Tensor | None = inputs["bias"].to(device) if case.bias else None
    plan = pad_plan(case, remedy.pad_channels)
    x, weight = x_leaf, w_leaf
    groups = case.groups
    if plan is not None:
        groups, in_g, out_g, new_in, new_out = plan
        x = pad_dim(x, 1, case.groups, in_g, groups, new_in)
        if case.transposed:
            weight = pad_dim(pad_dim(weight, 0, case.groups, in_g, groups, new_in), 1, 1, out_g, 1,
                             new_out)
        else:
            weight = pad_dim(pad_dim(weight, 0, case.groups, out_g, groups, new_out), 1, 1, in_g,
                             1, new_in)
        if bias is not None:
            bias = pad_dim(bias, 0, case.groups, out_g, groups, new_out)
    input_format = memory_format_for(case, remedy, x.dim())
    x = place_input(case, x, input_format)
    fmt = weight_format_for(case, remedy, weight.dim())
    if fmt is not None:
        weight = weight.contiguous(memory_format=fmt)
    if record_facts is not None:  # before the call: a failing one is explained by what was chosen
        backend = selected_backend(case, x, weight, bias, groups, device)
        # The view the conv got (scaled, padded: not the params'), which a repro builds again.
        view = None
        if case.input_strides is not None or case.weight_memory_format is not None:
            view = {"input_strides": list(x.stride()), "storage_offset": x.storage_offset(),
                    "weight_strides": list(weight.stride())}
        record_facts(backend=backend, cudnn_path=cudnn_path(backend), view=view)
    def call(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        # Looked up at call time, so that a fault plugin's patch is what runs (or is compiled).
        return convolve(getattr(torch.nn.functional, case.op), case, x, weight, bias, groups=groups)

    conv: Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor] = call
    if case.via == "compile":
        # fullgraph: a graph break would run the conv eagerly and test nothing of inductor's.
        conv = torch.compile(call, fullgraph=True, dynamic=False)

    def eager() -> torch.Tensor:
        with autocast(case, device):
            return conv(x, weight, bias)

    forward = captured(eager) if case.via == "cuda_graph" else eager

    def backward(out: torch.Tensor) -> Tensors:
        assert grad_out is not None
        grad = grad_out.to(device=device, dtype=out.dtype)
        if plan is not None:  # the padded output channels get zero gradient
            grad = pad_dim(grad, 1, case.groups, plan[2], plan[0], plan[4])
        if case.kind == "double_backward":
            assert drawn.vector is not None
            # As a gradient penalty does: grad_input kept differentiable, then <grad_input, v>
            # differentiated again to the weight (convolution_backward's own backward).
            grad_input, grad_weight = torch.autograd.grad(out, (x_leaf, w_leaf), grad, create_graph=True)
            vector = drawn.vector.to(device=device, dtype=grad_input.dtype)
            (double,) = torch.autograd.grad(grad_input, (w_leaf,), vector)
            return {"grad_input": grad_input.detach(), "grad_weight": grad_weight.detach(),
                    "double_grad_weight": double}
        leaves = [leaf for leaf in (x_leaf, w_leaf) if leaf.requires_grad]
        found = torch.autograd.grad(out, leaves, grad)
        names = [name for name, leaf in (("grad_input", x_leaf), ("grad_weight", w_leaf)) if leaf.requires_grad]
        return dict(zip(names, found))

    if device == "cuda":  # a warm-up call, excluded from the timing (benchmark mode searches here)
        warm = forward()
        if grad_out is not None:
            backward(warm)
        del warm
        torch.cuda.synchronize()
    clock = Clock(device)
    peak = Peak(device)
    with peak.measure(), clock.measure("forward_ms"):
        out = forward()
    check_autocast(case, device, out)
    grads: Tensors = {}
    if grad_out is not None:
        with clock.measure("backward_ms"):
            grads = backward(out)
    if device == "cuda":
        # Kernel errors surface asynchronously: make them surface here, in the device run.
        torch.cuda.synchronize()
    with torch.no_grad():
        # The reference workload brackets every timed run (before each, and after the last): a
        # load that slowed a run shows on the references beside it (results.verdicts.cost_of).
        reference_ms()  # uncounted: a process's first matmul warms its thread pool up
        for _ in range(REPEATS[device]):
            clock.reference()
            clock.repeat("forward_ms", forward)
        clock.reference()
    computed = {"shape": list(out.shape), "groups": groups,
                "memory_format": layout_name(x, input_format), "padded": plan is not None}
    if plan is not None:
        out = unpad_dim(out, 1, plan[0], plan[4], case.groups, plan[2])
    got = {"output": out.detach(), **grads}
    return got, {**clock.timing(case.backward), **peak.facts()}, computed


def selected_backend(case: Case, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, groups: int,
                     device: str) -> str | None:
    """The backend PyTorch's dispatch picks for this conv (torch._C._select_conv_backend: CudnnTranspose,
    Mkldnn, Slow2d, ...), as the eager call would, autocast's cast included; None where this torch
    cannot say (the private function is missing or takes other arguments)."""
    select = getattr(torch._C, "_select_conv_backend", None)
    if select is None:
        return None
    try:
        with autocast(case, device):
            dtype = torch.get_autocast_dtype(device) if case.autocast else x.dtype
        args = (x.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype),
                list(case.expand(case.stride)), list(case.expand(case.padding)), list(case.expand(case.dilation)),
                case.transposed, list(case.expand(case.output_padding)), groups)
        with torch.no_grad():
            return str(select(*args)).rsplit(".", 1)[-1]
    except Exception:  # a private API: any failure means "cannot say", never a failed case
        return None


def cudnn_path(backend: str | None) -> str | None:
    """Which of cuDNN's algorithm choices the call takes: FIND (cudnn.benchmark: cudnnFind / the
    v8 API's benchmarking of every engine) or GET (heuristics); None when cuDNN does not run it."""
    if backend is None or not backend.startswith("Cudnn"):
        return None
    return "find" if torch.backends.cudnn.benchmark else "get"


def captured(eager: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """The conv captured in a CUDA graph (after warm-up calls on a side stream, as capture needs),
    and a call that replays it: cuDNN's plan is chosen before capture, and replay runs it again."""
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]  # torch leaves it untyped
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            eager()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = eager()

    def replay() -> torch.Tensor:
        graph.replay()
        return static

    return replay


def layout_name(x: torch.Tensor, fmt: torch.memory_format | None) -> str:
    """The memory format the input was put in, else whether it is contiguous or strided."""
    if fmt is not None:
        return {torch.channels_last: "channels_last", torch.channels_last_3d: "channels_last_3d"}[fmt]
    return "contiguous" if x.is_contiguous() else "strided"


class Peak:
    """A case's cost beside its time (suites/README.md, Facts on each results line): the peak memory
    of its checked forward call, and on cuda the kernels the profiler saw run it.

    cpu: the PyTorch profiler's memory events (profile_memory: each allocation and free of ATen's
    CPU allocator, with its time) during the call, summed in time order; the peak is the highest
    running sum (what the call allocated beyond what existed before it; oneDNN's own scratch
    outside ATen's allocator is not counted). cuda: torch.cuda.max_memory_allocated after the call,
    its peak reset before it (the inputs already on the device included). Anything the profiler
    cannot say leaves the fact null: a cost is never a failed case."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.peak: int | None = None
        self.by: str | None = None
        self.kernels: list[str] | None = None

    @contextlib.contextmanager
    def measure(self) -> Iterator[None]:
        from torch.profiler import ProfilerActivity, profile

        cuda = self.device == "cuda"
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        if not cuda:
            # The legacy profiler's memory events: the same allocations and frees as kineto's, at a
            # fraction of its cost (kineto's first op after each start cost ~20 ms here: +42% a case).
            with self.legacy():
                yield
            return
        activities = [ProfilerActivity.CUDA]
        try:
            prof = profile(activities=activities, profile_memory=not cuda)
            prof.__enter__()  # type: ignore[no-untyped-call]  # untyped in torch
        except Exception:  # another profiler is on, or none is built in: no cost, the case runs
            yield
            return
        try:
            yield
        finally:
            try:
                if cuda:
                    torch.cuda.synchronize()
                prof.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # untyped in torch
                if cuda:
                    self.peak, self.by = int(torch.cuda.max_memory_allocated()), "cuda"
                    self.kernels = kernel_names(prof)
                else:
                    self.peak, self.by = memory_peak(prof), "profiler"
            except Exception:  # the profiler's private results changed shape: say nothing
                self.peak = self.by = self.kernels = None

    @contextlib.contextmanager
    def legacy(self) -> Iterator[None]:
        autograd: Any = torch.autograd
        profiler: Any = torch.profiler
        try:
            config = autograd.ProfilerConfig(autograd.ProfilerState.CPU, False, True, False, False, False,
                                             profiler._ExperimentalConfig())
            autograd._enable_profiler_legacy(config)
        except Exception:  # another profiler is on, or this torch lacks it: no cost, the case runs
            yield
            return
        try:
            yield
        finally:
            try:
                records = autograd._disable_profiler_legacy()
                self.peak, self.by = legacy_peak(records), "profiler"
            except Exception:  # the profiler's private results changed shape: say nothing
                self.peak = self.by = None

    def facts(self) -> dict[str, Any]:
        return {"peak_bytes": self.peak, "memory_by": self.by, "kernels": self.kernels}


def legacy_peak(records: Any) -> int:
    """The highest running sum of the legacy profiler's memory events (bytes allocated, minus
    freed; every thread's) in the order they happened."""
    events = sorted((e.start_us(), e.cpu_memory_usage()) for thread in records for e in thread
                    if e.kind() == "memory_alloc")
    held = top = 0
    for _, nbytes in events:
        held += nbytes
        top = max(top, held)
    return top


def memory_peak(prof: Any) -> int:
    """The highest running sum of the profiler's CPU memory events (bytes allocated, minus freed)
    in the order they happened."""
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"))
    held = top = 0
    for _, nbytes in events:
        held += nbytes
        top = max(top, held)
    return top


def kernel_names(prof: Any) -> list[str]:
    """The distinct CUDA kernels the profiler saw, in the order first seen (at most 32, each cut at 200)."""
    seen: list[str] = []
    for event in prof.events():
        if str(getattr(event, "device_type", "")).endswith("CUDA"):
            name = "".join(ch if " " <= ch <= "~" else "?" for ch in str(event.name))[:200]
            if name and name not in seen:
                seen.append(name)
    return seen[:32]


REFERENCE_SIZE = 160  # a float32 matmul this square: about a millisecond's work on one CPU core


def reference_ms() -> float:
    """A fixed workload's milliseconds, timed beside each case's runs: on a loaded runner it
    slows down with them, which tells a slowdown of the runner from one of the stack."""
    a = torch.ones(REFERENCE_SIZE, REFERENCE_SIZE)
    begin = time.perf_counter()
    for _ in range(2):
        a @ a
    return round((time.perf_counter() - begin) * 1000, 4)


class Clock:
    """Milliseconds of device work: CUDA events on cuda, perf_counter on cpu."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.ms: dict[str, float] = {}
        self.runs: dict[str, list[float]] = {}  # repeated calls (repeat), after the first
        self.references: list[float] = []  # the reference workload before and after the runs

    @contextlib.contextmanager
    def measure(self, name: str) -> Iterator[None]:
        if self.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            yield
            end.record()
            end.synchronize()
            self.ms[name] = round(start.elapsed_time(end), 4)
        else:
            begin = time.perf_counter()
            yield
            self.ms[name] = round((time.perf_counter() - begin) * 1000, 4)

    def repeat(self, name: str, call: Callable[[], Any]) -> None:
        """One more timed call of `call`, kept among `name`'s runs."""
        first = self.ms.get(name)
        with self.measure(name):
            call()
        self.runs.setdefault(name, []).append(self.ms[name])
        if first is not None:
            self.ms[name] = first

    def reference(self) -> None:
        self.references.append(reference_ms())

    def timing(self, backward: bool) -> dict[str, Any]:
        runs = self.runs.get("forward_ms", [])
        forward = statistics.median(runs) if runs else self.ms.get("forward_ms")
        return {"forward_ms": round(forward, 4) if forward is not None else None, "forward_runs": runs,
                "backward_ms": self.ms.get("backward_ms") if backward else None,
                "reference_ms": self.references}


def place_input(case: Case, x: torch.Tensor, fmt: torch.memory_format | None) -> torch.Tensor:
    """The input in the case's non-contiguous layout, then in the memory format (the case's or
    the --channels-last knob's); differentiable, so gradients reach the original tensor."""
    if case.layout == "permuted":  # last two dims swapped in memory, as after a permute
        x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif case.layout == "sliced":  # every other element of a buffer twice as wide
        buffer = x.new_zeros((*x.shape[:-1], 2 * x.shape[-1]))
        buffer[..., ::2] = x
        x = buffer[..., ::2]
    elif case.layout == "transposed":  # N and C swapped in memory
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
    elif case.layout == "nhwc_strided":  # channels last in memory, as x.permute(0, 3, 1, 2) leaves it
        x = x.movedim(1, -1).contiguous().movedim(-1, 1)
    elif case.input_strides is not None:
        x = as_view(x, case)
    if fmt is not None:
        x = x.contiguous(memory_format=fmt)
    return x


def as_view(x: torch.Tensor, case: Case) -> torch.Tensor:
    """x as the case's own view: its values copied into a zeroed buffer just large enough, through
    as_strided with the case's strides (recomputed for x's shape where --pad-channels widened it)
    and storage offset; differentiable (the copy's gradient reaches x). The case file's checks
    refuse a view that overlaps itself, which could not hold x's values."""
    strides = case.view_strides(tuple(x.shape))
    assert strides is not None
    buffer = x.new_zeros(catalog_view_extent(tuple(x.shape), strides, case.storage_offset))
    buffer.as_strided(x.shape, strides, case.storage_offset).copy_(x)
    return buffer.as_strided(x.shape, strides, case.storage_offset)


# --- numerics ----------------------------------------------------------------------------------

def fingerprint(out: torch.Tensor, precision_name: str, computed: dict[str, Any]) -> dict[str, Any]:
    """What the device computed, in a few numbers that a report can set against the control's.

    sum, abs_sum, l2: float64 sums over the whole output (drift shows as a relative change);
    sha: the first 16 hex digits of the sha256 of the output in logical (NCHW) order, each value
    rounded to `digits` significant digits and written as little-endian float64 (equal hashes:
    the same numbers to that precision; a value near a rounding edge can flip it, so a changed
    hash alone is no error); over more than SHA_LIMIT elements it hashes every `sha_stride`-th
    element; computed: the conv as the device ran it (output shape and groups after
    --pad-channels, the input's memory format, whether padding applied)."""
    digits = FINGERPRINT_DIGITS[precision_name]
    flat = out.detach().contiguous().view(-1)
    stride = -(-flat.numel() // SHA_LIMIT) if flat.numel() > SHA_LIMIT else 1
    digest = hashlib.sha256()
    total = absolute = squares = 0.0
    for start in range(0, flat.numel(), FINGERPRINT_CHUNK):
        chunk = flat[start:start + FINGERPRINT_CHUNK].double()
        total += float(chunk.sum())
        absolute += float(chunk.abs().sum())
        squares += float((chunk * chunk).sum())
    sample = flat[::stride]
    for start in range(0, sample.numel(), FINGERPRINT_CHUNK):
        chunk = sample[start:start + FINGERPRINT_CHUNK].double()
        rounded = round_significant(chunk, digits).cpu().contiguous()
        digest.update(ctypes.string_at(rounded.data_ptr(), rounded.numel() * rounded.element_size()))
    return {"sum": total, "abs_sum": absolute, "l2": math.sqrt(squares),
            "sha": digest.hexdigest()[:16], "digits": digits, "sha_stride": stride,
            "numel": flat.numel(), "computed": computed}


def round_significant(values: torch.Tensor, digits: int) -> torch.Tensor:
    magnitude = torch.floor(torch.log10(values.abs().clamp_min(1e-300)))
    scale = torch.pow(10.0, digits - 1 - magnitude)
    rounded = torch.round(values * scale) / scale
    return torch.where(values == 0, torch.zeros_like(values), rounded) + 0.0  # no -0.0


def autocast(case: Case, device: str) -> contextlib.AbstractContextManager[object]:
    if case.autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, dtype=TORCH_DTYPES[case.autocast])


def check_autocast(case: Case, device: str, out: torch.Tensor) -> None:
    """An autocast that did not cast would test float32 under another case's name."""
    wanted = TORCH_DTYPES[case.compute_dtype]
    if out.dtype == wanted:
        return
    if device == "cpu":
        pytest.skip(f"this torch's CPU autocast does not run {case.op} in {case.autocast}")
    raise AssertionError(f"autocast ran {case.op} in {out.dtype}, not {wanted}")


def precision(case: Case, device: str) -> str:
    if case.compute_dtype == "float32" and device != "cpu" and case.tf32 is not False:
        return "tf32"
    return case.compute_dtype


def reduction_size(case: Case, name: str) -> int:
    """How many products one element of output or grad_input sums (an upper bound)."""
    kernel = math.prod(case.expand(case.kernel))
    if name == "output":
        return case.c_in // case.groups * kernel
    return case.c_out // case.groups * kernel


def compare(case: Case, device: str, name: str, got: torch.Tensor,
            want: Expected) -> tolerance.Check:
    """got against its reference, within the rounding-error bound of the case's precision."""
    if got.shape != want.ref.shape:
        raise AssertionError(f"numeric mismatch: {name} has shape {tuple(got.shape)}, "
                             f"the reference {tuple(want.ref.shape)}")
    return tolerance.check(name, got, want.ref, want.magnitude, want.terms,
                           tolerance.Precision.named(precision(case, device)))


def _badness(check: tolerance.Check) -> float:
    return math.inf if math.isnan(check.ratio) else check.ratio
