"""The one definition of the suite's record formats: results.jsonl lines and env.json.

The suite writes them; the harness (convmatrix.results.rundir) loads this file by its path to read and
check them, so the two can never disagree on a field, a type or a timestamp format. Stdlib only
and Python 3.8 syntax: it runs inside any image the suite runs in.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
from typing import Any

SCHEMA = 1

# The case outcomes a results line may carry (suites/README.md: "What it writes into DIR").
STATUSES = ("passed", "failed", "error", "skipped", "crashed", "timeout")
# A case id, as the catalogue makes them (and user case files, prefixed by their file's stem):
# what the harness puts in a file name (evidence/<case>.txt) and a node id, so no '/', no NUL,
# no '..' at the start, no space, bounded.
CASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,159}", re.ASCII)

NUMBER = (int, float)
TEXT = (str,)
NONE = (type(None),)

# field -> the JSON types it may hold. A reader checks every field it finds against this, so a
# line written by something else (a hand edit, another tool, a future version) is named, not
# trusted.
RESULT_FIELDS: dict[str, tuple[type, ...]] = {
    "schema": (int,),
    "cell_id": TEXT + NONE,
    "case": TEXT,
    "nodeid": TEXT + NONE,
    "params": (dict,),
    "knobs": (dict,),
    "device": TEXT + NONE,
    "status": TEXT,
    "exc_type": TEXT + NONE,
    "message": TEXT + NONE,
    "warnings": (list,),
    "numeric": (dict, *NONE),
    "duration_s": NUMBER + NONE,
    "worker": TEXT + NONE,
    "started": TEXT + NONE,
    "ended": TEXT + NONE,
    # facts a case hands the recorder (conftest.FACT_FIELDS)
    "timing": (dict, *NONE),
    "fingerprint": (dict, *NONE),
    "need_mb": NUMBER + NONE,
    "scaled": (bool, *NONE),
    "trigger": TEXT + NONE,
    "sources": (list, *NONE),
    "audit": (dict, *NONE),  # the CUDA library audit's table (test_audit.py), on its own case's line
    "after_convs": (dict, *NONE),  # what a GPU run mapped after its conv cases (afterconvs.py), on its line
}
RESULT_REQUIRED = ("schema", "case", "status")

ENV_FIELDS: dict[str, tuple[type, ...]] = {
    "schema": (int,),
    "cell_id": TEXT + NONE,
    "torch": TEXT + NONE,
    "cuda": TEXT + NONE,
    "cudnn": (int, *NONE),
    "cudnn_error": TEXT + NONE,
    "python": TEXT + NONE,
    "platform": TEXT + NONE,
    "machine": TEXT + NONE,
    "driver": TEXT + NONE,
    "gpus": (list,),
    "device": TEXT + NONE,
    "lane": TEXT + NONE,
    "image_id": TEXT + NONE,
    "hostname": TEXT + NONE,
    "pid": (int, *NONE),
    "started": TEXT + NONE,
    "ended": TEXT + NONE,
    "knobs": (dict,),
    "suite_version": TEXT + NONE,  # a digest of the suite's code (suite_version, below)
    "argv": (list,),
    "isolation": (dict,),
    "continued": (list,),  # the later attempts of a run continued after a crash (--continue-run)
}
GPU_FIELDS: dict[str, tuple[type, ...]] = {
    "index": (int,),
    "name": TEXT,
    "capability": TEXT,
    "memory_mb": NUMBER + NONE,
}

_TYPE_NAMES = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "object",
               list: "array", type(None): "null"}


def now() -> str:
    """The one timestamp format of every record: ISO-8601 UTC with milliseconds."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def suite_version(suite_dir: str) -> str:
    """A digest of the suite's own code (its .py files and pytest.ini in suite_dir) and of its zoo
    (models/*.json: a changed zoo is a changed suite): two runs with the same one ran the same
    cases the same way. The suite records it in env.json (what `convmatrix prove` checks); the
    harness keys reused results by it."""
    digest = hashlib.sha256()
    models = os.path.join(suite_dir, "models")
    zoo = sorted(os.listdir(models)) if os.path.isdir(models) else []
    for name in [*sorted(os.listdir(suite_dir)), *(f"models/{n}" for n in zoo if n.endswith(".json"))]:
        if name.endswith(".py") or name == "pytest.ini" or name.startswith("models/"):
            with open(os.path.join(suite_dir, name), "rb") as handle:
                digest.update(name.encode() + b"\0" + handle.read() + b"\0")
    return digest.hexdigest()[:16]


