"""Matrix values: ASCII only, whatever Unicode calls a digit or a letter."""

from __future__ import annotations

import pytest

from convmatrix.errors import BadInput
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


# --- GPU keys (issue 37): the grammar of docs/contracts.md, "GPU keys" ---------------------------

@pytest.mark.parametrize("key", ["cpu", "h200-sm90", "h100-80gb-hbm3-sm90", "b200-sm100", "h100-sm90-gpu1",
                                 "h200-sm90-mig3g-71gb", "h200-sm90-mig1c-3g-71gb", "h200-sm90-mig1g-18gb-plus-me",
                                 "h200-sm90-mig3g-71gb-gpu0-mig1"])
def test_gpu_keys_of_whole_gpus_slices_and_devices_are_accepted(key: str) -> None:
    assert values.gpu_keys("--expect-gpu", [key]) == (key,)


@pytest.mark.parametrize("key", ["", "H200-sm90", "h200", "h200-sm", "h200-sm9.0", "h200-sm90-mig3g.71gb",
                                 "h200-sm90-mig", "h200-sm90-gpu", "h200-sm90-gpu0-mig", "h200--sm90", "-h200-sm90",
                                 "h200-sm90-", "../h200-sm90", "h200-sm90@host", "h200-sm90/x", "h200-sm90 x",
                                 "h200-sm\u0669\u0660", "a-" * 49 + "sm90"])
def test_anything_else_is_no_gpu_key(key: str) -> None:
    with pytest.raises(BadInput, match=r"--expect-gpu: .* is not a GPU key like h100-sm90 or h200-sm90-mig3g-71gb"):
        values.gpu_keys("--expect-gpu", [key])
