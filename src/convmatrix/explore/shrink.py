"""Shrinking a failing configuration to a minimal one (docs/explore.md): each round proposes every
configuration one step simpler (space.simplicity) than the best so far, runs them all as one
batch (one suite invocation per cell), and keeps the simplest that still fails with the same
family; it stops when none does. A round's steps, each alone:

- structure: one rank lower (the last spatial dimension dropped), not transposed, float32 (then
  float16 before bfloat16), contiguous, a simpler direction, each knob back to its default;
- each number lowered: to its least, to its half, by one and by two, and midway (batch, both
  channel counts, groups, and per dimension the extent, kernel, stride, padding, dilation and
  output padding); channel counts and groups move together where groups must divide them.

Lowering by one among the steps makes the result minimal under the order for each single field
(no one-step-simpler configuration fails), which is what a planted predicate's threshold needs."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from convmatrix.explore.space import AUTOCASTS, DIRECTIONS, DTYPES, KNOBS, VIEWS, Config, simplicity, valid

# Judges a batch of configurations: for each, the family it fails with on the candidate and not on
# the control, or None.
Judge = Callable[[Sequence[Config]], list[str | None]]


@dataclass(frozen=True)
class Shrunk:
    config: Config
    family: str
    rounds: int  # suite invocations (batches) it took
    tried: int  # configurations run
    seen: tuple[tuple[Config, str | None], ...] = ()  # each configuration run, with what it found


def lower(value: int, least: int) -> list[int]:
    """The values a number steps down to: its least, half, one and two less, midway."""
    found = {least, value // 2, value - 1, value - 2, (value + least) // 2}
    return sorted(v for v in found if least <= v < value)


def steps(config: Config) -> Iterator[Config]:
    c = config
    if c.rank > 1:
        dims = c.rank - 1
        yield replace(c, op=c.op[:-2] + f"{dims}d", size=c.size[:-1], kernel=c.kernel[:-1], stride=c.stride[:-1],
                      padding=c.padding[:-1], dilation=c.dilation[:-1], output_padding=c.output_padding[:-1],
                      memory_format="contiguous")
    if c.transposed:
        yield replace(c, op=c.op.replace("conv_transpose", "conv"), output_padding=(0,) * c.rank)
    for dtype in DTYPES[:DTYPES.index(c.dtype)]:
        yield replace(c, dtype=dtype, autocast=None)
    for autocast in AUTOCASTS[:AUTOCASTS.index(c.autocast)]:
        yield replace(c, autocast=autocast)
    for layout in VIEWS[:VIEWS.index(c.layout)]:
        yield replace(c, layout=layout)
    if c.memory_format != "contiguous":
        yield replace(c, memory_format="contiguous")
    for direction in DIRECTIONS[:DIRECTIONS.index(c.direction)]:
        yield replace(c, direction=direction)
    for knob in KNOBS:
        if getattr(c, knob) is not None:
            yield changed(c, knob, None)
    for batch in lower(c.batch, 1):
        yield replace(c, batch=batch)
    g = c.groups
    for channels in lower(c.in_channels, g):
        if channels % g == 0:
            yield replace(c, in_channels=channels)
    for channels in lower(c.out_channels, g):
        if channels % g == 0:
            yield replace(c, out_channels=channels)
    for groups in lower(g, 1):
        # Fewer groups with the same channels where they divide them, else the channels follow
        # (a depthwise conv stays depthwise: in = groups, out = groups x its multiplier).
        yield replace(c, groups=groups)
        yield replace(c, groups=groups, in_channels=c.in_channels * groups // g,
                      out_channels=c.out_channels * groups // g)
        # One side follows, the other stays: from a depthwise 3 -> 3 the plain 3 -> 1 is one step,
        # not two (each of which alone adds elements and so is no simpler).
        yield replace(c, groups=groups, out_channels=c.out_channels * groups // g)
        yield replace(c, groups=groups, in_channels=c.in_channels * groups // g)
    for name, least in (("size", 1), ("kernel", 1), ("stride", 1), ("padding", 0), ("dilation", 1),
                        ("output_padding", 0)):
        values = getattr(c, name)
        for i, value in enumerate(values):
            for v in lower(value, least):
                yield changed(c, name, (*values[:i], v, *values[i + 1:]))


def changed(config: Config, name: str, value: Any) -> Config:
    """config with one field, named at run time, set to value."""
    fields: dict[str, Any] = {name: value}
    return replace(config, **fields)


def simpler(config: Config) -> list[Config]:
    """Every valid configuration one step simpler than config, simplest first, each once."""
    here = simplicity(config)
    seen: dict[Config, None] = {}
    for made in steps(config):
        if made not in seen and valid(made) and simplicity(made) < here:
            seen[made] = None
    return sorted(seen, key=simplicity)


def shrink(config: Config, family: str, judge: Judge, *, max_rounds: int = 100) -> Shrunk:
    """config fails with family: the minimal configuration reached that fails with it too."""
    best, rounds, tried = config, 0, 0
    seen: list[tuple[Config, str | None]] = []
    while rounds < max_rounds:
        proposed = simpler(best)
        if not proposed:
            break
        said = judge(proposed)
        rounds, tried = rounds + 1, tried + len(proposed)
        seen += zip(proposed, said, strict=True)
        kept = [made for made, got in zip(proposed, said, strict=True) if got == family]
        if not kept:
            break
        best = kept[0]  # proposed is simplest first
    return Shrunk(config=best, family=family, rounds=rounds, tried=tried, seen=tuple(seen))
