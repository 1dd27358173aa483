"""Validation of every matrix value before it can reach a tag, a build argument or a command line."""

from __future__ import annotations

import re
from collections.abc import Iterable

from convmatrix.errors import BadInput
from convmatrix.matrix import knobs

LANES = ("host", "baremetal", "container")
# What a container cell on a system base (flavour "system") takes from its image instead of
# requesting it: torch = "image" is whatever torch the base carries, observed and recorded.
IMAGE = "image"
FROM_IMAGE = ("torch", "cuda", "cudnn", "python")  # the stack fields a cell may leave to its image
# A GPU key as gpus.gpu_key makes it: what [fleet].gpus and --expect-gpu name, and a result
# directory's name holds (docs/contracts.md, "GPU keys"): cpu, or the model and compute
# capability (h200-sm90), a MIG slice's profile (h200-sm90-mig3g-71gb), and with --every-gpu the
# device (h200-sm90-gpu1, h200-sm90-mig3g-71gb-gpu0-mig1). Lower-case ASCII words joined by '-'.
_WORD = "[a-z0-9]+"
GPU_KEY = re.compile(rf"cpu|{_WORD}(?:-{_WORD})*-sm[0-9]+(?:-mig{_WORD}(?:-{_WORD})*)?(?:-gpu[0-9]+(?:-mig[0-9]+)?)?",
                     re.ASCII)
MAX_GPU_KEY = 100  # characters: a result directory's name holds the cell id, the key and the host
GPU_KEY_EXAMPLE = "a GPU key like h100-sm90 or h200-sm90-mig3g-71gb"


def is_gpu_key(text: object) -> bool:
    return isinstance(text, str) and len(text) <= MAX_GPU_KEY and GPU_KEY.fullmatch(text) is not None

# Each pattern is anchored (fullmatch) and admits no shell metacharacters, spaces or path tricks.
# ASCII only: in a str pattern \d and \w match any Unicode digit or letter ("3.\u0661\u0661" would pass and
# become a nox session that fails at run time), so the classes are spelt out and re.ASCII is set.
# A number has no leading zero: "3.09" names no interpreter and "02.5.1" no release.
_N = "(?:0|[1-9][0-9]*)"
_PATTERNS: dict[str, tuple[re.Pattern[str], str]] = {
    "lane": (re.compile("|".join(LANES), re.ASCII), f"one of {', '.join(LANES)}"),
    "torch": (re.compile(rf"{IMAGE}|{_N}\.{_N}\.{_N}", re.ASCII), f"a torch release like 2.5.1, or {IMAGE!r}"),
    "cuda": (re.compile(rf"{IMAGE}|cpu|cu[0-9]{{3}}", re.ASCII), f"a wheel variant like cu124 or cpu, or {IMAGE!r}"),
    "cudnn": (
        re.compile(rf"{IMAGE}|bundled|{_N}\.{_N}\.{_N}\.{_N}", re.ASCII),
        f"'bundled', a cuDNN wheel version like 9.5.1.17, or {IMAGE!r}",
    ),
    "python": (re.compile(rf"{IMAGE}|3\.(?:0|[1-9][0-9]?)", re.ASCII), f"a Python version like 3.11, or {IMAGE!r}"),
    "base": (
        re.compile(
            r"[a-z0-9][a-z0-9._/-]{0,200}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?", re.ASCII
        ),
        "an image reference like python:3.11-slim-bookworm",
    ),
    "knobs": (knobs.PATTERN, knobs.EXPECTED),  # the suite's remedy options for a cell (knobs.py)
}

AXES = tuple(_PATTERNS)


def check(key: str, value: object) -> str | None:
    """None when value is valid for key, else what was expected."""
    pattern, expected = _PATTERNS[key]
    if not isinstance(value, str) or not pattern.fullmatch(value):
        # A non-ASCII digit looks like an ASCII one: show the code points too.
        shown = repr(value)
        if isinstance(value, str) and not value.isascii():
            shown += f" (non-ASCII: {value!a})"
        return f"{shown} is not {expected}"
    return knobs.problem(value) if key == "knobs" else None


def slug(text: str) -> str:
    """A readable, tag-safe form of an image reference: python:3.11-slim -> python-3.11-slim."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", text.split("@")[0], flags=re.ASCII).strip("-").lower()


def gpu_keys(where: str, given: Iterable[str]) -> tuple[str, ...]:
    """KEY[,KEY...] (an option may be repeated): GPU keys as result directories name them."""
    keys = [k.strip() for text in given for k in text.split(",")]
    for key in keys:
        if not is_gpu_key(key):
            raise BadInput(f"{where}: {key[:80]!r} is not {GPU_KEY_EXAMPLE} (docs/contracts.md, GPU keys)")
    return tuple(dict.fromkeys(keys))
