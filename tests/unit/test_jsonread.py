"""jsonread.py: the one bounded JSON reader."""

from __future__ import annotations

import json
import tracemalloc

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


def test_depth_holds_no_copy_of_the_brackets() -> None:
    """max(0, *accumulate(...)) made a tuple of every bracket's level: 64 MiB of '[' held 3 GB."""
    text = "[" * 1_000_000
    tracemalloc.start()
    try:
        assert jsonread.depth(text) == 1_000_000
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3_000_000, f"{peak:,} bytes for {len(text):,} brackets"


def test_the_containers_are_bounded_before_parsing_and_strings_do_not_count() -> None:
    """Each 2-byte {} is a 64-byte dict once parsed: the count is the memory bound."""
    with pytest.raises(jsonread.TooBig, match="1,001 arrays and objects, more than 1,000"):
        jsonread.loads("[" + ",".join(["{}"] * 1000) + "]", max_containers=1000)
    assert len(jsonread.loads(json.dumps(["{[" * 2000, {}]), max_containers=2)) == 2


def test_a_key_given_twice_is_refused_where_asked() -> None:
    text = '{"a": 1, "b": {"c": 2, "c": 3}}'
    assert jsonread.loads(text)["b"] == {"c": 3}  # json's own reading: the last wins
    with pytest.raises(jsonread.DuplicateKey, match="'c' appears twice"):
        jsonread.loads(text, unique_keys=True)
    assert jsonread.loads('{"a": {"a": 1}}', unique_keys=True) == {"a": {"a": 1}}
