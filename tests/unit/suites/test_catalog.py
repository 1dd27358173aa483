"""The suite's catalog as data: ids derived from the fields, trigger families with public sources,
sizing and scaled CPU variants (suites/catalog.py, suites/sizing.py), and the suite's forced
settings and channel padding, called in process."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import strategies
from catalogkit import TRIGGER_FAMILIES, catalog, load_test_conv, past_int32, sizing


def test_ids_are_derived_from_the_fields() -> None:
    for case in catalog.CASES:
        fields: dict[str, Any] = {key: tuple(value) if isinstance(value, list) else value
                                  for key, value in case.params().items()}
        rebuilt = catalog.Case(**fields)
        assert rebuilt.id == case.id
        # Why a case exists and where it comes from is not part of what it is.
        assert dataclasses.replace(case, source="elsewhere").id == case.id


def test_2g_selects_every_int32_trigger() -> None:
    int32 = [c for c in catalog.CASES if c.trigger in ("int32_split_batch", "int32_no_split") and c.edge != "below"]
    assert len(int32) >= 4 and all(past_int32(c) and c.over_int32 for c in int32)
    assert all(c.over_int32 == past_int32(c) for c in catalog.CASES)
    assert all(("over2g" in c.id) == c.over_int32 for c in catalog.CASES)
    assert all(("2g" in c.id) == (c.over_int32 or c.edge == "below") for c in catalog.CASES)


def test_every_trigger_family_has_cases_with_public_sources() -> None:
    by_family: dict[str, list[catalog.Case]] = {}
    for case in catalog.CASES:
        if case.trigger is not None:
            by_family.setdefault(case.trigger, []).append(case)
    assert set(by_family) == TRIGGER_FAMILIES == set(catalog.TRIGGERS)
    for family, cases in by_family.items():
        for case in cases:
            assert case.sources, case.id
            for url in case.sources:  # a GitHub issue or PR, or cuDNN's own release notes
                assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+", url) or \
                    re.fullmatch(r"https://docs\.nvidia\.com/deeplearning/cudnn/[\w./-]+\.html", url), url
        print(f"{family}: {len(cases)} cases, sources {sorted({u for c in cases for u in c.sources})}")


def test_trigger_families_cover_what_they_name() -> None:
    cases = {family: [c for c in catalog.CASES if c.trigger == family] for family in TRIGGER_FAMILIES}
    limit = 2**31

    def elements(case: catalog.Case) -> int:
        return max(sizing.numel(shape) for shape in sizing.shapes(case).values())

    assert any(elements(c) > limit and c.n > 1 for c in cases["int32_split_batch"])
    assert any(elements(c) > limit and c.n == 1 and c.depthwise for c in cases["int32_no_split"])
    assert {c.backward for c in cases["large_3d"]} == {True, False}
    assert {c.backward for c in cases["large_transposed_3d"]} == {True, False}
    assert {c.layout for c in cases["non_contiguous"]} == {"permuted", "transposed", "sliced", "nhwc_strided"}
    odd = cases["channels_last_odd"]
    assert all(c.memory_format == "channels_last" for c in odd)
    assert any(c.c_in % 8 and c.groups == 1 for c in odd) and any(c.groups > 1 for c in odd)
    assert {c.dtype for c in cases["half_pre_sm80"]} == {"float16", "bfloat16"}
    assert all(c.needs_gpu for c in cases["half_pre_sm80"] + cases["tf32"])
    assert all(c.deterministic and c.dilation != 1 for c in cases["dilation_deterministic"])
    assert {c.tf32 for c in cases["tf32"]} == {True, False}
    assert {c.benchmark for c in cases["cudnn_benchmark"]} == {True, False}
    assert {c.autocast for c in cases["autocast"]} == {"float16", "bfloat16"}
    assert all(c.backward for c in cases["backward_input_weight"])
    assert all(sizing.is_large(c) for c in cases["int32_split_batch"] + cases["int32_no_split"])
    # Issue 22's classes: each names what it is about.
    assert {c.op for c in cases["int32_other_ops"] if c.over_int32} >= {"conv3d", "conv1d", "conv_transpose2d",
                                                                        "conv_transpose3d"}
    assert any(c.n > 1024 for c in cases["large_batch"])
    assert any(c.n > 65535 and max(c.expand(c.stride)) > 1 and c.kind == "backward_input"
               for c in cases["large_batch"])
    assert all(c.autocast == "float16" and c.c_out % 8 for c in cases["autocast_out_not_mult8"])
    assert all(c.groups > 1 and not c.depthwise and c.dilation != 1 for c in cases["dilated_grouped"])
    assert all(c.kind == "double_backward" for c in cases["double_backward"])
    assert all(c.via == "compile" for c in cases["inductor"]) and all(
        c.via == "cuda_graph" and c.needs_gpu for c in cases["graph_capture"])
    benchmark_odd = [c for c in cases["cudnn_benchmark"] if c.memory_format == "channels_last" and c.c_in % 8]
    assert benchmark_odd and all(c.benchmark for c in benchmark_odd)
    layouts = [c for c in cases["non_contiguous"] if c.layout == "nhwc_strided"]
    assert layouts and any(c.transposed for c in cases["non_contiguous"] if c.layout is not None)


def test_every_workload_family_has_bf16_beside_fp16_and_benchmark_twins() -> None:
    workloads = [c for c in catalog.CASES if c.workload]
    for name in catalog.WORKLOADS:
        mine = [c for c in workloads if c.workload == name]
        assert {"float16", "bfloat16"} <= {c.dtype for c in mine}, name
    by_id = {c.id for c in workloads}
    for case in workloads:
        if case.benchmark is None:  # the plain case: its benchmark-on twin is in the catalog, GPU only
            twin = dataclasses.replace(case, benchmark=True, gpu_only=True)
            assert twin.id in by_id and twin.needs_gpu, case.id
    video = [c for c in workloads if c.workload == "video_temporal" and c.dtype == "bfloat16"
             and c.memory_format == "channels_last_3d" and c.benchmark is None]
    assert video and max(sizing.need_mb(c) for c in video) > 4096  # production sizes, not toy ones


def test_need_mb_counts_tensors_grads_and_workspace() -> None:
    case = catalog.Case("conv2d", 2, 8, 16, (10, 10), 3, padding=1, source="x")
    elements = 2 * 8 * 100 + 16 * 8 * 9 + 16 + 2 * 16 * 100
    assert sizing.need_bytes(case) == int(elements * 4 * 1.25) + 256 * 2**20
    backward = catalog.Case("conv2d", 2, 8, 16, (10, 10), 3, padding=1, backward=True, source="x")
    assert sizing.need_bytes(backward) == int(elements * 4 * 2 * 1.25) + 256 * 2**20
    big = next(c for c in catalog.CASES if c.id == "conv2d-fp16-k3-p1-vae_decoder-out2048_128")
    assert 2048 < sizing.need_mb(big) < 4096  # two 1 GiB fp16 activations, plus margins


def test_scaled_variants_keep_the_case_and_fit_the_cpu() -> None:
    for case in catalog.CASES:
        small = sizing.scaled(case)
        assert sizing.fits_cpu(small), case.id
        if small is case:
            continue
        for field in ("op", "dtype", "autocast", "memory_format", "layout", "backward", "kernel",
                      "stride", "padding", "dilation", "output_padding", "benchmark",
                      "deterministic", "tf32", "trigger", "workload"):
            assert getattr(small, field) == getattr(case, field), (case.id, field)
        assert small.depthwise == case.depthwise, case.id
        assert (small.groups > 1) == (case.groups > 1), case.id
        assert (small.c_in % 8 == 0) == (case.c_in % 8 == 0), case.id
        assert all(o >= 1 for o in sizing.output_size(small)), case.id
    assert all(sizing.scaled(c) is not c for c in catalog.CASES if sizing.is_large(c))


# --- the reference on a slice ----------------------------------------------------------------

@pytest.fixture(scope="module")
def suite(pytestconfig: pytest.Config) -> Any:
    return load_test_conv(pytestconfig)


def test_forced_settings_are_restored(suite: Any) -> None:
    import torch

    cudnn = torch.backends.cudnn
    before = (cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32)
    case = catalog.Case("conv2d", 1, 1, 1, (4, 4), 3, benchmark=not before[0],
                        deterministic=not before[1], tf32=not before[2], source="x")
    with suite.forced_settings(case):
        assert (cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32) == tuple(
            not value for value in before)
    assert (cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32) == before
    with pytest.raises(ValueError, match="boom"), suite.forced_settings(case):
        raise ValueError("boom")
    assert (cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32) == before


def test_pad_plan_keeps_depthwise_and_pads_groups_alike(suite: Any) -> None:
    def plan(c_in: int, c_out: int, groups: int) -> Any:
        return suite.pad_plan(catalog.Case("conv2d", 1, c_in, c_out, (4, 4), 1, groups=groups,
                                           source="x"), 8)

    assert plan(3, 20, 1) == (1, 3, 20, 8, 24)
    assert plan(6, 12, 6) == (8, 1, 2, 1, 2)  # depthwise: more groups, still depthwise
    assert plan(30, 30, 3) == (3, 10, 10, 16, 16)  # every group padded alike to 48 in all
    assert plan(16, 16, 1) is None
    assert plan(16, 16, 16) is None


# --- issue 39: the catalogue's cases past 2^31 elements come with their boundary pairs ------------
def test_each_case_past_2g_is_followed_by_its_pair_below_and_above() -> None:
    """The pairs come after their case, with ids derived from it (`below2g`, `above2g`); the ids
    of the catalogue before the pairs (keys of results and history) are all there, in order."""
    unpaired = catalog.BASE_CASES + catalog.TRIGGER_CASES + catalog.WORKLOAD_CASES
    assert [c.id for c in catalog.CASES if c.edge is None] == [c.id for c in unpaired]
    limit = 2**31 - 1
    pairs = 0
    for index, case in enumerate(catalog.CASES):
        if case.edge is not None or not case.over_int32:
            continue
        if max(sizing.numel(shape) for shape in (case.shapes()["weight"],)) > limit:  # no batch or extent helps
            assert catalog.CASES[index + 1].edge is None, case.id
            continue
        below, above = catalog.CASES[index + 1:index + 3]
        assert (below.edge, above.edge) == ("below", "above")
        assert not below.over_int32 and above.over_int32
        assert (below.op, below.dtype, below.kernel, below.groups, below.kind, below.trigger, below.workload) == (
            case.op, case.dtype, case.kernel, case.groups, case.kind, case.trigger, case.workload)
        assert below.id == case.id.replace("-over2g-", "-below2g-")
        assert above.id == case.id.replace("-over2g-", "-over2g-above2g-")
        assert max(len(c.id) for c in (below, above)) <= 160
        # Scaled down to the CPU's size a pair repeats its case's twin: it runs on a GPU only.
        assert below.needs_gpu and above.needs_gpu and "2^31 boundary pair" in below.gpu_reason
        pairs += 1
    assert pairs == 12 and len(catalog.CASES) == len(unpaired) + 2 * pairs


# --- issue 39: any view ------------------------------------------------------------------------
def test_restride_keeps_the_order_the_gaps_and_the_size_1_strides_of_a_view() -> None:
    # A (1, 1, 1024) tensor transposed to (1, 1024, 1), as PyTorch strides it and as a report writes it.
    assert catalog.restride((1, 1024, 1), (1024, 1, 1024), (1, 16, 1)) == (16, 1, 16)
    assert catalog.restride((1, 1024, 1), (1024, 1, 1), (1, 16, 1)) == (16, 1, 1)
    # x.permute(0, 3, 1, 2) of an (N, H, W, C) tensor: channels last, for any shape.
    assert catalog.restride((2, 8, 6, 6), (288, 1, 48, 8), (2, 4, 3, 3)) == (36, 1, 12, 4)
    # Every other element of a buffer twice as wide: still twice as wide; a broadcast stays 0.
    assert catalog.restride((2, 8, 6, 6), (576, 72, 12, 2), (2, 4, 3, 3)) == (72, 18, 6, 2)
    assert catalog.restride((1, 8, 6), (0, 6, 1), (1, 4, 3)) == (0, 3, 1)
    # Unchanged shape, unchanged strides; a gap past most_gap is cut to it.
    assert catalog.restride((2, 8, 6, 6), (2304, 1, 384, 64), (2, 8, 6, 6)) == (2304, 1, 384, 64)
    assert catalog.restride((2, 8, 6, 6), (288 * 1024, 1, 48, 8), (2, 8, 6, 6), most_gap=4) == (288 * 4, 1, 48, 8)


def test_the_cpu_scaling_keeps_a_cases_view() -> None:
    case = catalog.Case("conv2d", 16, 256, 256, (64, 64), 3, padding=1, dtype="bfloat16", source="test",
                        input_strides=(2 * 256 * 64 * 64, 1, 2 * 256 * 64, 2 * 256), storage_offset=12289)
    small = sizing.scaled(case)
    _n, c, h, w = small.shapes()["input"]
    assert small is not case and sizing.fits_cpu(small)
    assert small.input_strides == (2 * c * w * h, 1, 2 * c * w, 2 * c)  # channels last, every other pixel
    assert small.storage_offset == 4096 + 12289 % 4096  # its alignment kept, not its distance
    one = catalog.Case("conv_transpose1d", 1, 1024, 1, 1, 1, source="test", input_strides=(1024, 1, 1))
    assert sizing.scaled(one) is one  # small enough: the CPU runs it as written


def test_a_views_id_names_its_strides_and_the_weights_format() -> None:
    base = catalog.Case("conv2d", 2, 8, 4, (6, 6), 3, source="test")
    assert dataclasses.replace(base, input_strides=(288, 1, 48, 8)).id == "conv2d-fp32-k3-view288x1x48x8"
    assert dataclasses.replace(base, memory_format="channels_last",
                               weight_memory_format="contiguous").id == "conv2d-fp32-k3-channels_last-weight_contiguous"
    # The weight in the input's own format is no other case.
    assert dataclasses.replace(base, weight_memory_format="contiguous") == base
    listed: Any = [288, 1, 48, 8]  # as a JSON case file gives it
    assert dataclasses.replace(base, input_strides=listed).input_strides == (288, 1, 48, 8)


def test_a_view_at_its_own_shape_is_built_as_written(suite: Any) -> None:
    """h39: a row pitch the dimensions before it do not divide (6 wide, rows 7 apart), and an
    interleaving, were made dense even at the case's own shape: the GPU ran another view than the
    case file's (and its id's)."""
    import torch

    pitched = (2 * 8 * 6 * 7, 6 * 7, 7, 1)
    assert catalog.restride((2, 8, 6, 6), pitched, (2, 8, 6, 6)) == pitched
    assert catalog.restride((3, 2, 4), (2, 3, 8), (3, 2, 4)) == (2, 3, 8)
    case = catalog.Case("conv2d", 2, 8, 4, (6, 6), 3, source="test", input_strides=pitched, storage_offset=5)
    x = torch.randn(2, 8, 6, 6)
    built = suite.place_input(case, x, None)  # the suite's own as_strided build
    assert (built.stride(), built.storage_offset()) == (pitched, 5) and torch.equal(built, x)


@pytest.mark.parametrize(("shape", "strides"), [
    ((2, 1, 6, 6), (36, 36, 6, 1)),  # x.unsqueeze(1) of an (N, H, W) tensor: C's stride is N's
    ((2, 1, 6, 6), (36, 0, 6, 1)),  # x.expand of a broadcast channel
])
def test_a_size_1_dimension_that_grows_never_makes_the_view_overlap(shape: tuple[int, ...],
                                                                    strides: tuple[int, ...]) -> None:
    """h39: --pad-channels widens one channel to 8; its stride, shared with the batch's (or 0),
    was kept, and the padded view overlapped itself (the batches' values read as channels)."""
    assert not catalog.view_overlaps(shape, strides)
    made = catalog.restride(shape, strides, (2, 8, 6, 6))
    assert not catalog.view_overlaps((2, 8, 6, 6), made), made
    offsets = _offsets((2, 8, 6, 6), made)
    assert len(set(offsets)) == len(offsets) and made[2:] == (6, 1)


def test_the_cpu_scaling_of_a_view_with_wide_gaps_stays_within_the_cpu_budget() -> None:
    """h39: gaps of 16 at each of a conv3d input's levels, kept at MOST_GAP (4) each when scaled,
    made a 1.6 GiB zeroed buffer on the CPU, whose budget is 32 MiB."""
    case = catalog.Case("conv3d", 2, 240, 240, (24, 24, 24), 12, groups=16, source="test",
                        input_strides=(3397386240, 14155776, 147456, 1536, 16))
    small = sizing.scaled(case)
    assert small.view_extent is not None and small.input_strides is not None
    assert small.view_extent * 4 <= sizing.CPU_BUDGET_MB * sizing.MIB, small.input_strides
    assert sizing.need_bytes(small) - sizing.WORKSPACE_MB * sizing.MIB <= sizing.CPU_BUDGET_MB * sizing.MIB
    made, given = small.input_strides, (3397386240, 14155776, 147456, 1536, 16)
    assert sorted(range(5), key=made.__getitem__) == sorted(range(5), key=given.__getitem__)  # the view's order


def _offsets(shape: tuple[int, ...], strides: tuple[int, ...]) -> list[int]:
    found = [0]
    for size, stride in zip(shape, strides, strict=True):
        found = [base + i * stride for base in found for i in range(size)]
    return found


@given(strategies.views())
def test_a_restrided_view_keeps_its_order_and_never_overlaps(view: strategies.View) -> None:
    """restride of a view laid out in some order: the same strides for the same shape, and for a
    smaller one a view that reaches no element twice, its dimensions over 1 in the same order."""
    assert not catalog.view_overlaps(view.shape, view.strides)
    assert catalog.restride(view.shape, view.strides, view.shape) == view.strides
    made = catalog.restride(view.shape, view.strides, view.smaller)
    offsets = _offsets(view.smaller, made)
    assert len(set(offsets)) == len(offsets)
    assert not catalog.view_overlaps(view.smaller, made)
    assert catalog.view_extent(view.smaller, made) == max(offsets) + 1
    over_1 = [d for d in range(len(made)) if view.shape[d] > 1 and view.smaller[d] > 1]
    assert sorted(over_1, key=lambda d: made[d]) == sorted(over_1, key=lambda d: view.strides[d])


@given(st.lists(st.integers(1, 4), min_size=2, max_size=4).flatmap(
    lambda shape: st.tuples(st.just(tuple(shape)), st.tuples(*(st.integers(0, 12) for _ in shape)))))
def test_view_overlaps_is_the_enumerations_answer(drawn: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    shape, strides = drawn
    offsets = _offsets(shape, strides)
    assert catalog.view_overlaps(shape, strides) == (len(set(offsets)) < len(offsets))


@given(st.integers(2, 4).flatmap(lambda rank: st.tuples(
    st.tuples(*(st.integers(1, 4) for _ in range(rank))), st.tuples(*(st.integers(0, 20) for _ in range(rank))),
    st.tuples(*(st.integers(1, 6) for _ in range(rank))), st.sampled_from((None, 1, 2, 4)))))
def test_a_restrided_view_of_any_new_shape_never_overlaps(
        drawn: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int | None]) -> None:
    """h39: any view that does not overlap, recomputed for any shape (smaller when scaled, wider
    when --pad-channels pads), reaches no element twice."""
    shape, strides, new, most_gap = drawn
    assume(not catalog.view_overlaps(shape, strides))
    offsets = _offsets(new, catalog.restride(shape, strides, new, most_gap))
    assert len(set(offsets)) == len(offsets)


# --- issue 50: a view of the weight, float64 ---

@given(strategies.weight_view_entries())
def test_a_weight_view_scales_down_in_its_order_and_fits_the_cpu(entry: dict[str, Any]) -> None:
    """Any weight view a case file may give: the case holds it as written, and the CPU's
    scaled-down variant keeps the view's order, never overlaps, and fits the CPU's budget."""
    from testkit import load_suite_module

    casefile = load_suite_module("casefile")
    try:
        case = catalog.Case(**casefile.case_fields(entry, "zoo"))
    except (casefile.Bad, ValueError):
        assume(False)
        return
    weight = case.shapes()["weight"]
    assert case.weight_view_strides(weight) == tuple(entry["weight_strides"])
    small = sizing.scaled(case)
    assert sizing.fits_cpu(small) or small is case
    small_weight = small.shapes()["weight"]
    assert small.weight_strides is not None and not catalog.view_overlaps(small_weight, small.weight_strides)
    made = small.weight_strides
    over_1 = [d for d in range(len(weight)) if weight[d] > 1 and small_weight[d] > 1]
    assert (sorted(over_1, key=lambda d: made[d])
            == sorted(over_1, key=lambda d: entry["weight_strides"][d]))
    assert small.dtype == case.dtype and small.id.startswith("zoo-")


def test_float64_and_weight_view_ids_and_sizes() -> None:
    case = catalog.Case("conv2d", 2, 8, 4, (6, 6), 3, source="t", dtype="float64",
                        weight_strides=(1, 4, 96, 32), weight_storage_offset=5)
    assert case.id == "conv2d-fp64-k3-wview1x4x96x32-woffset5"
    assert sizing.BYTES["float64"] == 8
    with pytest.raises(catalog.CaseError, match="weight_storage_offset: goes with weight_strides"):
        catalog.Case("conv2d", 2, 8, 4, (6, 6), 3, source="t", weight_storage_offset=5)


# --- issue 50: the zoo (suites/models/*.json) ---

def _zoo_files() -> dict[str, dict[str, Any]]:
    import json
    from pathlib import Path

    return {path.stem: json.loads(path.read_text(encoding="utf-8"))
            for path in sorted(Path(catalog.MODELS_DIR).glob("*.json"))}


def test_the_zoo_covers_what_the_issue_asks() -> None:
    """At least 12 models from at least 3 packages; conv1d, conv2d, conv3d, transposed and depthwise;
    a conv3d patch embedding with kernel = stride in bf16 and a video VAE's 3D convs."""
    files = _zoo_files()
    assert len(files) >= 12
    assert len({data["provenance"]["package"] for data in files.values()}) >= 3
    zoo = catalog.ZOO_CASES
    assert len(zoo) >= 100 and {case.model for case in zoo} == set(files)
    assert {case.spatial_dims for case in zoo if not case.transposed} == {1, 2, 3}
    assert any(case.transposed for case in zoo) and any(case.depthwise for case in zoo)
    patch = [c for c in zoo if c.model == "qwen2vl_patch"]
    assert any(c.op == "conv3d" and c.kernel == c.stride and c.dtype == "bfloat16" for c in patch)
    assert any(c.op == "conv3d" for c in zoo if c.model == "wan_vae")
    assert all(case.id.startswith(f"{case.model}-") for case in zoo)


def test_no_zoo_case_is_a_catalogue_case_and_each_match_names_one() -> None:
    known = {catalog.identity(case): case.id for case in catalog.CASES}
    assert not [case.id for case in catalog.ZOO_CASES if catalog.identity(case) in known]
    ids = {case.id for case in catalog.CASES}
    for name, data in _zoo_files().items():
        for matched in data["provenance"]["matched"]:
            assert matched["catalog"] in ids, (name, matched)


def test_identity_is_what_reaches_the_convolution() -> None:
    case = catalog.Case("conv2d", 2, 8, 8, (12, 12), 3, padding=1, source="a", tag="x")
    assert catalog.identity(case) == catalog.identity(dataclasses.replace(case, source="b", tag=None, prefix="p",
                                                                          kernel=(3, 3), model="m"))
    assert catalog.identity(case) != catalog.identity(dataclasses.replace(case, dtype="float16"))
    assert catalog.identity(case) != catalog.identity(dataclasses.replace(case, direction="backward"))
    assert catalog.identity(case) != catalog.identity(dataclasses.replace(case, benchmark=True))


def test_the_suite_version_covers_the_zoo(tmp_path: Any) -> None:
    from testkit import load_suite_module

    records = load_suite_module("records")
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.json").write_text("{}")
    before = records.suite_version(str(tmp_path))
    (tmp_path / "models" / "m.json").write_text('{"case": []}')
    assert records.suite_version(str(tmp_path)) != before


def test_on_the_cpu_the_zoo_adds_one_case_per_code_path_the_catalogue_lacks() -> None:
    """The CPU lane's zoo cost, by construction: the zoo cases a CPU runs are exactly one per
    cpu_signature no catalogue CPU case has; every other stands in for by a case of its
    signature that runs there, earlier (the catalogue's first, else the zoo's)."""
    stand_ins = catalog.zoo_cpu_stand_ins()
    by_id = {case.id: case for case in (*catalog.CASES, *catalog.ZOO_CASES)}
    order = list(by_id)
    running = [case for case in catalog.ZOO_CASES if catalog.runs_on_cpu(case) and case.id not in stand_ins]
    catalogue = {catalog.cpu_signature(case) for case in catalog.CASES if catalog.runs_on_cpu(case)}
    new = {catalog.cpu_signature(case) for case in catalog.ZOO_CASES} - catalogue
    assert len(running) == len(new) == len({catalog.cpu_signature(case) for case in running})
    assert len(running) <= 32 < len(catalog.ZOO_CASES)  # 15 of 328 in 2026-12
    for zoo_id, other in stand_ins.items():
        stand_in = by_id[other]
        assert catalog.cpu_signature(stand_in) == catalog.cpu_signature(by_id[zoo_id])
        assert catalog.runs_on_cpu(stand_in) and other not in stand_ins
        assert order.index(other) < order.index(zoo_id)


def test_a_zoo_case_of_a_catalogue_code_path_names_the_catalogue_case() -> None:
    plain = catalog.Case("conv2d", 2, 8, 8, (12, 12), 3, padding=1, source="a")
    gpu = dataclasses.replace(plain, tf32=True)
    zoo = (dataclasses.replace(plain, n=4, kernel=5, prefix="m", model="m"),
           dataclasses.replace(plain, groups=8, c_out=8, prefix="m", model="m"),
           dataclasses.replace(plain, groups=8, c_out=8, size=(20, 20), prefix="m", model="m"),
           dataclasses.replace(plain, dtype="float16", tf32=True, prefix="m", model="m"))
    assert catalog.zoo_cpu_stand_ins((gpu, plain), zoo) == {zoo[0].id: plain.id, zoo[2].id: zoo[1].id}
    assert catalog.groups_kind(zoo[1]) == "depthwise" and catalog.groups_kind(plain) == "1"
    assert catalog.groups_kind(dataclasses.replace(plain, groups=2)) == "grouped"
