"""triage/from_model.py: a model's convolutions recorded on the meta device as case entries."""

from __future__ import annotations

import functools
import json
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import torch

import modelzoo
from convmatrix.errors import BadInput
from convmatrix.triage import from_model, snippets
from testkit import load_suite_module

casefile = load_suite_module("casefile")
catalog = load_suite_module("catalog")
capture = load_suite_module("capture")  # the recorder, run in a child interpreter (issue 46)
ZOO = "capturezoo"  # the small models below live there: the child imports it (torch only) in a moment


@functools.cache
def tiny_forward() -> from_model.Recorded:
    """modelzoo:tiny's forward on 2x4x16x16, recorded once for the tests that only read it: each
    recording starts an interpreter of its own (issue 46)."""
    return from_model.record("modelzoo:tiny", [(2, 4, 16, 16)])


def by_name(found: from_model.Recorded) -> dict[str, dict[str, Any]]:
    return {case["name"]: case for case in found.cases}


def as_cases(entries: list[dict[str, Any]], tmp_path: Path, suffix: str = ".toml") -> list[Any]:
    """The entries through the writer and suites/casefile.py, as the suite reads them."""
    path = tmp_path / f"rec{suffix}"
    path.write_text(from_model.to_case_file(entries, "a header", suffix), encoding="utf-8")
    return list(casefile.parse(str(path), catalog.Case))


def test_each_kind_of_convolution_is_read_back_as_the_module_has_it() -> None:
    found = tiny_forward()
    cases = found.cases
    assert [c["op"] for c in cases] == ["conv2d", "conv2d", "conv2d", "conv_transpose2d", "conv1d", "conv3d"]
    conv, depthwise, dilated, up, line, volume = cases
    assert conv | {"name": "", "source": "", "captured_from": ""} == {
        "name": "", "op": "conv2d", "input": [2, 4, 16, 16], "out_channels": 8, "kernel": 3, "stride": 2,
        "padding": 1, "dilation": 1, "groups": 1, "bias": False, "dtype": "float32",
        "memory_format": "contiguous", "source": "", "captured_from": ""}
    assert (depthwise["kernel"], depthwise["padding"], depthwise["groups"], depthwise["bias"]) == ([3, 5], [1, 2], 8,
                                                                                                  True)
    assert (dilated["dilation"], dilated["padding"]) == (2, 2)
    assert (up["input"], up["out_channels"], up["stride"], up["output_padding"]) == ([2, 8, 8, 8], 4, 2, 1)
    assert (line["input"], line["out_channels"], line["kernel"]) == ([2, 4, 256], 6, 5)
    assert (volume["input"], volume["kernel"]) == ([2, 1, 6, 16, 16], 3)
    # `dilated` and `again` are one convolution, run twice: one case, its count in its source.
    assert found.calls == 7 and len(cases) == 6
    assert dilated["source"].endswith(": 2 forward call(s)") and conv["source"].endswith(": 1 forward call(s)")
    assert all("direction" not in c for c in cases)
    assert conv["captured_from"] == "modelzoo:tiny(2x4x16x16)"


def test_the_cases_are_the_modules_convolutions_as_the_suite_builds_them(tmp_path: Path) -> None:
    model = modelzoo.tiny()
    weights = [tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)]
    weights.remove((8, 8, 3, 3))  # `again`, the same convolution as `dilated`
    found = tiny_forward()
    cases = as_cases(found.cases, tmp_path)
    assert [case.shapes()["weight"] for case in cases] == weights
    assert cases[0].id == "rec-conv2d-fp32-k3-s2-p1-nobias-tiny_1"


def test_backward_records_which_gradients_each_convolution_computes() -> None:
    found = from_model.record("modelzoo:tiny", [(2, 4, 16, 16)], backward=True)
    directions = [c.get("direction") for c in found.cases]
    # The first layer's input needs no gradient (an image): cuDNN computes the weight's alone.
    assert directions == ["backward_weight"] + ["backward"] * 5
    assert found.calls == 14
    assert by_name(found)["tiny_3"]["source"].endswith(": 2 forward call(s) and 2 backward call(s)")


