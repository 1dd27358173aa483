"""The 2^31 boundary: for a case with a tensor past 2^31 - 1 elements, the pair just below and
just above it.

Threshold bugs sit at 32-bit indexing (PyTorch's canUse32BitIndexMath, cuDNN's int32 strides): a
batch that works and the next one that fails. `int32_pair(case)` gives the two cases that differ
by one step of one dimension across the bound, so a run tells which side a stack breaks on:

- by the batch, where one sample's input and output are within the bound (the usual case: the
  largest batch whose tensors all fit, and that batch + 1);
- else, at batch 1, by the input's last spatial extent (one sample alone is past the bound).

A case with its own view (input_strides) keeps it, its strides recomputed for each shape
(Case.view_strides). A case whose weight alone crosses (no batch or extent helps) has no such
pair: ValueError. Like
catalog.py and sizing.py, this module imports neither torch nor pytest, nor catalog at run time
(the harness may load it by path): it works on a Case through its fields, over_int32 and
dataclasses.replace.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # only a type here, as in sizing.py
    from catalog import Case


def int32_pair(case: Case) -> tuple[Case, Case]:
    """(below, above): below has no tensor over 2^31 - 1 elements, above has one, and they differ
    by one in the batch (or, where batch 1 is already over, in the input's last spatial extent)."""
    if not case.over_int32:
        raise ValueError(f"{case.id}: no tensor of it is over 2^31 - 1 elements: no boundary to pair")
    if not _reshaped(case, n=1).over_int32:
        return _edge(case, "batch", lambda n: _reshaped(case, n=n), case.n)
    one = _reshaped(case, n=1)
    extents = one.expand(one.size)

    def by_extent(extent: int) -> Case:
        size = extent if isinstance(one.size, int) else (*extents[:-1], extent)
        return _reshaped(one, size=size)

    return _edge(case, "last spatial extent at batch 1", by_extent, extents[-1])


def _reshaped(case: Case, *, n: int | None = None, size: int | tuple[int, ...] | None = None) -> Case:
    """The case at another batch or size, its view's strides (if it has one) recomputed for it."""
    n = case.n if n is None else n
    size = case.size if size is None else size
    extents = (size,) if isinstance(size, int) else size
    shape = (n, case.c_in, *extents)
    return dataclasses.replace(case, n=n, size=size, input_strides=case.view_strides(shape))


def _edge(case: Case, what: str, made: Callable[[int], Case], over: int) -> tuple[Case, Case]:
    """The largest value v in [1, over) whose case is within the bound, as (made(v), made(v + 1));
    `over` is a value known to cross it. A value too small to make a case (an empty output) is
    below the bound too: the tensors only grow with it."""
    def crosses(value: int) -> bool:
        try:
            return made(value).over_int32
        except ValueError:  # catalog.CaseError: the kernel does not fit so small an input
            return False

    low, high = 0, over  # crosses(high); not crosses(low), taking 0 as below everything
    while high - low > 1:
        middle = (low + high) // 2
        if crosses(middle):
            high = middle
        else:
            low = middle
    if low < 1:
        raise ValueError(f"{case.id}: crosses 2^31 - 1 elements at any {what}: the weight alone is past it")
    try:
        return made(low), made(high)
    except ValueError as exc:
        raise ValueError(f"{case.id}: the case just below the bound by its {what} cannot be made: {exc}") from None
