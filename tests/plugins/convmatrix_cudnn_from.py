"""A cuDNN regression from a given version on: a pytest plugin for tests only, never the product.

Load it with ``-p convmatrix_cudnn_from`` (with tests/plugins on PYTHONPATH) and set
CONVMATRIX_FAIL_FROM_CUDNN to a cuDNN version as torch.backends.cudnn.version() encodes it
(90400 for 9.4.0). While that variable is set, torch.nn.functional.conv2d raises the
NOT_SUPPORTED signature whenever the loaded cuDNN is that version or newer, and runs the real
conv below it: what `convmatrix bisect` looks for across cuDNN override wheels. The version is
the one torch loads (the venv's nvidia-cudnn wheel), so the fault follows the stack, on a GPU or
on the CPU alike.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch

VARIABLE = "CONVMATRIX_FAIL_FROM_CUDNN"
MESSAGE = ("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
           "non-contiguous input.")


def threshold() -> int | None:
    raw = os.environ.get(VARIABLE, "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise pytest.UsageError(f"{VARIABLE}={raw!r}: expected a cuDNN version like 90400")
    return int(raw)


def failing_from(real: Callable[..., torch.Tensor], since: int) -> Callable[..., torch.Tensor]:
    def conv2d(*args: Any, **kwargs: Any) -> torch.Tensor:
        loaded = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]  # untyped in torch
        if loaded is not None and loaded >= since:
            raise RuntimeError(MESSAGE)
        return real(*args, **kwargs)
    return conv2d


def pytest_configure(config: pytest.Config) -> None:
    since = threshold()
    if since is not None:
        functional = torch.nn.functional
        functional.conv2d = failing_from(functional.conv2d, since)
