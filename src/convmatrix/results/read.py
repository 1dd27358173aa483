"""Reading results directories (env.json, results.jsonl, cell.json) into classified cell results."""

from __future__ import annotations

import datetime
import itertools
import operator
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from convmatrix import forkmap, jsonread
from convmatrix.gpus import CPU_KEY, gpu_key, key_parts
from convmatrix.matrix import stacks
from convmatrix.results import families as classify
from convmatrix.results import infra, libraries, plans, rundir, stackcheck
from convmatrix.results.infra import Attempt, RootCause
from convmatrix.results.libraries import Library
from convmatrix.results.outcomes import FAILING, OF_STATUS, Outcome
from convmatrix.results.rundir import records
from convmatrix.tree import Tree

SCHEMA = records.SCHEMA
# cell.json, the harness's own record: field -> JSON types (rundir writes it).
CELL_FIELDS: dict[str, tuple[type, ...]] = {
    "schema": (int,), "cell": (str,), "lane": (str,), "requested": (dict,), "expected": (dict,),
    "control": (bool,), "gpu_key": (str,), "gpu": (dict, type(None)), "python": (str,),
    "started": (str,), "ended": (str,), "exit_code": (int, type(None)), "error": (str, type(None)),
    "evidence": (dict,), "matrix": (str,), "observed": (dict,), "knobs": (str,), "host": (str,),
    "not_run": (str,), "optional": (bool,), "unsupported": (str,), "expected_skips": (list,),
    "reused": (dict,), "cause": (dict,), "attempts": (list,), "audit_only": (bool,),
}
MAX_SKIPS = 64  # [[expected_skip]] entries a cell may carry (each up to MAX_GLOBS case globs)
MAX_GLOBS = 64
# first_cause.json, written by the harness when a cell finishes (family null: none named).
CAUSE_FIELDS: dict[str, tuple[type, ...]] = {
    "schema": (int,), "family": (str, type(None)), "line": (int, type(None)), "rank": (int, type(None)),
    "fatal": (bool,),
}
EPOCH = datetime.datetime.min.replace(tzinfo=datetime.UTC)


# A fleet's report reads 200,000 of these, so they are made as cheaply as Python allows: slots;
# not frozen (a frozen __init__ sets each field through object.__setattr__, three times the
# cost); not keyword-only, as a call with keywords costs three times one without (each keyword
# is matched by name). check_line, the one place that makes them by the thousand, passes the
# fields in order; every other caller names them. Nothing changes a Case once made.
@dataclass(slots=True)
class Case:
    case: str
    outcome: Outcome
    family: str | None
    message: str | None
    knobs: dict[str, Any]
    warnings: tuple[str, ...]  # families seen in the case's warnings (a passing case keeps them)
    forward_ms: float | None = None  # device time of the conv (timing.forward_ms), for slowdowns
    fingerprint: str | None = None  # a digest of the rounded output (fingerprint.sha), for drift
    evidence: str | None = None  # evidence/<case>.txt beside the results, when the harness saved one
    params: dict[str, Any] = field(default_factory=dict)  # the case's catalog fields (prove compares them)
    forward_runs: tuple[float, ...] = ()  # the repeated forward calls' ms (timing.forward_runs), for the spread
    sources: tuple[str, ...] = ()  # the public reports the case reproduces (https URLs), shown when it fails
    duration_s: float | None = None  # the case's wall time (duration_s), kept by the history
    backend: str | None = None  # torch._C._select_conv_backend's choice (results line `backend`)
    peak_bytes: int | None = None  # peak memory of its checked forward call (timing.peak_bytes)
    reference_ms: tuple[float, ...] = ()  # the reference workload's ms beside its runs (timing.reference_ms)
    kernels: tuple[str, ...] = ()  # the GPU kernels the profiler saw (timing.kernels)
    libraries: tuple[Library, ...] = ()  # the library audit's table (its own case's line only; results/libraries.py)
    shipped: tuple[Library, ...] = ()  # its table of the image as shipped (audit.as_shipped; a container cell's)

    def __reduce__(self) -> tuple[type[Case], tuple[Any, ...]]:
        # Pickled as its fields in order (forkmap brings a fleet's share of cases back from a
        # child): a slotted dataclass's default goes through copyreg in Python (420 cells: 1.6
        # times as long to pickle, 2.4 times to unpickle).
        return Case, _FIELDS(self)


_FIELDS = operator.attrgetter(*Case.__slots__)


@dataclass(frozen=True, kw_only=True)
class FirstCause:
    """What triage makes of a failing cell's log.txt: the first fatal failure's family and where."""

    log: str  # the log.txt it was found in
    family: str
    line: int | None
    rank: int | None
    fatal: bool


