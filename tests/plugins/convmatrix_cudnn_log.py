"""cuDNN API-log fault injection for the conv suite: a pytest plugin for tests only, never the product.

Load it with ``-p convmatrix_cudnn_log`` (with tests/plugins on PYTHONPATH) and name a JSON spec in
the CONVMATRIX_CUDNN_LOG_FAULTS environment variable. Keys are case-id globs, values the path of a
file of real cuDNN log text (tests/data/cudnn_logs/; a relative path is taken from the spec's
folder):

    {"conv2d-fp32-*": "/repo/tests/data/cudnn_logs/onnxruntime_23244_cudnn9_ci.log"}

While a matching case runs, every torch.nn.functional conv function is replaced by one that does
what a cuDNN that declines the conv does with its API log on, so the failure happens where a real
one would, in the conv call:
- it writes the log text to the file CUDNN_LOGDEST_DBG names, as cuDNN does (NVIDIA, "Error
  Reporting And API Logging": the variable names stdout, stderr or a file;
  https://docs.nvidia.com/deeplearning/cudnn/backend/v9.5.1/reference/troubleshooting.html), and
  to the file CUDNN_FRONTEND_LOG_FILE names, as the frontend does with its logging on
  (https://docs.nvidia.com/deeplearning/cudnn/frontend/latest/developer/debugging.html; the same
  text, for simplicity). stdout, stderr or an unset variable: nothing is written;
- then it raises PyTorch's NOT_SUPPORTED error (MESSAGE), with or without a log.
With cuDNN off (torch.backends.cudnn.enabled False at call time, as inside
``torch.backends.cudnn.flags(enabled=False)``) the fault does not fire and the real conv runs: a
re-run without cuDNN passes, which is what says that cuDNN's path is the cause.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

SPEC_ENV = "CONVMATRIX_CUDNN_LOG_FAULTS"
CONV_FUNCTIONS = ("conv1d", "conv2d", "conv3d",
                  "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
MESSAGE = ("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
           "non-contiguous input.")
LOG_DESTINATIONS = ("CUDNN_LOGDEST_DBG", "CUDNN_FRONTEND_LOG_FILE")
STREAMS = frozenset({"stdout", "stderr"})  # destinations that name no file


def load_spec() -> dict[str, Path]:
    """The spec's globs and their log files, which must exist; {} when the variable is unset."""
    name = os.environ.get(SPEC_ENV)
    if not name:
        return {}
    spec_path = Path(name)
    with spec_path.open() as handle:
        raw: object = json.load(handle)
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise pytest.UsageError(f"{spec_path}: expected {{case-id glob: log file path}}")
    spec = {str(glob): spec_path.parent / value for glob, value in raw.items()}
    missing = sorted(str(path) for path in spec.values() if not path.is_file())
    if missing:
        raise pytest.UsageError(f"{spec_path}: no such log files {missing}")
    return spec


def log_for(spec: dict[str, Path], case_id: str) -> Path | None:
    """The log file of the first glob that matches the case."""
    return next((path for glob, path in spec.items() if fnmatch.fnmatchcase(case_id, glob)), None)


def log_files() -> list[Path]:
    """The files the environment tells cuDNN and its frontend to log to."""
    values = (os.environ.get(name, "") for name in LOG_DESTINATIONS)
    return [Path(value) for value in values if value and value not in STREAMS]


def cudnn_enabled() -> bool:
    cudnn: Any = torch.backends.cudnn  # enabled is a module property mypy does not know
    return bool(cudnn.enabled)


def write_log(text: str) -> None:
    for path in log_files():
        with path.open("a", encoding="utf-8") as handle:
            handle.write(text)


def declining(real: Callable[..., torch.Tensor], text: str) -> Callable[..., torch.Tensor]:
    """The conv as cuDNN with logging on runs it when it declines; the real conv with cuDNN off."""
    def conv(*args: Any, **kwargs: Any) -> torch.Tensor:
        if not cudnn_enabled():
            return real(*args, **kwargs)
        write_log(text)
        raise RuntimeError(MESSAGE)
    return conv


@contextlib.contextmanager
def patched(text: str) -> Iterator[None]:
    """Swaps the conv functions for declining ones, and always puts the real ones back."""
    functional = torch.nn.functional
    originals = {name: getattr(functional, name) for name in CONV_FUNCTIONS}
    try:
        for name, real in originals.items():
            setattr(functional, name, declining(real, text))
        yield
    finally:
        for name, real in originals.items():
            setattr(functional, name, real)


class CudnnLogFaults:
    def __init__(self, spec: dict[str, Path]) -> None:
        self.spec = spec

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        callspec = getattr(item, "callspec", None)
        path = log_for(self.spec, callspec.id) if callspec is not None else None
        if path is None:
            yield
            return
        with patched(path.read_text(encoding="utf-8")):
            yield


def pytest_configure(config: pytest.Config) -> None:
    spec = load_spec()
    if spec:
        config.pluginmanager.register(CudnnLogFaults(spec), "convmatrix_cudnn_log_active")
