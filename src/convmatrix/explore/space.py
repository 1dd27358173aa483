"""The configurations explore draws: one convolution with everything a case file can say about it
(suites/casefile.py), drawn around what is known to be fragile, and the one order of simplicity
that shrinking follows (docs/explore.md).

A Config is valid by construction: groups divide both channel counts, every output extent is at
least 1, a transposed conv's output padding is below its stride or dilation, a channels-last
format only where the rank has one. `entry` writes it as a case file's `[[case]]` table, which
the suite checks again before any case runs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

OPS = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
# Simplest first: the order shrinking lowers a dtype, a layout or a direction by.
DTYPES = ("float32", "float16", "bfloat16")
DIRECTIONS = ("forward", "backward_input", "backward_weight", "backward", "double_backward")
LAYOUTS = ("contiguous", "channels_last", "channels_last_3d")
KNOBS = ("benchmark", "deterministic", "allow_tf32")
# Autocast runs a float32 conv in a lower dtype (the catalogue's rule: autocast takes float32 inputs);
# none is simplest.
AUTOCASTS = (None, "float16", "bfloat16")
# Explicit views of a contiguous input (the catalogue's layouts, suites/test_conv.place_input): same
# values, other strides; none is simplest. `transposed` (N and C swapped in memory) needs both at 2 or more.
VIEWS = (None, "permuted", "sliced", "transposed", "nhwc_strided")

# Values known to be fragile (docs/explore.md: where each comes from): channel counts on and off
# multiples of 8 (tensor-core paths pad or refuse them), odd kernels, strides and dilations past 1,
# spatial extents around powers of two.
CHANNELS = (1, 2, 3, 4, 5, 7, 8, 12, 15, 16, 24, 31, 32, 33, 48, 63, 64, 96, 127, 128)
KERNELS = (1, 2, 3, 3, 5, 7)
STRIDES = (1, 1, 1, 2, 3)
DILATIONS = (1, 1, 1, 2, 3)
EXTENTS = {1: (1, 3, 7, 8, 16, 17, 31, 32, 64, 100, 127, 128, 255, 256), 2: (1, 3, 7, 8, 16, 17, 31, 32, 33, 64),
           3: (1, 2, 3, 4, 7, 8, 9, 16)}
BATCHES = (1, 1, 2, 3, 4, 8, 16)
# Rare, on purpose: the batch past 1,024 and the extent near 65,535 that 32-bit grid limits meet.
# The CPU lane runs such a case scaled down (suites/README.md, Sizing); a GPU runs it as drawn.
BIG_BATCH, BIG_EXTENT = 1025, 65_535


@dataclass(frozen=True)
class Config:
    op: str
    batch: int
    in_channels: int
    out_channels: int
    size: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    output_padding: tuple[int, ...]
    groups: int = 1
    dtype: str = "float32"
    memory_format: str = "contiguous"
    direction: str = "forward"
    benchmark: bool | None = None  # None: the run's own setting (every knob at its default)
    deterministic: bool | None = None
    allow_tf32: bool | None = None
    autocast: str | None = None  # these last, left out of as_json when None: older tried lines stay keyed
    layout: str | None = None

    @property
    def rank(self) -> int:
        return len(self.size)

    @property
    def transposed(self) -> bool:
        return self.op.startswith("conv_transpose")

    @property
    def output(self) -> tuple[int, ...]:
        made = []
        for i in range(self.rank):
            k, s, p, d = self.kernel[i], self.stride[i], self.padding[i], self.dilation[i]
            if self.transposed:
                made.append((self.size[i] - 1) * s - 2 * p + d * (k - 1) + self.output_padding[i] + 1)
            else:
                made.append((self.size[i] + 2 * p - d * (k - 1) - 1) // s + 1)
        return tuple(made)

    @property
    def elements(self) -> int:
        """The input's and the weight's elements together: what `fewer and smaller` counts."""
        weight_in = self.in_channels if not self.transposed else self.out_channels
        n = self.batch * self.in_channels
        for extent in self.size:
            n *= extent
        w = self.out_channels * (weight_in // self.groups)
        for extent in self.kernel:
            w *= extent
        return n + w


def valid(config: Config) -> bool:
    c = config
    numbers = (c.batch, c.in_channels, c.out_channels, c.groups, *c.size, *c.kernel, *c.stride, *c.padding,
               *c.dilation, *c.output_padding)
    if any(type(n) is not int for n in numbers) or any(type(getattr(c, k)) not in (bool, type(None)) for k in KNOBS):
        return False  # a configuration read back from a file (the tried log) is checked as one drawn
    dims = c.rank
    if c.op not in OPS or dims != int(c.op[-2]) or not 1 <= dims <= 3:
        return False
    if any(len(t) != dims for t in (c.kernel, c.stride, c.padding, c.dilation, c.output_padding)):
        return False
    if min(c.batch, c.in_channels, c.out_channels, c.groups, *c.size, *c.kernel, *c.stride, *c.dilation) < 1:
        return False
    if min(*c.padding, *c.output_padding) < 0 or c.in_channels % c.groups or c.out_channels % c.groups:
        return False
    if c.transposed:
        if any(op >= max(s, d) for op, s, d in zip(c.output_padding, c.stride, c.dilation, strict=True)):
            return False
    elif any(c.output_padding):
        return False
    if (c.memory_format == "channels_last" and dims != 2) or (c.memory_format == "channels_last_3d" and dims != 3):
        return False
    if c.dtype not in DTYPES or c.direction not in DIRECTIONS or c.memory_format not in LAYOUTS:
        return False
    if c.autocast not in AUTOCASTS or (c.autocast is not None and c.dtype != "float32"):
        return False
    if c.layout not in VIEWS or (c.layout is not None and c.memory_format != "contiguous"):
        return False
    if c.layout == "transposed" and min(c.batch, c.in_channels) < 2:
        return False
    return min(c.output) >= 1


# On a runner without a GPU the cells run on the CPU: cuDNN is never exercised, a case that sets
# TF32 skips there (suites/README.md), and a large conv costs seconds on each side; what is fragile
# there is the shape's divisibility and the path picked, not its size.
CPU_CHANNELS, CPU_EXTENT = 32, 32


def draw(rng: random.Random, *, cuda: bool = True) -> Config:
    """One configuration around the fragile values; redrawn until valid (a few tries at most).
    cuda False: for cells that run on the CPU (no TF32 knob, no large sizes)."""
    while True:
        made = _draw(rng)
        if not cuda:
            made = for_cpu(made)
        if valid(made):
            return made


def _small(channels: int) -> int:
    """A channel count at most CPU_CHANNELS with the same remainder modulo 8 (and 32)."""
    return channels if channels <= CPU_CHANNELS else channels % CPU_CHANNELS or CPU_CHANNELS


def for_cpu(config: Config) -> Config:
    """The configuration as a CPU cell gets it: no TF32, batch at most 16, extents at most
    CPU_EXTENT, channels at most CPU_CHANNELS (their remainder modulo 8 kept; depthwise stays
    depthwise, grouped stays grouped)."""
    c = config
    small_in = _small(c.in_channels)
    if c.groups > 1 and c.groups == c.in_channels:
        groups, in_channels, out_channels = small_in, small_in, small_in * (c.out_channels // c.in_channels)
    else:
        groups = c.groups
        in_channels = max(groups, small_in // groups * groups)
        out_channels = max(groups, _small(c.out_channels) // groups * groups)
    return dataclasses.replace(c, allow_tf32=None, batch=min(c.batch, 16), groups=groups, in_channels=in_channels,
                               out_channels=out_channels, size=tuple(min(e, CPU_EXTENT) for e in c.size))


def _draw(rng: random.Random) -> Config:
    dims = rng.choice((1, 2, 2, 2, 3, 3))
    transposed = rng.random() < 0.25
    op = f"conv_transpose{dims}d" if transposed else f"conv{dims}d"
    same = rng.random() < 0.8

    def per_dim(values: tuple[int, ...]) -> tuple[int, ...]:
        first = rng.choice(values)
        return tuple(first if same else rng.choice(values) for _ in range(dims))

    kernel, stride, dilation = per_dim(KERNELS), per_dim(STRIDES), per_dim(DILATIONS)
    size = tuple(rng.choice(EXTENTS[dims]) for _ in range(dims))
    if rng.random() < 0.02:
        size = (*size[:-1], BIG_EXTENT if dims == 1 else 2049)
    padding = tuple(rng.choice((0, (k - 1) * d // 2, 1)) for k, d in zip(kernel, dilation, strict=True))
    output_padding = tuple(rng.choice((0, max(s, d) - 1)) if transposed else 0
                           for s, d in zip(stride, dilation, strict=True))
    in_channels, out_channels = rng.choice(CHANNELS), rng.choice(CHANNELS)
    groups = 1
    shape = rng.random()
    if shape < 0.2:  # depthwise: a group per input channel, a multiplier of outputs
        groups = in_channels
        out_channels = in_channels * rng.choice((1, 1, 2))
    elif shape < 0.35:
        groups = rng.choice((2, 3, 4, 8))
        in_channels = groups * rng.choice((1, 2, 3, 4, 8))
        out_channels = groups * rng.choice((1, 2, 3, 4))
    batch = BIG_BATCH if rng.random() < 0.03 else rng.choice(BATCHES)
    layouts = {2: "channels_last", 3: "channels_last_3d"}
    memory_format = layouts[dims] if dims in layouts and rng.random() < 0.3 else "contiguous"

    def knob() -> bool | None:
        return rng.choice((None, None, True, False))

    dtype = rng.choice(("float32", "float32", "float16", "bfloat16"))
    autocast = rng.choice(AUTOCASTS[1:]) if dtype == "float32" and rng.random() < 0.3 else None
    layout = rng.choice(VIEWS[1:]) if memory_format == "contiguous" and rng.random() < 0.25 else None
    if layout == "transposed" and min(batch, in_channels) < 2:
        layout = None
    return Config(op=op, batch=batch, in_channels=in_channels, out_channels=out_channels, size=size,
                  kernel=kernel, stride=stride, padding=padding, dilation=dilation, output_padding=output_padding,
                  groups=groups, dtype=dtype, autocast=autocast, layout=layout,
                  memory_format=memory_format,
                  direction=rng.choice(("forward", "forward", "backward", "backward_input", "backward_weight",
                                        "double_backward")),
                  benchmark=knob(), deterministic=knob(), allow_tf32=knob())


def simplicity(config: Config) -> tuple[Any, ...]:
    """The one order of simplicity (docs/explore.md), smaller is simpler: lower rank, not
    transposed, fewer elements (input and weight), then a simpler dtype, layout and direction, then
    fewer knobs away from their default, then smaller kernel, stride, dilation, padding, output
    padding and groups (each the sum over its dimensions), then the values themselves (a total order)."""
    c = config
    set_knobs = sum(getattr(c, k) is not None for k in KNOBS)
    return (c.rank, c.transposed, c.elements, DTYPES.index(c.dtype), AUTOCASTS.index(c.autocast),
            LAYOUTS.index(c.memory_format) > 0, VIEWS.index(c.layout),
            DIRECTIONS.index(c.direction), set_knobs, sum(c.kernel), sum(c.stride), sum(c.dilation), sum(c.padding),
            sum(c.output_padding), c.groups, c.batch, c.in_channels, c.out_channels, c.size, c.kernel,
            tuple(str(getattr(c, k)) for k in KNOBS))


def facts(config: Config) -> dict[str, Any]:
    """The fields a region is stated over, and a planted predicate reads (one value each)."""
    c = config
    return {"op": c.op, "rank": c.rank, "transposed": c.transposed, "batch": c.batch,
            "in_channels": c.in_channels, "out_channels": c.out_channels, "groups": c.groups,
            "depthwise": c.groups > 1 and c.groups == c.in_channels, "kernel": max(c.kernel),
            "stride": max(c.stride), "dilation": max(c.dilation), "padding": max(c.padding),
            "size": max(c.size), "dtype": c.dtype, "autocast": c.autocast, "memory_format": c.memory_format,
            "layout": c.layout,
            "direction": c.direction,
            "benchmark": c.benchmark, "deterministic": c.deterministic, "allow_tf32": c.allow_tf32}


def entry(config: Config, name: str) -> dict[str, Any]:
    """The configuration as a case file's [[case]] table (suites/casefile.py's keys)."""
    c = config
    made: dict[str, Any] = {"name": name, "op": c.op, "input": [c.batch, c.in_channels, *c.size],
                            "out_channels": c.out_channels, "kernel": list(c.kernel), "stride": list(c.stride),
                            "padding": list(c.padding), "dilation": list(c.dilation), "groups": c.groups,
                            "dtype": c.dtype, "memory_format": c.memory_format, "direction": c.direction}
    if c.transposed:
        made["output_padding"] = list(c.output_padding)
    if c.autocast is not None:
        made["autocast"] = c.autocast
    if c.layout is not None:
        made["layout"] = c.layout
    for knob in KNOBS:
        if getattr(c, knob) is not None:
            made[knob] = getattr(c, knob)
    return made


# Fields added after the tried log's first lines: written only when set, read as unset when absent, so
# that a configuration drawn before keeps its key (and explore never repeats itself across an upgrade).
LATER = {"autocast": None, "layout": None}


def as_json(config: Config) -> dict[str, Any]:
    made = {f.name: list(v) if isinstance(v := getattr(config, f.name), tuple) else v for f in fields(Config)}
    return {k: v for k, v in made.items() if k not in LATER or v != LATER[k]}


def from_json(data: Mapping[str, Any]) -> Config:
    """A Config as as_json wrote it (the tried log, a stored history row); ValueError if it is not one."""
    try:
        data = {**LATER, **data}
        values: dict[str, Any] = {f.name: tuple(data[f.name]) if isinstance(data[f.name], list) else data[f.name]
                                  for f in fields(Config)}
        made = Config(**values)
        usable = valid(made) and hash(made) is not None  # a list left inside a tuple is no configuration
    except (KeyError, TypeError) as exc:  # the file is not trusted: a wrong type anywhere is "not one"
        raise ValueError(f"not a configuration: {exc}") from None
    if not usable:
        raise ValueError("not a valid configuration")
    return made


def key(config: Config) -> str:
    """A short stable name for a configuration: what the tried log and the history store."""
    return hashlib.sha256(json.dumps(as_json(config), sort_keys=True).encode()).hexdigest()[:16]