def test_dtype_and_channels_last_are_what_the_calls_saw() -> None:
    found = from_model.record("modelzoo:tiny", [(2, 4, 16, 16)], dtype="bfloat16", channels_last=True)
    assert {c["dtype"] for c in found.cases} == {"bfloat16"}
    # A 5-d weight and input take channels_last_3d; a conv1d has no channels-last format.
    assert [c["memory_format"] for c in found.cases] == ["channels_last"] * 4 + ["contiguous", "channels_last_3d"]
    plain = from_model.record("modelzoo:tiny", [(2, 4, 16, 16)], dtype="float16")
    assert {c["memory_format"] for c in plain.cases} == {"contiguous"}


def test_the_memory_format_is_read_from_whole_strides() -> None:
    for shape, fmt in (((8, 3, 224, 224), torch.channels_last), ((64, 64, 1, 1), torch.channels_last),
                       ((2, 3, 4, 5, 6), torch.channels_last_3d)):
        strides = list(torch.empty(shape).to(memory_format=fmt).stride())
        assert capture.channels_last_strides(list(shape)) == strides
    one_by_one = torch.empty(64, 64, 1, 1, device="meta")
    x = torch.empty(2, 64, 8, 8, device="meta")
    assert capture.memory_format_of(x, one_by_one, 2) == "contiguous"
    assert capture.memory_format_of(x, one_by_one.to(memory_format=torch.channels_last), 2) == "channels_last"


def test_autocast_is_stamped_on_float32_cases_and_the_header_says_so(tmp_path: Path) -> None:
    found = from_model.record("modelzoo:tiny", [(2, 4, 16, 16)], autocast="bfloat16")
    assert {(c["dtype"], c["autocast"]) for c in found.cases} == {("float32", "bfloat16")}
    said = from_model.header("modelzoo:tiny", [(2, 4, 16, 16)], found, autocast="bfloat16", backward=False,
                             seconds=0.1)
    assert "stamped by the tool, not observed" in said
    assert {case.compute_dtype for case in as_cases(found.cases, tmp_path)} == {"bfloat16"}
    with pytest.raises(BadInput, match="--autocast runs a float32 model"):
        from_model.record("modelzoo:tiny", [(2, 4, 16, 16)], autocast="float16", dtype="float16")


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_the_file_reads_back_in_its_format_with_any_text(tmp_path: Path, suffix: str) -> None:
    found = tiny_forward()
    said = 'model "m\\n" \U0001f600 é \x00 end'
    text = from_model.to_case_file(found.cases, said, suffix)
    data = tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    assert data["case"] == found.cases
    if suffix == ".json":
        assert data["description"] == said
    assert len(as_cases(found.cases, tmp_path, suffix)) == 6


def test_a_bound_on_cases_is_one_line() -> None:
    with pytest.raises(BadInput, match=r"modelzoo:tiny: over 3 distinct convolutions"):
        from_model.record("modelzoo:tiny", [(2, 4, 16, 16)], max_cases=3)


def test_the_time_bound_stops_a_model_that_runs_too_long() -> None:
    start = time.perf_counter()
    with pytest.raises(BadInput, match=r"recording took over 0.5 s \(killed while running the model\)"):
        from_model.record(f"{ZOO}:sleeper", [(1, 1, 4, 4)], max_seconds=0.5)
    assert time.perf_counter() - start < 60  # the bound starts once the child has imported torch


def test_the_memory_bound_stops_a_model_that_builds_real_tensors() -> None:
    with pytest.raises(BadInput, match=r"grew past 64 MiB of memory"):
        from_model.record(f"{ZOO}:hoarder", [(1, 1, 4, 4)], max_rss_growth=64 << 20)


