"""The 2^31 boundary (suites/boundary.py): the pair of cases just below and just above 2^31 - 1
elements, by batch, else by the last spatial extent, for every catalogue case past the bound."""

from __future__ import annotations

import dataclasses
import math

import pytest

from catalogkit import catalog
from testkit import load_suite_module

boundary = load_suite_module("boundary")
LIMIT = 2**31 - 1


def biggest(case: catalog.Case) -> int:
    return max(math.prod(shape) for shape in case.shapes().values())


def test_by_batch_the_pair_straddles_the_bound_by_one() -> None:
    # One sample of input is 64 * 512 * 512 = 2^24 elements: batch 127 is 2^31 - 2^24, batch 128 is 2^31.
    case = catalog.Case("conv2d", 200, 64, 64, (512, 512), 3, padding=1, source="test")
    below, above = boundary.int32_pair(case)
    assert (below.n, above.n) == (127, 128)
    assert biggest(below) <= LIMIT < biggest(above) and not below.over_int32 and above.over_int32
    assert dataclasses.replace(below, n=case.n) == case and below.id != above.id


def test_a_sample_past_the_bound_is_paired_by_its_last_extent_at_batch_1() -> None:
    case = catalog.Case("conv1d", 4, 1024, 1024, 3_000_000, 1, source="test")  # one sample: 3.07e9 elements
    below, above = boundary.int32_pair(case)
    assert (below.n, above.n) == (1, 1)
    assert (below.size, above.size) == (LIMIT // 1024, LIMIT // 1024 + 1)
    assert not below.over_int32 and above.over_int32


def test_a_case_within_the_bound_or_with_only_its_weight_past_it_has_no_pair() -> None:
    with pytest.raises(ValueError, match="no boundary to pair"):
        boundary.int32_pair(catalog.Case("conv2d", 2, 8, 8, (8, 8), 3, source="test"))
    weight = catalog.Case("conv2d", 1, 65536, 65536, (1, 1), 1, source="test")  # 2^32 weight elements
    with pytest.raises(ValueError, match="the weight alone is past it"):
        boundary.int32_pair(weight)


@pytest.mark.parametrize("case", [c for c in catalog.CASES if c.over_int32 and
                                  math.prod(c.shapes()["weight"]) <= LIMIT], ids=lambda c: c.id)
def test_every_catalogue_case_past_the_bound_has_a_pair(case: catalog.Case) -> None:
    below, above = boundary.int32_pair(case)
    assert biggest(below) <= LIMIT < biggest(above)
    step = (below.n, above.n) if below.n != above.n else (below.expand(below.size)[-1], above.expand(above.size)[-1])
    assert step[1] == step[0] + 1
    assert (below.op, below.dtype, below.kernel, below.groups, below.kind) == (case.op, case.dtype, case.kernel,
                                                                              case.groups, case.kind)


def test_a_case_with_its_own_view_keeps_it_on_both_sides() -> None:
    # Channels last from a permute, batch past the bound: each side's strides are its own shape's.
    case = catalog.Case("conv2d", 200, 64, 64, (512, 512), 3, padding=1, source="test",
                        input_strides=(64 * 512 * 512, 1, 64 * 512, 64))
    below, above = boundary.int32_pair(case)
    assert (below.n, above.n) == (127, 128)
    assert below.input_strides == above.input_strides == case.input_strides
    tall = catalog.Case("conv1d", 1, 1024, 1024, 3_000_000, 1, source="test", input_strides=(3_000_000 * 1024, 1, 1024))
    below, above = boundary.int32_pair(tall)
    assert below.input_strides == (below.size * 1024, 1, 1024) and above.input_strides == (above.size * 1024, 1, 1024)
