"""The bundle file (docs/contracts.md, "Bundles"): its writer, and its reader, which is the atlas's
untrusted-input boundary. A bundle comes from another fleet's machine, so every byte of it is
input: the file's size and nesting are bounded before JSON parses it (convmatrix.jsonread), its
checksum must match, and every field must fit model.py's types and a pattern or bound here.
Anything else is one BadBundle line naming the file and the field, never a traceback.

The file is UTF-8 JSON:

    {"format": "convmatrix-bundle", "version": 2, "sha256": "<hex>", "bundle": <Bundle>}

<Bundle> is dataclasses.asdict of model.Bundle; sha256 is the SHA-256 of the canonical JSON of
that value (sorted keys, no spaces, ASCII): a bundle damaged on its way is refused, not merged.
The checksum is no signature: anyone can write a valid bundle, which is why the reader trusts no
field of it. A version 1 file (before a case's cost and a cell's libraries) is still read: its
cases have no `cost` field, its cells no `libraries`."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from convmatrix import jsonread
from convmatrix.atlas.model import (
    FORMAT,
    READS,
    VERSION,
    Bundle,
    Case,
    Cell,
    Cost,
    Gpu,
    Libraries,
    LoadedFile,
    Repro,
    Run,
    Stack,
)
from convmatrix.errors import BadInput
from convmatrix.escape import one_line
from convmatrix.gpus import MIG_PROFILE
from convmatrix.matrix.values import LANES
from convmatrix.results import libraries, rundir
from convmatrix.results.families import FAMILIES
from convmatrix.results.outcomes import Outcome, Verdict
from convmatrix.results.rundir import records

# The bounds (docs/contracts.md, "Bundles"). A fleet's nightly run is about 1,000 cells of 200
# cases, 30 MB of bundle with every passing case kept; a bundle past these is refused whole.
MAX_BYTES = 64 << 20
# A bundle nests 11 deep: file > bundle > runs > run > cells > cell > cases > case > repro > params > list.
MAX_DEPTH = 12
# Arrays and objects in the file, counted before JSON parses it: a sound bundle has one per 35
# bytes or more (a passing case, 120 bytes, is 3), and 64 MiB of "{}," held 2 GB once parsed.
MAX_CONTAINERS = 3_000_000
MAX_RUNS = 1_000
MAX_CELLS = 10_000  # per run
MAX_CASES = 20_000  # per cell: results.jsonl's own bound (rundir.MAX_LINES)
MAX_LIST = 8  # known ids, sources, a parameter's list of ints
MAX_DROPPED = 64
MAX_FIELDS = 32  # keys of a repro's params or knobs
MAX_TEXT = 300  # the longest free-ish text: a reason, a line of `dropped`
MAX_URL = 500
MAX_INT = 1 << 40  # prove/repro.py's bound on any dimension, stride or padding
MAX_SUBCODE = 99_999  # cuDNN 9's sub-codes are four digits (3002)

DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", re.ASCII)
FLEET = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", re.ASCII)
TOOL = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+-]{0,39}", re.ASCII)
RUN_ID = re.compile(r"[0-9a-f]{16,64}", re.ASCII)
_SHA256 = re.compile(r"[0-9a-f]{64}", re.ASCII)
# GPU models as nvidia-smi names them: "NVIDIA H200", "Tesla V100-SXM2-16GB", "NVIDIA A100 80GB PCIe".
MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+-]{0,63}", re.ASCII)
CAPABILITY = re.compile(r"[0-9]{1,2}\.[0-9]", re.ASCII)
# torch.__version__ with its local part: 2.11.0+cu130, 2.5.0a0+git1234abc, 2.13.0.dev20261201+cpu.
TORCH = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}(?:(?:a|b|rc|\.dev|\.post)[0-9]{1,10})?(?:\+[a-z0-9.]{1,40})?",
                    re.ASCII)
CUDA = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}(?:\.[0-9]{1,3})?", re.ASCII)
CUDNN = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}\.[0-9]{1,3}", re.ASCII)
DRIVER = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}", re.ASCII)
IMAGE = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)
KNOWN = re.compile(r"[a-z0-9][a-z0-9-]{0,79}", re.ASCII)  # results/known.py's id
# Printable ASCII without a space, a quote, a backslash, a backtick or an angle bracket: nothing
# that ends an attribute or a string wherever the site puts it (it still escapes it).
URL = re.compile(r"https?://[!#-&(-;=?-\[\]-_a-~]{1,490}", re.ASCII)
KEY = re.compile(r"[a-z][a-z0-9_]{0,31}", re.ASCII)  # a repro's param or knob name
WORD = re.compile(r"[A-Za-z0-9_.+-]{1,40}", re.ASCII)  # a repro's string value: conv2d, float16, channels_last
# torch._C._select_conv_backend's names (Cudnn, Slow3d, MiopenTranspose, Mkldnn, Overrideable ...).
BACKEND = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}", re.ASCII)
MAX_RATIO = 1e9  # a ratio of two measurements: 50,000x slower is a real fallback's, a billion none
# The fields a later version added, per type: a file of an earlier version has none of them.
_LATER: dict[type, set[str]] = {Case: {"cost"}, Cell: {"libraries"}}
_ORIGINS = frozenset(libraries.ORIGINS)
SHAPES = ("input", "weight", "bias", "output")
DEVICES = ("cuda", "cpu")
VERDICTS = frozenset(v.value for v in Verdict)
OUTCOMES = frozenset(o.value for o in Outcome)
_FAMILIES = frozenset(FAMILIES)
_LANES = frozenset(LANES)

T = TypeVar("T")


class BadBundle(BadInput):
    """A bundle that is not one: too big, not JSON, a wrong format, version or checksum, or a field
    that does not fit. One line naming the file and the field (exit 2, as all bad input)."""


# --- writing -------------------------------------------------------------------------------------

def canonical(value: Any) -> bytes:
    """The bytes the checksum is taken of: the same for any writer that sorts keys."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def digest(bundle: Bundle) -> str:
    """The bundle's checksum, as its file's `sha256` field holds it: a name for it that no order
    of the files given changes (the atlas names a bundle so where it has no file name)."""
    return hashlib.sha256(canonical(plain(bundle))).hexdigest()


