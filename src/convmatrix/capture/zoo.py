"""The zoo: suites/models/<model>.json, each recorded from a public model's own code (issue 50).

    python -m convmatrix.capture.zoo [--only NAME ...] [--out DIR]     (what `nox -s models` runs)

Each model is recorded with `convmatrix cases --from-model`'s recorder (triage/from_model.py: a
child interpreter, meta tensors, no weights: a class built from its config or its documented
defaults), in the interpreter this runs in, which must hold the pinned packages
(requirements/models.txt; `nox -s models` builds that venv). A recorded case identical to a
catalogue case (catalog.identity: op, shapes, strides, dtype, direction, knobs) is not written
again: the file's provenance table names the catalogue id it matched. The file holds nothing that
changes from one recording to the next (no time, no path), so regenerating it with the same pins
writes the same bytes (tests/integration/test_zoo_regenerates.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convmatrix.errors import BadInput
from convmatrix.results import rundir
from convmatrix.triage import from_model

MODELS_DIR = rundir.SUITE_DIR / "models"
_SD_VAE = {"block_out_channels": [128, 256, 512, 512], "layers_per_block": 2, "latent_channels": 4,
           "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4}
_WHISPER_LARGE_V3 = {"num_mel_bins": 128, "d_model": 1280, "encoder_layers": 32, "encoder_attention_heads": 20,
                     "max_source_positions": 1500}


@dataclass(frozen=True)
class Model:
    """One zoo model: what to record and why (the file's description)."""

    name: str  # the file's stem: its cases' id prefix
    package: str  # the PyPI package whose code builds it (its version goes in the provenance)
    target: str  # MODULE:CALLABLE
    inputs: tuple[tuple[tuple[int, ...], str | None], ...]  # shape, and its own dtype where not the model's
    dtype: str
    why: str
    config: dict[str, Any] | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    backward: bool = False
    channels_last: bool = False


MODELS: tuple[Model, ...] = (
    Model("sd_vae", "diffusers", "diffusers:AutoencoderKL", (((1, 3, 1024, 1024), None),), "float16",
          "Stable Diffusion / SDXL VAE (AutoencoderKL at SD's config): encoder and decoder at 1024^2, fp16",
          config=_SD_VAE),
    Model("flux_vae", "diffusers", "diffusers:AutoencoderKL", (((1, 3, 1024, 1024), None),), "bfloat16",
          "FLUX-style VAE (16 latent channels, no quant convs): encoder and decoder at 1024^2, bf16",
          config={**_SD_VAE, "latent_channels": 16, "use_quant_conv": False, "use_post_quant_conv": False}),
    Model("wan_vae", "diffusers", "diffusers:AutoencoderKLWan", (((1, 3, 17, 480, 832), None),), "bfloat16",
          "Wan 2.1 video VAE (AutoencoderKLWan at its defaults): causal 3D convs, 17 frames at 480x832, bf16",
          config={}),
    Model("sd_unet", "diffusers", "diffusers:UNet2DConditionModel",
          (((2, 4, 64, 64), None), ((1,), "int64"), ((2, 77, 768), None)), "float16",
          "Stable Diffusion 1.5 UNet (UNet2DConditionModel, cross-attention 768): 512^2 latents, CFG batch 2, "
          "fp16 channels_last, forward and backward (fine-tuning)",
          config={"cross_attention_dim": 768}, backward=True, channels_last=True),
    Model("qwen2vl_patch", "transformers", "transformers.models.qwen2_vl.modeling_qwen2_vl:PatchEmbed",
          (((4096, 1176), None),), "bfloat16",
          "Qwen2-VL vision patch embedding: conv3d with kernel = stride = (2, 14, 14), 4096 patches, bf16, "
          "forward and backward", kwargs={"patch_size": 14, "temporal_patch_size": 2, "in_channels": 3,
                                          "embed_dim": 1280}, backward=True),
    Model("whisper_encoder", "transformers", "transformers.models.whisper.modeling_whisper:WhisperEncoder",
          (((1, 128, 3000), None),), "float16",
          "Whisper large-v3 encoder front end: two conv1d (128 mel bins to 1280, the second stride 2), 30 s, "
          "fp16, forward and backward", config=_WHISPER_LARGE_V3, backward=True),
    Model("wav2vec2", "transformers", "transformers:Wav2Vec2Model", (((2, 160000), None),), "float32",
          "wav2vec2-base feature extractor: seven conv1d (kernel 10 stride 5, then 3/2 and 2/2), 10 s of 16 kHz "
          "audio, forward and backward (mask_time_prob 0: its masked_spec_embed is built with torch.Tensor(), "
          "off the meta device, and masks no convolution)", config={"mask_time_prob": 0.0}, backward=True),
    Model("hifigan", "transformers", "transformers:SpeechT5HifiGan", (((1, 200, 80), None),), "float32",
          "HiFi-GAN vocoder (SpeechT5HifiGan at its defaults): transposed conv1d upsampling x256 and dilated "
          "residual conv1d, 200 mel frames", config={}),
    Model("resnet50", "torchvision", "torchvision.models:resnet50", (((32, 3, 224, 224), None),), "float16",
          "ResNet-50 (torchvision, no weights): batch 32 at 224^2, fp16 channels_last, forward and backward",
          backward=True, channels_last=True),
    Model("convnext", "timm", "timm:create_model", (((16, 3, 224, 224), None),), "bfloat16",
          "ConvNeXt-Base (timm, no weights): 7x7 depthwise convs, batch 16 at 224^2, bf16 channels_last, "
          "forward and backward", kwargs={"model_name": "convnext_base", "pretrained": False},
          backward=True, channels_last=True),
    Model("efficientnet", "timm", "timm:create_model", (((32, 3, 224, 224), None),), "float16",
          "EfficientNet-B0 (timm, no weights): depthwise 3x3 and 5x5 convs, batch 32 at 224^2, fp16 "
          "channels_last, forward and backward", kwargs={"model_name": "efficientnet_b0", "pretrained": False},
          backward=True, channels_last=True),
    Model("mobilenet_v3", "torchvision", "torchvision.models:mobilenet_v3_large", (((32, 3, 224, 224), None),),
          "float16", "MobileNetV3-Large (torchvision, no weights): depthwise convs, batch 32 at 224^2, fp16, "
          "forward and backward", backward=True),
    Model("r2plus1d", "torchvision", "torchvision.models.video:r2plus1d_18", (((8, 3, 16, 112, 112), None),),
          "float16", "R(2+1)D-18 video classifier (torchvision, no weights): (1,3,3) and (3,1,1) conv3d, 16 "
          "frames at 112^2, batch 8, fp16, forward and backward", backward=True),
    Model("r3d", "torchvision", "torchvision.models.video:r3d_18", (((8, 3, 16, 112, 112), None),), "float16",
          "R3D-18 video classifier (torchvision, no weights): 3x3x3 conv3d, 16 frames at 112^2, batch 8, fp16, "
          "forward and backward", backward=True),
)


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        raise BadInput(f"zoo: {package} is not installed in {sys.executable}: run `nox -s models` (its venv "
                       "holds requirements/models.txt)") from None


def regenerate(model: Model) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's case file as data, and the figures of its recording (seconds, calls, cases, matched)."""
    casefile, catalog = rundir.suite_module("casefile"), rundir.suite_module("catalog")
    inputs = [shape for shape, _ in model.inputs]
    # The CLI's bounds ($CONVMATRIX_FROM_MODEL_SECONDS, ..._MEMORY_MB): a loaded machine may need more
    # than the default 120 s to import a model package.
    seconds_bound, growth_bound = from_model.bounds_from_env(os.environ)
    start = time.perf_counter()
    found = from_model.record(model.target, inputs, dtype=model.dtype, backward=model.backward,
                              channels_last=model.channels_last, kwargs=model.kwargs, config=model.config,
                              input_dtypes=[dtype for _, dtype in model.inputs],
                              max_seconds=seconds_bound, max_rss_growth=growth_bound)
    seconds = time.perf_counter() - start
    known = {catalog.identity(case): case.id for case in catalog.CASES}
    kept, matched = [], []
    for entry in found.cases:
        case = catalog.Case(**casefile.case_fields(entry, model.name))
        if catalog.identity(case) in known:
            matched.append({"name": entry["name"], "catalog": known[catalog.identity(case)]})
        else:
            kept.append(entry)
    provenance: dict[str, Any] = {
        "package": model.package, "version": version(model.package), "model": model.target,
        "inputs": [{"shape": list(shape), "dtype": dtype or model.dtype} for shape, dtype in model.inputs],
        "dtype": model.dtype, "backward": model.backward, "channels_last": model.channels_last,
        "torch": version("torch"), "recorded_by": "nox -s models (python -m convmatrix.capture.zoo)",
        "matched": matched}
    if model.config is not None:
        provenance["config"] = model.config
    if model.kwargs:
        provenance["kwargs"] = model.kwargs
    if found.notes:
        provenance["notes"] = " ".join(found.notes)
    description = (f"{model.why}. Recorded on the meta device (no weights): {found.calls} convolution call(s) as "
                   f"{len(found.cases)} distinct case(s), {len(matched)} of them catalogue cases (provenance.matched)"
                   "; each case's source says how many calls it stands for.")
    data = {"description": description, "provenance": provenance, "case": kept}
    figures = {"model": model.name, "record_s": round(seconds, 2), "conv_calls": found.calls,
               "cases": len(found.cases), "matched": len(matched), "added": len(kept)}
    return data, figures


def text_of(data: dict[str, Any]) -> str:
    """The file's bytes: JSON, two-space indented, keys in the order written, one final newline."""
    return json.dumps(data, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m convmatrix.capture.zoo",
                                     description="Regenerate suites/models/*.json from the pinned packages.")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="regenerate this model only")
    parser.add_argument("--out", type=Path, default=MODELS_DIR, help="the folder to write (default suites/models)")
    args = parser.parse_args(argv)
    names = {model.name for model in MODELS}
    unknown = [name for name in args.only if name not in names]
    if unknown:
        print(f"zoo: --only {unknown[0]}: not a zoo model ({', '.join(sorted(names))})", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        for model in MODELS:
            if args.only and model.name not in args.only:
                continue
            data, figures = regenerate(model)
            path = args.out / f"{model.name}.json"
            rundir.write_whole(path, [text_of(data)])  # whole or not at all: a killed run leaves the old file
            print(json.dumps(figures), flush=True)
    except BadInput as exc:
        print(f"zoo: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