@dataclass(frozen=True, kw_only=True)
class Explanation:
    """What `--explain` found for a failing case (<cell>/explain/<explain_name>.json, run/explain.py):
    cuDNN's own status and reason from its API log, the backend PyTorch chose and by which path,
    and how the case ran without cuDNN."""

    status: str | None = None  # cuDNN's status, e.g. CUDNN_STATUS_NOT_SUPPORTED_SHAPE
    subcode: int | None = None  # its number (3002)
    meaning: str | None = None  # the sub-code's short meaning
    cause: str | None = None  # gpu | software | environment | unknown
    reason: str | None = None  # cuDNN's "Reason: ..." text
    function: str | None = None  # the cuDNN function that said it
    log: str | None = None  # the log it was read from, relative to the cell directory
    backend: str | None = None  # torch._C._select_conv_backend's choice (CudnnTranspose, ...)
    cudnn_path: str | None = None  # get (heuristics) or find (cudnn.benchmark)
    cudnn_off: str | None = None  # the case's status with torch.backends.cudnn.enabled = False
    cudnn_is_the_cause: bool = False  # it failed with cuDNN and passed without
    # When the log names no failure, what it shows cuDNN did (explain.json's "activity"):
    last_operation: str | None = None  # the operation of the last plan executed (CONVOLUTION_BACKWARD_FILTER)


_OPERATION = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
EXPLAIN_TEXT = 500  # characters kept of each text field of an explanation (the file is untrusted)


@dataclass(frozen=True, kw_only=True)
class CellResult:
    cell: str
    gpu_key: str
    gpu: dict[str, Any]
    lane: str
    path: Path
    host: str = ""  # the machine that ran it (cell.json); "" for results from before hosts were recorded
    requested: dict[str, Any] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)
    marked_control: bool = False
    cases: dict[str, Case] = field(default_factory=dict)
    problems: tuple[str, ...] = ()  # why the run did not complete cleanly
    stack_mismatch: tuple[str, ...] = ()
    blocking: dict[str, Case] = field(default_factory=dict)  # the CUDA_LAUNCH_BLOCKING=1 re-run
    ended: datetime.datetime = EPOCH  # when the run ended (EPOCH: it did not), to pick the newest
    first_cause: FirstCause | None = None
    not_run: str | None = None  # why a planned cell did not run here (cell.json, or no result at all)
    optional: bool = False  # the matrix marked it optional: its not running fails nothing
    unsupported: str | None = None  # why this runner cannot run the stack (its driver is too old)
    reused: bool = False  # a stored result of an earlier run (cell.json's `reused`, run/reuse.py)
    # Whether first_cause is known: read from first_cause.json, or worked out from log.txt by
    # the cli for a directory without one (older, or copied from elsewhere).
    cause_known: bool = False
    explained: dict[str, Explanation] = field(default_factory=dict)  # --explain, by failing case
    # The matrix's [[expected_skip]] entries for this cell (cell.json): (case globs, reason) each.
    expected_skips: tuple[tuple[tuple[str, ...], str], ...] = ()
    # Why it could not install, build, start or finish (results/infra.py): cell.json's `cause`, else
    # read from its set-up error or not-run reason (a directory from before causes were recorded).
    infra_cause: RootCause | None = None
    # --retries: the earlier attempts the harness ran again (cell.json's `attempts`); this is the last.
    attempts: tuple[Attempt, ...] = ()
    # `convmatrix run --audit-only` (cell.json's `audit_only`): only the library audit case ran; the
    # judged night compares that case alone (results/night.py), and the history refuses the run.
    audit_only: bool = False

    @property
    def did_not_run(self) -> bool:
        """It never ran a case, for a cause of the infrastructure: one line, no case owed one by one."""
        return self.infra_cause is not None and not self.cases

    @property
    def failing(self) -> bool:
        # `in FAILING` over a list, not the property in a generator: asked of each of a fleet's cells
        return not FAILING.isdisjoint([c.outcome for c in self.cases.values()])

    def families(self) -> set[str]:
        return {c.family for c in self.cases.values() if c.family}

    def __reduce__(self) -> tuple[Callable[..., CellResult], tuple[Any, ...]]:
        # Pickled with its cases as their fields' tuples (forkmap brings a fleet's share of cells
        # back from a child): one C map a cell makes them, where pickling each Case through its own
        # __reduce__ was a Python call a case (a fleet's 84,000 took the child 0.21 s, now 0.12 s,
        # while the report's own process waited); rebuilt by _cell_result as the plain loop made it.
        state = dict(self.__dict__)
        cases = state.pop("cases")
        return _cell_result, (state, list(cases), list(map(_FIELDS, cases.values())))


def _cell_result(state: dict[str, Any], names: list[str], fields: list[tuple[Any, ...]]) -> CellResult:
    """A CellResult as CellResult.__reduce__ pickled it."""
    return CellResult(**state, cases=dict(zip(names, itertools.starmap(Case, fields), strict=True)))


