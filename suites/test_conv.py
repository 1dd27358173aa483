"""Every catalog case: run on the device, compare with a float64 CPU reference.

The device side calls torch.nn.functional.<op>, looked up at call time, so that a plugin that
patches it reaches the suite; the reference calls torch.<op>, the same kernel entry point
left alone by such patches, so an injected fault never leaks into the reference.
"""

from __future__ import annotations

import contextlib
import math
import re
import zlib
from dataclasses import dataclass
from typing import Callable, Dict

import pytest
import torch

from catalog import CASES, Case

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
MEMORY_FORMATS = {"channels_last": torch.channels_last, "channels_last_3d": torch.channels_last_3d}
# (rtol, atol per square root of the reduction size), by the precision a conv computes in.
# Inputs are rounded to that precision before the reference sees them, so what is left is
# accumulation and output rounding. tf32: cuDNN runs float32 convs in TF32 by default on
# Ampere and newer, so float32 on CUDA is held to that.
TOLERANCES = {
    "float32": (1e-4, 1e-5),
    "tf32": (1e-2, 5e-3),
    "float16": (1e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
}
# A CPU build of torch may lack a reduced-precision kernel; on CUDA the same text is a failure.
MISSING_CPU_KERNEL = re.compile(r"not implemented for '(?:Half|BFloat16)'")

Tensors = Dict[str, torch.Tensor]


@dataclass(frozen=True)
class Check:
    """One tensor compared with its reference."""

    name: str
    max_abs_err: float
    max_rel_err: float  # max_abs_err over the largest reference magnitude
    atol: float
    rtol: float
    ratio: float  # the largest |got - ref| / (atol + rtol * |ref|): above 1 is a mismatch

    @property
    def ok(self) -> bool:
        return self.ratio <= 1.0  # False for NaN too

    def numeric(self) -> dict[str, float]:
        return {"max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err,
                "atol": self.atol, "rtol": self.rtol}

    def describe(self) -> str:
        return (f"{self.name} max_abs_err={self.max_abs_err:.3g} "
                f"max_rel_err={self.max_rel_err:.3g} "
                f"exceeds atol={self.atol:.3g} rtol={self.rtol:.3g}")


def _param(case: Case) -> object:
    marks = [pytest.mark.backward] if case.backward else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_conv(case: Case, device: str, record_numeric: Callable[[dict[str, float]], None]) -> None:
    generator = torch.Generator().manual_seed(zlib.crc32(case.id.encode("utf-8")))
    inputs = make_inputs(case, generator)
    expected, grad_out = reference(case, inputs, generator)
    try:
        got = run_on_device(case, inputs, grad_out, device)
    except RuntimeError as exc:
        if device == "cpu" and MISSING_CPU_KERNEL.search(str(exc)):
            pytest.skip(f"this torch has no CPU kernel for the case's dtype: {exc}")
        raise
    shapes = (inputs["input"].shape, expected["output"].shape)
    checks = [compare(case, device, name, got[name], ref, reduction_size(case, name, *shapes))
              for name, ref in expected.items()]
    record_numeric(max(checks, key=_badness).numeric())
    failing = [check.describe() for check in checks if not check.ok]
    if failing:
        # The prefix is how a classifier tells a wrong answer from a test bug.
        raise AssertionError(f"numeric mismatch: {'; '.join(failing)} ({precision(case, device)})")


def make_inputs(case: Case, generator: torch.Generator) -> Tensors:
    """Seeded CPU inputs in the case's input dtype (so already rounded to it)."""
    groups_in = case.c_in // case.groups
    groups_out = case.c_out // case.groups
    kernel = case.expand(case.kernel)
    shapes = {
        "input": (case.n, case.c_in, *case.expand(case.size)),
        "weight": ((case.c_in, groups_out, *kernel) if case.transposed
                   else (case.c_out, groups_in, *kernel)),
        "bias": (case.c_out,),
    }
    dtype = TORCH_DTYPES[case.dtype]
    return {name: torch.randn(shape, generator=generator).to(dtype)
            for name, shape in shapes.items()}


def convolve(fn: Callable[..., torch.Tensor], case: Case, x: torch.Tensor, weight: torch.Tensor,
             bias: torch.Tensor) -> torch.Tensor:
    return fn(x, weight, bias, stride=case.expand(case.stride), padding=case.expand(case.padding),
              dilation=case.expand(case.dilation), groups=case.groups)


def reference(case: Case, inputs: Tensors,
              generator: torch.Generator) -> tuple[Tensors, torch.Tensor | None]:
    """float64 results from the inputs as the device computes with them (autocast rounds)."""
    compute = TORCH_DTYPES[case.compute_dtype]
    x, weight, bias = (inputs[name].to(compute).double().requires_grad_(case.backward)
                       for name in ("input", "weight", "bias"))
    out = convolve(getattr(torch, case.op), case, x, weight, bias)
    expected = {"output": out.detach()}
    if not case.backward:
        return expected, None
    grad_out = torch.randn(out.shape, generator=generator).to(compute)
    out.backward(grad_out.double())
    expected.update(grad_input=x.grad, grad_weight=weight.grad)
    return expected, grad_out


def run_on_device(case: Case, inputs: Tensors, grad_out: torch.Tensor | None,
                  device: str) -> Tensors:
    x = place_input(case, inputs["input"].to(device))
    weight = inputs["weight"].to(device)
    if case.memory_format != "contiguous":
        weight = weight.contiguous(memory_format=MEMORY_FORMATS[case.memory_format])
    weight = weight.detach().requires_grad_(case.backward)  # a leaf of its own, even on CPU
    bias = inputs["bias"].to(device)
    with autocast(case, device):
        out = convolve(getattr(torch.nn.functional, case.op), case, x, weight, bias)
    check_autocast(case, device, out)
    got = {"output": out.detach()}
    if grad_out is not None:
        out.backward(grad_out.to(device=device, dtype=out.dtype))
        got.update(grad_input=x.grad, grad_weight=weight.grad)
    if device == "cuda":
        # Kernel errors surface asynchronously: make them surface here, in the device run.
        torch.cuda.synchronize()
    return got


def place_input(case: Case, x: torch.Tensor) -> torch.Tensor:
    """The input in the case's memory format or non-contiguous layout, as a leaf tensor."""
    if case.memory_format != "contiguous":
        x = x.contiguous(memory_format=MEMORY_FORMATS[case.memory_format])
    elif case.layout == "permuted":  # last two dims swapped in memory, as after a permute
        x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif case.layout == "sliced":  # every other element of a buffer twice as wide
        buffer = x.new_zeros((*x.shape[:-1], 2 * x.shape[-1]))
        buffer[..., ::2] = x
        x = buffer[..., ::2]
    elif case.layout == "transposed":  # N and C swapped in memory
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
    return x.detach().requires_grad_(case.backward)


def autocast(case: Case, device: str) -> contextlib.AbstractContextManager:
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
    if case.compute_dtype == "float32" and device != "cpu":
        return "tf32"
    return case.compute_dtype


def reduction_size(case: Case, name: str, input_shape: torch.Size, output_shape: torch.Size) -> int:
    """How many products one element of the named tensor sums (an upper bound)."""
    kernel = math.prod(case.expand(case.kernel))
    if name == "output":
        return case.c_in // case.groups * kernel
    if name == "grad_input":
        return case.c_out // case.groups * kernel
    # grad_weight sums over the batch and the positions of the larger of input and output.
    return case.n * max(math.prod(input_shape[2:]), math.prod(output_shape[2:]))


def compare(case: Case, device: str, name: str, got: torch.Tensor, ref: torch.Tensor,
            reduction: int) -> Check:
    if got.shape != ref.shape:
        raise AssertionError(f"numeric mismatch: {name} has shape {tuple(got.shape)}, "
                             f"the reference {tuple(ref.shape)}")
    rtol, atol_unit = TOLERANCES[precision(case, device)]
    atol = atol_unit * math.sqrt(reduction)
    diff = (got.detach().to("cpu", torch.float64) - ref).abs()
    max_abs = float(diff.max())
    scale = float(ref.abs().max())
    ratio = float((diff / (atol + rtol * ref.abs())).max())
    return Check(name, max_abs, max_abs / scale if scale > 0 else max_abs, atol, rtol, ratio)


def _badness(check: Check) -> float:
    return math.inf if math.isnan(check.ratio) else check.ratio