def parse_time(text: object) -> datetime.datetime | None:
    """A record's timestamp as an aware datetime (older 'Z' stamps too); None if unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        stamp = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.timezone.utc)


def outran(marker: dict[str, Any], timeout: float) -> bool:
    """Whether the case a running-*.json marker names had run `timeout` seconds (> 0) or more
    by now: a process that died then was ended for hanging, not by a crash. The harness (for
    an --in-process run) and the xdist controller (for a worker) both judge by it."""
    started = parse_time(marker.get("started"))
    return timeout > 0 and started is not None and (
        datetime.datetime.now(datetime.timezone.utc) - started).total_seconds() >= timeout


def type_problems(record: dict[str, Any], fields: dict[str, tuple[type, ...]],
                  required: tuple[str, ...] = ()) -> list[str]:
    """One "field 'x': ..." line per field of the wrong JSON type or missing; [] when sound."""
    problems = [f"field {name!r}: missing" for name in required if name not in record]
    for name, value in record.items():
        allowed = fields.get(name)
        if allowed is None or _is_a(value, allowed):
            continue
        wanted = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in allowed)
        got = _TYPE_NAMES.get(type(value), type(value).__name__)
        problems.append(f"field {name!r}: expected {wanted}, got {got} {_short(value)}")
    return problems


# The field names, then their types, of the lines found sound so far: one writer makes few
# shapes. One flat tuple (names are strings, types are not: the halves cannot be confused): a
# report reads 200,000 lines, and a pair of tuples cost a third more to make and hash.
_SOUND_SHAPES: set[tuple[Any, ...]] = set()


def result_problems(record: dict[str, Any]) -> list[str]:
    """What is wrong with one results.jsonl line (types, required fields, status); [] if sound."""
    shape = (*record, *map(type, record.values()))
    if shape in _SOUND_SHAPES:
        problems = []
    else:
        problems = type_problems(record, RESULT_FIELDS, RESULT_REQUIRED)
        if not problems and len(_SOUND_SHAPES) < 4096:
            _SOUND_SHAPES.add(shape)
    status = record.get("status")
    if isinstance(status, str) and status not in STATUSES:
        problems.append("field 'status': {!r} is not one of {}".format(status, ", ".join(STATUSES)))
    case = record.get("case")
    if isinstance(case, str) and case not in _SOUND_IDS:
        if not CASE_ID.fullmatch(case):
            problems.append(f"field 'case': not a case id (letters, digits, '_.+-', at most 160): {_short(case)}")
        elif len(_SOUND_IDS) < 16384:
            _SOUND_IDS.add(case)
    return problems


# The case ids found sound so far: a fleet's report reads each of a few hundred ids once per cell
# (200,000 lines), and a set look-up costs a sixth of the regular expression's full match.
_SOUND_IDS: set[str] = set()


def env_problems(env: dict[str, Any]) -> list[str]:
    """What is wrong with an env.json object, its GPU entries included; [] if sound."""
    problems = type_problems(env, ENV_FIELDS, ("schema",))
    gpus = env.get("gpus")
    for index, gpu in enumerate(gpus if isinstance(gpus, list) else []):
        if not isinstance(gpu, dict):
            problems.append(f"field 'gpus[{index}]': expected object, got {_short(gpu)}")
            continue
        problems += ["gpus[{}].{}".format(index, p[len("field "):])
                     for p in type_problems(gpu, GPU_FIELDS, ("name", "capability"))]
    return problems


def crash_record(*, cell_id: str | None, case: str, nodeid: str | None, status: str,
                 message: str, worker: str, started: str | None,
                 knobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The line for a case whose process died (crashed) or ran past its time (timeout) before
    it could write its own: written by the xdist controller or, after the fact, the harness."""
    knobs = dict(knobs or {})
    return {
        "schema": SCHEMA,
        "cell_id": cell_id,
        "case": case,
        "nodeid": nodeid,
        "params": {},
        "knobs": knobs,
        "device": knobs.get("device"),
        "status": status,
        "exc_type": None,
        "message": message,
        "warnings": [],
        "numeric": None,
        "duration_s": None,
        "worker": worker,
        "started": started,
        "ended": now(),
    }


def _is_a(value: object, allowed: tuple[type, ...]) -> bool:
    # JSON has no int/bool distinction worth trusting: true is not a count, 1 is not a flag.
    if isinstance(value, bool):
        return bool in allowed
    return isinstance(value, allowed)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
