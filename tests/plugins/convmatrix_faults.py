"""Fault injection for the conv suite: a pytest plugin for tests only, never the product.

Load it with ``-p convmatrix_faults`` (with tests/plugins on PYTHONPATH) and name a JSON spec
in the CONVMATRIX_FAULTS environment variable. Keys map case-id globs to an action:

    {"raise": {"conv2d-*": "CUDNN_STATUS_NOT_SUPPORTED ..."},  # the conv raises exc_type(msg)
     "exc_type": "RuntimeError",                               # optional, a builtin exception
     "warn": {"conv1d-*": "Plan failed ..."},                  # warns, then runs the real conv
     "scale": {"conv3d-*": 1.5},                               # the conv's output times factor
     "perturb": {"conv2d-*": 4.0},                             # adds 4.0 to the first weight element
     "drop_group": {"conv2d-*-g3-*": true},                    # the last group's weights read as 0
     "no_mkldnn": {"*-bwd*": true},                            # ATen's own CPU kernels, no oneDNN
     "kill": {"conv_transpose*": true},                        # os._exit(137) inside the conv
     "kill_once": {"conv2d-*": true},                          # SIGKILL, the first time only (a retry passes)
     "abort": {"conv1d-*": true},                              # os.abort(): SIGABRT
     "segv": {"conv2d-*": true},                               # a read of address 0: SIGSEGV
     "hang": {"conv3d-*": 3600},                               # sleeps that many seconds (true: an hour)
     "spin": {"conv3d-*": true},                               # hangs holding the GIL (no thread runs)
     "sticky": {"conv2d-*": true},                             # raises a sticky CUDA error text
     "unaligned": {"*channels_last_odd*": 8},                  # the signature unless C_in % 8 == 0
     "report_env": {"conv1d-*": "CUDA_VISIBLE_DEVICES"},       # warns NAME=value of that variable
     "skip": {"conv1d-*": "no CPU kernel for this case here"}}  # pytest.skip(reason) in setup

`kill_once` sends the process SIGKILL (as the OOM killer or a preempting agent would) the first
time a matching case runs under this spec, and leaves a marker beside the spec file
(`<spec>.killed`), so that every later run of the case, a retry's included, runs the real conv.

`skip` skips the case before it runs (in pytest_runtest_setup, as the suite's own skip paths do:
no CPU kernel, torch.compile cannot build, a dtype the GPU lacks), so the case records `skipped`.

`sticky` raises RuntimeError with an illegal-memory-access message (or the string given): on
a CPU it only simulates the text, which is what the suite goes by.

`unaligned` raises the real signature text (UNALIGNED_MESSAGE) when the conv's input channel
count is not a multiple of the value: a fault that `--pad-channels 8` removes, as the
tensor-core remedy does on a GPU, for proving a knob fix.

`perturb` and `drop_group` make a wrong result that a correct kernel cannot: the conv sees its
weight with value added to its first element (the suite's weights are standard normals, so the
value is in standard deviations), or with the last group's weights (the last C/groups rows of
dimension 0, the whole weight when groups == 1) zeroed. Both go through autograd, so the
gradients are those of the wrong conv too. `no_mkldnn` is no fault: the whole case, backward
included, runs with torch.backends.mkldnn disabled, so the CPU takes ATen's own kernels (those
a CPU gets where oneDNN has no float16/bfloat16 kernel for it; they round partial sums to the
compute dtype).

While a matching case runs, every torch.nn.functional conv function is replaced by one that
applies the case's actions, so the fault happens where a real one would: in the conv call.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import fnmatch
import json
import os
import re
import signal
import time
import warnings
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest
import torch

CONV_FUNCTIONS = ("conv1d", "conv2d", "conv3d",
                  "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
ACTIONS = ("kill", "kill_once", "abort", "segv", "hang", "spin", "sticky", "unaligned", "raise", "warn", "report_env", "scale",
           "perturb", "drop_group", "no_mkldnn", "skip")
KILLED_EXIT_CODE = 137  # what a SIGKILLed process reports through a shell
HANG_SECONDS = 3600.0
STICKY_MESSAGE = (
    "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
UNALIGNED_MESSAGE = ("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
                     "non-contiguous input.")


def in_channels(args: tuple[Any, ...]) -> int:
    """The conv input's channel count: dimension 1, or 0 for an unbatched input."""
    x, weight = args[0], args[1]
    return int(x.shape[1] if x.dim() == weight.dim() else x.shape[0])


def load_spec() -> dict[str, Any]:
    path = os.environ.get("CONVMATRIX_FAULTS")
    if not path:
        return {}
    with open(path) as handle:
        spec: dict[str, Any] = json.load(handle)
    unknown = set(spec) - set(ACTIONS) - {"exc_type"}
    if unknown:
        raise pytest.UsageError(f"{path}: unknown fault keys {sorted(unknown)}")
    return spec


def exception_class(spec: dict[str, Any]) -> type:
    name = spec.get("exc_type", "RuntimeError")
    cls = getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        raise pytest.UsageError(f"exc_type {name!r} is not a builtin exception")
    return cls


