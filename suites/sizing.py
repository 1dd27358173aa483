"""How big a case is, and the scaled-down variant the CPU runs in its place.

Like catalog.py, this module imports neither torch nor pytest.

- need_mb: the bytes of input, weight, bias and output (and, for backward cases, their
  gradients) in the case's dtype (plus the autocast copies), times WORKSPACE_FACTOR plus
  WORKSPACE_MB for cuDNN's workspace, in MiB. On CUDA a case skips when free memory is less.
- A case the CPU cannot run quickly (need_mb or multiply-adds over CPU_BUDGET_MB, CPU_BUDGET_MACS)
  runs as scaled(case): same op, dtype, autocast, layout, memory format, groups structure
  (depthwise stays depthwise), kernel, stride, padding, dilation and forced settings, with
  batch, channels and spatial extents cut down. A case's own view (input_strides) is kept: its
  strides recomputed for the smaller shape in the same order and pattern (catalog.restride), its
  gaps at most MOST_GAP (2, then none, where the view's buffer would pass CPU_BUDGET_MB), its
  storage offset kept (from 2 * OFFSET_KEEP on, cut to OFFSET_KEEP plus its remainder modulo
  OFFSET_KEEP, so that its alignment stays).
- sliced(case): whether the float64 CPU reference covers only a slice of the output (a block of
  output positions of one batch entry, and a few output channels), because the full reference
  would cost too much. A scaled case keeps the slicing of its full-size case.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only a type here: the harness loads this file by its path, without suites/ on sys.path
    from catalog import Case

BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
WORKSPACE_FACTOR = 1.25
WORKSPACE_MB = 256
LARGE_MB = 1024  # the `large` marker: the full-size case needs more than this
CPU_BUDGET_MB = 32
CPU_BUDGET_MACS = 20_000_000
REFERENCE_BUDGET_MACS = 200_000_000  # a float64 CPU reference beyond this runs on a slice
REFERENCE_BUDGET_ELEMENTS = 1 << 25
SLICE_POSITIONS = 4  # output positions per spatial dimension in a slice
SLICE_CHANNELS = 16  # output channels in a slice (groups == 1 only)
MIB = 1 << 20
OFFSET_KEEP = 4096  # elements: an offset's alignment beyond this is no different on a scaled case
MOST_GAP = 4  # a scaled view's gaps between its dimensions (a sliced view's 2 kept), at most
# Convolutions of the forward's size that a direction computes: the forward, then one per gradient.
PASSES = {"forward": 1, "backward": 3, "backward_input": 2, "backward_weight": 2, "double_backward": 5}


def output_size(case: Case) -> tuple[int, ...]:
    return case.output_size()  # the shape math lives in catalog.py: case ids name tensors past 2^31


def shapes(case: Case) -> dict[str, tuple[int, ...]]:
    return case.shapes()


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def macs(case: Case) -> int:
    """Multiply-adds of the forward pass."""
    kernel = math.prod(case.expand(case.kernel))
    found = shapes(case)
    if case.transposed:
        return numel(found["input"]) * (case.c_out // case.groups) * kernel
    return numel(found["output"]) * (case.c_in // case.groups) * kernel


def need_bytes(case: Case) -> int:
    found = shapes(case)
    # the views' buffers: the input's, the weight's
    elements = sum(numel(shape) for shape in found.values()) + (case.view_extent or 0) + (case.weight_view_extent or 0)
    size = elements * BYTES[case.dtype]
    if case.autocast:  # the casted copies of input, weight and bias
        size += (elements - numel(found["output"])) * BYTES[case.autocast]
    if case.backward:  # grad_output, grad_input, grad_weight
        size *= 2
    if case.kind == "double_backward":  # the graph kept for the second pass, its vector and result
        size = size * 3 // 2
    return int(size * WORKSPACE_FACTOR) + WORKSPACE_MB * MIB


def need_mb(case: Case) -> int:
    return -(-need_bytes(case) // MIB)


def is_large(case: Case) -> bool:
    return need_mb(case) > LARGE_MB


def fits_cpu(case: Case) -> bool:
    return (need_bytes(case) - WORKSPACE_MB * MIB <= CPU_BUDGET_MB * MIB
            and macs(case) * PASSES[case.kind] <= CPU_BUDGET_MACS)


def sliced(case: Case) -> bool:
    """Whether the reference of the full-size case covers a slice only."""
    found = shapes(case)
    biggest = max(numel(found[name]) for name in ("input", "weight", "output"))
    return macs(case) > REFERENCE_BUDGET_MACS or biggest > REFERENCE_BUDGET_ELEMENTS


def _channels(count: int, cap: int) -> int:
    """Fewer channels, keeping the remainder modulo 8 (a count not a multiple of 8 stays so)."""
    return count if count <= cap + count % 8 else cap + count % 8


def scaled(case: Case) -> Case:
    """The small variant of a case for the CPU; the case itself when it already fits."""
    if fits_cpu(case):
        return case
    if case.depthwise:
        groups = min(case.groups, 8 + case.groups % 8)
        c_in, c_out = groups, case.c_out // case.c_in * groups
    else:
        groups = min(case.groups, 4)
        c_in = groups * _channels(case.c_in // case.groups, 8)
        c_out = groups * _channels(case.c_out // case.groups, 8)
    size = []
    for i, k, d in zip(case.expand(case.size), case.expand(case.kernel), case.expand(case.dilation)):
        extent = d * (k - 1) + 1
        size.append(min(i, max(12 if case.spatial_dims < 3 else 6, 2 * extent)))
    n = min(case.n, 2)
    new_size = size[0] if isinstance(case.size, int) else tuple(size)
    offset = case.storage_offset
    if offset >= 2 * OFFSET_KEEP:
        offset = OFFSET_KEEP + offset % OFFSET_KEEP
    # A view's gaps multiply its buffer (MOST_GAP per dimension: 4^5 over a conv3d input's
    # elements): where the CPU budget cannot hold that, smaller gaps, down to none (dense in the
    # view's order).
    weight_offset = case.weight_storage_offset
    if weight_offset >= 2 * OFFSET_KEEP:
        weight_offset = OFFSET_KEEP + weight_offset % OFFSET_KEEP
    kernel = case.expand(case.kernel)
    weight_shape = ((c_in, c_out // groups, *kernel) if case.transposed else (c_out, c_in // groups, *kernel))
    for gap in (MOST_GAP, 2, 1):
        small = dataclasses.replace(case, n=n, c_in=c_in, c_out=c_out, groups=groups, size=new_size,
                                    input_strides=case.view_strides((n, c_in, *size), gap),
                                    storage_offset=offset,
                                    weight_strides=case.weight_view_strides(weight_shape, gap),
                                    weight_storage_offset=weight_offset)
        if ((small.input_strides is None and small.weight_strides is None)
                or need_bytes(small) - WORKSPACE_MB * MIB <= CPU_BUDGET_MB * MIB):
            break
    if case.layout == "transposed" and (small.n < 2 or small.c_in < 2):
        small = dataclasses.replace(small, n=2)
    return small
