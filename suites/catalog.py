"""The convolution cases of the suite, declared as data.

This module imports neither torch nor pytest, so that any tool can read the catalog.
A case id is derived from the fields and is the stable key of a result across stacks:
renaming a case breaks comparisons with older runs, so change ids only on purpose. An id names
what the case is, in words that `pytest -k` finds: the op and dtype, `depthwise`, `dilated2`,
`over2g` (a tensor past 2^31 elements; `below2g` / `above2g`: a case's 2^31 boundary pair), the
trigger family or workload (`vae_decoder`, `whisper_frontend`, `int32_no_split`, ...), then the
tag. A case may carry its own view of the input (`input_strides`, `storage_offset`: `view...`,
`offset...`) and a weight memory format apart from the input's (`weight_...`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Tuple, Union

Size = Union[int, Tuple[int, ...]]


def _sibling(stem: str) -> ModuleType:
    """suites/<stem>.py beside this file, loaded by its path: the harness loads this module by
    path too (rundir.suite_module), with no suites/ on sys.path to import a sibling by name."""
    name = f"{__name__}_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                         f"{stem}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_VOCABULARY = _sibling("vocabulary")
SPATIAL_DIMS: dict[str, int] = _VOCABULARY.SPATIAL_DIMS
DTYPES: tuple[str, ...] = _VOCABULARY.DTYPES
MEMORY_FORMATS: dict[str, int | None] = _VOCABULARY.MEMORY_FORMATS
LAYOUTS: tuple[str | None, ...] = _VOCABULARY.LAYOUTS
DIRECTIONS: tuple[str, ...] = _VOCABULARY.DIRECTIONS
INT32_MAX: int = _VOCABULARY.INT32_MAX

AUTOCAST_DTYPES = (None, "float16", "bfloat16")
# The sides of the 2^31 boundary a case may stand on (boundary.int32_pair): the largest step
# whose tensors all fit in 32-bit indexing, and the next, which does not.
EDGES = (None, "below", "above")
# Elements the strided checks enumerate at most to tell a view that interleaves its dimensions
# from one that overlaps itself (beyond it, only a view ordered by its strides is taken).
VIEW_ENUMERATE = 1 << 16
# The gradients each direction checks against the reference.
DIRECTION_GRADS = {
    "forward": (),
    "backward": ("grad_input", "grad_weight"),
    "backward_input": ("grad_input",),
    "backward_weight": ("grad_weight",),
    "double_backward": ("grad_input", "grad_weight", "double_grad_weight"),
}
# How the conv is called: eagerly (None), through torch.compile (inductor lowers a convolution to
# an extern call of aten's, so cuDNN still runs it, after inductor chose the layouts), or replayed
# from a captured CUDA graph (no cudnnFind during capture: the plan is chosen before).
VIAS = (None, "compile", "cuda_graph")
_DIRECTION_ID = {"backward": "bwd", "backward_input": "bwd_input", "backward_weight": "bwd_weight",
                 "double_backward": "double_bwd"}
# Trigger families: the known ways a convolution reaches a cuDNN failure. A trigger case names
# its family and the public reports it comes from (sources).
TRIGGERS = {
    "int32_split_batch": "a tensor past 2^31 elements that PyTorch can split along the batch",
    "int32_no_split": "a tensor past 2^31 elements that no batch split helps (batch 1, depthwise)",
    "large_3d": "a large 3D convolution, with and without backward",
    "large_transposed_3d": "a large transposed 3D convolution, with and without backward",
    "non_contiguous": "a permuted, transposed or sliced (oddly strided) input",
    "channels_last_odd": "channels_last with channel counts not multiples of 8, and with groups",
    "half_pre_sm80": "fp16 and bf16 on GPUs below compute capability 8.0",
    "dilation_deterministic": "a dilated convolution under cudnn.deterministic",
    "tall_wide": "a very tall or very wide input",
    "pointwise_extreme": "1x1 convolutions at spatial or channel extremes",
    "backward_input_weight": "backward to input and to weight",
    "autocast": "fp16 and bf16 autocast",
    "tf32": "TF32 on and off (torch.backends.cudnn.allow_tf32)",
    "cudnn_benchmark": "cudnn.benchmark on and off: the algorithm picker paths",
    "int32_other_ops": "past 2^31 elements in conv3d, conv1d and transposed convs",
    "large_batch": "batches past 1024, and dgrad with batch > 65,535 and stride > 1",
    "autocast_out_not_mult8": "fp16 autocast with an output channel count that is not a multiple of 8",
    "dilated_grouped": "dilated grouped (not depthwise) convolutions",
    "double_backward": "the gradient of a gradient through a conv (gradient penalties)",
    "inductor": "the conv through torch.compile (inductor's extern call of aten's convolution)",
    "graph_capture": "the conv replayed from a captured CUDA graph",
}
# Workloads: real layer shapes with random weights, marked `model`.
WORKLOADS = {
    "sd_unet": "Stable Diffusion 1.5 / SDXL UNet conv blocks",
    "vae_decoder": "the SD VAE decoder convs at 512^2 up to 2048^2 output (the huge-activation decode)",
    "video_temporal": "video diffusion temporal conv3d (AnimateDiff / SVD)",
    "whisper_frontend": "the Whisper conv1d audio front end (80 mel bins, k3, stride 1 then 2)",
    "patch_embed": "ViT / CLIP patch embedding (kernel = stride = 14, 16, 32)",
    "stylegan_transposed": "StyleGAN2 modulated upsampling: transposed conv grouped by batch",
}
_ON_OFF = {True: "on", False: "off"}
_SHORT_DTYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}


def _fmt(value: Size) -> str:
    """1 -> "1"; (1, 7) -> "1x7"."""
    if isinstance(value, int):
        return str(value)
    return "x".join(str(v) for v in value)


def _is_default(value: Size, default: int) -> bool:
    if isinstance(value, int):
        return value == default
    return all(v == default for v in value)


# --- views ---------------------------------------------------------------------------------------

def view_extent(shape: tuple[int, ...], strides: tuple[int, ...], offset: int = 0) -> int:
    """Elements of the buffer a strided view needs: its offset and the farthest element it reaches."""
    return offset + sum((size - 1) * stride for size, stride in zip(shape, strides)) + 1


def view_overlaps(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether two elements of the view share memory. A view whose dimensions (those over 1), in
    the order of their strides, each step past all the smaller ones cannot; one that interleaves
    them is enumerated when small (VIEW_ENUMERATE), and taken as overlapping when not."""
    spans = sorted((stride, size) for size, stride in zip(shape, strides) if size > 1)
    reach = 0  # the farthest offset the dimensions so far reach
    for stride, size in spans:
        if stride <= reach:
            break
        reach += (size - 1) * stride
    else:
        return False
    count = math.prod(shape)
    if count > VIEW_ENUMERATE:
        return True
    offsets = {0}
    for size, stride in zip(shape, strides):
        offsets = {base + i * stride for base in offsets for i in range(size)}
    return len(offsets) < count