@pytest.mark.parametrize(("target", "kwargs", "message"), [
    ("no_such_module_i38:model", None, "--from-model no_such_module_i38:model: cannot import no_such_module_i38: "
                                       "ModuleNotFoundError: No module named 'no_such_module_i38'"),
    (f"{ZOO}:nothing", None, f"--from-model {ZOO}:nothing: {ZOO} has no nothing"),
    (f"{ZOO}:raises", {"depth": 3}, f"--from-model {ZOO}:raises: the callable raised ValueError: "
                                    "no such config ['depth']"),
    (f"{ZOO}:not_a_module", None, "returned a object, not a torch.nn.Module"),
    (f"{ZOO}:on_the_cpu", None, "2 parameter(s) or buffer(s) built off the meta device (conv.weight on cpu)"),
    (f"{ZOO}:no_conv", None, "the model ran no convolution on inputs 2x4"),
    ("modelzoo:tiny", None, "the model raised RuntimeError on inputs 2x3x16x16: "),
    ("modelzoo tiny", None, "expected MODULE:CALLABLE"),
])
def test_a_callable_that_fails_is_one_line_naming_it(target: str, kwargs: dict[str, Any] | None, message: str) -> None:
    shape = (2, 4) if "no_conv" in target else (2, 3, 16, 16)
    with pytest.raises(BadInput) as caught:
        from_model.record(target, [shape], kwargs=kwargs)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_package_built_for_another_torch_is_told_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PyPI's torchvision beside a CPU-only torch fails on import with torch's own line (seen with
    torchvision 0.28.0 and torch 2.13.0+cpu); the message says which torch is here and what to do."""
    (tmp_path / "mismatched_ops_i38.py").write_text(
        'raise RuntimeError("operator mismatched_ops_i38::nms does not exist")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(BadInput) as caught:
        from_model.record("mismatched_ops_i38:build", [(1, 1, 4, 4)])
    said = str(caught.value)
    assert said.startswith("--from-model mismatched_ops_i38:build: cannot import mismatched_ops_i38: RuntimeError: "
                           "operator mismatched_ops_i38::nms does not exist (mismatched_ops_i38's compiled ops do "
                           f"not match torch {torch.__version__}: install the mismatched_ops_i38 release built for "
                           "this torch")
    assert "\n" not in said
    # Any other import error gets no such hint.
    (tmp_path / "plain_error_i38.py").write_text('raise RuntimeError("no GPU")\n')
    with pytest.raises(BadInput, match=r"RuntimeError: no GPU\Z"):
        from_model.record("plain_error_i38:build", [(1, 1, 4, 4)])


def test_bad_options_are_one_line() -> None:
    with pytest.raises(BadInput, match="--input '8x3x0x2'"):
        from_model.parse_shape("8x3x0x2")
    assert from_model.parse_shape("8x3x224x224") == (8, 3, 224, 224)
    with pytest.raises(BadInput, match="--kwargs: expected a JSON object"):
        from_model.parse_kwargs("[1]")
    with pytest.raises(BadInput, match="--kwargs: not JSON"):
        from_model.parse_kwargs("{")
    assert from_model.parse_kwargs('{"num_classes": 10}') == {"num_classes": 10}
    with pytest.raises(BadInput, match=r"a case file is named \.toml"):
        snippets.suffix_of(Path("cases.yaml"))


def test_resnet50_from_torchvision_without_weights_or_the_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = tmp_path / "torch_home"
    hub.mkdir()
    monkeypatch.setenv("TORCH_HOME", str(hub))
    start = time.perf_counter()
    # Through modelzoo, whose import makes PyPI's torchvision importable beside the tests' CPU torch:
    # the recording's interpreter imports the target itself, so the shim must be on its way there.
    found = from_model.record("modelzoo:torchvision.models.resnet50", [(8, 3, 224, 224)], dtype="float16",
                              channels_last=True, backward=True)
    assert time.perf_counter() - start < 30
    assert list(hub.iterdir()) == []
    # ResNet-50: 53 convolutions, forward and backward; 23 distinct (the repeated bottlenecks).
    assert (found.calls, len(found.cases)) == (106, 23)
    assert {(c["dtype"], c["memory_format"]) for c in found.cases} == {("float16", "channels_last")}
    first = found.cases[0]
    assert (first["input"], first["out_channels"], first["kernel"], first["stride"], first["padding"]) == (
        [8, 3, 224, 224], 64, 7, 2, 3)
    assert len(as_cases(found.cases, tmp_path)) == 23


# Stable Diffusion's VAE (its config.json's block_out_channels, layers_per_block, up blocks): the
# default AutoencoderKL is a one-block 64-channel toy.
SD_VAE = {"block_out_channels": [128, 256, 512, 512], "layers_per_block": 2,
          "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4}


def test_the_vae_decoder_from_diffusers(tmp_path: Path) -> None:
    default = from_model.record("modelzoo:vae_decoder", [(2, 4, 16, 16)])
    assert (default.cases[0]["input"], default.cases[0]["out_channels"]) == ([2, 4, 16, 16], 64)
    found = from_model.record("modelzoo:vae_decoder", [(2, 4, 16, 16)], dtype="float16", backward=True,
                              kwargs=SD_VAE)
    assert {c["op"] for c in found.cases} == {"conv2d"}
    # conv_in: 4 latent channels to 512, 3x3; conv_out: 128 channels to 3 at 8x the latent's size.
    assert (found.cases[0]["input"], found.cases[0]["out_channels"], found.cases[0]["kernel"]) == (
        [2, 4, 16, 16], 512, 3)
    assert [c["input"] for c in found.cases if c["out_channels"] == 3] == [[2, 128, 128, 128]]
    assert {c["dtype"] for c in found.cases} == {"float16"}
    assert [c["direction"] for c in found.cases] == ["backward_weight"] + ["backward"] * (len(found.cases) - 1)
    assert len(found.cases) >= 10
    assert len(as_cases(found.cases, tmp_path)) == len(found.cases)


def test_the_unet_from_diffusers_default_config_with_three_inputs(tmp_path: Path) -> None:
    found = from_model.record("modelzoo:unet", [(2, 4, 16, 16), (1,), (2, 77, 1280)], dtype="float16",
                              channels_last=True)
    first = found.cases[0]
    assert (first["input"], first["out_channels"], first["memory_format"]) == ([2, 4, 16, 16], 320, "channels_last")
    assert any(c["stride"] == 2 for c in found.cases)  # the down-samplers
    assert found.cases[-1]["out_channels"] == 4  # conv_out back to the latent's channels
    assert len(found.cases) >= 20
    assert len(as_cases(found.cases, tmp_path)) == len(found.cases)


# --- issue 50: --config, a dtype per input, float64 ---

TINY_VAE = {"block_out_channels": [8, 16], "layers_per_block": 1, "norm_num_groups": 4, "latent_channels": 4,
            "down_block_types": ["DownEncoderBlock2D"] * 2, "up_block_types": ["UpDecoderBlock2D"] * 2}


def test_config_builds_a_diffusers_class_from_its_dict_in_float64(tmp_path: Path) -> None:
    """--config: the dict a diffusers class is built from (from_config, no weights), as a file too;
    --dtype float64 records cuDNN's double convolutions."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_VAE))
    found = from_model.record("modelzoo:diffusers.AutoencoderKL", [(1, 3, 32, 32)], dtype="float64",
                              config=from_model.parse_config(str(config)))
    assert {c["dtype"] for c in found.cases} == {"float64"}
    assert {c["out_channels"] for c in found.cases} >= {8, 16, 3}  # the config's channels, not the defaults' 128
    assert as_cases(found.cases, tmp_path)  # the suite takes them


