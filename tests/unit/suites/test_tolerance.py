"""suites/tolerance.py: the rounding-error bound each compared element is held to."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from testkit import load_suite_module

tolerance = load_suite_module("tolerance")
FP16 = tolerance.Precision.named("float16")
U16 = 2.0**-11


def test_unit_roundoffs_by_precision() -> None:
    named = {name: tolerance.Precision.named(name) for name in ("float32", "tf32", "float16", "bfloat16")}
    assert {name: p.unit_roundoff for name, p in named.items()} == {
        "float32": 2.0**-24, "tf32": 2.0**-11, "float16": 2.0**-11, "bfloat16": 2.0**-8}
    # TF32 rounds the operands of the products, but stores a float32 result.
    assert named["tf32"].output_roundoff == 2.0**-24
    assert named["float16"].output_roundoff == 2.0**-11
    # Half the smallest subnormal of the stored dtype.
    assert [named[name].underflow for name in ("float32", "tf32", "float16", "bfloat16")] == [
        2.0**-150, 2.0**-150, 2.0**-25, 2.0**-134]


def test_short_sums_get_the_deterministic_bound() -> None:
    # 2 terms: each passes through 1 addition and at most 2 roundings of its own, so 3 * u * A
    # (gamma_3 to first order), far below SAFETY * u * A.
    ref = torch.tensor([3.0, -1.0, 0.0], dtype=torch.float64)
    magnitude = torch.tensor([5.0, 1.0, 0.0], dtype=torch.float64)
    got = tolerance.bound(ref, magnitude, 2, FP16)
    eta = 2.0**-25
    want = torch.tensor([U16 * 3 + 3 * U16 * 5 + 3 * eta, U16 * 1 + 3 * U16 * 1 + 3 * eta, 3 * eta],
                        dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_long_sums_get_the_safety_factor_whatever_their_length() -> None:
    ref = torch.tensor([2.0], dtype=torch.float64)
    magnitude = torch.tensor([100.0], dtype=torch.float64)
    for terms in (9, 10_000):
        got = float(tolerance.bound(ref, magnitude, terms, FP16)[0])
        assert got == pytest.approx(U16 * 2 + tolerance.SAFETY * U16 * 100 + (terms + 1) * 2.0**-25)


def check(got: list[float], ref: list[float], magnitude: list[float], terms: int = 100) -> Any:
    def t(values: list[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.float64)
    return tolerance.check("output", t(got), t(ref), t(magnitude), terms, FP16)


def test_check_passes_within_the_bound_and_fails_just_past_it() -> None:
    # magnitude 10 at terms 100: tol = u*|ref| + 10*u*10 (+ a negligible underflow term).
    tol = U16 * 4 + tolerance.SAFETY * U16 * 10 + 101 * 2.0**-25
    inside = check([4.0 + 0.99 * tol, 1.0], [4.0, 1.0], [10.0, 10.0])
    assert inside.ok
    assert inside.ratio == pytest.approx(0.99)
    assert inside.tol == pytest.approx(tol)
    outside = check([4.0, 1.0 - 1.01 * tol], [4.0, 1.0], [10.0, 10.0])
    assert not outside.ok
    assert outside.ratio == pytest.approx(1.01 * tol / (U16 * 1 + tolerance.SAFETY * U16 * 10
                                                        + 101 * 2.0**-25))
    assert outside.max_abs_err == pytest.approx(1.01 * tol)
    assert outside.max_rel_err == pytest.approx(1.01 * tol / 4.0)


def test_check_where_nothing_is_summed() -> None:
    # A grad_input element that no window reads: only the underflow term is left of its bound.
    assert check([0.0, 2.0], [0.0, 2.0], [0.0, 2.0]).ratio == 0.0
    wrong = check([1e-3, 2.0], [0.0, 2.0], [0.0, 2.0])
    assert not wrong.ok
    assert wrong.tol == 101 * 2.0**-25


def test_nan_fails_and_is_the_worst_element() -> None:
    result = check([1.0, math.nan, 5.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    assert not result.ok
    assert math.isnan(result.ratio)
    assert result.tol == pytest.approx(U16 + tolerance.SAFETY * U16 + 101 * 2.0**-25)


def test_numeric_record_and_message() -> None:
    result = check([1.5], [1.0], [1.0])
    assert set(result.numeric()) == {"max_abs_err", "max_rel_err", "ratio", "tol",
                                     "unit_roundoff", "safety_factor"}
    assert result.numeric()["unit_roundoff"] == U16
    assert result.numeric()["safety_factor"] == tolerance.SAFETY
    assert result.describe().startswith("output max_abs_err=0.5 max_rel_err=0.5; an element is ")


def conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.conv1d(x, weight, bias, padding=1)


def test_magnitudes_are_the_sums_of_absolute_terms() -> None:
    x = torch.tensor([[[1.0, -2.0, 3.0]]], dtype=torch.float64)
    weight = torch.tensor([[[-1.0, 0.5, 2.0]]], dtype=torch.float64)
    bias = torch.tensor([-4.0], dtype=torch.float64)
    grad = torch.tensor([[[1.0, -1.0, 2.0]]], dtype=torch.float64)
    exact = tolerance.evaluate(conv1d, x, weight, bias, lambda shape: grad)
    size = tolerance.magnitudes(conv1d, x, weight, bias, exact.grad_output)
    # out[i] = sum_k w[k] x[i + k - 1] + b: terms |w||x| and |b|.
    assert exact.output.flatten().tolist() == [0.5 - 4.0 - 4.0, -1.0 - 1.0 + 6.0 - 4.0,
                                               2.0 + 1.5 - 4.0]
    assert size.output.flatten().tolist() == [0.5 + 4.0 + 4.0, 1.0 + 1.0 + 6.0 + 4.0,
                                              2.0 + 1.5 + 4.0]
    # grad_x[j] = sum_i g[i] w[j - i + 1]; grad_w[k] = sum_i g[i] x[i + k - 1].
    assert size.grad_input.flatten().tolist() == [1 * 0.5 + 1 * 1.0, 1 * 2.0 + 1 * 0.5 + 2 * 1.0,
                                                  1 * 2.0 + 2 * 0.5]
    assert size.grad_weight.flatten().tolist() == [1 * 1.0 + 2 * 2.0, 1 + 2 + 6, 1 * 2.0 + 1 * 3.0]
    assert exact.grad_input.flatten().tolist() == [0.5 + 1.0, 2.0 - 0.5 - 2.0, -2.0 + 1.0]


def test_the_output_gradient_is_drawn_after_the_forward_pass() -> None:
    calls: list[tuple[int, ...]] = []

    def grad_for(shape: torch.Size) -> torch.Tensor:
        calls.append(tuple(shape))
        return torch.ones(shape, dtype=torch.float64)

    x = torch.ones((2, 1, 5), dtype=torch.float64)
    weight = torch.ones((3, 1, 3), dtype=torch.float64)
    sums = tolerance.evaluate(conv1d, x, weight, torch.zeros(3, dtype=torch.float64), grad_for)
    assert calls == [(2, 3, 5)]
    assert sums.grad_weight is not None and sums.grad_weight.shape == weight.shape
    assert tolerance.evaluate(conv1d, x, weight, torch.zeros(3, dtype=torch.float64)).grad_input is None


def sloppy_sums(products: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The worst kernel the bound allows for: one running sum per row, every addition rounded
    to dtype (products of dtype values are exact in float64)."""
    total = torch.zeros(products.shape[0], dtype=dtype)
    for column in products.unbind(1):
        total = (total.double() + column).to(dtype)
    return total