def actions_for(spec: dict[str, Any], case_id: str) -> list[tuple[str, Any]]:
    """The actions whose glob matches the case, in the order of ACTIONS."""
    return [(kind, value)
            for kind in ACTIONS
            for pattern, value in spec.get(kind, {}).items()
            if fnmatch.fnmatchcase(case_id, pattern)]


def perturbed(weight: torch.Tensor, value: float) -> torch.Tensor:
    """The weight with value added to its first element, differentiably."""
    bump = torch.zeros_like(weight)
    bump[(0,) * weight.dim()] = value
    return weight + bump


def group_dropped(weight: torch.Tensor, groups: int) -> torch.Tensor:
    """The weight with its last group zeroed: dimension 0 holds the groups for both conv
    (output channels) and conv_transpose (input channels)."""
    keep = torch.ones(weight.shape[0], dtype=weight.dtype, device=weight.device)
    keep[weight.shape[0] - weight.shape[0] // groups:] = 0
    return weight * keep.view(-1, *([1] * (weight.dim() - 1)))


def wrong_weight(args: tuple[Any, ...], kwargs: dict[str, Any],
                 actions: list[tuple[str, Any]]) -> tuple[Any, ...]:
    """The conv's positional arguments with the weight (the second) made wrong as asked."""
    weight = args[1]
    for kind, value in actions:
        if kind == "perturb":
            weight = perturbed(weight, float(value))
        if kind == "drop_group":
            weight = group_dropped(weight, int(kwargs.get("groups", 1)))
    return (args[0], weight, *args[2:])


def faulty(real: Callable[..., torch.Tensor], actions: list[tuple[str, Any]],
           exc_type: type) -> Callable[..., torch.Tensor]:
    def conv(*args: Any, **kwargs: Any) -> torch.Tensor:
        factor = 1.0
        for kind, value in actions:
            if kind == "kill":
                os._exit(KILLED_EXIT_CODE)
            if kind == "kill_once":
                marker = f"{os.environ['CONVMATRIX_FAULTS']}.killed"
                with contextlib.suppress(FileExistsError):
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                    os.kill(os.getpid(), signal.SIGKILL)
            if kind == "abort":
                os.abort()
            if kind == "segv":
                ctypes.string_at(0)  # reads address 0: a real SIGSEGV
            if kind == "hang":
                time.sleep(HANG_SECONDS if value is True else float(value))
            if kind == "spin":
                # Catastrophic backtracking: the regex engine never lets go of the GIL.
                re.match(r"(a+)+$", "a" * 64 + "b")
            if kind == "sticky":
                raise RuntimeError(STICKY_MESSAGE if value is True else str(value))
            if kind == "unaligned" and in_channels(args) % int(value):
                raise exc_type(UNALIGNED_MESSAGE)
            if kind == "report_env":
                warnings.warn(f"{value}={os.environ.get(value)}", UserWarning, stacklevel=2)
            if kind == "raise":
                raise exc_type(value)
            if kind == "warn":
                warnings.warn(value, UserWarning, stacklevel=2)
            if kind == "scale":
                factor *= float(value)
        out = real(*wrong_weight(args, kwargs, actions), **kwargs)
        return out * factor if factor != 1.0 else out
    return conv


@contextlib.contextmanager
def patched(actions: list[tuple[str, Any]], exc_type: type) -> Iterator[None]:
    """Swaps the conv functions for faulty ones, and always puts the real ones back."""
    functional = torch.nn.functional
    originals = {name: getattr(functional, name) for name in CONV_FUNCTIONS}
    try:
        for name, real in originals.items():
            setattr(functional, name, faulty(real, actions, exc_type))
        yield
    finally:
        for name, real in originals.items():
            setattr(functional, name, real)


@contextlib.contextmanager
def without_mkldnn() -> Iterator[None]:
    """oneDNN off, and back as it was. Not torch.backends.mkldnn.flags(): that sets TF32 too,
    which warns on a CPU build, and the suite records every warning."""
    mkldnn: Any = torch.backends.mkldnn  # enabled is a module property mypy does not know
    saved = mkldnn.enabled
    mkldnn.enabled = False
    try:
        yield
    finally:
        mkldnn.enabled = saved


class Faults:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.exc_type = exception_class(spec)

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        callspec = getattr(item, "callspec", None)
        for kind, value in actions_for(self.spec, callspec.id) if callspec is not None else []:
            if kind == "skip":
                pytest.skip(str(value))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, None]:
        callspec = getattr(item, "callspec", None)
        actions = actions_for(self.spec, callspec.id) if callspec is not None else []
        if not actions:
            yield
            return
        # no_mkldnn covers the whole call: backward picks its kernels when it runs, after the conv.
        kernels = (without_mkldnn() if any(kind == "no_mkldnn" for kind, _ in actions)
                   else contextlib.nullcontext())
        with kernels, patched(actions, self.exc_type):
            yield


def pytest_configure(config: pytest.Config) -> None:
    spec = load_spec()
    if spec:
        config.pluginmanager.register(Faults(spec), "convmatrix_faults_active")