@dataclass(kw_only=True)
class Loaded:
    results: list[CellResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # bad input: one line each, file and field
    notes: list[str] = field(default_factory=list)  # what the loader decided for the reader (duplicates)
    expected: list[plans.Expected] = field(default_factory=list)  # what the run directories' plans expect
    fleet_gpus: list[str] = field(default_factory=list)  # the GPU keys their matrices' [fleet] tables name
    run_dirs: list[Path] = field(default_factory=list)  # the run directories given (not cell directories)
    planned: list[datetime.datetime] = field(default_factory=list)  # when each of their plans was first written


def load(paths: Iterable[str | Path], expect_gpus: Sequence[str] = ()) -> Loaded:
    """Every result under paths; with the run directories' plans, every planned cell@gpu@host that
    has none as a not-run result; with GPU keys expected (expect_gpus, the plans' [fleet].gpus),
    every planned cell on each of them, on any host."""
    loaded = Loaded()
    found: list[CellResult] = []
    for raw in paths:
        path = Path(raw)
        if "\x00" in str(path):
            loaded.errors.append(f"{str(path)!r}: not a path (it holds a NUL)")
            continue
        dirs = result_dirs(path, loaded.notes)
        if path.is_dir() and not is_result_dir(path):
            loaded.run_dirs.append(path)
            expected, fleet = plans.read(path, loaded.errors, loaded.planned)
            loaded.expected += expected
            loaded.fleet_gpus = list(dict.fromkeys([*loaded.fleet_gpus, *fleet]))
        if not dirs and not (path.is_dir() and (path / plans.PLANS).is_dir()):
            loaded.errors.append(f"{path}: no results here (expected a run directory or a cell results directory)")
        # Each cell read alone (with the lines it adds to errors): a fleet's share on a second CPU.
        for result, errors in forkmap.mapped(load_alone, dirs):
            loaded.errors += errors
            if result is not None:
                found.append(result)
    loaded.results = newest_per_cell(found, loaded.notes)
    fleet = list(dict.fromkeys([*loaded.fleet_gpus, *expect_gpus]))[:plans.MAX_FLEET_GPUS]
    wanted = [*loaded.expected, *fleet_expected(loaded.expected, loaded.results, fleet, expect_gpus)]
    loaded.results += not_run(loaded.results, wanted, loaded.run_dirs)
    return loaded


def fleet_expected(planned: Sequence[plans.Expected], results: Sequence[CellResult], keys: Sequence[str],
                   given: Sequence[str]) -> list[plans.Expected]:
    """Each cell (planned, else found) on each expected GPU key, on any host: a generation no runner
    reported is not-run for every cell."""
    cells: dict[str, plans.Expected] = {}
    for e in planned:
        cells.setdefault(e.cell, e)
    for r in results:
        cells.setdefault(r.cell, plans.Expected(cell=r.cell, gpu_key=r.gpu_key, host=None, lane=r.lane,
                                                requested=r.requested, optional=r.optional))
    return [plans.Expected(cell=e.cell, gpu_key=key, host=None, optional=e.optional, lane=e.lane,
                           requested=e.requested, source="--expect-gpu" if key in given else "[fleet].gpus")
            for key in keys for e in cells.values()]


def not_run(results: Sequence[CellResult], expected: Iterable[plans.Expected],
            run_dirs: Sequence[Path]) -> list[CellResult]:
    """A planned cell@gpu@host with no result at all: `not-run`, never absent from the report.
    (A result that did not complete is INVALID; one recorded as not run says why itself.)"""
    have = {(r.cell, r.gpu_key, r.host) for r in results}
    anywhere = {(r.cell, r.gpu_key) for r in results}
    made: dict[tuple[str, str, str], CellResult] = {}
    # Host-specific entries first: a fleet's "on any host" is then met by a host's not-run.
    for e in sorted(expected, key=lambda e: e.host is None):
        key = (e.cell, e.gpu_key, e.host or "")
        if key in made or (e.cell, e.gpu_key, e.host) in have or (e.host is None and (e.cell, e.gpu_key) in anywhere):
            continue
        planned_by = e.source.endswith(".json")
        where = Path(e.source).parent.parent if planned_by else (run_dirs[0] if run_dirs else Path("."))
        on = f" on {e.host}" if e.host else " on any host"
        made[key] = CellResult(
            cell=e.cell, gpu_key=e.gpu_key, gpu=planned_gpu(e.gpu_key), lane=e.lane or "?",
            path=where / rundir.result_name(e.cell, e.gpu_key, e.host or ""), host=e.host or "",
            requested=dict(e.requested or {}), optional=e.optional,
            not_run=f"no result{on} (planned by {e.source})" if planned_by else
                    f"no result{on}: no runner reported GPU {e.gpu_key} ({e.source} expects it)",
        )
        anywhere.add((e.cell, e.gpu_key))
    return list(made.values())


def planned_gpu(key: str) -> dict[str, Any]:
    """What a GPU key says of its GPU when nothing ran on it: its name, and its capability
    (h100-sm90 -> 9.0) for the generation."""
    if key == CPU_KEY:
        return {"name": "cpu", "capability": None, "generation": "cpu"}
    parts = key_parts(key)  # h200-sm90, h200-sm90-mig3g-71gb (a MIG slice), ...-gpu1 (--every-gpu)
    if not parts:
        return {"name": key, "capability": None, "generation": key}
    name, capability, mig = parts
    return {"name": f"{name} mig {mig}" if mig else name, "capability": capability,
            "generation": stacks.load().generation(capability)}


def newest_per_cell(found: list[CellResult], notes: list[str]) -> list[CellResult]:
    """One result per cell@gpu on each host: the one that ended last; the others are named in the
    notes (the same run given twice, or copies of one host's cell from two places). Two hosts'
    runs of one cell are two results."""
    groups: dict[tuple[str, str, str], list[CellResult]] = {}
    for result in found:
        groups.setdefault((result.cell, result.gpu_key, result.host), []).append(result)
    kept = []
    for (cell, key, host), group in groups.items():
        newest = max(group, key=lambda r: r.ended)  # max keeps the first of equals: the order given
        kept.append(newest)
        for other in group:
            if other is not newest:
                where = f"{cell}@{key}@{host}" if host else f"{cell}@{key}"
                notes.append(f"{where}: two results; kept {newest.path} (ended {stamp(newest)}), "
                             f"dropped {other.path} (ended {stamp(other)})")
    return kept


def stamp(result: CellResult) -> str:
    return "never" if result.ended == EPOCH else result.ended.isoformat(timespec="seconds")


def result_dirs(path: Path, notes: list[str] | None = None) -> list[Path]:
    if not path.is_dir():
        return []
    if is_result_dir(path):
        return [path]
    # Hidden ones are the harness's own (.locks, a container's .scratch left by a SIGKILL): no results.
    # A symlink is never followed to a cell directory: it would read what lies elsewhere.
    found = []
    for p in sorted(path.iterdir()):
        if p.name.startswith(".") or p.is_symlink() or not p.is_dir() or not is_result_dir(p):
            continue
        if superseded(p):
            if notes is not None and rundir.is_staging(p):
                # Said, not silent: the rerun it holds may have failed where the kept result passed.
                notes.append(f"{p}: an interrupted rerun beside the result {rundir.final_dir(p).name}; not read, "
                             "the earlier result stands (run the cell again to replace it)")
            continue
        found.append(p)
    return found


def superseded(path: Path) -> bool:
    """A partial directory beside the result it was to replace (a rerun killed with the
    harness): the earlier result stands. One with nothing beside it is an interrupted cell."""
    return path.name.endswith(".old") or (rundir.is_staging(path) and rundir.final_dir(path).exists())


def is_result_dir(path: Path) -> bool:
    return any((path / name).exists() for name in (rundir.ENV_JSON, rundir.RESULTS, rundir.CELL_JSON))


def read_record(path: Path, errors: list[str], check: Callable[[dict[str, Any]], list[str]],
                at: Tree | None = None) -> dict[str, Any] | None:
    """cell.json or env.json checked field by field: {} when absent, None (with one line per
    problem in errors) when unusable. at: path's folder, open already (rundir.open_plain)."""
    before = len(errors)
    data = rundir.load_object(path, errors, at=at)
    if data is None:
        return {}
    if len(errors) > before:
        return None
    if data.get("schema") != SCHEMA:
        errors.append(f"{path}: schema {data.get('schema')!r}, this convmatrix reads schema {SCHEMA}")
        return None
    problems = check(data)
    errors += [f"{path}: {problem}" for problem in problems]
    return None if problems else data


def cell_problems(meta: dict[str, Any]) -> list[str]:
    problems: list[str] = records.type_problems(meta, CELL_FIELDS)
    host = meta.get("host")
    if isinstance(host, str) and host and not rundir.HOST.fullmatch(host):
        problems.append(f"field 'host': not a host name: {host[:64]!r}")
    skips = meta.get("expected_skips")
    if isinstance(skips, list) and skips_problem(skips):
        problems.append(f"field 'expected_skips': {skips_problem(skips)}")
    return problems


def skips_problem(skips: list[Any]) -> str | None:
    """Why cell.json's expected_skips is not a list of {"cases": [glob, ...], "reason": str}."""
    if len(skips) > MAX_SKIPS:
        return f"more than {MAX_SKIPS} entries"
    for n, entry in enumerate(skips):
        if not isinstance(entry, dict) or set(entry) != {"cases", "reason"}:
            return f"entry {n}: expected {{\"cases\": [...], \"reason\": ...}}"
        cases, reason = entry["cases"], entry["reason"]
        if not isinstance(cases, list) or not cases or len(cases) > MAX_GLOBS \
                or not all(isinstance(c, str) and c for c in cases):
            return f"entry {n}: cases: expected 1 to {MAX_GLOBS} glob strings"
        if not isinstance(reason, str) or not reason:
            return f"entry {n}: reason: expected a non-empty string"
    return None


def load_alone(directory: Path) -> tuple[CellResult | None, list[str]]:
    """load_dir, with the lines it says of bad input."""
    errors: list[str] = []
    return load_dir(directory, errors), errors


def load_dir(directory: Path, errors: list[str]) -> CellResult | None:
    """One cell directory's result (None: its cell.json or env.json is unusable, said in errors).
    Its own files are read through one descriptor of the folder, opened once, not once a file (a
    fleet's report reads 1,000 cells: bench/run.py report_merge_s); where it cannot be opened (a
    link, gone), each read says why, as it would alone."""
    try:
        folder: Tree | None = Tree.open(directory)
    except OSError:
        folder = None
    try:
        return _load_dir(directory, errors, folder)
    finally:
        if folder is not None:
            folder.close()


def _load_dir(directory: Path, errors: list[str], folder: Tree | None) -> CellResult | None:
    meta = read_record(directory / rundir.CELL_JSON, errors, cell_problems, at=folder)
    env = read_record(directory / rundir.ENV_JSON, errors, records.env_problems, at=folder)
    if meta is None or env is None:
        return None
    name = rundir.final_dir(directory).name
    key, gpu = gpu_of(name, meta, env)
    before = len(errors)
    conflicts: list[str] = []
    bounded: list[str] = []  # lines past a bound: the cell's fault, INVALID, not bad input (contracts.md)
    cases = with_evidence(read_cases(directory / rundir.RESULTS, errors, conflicts, bounded=bounded, at=folder),
                          directory, meta, errors)
    blocking = read_cases(directory / rundir.BLOCKING / rundir.RESULTS, errors, base=directory, bounded=bounded)
    explained = read_explained(directory, [name for name, case in cases.items() if case.outcome in FAILING], errors)
    cause = read_record(directory / rundir.FIRST_CAUSE, errors, cause_problems, at=folder)
    not_run = meta.get("not_run") or meta.get("unsupported")
    root = root_cause(directory / rundir.CELL_JSON, meta, errors)
    # A cell recorded as not run here never meant to complete: its reason is its verdict's.
    problems = [] if not_run else completion_problems(meta, env)
    if rundir.is_staging(directory):
        problems.insert(0, "interrupted: the harness never finished this cell (a .partial directory)")
    if len(errors) > before:
        problems.append("some of its results could not be read (see the errors)")
    problems += bounded[:5] + ([f"… and {len(bounded) - 5} more lines past a bound"] if len(bounded) > 5 else [])
    problems += conflicts[:5] + ([f"… and {len(conflicts) - 5} more conflicting lines"] if len(conflicts) > 5 else [])
    return CellResult(
        cell=meta.get("cell") or env.get("cell_id") or name.split("@")[0],
        gpu_key=key,
        gpu=gpu,
        path=directory,
        lane=meta.get("lane") or env.get("lane") or "direct",
        host=meta.get("host") or "",
        requested=meta.get("requested", {}),
        observed=env,
        marked_control=bool(meta.get("control")),
        ended=records.parse_time(env.get("ended")) or records.parse_time(meta.get("ended")) or EPOCH,
        cases=cases,
        blocking=blocking,
        explained=explained,
        problems=tuple(problems),
        stack_mismatch=tuple(stackcheck.mismatches(meta.get("expected", {}), env)) if env else (),
        first_cause=first_cause(cause, directory / rundir.LOG) if cause else None,
        cause_known=bool(cause),
        not_run=meta.get("not_run") or None,
        optional=bool(meta.get("optional")),
        unsupported=meta.get("unsupported") or None,
        reused="reused" in meta,
        expected_skips=tuple((tuple(e["cases"]), e["reason"]) for e in meta.get("expected_skips", ())),
        infra_cause=root,
        attempts=earlier_attempts(directory / rundir.CELL_JSON, meta, errors),
        audit_only=meta.get("audit_only") is True,
    )


def earlier_attempts(path: Path, meta: dict[str, Any], errors: list[str]) -> tuple[Attempt, ...]:
    """cell.json's `attempts` (a malformed one is bad input, named; the cell is still read)."""
    if "attempts" not in meta:
        return ()
    found, wrong = infra.read_attempts(meta["attempts"])
    if wrong:
        errors.append(f"{path}: field 'attempts': {wrong}")
    return found


def root_cause(path: Path, meta: dict[str, Any], errors: list[str]) -> RootCause | None:
    """cell.json's `cause` (a malformed one is bad input, named), else the cause its set-up error or
    not-run reason names (results/infra.py), else None."""
    if "cause" in meta:
        found, wrong = infra.read(meta["cause"])
        if wrong:
            errors.append(f"{path}: field 'cause': {wrong}")
        return found
    said = [str(meta[key]) for key in ("error", "not_run") if meta.get(key)]
    return infra.classify(said) if said else None


def read_explained(directory: Path, failing: list[str], errors: list[str]) -> dict[str, Explanation]:
    """The `--explain` findings of a cell's failing cases (explain/<explain_name>.json; absent: none),
    each a small file read with bounds; a malformed one is one error line and no finding."""
    found: dict[str, Explanation] = {}
    folder = directory / rundir.EXPLAIN
    if not failing or not os.path.lexists(folder):
        return found
    if folder.is_symlink() or not folder.is_dir():
        # Said, not passed over: the harness makes explain/ a real folder, so a link or a file
        # there is what a cell (or a copy) left, and its explanations are not read.
        errors.append(f"{folder}: {'a symlink' if folder.is_symlink() else 'not a folder'}; "
                      "the cell's explanations were not read")
        return found
    for case in failing:
        path = folder / f"{rundir.explain_name(case)}.json"
        if not os.path.lexists(path):
            # Written before issue 32 (explain/<case>.json): still read, its "case" checked below.
            path = folder / f"{case}.json"
            if not os.path.lexists(path):
                continue
        data = rundir.load_object(path, errors)
        if not data:
            continue
        if data.get("case") != case:
            # The name is a hash of the id, and the file says whose it is: another case's finding
            # (a copy, a hand edit) is said, never shown under this case.
            errors.append(f"{path}: field 'case': expected {case!r}, the case this name is for; not read")
            continue
        cudnn = data.get("cudnn")
        said: dict[str, Any] = cudnn if isinstance(cudnn, dict) else {}

        def text(table: dict[str, Any], key: str) -> str | None:
            value = table.get(key)
            return value[:EXPLAIN_TEXT] if isinstance(value, str) and value else None

        subcode = said.get("subcode")
        log = text(data, "log")
        activity = data.get("activity")
        did: dict[str, Any] = activity if isinstance(activity, dict) else {}
        operation = did.get("last_operation")
        found[case] = Explanation(
            status=text(said, "status"), meaning=text(said, "meaning"), cause=text(said, "cause"),
            reason=text(said, "reason"), function=text(said, "function"),
            subcode=subcode if isinstance(subcode, int) and not isinstance(subcode, bool) else None,
            # Only a path inside the cell's explain/ folder is named (never followed or shown otherwise).
            log=log if log and log.startswith(f"{rundir.EXPLAIN}/") and ".." not in log.split("/") else None,
            backend=text(data, "backend"), cudnn_path=text(data, "cudnn_path"), cudnn_off=text(data, "cudnn_off"),
            cudnn_is_the_cause=data.get("cudnn_is_the_cause") is True,
            # Shown as a word in every format: only cuDNN's operation names (A-Z, digits, _) pass.
            last_operation=operation if isinstance(operation, str) and _OPERATION.fullmatch(operation) else None,
        )
    return found


def cause_problems(cause: dict[str, Any]) -> list[str]:
    problems: list[str] = records.type_problems(cause, CAUSE_FIELDS, ("family",))
    line = cause.get("line")
    if not problems and line is not None and line < 1:
        problems.append(f"field 'line': expected a 1-based line number, got {line}")
    return problems


def first_cause(cause: dict[str, Any], log: Path) -> FirstCause | None:
    family = cause.get("family")
    if family is None:
        return None
    return FirstCause(log=str(log), family=family, line=cause.get("line"), rank=cause.get("rank"),
                      fatal=bool(cause.get("fatal")))


def gpu_of(name: str, meta: dict[str, Any], env: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The GPU a result ran on: what the suite saw, else what the harness aimed it at."""
    seen = env.get("gpus") or []
    gpu = seen[0] if env.get("device") == "cuda" and seen else meta.get("gpu")
    if not gpu:
        return CPU_KEY, {"name": "cpu", "capability": None, "generation": "cpu"}
    capability = str(gpu.get("capability") or "")
    gpu_name = str(gpu.get("name") or "gpu")
    key = meta.get("gpu_key") or (name.split("@")[1] if "@" in name else gpu_key(gpu_name, capability))
    return key, {"name": gpu_name, "capability": capability, "generation": stacks.load().generation(capability)}


def completion_problems(meta: dict[str, Any], env: dict[str, Any]) -> list[str]:
    """Why a run cannot be taken as complete; [] only when every case it covers ran."""
    problems = []
    if meta.get("error"):
        problems.append(str(meta["error"]))
    if not env:
        problems.append("the suite wrote no env.json (it never started)")
    elif not env.get("ended"):
        problems.append("the suite did not finish (env.json has no end time)")
    code = meta.get("exit_code")
    if meta and code is None and not meta.get("error"):
        problems.append("the harness never recorded the suite's exit (cell.json has no exit code)")
    if code not in (None, *rundir.PYTEST_EXIT_OK) and not meta.get("error"):
        problems.append(f"the suite exited with status {code}")
    if env.get("cudnn_error"):
        problems.append(f"cuDNN unusable: {env['cudnn_error']}")
    return problems


def read_cases(path: Path, errors: list[str], conflicts: list[str] | None = None,
               base: Path | None = None, bounded: list[str] | None = None, at: Tree | None = None) -> dict[str, Case]:
    """Each case's line. A case recorded again is one case when its lines agree (the same outcome
    and family: the later line, with the warnings of both); when they disagree (another outcome
    or family), the later line is named in conflicts (the cell cannot be taken as it reads: which
    line is true?) and the worse line is kept (see again()), never the greener one in silence. A
    file of more than rundir.MAX_LINES lines or rundir.MAX_RESULTS bytes, or a line nested past
    jsonread.MAX_DEPTH, is named in bounded (its cell INVALID; errors when no list is given) and
    not read. at: path's folder, open already (rundir.open_plain)."""
    cases: dict[str, Case] = {}
    bounded = errors if bounded is None else bounded
    try:
        # Counted as it is read, and past the line bound never held whole (bounded memory).
        data, lines = rundir.read_lines(path, base, at)
    except FileNotFoundError:
        return cases
    except rundir.TooLarge as exc:
        bounded.append(str(exc))  # a bound, as the line bound: the cell's fault
        return cases
    except rundir.NotPlain as exc:
        errors.append(str(exc))
        return cases
    except OSError as exc:
        errors.append(f"{path}: unreadable ({exc.strerror or exc})")
        return cases
    if data is None:
        bounded.append(f"{path}: {lines:,} lines, more than {rundir.MAX_LINES:,} (the catalogue has a few "
                       "hundred cases); not read")
        return cases
    text = data.decode("utf-8", errors="replace")
    del data
    for numbers, values in batches(text):
        for lineno, record in zip(numbers, values, strict=True):
            if isinstance(record, jsonread.TooBig):
                bounded.append(f"{path}:{lineno}: {record}; not read")
                continue
            case = check_line(record)
            if isinstance(case, str):
                errors.append(f"{path}:{lineno}: {case}")  # only here: 200,000 sound lines need no name
                continue
            before = cases.get(case.case)
            if before is not None:
                kept, conflict = again(before, case)
                if conflict and conflicts is not None:
                    conflicts.append(f"{path.name}:{lineno}: case {case.case} recorded again as {said(case)}, "
                                     f"earlier as {said(before)}; kept {'this' if kept is case else 'the earlier'} "
                                     "line")
                case = kept
            cases[case.case] = case
    return cases


def _badness(outcome: Outcome) -> int:
    """A failing outcome over a skip over a pass (higher: worse)."""
    return 2 if outcome.failing else 1 if outcome is Outcome.SKIP else 0


def again(before: Case, case: Case) -> tuple[Case, bool]:
    """What a case recorded again reads as, and whether its lines conflict. Lines that agree
    (the same outcome and family; the same line written twice among them) are one case: the
    later line, with the warnings of both. Lines that disagree conflict, and the worse one is
    kept (a failing outcome over a skip over a pass; of two failing, the earlier): the cell is
    INVALID either way, and what it shows is never greener than a line it holds."""
    if before.outcome == case.outcome and before.family == case.family:
        if before.warnings and before.warnings != case.warnings:
            case = replace(case, warnings=tuple(dict.fromkeys((*case.warnings, *before.warnings))))
        return case, False
    return (case if _badness(case.outcome) > _badness(before.outcome) else before), True


def said(case: Case) -> str:
    """A case's outcome and, where it says more, its family: `fail (cudnn_not_supported)`."""
    return f"{case.outcome} ({case.family})" if case.family and case.family != case.outcome else str(case.outcome)


BAD_LINE = object()  # what numbered() gives for a line that is no JSON at all


# Lines parsed by one jsonread.loads_each call: its values and one joined copy are held at once.
BATCH = 1024


def numbered(text: str) -> Iterator[tuple[int, Any]]:
    """Each non-blank line's number and its JSON value (BAD_LINE for a line that is not one JSON
    value), each line read alone: as _loads reads it.

    Once, a file whose value count matched its line count was read by one json.loads of it all as
    an array. It took what no line holds alone for sound: an object split over two lines between
    two fields (the comma put at each line break made it whole) beside a line holding two objects
    (issue 45). Then each line was read by a json call of its own, which took twice as long (a
    report reads 200,000 lines; bench/run.py's report_merge_s went from 1.7-2.3 s to 2.7 s). Now
    BATCH lines at a time go to jsonread.loads_each, which parses them in one call and gives their
    values only when each line is one value read alone (else None); a batch it will not vouch for
    is read a line at a time, as before, so every line reads as it would alone."""
    for numbers, values in batches(text):
        yield from zip(numbers, values, strict=True)


def batches(text: str) -> Iterator[tuple[Sequence[int], list[Any]]]:
    """numbered's pairs a batch at a time: the line numbers and the values of BATCH non-blank
    lines. read_cases loops over these itself, resuming no generator a line (200,000 lines a
    fleet's report)."""
    lines = text.split("\n")
    # Most files have no blank line (the last line break leaves one empty string at the end): then
    # the batches are slices and their numbers ranges, with no Python-level step a line. The test
    # is the loop's own (not line.strip(), the same without a copy), each half a C loop.
    if lines and not lines[-1]:
        lines.pop()
    if "" not in lines and not any(map(str.isspace, lines)):
        for start in range(0, len(lines), BATCH):
            texts = lines[start:start + BATCH]
            numbers = range(start + 1, start + 1 + len(texts))
            values = jsonread.loads_each(texts)
            yield numbers, [_loads(t) for t in texts] if values is None else values
        return
    kept = [n for n, line in enumerate(lines) if line and not line.isspace()]
    for start in range(0, len(kept), BATCH):
        batch = kept[start:start + BATCH]
        texts = [lines[n] for n in batch]
        values = jsonread.loads_each(texts)
        yield [n + 1 for n in batch], [_loads(t) for t in texts] if values is None else values


def _loads(line: str) -> Any:
    try:
        return jsonread.loads(line)
    except jsonread.TooBig as exc:
        return exc  # named as past a bound, not as corrupt
    except ValueError:
        return BAD_LINE


def check_line(record: Any) -> Case | str:
    """One decoded results.jsonl line as a Case, or what is wrong with it."""
    if record is BAD_LINE:
        return "not a JSON object (truncated or corrupt line)"
    if not isinstance(record, dict):
        return "not a JSON object"
    if record.get("schema") != SCHEMA:
        return f"schema {record.get('schema')!r}, this convmatrix reads schema {SCHEMA}"
    problems = records.result_problems(record)
    if problems:
        return str(problems[0])
    status = record["status"]
    message = record.get("message")
    # Most lines have none of these: no call is made for what is absent (200,000 lines a report).
    warned = record.get("warnings")
    timing = record.get("timing")
    printed = record.get("fingerprint")
    sources = record.get("sources")
    backend = record.get("backend")
    family = None if status in classify.QUIET else classify.classify(message, status=status,
                                                                     exc_type=record.get("exc_type"))
    return Case(  # in field order: see Case
        record["case"],
        OF_STATUS[status],
        family,
        message,
        {} if (knobs := record.get("knobs")) is None else knobs,  # the line's own dict, even empty: none made
        warning_families(warned) if warned else (),
        _duration(timing) if timing else None,
        _text(printed, "sha") if printed else None,  # fingerprint
        None,  # evidence: with_evidence() adds it
        {} if (params := record.get("params")) is None else params,
        _runs(timing) if timing else (),
        _sources(sources) if sources else (),
        _seconds(record.get("duration_s")),
        None if backend is None else _backend(backend),
        _bytes(timing) if timing else None,
        _runs(timing, "reference_ms") if timing else (),
        _kernels(timing) if timing else (),
        libraries.table(record["audit"]) if "audit" in record else (),
        libraries.shipped(record["audit"]) if "audit" in record else (),
    )


BACKEND = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}", re.ASCII)