@pytest.mark.parametrize(("dtype", "terms"), [(torch.float16, 9), (torch.float16, 1000),
                                         (torch.bfloat16, 27), (torch.bfloat16, 1000)])
def test_a_sloppy_correct_kernel_passes_and_a_wrong_one_fails(dtype: torch.dtype, terms: int) -> None:
    """Both sides of the bound on dot products of standard normals, the suite's data: summing
    every term in the low precision passes, dropping one eighth of the terms (a group) fails."""
    generator = torch.Generator().manual_seed(terms)
    rows = 4000

    def normals() -> torch.Tensor:
        return torch.randn((rows, terms), generator=generator).to(dtype).double()

    products = normals() * normals()
    ref, magnitude = products.sum(1), products.abs().sum(1)
    precision = tolerance.Precision.named({torch.float16: "float16", torch.bfloat16: "bfloat16"}[dtype])
    correct = tolerance.check("output", sloppy_sums(products, dtype), ref, magnitude, terms, precision)
    assert correct.ok, correct.describe()
    assert correct.ratio < 0.7  # the simulated worst case peaks near 0.55 of SAFETY
    kept = products[:, : terms - max(1, terms // 8)]
    wrong = tolerance.check("output", sloppy_sums(kept, dtype), ref, magnitude, terms, precision)
    assert not wrong.ok, wrong.describe()


# --- issue 50: float64 ---

def test_float64_is_the_same_bound_counted_for_both_computations() -> None:
    """Derived, not tuned: float64's u = u_out = 2^-53 and eta = 2^-1075, and the bound twice over,
    since the float64 reference rounds as the device does (|got - ref| <= |got - y| + |y - ref|)."""
    fp64 = tolerance.Precision.named("float64")
    assert (fp64.unit_roundoff, fp64.output_roundoff, fp64.underflow, fp64.computations) == (
        2.0**-53, 2.0**-53, 2.0**-1075, 2)
    assert all(tolerance.Precision.named(name).computations == 1 for name in ("float32", "tf32", "float16", "bfloat16"))
    ref = torch.tensor([3.0, -1.0], dtype=torch.float64)
    magnitude = torch.tensor([5.0, 400.0], dtype=torch.float64)
    one = (2.0**-53 * ref.abs() + min(101, tolerance.SAFETY) * 2.0**-53 * magnitude + 101 * 2.0**-1075)
    torch.testing.assert_close(tolerance.bound(ref, magnitude, 100, fp64), 2 * one, rtol=0, atol=0)


def test_float64_passes_another_summation_order_and_catches_a_wrong_weight() -> None:
    """A float64 conv summed in another order (per kernel position, channels reversed) is
    within the bound; the same with one weight off by 1e-9 of itself is not."""
    generator = torch.Generator().manual_seed(50)
    x = torch.randn(2, 64, 12, 12, generator=generator).double()
    weight = torch.randn(32, 64, 3, 3, generator=generator).double()
    ref = torch.nn.functional.conv2d(x, weight)
    magnitude = torch.nn.functional.conv2d(x.abs(), weight.abs())
    terms = 64 * 9

    def by_matmul(w: torch.Tensor) -> torch.Tensor:
        # One product per kernel position, channels reversed, added up last position first: no
        # kernel's order (oneDNN's im2col and GEMM gave the direct kernel's bits exactly).
        out = torch.zeros(2, 32, 10, 10, dtype=torch.float64)
        for i, j in reversed([(i, j) for i in range(3) for j in range(3)]):
            out += torch.einsum("nchw,oc->nohw", x[:, :, i:i + 10, j:j + 10].flip(1), w[:, :, i, j].flip(1))
        return out

    fp64 = tolerance.Precision.named("float64")
    same = tolerance.check("output", by_matmul(weight), ref, magnitude, terms, fp64)
    assert same.ok and same.max_abs_err > 0, same.describe()  # the orders differ, within the bound
    wrong = weight.clone()
    wrong[5, 7, 1, 1] *= 1 + 1e-9
    assert not tolerance.check("output", by_matmul(wrong), ref, magnitude, terms, fp64).ok
