"""The one TOML writer of the product's TOML files (bisect's step matrices, `cases --from-log`,
stacks_index.toml): strings, keys and values in TOML 1.0's own syntax (toml.io/en/v1.0.0).

Why not json.dumps for a string: JSON escapes a character outside the Basic Multilingual Plane as
a UTF-16 surrogate pair (`"\\ud83d\\ude00"`), and TOML's `\\uXXXX` must be a Unicode scalar value,
so tomllib refuses the file ("Escaped character is not a Unicode scalar value"). Here such a
character is written as itself (UTF-8), a control character as `\\uXXXX` (TOML forbids it raw in a
basic string), and a lone surrogate, which no UTF-8 file can hold, as U+FFFD.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+", re.ASCII)
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def string(text: str) -> str:
    """A TOML basic string holding text (a lone surrogate becomes U+FFFD)."""
    out = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\uFFFD")
        elif code < 0x20 or code == 0x7F or not char.isprintable():
            # Controls must be escaped (TOML 1.0: "Basic strings"); other unprintables (U+2028,
            # U+0085, format characters) are escaped so that an editor shows no line break.
            out.append(f"\\U{code:08X}" if code > 0xFFFF else f"\\u{code:04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def key(name: str) -> str:
    """A key: bare where TOML allows it (ASCII letters, digits, _ and -), else quoted."""
    return name if _BARE_KEY.fullmatch(name) else string(name)


def value(item: Any) -> str:
    """A TOML value of a bool, int, finite float, date, str, list or tuple of them, or a dict (an
    inline table); anything else is a TypeError (a bug, not input)."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, float) and item == item and item not in (float("inf"), float("-inf")):
        return repr(item)
    if isinstance(item, datetime.date) and not isinstance(item, datetime.datetime):
        return item.isoformat()
    if isinstance(item, str):
        return string(item)
    if isinstance(item, list | tuple):
        return "[" + ", ".join(value(v) for v in item) + "]"
    if isinstance(item, dict):
        return "{ " + ", ".join(f"{key(str(k))} = {value(v)}" for k, v in item.items()) + " }" if item else "{}"
    raise TypeError(f"a value of type {type(item).__name__} has no TOML form here")
