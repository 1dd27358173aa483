"""User case files (suites/casefile.py): the keys as named, TOML and JSON alike, ids made as the
catalog's with the file's stem first, and one line per problem naming the file, case and field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

import strategies
from catalogkit import catalog, sizing
from testkit import load_suite_module

casefile = load_suite_module("casefile")

FULL = """
[[case]]
name = "unet_up_1280"
op = "conv2d"
input = [2, 1280, 32, 32]
out_channels = 640
kernel = 3
stride = 1
padding = [1, 1]
dilation = 1
groups = 1
bias = false
dtype = "float16"
memory_format = "channels_last"
direction = "backward"
benchmark = true
deterministic = false
allow_tf32 = true
sources = ["https://github.com/pytorch/pytorch/issues/1"]
source = "SDXL up block"

[[case]]
name = "vae_t"
op = "conv_transpose3d"
input = [1, 8, 4, 6, 6]
out_channels = 4
kernel = [3, 3, 3]
stride = 2
output_padding = 1
autocast = "bfloat16"
layout = "nhwc_strided"
direction = "double_backward"
"""


def write(tmp_path: Path, text: str, name: str = "prod.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(tmp_path: Path, text: str, name: str = "prod.toml") -> list[str]:
    with pytest.raises(casefile.CaseFileError) as caught:
        casefile.load([str(write(tmp_path, text, name))], catalog.Case)
    lines: list[str] = caught.value.lines
    return lines


def test_every_named_key_reaches_the_case(tmp_path: Path) -> None:
    unet, vae = casefile.load([str(write(tmp_path, FULL))], catalog.Case)
    assert (unet.op, unet.n, unet.c_in, unet.c_out, unet.size, unet.kernel) == ("conv2d", 2, 1280, 640, (32, 32), 3)
    assert (unet.padding, unet.bias, unet.dtype, unet.memory_format) == ((1, 1), False, "float16", "channels_last")
    assert (unet.kind, unet.benchmark, unet.deterministic, unet.tf32) == ("backward", True, False, True)
    assert unet.sources == ("https://github.com/pytorch/pytorch/issues/1",) and unet.source == "SDXL up block"
    assert unet.id == "prod-conv2d-fp16-k3-p1x1-channels_last-nobias-bwd-bench_on-det_off-tf32_on-unet_up_1280"
    assert (vae.op, vae.stride, vae.output_padding, vae.autocast, vae.layout) == (
        "conv_transpose3d", 2, 1, "bfloat16", "nhwc_strided")
    assert vae.kind == "double_backward" and vae.backward and vae.grads == (
        "grad_input", "grad_weight", "double_grad_weight")
    assert vae.id.startswith("prod-conv_transpose3d-fp32-autocast_bf16-") and vae.id.endswith("-double_bwd-vae_t")


def test_ids_are_made_as_the_catalogs_with_the_stem_first(tmp_path: Path) -> None:
    (case,) = casefile.load([str(write(tmp_path, FULL.split("[[case]]")[1].join(["[[case]]", ""]), "edge.toml"))],
                            catalog.Case)
    import dataclasses

    as_catalog = dataclasses.replace(case, prefix=None)
    assert case.id == f"edge-{as_catalog.id}"
    assert case.params()["prefix"] == "edge"


def test_json_is_the_same_data(tmp_path: Path) -> None:
    import tomllib

    data = tomllib.loads(FULL)
    from_toml = casefile.load([str(write(tmp_path, FULL))], catalog.Case)
    other = tmp_path / "json"
    other.mkdir()
    from_json = casefile.load([str(write(other, json.dumps(data), "prod.json"))], catalog.Case)
    assert [c.id for c in from_json] == [c.id for c in from_toml]
    assert [c.params() for c in from_json] == [c.params() for c in from_toml]


def test_a_python_without_tomllib_is_told_to_hand_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "tomllib", None)  # an import of it now fails, as on Python 3.10
    (line,) = problems(tmp_path, FULL)
    assert "no tomllib" in line and "JSON" in line


BASE = 'name = "a"\nop = "conv2d"\ninput = [1, 4, 8, 8]\nout_channels = 4\nkernel = 3\n'


@pytest.mark.parametrize(("extra", "field", "says"), [
    ('memory_format = "channel_last"\n', "memory_format", "did you mean channels_last?"),
    ("benchmrk = true\n", "benchmrk", "did you mean benchmark?"),
    ("groups = 3\n", "groups", "does not divide"),
    ('dtype = "half"\n', "dtype", "expected one of float32, float16, bfloat16, float64"),
    ("stride = [1, 2, 3]\n", "stride", "one per spatial dimension"),
    ("padding = -1\n", "padding", "expected 0 to"),
    ("stride = true\n", "stride", "expected a whole number"),
    ("bias = 1\n", "bias", "expected true or false"),
    ('direction = "bwd"\n', "direction", "expected one of forward"),
    ('layout = "nchw"\n', "layout", "expected one of permuted"),
    ('autocast = "float64"\n', "autocast", "expected float16, bfloat16 or none"),
    ('sources = ["http://example.com"]\n', "sources", "an https URL"),
    ('sources = ["https://a b"]\n', "sources", "an https URL"),
    ("output_padding = 1\n", "output_padding", "transposed ops only"),
    ('memory_format = "channels_last_3d"\n', "memory_format", "another spatial rank"),
    ('autocast = "float16"\ndtype = "float16"\n', "autocast", "float32 inputs"),
    ("dilation = 9\n", "kernel", "the output would be empty"),
    ('via = "jit"\n', "via", "expected one of eager, compile, cuda_graph"),
    ('via = "cuda_graph"\ndirection = "backward"\n', "via", "forward only"),
])
def test_a_bad_field_is_one_line_naming_file_case_and_field(tmp_path: Path, extra: str, field: str,
                                                           says: str) -> None:
    (line,) = problems(tmp_path, "[[case]]\n" + BASE + extra)
    assert line.startswith(f"{tmp_path / 'prod.toml'}: case 1 (a): {field}: "), line
    assert says in line and "\n" not in line


@pytest.mark.parametrize(("text", "says"), [
    ('[[case]]\nop = "conv2d"\n', "name: missing"),
    ('[[case]]\nname = "Big Name"\nop = "conv2d"\ninput = [1, 1, 4, 4]\nout_channels = 1\nkernel = 1\n',
     "name: 'Big Name': use 1 to 64 lower-case"),
    ('[[case]]\nname = "a"\nop = "conv2d"\ninput = [1, 4, 8]\nout_channels = 4\nkernel = 3\n',
     "input: [1, 4, 8]: conv2d takes 4 numbers"),
    ('[[case]]\nname = "a"\nop = "conv4d"\ninput = [1, 4, 8]\nout_channels = 4\nkernel = 3\n', "op: 'conv4d'"),
    ("[[case]]\n" + BASE.replace("[1, 4, 8, 8]", "[1, 4, 2000000000, 2000000000]"), "input: 1600000000"),
    ("[[case]]\n" + BASE + "\n[[case]]\n" + BASE, "the same case as case 1"),
])
def test_whole_case_problems(tmp_path: Path, text: str, says: str) -> None:
    lines = problems(tmp_path, text)
    assert any(says in line for line in lines), lines


@pytest.mark.parametrize(("text", "says"), [
    ("", "no [[case]] tables"),
    ("[case]\nname = 1\n", "no [[case]] tables"),
    ("cases = []\n", "cases: unknown top-level key (did you mean case?)"),
    ("[[case]\n", "not valid TOML"),
])
def test_file_problems(tmp_path: Path, text: str, says: str) -> None:
    lines = problems(tmp_path, text)
    assert any(says in line for line in lines), lines


def test_every_problem_of_a_file_is_said_not_only_the_first(tmp_path: Path) -> None:
    text = "\n".join("[[case]]\n" + BASE.replace('"a"', f'"{n}"') + "groups = 3\n" for n in ("a", "b", "c"))
    lines = problems(tmp_path, text)
    assert [line.split(": ")[1] for line in lines] == ["case 1 (a)", "case 2 (b)", "case 3 (c)"]


def test_untrusted_text_stays_one_printable_line(tmp_path: Path) -> None:
    text = '[[case]]\nname = "a"\n"\\u001b[31mevil\\u2028x" = 1\n'
    line, *missing = problems(tmp_path, text)  # the bad key, then each required field missing
    assert line.isprintable() and "\x1b" not in line and "\\x1b" in line
    assert all(": missing (required" in other for other in missing)


def test_a_huge_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, "# " + "x" * (casefile.MAX_FILE_BYTES + 10) + "\n")
    assert "MiB" in line


def test_two_files_of_one_stem_and_an_id_the_catalog_has_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = write(tmp_path / "a", "[[case]]\n" + BASE, "prod.toml")
    two = write(tmp_path / "b", "[[case]]\n" + BASE, "prod.json")
    with pytest.raises(casefile.CaseFileError) as caught:
        casefile.load([str(one), str(two)], catalog.Case)
    assert "the same name as" in caught.value.lines[0]
    (case,) = casefile.load([str(one)], catalog.Case)
    with pytest.raises(casefile.CaseFileError, match="is taken"):
        casefile.load([str(one)], catalog.Case, taken=[case.id])


def test_a_file_name_that_cannot_prefix_an_id_is_refused(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, "[[case]]\n" + BASE, name="-bad name.toml")
    assert "id prefix" in line


@pytest.mark.parametrize("direction", ["backward_input", "backward_weight", "double_backward"])
def test_directions_size_and_scale_like_backward(tmp_path: Path, direction: str) -> None:
    text = "[[case]]\n" + BASE.replace("[1, 4, 8, 8]", "[8, 512, 256, 256]").replace("= 4\n", "= 512\n")
    forward, = casefile.load([str(write(tmp_path, text))], catalog.Case)
    (case,) = casefile.load([str(write(tmp_path, text + f'direction = "{direction}"\n'))], catalog.Case)
    assert case.backward and sizing.need_bytes(case) > sizing.need_bytes(forward)
    small: Any = sizing.scaled(case)
    assert small is not case and small.kind == direction and sizing.fits_cpu(small)


def test_every_bad_field_of_a_case_is_said_at_once(tmp_path: Path) -> None:
    lines = problems(tmp_path, "[[case]]\n" + BASE + 'dtype = "half"\nbias = 1\nbenchmrk = true\nstride = 0\n')
    where = f"{tmp_path / 'prod.toml'}: case 1 (a): "
    assert all(line.startswith(where) for line in lines), lines
    assert sorted(line[len(where):].split(":")[0] for line in lines) == ["benchmrk", "bias", "dtype", "stride"]


def test_a_case_missing_two_fields_names_both(tmp_path: Path) -> None:
    lines = problems(tmp_path, '[[case]]\nname = "a"\nop = "conv2d"\ninput = [1, 4, 8, 8]\n')
    assert [line.split(": ")[2] for line in lines] == ["out_channels", "kernel"]


@pytest.mark.parametrize("name", ["dilated-det", "a-b-c", "x_1-y"])
def test_a_name_may_hold_hyphens_as_the_catalogs_ids_do(tmp_path: Path, name: str) -> None:
    (case,) = casefile.load([str(write(tmp_path, "[[case]]\n" + BASE.replace('"a"', f'"{name}"')))], catalog.Case)
    assert case.tag == name and case.id == f"prod-conv2d-fp32-k3-{name}"


@pytest.mark.parametrize("name", ["-a", "a-", "a--b", "A-b", "a b"])
def test_a_hyphen_joins_words_only(tmp_path: Path, name: str) -> None:
    (line,) = problems(tmp_path, "[[case]]\n" + BASE.replace('"a"', f'"{name}"'))
    assert ": name: " in line and "single hyphens" in line


def test_an_id_over_the_bound_is_refused_where_it_is_made(tmp_path: Path) -> None:
    stem, name = "s" * 64, "n" * 64  # each within its own bound; the id they make is not
    more = 'padding = 1\ndtype = "float16"\nmemory_format = "channels_last"\ndirection = "backward"\nbias = false\n'
    (line,) = problems(tmp_path, "[[case]]\n" + BASE.replace('"a"', f'"{name}"') + more, name=f"{stem}.toml")
    assert line.startswith(f"{tmp_path / stem}.toml: case 1 ({name}): name: the id ") and "over 160" in line
    (short,) = casefile.load([str(write(tmp_path, "[[case]]\n" + BASE.replace('"a"', f'"{name[:40]}"') + more,
                                        f"{stem}.toml"))], catalog.Case)
    assert len(short.id) <= casefile.MAX_ID


def test_the_id_bound_is_the_records_one() -> None:
    records = load_suite_module("records")
    assert records.CASE_ID.fullmatch("a" * casefile.MAX_ID) and not records.CASE_ID.fullmatch("a" * (casefile.MAX_ID + 1))


def test_a_gpu_only_user_case_that_forces_benchmark_says_so_when_skipped(tmp_path: Path) -> None:
    (case,) = casefile.load([str(write(tmp_path, "[[case]]\n" + BASE + "benchmark = true\ngpu_only = true\n"))],
                            catalog.Case)
    assert case.needs_gpu
    assert case.gpu_reason == ("its case file (prod) marks it gpu_only and forces cudnn.benchmark, which picks "
                               "among cuDNN's algorithms")
    (plain,) = casefile.load([str(write(tmp_path, "[[case]]\n" + BASE + "gpu_only = true\n"))], catalog.Case)
    assert plain.gpu_reason == "its case file (prod) marks it gpu_only"


# --- [case.sweep] (issue 39) ----------------------------------------------------------------------

SWEEP = "[[case]]\n" + BASE + '[case.sweep]\nbatch = [31, 32]\nkernel = [1, 3]\ndtype = ["float32", "bfloat16"]\n'


def test_a_2x2x2_sweep_is_8_cases_of_distinct_ids(tmp_path: Path) -> None:
    cases = casefile.load([str(write(tmp_path, SWEEP))], catalog.Case)
    assert len(cases) == 8 and len({case.id for case in cases}) == 8
    assert [(c.n, c.kernel, c.dtype) for c in cases] == [
        (n, k, d) for n in (31, 32) for k in (1, 3) for d in ("float32", "bfloat16")]
    assert cases[-1].id == "prod-conv2d-bf16-k3-a-batch32-kernel3-dtype_bfloat16"
    assert all(c.c_in == 4 and c.size == (8, 8) and c.tag.startswith("a-batch") for c in cases)


def test_a_sweep_reads_the_same_from_json(tmp_path: Path) -> None:
    data = {"case": [{"name": "a", "op": "conv1d", "input": [2, 4, 16], "out_channels": 4, "kernel": 3,
                      "sweep": {"padding": [0, 1], "bias": [True, False], "stride": [[1], [2]]}}]}
    cases = casefile.load([str(write(tmp_path, json.dumps(data), "prod.json"))], catalog.Case)
    assert len(cases) == 8 and {c.tag for c in cases} >= {"a-padding0-bias_on-stride1", "a-padding1-bias_off-stride2"}


def test_a_sweep_past_its_bound_is_one_line(tmp_path: Path) -> None:
    values = list(range(1, casefile.MAX_SWEEP + 2))
    (line,) = problems(tmp_path, "[[case]]\n" + BASE + f"[case.sweep]\nout_channels = {values}\n")
    assert line == (f"{tmp_path / 'prod.toml'}: case 1 (a): sweep: {casefile.MAX_SWEEP + 1} = "
                    f"{casefile.MAX_SWEEP + 1} cases, at most {casefile.MAX_SWEEP} a [[case]] table")


def test_sweeps_past_the_files_bound_are_refused_before_their_cases_are_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """h39: 3,000 tables of 256 each were made (768,000 cases, a minute) before one count refused
    them; the count now stops at the table that passes MAX_CASES."""
    monkeypatch.setattr(casefile, "MAX_CASES", 100)
    made: list[Any] = []

    def counted(**fields: Any) -> Any:
        made.append(catalog.Case(**fields))
        return made[-1]

    table = "[[case]]\n" + BASE + f"[case.sweep]\nbatch = {list(range(1, 51))}\n"
    tables = "".join(table.replace('name = "a"', f'name = "t{i}"') for i in range(5))
    with pytest.raises(casefile.CaseFileError) as caught:
        casefile.load([str(write(tmp_path, tables))], counted)
    assert caught.value.lines == [f"{tmp_path / 'prod.toml'}: case 3 (t2): sweep: the file's cases pass 100 here, "
                                  "once swept (at most 100 a file)"]
    assert len(made) <= 100


@pytest.mark.parametrize(("sweep", "says"), [
    ("kernal = [1, 3]\n", "sweep.kernal: not a field a sweep takes (did you mean kernel?)"),
    ("name = [\"b\"]\n", "sweep.name: not a field a sweep takes"),
    ("n = [31, 32]\n", "sweep.n: not a field a sweep takes (did you mean batch?)"),
    ("kernel = 3\n", "sweep.kernel: 3: expected a list of values"),
    ("kernel = []\n", "sweep.kernel: []: expected a list of values"),
    ("batch = [1]\ninput = [[1, 4, 8, 8]]\n", "sweep.batch: sweep the input's shape or its batch, not both"),
])
def test_a_bad_sweep_names_its_field(tmp_path: Path, sweep: str, says: str) -> None:
    lines = problems(tmp_path, "[[case]]\n" + BASE + "[case.sweep]\n" + sweep)
    assert any(line.startswith(f"{tmp_path / 'prod.toml'}: case 1 (a): {says}") for line in lines), lines


def test_a_bad_swept_value_is_said_once_and_a_bad_combination_names_its_point(tmp_path: Path) -> None:
    lines = problems(tmp_path, "[[case]]\n" + BASE + '[case.sweep]\ndtype = ["half", "float32"]\nbias = [true, false]\n')
    assert lines == [f"{tmp_path / 'prod.toml'}: case 1 (a): dtype: 'half': expected one of float32, float16, bfloat16, float64"]
    (line,) = problems(tmp_path, "[[case]]\n" + BASE + "[case.sweep]\ngroups = [2, 3]\n")
    assert line.startswith(f"{tmp_path / 'prod.toml'}: case 1 (a), sweep groups=3: groups: 3 does not divide")


def test_a_swept_id_over_the_bound_is_refused(tmp_path: Path) -> None:
    # The table's name and the file's are each within their bounds, and the unswept id too (144
    # characters); the words the sweep adds take each case past 160.
    text = "[[case]]\n" + BASE.replace('"a"', f'"{"n" * 64}"') + '[case.sweep]\nbatch = [1, 2]\ndtype = ["float16", "bfloat16"]\n'
    lines = problems(tmp_path, text, name=f"{'s' * 64}.toml")
    assert len(lines) == 4 and all("over 160" in line and ", sweep batch=" in line for line in lines)


def test_repeated_swept_values_are_the_same_case(tmp_path: Path) -> None:
    (line,) = problems(tmp_path, "[[case]]\n" + BASE + "[case.sweep]\nkernel = [3, 3]\n")
    assert "sweep kernel=3: name: the same case as case 1, sweep kernel=3" in line


# --- issue 39: any view (input_strides, storage_offset, weight_memory_format) ----------------------
VIEWS = """
[[case]]
name = "pytorch3512"
op = "conv_transpose1d"
input = [1, 1024, 1]
out_channels = 1
kernel = 1
input_strides = [1024, 1, 1]

