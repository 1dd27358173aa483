"""jsonread.py: the one bounded JSON reader."""

from __future__ import annotations

import json

import pytest

from convmatrix import jsonread


def test_a_line_nesting_200000_lists_is_refused_before_parsing() -> None:
    line = "[" * 200_000 + "]" * 200_000
    with pytest.raises(jsonread.TooBig, match="nested 200,000 levels deep, more than 64"):
        jsonread.loads(line)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"message": "[" * 1000 + '\\"{' * 100, "a": [[1]]})
    assert jsonread.depth(text) == 3
    assert jsonread.loads(text)["a"] == [[1]]


def test_the_bound_is_exact_and_size_is_bounded() -> None:
    assert jsonread.loads("[" * 64 + "]" * 64) is not None
    with pytest.raises(jsonread.TooBig):
        jsonread.loads("[" * 65 + "]" * 65)
    with pytest.raises(jsonread.TooBig, match="more than 10"):
        jsonread.loads(b'"' + b"x" * 20 + b'"', max_bytes=10)


def test_what_is_no_json_is_a_value_error_not_too_big() -> None:
    for bad in ("{", "[1,", b"\xff"):
        try:
            jsonread.loads(bad)
        except jsonread.TooBig:
            raise AssertionError(f"{bad!r}: not past a bound") from None
        except ValueError:
            continue
        raise AssertionError(f"{bad!r}: parsed")
