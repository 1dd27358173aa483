"""What the catalog tests share: the suite's modules importable by name (catalog.py, sizing.py and
test_conv.py import each other so), the trigger families, and suites/test_conv.py as a module."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

from testkit import REPO

SUITES = REPO / "suites"
sys.path.insert(0, str(SUITES))

import catalog  # noqa: E402
import sizing  # noqa: E402

__all__ = ["SUITES", "TRIGGER_FAMILIES", "catalog", "load_test_conv", "past_int32", "sizing"]

TRIGGER_FAMILIES = {
    "int32_split_batch", "int32_no_split", "large_3d", "large_transposed_3d", "non_contiguous",
    "channels_last_odd", "half_pre_sm80", "dilation_deterministic", "tall_wide",
    "pointwise_extreme", "backward_input_weight", "autocast", "tf32", "cudnn_benchmark",
    "int32_other_ops", "large_batch", "autocast_out_not_mult8", "dilated_grouped", "double_backward",
    "inductor", "graph_capture",
}


def past_int32(case: catalog.Case) -> bool:
    """A tensor of the case, or its gradient, past 2^31 elements."""
    return max(sizing.numel(shape) for shape in sizing.shapes(case).values()) >= 2**31


def load_test_conv(config: pytest.Config) -> ModuleType:
    """suites/test_conv.py as a module; its parametrize marks are the suite's own markers,
    which the project's strict-markers config must know before the import applies them."""
    for marker in ("backward", "gpu", "large", "model", "compiled"):
        config.addinivalue_line("markers", f"{marker}: a marker of the conv suite")
    import test_conv

    return test_conv
