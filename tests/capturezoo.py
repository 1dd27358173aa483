"""Small models for `convmatrix cases --from-model`'s bounds (issue 46): each misbehaves in one
way a user's code can (ends the interpreter, prints, swallows every exception, allocates real
memory, reads a tensor's value in its builder, fails at a lazy attribute), or fails as the older
tests expect. Importable as `capturezoo` (pyproject's pytest `pythonpath`); it imports torch only,
so that the recorder's interpreter loads it in a moment. `module_source` writes a module that
misbehaves at import, in its builder or in its forward, for the property test."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import types
from typing import Any

import torch

# What a model that prints tries to slip into the case file on stdout.
INJECTED = '[[case]]\nname = "injected_by_print"\nop = "conv2d"\ninput = [1, 1, 4, 4]\nout_channels = 1\nkernel = 1'
BIG = 200_000_000  # float32 elements a hoarding model allocates: 800 MB


class One(torch.nn.Module):
    """One 3x3 convolution, 1 to 2 channels: input N x 1 x H x W."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.conv(x)
        return out


def well() -> torch.nn.Module:
    return One()


# -- ending the interpreter --------------------------------------------------------------------

def exits_0() -> torch.nn.Module:
    sys.exit(0)


class ExitsInForward(One):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise SystemExit(3)  # the harness's "control unhealthy" code, were it to leak out


def exits_3() -> torch.nn.Module:
    return ExitsInForward()


# -- printing -----------------------------------------------------------------------------------

class Prints(One):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        print(INJECTED)
        print("a line on stderr", file=sys.stderr)
        return super().forward(x)


def prints() -> torch.nn.Module:
    print(INJECTED)
    return Prints()


# -- swallowing every exception -------------------------------------------------------------------

class Swallows(One):
    """Loops for ever, swallowing every exception; says its process id in `swallower.pid` (in the
    working folder) first, so that a test can tell the process is gone."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with open("swallower.pid", "w") as handle:
            handle.write(str(os.getpid()))
        while True:
            with contextlib.suppress(BaseException):  # the point: the alarm's exception and SIGTERM's go here
                time.sleep(0.05)


def swallows() -> torch.nn.Module:
    return Swallows()


# -- real memory --------------------------------------------------------------------------------

class Allocates(One):
    """Builds BIG float32 elements on the CPU in its forward (torch.ones touches every page)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.kept = torch.ones(BIG, device="cpu")
        return super().forward(x)


def allocates() -> torch.nn.Module:
    return Allocates()


# -- a builder that reads a tensor's value (YOLO-style) ------------------------------------------

class ReadsValues(torch.nn.Module):
    """A detector's builder: it runs its own layers on a dummy image to learn its strides and
    reads them back with `.item()`, which a meta tensor cannot answer. Input N x 3 x H x W."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.down = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        with torch.no_grad():
            out = self.forward(torch.zeros(1, 3, 64, 64))
        strides = torch.tensor([64.0 / out.shape[-1]])
        self.register_buffer("strides", strides)
        self.stride = int(strides.max().item())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down(self.stem(x))
        return out


def reads_values() -> torch.nn.Module:
    return ReadsValues()


# -- a package whose lazy import fails at attribute access (diffusers beside a mismatched torchvision)

class LazyModule(types.ModuleType):
    """diffusers' _LazyModule as it fails beside a torchvision built for another torch: the error
    comes at the attribute, not at the import, and it is no AttributeError."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"Failed to import diffusers.models.{name.lower()} because of the following error "
                           "(look up to see its traceback):\noperator torchvision::nms does not exist")


lazy = LazyModule("lazy")


# -- what the older tests of triage/from_model.py build ---------------------------------------------

class Sleeper(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(30)
        return x


class Hoarder(torch.nn.Module):
    """Builds real memory while it runs: 256 MiB on the CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.kept = torch.ones(64 << 20, device="cpu")
        out: torch.Tensor = self.conv(x)
        return out


class OnTheCpu(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 1, 1, device="cpu")


def sleeper() -> torch.nn.Module:
    return Sleeper()


def hoarder() -> torch.nn.Module:
    return Hoarder()


def on_the_cpu() -> torch.nn.Module:
    return OnTheCpu()


def raises(**kwargs: Any) -> torch.nn.Module:
    raise ValueError(f"no such config {sorted(kwargs)}\nsecond line")


def not_a_module() -> object:
    return object()


def no_conv() -> torch.nn.Module:
    return torch.nn.Linear(4, 4)


# -- a module that misbehaves where it is told (the property test) ---------------------------------

DOINGS = {
    "exit": "raise SystemExit({arg})",
    "print": "print({injected!r}); print('noise', file=sys.stderr)",
    "sleep": "time.sleep(600)",
    "swallow": "\n".join(["while True:", "    try:", "        time.sleep(0.05)", "    except BaseException:",
                          "        pass"]),
    "allocate": "KEPT.append(torch.ones({big}, device='cpu'))",
    "raise": "raise ValueError('model trouble {arg}')",
}


def module_source(what: str, where: str, arg: int = 0) -> str:
    """A model module (input N x 1 x H x W, callable `build`) that does `what` (a key of DOINGS)
    at `where`: "import", "build" or "forward"."""
    doing = DOINGS[what].format(arg=arg, injected=INJECTED, big=BIG)

    def at(place: str, indent: str) -> str:
        return "\n".join(indent + line for line in doing.splitlines()) if place == where else f"{indent}pass"

    return "\n".join([
        "import sys", "import time", "", "import torch", "", "KEPT = []", at("import", ""), "", "",
        "class Model(torch.nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        "        self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)",
        "", "    def forward(self, x):", at("forward", "        "), "        return self.conv(x)", "", "",
        "def build():", at("build", "    "), "    return Model()", "",
    ])
