"""Remedy knobs as a matrix axis: `[axes] knobs = ["default", "pad=8", "channels_last=on,deterministic=on"]`.

A knob set is the suite's remedy and algorithm-picker options (suites/README.md) for one cell:
each cell of the axis runs the suite with its set, its id carries a suffix naming it (`+pad8`),
and the suite records the knobs on every results line. `default` is no option at all: the
suite's own defaults, and no suffix, so matrices without the axis keep their ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT = "default"

# knob name -> (the suite option it sets, the pattern of its value, the id token's prefix).
# The order is the canonical one: "deterministic=on,channels_last=on" and its reverse are one cell.
_KNOBS: dict[str, tuple[str, str, str]] = {
    "benchmark": ("--cudnn-benchmark", "on|off", "bench_"),
    "deterministic": ("--cudnn-deterministic", "on|off", "det_"),
    "channels_last": ("--channels-last", "on|off", "cl_"),
    "pad": ("--pad-channels", "[1-9][0-9]{0,3}", "pad"),
}
NAMES = tuple(_KNOBS)
_ITEM = "|".join(f"{name}=(?:{value})" for name, (_, value, _) in _KNOBS.items())
# ASCII only, anchored (fullmatch): the set becomes suite arguments and part of a directory name.
PATTERN = re.compile(rf"{DEFAULT}|(?:{_ITEM})(?:,(?:{_ITEM}))*", re.ASCII)
EXPECTED = ("'default' or name=value pairs joined by commas, e.g. pad=8 or channels_last=on,deterministic=on "
            f"(names: {', '.join(NAMES)}; on|off, pad a multiple up to 9999)")


@dataclass(frozen=True, kw_only=True)
class KnobSet:
    """One knob set, in canonical order; empty is the default."""

    items: tuple[tuple[str, str], ...] = ()

    @property
    def text(self) -> str:
        """The canonical spelling ("" for the default): what Cell.knobs and cell.json hold."""
        return ",".join(f"{name}={value}" for name, value in self.items)

    @property
    def suffix(self) -> str:
        """The cell id's suffix: "+pad8", "+cl_on+det_on"; "" for the default."""
        return "".join(f"+{_KNOBS[name][2]}{value}" for name, value in self.items)

    def suite_args(self) -> tuple[str, ...]:
        return tuple(arg for name, value in self.items for arg in (_KNOBS[name][0], value))


def problem(text: str) -> str | None:
    """What is wrong with a knob set's spelling beyond the pattern (a knob given twice), or None."""
    names = [item.split("=")[0] for item in text.split(",")] if text != DEFAULT else []
    twice = sorted({n for n in names if names.count(n) > 1})
    return f"{text!r} sets {twice[0]} twice" if twice else None


def parse(text: str) -> KnobSet:
    """A valid knob set's text (values.check has passed it) as a KnobSet; "" is the default."""
    if text in ("", DEFAULT):
        return KnobSet()
    given = dict(item.split("=", 1) for item in text.split(","))
    return KnobSet(items=tuple((name, given[name]) for name in NAMES if name in given))


def canonical(text: str) -> str:
    """The one spelling a set is stored and matched by: "" for the default."""
    return parse(text).text


def suite_args(text: str) -> tuple[str, ...]:
    """The suite options a cell's knob set adds to its run."""
    return parse(text).suite_args()
