"""How far a correct convolution may be from its float64 reference: a rounding-error bound.

Every element a convolution produces (output, grad_input or grad_weight) is a sum of T terms
t_j: products of an input and a weight (or of an output gradient and a weight or an input), plus
the bias for the output. Its tolerance is

    tol = u_out * |y|  +  min(T + 1, SAFETY) * u * A  +  (T + 1) * eta        A = sum_j |t_j|

y is the float64 reference and A the same op applied, in float64, to the absolute values of
its operands (|x| and |w| plus |bias|; for the gradients, the gradient ops applied to |grad_out|
and |w| or |x|). A wrong element is one with |got - y| > tol.

Which unit roundoffs. The inputs are rounded to the compute dtype before the reference sees
them, so their own rounding is no error. What is left:

- u_out, the unit roundoff of the dtype the result is stored in (the compute dtype: float16
  under fp16 autocast even for a grad_input cast back to float32, the cast being exact): the
  final rounding of y.
- u, the unit roundoff of any rounding inside the sum. Accumulating in float32 (oneDNN, cuDNN,
  tensor cores) only makes errors smaller, but some kernels round partial sums to the compute
  dtype: ATen's own CPU kernels add one GEMM result per kernel position into grad_input in
  float16/bfloat16 (col2im, vol2col), and per-sample GEMM results into grad_weight. So u is the
  compute dtype's (float32 2^-24, float16 2^-11, bfloat16 2^-8). TF32 (float32 on CUDA unless a
  case turns it off) rounds both float32 operands of every product to a 10-bit mantissa, so u is
  2^-11 there, with float32 accumulation and a float32 result.
- eta, half the smallest subnormal step of the compute dtype: the absolute error a rounding may
  make when it underflows; at most T + 1 roundings touch an element. Negligible unless the
  values are tiny.

Why min(T + 1, SAFETY) * u * A. Two bounds of the accumulated rounding error, the smaller wins:

1. Deterministic, any summation order, any mix of float32 and the compute dtype: each term
   passes through at most T - 1 additions and at most two roundings of its own (TF32's two
   operand roundings, or one product rounding), so the error is at most gamma_{T+1} * A, with
   gamma_k = k*u / (1 - k*u) (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.,
   sections 3.1 and 4.2). It is tight for short sums only: for T*u near 1 (T = 2048 in float16,
   256 in bfloat16) it exceeds |y| itself and could not catch any wrong result.
2. Probabilistic, for the suite's data: to first order the error is sum_k delta_k * S_k, where
   S_k are the partial sums the kernel forms (in whatever order and blocking) and the relative
   rounding errors |delta_k| <= u are independent with mean zero (the model of Higham and Mary,
   SIAM J. Sci. Comput. 41(5), 2019). The suite's inputs, weights, biases and output gradients
   are seeded standard normals, so the terms have independent random signs and E[S_k^2] is the
   sum of E[t_i^2] over the terms S_k holds. The worst order (one running sum, every addition
   rounded in u) gives std(error) <= u * sqrt(sum_k E[S_k^2]) = u * rms(t) * T / sqrt(2), while
   A = T * mean|t|; for a product of two independent standard normals rms/mean = pi/2, so

       std(error) <= (pi / (2 * sqrt(2))) * u * A  =  1.11 * u * A,   independent of T

   (zero-mean data make the bound independent of the length, as in Higham and Mary, SIAM J.
   Sci. Comput. 42(3), 2020). Any other order or blocking, and float32 accumulation, only
   shortens the chains of low-precision roundings.

SAFETY = 10 is about 9 standard deviations of that worst case. Simulated (sequential sums of
T products of standard normals rounded to the dtype, every addition rounded to it, T from 2 to
3000, float32, float16 and bfloat16, 2e5 sums each): error / (u * A) has an rms of 0.47 whatever
T, a 99.9th percentile of 2.5 and a largest value of 5.4; over 2e7 sums its tail falls about
tenfold per unit (above 5: 5.5e-7; above 6: under 2e-7), so above 10 about 1e-11 per element,
for a kernel worse than any real one. Real kernels measured on the CPU (oneDNN, ATen's own
kernels, every ISA and thread count) peaked at 4.1 (float32) and 2.2 (float16). A wrong element
is caught when its error is above about SAFETY * u * A: a dropped group (error |y|, about
sqrt(T) * rms(t)) stays caught up to T of about 25000 in bfloat16 and 1.6e6 in float16, where
gamma_T gave up at 137 and 550.

Float64 (a case's dtype = "float64": cuDNN's double convolutions). The same bound with float64's
u = u_out = 2^-53 and eta = 2^-1075, derived as above, nothing tuned; what differs is the
reference. For the other precisions the float64 reference is exact to within 2^-53 relative, far
below their bound, and its error is left out. A float64 reference rounds like the device: both
are within the bound B of the exact sum y, so |got - ref| <= |got - y| + |y - ref| <= 2 * B, and
the tolerance is twice the bound (COMPUTATIONS). The suite's inputs are float32 values (seeded
normals), so each product is exact in float64 (24 + 24 significant bits < 53) and only the sums
round, as the bound assumes. A is computed in float64 as well; its own relative error (at most
gamma_T, 1e-12 for T = 10^4) is negligible against SAFETY.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

SAFETY = 10.0
# Unit roundoff by the precision a sum may round in, and the one its result is stored in.
UNIT_ROUNDOFF = {"float32": 2.0**-24, "tf32": 2.0**-11, "float16": 2.0**-11, "bfloat16": 2.0**-8,
                 "float64": 2.0**-53}
STORED_AS = {"float32": "float32", "tf32": "float32", "float16": "float16", "bfloat16": "bfloat16",
             "float64": "float64"}
# Half the smallest subnormal: the absolute error of a rounding that underflows.
UNDERFLOW = {"float32": 2.0**-150, "float16": 2.0**-25, "bfloat16": 2.0**-134, "float64": 2.0**-1075}
# How many computations in the precision a comparison holds: the device's alone, since the float64
# reference's own error (u = 2^-53) is below 2^-29 of any bound of a lower precision's; but a
# float64 case compares two float64 computations, each within the bound of the exact sum, so
# |got - ref| <= |got - y| + |ref - y| is within twice it (Float64 below).
COMPUTATIONS = {"float64": 2}


@dataclass(frozen=True)
class Precision:
    """The unit roundoffs that bound a conv's error in one precision (see the module doc)."""

    name: str  # float32, tf32, float16, bfloat16 or float64
    unit_roundoff: float  # u: any rounding inside the sum
    output_roundoff: float  # u_out: the stored result's rounding
    underflow: float  # eta
    computations: int = 1  # the rounded computations the comparison holds (COMPUTATIONS)

    @classmethod
    def named(cls, name: str) -> Precision:
        stored = STORED_AS[name]
        return cls(name, UNIT_ROUNDOFF[name], UNIT_ROUNDOFF[stored], UNDERFLOW[stored], COMPUTATIONS.get(name, 1))


