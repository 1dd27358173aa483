"""The one TOML writer (tomlwrite.py): what it writes, tomllib reads back as it was given, a
character outside the BMP and every control character included (issue 32, item 7)."""

from __future__ import annotations

import datetime
import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convmatrix import tomlwrite

# json.dumps wrote these as surrogate pairs, which TOML refuses ("not a Unicode scalar value").
HOSTILE = ["/data/\U0001f600/wheels", "tab\there", "line\nbreak", "nul\x00", "del\x7f", "c1\x85", "sep\u2028",
           'quote"back\\slash', "\U0010ffff", "é ü 中", ""]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_string_reads_back_as_written(text: str) -> None:
    assert tomllib.loads(f"v = {tomlwrite.string(text)}")["v"] == text


def test_a_lone_surrogate_becomes_the_replacement_character() -> None:
    written = tomlwrite.string("a\ud800b")
    assert tomllib.loads(f"v = {written}")["v"] == "a\ufffdb"


def test_keys_are_bare_where_toml_allows_and_quoted_elsewhere() -> None:
    assert tomlwrite.key("nvidia-cudnn-cu12") == "nvidia-cudnn-cu12"
    odd = tomlwrite.key("a.b c\U0001f600")
    assert tomllib.loads(f"{odd} = 1") == {"a.b c\U0001f600": 1}


def test_values_of_every_kind_read_back() -> None:
    data = {"b": True, "i": -3, "f": 2.5, "d": datetime.date(2026, 1, 2), "s": "x\U0001f600", "l": [1, "a", [2]],
            "t": {"k k": "v", "n": [True]}, "e": {}}
    text = "\n".join(f"{tomlwrite.key(k)} = {tomlwrite.value(v)}" for k, v in data.items())
    assert tomllib.loads(text) == data


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), None, object(), datetime.datetime(2026, 1, 2)])
def test_what_has_no_toml_form_here_is_a_type_error(bad: object) -> None:
    with pytest.raises(TypeError):
        tomlwrite.value(bad)


@pytest.mark.properties
@given(st.text(st.characters(blacklist_categories=["Cs"])))
def test_any_string_round_trips(text: str) -> None:
    assert tomllib.loads(f"v = {tomlwrite.string(text)}")["v"] == text
