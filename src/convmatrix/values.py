"""Validation of every matrix value before it can reach a tag, a build argument or a command line."""

from __future__ import annotations

import re

LANES = ("host", "baremetal", "container")

# Each pattern is anchored and admits no shell metacharacters, spaces or path tricks.
_PATTERNS: dict[str, tuple[re.Pattern[str], str]] = {
    "lane": (re.compile(r"host|baremetal|container"), "one of host, baremetal, container"),
    "torch": (re.compile(r"\d+\.\d+\.\d+"), "a torch release like 2.5.1"),
    "cuda": (re.compile(r"cpu|cu\d{3}"), "a wheel variant like cu124 or cpu"),
    "cudnn": (re.compile(r"bundled|\d+\.\d+\.\d+\.\d+"), "'bundled' or a cuDNN wheel version like 9.5.1.17"),
    "python": (re.compile(r"3\.\d{1,2}"), "a Python version like 3.11"),
    "base": (
        re.compile(r"[a-z0-9][a-z0-9._/-]{0,200}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?"),
        "an image reference like python:3.11-slim-bookworm",
    ),
}

AXES = tuple(_PATTERNS)


def check(key: str, value: object) -> str | None:
    """None when value is valid for key, else what was expected."""
    pattern, expected = _PATTERNS[key]
    if not isinstance(value, str) or not pattern.fullmatch(value):
        return f"{value!r} is not {expected}"
    return None


def slug(text: str) -> str:
    """A readable, tag-safe form of an image reference: python:3.11-slim -> python-3.11-slim."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", text.split("@")[0]).strip("-").lower()
