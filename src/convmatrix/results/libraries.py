"""The library audit's table, read from a cell's `audit-cuda-libraries` line (suites/libaudit.py
writes it; suites/README.md: The library audit), and the one line every view shows of it.

A results line is untrusted: the table is read as data, at most MAX_ROWS rows, every text cut at
MAX_TEXT characters, any row or field of the wrong type dropped."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from convmatrix.escape import one_line

CASE = "audit-cuda-libraries"  # suites/test_audit.py CASE_ID
MAX_ROWS = 200
MAX_TEXT = 500
# Where a file may have come from without being foreign: the cell's own wheels and torch's folder.
OWN = ("wheel", "torch-lib")


@dataclass(frozen=True, kw_only=True)
class Library:
    name: str
    family: str | None
    path: str | None
    loaded: bool
    version: str | None
    package: str | None
    origin: str | None

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "family": self.family, "path": self.path, "loaded": self.loaded,
                "version": self.version, "package": self.package, "origin": self.origin}


def _text(value: object) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) else None


def table(audit: object) -> tuple[Library, ...]:
    """The rows of an `audit` field of a results line; () for anything that is not one."""
    rows = audit.get("libraries") if isinstance(audit, dict) else None
    if not isinstance(rows, list):
        return ()
    found = []
    for row in rows[:MAX_ROWS]:
        if not isinstance(row, dict) or not isinstance(row.get("name"), str):
            continue
        found.append(Library(name=row["name"][:MAX_TEXT], family=_text(row.get("family")), path=_text(row.get("path")),
                             loaded=row.get("loaded") is True, version=_text(row.get("version")),
                             package=_text(row.get("package")), origin=_text(row.get("origin"))))
    return tuple(found)


def _stem(name: str) -> str:
    return name.split(".so", 1)[0]


def stack_line(rows: tuple[Library, ...]) -> str | None:
    """`cuDNN 9.4.0 (wheel) · libcudnn_cnn 9.2.1 from LD_LIBRARY_PATH`: the loaded cuDNN and every file
    that came from somewhere other than the cell's own wheels with another version than its own; None
    when there is none (what was loaded is what was installed)."""
    top = next((r for r in rows if r.name.startswith("libcudnn.so")), None)
    own = {_stem(r.name): r.version for r in rows if r.origin in OWN and r.version}
    foreign: dict[tuple[str | None, str | None], list[str]] = {}
    for row in rows:
        if row.origin in OWN or row.path is None:
            continue
        if not row.version:
            # A cuDNN file loaded from outside the cell's packages whose version nothing tells (a
            # system copy named .so.9, no wheel owning it): shown, never taken as the cell's own.
            if row.loaded and row.family == "cudnn":
                foreign.setdefault(("(version unknown)", row.origin), []).append(_stem(row.name))
            continue
        mine = own.get(_stem(row.name)) or (top.version if top and row.family == "cudnn" else None)
        if mine is not None and mine != row.version:
            foreign.setdefault((row.version, row.origin), []).append(_stem(row.name))
    if not foreign:
        return None
    head = f"cuDNN {top.version or '?'} ({top.origin or '?'})" if top else "cuDNN none"
    parts = [f"{', '.join(sorted(names))} {version} from {origin}" for (version, origin), names in sorted(
        foreign.items(), key=lambda item: (str(item[0][0]), str(item[0][1])))]
    return " · ".join([head, *parts])


# --- what the history and the atlas keep of it ---------------------------------------------------
# The places a file may come from (suites/libaudit.py origin_of), and at most MAX_KEPT cuDNN rows:
# a cuDNN 9 has about a dozen files (the shim, graph, ops, cnn, adv, the engines, heuristic).
ORIGINS = ("wheel", "torch-lib", "LD_LIBRARY_PATH", "ld cache", "system path")
MAX_KEPT = 32
STEM = re.compile(r"libcudnn(?:_[a-z0-9_]{1,40})?", re.ASCII)
VERSION = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}\.[0-9]{1,3}", re.ASCII)


def kept(rows: tuple[Library, ...]) -> dict[str, Any] | None:
    """What the history (cells.libraries) and the bundle (a cell's `libraries`) keep of a table:
    whether something was swapped in (the stack line is not None) and each cuDNN file by its stem,
    version and origin, no path; a loaded file before one the loader would only pick, each stem
    once. Only stems, versions and origins that fit their patterns (anything else is not kept);
    None without a table."""
    if not rows:
        return None
    found: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: not r.loaded):
        stem = _stem(row.name)
        if row.family != "cudnn" or not STEM.fullmatch(stem) or stem in found or len(found) >= MAX_KEPT:
            continue
        found[stem] = {"name": stem, "version": row.version if row.version and VERSION.fullmatch(row.version) else None,
                       "origin": row.origin if row.origin in ORIGINS else None}
    return {"swapped": stack_line(rows) is not None, "cudnn": [found[k] for k in sorted(found)]}


# --- the image as shipped ------------------------------------------------------------------------
# A container cell's audit also records the image as a user's job would see it, without the
# harness's addition to LD_LIBRARY_PATH (suites/test_audit.py: `audit.as_shipped`). Recorded and
# shown, never judged: the cell's verdict is the audit of the cell as it ran.
SHOWN_SHIPPED = 4  # libraries named in the line at most; the rest counted


def shipped(audit: object) -> tuple[Library, ...]:
    """The rows of an `audit` field's `as_shipped` table; () without one (as table())."""
    return table(audit.get("as_shipped")) if isinstance(audit, dict) else ()


def _by_stem(rows: tuple[Library, ...]) -> dict[str, Library]:
    """Each library once, by the stem of its name: the file loaded before one the loader would pick."""
    found: dict[str, Library] = {}
    for row in sorted(rows, key=lambda r: not r.loaded):
        found.setdefault(_stem(row.name), row)
    return found


def _said(row: Library | None) -> str:
    if row is None:
        return "none"
    return f"{row.version or '(version unknown)'} from {row.origin or '?'} ({row.path or 'not found'})"


def shipped_line(ran: tuple[Library, ...], as_shipped: tuple[Library, ...]) -> str | None:
    """The one line of a cell whose image as shipped loads other libraries than the cell as it ran:
    `as shipped (without the harness's LD_LIBRARY_PATH): libcudnn_cnn 9.2.1 from ld cache
    (/usr/lib/…/libcudnn_cnn.so.9.2.1), as run 9.4.0 from wheel (/opt/cell/…/libcudnn_cnn.so.9)`,
    each library that differs in version or file, at most SHOWN_SHIPPED named; None when they agree
    or there is no table as shipped. Always one line, whatever the rows hold."""
    if not as_shipped:
        return None
    run, ship = _by_stem(ran), _by_stem(as_shipped)
    differ = [stem for stem in sorted(set(run) | set(ship))
              if (run.get(stem) is None) != (ship.get(stem) is None)
              or (run[stem].version, run[stem].path) != (ship[stem].version, ship[stem].path)]
    if not differ:
        return None
    parts = [f"{stem} {_said(ship.get(stem))}, as run {_said(run.get(stem))}" for stem in differ[:SHOWN_SHIPPED]]
    more = f"; and {len(differ) - SHOWN_SHIPPED} more" if len(differ) > SHOWN_SHIPPED else ""
    return one_line(f"as shipped (without the harness's LD_LIBRARY_PATH): {'; '.join(parts)}{more}")
