"""jsonread.py: the one bounded JSON reader."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


# --- loads_each: many texts in one json call, each read as loads reads it alone (issue 49) -----------

# Whole values, and the pieces that made the whole-file read of issue 45 take two bad lines for
# sound: an object cut between two fields, two values on one line, a string or a list cut in two,
# a list cut so that the glue between texts would join it up ('{"a": [[1' + '2]]}'), nesting past
# the bound, and blank-ish text.
FRAGMENTS = ['{"a": 1}', '{"a": 1', '"b": 2}', '{"c": 3}, {"d": 4}', '"abc', 'def"', '1],[2', '{"a": [[1',
             '2]]}', "[", "]", "{", "}", ",", '{"x": "y"}', "1", "null", '"s"', "  ", "\r", "[]", "{}",
             '{"a": [1', "2]}", "[" * 65 + "]" * 65, "[" * 64 + "]" * 64, '{"k": "\\u005b"}', "1 2",
             '{"a": 1}\r', "\ufeff{}", '"\\n"', "tru", "true", "-0", "1e999"]


def alone(text: str) -> object:
    """What loads makes of one text, an error as its kind."""
    try:
        return json.dumps(jsonread.loads(text))
    except jsonread.TooBig:
        return "TooBig"
    except ValueError:
        return "ValueError"


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12))
def test_loads_each_gives_each_texts_value_or_none(texts: list[str]) -> None:
    each = [alone(t) for t in texts]
    together = jsonread.loads_each(texts)
    if together is None:
        # None is always safe (the caller reads each alone); it must be said for any bad text.
        assert texts and (any(e in ("TooBig", "ValueError") for e in each) or
                          any(t.count("[") + t.count("{") > jsonread.MAX_DEPTH for t in texts))
    else:
        assert [json.dumps(v) for v in together] == each


def test_loads_each_vouches_for_sound_lines_and_not_for_glued_ones() -> None:
    assert jsonread.loads_each(['{"a": 1}', "[2]", '"s"']) == [{"a": 1}, [2], "s"]
    # Each of these read as one array (one value a line) had the right count of values.
    assert jsonread.loads_each(['{"a": 1', '"b": 2}, {"c": 3}']) is None
    assert jsonread.loads_each(['{"a": [[1', '2]]}', '1],[2']) is None
    with pytest.raises(ValueError, match="line break"):
        jsonread.loads_each(['{"a":\n1}'])
