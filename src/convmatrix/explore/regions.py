"""Regions, not only points: after the budget, where a family's failures lie, stated over the
configurations' fields (space.facts) as one conjunction of simple conditions, with how many
configurations were tried inside it and outside it (docs/explore.md).

The conditions are the ones a person writes: a field equal or not to a value, a number at least or
at most a bound, a channel count on or off a multiple of 8. The region is grown greedily: every
condition that all of the family's failures meet is a candidate; the one that leaves out the most
passing configurations is taken, until none leaves out more; then any condition the others make
redundant is dropped. With enough configurations drawn around a planted predicate, its region is
the predicate."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from convmatrix.explore.space import Config, facts

NUMERIC = ("rank", "batch", "in_channels", "out_channels", "groups", "kernel", "stride", "dilation", "padding", "size")
MULTIPLE = ("in_channels", "out_channels")  # tensor-core paths want multiples of 8


@dataclass(frozen=True)
class Condition:
    text: str
    holds: Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Region:
    family: str
    conditions: tuple[str, ...]
    inside: int  # configurations tried inside the region
    inside_failing: int  # of them, failing with the family
    outside: int
    outside_failing: int

    def line(self) -> str:
        said = " and ".join(self.conditions) or "(anywhere: no condition separates it)"
        return (f"{self.family}: {said} -- {self.inside_failing} of {self.inside} tried inside fail, "
                f"{self.outside_failing} of {self.outside} outside")


def _at_least(name: str, bound: int) -> Condition:
    return Condition(f"{name} >= {bound}", lambda f: bool(f[name] >= bound))


def _at_most(name: str, bound: int) -> Condition:
    return Condition(f"{name} <= {bound}", lambda f: bool(f[name] <= bound))


def _multiple(name: str, on: bool) -> Condition:
    return Condition(f"{name} % 8 {'==' if on else '!='} 0", lambda f: (f[name] % 8 == 0) == on)


def _equal(name: str, value: Any) -> Condition:
    return Condition(f"{name} = {_shown(value)}", lambda f: bool(f[name] == value))


def conditions(failing: Sequence[Mapping[str, Any]]) -> list[Condition]:
    """Every condition all the failing configurations meet."""
    made: list[Condition] = []
    for name in failing[0]:
        values = {f[name] for f in failing}
        if name in NUMERIC:
            made += [_at_least(name, min(values)), _at_most(name, max(values))]
            if name in MULTIPLE and all(v % 8 for v in values):
                made.append(_multiple(name, False))
            if name in MULTIPLE and not any(v % 8 for v in values):
                made.append(_multiple(name, True))
        elif len(values) == 1:
            made.append(_equal(name, next(iter(values))))
    return made


def _shown(value: Any) -> str:
    return "default" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def region(family: str, tried: Sequence[tuple[Config, str | None]]) -> Region:
    """The region of one family over what was tried (each configuration with its family or None)."""
    rows = [(facts(c), got == family) for c, got in tried]
    failing = [f for f, bad in rows if bad]
    chosen: list[Condition] = []
    if failing:
        pool = conditions(failing)
        inside = [f for f, bad in rows if not bad]
        while inside:
            best = max(pool, key=lambda c: sum(not c.holds(f) for f in inside), default=None)
            if best is None or all(best.holds(f) for f in inside):
                break
            chosen.append(best)
            inside = [f for f in inside if best.holds(f)]
        passing = [f for f, bad in rows if not bad]
        for cond in list(chosen):  # drop what the others already say
            rest = [c for c in chosen if c is not cond]
            if sum(all(c.holds(f) for c in rest) for f in passing) == sum(all(c.holds(f) for c in chosen)
                                                                         for f in passing):
                chosen = rest
    within = [bad for f, bad in rows if all(c.holds(f) for c in chosen)]
    without = [bad for f, bad in rows if not all(c.holds(f) for c in chosen)]
    return Region(family=family, conditions=tuple(c.text for c in chosen), inside=len(within),
                  inside_failing=sum(within), outside=len(without), outside_failing=sum(without))
