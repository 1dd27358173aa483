"""Matrix values: ASCII only, whatever Unicode calls a digit or a letter."""

from __future__ import annotations

import pytest

from convmatrix.matrix import values


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("python", "3.\u0661\u0661"),  # Arabic-Indic digits
        ("python", "3.\uff11\uff11"),  # fullwidth digits
        ("python", "\u0663.11"),
        ("python", "3.1\u00b2"),  # superscript two: isdigit() but not int()
        ("python", "3.11\n"),
        ("python", "3.09"),  # no such interpreter name: python3.09
        ("torch", "2.\u0665.1"),
        ("torch", "2.5.\U0001d7d9"),  # mathematical double-struck one
        ("torch", "02.5.1"),
        ("cuda", "cu\u0661\u0662\u0664"),
        ("cudnn", "9.\u0665.1.17"),
        ("lane", "host\u200b"),
        ("base", "python:3.11-slim-bookworm\u0661"),
        ("base", "python:3.\u0661\u0661-slim"),
        ("base", "\u0131mage:latest"),
        ("base", "img@sha256:" + "\u0661" * 64),
    ],
)
def test_non_ascii_and_malformed_values_are_rejected(key: str, value: str) -> None:
    problem = values.check(key, value)
    assert problem is not None
    assert repr(value) in problem
    if not value.isascii():
        assert f"(non-ASCII: {value!a})" in problem


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("python", "3.11"),
        ("python", "3.9"),
        ("torch", "2.5.1"),
        ("torch", "2.10.0"),
        ("cuda", "cu124"),
        ("cuda", "cpu"),
        ("cudnn", "9.5.1.17"),
        ("cudnn", "bundled"),
        ("lane", "container"),
        ("base", "python:3.11-slim-bookworm"),
        ("base", "convmatrix/base:bookworm@sha256:" + "0" * 64),
    ],
)
def test_ascii_values_are_accepted(key: str, value: str) -> None:
    assert values.check(key, value) is None


def test_slug_is_ascii() -> None:
    assert values.slug("r\u00e9g/\u0661img:3.11") == "r-g-img-3.11"
