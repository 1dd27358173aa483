"""A run's user case files (suites/casefile.py): from the matrix's `cases` key and the suite
option `--cases`, checked once before any cell runs, and handed to every lane as JSON.

Why JSON copies: the suite reads TOML only where its interpreter has tomllib (3.11+), and a base
image may carry Python 3.10; the same data as JSON runs anywhere. The copies live in the run
directory under the digest of their content (`<out>/cases/<sha256[:16]>/<stem>.json`), so that
shards and hosts writing one --out agree, a changed file never overwrites the one an earlier
cell ran, the container lane can mount them read-only, and a reuse key names the content, not
the path (`for_key`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from convmatrix.errors import BadInput
from convmatrix.results import rundir

OPTION = "--cases"
DIR = "cases"  # <out>/cases/<digest>/<stem>.json


@dataclass(frozen=True, kw_only=True)
class CaseFile:
    source: Path  # the file as the matrix or the option named it
    stem: str  # its cases' id prefix
    digest: str  # sha256 of its content, 16 hex digits
    count: int  # how many cases it holds
    copy: Path  # the JSON the suite is handed

    def record(self) -> dict[str, Any]:
        """What cell.json keeps of it."""
        return {"path": str(self.source), "stem": self.stem, "sha256": self.digest, "cases": self.count}


def split(suite_args: Sequence[str]) -> tuple[list[str], list[str]]:
    """The suite options without their --cases, and the files those named."""
    rest: list[str] = []
    files: list[str] = []
    i = 0
    while i < len(suite_args):
        arg = suite_args[i]
        if arg == OPTION and i + 1 < len(suite_args):
            files.append(suite_args[i + 1])
            i += 2
            continue
        if arg.startswith(OPTION + "="):
            files.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        i += 1
    return rest, files


def check(paths: Sequence[Path]) -> list[Any]:
    """Every case of the files, as the suite will run them; BadInput (exit 2) with one line per
    problem, naming the file, the case and the field."""
    catalog = rundir.suite_module("catalog")
    casefile = rundir.suite_module("casefile")
    for path in paths:
        if not path.is_file():
            raise BadInput(f"{path}: no such case file" if not path.exists() else f"{path}: not a regular file")
    try:
        return list(casefile.load([str(p) for p in paths], catalog.Case, taken=[c.id for c in catalog.CASES]))
    except casefile.CaseFileError as exc:
        raise BadInput("\n".join(exc.lines)) from None


def prepare(matrix_files: Sequence[Path], suite_args: Sequence[str], out: Path) -> tuple[tuple[str, ...],
                                                                                      list[CaseFile]]:
    """The suite options with every case file (the matrix's first, then --cases) checked and
    replaced by its JSON copy under out; and the files, for cell.json."""
    rest, named = split(suite_args)
    paths = [*matrix_files, *(Path(p) for p in named)]
    if not paths:
        return tuple(suite_args), []
    cases = check(paths)
    casefile = rundir.suite_module("casefile")
    made: list[CaseFile] = []
    for path in paths:
        stem = casefile.stem_of(str(path))
        raw = path.read_bytes()
        digest = hashlib.sha256(raw).hexdigest()[:16]
        data = casefile.read(str(path))
        copy = out / DIR / digest / f"{stem}.json"
        if not copy.is_file():  # write_plain makes cases/<digest>/ (tree.py), never through a link
            rundir.write_plain(copy, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode(), out)
        made.append(CaseFile(source=path, stem=stem, digest=digest,
                             count=sum(1 for c in cases if c.prefix == stem), copy=copy.resolve()))
    args = [*rest]
    for item in made:
        args += [OPTION, str(item.copy)]
    return tuple(args), made


def for_key(suite_args: Sequence[str]) -> list[str]:
    """Suite options as a reuse key sees them: a case file by the digest of its content."""
    rest, files = split(suite_args)
    named = []
    for path in files:
        try:
            named.append("sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest())
        except OSError:
            named.append(path)
    return [*rest, *(f"{OPTION}={n}" for n in named)]


def remap(suite_args: Sequence[str], mounts: dict[str, str]) -> list[str]:
    """Suite options with each case file's directory swapped for where a container mounts it."""
    rest, files = split(suite_args)
    moved = []
    for path in files:
        folder, name = os.path.split(path)
        moved += [OPTION, f"{mounts[folder]}/{name}" if folder in mounts else path]
    return [*rest, *moved]


def folders(suite_args: Sequence[str]) -> list[str]:
    """The directories of the case files among suite options (each mounted read-only)."""
    return sorted({os.path.dirname(path) for path in split(suite_args)[1]})


def with_files(opts: Any, matrix_files: Sequence[Path]) -> tuple[Any, list[CaseFile]]:
    """RunOptions with its suite options prepared (prepare), and the case files."""
    args, made = prepare(matrix_files, opts.suite_args, opts.out)
    return replace(opts, suite_args=args), made
