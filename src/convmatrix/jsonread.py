"""The one bounded JSON reader: every JSON read of what a cell left (results.jsonl, cell.json,
env.json, first_cause.json, explain/<name>.json, plans) or of a file a user names goes through
`loads`, which checks the size and the nesting depth before json parses anything.

Why before: json's decoder recurses once per level, so a results line nesting 200,000 lists
raised RecursionError out of `convmatrix run` (its cell left `.partial`, later cells never ran)
and made `report`, `repro` and `prove` exit 1, the regression code. The depth is found by one
linear pass over the brackets outside strings (strings are cut out first by a regular
expression, in C), and only where the text holds more opening brackets than the bound allows at
all, so a sound record costs two str.count calls.

Stdlib only, level 0 (docs/architecture.md).
"""

from __future__ import annotations

import itertools
import json
import operator
import os
import re
from typing import Any

MAX_DEPTH = 64  # a record of ours nests 4 deep (results line: params -> shapes -> list)
MAX_BYTES = 256 << 20  # one text handed in whole (results.jsonl's own bound: rundir.MAX_RESULTS)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class TooBig(ValueError):
    """JSON past a bound (its size or its depth): one line saying which; not parsed."""


def depth(text: str) -> int:
    """The deepest nesting of arrays and objects in text, brackets inside strings not counted."""
    return _depth(_STRING.sub("", text))


def _depth(outside: str) -> int:
    """depth of a text whose strings are already cut out."""
    brackets = _NOT_BRACKET.sub("", outside)
    if not brackets:
        return 0
    # max() of the iterator, not of *it: unpacked, 64 MiB of brackets was a tuple of 2 GB.
    return max(0, max(itertools.accumulate(1 if c in "[{" else -1 for c in brackets)))


def check(text: str, *, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES,
          max_containers: int | None = None) -> None:
    """TooBig when text is past any bound (max_containers: arrays and objects, None for none)."""
    if len(text) > max_bytes:
        raise TooBig(f"{len(text):,} characters, more than {max_bytes:,}")
    opening = text.count("[") + text.count("{")
    outside = None  # text with its strings cut out: one pass, for whichever bound needs it
    if max_containers is not None and opening > max_containers:  # first: counted in C, depth is not
        # Each "{}" of 2 bytes is a dict of some 64 bytes: 64 MiB of them held 2 GB once parsed.
        outside = _STRING.sub("", text)
        found = outside.count("[") + outside.count("{")
        if found > max_containers:
            raise TooBig(f"{found:,} arrays and objects, more than {max_containers:,}")
    if opening > max_depth:
        found = _depth(_STRING.sub("", text) if outside is None else outside)
        if found > max_depth:
            raise TooBig(f"nested {found:,} levels deep, more than {max_depth}")


class DuplicateKey(ValueError):
    """An object naming one key twice: json keeps the last, another reader the first."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"the key {key[:60]!r} appears twice in one object")
            seen.add(key)
    return found


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES,
          max_containers: int | None = None, unique_keys: bool = False) -> Any:
    """json.loads within the bounds: TooBig past them (nothing parsed), ValueError (as json's
    own JSONDecodeError, or UnicodeDecodeError) for what is no JSON. unique_keys: an object
    naming a key twice is a ValueError too (DuplicateKey), for input whose every reader must see
    the same values (a bundle another fleet wrote)."""
    if isinstance(text, bytes | bytearray):
        if len(text) > max_bytes:
            raise TooBig(f"{len(text):,} bytes, more than {max_bytes:,}")
        text = bytes(text).decode("utf-8")
    check(text, max_depth=max_depth, max_bytes=max_bytes, max_containers=max_containers)
    try:
        return json.loads(text, object_pairs_hook=_unique if unique_keys else None)
    except RecursionError:  # within the bound yet past Python's stack (a low recursion limit)
        raise TooBig(f"nested too deeply for this interpreter (bound {max_depth})") from None


def loads_each(texts: list[str]) -> list[Any] | None:
    """[loads(t) for t in texts] when every text is one sound JSON value within the default
    bounds, parsed in one json call (a report reads 200,000 results lines: one call a line spent
    twice as long in json's per-call set-up as in the parse); None when any one is not, or might
    not be: the caller then reads each text alone, as loads does, and names the bad one.

    No text may hold a line break. They are parsed as one array whose items are the texts, each
    between line breaks, with a string no text can name between any two: a random nonce, drawn
    per call. A JSON string cannot hold a raw line break, so no string runs from one text into the
    next; every nonce is then found at the top level between two items, or the texts did not
    read one value each (an object split over two texts, two values in one: issue 45's whole-file
    read took those for sound), and None is returned. Past the bounds (a line of more than
    MAX_DEPTH opening brackets, MAX_BYTES in all) it is None too: loads names them."""
    if not texts:
        return []
    body = "\n".join(texts)
    # check's own first test, a text at a time (a regular expression over the body took 20 times
    # as long): only a text of more opening brackets than MAX_DEPTH can be nested past it. Counted
    # by maps, a C loop, not a Python step a text (200,000 texts a fleet's report).
    if len(body) > MAX_BYTES or max(map(operator.add, map(str.count, texts, itertools.repeat("[")),
                                        map(str.count, texts, itertools.repeat("{")))) > MAX_DEPTH:
        return None
    if body.count("\n") != len(texts) - 1:
        raise ValueError("loads_each: a text holds a line break")
    nonce = os.urandom(16).hex()
    try:
        values = json.loads("[\n" + body.replace("\n", f'\n,"{nonce}",\n') + "\n]")
    except (ValueError, RecursionError):
        return None
    if not isinstance(values, list) or len(values) != 2 * len(texts) - 1 \
            or values[1::2].count(nonce) != len(texts) - 1:
        return None
    return values[0::2]