def test_an_input_of_its_own_dtype_keeps_it(tmp_path: Path) -> None:
    """`--input 1:int64`: a timestep as integers beside a float16 UNet (the others take --dtype)."""
    (shape, dtype) = from_model.parse_input("1:int64")
    assert (shape, dtype) == ((1,), "int64") and from_model.parse_input("2x4") == ((2, 4), None)
    (tmp_path / "timestep_i50.py").write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = torch.nn.Conv2d(4, 4, 3)\n"
        "    def forward(self, x, t):\n"
        "        assert t.dtype == torch.int64 and x.dtype == torch.float16, (t.dtype, x.dtype)\n"
        "        return self.conv(x)\n"
        "def build():\n"
        "    return M()\n")
    import sys
    sys.path.insert(0, str(tmp_path))
    try:
        found = from_model.record("timestep_i50:build", [(2, 4, 8, 8), (1,)], dtype="float16",
                                  input_dtypes=[None, "int64"])
    finally:
        sys.path.remove(str(tmp_path))
    assert [c["dtype"] for c in found.cases] == ["float16"]


def test_bad_config_and_input_dtypes_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"--input '2x4:int8': the dtype after ':' is one of float32, "):
        from_model.parse_input("2x4:int8")
    listed = tmp_path / "listed.json"
    listed.write_text("[1]")
    with pytest.raises(BadInput, match=r"--config \S+listed.json: expected a JSON object"):
        from_model.parse_config(str(listed))
    with pytest.raises(BadInput, match="--config: not JSON"):
        from_model.parse_config("{")
    with pytest.raises(BadInput, match=r"--config \S+missing.json: cannot read it"):
        from_model.parse_config(str(tmp_path / "missing.json"))
    with pytest.raises(BadInput, match=r"--config needs a transformers class \(with a config_class\) or a diffusers"):
        from_model.record(f"{ZOO}:well", [(1, 1, 4, 4)], config={"a": 1})