def restride(shape: tuple[int, ...], strides: tuple[int, ...], new: tuple[int, ...],
             most_gap: int | None = None) -> tuple[int, ...]:
    """The strides of a view like `strides` (of `shape`) for the shape `new`: the same order of the
    dimensions in memory, the same broadcast (0) strides, the same gaps where a stride is a whole
    multiple of what the dimensions before it span (a sliced buffer stays twice as wide), equal
    strides kept equal (a size-1 dimension's), the smallest stride kept as it is; a stride the
    dimensions before it do not divide (an interleaved view) is made dense after them. `most_gap`
    bounds each gap and the smallest stride (a scaled-down case's buffer stays small). The same
    shape with no bound is the view itself: the suite builds a case's strides as written, a row
    pitch or an interleaving included. A size-1 dimension that grows (--pad-channels widens one
    channel) steps past the dimensions before it like any other: a stride it shared with one (a
    broadcast 0, an unsqueezed dimension's) would make the view overlap itself."""
    if most_gap is None and tuple(new) == tuple(shape):
        return tuple(strides)
    bound = most_gap if most_gap is not None else max(max(strides, default=1), 1)
    order = sorted(range(len(shape)), key=lambda d: (strides[d] == 0, strides[d], -d))
    made = list(strides)
    span_old = span_new = 0  # what the dimensions placed so far reach, in the old and the new shape
    placed: dict[int, int] = {}  # an old stride -> its new one
    for d in order:
        old = strides[d]
        if old == 0 and new[d] == 1:
            made[d] = 0
            continue
        if old == 0:  # a broadcast dimension of size 1 that grew: the outermost, past all the others
            made[d] = max(span_new, 1)
        elif old in placed and new[d] == 1:
            made[d] = placed[old]
        elif span_old == 0:
            made[d] = min(old, bound)  # the first: its step (2 in a sliced view) kept
        elif old % span_old == 0:
            made[d] = span_new * min(old // span_old, bound)
        else:
            made[d] = span_new
        placed.setdefault(old, made[d])
        span_old = max(span_old, old * shape[d])
        span_new = max(span_new, made[d] * new[d])
    return tuple(made)


class CaseError(ValueError):
    """A case that cannot be; `problems` lists what is wrong, a phrase each."""

    def __init__(self, message: str, problems: list[str]) -> None:
        super().__init__(message)
        self.problems = problems


@dataclass(frozen=True)
class Case:
    op: str
    n: int
    c_in: int
    c_out: int
    size: Size
    kernel: Size
    source: str
    stride: Size = 1
    padding: Size = 0
    dilation: Size = 1
    groups: int = 1
    dtype: str = "float32"
    autocast: str | None = None
    memory_format: str = "contiguous"
    layout: str | None = None
    backward: bool = False
    output_padding: Size = 0  # transposed ops only
    # Settings the case forces while it runs (None: the run's global setting), restored after.
    benchmark: bool | None = None  # torch.backends.cudnn.benchmark
    deterministic: bool | None = None  # torch.backends.cudnn.deterministic
    tf32: bool | None = None  # torch.backends.cudnn.allow_tf32
    gpu_only: bool = False  # the case means something on CUDA only (skipped on CPU, with the reason)
    trigger: str | None = None  # a TRIGGERS family
    workload: str | None = None  # a WORKLOADS name
    sources: tuple[str, ...] = ()  # public reports and PRs (URLs) the case comes from
    tag: str | None = None  # a readable suffix telling apart cases whose other id parts agree
    bias: bool = True
    # None: "backward" when backward is set, else "forward"; another direction sets backward.
    direction: str | None = None
    prefix: str | None = None  # a user case file's stem: its cases' ids start with it
    via: str | None = None  # VIAS: None (eager), "compile", "cuda_graph"
    # Any view: the input's exact strides (one per dimension, batch and channels first) and storage
    # offset, built with as_strided over a buffer large enough for it (None: the layout's or the
    # memory format's). The weight's memory format apart from the input's (None: the input's).
    input_strides: tuple[int, ...] | None = None
    storage_offset: int = 0
    weight_memory_format: str | None = None
    edge: str | None = None  # EDGES: the side of the 2^31 boundary of a boundary pair's case
    # The weight's own view (None: the weight's memory format's strides): sharded and flattened
    # parameters (FSDP's flat buffer, a fused QKV weight sliced apart) hand the conv a weight that
    # is a view of a larger buffer, at an offset, with strides of their own.
    weight_strides: tuple[int, ...] | None = None
    weight_storage_offset: int = 0
    # A zoo case (suites/models/<model>.json): the model it was recorded from, its file's stem.
    model: str | None = None

    def __post_init__(self) -> None:
        if self.direction not in (None, "forward") and not self.backward:
            object.__setattr__(self, "backward", True)  # frozen: normalised once, at construction
        for name in ("input_strides", "weight_strides"):
            if isinstance(getattr(self, name), list):  # a case file's (JSON) list: the hashable tuple
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.weight_memory_format is not None and self.weight_memory_format == self.memory_format:
            object.__setattr__(self, "weight_memory_format", None)  # one case, one id
        problems = self._problems()
        if problems:
            raise CaseError(f"bad case {self!r}: {'; '.join(problems)}", problems)

    def _problems(self) -> list[str]:
        problems = []
        if self.op not in SPATIAL_DIMS:
            problems.append("op: unknown op " + self.op)
            return problems
        if self.dtype not in DTYPES:
            problems.append("dtype: unknown dtype " + self.dtype)
        if self.autocast not in AUTOCAST_DTYPES:
            problems.append(f"autocast: unknown autocast dtype {self.autocast}")
        if self.autocast is not None and self.dtype != "float32":
            problems.append("autocast: autocast cases take float32 inputs (dtype)")
        if self.memory_format not in MEMORY_FORMATS:
            problems.append("memory_format: unknown memory format " + self.memory_format)
        elif MEMORY_FORMATS[self.memory_format] not in (None, self.spatial_dims):
            problems.append(f"memory_format: {self.memory_format} needs another spatial rank")
        if self.layout not in LAYOUTS:
            problems.append(f"layout: unknown layout {self.layout}")
        if self.layout is not None and self.memory_format != "contiguous":
            problems.append("layout: a layout tweak applies to contiguous inputs only (memory_format)")
        if self.direction is not None and self.direction not in DIRECTIONS:
            problems.append(f"direction: unknown direction {self.direction}")
        elif self.direction == "forward" and self.backward:
            problems.append("direction: a forward case has no backward")
        if self.prefix is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}", self.prefix):
            problems.append("prefix: up to 64 letters, digits, '_', '.', '+' and '-'")
        if self.via not in VIAS:
            problems.append(f"via: unknown way to call the conv {self.via}")
        elif self.via == "cuda_graph" and self.backward:
            problems.append("via: a cuda_graph case is forward only")
        if self.layout == "transposed" and (self.n < 2 or self.c_in < 2):
            problems.append("layout: a transposed layout needs a batch and channels of 2 or more (or give the "
                            "view's input_strides)")
        problems += self._view_problems()
        if self.edge not in EDGES:
            problems.append(f"edge: unknown side of the 2^31 boundary {self.edge}")
        if self.trigger is not None and self.trigger not in TRIGGERS:
            problems.append(f"trigger: unknown trigger family {self.trigger}")
        if self.trigger is not None and not self.sources:
            problems.append("sources: a trigger case names its public sources")
        if self.workload is not None and self.workload not in WORKLOADS:
            problems.append(f"workload: unknown workload {self.workload}")
        if not all(url.startswith("https://") for url in self.sources):
            problems.append("sources: sources are https URLs")
        if not _is_default(self.output_padding, 0) and not self.transposed:
            problems.append("output_padding: applies to transposed ops only")
        elif self.transposed and any(op >= max(s, d) for op, s, d in zip(
                self.expand(self.output_padding), self.expand(self.stride), self.expand(self.dilation))
                if isinstance(self.output_padding, int) or len(self.output_padding) == self.spatial_dims):
            problems.append("output_padding: must be smaller than stride or dilation")
        if self.tag is not None and not re.fullmatch(r"[a-z0-9_]+(-[a-z0-9_]+)*", self.tag):
            problems.append("tag: lower-case letters, digits and underscores, words joined by single hyphens")
        if self.c_in % self.groups or self.c_out % self.groups:
            problems.append(f"groups: {self.groups} does not divide the channels ({self.c_in} in, {self.c_out} out)")
        for name in ("size", "kernel", "stride", "padding", "dilation", "output_padding"):
            value = getattr(self, name)
            if not isinstance(value, int) and len(value) != self.spatial_dims:
                problems.append(f"{name}: has the wrong rank for {self.op}")
                return problems
        if any(extent < 1 for extent in self.output_size()):
            problems.append(f"kernel: the output would be empty ({_fmt(self.output_size())}): the kernel, dilation "
                            "and padding do not fit the input")
        return problems

    def _view_problems(self) -> list[str]:
        problems = []
        if self.weight_memory_format is not None:
            if self.weight_memory_format not in MEMORY_FORMATS:
                problems.append(f"weight_memory_format: unknown memory format {self.weight_memory_format}")
            elif MEMORY_FORMATS[self.weight_memory_format] not in (None, self.spatial_dims):
                problems.append(f"weight_memory_format: {self.weight_memory_format} needs another spatial rank")
        if type(self.storage_offset) is not int or self.storage_offset < 0:
            problems.append(f"storage_offset: {self.storage_offset!r}: expected a whole number, 0 or more")
        problems += self._weight_view_problems()
        strides = self.input_strides
        if strides is None:
            if self.storage_offset:
                problems.append("storage_offset: goes with input_strides (the view it offsets)")
            return problems
        rank = self.spatial_dims + 2
        if len(strides) != rank or not all(type(s) is int for s in strides):
            problems.append(f"input_strides: {list(strides)}: {self.op} takes {rank} whole numbers (batch, "
                            f"channels, {self.spatial_dims} spatial)")
            return problems
        if any(s < 0 for s in strides):
            problems.append(f"input_strides: {list(strides)}: a negative stride is no view as_strided builds")
            return problems
        if self.layout is not None:
            problems.append("input_strides: give a layout or the view's strides, not both")
        if self.memory_format != "contiguous":
            problems.append("input_strides: the strides say how the input lies; memory_format would rewrite "
                            "them (weight_memory_format sets the weight's)")
        shape = (self.n, self.c_in, *self.expand(self.size))
        if len(shape) == rank and view_overlaps(shape, strides):
            problems.append(f"input_strides: {list(strides)}: the view of {list(shape)} overlaps itself (two "
                            "elements share memory: a stride 0 or too small a stride on a dimension over 1)")
        return problems

    def _weight_view_problems(self) -> list[str]:
        problems = []
        if type(self.weight_storage_offset) is not int or self.weight_storage_offset < 0:
            problems.append(f"weight_storage_offset: {self.weight_storage_offset!r}: expected a whole number, 0 or "
                            "more")
        strides = self.weight_strides
        if strides is None:
            if self.weight_storage_offset:
                problems.append("weight_storage_offset: goes with weight_strides (the view it offsets)")
            return problems
        rank = self.spatial_dims + 2
        if len(strides) != rank or not all(type(s) is int for s in strides):
            problems.append(f"weight_strides: {list(strides)}: {self.op}'s weight takes {rank} whole numbers")
            return problems
        if any(s < 0 for s in strides):
            problems.append(f"weight_strides: {list(strides)}: a negative stride is no view as_strided builds")
            return problems
        if self.weight_memory_format is not None:
            problems.append("weight_strides: the strides say how the weight lies; weight_memory_format would "
                            "rewrite them")
        if self.memory_format != "contiguous":
            problems.append("weight_strides: a memory_format rewrites the weight's strides too (the weight's view "
                            "goes with a contiguous or strided input)")
        shape = self.shapes()["weight"] if not any(isinstance(v, tuple) and len(v) != self.spatial_dims
                                                   for v in (self.size, self.kernel)) else ()
        if len(shape) == rank and view_overlaps(shape, strides):
            problems.append(f"weight_strides: {list(strides)}: the view of {list(shape)} overlaps itself (two "
                            "elements share memory)")
        return problems

    @property
    def weight_view_extent(self) -> int | None:
        """Elements of the buffer the weight's view needs; None without weight_strides."""
        if self.weight_strides is None:
            return None
        return view_extent(self.shapes()["weight"], self.weight_strides, self.weight_storage_offset)

    def weight_view_strides(self, shape: tuple[int, ...], most_gap: int | None = None) -> tuple[int, ...] | None:
        """The case's weight_strides recomputed for another weight shape (see restride)."""
        if self.weight_strides is None:
            return None
        return restride(self.shapes()["weight"], self.weight_strides, shape, most_gap)

    @property
    def view_extent(self) -> int | None:
        """Elements of the buffer the input's view needs (its offset and every element it reaches);
        None without input_strides."""
        if self.input_strides is None:
            return None
        return view_extent(self.shapes()["input"], self.input_strides, self.storage_offset)

    def view_strides(self, shape: tuple[int, ...], most_gap: int | None = None) -> tuple[int, ...] | None:
        """The case's input_strides recomputed for another input shape (the CPU's scaled-down
        variant, a boundary pair's, a padded input): see restride."""
        if self.input_strides is None:
            return None
        return restride(self.shapes()["input"], self.input_strides, shape, most_gap)

    @property
    def kind(self) -> str:
        """The direction: forward, backward, backward_input, backward_weight, double_backward."""
        return self.direction or ("backward" if self.backward else "forward")

    @property
    def grads(self) -> tuple[str, ...]:
        """The gradients the case computes and checks (DIRECTION_GRADS)."""
        return DIRECTION_GRADS[self.kind]

    @property
    def needs_gpu(self) -> bool:
        """TF32, CUDA graphs and the sub-sm80 dtype cases mean nothing on a CPU."""
        return self.gpu_only or self.tf32 is not None or self.via == "cuda_graph" or self.edge is not None

    @property
    def gpu_reason(self) -> str:
        """Why a case that needs_gpu means nothing on a CPU (its skip reason there)."""
        if self.via == "cuda_graph":
            return "it replays a captured CUDA graph"
        if self.edge is not None:
            # Scaled down to the CPU's size, a pair's case is its full-size case's scaled twin again.
            return (f"it is the {self.edge} side of a 2^31 boundary pair, which means something at full size "
                    "only (the CPU runs the scaled-down case it pairs)")
        if self.benchmark and self.workload:
            return "it forces cudnn.benchmark, which picks among cuDNN's algorithms (the CPU runs its twin)"
        if self.tf32 is not None:
            return "it sets TF32"
        if self.prefix is not None:
            # A user case is gpu_only because its file says so: say that, and what of it only CUDA
            # reads, not the catalogue's reason for its own gpu_only cases.
            forced = " and forces cudnn.benchmark, which picks among cuDNN's algorithms" if self.benchmark else ""
            return f"its case file ({self.prefix}) marks it gpu_only{forced}"
        return "it is about cuDNN's dtype support by GPU"

    @property
    def depthwise(self) -> bool:
        return self.groups == self.c_in and self.groups > 1

    @property
    def spatial_dims(self) -> int:
        return SPATIAL_DIMS[self.op]

    @property
    def transposed(self) -> bool:
        return self.op.startswith("conv_transpose")

    @property
    def compute_dtype(self) -> str:
        """The dtype the convolution runs in: the autocast dtype when there is one."""
        return self.autocast or self.dtype

    def expand(self, value: Size) -> tuple[int, ...]:
        """An int or per-dimension tuple as one int per spatial dimension."""
        if isinstance(value, int):
            return (value,) * self.spatial_dims
        return tuple(value)

    def output_size(self) -> tuple[int, ...]:
        """The spatial extents of the output."""
        sizes = zip(self.expand(self.size), self.expand(self.kernel), self.expand(self.stride),
                    self.expand(self.padding), self.expand(self.dilation),
                    self.expand(self.output_padding))
        if self.transposed:
            return tuple((i - 1) * s - 2 * p + d * (k - 1) + op + 1 for i, k, s, p, d, op in sizes)
        return tuple((i + 2 * p - d * (k - 1) - 1) // s + 1 for i, k, s, p, d, _ in sizes)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The shapes of input, weight, bias and output."""
        kernel = self.expand(self.kernel)
        weight = ((self.c_in, self.c_out // self.groups, *kernel) if self.transposed
                  else (self.c_out, self.c_in // self.groups, *kernel))
        return {
            "input": (self.n, self.c_in, *self.expand(self.size)),
            "weight": weight,
            "bias": (self.c_out,),
            "output": (self.n, self.c_out, *self.output_size()),
        }

    @property
    def over_int32(self) -> bool:
        """Whether a tensor of the case (or its gradient) has more than INT32_MAX elements."""
        return any(math.prod(shape) > INT32_MAX for shape in self.shapes().values())

    @property
    def id(self) -> str:
        """The fields in words, e.g. conv2d-fp32-k5-p4-dilated2-depthwise-channels_last-...

        Every part comes from a field, so `pytest -k WORD` selects by what a case is: `depthwise`,
        `dilated`, `over2g` (`-k 2g`), a trigger family (`-k int32`, `-k tall_wide`) or a
        workload (`-k vae`, `-k whisper`, `-k unet`, `-k patch`, `-k stylegan`, `-k video`).
        """
        parts = [self.prefix] if self.prefix else []
        parts += [self.op, _SHORT_DTYPE[self.dtype]]
        if self.autocast:
            parts.append("autocast_" + _SHORT_DTYPE[self.autocast])
        parts.append("k" + _fmt(self.kernel))
        for prefix, value, default in (("s", self.stride, 1), ("p", self.padding, 0),
                                       ("dilated", self.dilation, 1), ("op", self.output_padding, 0)):
            if not _is_default(value, default):
                parts.append(prefix + _fmt(value))
        if self.depthwise:
            parts.append("depthwise")
        elif self.groups > 1:
            parts.append("g" + str(self.groups))
        if self.memory_format != "contiguous":
            parts.append(self.memory_format)
        if self.layout:
            parts.append(self.layout)
        if self.input_strides is not None:
            parts.append("view" + _fmt(self.input_strides))
            if self.storage_offset:
                parts.append(f"offset{self.storage_offset}")
        if self.weight_memory_format is not None:
            parts.append("weight_" + self.weight_memory_format)
        if self.weight_strides is not None:
            parts.append("wview" + _fmt(self.weight_strides))
            if self.weight_storage_offset:
                parts.append(f"woffset{self.weight_storage_offset}")
        if not self.bias:
            parts.append("nobias")
        if self.kind != "forward":
            parts.append(_DIRECTION_ID[self.kind])
        for name, switch in (("bench", self.benchmark), ("det", self.deterministic),
                             ("tf32", self.tf32)):
            if switch is not None:
                parts.append(f"{name}_{_ON_OFF[switch]}")
        if self.via == "compile":
            parts.append("compiled")
        elif self.via == "cuda_graph":
            parts.append("cuda_graph")
        if self.over_int32:
            parts.append("over2g")
        if self.edge is not None:
            parts.append(f"{self.edge}2g")
        if self.trigger:
            parts.append(self.trigger)
        if self.workload:
            parts.append(self.workload)
        if self.tag:
            parts.append(self.tag)
        return "-".join(parts)

    def params(self) -> dict[str, Any]:
        """The fields as plain JSON values (tuples become lists)."""
        return {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in dataclasses.asdict(self).items()
        }


BASE_CASES: tuple[Case, ...] = (
    # conv1d
    Case("conv1d", 2, 8, 16, 32, 3, padding=1, source="baseline 1d conv, fp32"),
    Case("conv1d", 2, 8, 8, 33, 5, stride=2, dilation=2, dtype="float16",
         source="strided, dilated fp16 1d conv (audio front ends)"),
    Case("conv1d", 2, 16, 16, 32, 7, padding=3, groups=16, dtype="bfloat16",
         source="depthwise bf16 1d conv (ConvNeXt-style/Mamba-style short conv)"),
    Case("conv1d", 2, 8, 12, 40, 3, layout="permuted", backward=True,
         source="input permuted from (N, L, C), the usual transformer layout, with backward"),
    Case("conv1d", 2, 8, 8, 32, 3, padding=1, autocast="float16",
         source="1d conv under fp16 autocast"),
    # conv2d
    Case("conv2d", 2, 8, 16, (12, 12), 3, padding=1, source="baseline 2d conv, fp32"),
    Case("conv2d", 2, 8, 16, (13, 13), 3, stride=2, dtype="float16", memory_format="channels_last",
         source="strided fp16 conv in channels_last (typical AMP vision training)"),
    Case("conv2d", 2, 8, 8, (10, 10), 3, padding=1, dtype="bfloat16", memory_format="channels_last",
         backward=True, source="bf16 channels_last conv with backward"),
    Case("conv2d", 2, 16, 16, (10, 10), 3, padding=1, groups=4, backward=True,
         source="grouped conv (ResNeXt) with backward"),
    Case("conv2d", 2, 16, 16, (12, 12), 3, padding=1, groups=16, dtype="float16",
         memory_format="channels_last",
         source="depthwise fp16 channels_last (MobileNet/EfficientNet), a common cuDNN corner"),
    Case("conv2d", 2, 8, 8, (14, 14), 3, padding=2, dilation=2,
         source="dilated conv (DeepLab-style atrous)"),
    Case("conv2d", 2, 8, 8, (10, 10), 3, padding=1, layout="sliced",
         source="input sliced along width: strided, non-contiguous"),
    Case("conv2d", 3, 8, 8, (10, 10), 3, layout="transposed",
         source="input with N and C swapped in memory"),
    Case("conv2d", 2, 8, 16, (12, 12), 3, padding=1, autocast="float16", backward=True,
         source="fp16 autocast forward and backward (torch.amp training step)"),
    Case("conv2d", 2, 16, 32, (8, 8), 1, autocast="bfloat16", memory_format="channels_last",
         source="1x1 pointwise conv under bf16 autocast, channels_last"),
    Case("conv2d", 2, 3, 8, (32, 32), 7, stride=2, padding=3, dtype="float16", backward=True,
         source="ResNet stem: 7x7 stride 2 on 3 channels, fp16 with backward"),
    Case("conv2d", 2, 8, 8, (16, 16), 5, padding=4, dilation=2, groups=8, dtype="bfloat16",
         source="dilated depthwise bf16 conv"),
    Case("conv2d", 2, 8, 8, (12, 12), (1, 7), padding=(0, 3),
         source="asymmetric 1x7 kernel (Inception-style)"),
    # conv3d
    Case("conv3d", 2, 4, 8, (6, 6, 6), 3, padding=1, source="baseline 3d conv, fp32"),
    Case("conv3d", 2, 4, 8, (6, 6, 6), 3, padding=1, dtype="float16",
         memory_format="channels_last_3d",
         source="fp16 3d conv in channels_last_3d (video/medical models)"),
    Case("conv3d", 2, 4, 4, (7, 7, 7), 3, stride=2, dtype="bfloat16", backward=True,
         source="strided bf16 3d conv with backward"),
    Case("conv3d", 2, 8, 8, (5, 5, 5), 3, padding=1, groups=2, autocast="bfloat16",
         source="grouped 3d conv under bf16 autocast"),
    # transposed
    Case("conv_transpose1d", 2, 8, 4, 16, 3, stride=2,
         source="1d transposed conv upsampling, fp32"),
    Case("conv_transpose1d", 2, 8, 8, 16, 4, stride=2, padding=1, dtype="float16",
         source="fp16 1d transposed conv (vocoder upsampling)"),
    Case("conv_transpose2d", 2, 8, 4, (8, 8), 4, stride=2, padding=1, backward=True,
         source="2x upsampling transposed conv (GAN/U-Net decoder) with backward"),
    Case("conv_transpose2d", 2, 8, 8, (8, 8), 2, stride=2, dtype="float16",
         memory_format="channels_last",
         source="fp16 channels_last transposed conv (U-Net up path)"),
    Case("conv_transpose2d", 2, 8, 8, (8, 8), 3, padding=1, groups=2, dtype="bfloat16",
         source="grouped bf16 transposed conv"),
    Case("conv_transpose2d", 2, 8, 8, (8, 8), 4, stride=2, padding=1, autocast="float16",
         backward=True, source="transposed conv under fp16 autocast with backward"),
    Case("conv_transpose3d", 2, 4, 4, (4, 4, 4), 3, stride=2, source="3d transposed conv, fp32"),
    Case("conv_transpose3d", 2, 4, 4, (4, 4, 4), 2, stride=2, dtype="float16",
         memory_format="channels_last_3d", source="fp16 channels_last_3d 3d transposed conv"),
)

PT_ISSUE = "https://github.com/pytorch/pytorch/issues/"
PT_PULL = "https://github.com/pytorch/pytorch/pull/"


def _trigger(family: str, sources: tuple[str, ...], *cases: Case) -> tuple[Case, ...]:
    return tuple(dataclasses.replace(case, trigger=family, sources=sources) for case in cases)


def _workload(name: str, *cases: Case, sources: tuple[str, ...] = ()) -> tuple[Case, ...]:
    return tuple(dataclasses.replace(case, workload=name, sources=sources) for case in cases)


# Every known trigger family, in the shapes of the public reports (full size on a GPU; scaled
# down on CPU, see sizing.py). `source` says which report a shape is taken from.
TRIGGER_CASES: tuple[Case, ...] = (
    *_trigger("int32_split_batch",
              (PT_ISSUE + "11065", PT_ISSUE + "22496", PT_PULL + "31379", PT_PULL + "31510"),
              Case("conv2d", 1024, 3, 64, (224, 224), 3, padding=1, tag="n1024",
                   source="1024x3x224x224 into 64 channels: 3.3e9 output elements (pytorch#11065)"),
              Case("conv2d", 64, 64, 64, (512, 1040), 3, padding=1, dtype="float16",
                   backward=True, tag="n64",
                   source="fp16 activations of 2.2e9 elements with backward (split per pytorch#31510)")),
    *_trigger("int32_no_split",
              (PT_ISSUE + "152816", PT_PULL + "153101", PT_PULL + "134890", PT_PULL + "31383"),
              Case("conv2d", 1, 2, 2, (32800, 32800), 3, padding=1, groups=2, tag="n1",
                   source="depthwise, batch 1, 2.15e9 elements: the test of pytorch#153101"),
              Case("conv2d", 1, 64, 64, (6000, 6000), 3, padding=1, dtype="float16", tag="n1",
                   source="dense batch-1 conv of 2.3e9 elements (cuDNN 9.3+ only, pytorch#134890)")),
    *_trigger("large_3d", (PT_ISSUE + "32035", PT_ISSUE + "22496", PT_ISSUE + "4107"),
              Case("conv3d", 1, 1, 1, (256, 256, 256), 3, padding=2, dilation=2, backward=True,
                   tag="vol256", source="the dilated 1x1x256^3 conv3d whose backward failed (pytorch#32035)"),
              Case("conv3d", 2, 64, 64, (32, 256, 256), 3, padding=1, dtype="float16",
                   source="a 3D conv of 2.7e8 elements per tensor, forward only"),
              Case("conv3d", 1, 32, 32, (48, 128, 128), 3, padding=1, dtype="float16",
                   backward=True, source="a large fp16 3D conv with backward")),
    *_trigger("large_transposed_3d", (PT_ISSUE + "4344", PT_ISSUE + "1664"),
              Case("conv_transpose3d", 1, 8, 1, (128, 512, 512), 4, stride=2, padding=1,
                   source="ConvTranspose3d(8, 1, 4, 2, 1) on 1x8x128x512x512 (pytorch#4344)"),
              Case("conv_transpose3d", 1, 16, 8, (64, 128, 128), 3, stride=2, padding=1,
                   output_padding=1, dtype="float16", backward=True,
                   source="a large fp16 transposed 3D conv with backward")),
    *_trigger("non_contiguous",
              (PT_ISSUE + "136812", "https://github.com/loeweX/Greedy_InfoMax/issues/3", PT_ISSUE + "29992",
               PT_ISSUE + "3512"),
              Case("conv1d", 2, 64, 64, 32, 4, padding=3, groups=64, dtype="float16",
                   layout="permuted", backward=True,
                   source="depthwise causal conv1d on a permuted (B, L, D) input (pytorch#136812)"),
              Case("conv2d", 4, 16, 32, (24, 40), 3, padding=1, dtype="float16", layout="permuted",
                   source="an input permuted without .contiguous() (Greedy_InfoMax#3)"),
              Case("conv2d", 4, 8, 16, (16, 16), 3, stride=2, dtype="bfloat16", layout="transposed",
                   backward=True, source="bf16 input with N and C swapped in memory, with backward"),
              Case("conv3d", 2, 4, 8, (6, 6, 10), 3, padding=1, dtype="float16", layout="sliced",
                   source="fp16 3D input sliced along its last dimension"),
              Case("conv2d", 8, 64, 128, (32, 32), 1, dtype="float16", layout="nhwc_strided", backward=True,
                   tag="bhwc_1x1", source="a BHWC activation permuted to BCHW without .contiguous(), into a "
                                          "1x1 conv with an NCHW weight; its backward failed (pytorch#29992)"),
              Case("conv2d", 16, 256, 256, (14, 14), 3, padding=1, dtype="bfloat16", layout="nhwc_strided",
                   tag="bhwc_3x3", source="a bf16 (N, H, W, C) feature map permuted to NCHW for a 3x3 conv"),
              Case("conv_transpose1d", 1, 1024, 1, 1, 1, layout="nhwc_strided", tag="pytorch3512",
                   source="ConvTranspose1d(1024, 1, 1) on a (1, 1, 1024) tensor transposed to (1, 1024, 1) "
                          "(pytorch#3512)"),
              Case("conv_transpose2d", 4, 32, 16, (16, 16), 4, stride=2, padding=1, dtype="float16",
                   layout="permuted", backward=True,
                   source="a non-contiguous input to an fp16 transposed conv, with backward")),
    *_trigger("channels_last_odd", (PT_ISSUE + "34736", PT_ISSUE + "37725"),
              Case("conv2d", 8, 3, 64, (64, 64), 7, stride=2, padding=3, dtype="float16",
                   memory_format="channels_last", backward=True, tag="c3",
                   source="fp16 channels_last stem on 3 channels (SqueezeNet on Volta, pytorch#34736)"),
              Case("conv2d", 4, 12, 20, (20, 20), 3, padding=1, dtype="float16",
                   memory_format="channels_last", tag="c12_20",
                   source="fp16 channels_last with 12 and 20 channels"),
              Case("conv2d", 4, 30, 30, (16, 16), 3, padding=1, groups=3, dtype="float16",
                   memory_format="channels_last", backward=True, tag="c30",
                   source="grouped fp16 channels_last, 10 channels per group"),
              Case("conv2d", 8, 32, 32, (256, 512), 5, padding=4, dilation=2, groups=32,
                   memory_format="channels_last", tag="c32",
                   source="dilated depthwise channels_last from pytorch#37725"),
              Case("conv2d", 2, 6, 10, (15, 15), 3, padding=1, dtype="bfloat16",
                   memory_format="channels_last", tag="c6_10",
                   source="bf16 channels_last with 6 and 10 channels")),
    *_trigger("half_pre_sm80", (PT_ISSUE + "88571", PT_PULL + "81139", PT_ISSUE + "58861",
                                PT_ISSUE + "57921"),
              Case("conv2d", 8, 3, 3, (10, 10), 5, dtype="bfloat16", gpu_only=True,
                   source="bf16 Conv2d(3, 3, 5) (pytorch#88571): cuDNN runs bf16 on sm80+ only"),
              Case("conv2d", 16, 256, 256, (128, 128), 3, padding=1, dtype="float16",
                   backward=True, benchmark=True, gpu_only=True,
                   source="fp16 backward on a Quadro RTX 8000 (pytorch#57921)"),
              Case("conv3d", 2, 16, 16, (8, 16, 16), 3, padding=1, dtype="bfloat16",
                   backward=True, gpu_only=True,
                   source="bf16 3D conv with backward on a pre-Ampere GPU")),
    *_trigger("dilation_deterministic",
              ("https://github.com/chainer/chainer/issues/3874", PT_PULL + "2893",
               PT_ISSUE + "967", PT_ISSUE + "4107"),
              Case("conv2d", 2, 3, 2, (4, 3), 3, padding=2, dilation=2, deterministic=True,
                   backward=True, source="dilated backward in deterministic mode (chainer#3874)"),
              Case("conv2d", 1, 1, 1, (512, 512), 3, padding=2, dilation=2, deterministic=True,
                   backward=True, tag="n1", source="a 1-channel dilated conv (pytorch#4107)"),
              Case("conv1d", 4, 32, 32, 1000, 3, padding=4, dilation=4, dtype="float16",
                   deterministic=True, backward=True, source="dilated fp16 conv1d (pytorch#967)")),
    *_trigger("tall_wide", (PT_ISSUE + "31336",
                            "https://github.com/fumiama/Retrieval-based-Voice-Conversion-WebUI/issues/105"),
              Case("conv2d", 1, 8, 8, (262144, 4), 3, padding=1, dtype="float16", tag="tall",
                   source="a 262144 x 4 input"),
              Case("conv2d", 1, 32, 32, (8, 300000), 3, padding=1, dtype="float16", tag="wide",
                   source="an 8 x 300000 input"),
              Case("conv1d", 1, 192, 192, 960000, 5, padding=2, dtype="float16", tag="long",
                   source="a conv1d over 10 minutes of audio frames (RVC#105)")),
    *_trigger("pointwise_extreme", (PT_ISSUE + "77844", PT_ISSUE + "8934"),
              Case("conv2d", 4, 16384, 262144, (1, 1), 1, backward=True, tag="wide_channels",
                   source="1x1 conv from 16384 to 262144 channels on 1x1 inputs (pytorch#77844)"),
              Case("conv2d", 64, 2048, 256, (1, 1), 1, dtype="float16", tag="spatial_1x1",
                   source="1x1 conv on Nx2048x1x1 features (pytorch#8934)")),
    *_trigger("backward_input_weight", ("https://github.com/soumith/cudnn.torch/issues/384",
                                        PT_ISSUE + "32035", PT_ISSUE + "57921"),
              Case("conv2d", 1, 3, 64, (2615, 2816), 3, padding=1, backward=True, tag="large",
                   source="cudnnConvolutionBackwardData on 1x3x2615x2816 (cudnn.torch#384)"),
              Case("conv2d", 8, 32, 32, (33, 33), 3, stride=2, padding=1, groups=4,
                   dtype="float16", backward=True, tag="odd", source="grouped strided fp16 backward"),
              Case("conv_transpose2d", 2, 16, 8, (16, 16), 4, stride=2, padding=1,
                   dtype="bfloat16", backward=True, source="bf16 transposed conv backward")),
    *_trigger("autocast", ("https://github.com/gungui98/Pytorch-Depthwise-Conv3d/issues/3",
                           PT_PULL + "81139"),
              Case("conv2d", 4, 32, 64, (32, 32), 3, padding=1, autocast="float16",
                   memory_format="channels_last", backward=True, tag="amp",
                   source="fp16 autocast training step in channels_last"),
              Case("conv3d", 2, 8, 16, (8, 16, 16), 3, padding=1, autocast="bfloat16",
                   backward=True, source="bf16 autocast 3D conv with backward"),
              Case("conv1d", 4, 80, 128, 200, 3, padding=1, autocast="bfloat16",
                   source="bf16 autocast conv1d")),
    *_trigger("tf32", (PT_ISSUE + "107514", PT_ISSUE + "54980",
                       "https://github.com/liuxz1011/TodyNet/issues/12"),
              Case("conv2d", 16, 27, 18, (256, 45), (1, 3), padding=(0, 1), tf32=True,
                   source="the (1, 3) conv of TodyNet#12, whose repro sets allow_tf32"),
              Case("conv2d", 16, 27, 18, (256, 45), (1, 3), padding=(0, 1), tf32=False,
                   source="the same conv with TF32 off (pytorch#107514)"),
              Case("conv3d", 2, 16, 16, (8, 16, 16), 3, padding=1, backward=True, tf32=True,
                   source="a 3D conv with TF32 on (pytorch#54980)")),
    *_trigger("cudnn_benchmark", (PT_ISSUE + "1664", PT_ISSUE + "31336", PT_ISSUE + "34736", PT_ISSUE + "27115"),
              Case("conv_transpose3d", 1, 32, 1, (192, 256, 512), 3, stride=2, padding=1,
                   output_padding=1, benchmark=False,
                   source="ConvTranspose3d(32, 1, 3, 2, 1, 1) of pytorch#1664, heuristics"),
              Case("conv_transpose3d", 1, 32, 1, (192, 256, 512), 3, stride=2, padding=1,
                   output_padding=1, benchmark=True,
                   source="the same with cudnn.benchmark, the workaround of pytorch#1664"),
              Case("conv2d", 1, 16, 32, (70000, 100), 3, benchmark=False, tag="tall",
                   source="1x16x70000x100 where cudnnGet picked an unusable algorithm (pytorch#31336)"),
              Case("conv2d", 1, 16, 32, (70000, 100), 3, benchmark=True, tag="tall",
                   source="the same shape through cudnnFind (pytorch#31336)"),
              Case("conv2d", 8, 24, 40, (28, 28), 3, padding=1, dtype="float16",
                   memory_format="channels_last", benchmark=True,
                   source="a small fp16 channels_last conv through cudnnFind"),
              # Odd channel counts in channels_last, through cudnnFind: the shapes of
              # channels_last_odd, each with benchmark on.
              Case("conv2d", 8, 3, 64, (64, 64), 7, stride=2, padding=3, dtype="float16",
                   memory_format="channels_last", backward=True, benchmark=True, tag="c3",
                   source="the fp16 channels_last stem on 3 channels of pytorch#34736, through cudnnFind"),
              Case("conv2d", 4, 30, 30, (16, 16), 3, padding=1, groups=3, dtype="bfloat16",
                   memory_format="channels_last", backward=True, benchmark=True, tag="c30",
                   source="grouped bf16 channels_last with 10 channels per group, through cudnnFind"),
              Case("conv2d", 1, 128, 512, (135, 135), 5, padding=2, benchmark=True, tag="rtx8000",
                   source="Conv2d(128, 512, 5, padding=2) on 1x128x135x135 with benchmark on, which failed "
                          "on a Quadro RTX 8000 (pytorch#27115)")),
    *_trigger("int32_other_ops", (PT_ISSUE + "95024", PT_ISSUE + "132300", PT_ISSUE + "152816",
                                  PT_ISSUE + "22496"),
              Case("conv3d", 1, 64, 32, (362, 370, 251), 3, padding=1, dtype="float16", tag="n1",
                   source="Conv3d(64, 32, 3, padding=1) in fp16 on 1x64x362x370x251, 2.15e9 input elements: "
                          "no batch to split (pytorch#95024)"),
              Case("conv3d", 8, 128, 128, (32, 256, 256), 3, padding=1, dtype="bfloat16", tag="split",
                   source="a bf16 video conv3d of 2.1e9 elements per activation with a batch to split"),
              Case("conv3d", 1, 128, 128, (24, 1008, 1792), 3, padding=1, dtype="bfloat16",
                   memory_format="channels_last_3d", tag="out5g",
                   source="conv3d to a 1x128x24x1008x1792 output, 5.5e9 elements (pytorch#132300)"),
              Case("conv1d", 1, 512, 512, 4_300_000, 3, padding=1, dtype="float16", tag="n1",
                   source="a conv1d over 4.3e6 steps of 512 channels, 2.2e9 elements, batch 1"),
              Case("conv_transpose2d", 1, 64, 32, (4096, 4096), 4, stride=2, padding=1, dtype="float16",
                   tag="out2g", source="a 2x upsampling transposed conv to a 32x8192x8192 output (2.1e9)"),
              Case("conv_transpose3d", 1, 64, 64, (64, 256, 256), 4, stride=2, padding=1, dtype="float16",
                   tag="out4g", source="a 2x transposed 3D upsampling to 64x128x512x512, 2.1e9 output elements"),
              Case("conv2d", 1, 256, 256, (2900, 2900), 3, padding=1, groups=256, dtype="float16",
                   backward=True, tag="depthwise_n1",
                   source="a depthwise separable conv past 2^31 elements in one image (pytorch#152816)")),
    *_trigger("large_batch", (PT_ISSUE + "1059", PT_ISSUE + "11065", PT_ISSUE + "4107",
                              "https://docs.nvidia.com/deeplearning/cudnn/archives/cudnn-897/release-notes/index.html"),
              Case("conv2d", 1025, 512, 1, (4, 4), 4, bias=False, tag="b1025",
                   source="a DCGAN discriminator's last Conv2d(512, 1, 4, 1, 0, bias=False): batch 1024 ran, "
                          "1025 failed with NOT_SUPPORTED (pytorch#1059)"),
              Case("conv2d", 1024, 3, 64, (224, 224), 3, padding=1, bias=False, tag="b1024",
                   source="Conv2d(3, 64, 3, padding=1, bias=False) on a 1024x3x224x224 batch (pytorch#11065)"),
              Case("conv2d", 2048, 64, 64, (32, 32), 3, padding=1, dtype="float16",
                   memory_format="channels_last", backward=True, tag="b2048",
                   source="a batch of 2048 in fp16 channels_last, with backward"),
              Case("conv2d", 70000, 8, 8, (16, 16), 3, stride=2, padding=1, dtype="float16",
                   direction="backward_input", tag="dgrad_b70000",
                   source="backward data with batch > 65,535 and stride 2: cuDNN 8.9.7's release notes list "
                          "it as a NOT_SUPPORTED they fixed"),
              Case("conv2d", 131072, 2, 2, (1537, 1), (3, 1), stride=(2, 1), groups=2,
                   direction="backward_input", tag="b131072",
                   source="Conv2d(2, 2, (3, 1), stride=(2, 1), groups=2) on 131072x2x1537x1 from pytorch#4107")),
    *_trigger("autocast_out_not_mult8", (PT_ISSUE + "121834", PT_ISSUE + "126605"),
              Case("conv2d", 1, 8, 1, (546, 392), 3, autocast="float16", tag="out1",
                   source="Conv2d(8, 1, 3) under fp16 autocast on 1x8x546x392: torch 2.3.0's "
                          "'Plan failed' warning (pytorch#121834)"),
              Case("conv2d", 1, 8, 3, (546, 392), 3, autocast="float16", tag="out3",
                   source="the same with 3 output channels, which pytorch#121834 says did not warn"),
              Case("conv2d", 16, 64, 6, (80, 80), 3, padding=1, autocast="float16", backward=True,
                   tag="out6_bwd", source="fp16 autocast training step into 6 output channels (a detection "
                                          "head; the warning of pytorch#126605 came from backward)")),
    *_trigger("dilated_grouped", ("https://github.com/chainer/chainer/issues/7187", PT_ISSUE + "6901",
                                  PT_PULL + "7465"),
              Case("conv2d", 4, 32, 32, (16, 16), 3, padding=2, dilation=2, groups=4, tag="g4_d2",
                   source="32 channels in 4 groups, dilation 2: one of the combinations that failed "
                          "with CUDNN_NOT_SUPPORTED in chainer#7187"),
              Case("conv3d", 4, 32, 32, (16, 16, 16), 3, stride=2, padding=3, dilation=3, groups=8,
                   dtype="float16", backward=True, tag="g8_d3",
                   source="a strided fp16 3D conv in 8 groups with dilation 3, with backward"),
              Case("conv2d", 2, 64, 64, (64, 64), 3, padding=4, dilation=4, groups=8, dtype="bfloat16",
                   memory_format="channels_last", backward=True, tag="g8_d4",
                   source="a bf16 channels_last ASPP-style branch: dilation 4, 8 groups")),
    *_trigger("double_backward", (PT_ISSUE + "3064", PT_ISSUE + "3981", PT_ISSUE + "2659"),
              Case("conv2d", 50, 1, 16, (28, 28), 5, padding=2, direction="double_backward", tag="mnist",
                   source="Conv2d(1, 16, 5, 1, 2) on a batch of 50 MNIST images, grad of grad (pytorch#3064)"),
              Case("conv2d", 16, 64, 128, (32, 32), 4, stride=2, padding=1, autocast="float16",
                   direction="double_backward", tag="wgan_gp",
                   source="a WGAN-GP critic's strided conv under fp16 autocast"),
              Case("conv2d", 4, 128, 128, (64, 64), 3, padding=1, dtype="bfloat16", memory_format="channels_last",
                   direction="double_backward", tag="r1",
                   source="StyleGAN2's R1 penalty through a bf16 channels_last discriminator conv")),
    *_trigger("inductor", (PT_ISSUE + "121834", PT_ISSUE + "113786", PT_ISSUE + "184013"),
              Case("conv2d", 8, 64, 64, (56, 56), 3, padding=1, dtype="float16", memory_format="channels_last",
                   backward=True, bias=False, via="compile",
                   source="an fp16 channels_last conv with backward through torch.compile (pytorch#121834 saw "
                          "'Plan failed' under max-autotune)"),
              Case("conv3d", 1, 128, 128, (8, 64, 64), 3, padding=1, dtype="bfloat16", memory_format="channels_last_3d",
                   bias=False, via="compile", source="a bf16 video conv3d in channels_last_3d through torch.compile"),
              Case("conv_transpose2d", 2, 64, 32, (32, 32), 4, stride=2, padding=1, dtype="float16",
                   bias=False, via="compile", source="an fp16 transposed upsampling conv through torch.compile")),
    *_trigger("graph_capture", (PT_ISSUE + "96391", PT_ISSUE + "89546", "https://github.com/mstar-project/mstar/pull/55",
                                "https://github.com/ml-explore/mlx/pull/2385"),
              Case("conv3d", 1, 1, 1, (300, 300, 20), 3, padding=1, via="cuda_graph", tag="pytorch89546",
                   source="Conv3d(1, 1, 3, padding=1) on 1x1x300x300x20 captured in a CUDA graph (pytorch#89546)"),
              Case("conv2d", 8, 64, 64, (56, 56), 3, padding=1, dtype="float16", memory_format="channels_last",
                   via="cuda_graph", source="an fp16 channels_last conv replayed from a CUDA graph"),
              Case("conv2d", 8, 64, 64, (56, 56), 3, padding=1, dtype="bfloat16", benchmark=True,
                   via="cuda_graph", source="a bf16 conv whose plan cudnnFind chose before capture")),
)

_F16 = "float16"
_BF16 = "bfloat16"
_CL3 = "channels_last_3d"
_OTHER_HALF = {"float16": "bfloat16", "bfloat16": "float16"}


def _variants(cases: tuple[Case, ...]) -> tuple[Case, ...]:
    """Each workload case in both half types (fp16 beside bf16: mixed precision trains in either),
    and each of those again with cudnn.benchmark forced on: the plain case runs with the run's
    setting (off unless --cudnn-benchmark on), so a run sees both the GET (heuristics) and FIND
    (benchmark) paths of cuDNN's algorithm choice. The benchmark twins are gpu_only: on a CPU
    they would repeat their plain twin."""
    out: list[Case] = []
    for case in cases:
        halves = [case]
        if case.dtype in _OTHER_HALF:
            halves.append(dataclasses.replace(case, dtype=_OTHER_HALF[case.dtype]))
        for half in halves:
            out += [half, dataclasses.replace(half, benchmark=True, gpu_only=True)]
    return tuple(out)


# Real layer shapes, random weights, nothing downloaded.
_WORKLOAD_SHAPES: tuple[Case, ...] = (
    *_workload("sd_unet",
               Case("conv2d", 2, 4, 320, (64, 64), 3, padding=1, dtype=_F16, tag="sd15_conv_in",
                    source="SD 1.5 UNet conv_in, 512^2 image, CFG batch 2"),
               Case("conv2d", 2, 320, 320, (64, 64), 3, padding=1, dtype=_F16,
                    memory_format="channels_last", tag="sd15_res_320",
                    source="SD 1.5 ResNet block conv at 64^2 latents, channels_last"),
               Case("conv2d", 2, 640, 640, (32, 32), 3, stride=2, padding=1, dtype=_F16,
                    tag="sd15_down_640", source="SD 1.5 downsampler conv"),
               Case("conv2d", 2, 1280, 1280, (8, 8), 3, padding=1, dtype=_F16, tag="sd15_mid_1280",
                    source="SD 1.5 mid block conv"),
               Case("conv2d", 2, 4, 320, (128, 128), 3, padding=1, dtype=_F16, tag="sdxl_conv_in",
                    source="SDXL UNet conv_in, 1024^2 image"),
               Case("conv2d", 2, 1280, 1280, (32, 32), 3, padding=1, dtype="bfloat16",
                    backward=True, tag="sdxl_res_1280", source="SDXL ResNet block conv, bf16 training"),
               Case("conv2d", 2, 320, 4, (128, 128), 3, padding=1, dtype=_F16, tag="sdxl_conv_out",
                    source="SDXL UNet conv_out")),
    *_workload("vae_decoder",
               Case("conv2d", 1, 512, 512, (64, 64), 3, padding=1, dtype=_F16, tag="mid_512",
                    source="VAE decoder mid block conv, 512^2 output"),
               Case("conv2d", 1, 128, 128, (512, 512), 3, padding=1, dtype=_F16, tag="out512_128",
                    source="VAE decoder last up block conv at 512^2"),
               Case("conv2d", 1, 128, 128, (1024, 1024), 3, padding=1, dtype=_F16,
                    tag="out1024_128", source="VAE decoder last up block conv at 1024^2"),
               Case("conv2d", 1, 256, 256, (1024, 1024), 3, padding=1, dtype=_F16,
                    tag="out2048_256", source="VAE decoder 256-channel up block for a 2048^2 output"),
               Case("conv2d", 1, 128, 128, (2048, 2048), 3, padding=1, dtype=_F16,
                    tag="out2048_128", source="VAE decoder last up block conv at 2048^2"),
               Case("conv2d", 1, 128, 3, (2048, 2048), 3, padding=1, dtype=_F16,
                    tag="out2048_conv_out", source="VAE decoder conv_out at 2048^2"),
               sources=("https://github.com/microsoft/onnxruntime/issues/15715",)),
    *_workload("video_temporal",
               Case("conv3d", 2, 320, 320, (16, 64, 64), (3, 1, 1), padding=(1, 0, 0), dtype=_F16,
                    tag="animatediff_320", source="temporal conv over 16 frames of 64^2 latents"),
               Case("conv3d", 1, 512, 512, (14, 72, 128), 3, padding=1, dtype=_F16,
                    tag="svd_decoder_512", source="SVD-style 3D decoder conv, 14 frames"),
               Case("conv3d", 1, 128, 128, (14, 576, 1024), (3, 1, 1), padding=(1, 0, 0),
                    dtype=_F16, tag="svd_decoder_128",
                    source="temporal decoder conv over 14 frames at 576x1024"),
               # Video VAEs decode in bf16 with full 3x3x3 (causal) convs at production sizes, and
               # channels_last_3d is what their training and compiled decoders run in.
               Case("conv3d", 1, 512, 512, (13, 60, 90), 3, padding=1, dtype=_BF16, memory_format=_CL3,
                    tag="cogvideox_dec_512",
                    source="CogVideoX-style VAE decoder conv: 512 channels, 13 latent frames at 60x90"),
               Case("conv3d", 1, 128, 128, (9, 720, 1280), 3, padding=1, dtype=_BF16, memory_format=_CL3,
                    tag="dec_720p_128", source="a video VAE's last up block at 720p, 9 frames (1.06e9 "
                                              "elements per activation)"),
               Case("conv3d", 1, 256, 256, (17, 240, 416), 3, padding=1, dtype=_BF16, memory_format=_CL3,
                    backward=True, tag="dec_train_256",
                    source="a video VAE's 256-channel 3D conv at 480x832 / 2, with backward (VAE training)"),
               Case("conv3d", 1, 16, 16, (124, 1282, 722), (1, 3, 3), padding=(0, 1, 1), dtype=_BF16,
                    tag="pytorch163539", source="the bf16 conv3d whose results went wrong with the cuDNN "
                                                "9.10.2 upgrade, 1x16x124x1282x722 (pytorch#163539)"),
               sources=(PT_ISSUE + "163539", PT_ISSUE + "166643", "https://github.com/zai-org/CogVideo/issues/219")),
    *_workload("whisper_frontend",
               Case("conv1d", 1, 80, 384, 3000, 3, padding=1, dtype=_F16, tag="tiny_conv1",
                    source="Whisper tiny conv1: 80 mel bins to 384, 30 s of audio"),
               Case("conv1d", 1, 384, 384, 3000, 3, stride=2, padding=1, dtype=_F16,
                    tag="tiny_conv2", source="Whisper tiny conv2, stride 2"),
               Case("conv1d", 1, 80, 512, 3000, 3, padding=1, dtype=_F16, tag="base_conv1",
                    source="Whisper base conv1: 80 mel bins to 512"),
               Case("conv1d", 1, 512, 512, 3000, 3, stride=2, padding=1, dtype=_F16,
                    tag="base_conv2", source="Whisper base conv2, stride 2")),
    *_workload("patch_embed",
               Case("conv2d", 8, 3, 768, (224, 224), 16, stride=16, dtype=_F16, tag="vit_b16",
                    source="ViT-B/16 patch embedding"),
               Case("conv2d", 8, 3, 1024, (224, 224), 14, stride=14, dtype=_F16, tag="clip_l14",
                    source="CLIP ViT-L/14 patch embedding"),
               Case("conv2d", 8, 3, 768, (224, 224), 32, stride=32, dtype=_F16, tag="vit_b32",
                    source="ViT-B/32 patch embedding"),
               Case("conv2d", 8, 3, 1024, (336, 336), 14, stride=14, dtype="bfloat16",
                    tag="clip_l14_336", source="CLIP ViT-L/14 at 336^2, bf16")),
    *_workload("stylegan_transposed",
               Case("conv_transpose2d", 1, 4 * 512, 4 * 512, (32, 32), 3, stride=2, groups=4,
                    backward=True, tag="b4_512ch",
                    source="StyleGAN2 modulated upsampling conv, batch 4 as groups, 512 channels"),
               Case("conv_transpose2d", 1, 4 * 64, 4 * 32, (256, 256), 3, stride=2, groups=4,
                    dtype=_F16, tag="b4_64ch", source="StyleGAN2 upsampling at 512^2 output, fp16"),
               Case("conv_transpose2d", 1, 4 * 32, 4 * 32, (512, 512), 3, stride=2, groups=4,
                    dtype=_F16, tag="b4_32ch_1024",
                    source="StyleGAN2 (config-f) upsampling to the 1024^2 output, batch 4 as groups"),
               Case("conv2d", 1, 4 * 32, 4 * 32, (1024, 1024), 3, padding=1, groups=4, dtype=_F16,
                    backward=True, tag="b4_32ch_conv_1024",
                    source="StyleGAN2's modulated 3x3 conv at 1024^2, batch 4 as groups, with backward"),
               sources=("https://github.com/rosinality/stylegan2-pytorch/issues/30",
                        "https://github.com/rosinality/stylegan2-pytorch/issues/349")),
)

WORKLOAD_CASES: tuple[Case, ...] = _variants(_WORKLOAD_SHAPES)


def _with_pairs(cases: tuple[Case, ...]) -> tuple[Case, ...]:
    """Each case past 2^31 - 1 elements followed by its boundary pair (boundary.int32_pair): the
    largest batch (or last extent) within the bound and the next, their ids the case's with
    `below2g` / `above2g` (the case's own id, a key of results and history, stays as it is). A
    case whose weight alone is past the bound has no pair. The pairs run on a GPU only: scaled
    down for the CPU they would repeat the case's scaled twin."""
    int32_pair = _sibling("boundary").int32_pair
    out: list[Case] = []
    for case in cases:
        out.append(case)
        if case.over_int32 and case.edge is None:
            try:
                below, above = int32_pair(case)
            except ValueError:
                continue
            out += [dataclasses.replace(below, edge="below"), dataclasses.replace(above, edge="above")]
    return tuple(out)


CASES: tuple[Case, ...] = _with_pairs(BASE_CASES + TRIGGER_CASES + WORKLOAD_CASES)


def _check_unique(cases: tuple[Case, ...]) -> None:
    seen: dict[str, Case] = {}
    for case in cases:
        if case.id in seen:
            raise ValueError(f"duplicate case id {case.id}: {seen[case.id]!r} and {case!r}")
        seen[case.id] = case


_check_unique(CASES)


# --- the zoo (issue 50): suites/models/*.json, recorded from public models' own code -------------

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
# What a case is for the catalogue's dedup: everything that reaches the convolution (op, shapes,
# strides, dtype, direction, knobs), not why it exists or what it is called.
_NOT_IDENTITY = ("source", "sources", "tag", "prefix", "trigger", "workload", "model", "edge", "gpu_only")


def identity(case: Case) -> tuple[Any, ...]:
    """The case as the device sees it: two cases of one identity run the same convolution the same
    way. Sizes are expanded per dimension, so 3 and (3, 3) are one kernel."""
    fields = dataclasses.asdict(case)
    for name in ("size", "kernel", "stride", "padding", "dilation", "output_padding"):
        fields[name] = case.expand(fields[name])
    fields["direction"] = case.kind
    fields.pop("backward")
    return tuple(sorted((k, v) for k, v in fields.items() if k not in _NOT_IDENTITY))


def _zoo(folder: str) -> tuple[Case, ...]:
    """The zoo's cases: each suites/models/<model>.json (a case file, its provenance table naming
    the package, version, config and inputs it was recorded from; `nox -s models` regenerates them)
    loaded as a user's case file is, each case marked with its model (the file's stem). A missing
    folder is no zoo (a suite copied without it still runs)."""
    if not os.path.isdir(folder):
        return ()
    casefile = _sibling("casefile")
    paths = sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".json"))
    cases = casefile.load(paths, Case, taken=[case.id for case in CASES])
    return tuple(dataclasses.replace(case, model=case.prefix) for case in cases)


ZOO_CASES: tuple[Case, ...] = _zoo(MODELS_DIR)
_check_unique(CASES + ZOO_CASES)


def groups_kind(case: Case) -> str:
    """"1", "depthwise" or "grouped": what of groups picks a CPU kernel."""
    return "1" if case.groups == 1 else ("depthwise" if case.depthwise else "grouped")


def cpu_signature(case: Case) -> tuple[Any, ...]:
    """What of a case picks the CPU's code path (ATen's and oneDNN's kernels, the suite's own
    building of views, formats and autocast), not its sizes: op (its rank, transposed or not),
    dtype, autocast, direction, groups kind, memory formats, layout, bias, the input's and the
    weight's views, how the conv is called. The sizes, strides and paddings a zoo case brings are
    what cuDNN's algorithm choice reads, and a CPU never runs cuDNN."""
    return (case.op, case.dtype, case.autocast, case.kind, groups_kind(case), case.memory_format,
            case.weight_memory_format, case.layout, case.bias, case.input_strides is not None,
            case.weight_strides is not None, case.via)


def runs_on_cpu(case: Case) -> bool:
    """Whether a default CPU run runs the case (not skipped as needing CUDA or -m compiled)."""
    return not case.needs_gpu and case.via != "compile"


def zoo_cpu_stand_ins(catalogue: tuple[Case, ...] = CASES,
                      zoo: tuple[Case, ...] = ZOO_CASES) -> dict[str, str]:
    """What keeps a CPU run's time with the zoo, by construction: on the CPU the zoo runs one case
    per cpu_signature the catalogue's CPU cases lack (the first in the zoo's order: files by name,
    cases as written). Each other zoo case maps here to the case that stands in for it there: the
    catalogue's first case of its signature, else the zoo's. So the zoo adds at most one CPU case
    per new signature (15 for the 328 of 2026-12), however many cases it records; a GPU runs every
    zoo case at its own full size."""
    first: dict[tuple[Any, ...], str] = {}
    for case in catalogue:
        if runs_on_cpu(case):
            first.setdefault(cpu_signature(case), case.id)
    stand_ins: dict[str, str] = {}
    for case in zoo:
        if not runs_on_cpu(case):
            continue
        key = cpu_signature(case)
        if key in first:
            stand_ins[case.id] = first[key]
        else:
            first[key] = case.id
    return stand_ins
