"""Models for `convmatrix cases --from-model`'s tests and bench/from_model.py, built from code in
PyPI packages with no weights (tests/requirements.txt pins torchvision and diffusers), and small
models of known layers. Importable as `modelzoo` (pyproject's pytest `pythonpath`); the targets
are `modelzoo:tiny`, `modelzoo:vae_decoder`, `modelzoo:unet`, `modelzoo:torchvision.models.resnet50` and
`modelzoo:diffusers.<class>` (diffusers' own classes, for --config)
(torchvision through this module, whose import makes it importable in the recording's interpreter).

Missing torchvision or diffusers fails the import, loudly: CI installs them from the lock.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import torch


def torchvision_importable() -> None:
    """Make PyPI's torchvision wheel importable beside the CPU build of torch (what the lock
    installs: requirements/lock.py). PyPI's wheel is built against the CUDA build of torch, so with
    the CPU build its C extension (_C.so) does not load: it needs libtorch_cuda.so; torchvision then
    runs without its ops, except that torchvision 0.28's _meta_registrations.py registers fake
    kernels for torchvision::nms and ::qnms without checking that the ops exist, and the import
    fails ("operator torchvision::nms does not exist"). Defining the two schemas (no kernel) lets
    it import; the models (resnet50) are plain torch.nn code and use no torchvision op. Where the
    extension does load (the CPU wheel of download.pytorch.org, or a CUDA torch) nothing is done."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("torchvision is not installed: install the tests' lock (requirements/tests.txt)")
    if hasattr(torch.ops.torchvision, "nms"):
        return
    library = Path(next(iter(spec.submodule_search_locations))) / "_C.so"
    try:
        torch.ops.load_library(str(library))  # type: ignore[no-untyped-call]
        return
    except (OSError, RuntimeError):
        pass
    global _SCHEMAS
    _SCHEMAS = torch.library.Library("torchvision", "DEF")  # type: ignore[no-untyped-call]  # kept alive: dropping it unregisters them
    _SCHEMAS.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _SCHEMAS.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


_SCHEMAS: Any = None
torchvision_importable()
# After the schemas: diffusers imports torchvision where it finds it. Either missing fails loudly.
# Imported as Any: neither ships complete types. diffusers is imported when a model of it is built
# (its import takes seconds, and every `--from-model modelzoo:...` recording imports this module in
# an interpreter of its own: issue 46); its absence fails here all the same.
if importlib.util.find_spec("diffusers") is None:
    raise ImportError("diffusers is not installed: install the tests' lock (requirements/tests.txt)")
torchvision: Any = importlib.import_module("torchvision")


def _diffusers() -> Any:
    return importlib.import_module("diffusers")


def __getattr__(name: str) -> Any:
    """`modelzoo:diffusers.AutoencoderKL`: diffusers' own classes (with from_config, for --config),
    imported through this module, after the schemas above, when first asked for."""
    if name == "diffusers":
        return _diffusers()
    raise AttributeError(name)


def vae_decoder(**config: Any) -> torch.nn.Module:
    """The decoder of diffusers' AutoencoderKL at its default config (or `config`): latents
    N x 4 x H/8 x W/8 to images; at the default config one block per level, 1 decoder layer."""
    decoder: torch.nn.Module = _diffusers().AutoencoderKL(**config).decoder
    return decoder


def unet(**config: Any) -> torch.nn.Module:
    """diffusers' UNet2DConditionModel at its default config (or `config`): inputs sample
    N x 4 x H x W, timestep (1), encoder_hidden_states N x 77 x 1280."""
    model: torch.nn.Module = _diffusers().UNet2DConditionModel(**config)
    return model


class Tiny(torch.nn.Module):
    """One convolution of each kind the recorder maps, with known settings (the tests read them
    back): input N x 4 x 16 x 16."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 8, 3, stride=2, padding=1, bias=False)
        self.depthwise = torch.nn.Conv2d(8, 8, (3, 5), padding=(1, 2), groups=8)
        self.dilated = torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.again = torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2)  # the same conv as `dilated`: one case
        self.up = torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.line = torch.nn.Conv1d(4, 6, 5, padding=2)
        self.volume = torch.nn.Conv3d(1, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(self.again(self.dilated(self.depthwise(self.conv(x)))))  # N x 4 x 16 x 16
        n = y.shape[0]
        line = self.line(y.reshape(n, 4, 256))  # N x 6 x 256
        volume = self.volume(line.reshape(n, 1, 6, 16, 16))  # N x 2 x 6 x 16 x 16
        total: torch.Tensor = volume.sum() + line.sum() + y.sum()
        return total


def tiny() -> torch.nn.Module:
    return Tiny()
