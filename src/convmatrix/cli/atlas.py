"""`convmatrix atlas BUNDLE... -o SITE/`: many fleets' bundles merged into a static site, with the
same data as atlas.json and atlas.csv (atlas/merge.py, atlas/site.py; docs/atlas.md)."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

from convmatrix.atlas import bundle, merge, site, sources
from convmatrix.atlas.model import Bundle
from convmatrix.cli.output import say
from convmatrix.errors import BadInput, NotGreen
from convmatrix.escape import one_line


def add_parser(sub: Any) -> None:
    a = sub.add_parser(
        "atlas", help="merge fleets' bundles (convmatrix export) into a static site: stack x GPU generation",
        description="Read each BUNDLE (untrusted: bounded and validated; a bad one is one line and left out), "
                    "merge them and write a static, self-contained site into SITE: index.html (the grid of stacks "
                    "by GPU generation, with filters and a search that work from disk), a page per stack, GPU and "
                    "failure family with each failing case's repro script, atlas.json and atlas.csv. Exit 1 when "
                    "two bundles claim one run with different contents (a conflict: neither is kept; the site is "
                    "still written), 2 when a bundle was refused (the site still holds the others) or none could "
                    "be read.")
    a.add_argument("bundles", nargs="+", type=Path, metavar="BUNDLE", help="a bundle file written by convmatrix export")
    a.add_argument("-o", "--output", type=Path, required=True, metavar="SITE",
                   help="the site's folder: new, empty, or one this command wrote before (its pages are replaced)")


def run(args: argparse.Namespace) -> int:
    read, paths, refused = [], [], []
    for path in args.bundles:
        try:
            read.append(bundle.read(path))
            paths.append(path)
        except bundle.BadBundle as exc:
            refused.append(f"refused: {exc}")
    if not read:
        raise BadInput("\n".join([*refused, "atlas: no bundle could be read; nothing written"]))
    atlas = merge.merge(read, names=names(paths, read))
    written = site.publish(args.output, atlas, sources.load(), refused=len(refused))
    # The runs kept: a run given twice is one, and a conflicting one none (atlas/merge.py).
    say(f"atlas: {len(read)} bundle(s) merged ({len(atlas.fleets)} fleet(s), {len(atlas.runs)} run(s), "
        f"{len(atlas.rows)} stack(s) on {len(atlas.columns)} GPU column(s), "
        f"{sum(c.disagree for c in atlas.cells.values())} where fleets disagree); {len(refused)} refused; "
        f"{written} file(s) in {one_line(str(args.output))}")
    for note in atlas.notes:
        say(f"atlas: {note}")
    conflicts = [f"conflict: {c.said}" for c in atlas.conflicts]
    if refused:
        # The site holds the others; the exit code still says that some input was bad (2), as
        # `convmatrix report` does when it reports every readable cell beside an unreadable one.
        raise BadInput("\n".join([*refused, *conflicts]))
    if conflicts:
        # Two bundles that claim one run with different contents (one forged, or damaged before
        # its checksum was taken): the site is written without either, and the exit code says so.
        raise NotGreen("\n".join(conflicts))
    return 0


def names(paths: list[Path], read: list[Bundle]) -> list[str]:
    """Each bundle by its file's name, never its folder (the builder's, not to be published); two
    files of one name in two folders told apart by their checksums."""
    seen = Counter(path.name for path in paths)
    return [one_line(path.name) if seen[path.name] == 1
            else f"{one_line(path.name)} (sha256 {bundle.digest(found)[:12]})"
            for path, found in zip(paths, read, strict=True)]
