"""`convmatrix stacks`: the stack facts convmatrix prunes by, and where each came from;
`convmatrix stacks --refresh` reads them again from the package indexes into stacks_index.toml."""

from __future__ import annotations

import argparse
import datetime
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from convmatrix.cli.output import write_output
from convmatrix.errors import BadInput
from convmatrix.escape import one_line
from convmatrix.matrix import stacks, stacks_index

INDEX_FILE = Path(stacks.__file__).with_name(stacks.INDEX)


def add_parser(sub: Any) -> None:
    s = sub.add_parser("stacks", help="the stack facts (torch releases, variants, cuDNN pins) and where they came from")
    s.add_argument("--refresh", action="store_true",
                   help=f"read the facts again from the package indexes into {stacks.INDEX} (maintainers)")
    s.add_argument("--index", action="append", default=None, metavar="URL",
                   help="a simple-API index to read (repeatable; default: PyPI and download.pytorch.org/whl/<variant>/ "
                        f"for {', '.join(stacks_index.VARIANTS)})")
    s.add_argument("-o", "--output", type=Path, default=None,
                   help=f"with --refresh: the file to write (default: {INDEX_FILE})")


def run(args: argparse.Namespace) -> int:
    if not args.refresh:
        if args.index or args.output:
            raise BadInput("stacks: --index and -o go with --refresh")
        print(render_facts(stacks.load()), end="")
        return 0
    indexes = args.index or list(stacks_index.DEFAULT_INDEXES)
    for url in indexes:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BadInput(f"stacks: --index {url!r}: give an http(s) URL of a simple-API index")
    got = stacks_index.refresh(indexes)
    for note in got.notes + stacks_index.pin_changes(got):
        print(f"convmatrix: stacks --refresh: {one_line(note)}", file=sys.stderr, flush=True)
    data = stacks_index.facts(got, datetime.date.today())
    output = args.output or INDEX_FILE
    write_output(stacks_index.render(data), output)
    pins = sum(bool(pin) for r in data["release"] for pin in r["variants"].values())
    wheels = ", ".join(f"{p} {len(v)}" for p, v in data["cudnn_wheels"].items()) or "none"
    print(f"wrote {output}: {len(data['release'])} releases, {pins} cuDNN pins, cuDNN wheels: {wheels} "
          f"(from {len(got.read)} of {len(indexes)} indexes)")
    return 0


def render_facts(facts: stacks.Facts) -> str:
    from tabulate import tabulate  # lazily: the table is the only use, and start-up stays light

    rows = []
    for release in facts.releases.values():
        told: dict[str, list[str]] = {}
        for key, name in (("patches", "patches"), ("python", "python"), ("pypi_default", "default")):
            told.setdefault(release.sources.get(key, "?"), []).append(name)
        origin = "; ".join(f"{src}: {', '.join(names)}" if len(told) > 1 else src for src, names in told.items())
        first = [release.minor, ", ".join(release.patches) or "?",
                 f"{release.python_min or '?'}-{release.python_max or '?'}", origin]
        variants = [(v, pin) for v, pin in release.cudnn_pins.items()]
        if not release.variants_known:
            variants.append(("others?", ""))
        for i, (variant, pin) in enumerate(variants or [("?", "")]):
            mark = " (PyPI)" if variant == release.pypi_default else ""
            origin = release.sources.get(variant, "") if variant != "others?" else "list incomplete: nothing pruned"
            rows.append([*(first if i == 0 else ["", "", "", ""]), variant + mark, pin or "unknown", origin])
    out = [f"hand-kept: {stacks.HAND_KEPT} (compiled {facts.hand_kept or '?'})"]
    if facts.generated:
        out.append(f"index: {stacks.INDEX} (generated {facts.generated} from {', '.join(facts.indexes)})")
        if facts.unread:
            out.append(f"  not read then: {', '.join(facts.unread)}")
    else:
        out.append(f"index: no {stacks.INDEX} (run `convmatrix stacks --refresh`)")
    out += ["", tabulate(rows, headers=["torch", "patches", "python", "from", "variant", "cuDNN pin", "pin from"],
                         tablefmt="simple", disable_numparse=True), ""]
    for package, versions in facts.cudnn_wheels.items():
        span = f"{versions[0]} .. {versions[-1]}" if versions else "none"
        out.append(f"{package}: {len(versions)} published ({span}), {facts.wheel_sources.get(package, '?')}")
    return "\n".join(out) + "\n"
