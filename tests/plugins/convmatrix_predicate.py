"""A failure planted by a predicate over the conv's configuration, in one cell: a pytest plugin for
explore's tests only, never the product.

Load it with ``-p convmatrix_predicate`` (with tests/plugins on PYTHONPATH), set
CONVMATRIX_PREDICATE_CELL to a cell id (fnmatch globs allowed) and CONVMATRIX_PREDICATE to a Python
expression over the call's fields (the names of explore's facts that a call shows: op, rank,
transposed, batch, in_channels, out_channels, groups, depthwise, kernel, stride, dilation, padding,
size, dtype, autocast, memory_format), e.g. ``dtype == "bfloat16" and groups >= 2``. In that cell every
torch.nn.functional conv whose call meets it raises cuDNN's NOT_SUPPORTED signature; every other
call, and every other cell (the control), runs the real conv. Explore is not told the predicate:
it has to find a configuration that meets it and shrink it to the predicate's minimal one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Any

import pytest
import torch

CELL, PREDICATE = "CONVMATRIX_PREDICATE_CELL", "CONVMATRIX_PREDICATE"
MESSAGE = ("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
           "non-contiguous input.")
OPS = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def _most(value: Any, default: int) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, int) for v in value):
        return int(max(value))
    return default


def facts(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's fields, by F.conv*'s signature: (input, weight, bias, stride, padding,
    [output_padding,] groups, dilation) for transposed, (..., dilation, groups) otherwise."""
    transposed = op.startswith("conv_transpose")
    names = (["input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"] if transposed
             else ["input", "weight", "bias", "stride", "padding", "dilation", "groups"])
    given = dict(zip(names, args, strict=False)) | kwargs  # F.conv* takes fewer positionals than it names
    x, w = given["input"], given["weight"]
    groups = int(given.get("groups", 1) or 1)
    rank = x.dim() - 2
    cl = {2: torch.channels_last, 3: torch.channels_last_3d}.get(rank)
    layout = "contiguous"
    if cl is not None and not x.is_contiguous() and x.is_contiguous(memory_format=cl):
        layout = "channels_last" if rank == 2 else "channels_last_3d"
    padding = given.get("padding", 0)
    # Under autocast the call still sees the float32 input: the dtype it runs in is autocast's.
    device = x.device.type
    autocast = str(torch.get_autocast_dtype(device)).rsplit(".", 1)[-1] if torch.is_autocast_enabled(device) else None
    return {"op": op, "rank": rank, "transposed": transposed, "batch": int(x.shape[0]),
            "in_channels": int(x.shape[1]), "out_channels": int(w.shape[1] * groups if transposed else w.shape[0]),
            "groups": groups, "depthwise": groups > 1 and groups == int(x.shape[1]),
            "kernel": max(int(k) for k in w.shape[2:]), "stride": _most(given.get("stride", 1), 1),
            "dilation": _most(given.get("dilation", 1), 1), "padding": _most(padding, 0),
            "size": max(int(s) for s in x.shape[2:]), "dtype": str(x.dtype).rsplit(".", 1)[-1],
            "autocast": autocast, "memory_format": layout}


def planted(op: str, real: Callable[..., torch.Tensor], predicate: str) -> Callable[..., torch.Tensor]:
    code = compile(predicate, PREDICATE, "eval")

    def conv(*args: Any, **kwargs: Any) -> torch.Tensor:
        if eval(code, {"__builtins__": {}}, facts(op, args, kwargs)):  # a test's own expression, never input
            raise RuntimeError(MESSAGE)
        return real(*args, **kwargs)
    return conv


def pytest_configure(config: pytest.Config) -> None:
    wanted, predicate = os.environ.get(CELL, "").strip(), os.environ.get(PREDICATE, "").strip()
    if not wanted or not predicate:
        return
    try:
        cell = config.getoption("cell_id")
    except ValueError:  # not the suite: nothing to key to
        return
    if isinstance(cell, str) and fnmatchcase(cell, wanted):
        functional = torch.nn.functional
        for op in OPS:
            setattr(functional, op, planted(op, getattr(functional, op), predicate))