def write(bundle: Bundle) -> bytes:
    """The bundle file's bytes (UTF-8 JSON, ASCII in fact; one line of it per run for a reader
    with a text editor is not worth the size: the file is for machines)."""
    value = plain(bundle)
    wrapper = {"format": FORMAT, "version": VERSION, "sha256": hashlib.sha256(canonical(value)).hexdigest(),
               "bundle": value}
    return json.dumps(wrapper, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def plain(value: Any) -> Any:
    """dataclasses.asdict's value (tuples and mappings as JSON has them), 2.5 times as fast: a
    1,000-cell bundle is 200,000 cases, and asdict (a deep copy of every leaf) took 2.3 of the
    3.4 s its writing took (now 0.9 of 2.2). The model's classes by a lookup, anything else as
    asdict sees it."""
    kind = type(value)
    names = _FIELDS.get(kind)
    if names is not None:
        return {name: plain(getattr(value, name)) for name in names}
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is tuple or kind is list:
        return [plain(item) for item in value]
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


_FIELDS = {kind: tuple(f.name for f in dataclasses.fields(kind))
           for kind in (Bundle, Run, Cell, Case, Repro, Stack, Gpu, Cost, Libraries, LoadedFile)}


# --- reading -------------------------------------------------------------------------------------

def read(path: Path) -> Bundle:
    """The bundle in path: a regular file (never a link, a FIFO or a device), at most MAX_BYTES."""
    name = str(path)
    try:
        data = rundir.read_plain(path, MAX_BYTES)
    except FileNotFoundError:
        raise BadBundle(f"{one_line(name)}: no such file") from None
    except OSError as exc:  # tree.Refused (a link, a FIFO, past MAX_BYTES) says which in one line
        raise BadBundle(f"{one_line(name)}: not read ({one_line(str(exc.strerror or exc))})") from None
    return parse(data, name)


def parse(data: bytes, name: str) -> Bundle:
    """The bundle in data (a file's bytes); BadBundle naming name and the first bad field."""
    where = one_line(name)[:200]
    try:
        # unique_keys: a key given twice is read as its last value here and as its first by other
        # readers (a reviewer's tool): what the atlas merges must be what anyone reading the file sees.
        top = jsonread.loads(data, max_depth=MAX_DEPTH, max_bytes=MAX_BYTES, max_containers=MAX_CONTAINERS,
                             unique_keys=True)
    except (jsonread.TooBig, jsonread.DuplicateKey) as exc:
        raise BadBundle(f"{where}: {exc}; not read") from None
    except ValueError as exc:  # not UTF-8, not JSON, an integer of too many digits
        raise BadBundle(f"{where}: not a bundle (not JSON: {one_line(str(exc))[:120]})") from None
    check = _Checker(where)
    if not isinstance(top, dict):
        raise check.bad("(top)", f"expected an object, got {_shown(top)}")
    if top.get("format") != FORMAT:
        raise check.bad("format", f"expected {FORMAT!r}, got {_shown(top.get('format'))}")
    if top.get("version") not in READS or type(top.get("version")) is not int:
        raise check.bad("version", f"version {_shown(top.get('version'))} is not one this convmatrix reads "
                                   f"({', '.join(map(str, READS))})")
    check.version = top["version"]
    check.keys(top, "(top)", {"format", "version", "sha256", "bundle"})
    digest = check.text(top, "(top)", "sha256", _SHA256)
    value = top["bundle"]
    if hashlib.sha256(canonical(value)).hexdigest() != digest:
        raise check.bad("sha256", "does not match the bundle (damaged or edited after export)")
    return check.bundle(value)


def _shown(value: Any) -> str:
    """A bad value as a message shows it: short, one line, escaped."""
    return one_line(repr(value))[:60]


class _Checker:
    """Each field against its type and bound, each BadBundle naming the field's path."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.version = VERSION

    def bad(self, field: str, what: str) -> BadBundle:
        return BadBundle(f"{self.where}: field {field}: {what}")

    def obj(self, value: Any, at: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.bad(at, f"expected an object, got {_shown(value)}")
        return value

    def keys(self, value: dict[str, Any], at: str, wanted: set[str]) -> None:
        """Exactly the fields wanted: a new field is a new version (model.VERSION)."""
        if extra := sorted(set(value) - wanted, key=str):
            raise self.bad(f"{at}.{_shown(extra[0])}", "not a field of this version")
        if missing := sorted(wanted - set(value)):
            raise self.bad(f"{at}.{missing[0]}", "missing")

    def fields(self, value: Any, at: str, kind: type) -> dict[str, Any]:
        found = self.obj(value, at)
        wanted = {f.name for f in dataclasses.fields(kind)} - (_LATER.get(kind, set()) if self.version < VERSION
                                                               else set())
        self.keys(found, at, wanted)
        return found

    def ratio(self, value: dict[str, Any], at: str, key: str) -> float | None:
        """A ratio of two measurements: a finite number from 0 to MAX_RATIO, or null."""
        got = value[key]
        if got is None:
            return None
        if type(got) not in (int, float) or not 0 <= got <= MAX_RATIO:  # NaN and infinity fail the bounds
            raise self.bad(f"{at}.{key}", f"expected a number from 0 to {MAX_RATIO:g} or null, got {_shown(got)}")
        return float(got)

    def text(self, value: dict[str, Any], at: str, key: str, pattern: re.Pattern[str] | None = None,
             optional: bool = False, limit: int = MAX_TEXT) -> Any:
        got = value[key]
        if got is None and optional:
            return None
        if not isinstance(got, str):
            raise self.bad(f"{at}.{key}", f"expected {'a string or null' if optional else 'a string'}, "
                                          f"got {_shown(got)}")
        return self._string(got, f"{at}.{key}", pattern, limit)

    def choice(self, value: dict[str, Any], at: str, key: str, allowed: frozenset[str],
               optional: bool = False) -> Any:
        got = value[key]
        if got is None and optional:
            return None
        if not isinstance(got, str) or got not in allowed:
            raise self.bad(f"{at}.{key}", f"{_shown(got)} is not one of {', '.join(sorted(allowed))}")
        return got

    def date(self, value: dict[str, Any], at: str, key: str) -> str:
        got = self.text(value, at, key, DATE)
        try:
            datetime.date.fromisoformat(got)
        except ValueError:
            raise self.bad(f"{at}.{key}", f"{got!r} is no date") from None
        return str(got)

    def items(self, value: dict[str, Any], at: str, key: str, limit: int,
              each: Callable[[Any, str], T]) -> tuple[T, ...]:
        got = value[key]
        if not isinstance(got, list):
            raise self.bad(f"{at}.{key}", f"expected a list, got {_shown(got)}")
        if len(got) > limit:
            raise self.bad(f"{at}.{key}", f"{len(got):,} entries, more than {limit:,}")
        return tuple(each(item, f"{at}.{key}[{i}]") for i, item in enumerate(got))

    def strings(self, value: dict[str, Any], at: str, key: str, limit: int, pattern: re.Pattern[str] | None,
                length: int = MAX_TEXT) -> tuple[str, ...]:
        return self.items(value, at, key, limit, lambda item, here: self._string(item, here, pattern, length))

    def _string(self, item: Any, here: str, pattern: re.Pattern[str] | None, length: int) -> str:
        if not isinstance(item, str):
            raise self.bad(here, f"expected a string, got {_shown(item)}")
        if len(item) > length:
            raise self.bad(here, f"{len(item):,} characters, more than {length}")
        if pattern is not None and not pattern.fullmatch(item):
            raise self.bad(here, f"{_shown(item)} does not fit {pattern.pattern}")
        if pattern is None and not item.isprintable():
            raise self.bad(here, f"{_shown(item)} is not one printable line")
        return item

    def integer(self, value: dict[str, Any], at: str, key: str, low: int, high: int) -> int | None:
        got = value[key]
        if got is None:
            return None
        if type(got) is not int or not low <= got <= high:  # type(): a bool is no sub-code
            raise self.bad(f"{at}.{key}", f"expected an integer from {low} to {high} or null, got {_shown(got)}")
        return got

    def flag(self, value: dict[str, Any], at: str, key: str) -> bool:
        got = value[key]
        if type(got) is not bool:
            raise self.bad(f"{at}.{key}", f"expected true or false, got {_shown(got)}")
        return got

    # --- the types of model.py, outermost first ---

    def bundle(self, value: Any) -> Bundle:
        at = "bundle"
        found = self.fields(value, at, Bundle)
        return Bundle(
            fleet=self.text(found, at, "fleet", FLEET),
            created=self.date(found, at, "created"),
            tool=self.text(found, at, "tool", TOOL),
            runs=self.items(found, at, "runs", MAX_RUNS, self.run),
            dropped=self.strings(found, at, "dropped", MAX_DROPPED, None),
        )

    def run(self, value: Any, at: str) -> Run:
        found = self.fields(value, at, Run)
        return Run(run=self.text(found, at, "run", RUN_ID), date=self.date(found, at, "date"),
                   cells=self.items(found, at, "cells", MAX_CELLS, self.cell))

    def cell(self, value: Any, at: str) -> Cell:
        found = self.fields(value, at, Cell)
        return Cell(stack=self.stack(found["stack"], f"{at}.stack"), gpu=self.gpu(found["gpu"], f"{at}.gpu"),
                    verdict=self.choice(found, at, "verdict", VERDICTS), control=self.flag(found, at, "control"),
                    cases=self.items(found, at, "cases", MAX_CASES, self.case),
                    libraries=None if found.get("libraries") is None else self.libraries(found["libraries"],
                                                                                          f"{at}.libraries"))

    def libraries(self, value: Any, at: str) -> Libraries:
        found = self.fields(value, at, Libraries)
        return Libraries(swapped=self.flag(found, at, "swapped"),
                         cudnn=self.items(found, at, "cudnn", libraries.MAX_KEPT, self.loaded_file))

    def loaded_file(self, value: Any, at: str) -> LoadedFile:
        found = self.fields(value, at, LoadedFile)
        return LoadedFile(name=self.text(found, at, "name", libraries.STEM),
                          version=self.text(found, at, "version", CUDNN, optional=True),
                          origin=self.choice(found, at, "origin", _ORIGINS, optional=True))

    def stack(self, value: Any, at: str) -> Stack:
        found = self.fields(value, at, Stack)
        return Stack(torch=self.text(found, at, "torch", TORCH, optional=True),
                     cuda=self.text(found, at, "cuda", CUDA, optional=True),
                     cudnn=self.text(found, at, "cudnn", CUDNN, optional=True),
                     driver=self.text(found, at, "driver", DRIVER, optional=True),
                     image_digest=self.text(found, at, "image_digest", IMAGE, optional=True),
                     lane=self.choice(found, at, "lane", _LANES))

    def gpu(self, value: Any, at: str) -> Gpu:
        found = self.fields(value, at, Gpu)
        capability = self.text(found, at, "capability", CAPABILITY)
        generation = self.text(found, at, "generation", None)
        if generation != generation_of(capability):
            raise self.bad(f"{at}.generation", f"{_shown(generation)} is not capability {capability}'s "
                                               f"({generation_of(capability)})")
        return Gpu(model=self.text(found, at, "model", MODEL), capability=capability, generation=generation,
                   mig=self.text(found, at, "mig", MIG_PROFILE, optional=True))

    def case(self, value: Any, at: str) -> Case:
        found = self.fields(value, at, Case)
        repro = found["repro"]
        return Case(case=self.text(found, at, "case", records.CASE_ID),
                    verdict=self.choice(found, at, "verdict", VERDICTS),
                    outcome=self.choice(found, at, "outcome", OUTCOMES),
                    family=self.choice(found, at, "family", _FAMILIES, optional=True),
                    subcode=self.integer(found, at, "subcode", 0, MAX_SUBCODE),
                    reason=self.text(found, at, "reason", None, optional=True),
                    known=self.strings(found, at, "known", MAX_LIST, KNOWN),
                    sources=self.strings(found, at, "sources", MAX_LIST, URL, MAX_URL),
                    repro=None if repro is None else self.repro(repro, f"{at}.repro"),
                    cost=None if found.get("cost") is None else self.cost(found["cost"], f"{at}.cost"))

    def cost(self, value: Any, at: str) -> Cost:
        found = self.fields(value, at, Cost)
        return Cost(backend=self.text(found, at, "backend", BACKEND, optional=True),
                    control_backend=self.text(found, at, "control_backend", BACKEND, optional=True),
                    memory_ratio=self.ratio(found, at, "memory_ratio"), time_ratio=self.ratio(found, at, "time_ratio"),
                    time_ratio_low=self.ratio(found, at, "time_ratio_low"))

    def repro(self, value: Any, at: str) -> Repro:
        found = self.fields(value, at, Repro)
        shapes = found["shapes"]
        if shapes is not None:
            shapes = self.table(shapes, f"{at}.shapes")
            if extra := sorted(set(shapes) - set(SHAPES)):
                raise self.bad(f"{at}.shapes.{extra[0]}", f"not one of {', '.join(SHAPES)}")
            if bad := next((k for k, v in shapes.items() if not isinstance(v, list)), None):
                raise self.bad(f"{at}.shapes.{bad}", f"expected a list of integers, got {_shown(shapes[bad])}")
        return Repro(params=self.table(found["params"], f"{at}.params"), shapes=shapes,
                     knobs=self.table(found["knobs"], f"{at}.knobs"),
                     device=self.choice(found, at, "device", frozenset(DEVICES)))

    def table(self, value: Any, at: str) -> dict[str, Any]:
        """A repro's params, shapes or knobs: named scalars (null, a bool, an integer, a word) or
        short lists of integers, as a results line holds them; prove/repro.py checks the rest."""
        found = self.obj(value, at)
        if len(found) > MAX_FIELDS:
            raise self.bad(at, f"{len(found)} fields, more than {MAX_FIELDS}")
        for key, item in found.items():
            if not KEY.fullmatch(key):
                raise self.bad(f"{at}.{_shown(key)}", f"not a field name ({KEY.pattern})")
            if not scalar(item) and not (isinstance(item, list) and len(item) <= MAX_LIST
                                          and all(integer(x) for x in item)):
                raise self.bad(f"{at}.{key}", f"expected null, true, false, an integer, a word or a list of "
                                              f"up to {MAX_LIST} integers, got {_shown(item)}")
        return dict(found)


def generation_of(capability: str) -> str:
    """A compute capability's generation as the atlas names its columns: '9.0' -> 'sm90', '12.0' ->
    'sm120' (the `sm<major><minor>` of a GPU key, gpus.gpu_key)."""
    return f"sm{capability.replace('.', '')}"


def integer(value: Any) -> bool:
    return type(value) is int and -MAX_INT <= value <= MAX_INT


def scalar(value: Any) -> bool:
    return value is None or type(value) is bool or integer(value) or (isinstance(value, str)
                                                                      and WORD.fullmatch(value) is not None)


def summary(bundle: Bundle) -> Mapping[str, int]:
    """How much a bundle holds: runs, cells, cases (export --show, the cli's one line)."""
    cells = [cell for run in bundle.runs for cell in run.cells]
    return {"runs": len(bundle.runs), "cells": len(cells), "cases": sum(len(c.cases) for c in cells)}