[[case]]
name = "nhwc_in_nchw_weight"
op = "conv2d"
input = [2, 8, 6, 6]
out_channels = 4
kernel = 3
memory_format = "channels_last"
weight_memory_format = "contiguous"

[[case]]
name = "offset"
op = "conv2d"
input = [2, 8, 6, 6]
out_channels = 4
kernel = 3
input_strides = [576, 1, 96, 16]
storage_offset = 3
"""
VIEW = 'name = "v"\nop = "conv2d"\ninput = [2, 8, 6, 6]\nout_channels = 4\nkernel = 3\n'


def test_a_case_may_give_its_views_strides_offset_and_weight_format(tmp_path: Path) -> None:
    """Issue 39: the transposed (1, 1024, 1) view was refused ('a transposed layout needs a batch and
    channels of 2 or more'), and a channels_last input could not have an NCHW weight."""
    one, two, three = casefile.load([str(write(tmp_path, VIEWS))], catalog.Case)
    assert (one.input_strides, one.storage_offset, one.id) == (
        (1024, 1, 1), 0, "prod-conv_transpose1d-fp32-k1-view1024x1x1-pytorch3512")
    assert (two.memory_format, two.weight_memory_format) == ("channels_last", "contiguous")
    assert two.id == "prod-conv2d-fp32-k3-channels_last-weight_contiguous-nhwc_in_nchw_weight"
    assert (three.input_strides, three.storage_offset) == ((576, 1, 96, 16), 3) and "-offset3-" in three.id
    assert three.view_extent == 3 + 576 + 7 + 5 * 96 + 5 * 16 + 1  # the buffer the view reaches
    assert sizing.need_bytes(three) > sizing.need_bytes(dataclasses.replace(three, input_strides=None,
                                                                            storage_offset=0))


@pytest.mark.parametrize(("fields", "says"), [
    ("input_strides = [288, -1, 48, 8]", "input_strides: [288, -1, 48, 8]: a negative stride is no view"),
    ("input_strides = [288, 1, 48]", "input_strides: [288, 1, 48]: expected 4 numbers, one per dimension"),
    ("input_strides = [0, 1, 48, 8]", "input_strides: [0, 1, 48, 8]: the view of [2, 8, 6, 6] overlaps itself"),
    ("input_strides = [288, 1, 8, 8]", "input_strides: [288, 1, 8, 8]: the view of [2, 8, 6, 6] overlaps itself"),
    ("input_strides = [1099511627776, 1099511627776, 1099511627776, 1099511627776]",
     "input_strides: the view reaches 19791209299969 elements of its buffer, over 2^44"),
    ('input_strides = [288, 1, 48, 8]\nlayout = "permuted"', "input_strides: give a layout or the view's strides"),
    ('input_strides = [288, 1, 48, 8]\nmemory_format = "channels_last"',
     "input_strides: the strides say how the input lies; memory_format would rewrite them"),
    ("storage_offset = 3", "storage_offset: goes with input_strides"),
    ("input_strides = [288, 1, 48, 8]\nstorage_offset = -1", "storage_offset: -1: expected 0 to 2^40"),
    ('weight_memory_format = "channels_last_3d"', "weight_memory_format: channels_last_3d needs another spatial"),
    ('weight_memory_format = "nchw"', "weight_memory_format: 'nchw': expected one of contiguous"),
])
def test_a_bad_view_is_one_line_naming_the_file_the_case_and_the_field(tmp_path: Path, fields: str,
                                                                       says: str) -> None:
    found = problems(tmp_path, f"[[case]]\n{VIEW}{fields}\n")
    assert len(found) == 1 and found[0].startswith(f"{tmp_path / 'prod.toml'}: case 1 (v): {says}"), found


def test_an_interleaved_view_is_no_overlap_and_the_buffer_bound_is_the_catalogs() -> None:
    # (3, 2) with strides (2, 3) reaches 0 3 2 5 4 7: interleaved, no element twice.
    assert not catalog.view_overlaps((3, 2), (2, 3)) and catalog.view_overlaps((3, 2), (1, 2))
    assert not catalog.view_overlaps((1, 5), (0, 1)) and catalog.view_overlaps((2, 5), (0, 1))
    for shape, strides, offset in (((1, 1024, 1), (1024, 1, 1), 0), ((2, 8, 6, 6), (576, 1, 96, 16), 3)):
        assert casefile.view_extent(shape, strides, offset) == catalog.view_extent(shape, strides, offset)


def test_a_view_can_be_swept(tmp_path: Path) -> None:
    text = f"[[case]]\n{VIEW}[case.sweep]\ninput_strides = [[288, 1, 48, 8], [288, 36, 6, 1]]\n"
    cases = casefile.load([str(write(tmp_path, text))], catalog.Case)
    assert [c.input_strides for c in cases] == [(288, 1, 48, 8), (288, 36, 6, 1)]
    assert cases[0].id.endswith("-v-input_strides288x1x48x8")


# --- issue 50: float64 and a view of the weight ---

WEIGHT_VIEW = ('[[case]]\nname = "shard"\nop = "conv2d"\ninput = [2, 8, 6, 6]\nout_channels = 4\nkernel = 3\n'
               'dtype = "float64"\nweight_strides = [1, 4, 96, 32]\nweight_storage_offset = 4100\n')


def test_a_case_may_be_float64_and_give_its_weights_view(tmp_path: Path) -> None:
    (case,) = casefile.load([str(write(tmp_path, WEIGHT_VIEW))], catalog.Case)
    assert (case.dtype, case.weight_strides, case.weight_storage_offset) == ("float64", (1, 4, 96, 32), 4100)
    assert case.id == "prod-conv2d-fp64-k3-wview1x4x96x32-woffset4100-shard"
    # The buffer the weight's view reaches is sized with the case: 8 bytes an element in float64.
    assert case.weight_view_extent == 4100 + 3 * 1 + 7 * 4 + 2 * 96 + 2 * 32 + 1
    plain = dataclasses.replace(case, weight_strides=None, weight_storage_offset=0)
    assert sizing.need_bytes(case) - sizing.need_bytes(plain) == int(case.weight_view_extent * 8 * 1.25)


@pytest.mark.parametrize(("fields", "says"), [
    ("weight_strides = [1, 4, 96]", "weight_strides: [1, 4, 96]: expected 4 numbers, one per dimension of the weight"),
    ("weight_strides = [1, -4, 96, 32]", "weight_strides: [1, -4, 96, 32]: a negative stride is no view"),
    ("weight_strides = [1, 1, 96, 32]", "weight_strides: [1, 1, 96, 32]: the view of [4, 8, 3, 3] overlaps itself"),
    ("weight_storage_offset = 3", "weight_storage_offset: goes with weight_strides"),
    ("weight_strides = [72, 9, 3, 1]\nweight_storage_offset = -1", "weight_storage_offset: -1: expected 0 to 2^40"),
    ('weight_strides = [72, 9, 3, 1]\nweight_memory_format = "channels_last"',
     "weight_strides: the strides say how the weight lies; weight_memory_format would rewrite them"),
    ('weight_strides = [72, 9, 3, 1]\nmemory_format = "channels_last"',
     "weight_strides: a memory_format rewrites the weight's strides too"),
    ('dtype = "float128"', "dtype: 'float128': expected one of float32, float16, bfloat16, float64"),
])
def test_a_bad_weight_view_or_dtype_is_one_line_naming_the_field(tmp_path: Path, fields: str, says: str) -> None:
    found = problems(tmp_path, f"[[case]]\n{VIEW}{fields}\n")
    assert len(found) == 1 and found[0].startswith(f"{tmp_path / 'prod.toml'}: case 1 (v): {says}"), found


def test_a_weight_view_past_2_44_elements_is_refused(tmp_path: Path) -> None:
    text = ('[[case]]\nname = "v"\nop = "conv2d"\ninput = [2, 8, 6, 6]\nout_channels = 64\nkernel = 3\n'
            "weight_strides = [1099511627776, 9, 3, 1]\n")
    assert problems(tmp_path, text) == [f"{tmp_path / 'prod.toml'}: case 1 (v): weight_strides: the view reaches "
                                        f"{63 * 2**40 + 7 * 9 + 2 * 3 + 2 + 1} elements of its buffer, over 2^44: "
                                        "no GPU holds it"]


def test_a_weight_view_and_float64_can_be_swept(tmp_path: Path) -> None:
    text = f"[[case]]\n{VIEW}[case.sweep]\nweight_strides = [[72, 9, 3, 1], [1, 4, 96, 32]]\ndtype = [\"float64\"]\n"
    cases = casefile.load([str(write(tmp_path, text))], catalog.Case)
    assert [(c.weight_strides, c.dtype) for c in cases] == [((72, 9, 3, 1), "float64"), ((1, 4, 96, 32), "float64")]


# --- issue 50: the provenance table ---

PROVENANCE = {"package": "diffusers", "version": "0.42.1", "model": "diffusers:AutoencoderKL",
              "inputs": [{"shape": [1, 3, 1024, 1024], "dtype": "float16"}], "dtype": "float16",
              "config": {"latent_channels": 4}, "backward": False, "torch": "2.14.1",
              "matched": [{"name": "autoencoderkl_1", "catalog": "conv2d-fp16-k3-p1-vae_decoder-mid_512"}]}
ONE_CASE = {"name": "a", "op": "conv2d", "input": [1, 4, 8, 8], "out_channels": 4, "kernel": 3}


def test_a_provenance_table_is_read_and_changes_no_case(tmp_path: Path) -> None:
    with_it = write(tmp_path, json.dumps({"provenance": PROVENANCE, "case": [ONE_CASE]}), "vae.json")
    (case,) = casefile.load([str(with_it)], catalog.Case)
    (tmp_path / "plain").mkdir()
    plain = write(tmp_path / "plain", json.dumps({"case": [ONE_CASE]}), "vae.json")
    assert casefile.load([str(plain)], catalog.Case) == [case]


@pytest.mark.parametrize(("change", "says"), [
    ({"package": ""}, "provenance.package: '': expected a text of 1 to 2000 characters"),
    ({"dtype": "fp16"}, "provenance.dtype: 'fp16': expected one of float32, float16, bfloat16, float64"),
    ({"inputs": [{"shape": [1, 0], "dtype": "float16"}]}, "provenance.inputs[1]: "),
    ({"inputs": [{"shape": [2], "dtype": "int8"}]}, "provenance.inputs[1]: "),
    ({"config": [1]}, "provenance.config: [1]: expected a table (the model's config)"),
    ({"backward": "yes"}, "provenance.backward: 'yes': expected true or false"),
    ({"matched": [{"name": "a"}]}, "provenance.matched: expected a list of {name, catalog} tables"),
    ({"versoin": "1"}, "provenance.versoin: unknown key (did you mean version?)"),
])
def test_a_bad_provenance_field_is_one_line_naming_it(tmp_path: Path, change: dict[str, Any], says: str) -> None:
    found = problems(tmp_path, json.dumps({"provenance": {**PROVENANCE, **change}, "case": [ONE_CASE]}), "vae.json")
    assert len(found) == 1 and found[0].startswith(f"{tmp_path / 'vae.json'}: {says}"), found


def test_a_provenance_without_its_required_fields_names_each(tmp_path: Path) -> None:
    found = problems(tmp_path, json.dumps({"provenance": {"package": "timm"}, "case": [ONE_CASE]}), "x.json")
    assert [line.split(": ", 1)[1].split(":")[0] for line in found] == [
        "provenance.version", "provenance.model", "provenance.inputs", "provenance.dtype"]


@given(table=strategies.hostile_provenance())
def test_any_provenance_table_gets_its_problems_as_short_lines_never_an_exception(table: Any) -> None:
    found = casefile.provenance_problems(table)
    assert all(line.startswith((".", ":")) and "\n" not in line and len(line) <= 400 for line in found), found
    assert all(line.isprintable() for line in found), found
    # A table of the valid fields alone, whatever else it holds, has no problem with them.
    if isinstance(table, dict) and not found:
        assert set(table) <= set(casefile.PROVENANCE_KEYS)
