"""oneDNN off in one cell: a silent fallback, for tests only, never the product.

Load it with ``-p convmatrix_no_onednn`` (with tests/plugins on PYTHONPATH) and set
CONVMATRIX_NO_ONEDNN_CELL to a cell id (fnmatch globs allowed). In the suite run of a cell whose
``--cell-id`` matches, it sets ``torch.backends.mkldnn.enabled = False`` before any case: batched
conv2d/conv3d then leave ``Mkldnn`` for ATen's ``Slow2d``/``Slow3d`` (what
``torch._C._select_conv_backend`` names), with the real change in time and memory that brings.
Every other cell, the control included, runs as it always does: the fault follows the cell, as
``convmatrix_cudnn_from`` follows the stack.
"""

from __future__ import annotations

import os
from fnmatch import fnmatchcase

import pytest
import torch

VARIABLE = "CONVMATRIX_NO_ONEDNN_CELL"


def pytest_configure(config: pytest.Config) -> None:
    wanted = os.environ.get(VARIABLE, "").strip()
    if not wanted:
        return
    try:
        cell = config.getoption("cell_id")
    except ValueError:  # not the suite: nothing to key to
        return
    if isinstance(cell, str) and fnmatchcase(cell, wanted):
        torch.backends.mkldnn.enabled = False  # type: ignore[assignment]  # a ContextProp to mypy
