"""Per-format escaping of report strings, which come from runs and may hold anything: terminal
escape sequences, NUL, markup, `|`, newlines. `visible` is the shared base (escape sequences
removed, other control characters shown as `\\xNN`); `one_line` keeps a table row on one line;
`markdown_cell`, `html_cell` and `xml_text` escape what their format would interpret."""

from __future__ import annotations

import html
import re
import unicodedata

# Terminal escape sequences: CSI (ESC [ or the 8-bit CSI) up to its final byte; OSC, DCS, SOS, PM
# and APC strings (ESC ] P X ^ _ or their 8-bit forms) up to their terminator (BEL or ST); any other
# ESC with its intermediate and final bytes (ESC c resets a terminal). An unterminated string loses
# its introducer, and a lone ESC is shown.
_ESCAPE_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]"
)
_NOT_PRINTABLE_ASCII = re.compile(r"[^\t\n\r\x20-\x7e]")
# Control (C0, DEL, C1), format (bidi overrides, zero-width, BOM) and surrogate code points, and the
# two noncharacters XML 1.0 forbids: shown, never passed on. Tab, newline and CR are whitespace.
_HIDDEN_CATEGORIES = ("Cc", "Cf", "Cs")
_MARKDOWN_SPECIAL = re.compile(r"[\\`*\[\]|]")
# What starts a block (heading, quote, list, rule, setext underline, table) at a line's start.
_MARKDOWN_BLOCK_START = re.compile(r"^(?:[#>+\-=~_:]|\d+(?=[.)]))")


def _show(match: re.Match[str]) -> str:
    char = match[0]
    if unicodedata.category(char) not in _HIDDEN_CATEGORIES and char not in "\ufffe\uffff":
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    """text without terminal escape sequences, every other control, format or surrogate code point
    written out as an escape (`\\x00`, `\\u202e`); tab, newline and CR stay. The result is valid
    in XML 1.0 and inert on a terminal; applying it again changes nothing."""
    if not _NOT_PRINTABLE_ASCII.search(text):
        return text  # printable ASCII (the common case): nothing to remove or show
    return _NOT_PRINTABLE_ASCII.sub(_show, _ESCAPE_SEQUENCE.sub("", text))


def one_line(text: str) -> str:
    """visible(text) with every run of whitespace (newlines included) one space: a table cell."""
    return " ".join(visible(text).split())


def markdown_cell(text: str) -> str:
    """One line of GitHub markdown that renders as the text itself: no raw HTML, entity, link, code
    span or emphasis forms, and no `|` ends a table cell."""
    return _MARKDOWN_SPECIAL.sub(r"\\\g<0>", html.escape(one_line(text), quote=False))


def markdown_line(text: str) -> str:
    """markdown_cell(text) that also starts no block: a line of a message shown as paragraph text
    (a `# `, `> `, `- `, `1. ` or `---` at its start stays text)."""
    cell = markdown_cell(text)
    found = _MARKDOWN_BLOCK_START.match(cell)
    if not found:
        return cell
    end = found.end()
    # A digit cannot be escaped: the `.` or `)` after it is, which is what makes a list.
    return cell[:end] + "\\" + cell[end:] if found[0][0].isdigit() else "\\" + cell


def html_cell(text: str) -> str:
    return html.escape(one_line(text))


def html_text(text: str) -> str:
    """Many lines of text for a <pre>: visible, escaped, line ends newlines."""
    return html.escape(xml_text(text))


def xml_text(text: str) -> str:
    """text as XML 1.0 allows it in an attribute or element (ElementTree escapes the markup), its
    line ends newlines (a lone CR would let a line overwrite another where a CI system shows it)."""
    return visible(text).replace("\r\n", "\n").replace("\r", "\n")