def bound(ref: torch.Tensor, magnitude: torch.Tensor, terms: int, precision: Precision,
          safety: float = SAFETY) -> torch.Tensor:
    """Per element: k * (u_out * |ref| + min(terms + 1, safety) * u * magnitude + (terms + 1) * eta),
    k the computations compared (2 for float64: the reference rounds as the device does).

    ref: the float64 reference; magnitude: the sum of |terms| per element (float64, same shape);
    terms: how many terms an element sums at most (an upper bound keeps the bound valid)."""
    spread = min(terms + 1, safety) * precision.unit_roundoff
    return precision.computations * (precision.output_roundoff * ref.abs() + spread * magnitude
                                     + (terms + 1) * precision.underflow)


@dataclass(frozen=True)
class Check:
    """One tensor compared with its reference, element by element, against its error bound."""

    name: str
    max_abs_err: float
    max_rel_err: float  # max_abs_err over the largest reference magnitude
    ratio: float  # the largest |got - ref| / tol: above 1 is a mismatch (NaN too)
    tol: float  # the tolerance of the element where that ratio is reached
    unit_roundoff: float
    safety: float

    @property
    def ok(self) -> bool:
        return self.ratio <= 1.0  # False for NaN too

    def numeric(self) -> dict[str, float]:
        return {"max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err,
                "ratio": self.ratio, "tol": self.tol, "unit_roundoff": self.unit_roundoff,
                "safety_factor": self.safety}

    def describe(self) -> str:
        return (f"{self.name} max_abs_err={self.max_abs_err:.3g} "
                f"max_rel_err={self.max_rel_err:.3g}; an element is {self.ratio:.3g} times "
                f"its tolerance {self.tol:.3g} (rounding-error bound at u={self.unit_roundoff:.3g}, "
                f"safety factor {self.safety:g})")


