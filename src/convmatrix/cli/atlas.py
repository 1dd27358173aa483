"""`convmatrix atlas BUNDLE... -o SITE/`: many fleets' bundles merged into a static site, with the
same data as atlas.json and atlas.csv (atlas/merge.py, atlas/site.py; docs/atlas.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from convmatrix.atlas import bundle, merge, site, sources
from convmatrix.cli.output import say
from convmatrix.errors import BadInput
from convmatrix.escape import one_line


def add_parser(sub: Any) -> None:
    a = sub.add_parser(
        "atlas", help="merge fleets' bundles (convmatrix export) into a static site: stack x GPU generation",
        description="Read each BUNDLE (untrusted: bounded and validated; a bad one is one line and left out), "
                    "merge them and write a static, self-contained site into SITE: index.html (the grid of stacks "
                    "by GPU generation, with filters and a search that work from disk), a page per stack, GPU and "
                    "failure family with each failing case's repro script, atlas.json and atlas.csv. Exit 2 when "
                    "a bundle was refused (the site still holds the others) or none could be read.")
    a.add_argument("bundles", nargs="+", type=Path, metavar="BUNDLE", help="a bundle file written by convmatrix export")
    a.add_argument("-o", "--output", type=Path, required=True, metavar="SITE",
                   help="the site's folder: new, empty, or one this command wrote before (its pages are replaced)")


def run(args: argparse.Namespace) -> int:
    read, refused = [], []
    for path in args.bundles:
        try:
            read.append(bundle.read(path))
        except bundle.BadBundle as exc:
            refused.append(f"refused: {exc}")
    if not read:
        raise BadInput("\n".join([*refused, "atlas: no bundle could be read; nothing written"]))
    atlas = merge.merge(read)
    written = site.publish(args.output, atlas, sources.load(), refused=len(refused))
    runs = sum(len(b.runs) for b in read)
    say(f"atlas: {len(read)} bundle(s) merged ({len(atlas.fleets)} fleet(s), {runs} run(s), {len(atlas.rows)} "
        f"stack(s) on {len(atlas.columns)} GPU column(s), {sum(c.disagree for c in atlas.cells.values())} where "
        f"fleets disagree); {len(refused)} refused; {written} file(s) in {one_line(str(args.output))}")
    for note in atlas.notes:
        say(f"atlas: {note}")
    if refused:
        # The site holds the others; the exit code still says that some input was bad (2), as
        # `convmatrix report` does when it reports every readable cell beside an unreadable one.
        raise BadInput("\n".join(refused))
    return 0
