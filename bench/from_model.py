"""`convmatrix cases --from-model` figures, printed, never asserted: recording time, convolution
calls, distinct cases and peak memory for three models built from PyPI packages' code, no weights
(tests/modelzoo.py; torchvision and diffusers from the tests' lock).

    python bench/from_model.py
    .nox/models/bin/python bench/from_model.py --zoo     (every zoo model, in the models venv: issue 50)

Each model is recorded from a fresh interpreter: the time is triage/from_model.record's, which
starts the child interpreter that records (suites/capture.py: its own import of torch, then build
on meta, cast, forward, backward); the bench's own import of torch, torchvision and diffusers is
printed apart; peak RSS is the recording child's (ru_maxrss of the children), with the bench
process's RSS before the recording beside it.

    resnet50     torchvision.models:resnet50, 8x3x224x224, float16, channels_last, forward+backward
    vae_decoder  diffusers AutoencoderKL's decoder at Stable Diffusion's config, 1024x1024 images
                 (latents 32x4x128x128), float16, forward
    unet         diffusers UNet2DConditionModel at its default config, a 64x64 latent
                 (2x4x64x64, timestep, 2x77x1280), float16, channels_last, forward+backward
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests")]

SD_VAE = {"block_out_channels": [128, 256, 512, 512], "layers_per_block": 2,
          "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4}
MODELS: dict[str, dict[str, Any]] = {
    "resnet50": {"target": "modelzoo:torchvision.models.resnet50", "inputs": [(8, 3, 224, 224)], "dtype": "float16",
                 "channels_last": True, "backward": True},
    "vae_decoder": {"target": "modelzoo:vae_decoder", "inputs": [(32, 4, 128, 128)], "dtype": "float16",
                    "kwargs": SD_VAE},
    "unet": {"target": "modelzoo:unet", "inputs": [(2, 4, 64, 64), (1,), (2, 77, 1280)], "dtype": "float16",
             "channels_last": True, "backward": True},
}


def one(name: str) -> dict[str, Any]:
    start = time.perf_counter()
    import modelzoo  # noqa: F401  (torchvision, diffusers: imported here, timed apart)
    from convmatrix.triage import from_model

    imported = time.perf_counter() - start
    rss_before = from_model._rss()
    spec = dict(MODELS[name])
    target, inputs = spec.pop("target"), spec.pop("inputs")
    start = time.perf_counter()
    found = from_model.record(target, inputs, **spec)  # in a child interpreter of its own (suites/capture.py)
    seconds = time.perf_counter() - start
    return {"model": name, "import_s": round(imported, 2), "record_s": round(seconds, 3), "conv_calls": found.calls,
            "cases": len(found.cases), "aten_calls": found.aten_calls, "rss_before_mb": rss_before >> 20,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10}


def zoo_one(name: str) -> dict[str, Any]:
    """One zoo model (src/convmatrix/capture/zoo.py) recorded as `nox -s models` does, with its figures:
    recording seconds, peak RSS of the recording child, and the distinct cases it adds beyond the
    catalogue (cases not identical to a catalogue case)."""
    from convmatrix.capture import zoo

    model = next(m for m in zoo.MODELS if m.name == name)
    _data, figures = zoo.regenerate(model)
    return {**figures, "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10}


def zoo_main() -> None:
    """python bench/from_model.py --zoo (in the models venv: .nox/models/bin/python): every zoo model."""
    from convmatrix.capture import zoo

    print(f"{'model':<16} {'record s':>9} {'conv calls':>10} {'cases':>6} {'in catalogue':>12} {'added':>6} "
          f"{'peak RSS MB':>11}")
    for model in zoo.MODELS:
        done = subprocess.run([sys.executable, __file__, "--zoo-one", model.name], capture_output=True, text=True,
                              check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{row['model']:<16} {row['record_s']:>9} {row['conv_calls']:>10} {row['cases']:>6} "
              f"{row['matched']:>12} {row['added']:>6} {row['peak_rss_mb']:>11}")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2])))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--zoo-one":
        print(json.dumps(zoo_one(sys.argv[2])))
        return
    if sys.argv[1:] == ["--zoo"]:
        zoo_main()
        return
    print(f"{'model':<12} {'record s':>9} {'conv calls':>10} {'cases':>6} {'aten calls':>10} {'RSS before MB':>13} "
          f"{'peak RSS MB':>11} {'imports s':>9}")
    for name in MODELS:
        done = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name:<12} {row['record_s']:>9} {row['conv_calls']:>10} {row['cases']:>6} {row['aten_calls']:>10} "
              f"{row['rss_before_mb']:>13} {row['peak_rss_mb']:>11} {row['import_s']:>9}")


if __name__ == "__main__":
    main()