def check(name: str, got: torch.Tensor, ref: torch.Tensor, magnitude: torch.Tensor, terms: int,
          precision: Precision, safety: float = SAFETY) -> Check:
    """got (any dtype and device) against ref with the tolerance bound() gives."""
    tol = bound(ref, magnitude, terms, precision, safety)
    err = (got.detach().to("cpu", torch.float64) - ref).abs()
    ratio = err / tol  # tol > 0 everywhere (the underflow term); NaN stays NaN
    if ratio.numel() == 0:
        return Check(name, 0.0, 0.0, 0.0, 0.0, precision.unit_roundoff, safety)
    worst = int(_nan_first(ratio).argmax())
    max_abs = float(err.max())
    scale = float(ref.abs().max())
    return Check(name, max_abs, max_abs / scale if scale > 0 else max_abs,
                 float(ratio.reshape(-1)[worst]), float(tol.reshape(-1)[worst]),
                 precision.unit_roundoff, safety)


def _nan_first(ratio: torch.Tensor) -> torch.Tensor:
    """The ratios with NaN as +inf, so that argmax finds a NaN element first."""
    return torch.nan_to_num(ratio.reshape(-1), nan=math.inf)


# --- float64 evaluation of what the device computes ------------------------------------------

Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Sums:
    """A conv evaluated in float64 and, given an output gradient, its two gradients; given a
    vector v too, the gradient of <grad_input, v> with respect to the weight (a double backward,
    as a gradient penalty takes it)."""

    output: torch.Tensor
    grad_output: torch.Tensor | None = None
    grad_input: torch.Tensor | None = None
    grad_weight: torch.Tensor | None = None
    double_vector: torch.Tensor | None = None
    double_grad_weight: torch.Tensor | None = None


def evaluate(forward: Forward, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
             grad_for: Callable[[torch.Size], torch.Tensor] | None = None,
             vector_for: Callable[[torch.Size], torch.Tensor] | None = None) -> Sums:
    """forward(x, weight, bias) and, when grad_for gives the output gradient (called with the
    output's shape, so that a seeded draw happens after the forward pass), the gradients of
    input and weight; when vector_for gives v too (called with the input's shape, after that),
    the weight's gradient of <grad_input, v>."""
    backward = grad_for is not None
    x, weight = (t.detach().requires_grad_(backward) for t in (x, weight))
    out = forward(x, weight, bias)
    if grad_for is None:
        return Sums(out.detach())
    grad = grad_for(out.shape)
    double = vector_for is not None
    grad_input, grad_weight = torch.autograd.grad(out, (x, weight), grad, create_graph=double)
    if vector_for is None:
        return Sums(out.detach(), grad, grad_input, grad_weight)
    vector = vector_for(x.shape)
    (double_grad_weight,) = torch.autograd.grad(grad_input, (weight,), vector)
    return Sums(out.detach(), grad, grad_input.detach(), grad_weight.detach(), vector, double_grad_weight)


def magnitudes(forward: Forward, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               grad_output: torch.Tensor | None = None, vector: torch.Tensor | None = None) -> Sums:
    """Per element, the sum of |terms|: the same ops on absolute values. Right for any op that
    is a sum of products of one input and one weight element (convolution, padding, slicing,
    adding a bias), which every forward here is, and for its gradients: each is again a sum of
    products of two of x, weight, grad_output and v, with coefficients 0 or 1."""
    grad = grad_output.abs() if grad_output is not None else None
    absolute = vector.abs() if vector is not None else None
    return evaluate(forward, x.abs(), weight.abs(), bias.abs(),
                    None if grad is None else (lambda _shape: grad),
                    None if absolute is None else (lambda _shape: absolute))