def _backend(value: object) -> str | None:
    """A line's `backend`: a ConvBackend's name (Mkldnn, Slow3d), anything else none (untrusted)."""
    return value if isinstance(value, str) and BACKEND.fullmatch(value) else None


def _bytes(timing: object) -> int | None:
    """timing.peak_bytes: a non-negative integer under 2^60, anything else none."""
    value = timing.get("peak_bytes") if isinstance(timing, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 60 else None


KERNEL = re.compile(r"[ -~]{1,200}", re.ASCII)


def _kernels(timing: object) -> tuple[str, ...]:
    """timing.kernels: at most 32 printable names of at most 200 characters (the rest dropped)."""
    listed = timing.get("kernels") if isinstance(timing, dict) else None
    if not isinstance(listed, list):
        return ()
    return tuple(k for k in listed[:32] if isinstance(k, str) and KERNEL.fullmatch(k))


def warning_families(warned: list[Any]) -> tuple[str, ...]:
    """The failure families named by a line's captured warnings ({"message": ...} each)."""
    messages = [w.get("message") for w in warned if isinstance(w, dict)]
    return tuple(classify.classify_warnings([m for m in messages if isinstance(m, str)]))


def _number(table: object, key: str) -> float | None:
    value = table.get(key) if isinstance(table, dict) else None
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer too large for a float (10**309): no number we can use
        return None


def _duration(timing: object) -> float | None:
    """timing.forward_ms when it is a finite duration (>= 0); anything else is no timing."""
    value = _number(timing, "forward_ms")
    return value if value is not None and 0 <= value < float("inf") else None


def _seconds(value: object) -> float | None:
    """duration_s when it is a finite, non-negative number; anything else is none."""
    if type(value) is float:  # what json makes of 0.01, nearly every line's: no table for _number
        return value if 0 <= value < _INFINITY else None
    found = _number({"s": value}, "s")
    return found if found is not None and 0 <= found < float("inf") else None


def _runs(timing: object, key: str = "forward_runs") -> tuple[float, ...]:
    """timing.forward_runs (or reference_ms): finite, non-negative numbers only (anything else: no runs)."""
    runs = timing.get(key) if isinstance(timing, dict) else None
    if not isinstance(runs, list) or not runs or len(runs) > 1000:
        return ()
    try:
        made = tuple(float(r) for r in runs if isinstance(r, int | float) and not isinstance(r, bool))
    except OverflowError:  # an integer too large for a float (10**400)
        return ()
    return made if len(made) == len(runs) and all(0 <= r < float("inf") for r in made) else ()


_INFINITY = float("inf")
SOURCE = re.compile(r"https://[!-~]{1,2000}", re.ASCII)  # printable ASCII, no space: nothing to escape out of
MAX_SOURCES = 32


def _sources(listed: object) -> tuple[str, ...]:
    """A line's `sources`: the https URLs among at most MAX_SOURCES entries (a line is untrusted:
    anything else is dropped, never shown)."""
    if not isinstance(listed, list) or not listed:
        return ()
    return tuple(url for url in listed[:MAX_SOURCES] if isinstance(url, str) and SOURCE.fullmatch(url))


def _text(table: object, key: str) -> str | None:
    value = table.get(key) if isinstance(table, dict) else None
    return value if isinstance(value, str) else None


def with_evidence(cases: dict[str, Case], directory: Path, meta: dict[str, Any],
                  errors: list[str] | None = None) -> dict[str, Case]:
    """Point each case at the evidence file the harness saved for it (cell.json "evidence"): only
    `evidence/<case>.txt` inside the cell directory, as the harness names it; any other entry (an
    absolute path, `../secret`, not a string) is named in errors and points nowhere."""
    saved = meta.get("evidence")
    if not isinstance(saved, dict) or not saved:
        return cases
    found = dict(cases)
    # Only the cases it names, in the cases' order (the errors' order): the harness saves evidence
    # for a cell's few failing cases, and a fleet's cells hold 200,000 cases in all.
    for name in [name for name in cases if saved.get(name) is not None]:
        entry = saved[name]
        if entry == f"{rundir.EVIDENCE}/{name}.txt":
            found[name] = replace(cases[name], evidence=str(directory / entry))
        elif errors is not None:
            errors.append(f"{directory / rundir.CELL_JSON}: field 'evidence' [{name}]: {str(entry)[:80]!r} is not "
                          f"{rundir.EVIDENCE}/{name}.txt; not read")
    return found
