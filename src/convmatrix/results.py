"""Reading results directories (env.json, results.jsonl, cell.json) into classified cell results."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from convmatrix import classify, stackcheck, stacks
from convmatrix.gpus import CPU_KEY, gpu_key
from convmatrix.runner import BLOCKING

SCHEMA = 1
OUTCOMES = {
    "passed": "pass",
    "failed": "fail",
    "error": "fail",
    "skipped": "skip",
    "crashed": "crash",
    "timeout": "timeout",
}
FAILING = frozenset({"fail", "crash", "timeout"})


@dataclass(frozen=True, kw_only=True)
class Case:
    case: str
    outcome: str  # pass | fail | skip | crash | timeout
    family: str | None
    message: str | None
    knobs: dict[str, Any]
    warnings: tuple[str, ...]  # families seen in the case's warnings (a passing case keeps them)
    forward_ms: float | None = None  # device time of the conv (timing.forward_ms), for slowdowns
    fingerprint: str | None = None  # a digest of the rounded output (fingerprint.sha), for drift
    evidence: str | None = None  # evidence/<case>.txt beside the results, when the harness saved one


@dataclass(kw_only=True)
class CellResult:
    cell: str
    gpu_key: str
    gpu: dict[str, Any]
    lane: str
    path: Path
    requested: dict[str, Any] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)
    marked_control: bool = False
    cases: dict[str, Case] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # why the run did not complete cleanly
    stack_mismatch: list[str] = field(default_factory=list)
    blocking: dict[str, Case] = field(default_factory=dict)  # the CUDA_LAUNCH_BLOCKING=1 re-run

    @property
    def completed(self) -> bool:
        return not self.problems

    def families(self) -> set[str]:
        return {c.family for c in self.cases.values() if c.family}


@dataclass(kw_only=True)
class Loaded:
    results: list[CellResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # bad input: one line each, file and field


def load(paths: Iterable[str | Path]) -> Loaded:
    loaded = Loaded()
    for raw in paths:
        path = Path(raw)
        dirs = result_dirs(path)
        if not dirs:
            loaded.errors.append(f"{path}: no results here (expected a run directory or a cell results directory)")
        for directory in dirs:
            result = load_dir(directory, loaded.errors)
            if result is not None:
                loaded.results.append(result)
    return loaded


def result_dirs(path: Path) -> list[Path]:
    if not path.is_dir():
        return []
    if is_result_dir(path):
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and is_result_dir(p))


def is_result_dir(path: Path) -> bool:
    return any((path / name).exists() for name in ("env.json", "results.jsonl", "cell.json"))


def read_object(path: Path, errors: list[str]) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        errors.append(f"{path}: unreadable JSON ({exc})")
        return {}
    if not isinstance(data, dict):
        errors.append(f"{path}: not a JSON object")
        return {}
    return data


def load_dir(directory: Path, errors: list[str]) -> CellResult | None:
    meta = read_object(directory / "cell.json", errors)
    env = read_object(directory / "env.json", errors)
    for name, data in (("cell.json", meta), ("env.json", env)):
        if data and data.get("schema") != SCHEMA:
            errors.append(f"{directory / name}: schema {data.get('schema')!r}, this convmatrix reads schema {SCHEMA}")
            return None
    cell_id = meta.get("cell") or env.get("cell_id") or directory.name.split("@")[0]
    key, gpu = gpu_of(directory, meta, env)
    result = CellResult(
        cell=cell_id,
        gpu_key=key,
        gpu=gpu,
        path=directory,
        lane=meta.get("lane") or env.get("lane") or "direct",
        requested=meta.get("requested", {}),
        observed=env,
        marked_control=bool(meta.get("control")),
    )
    result.cases = with_evidence(read_cases(directory / "results.jsonl", errors), directory, meta)
    result.blocking = read_cases(directory / BLOCKING / "results.jsonl", errors)
    result.problems = completion_problems(meta, env)
    if env:
        result.stack_mismatch = stackcheck.mismatches(meta.get("expected", {}), env)
    return result


def gpu_of(directory: Path, meta: dict[str, Any], env: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The GPU a result ran on: what the suite saw, else what the harness aimed it at."""
    seen = env.get("gpus") or []
    gpu = seen[0] if env.get("device") == "cuda" and seen else meta.get("gpu")
    if not gpu:
        return CPU_KEY, {"name": "cpu", "capability": None, "generation": "cpu"}
    capability = str(gpu.get("capability") or "")
    name = str(gpu.get("name") or "gpu")
    key = meta.get("gpu_key") or (directory.name.split("@")[1] if "@" in directory.name else gpu_key(name, capability))
    return key, {"name": name, "capability": capability, "generation": stacks.load().generation(capability)}


def completion_problems(meta: dict[str, Any], env: dict[str, Any]) -> list[str]:
    problems = []
    if meta.get("error"):
        problems.append(str(meta["error"]))
    if not env:
        problems.append("the suite wrote no env.json (it never started)")
    elif not env.get("ended"):
        problems.append("the suite did not finish (env.json has no end time)")
    code = meta.get("exit_code")
    if code not in (None, 0, 1) and not meta.get("error"):
        problems.append(f"the suite exited with status {code}")
    if env.get("cudnn_error"):
        problems.append(f"cuDNN unusable: {env['cudnn_error']}")
    return problems


def read_cases(path: Path, errors: list[str]) -> dict[str, Case]:
    cases: dict[str, Case] = {}
    if not path.exists():
        return cases
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            record = parse_line(line, f"{path}:{lineno}", errors)
            if record is not None:
                cases[record.case] = record
    return cases


def parse_line(line: str, where: str, errors: list[str]) -> Case | None:
    try:
        record = json.loads(line)
    except ValueError:
        errors.append(f"{where}: not a JSON object (truncated or corrupt line)")
        return None
    if not isinstance(record, dict):
        errors.append(f"{where}: not a JSON object")
        return None
    if record.get("schema") != SCHEMA:
        errors.append(f"{where}: schema {record.get('schema')!r}, this convmatrix reads schema {SCHEMA}")
        return None
    status = record.get("status")
    if not isinstance(record.get("case"), str) or status not in OUTCOMES:
        errors.append(f"{where}: field 'case' or 'status' missing or invalid")
        return None
    message = record.get("message")
    warnings = [w.get("message", "") for w in record.get("warnings") or [] if isinstance(w, dict)]
    return Case(
        case=record["case"],
        outcome=OUTCOMES[status],
        family=classify.classify(message, status=status, exc_type=record.get("exc_type")),
        message=message,
        knobs=record.get("knobs") or {},
        warnings=tuple(classify.classify_warnings(warnings)),
        forward_ms=_number(record.get("timing"), "forward_ms"),
        fingerprint=_text(record.get("fingerprint"), "sha"),
    )


def _number(table: object, key: str) -> float | None:
    value = table.get(key) if isinstance(table, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text(table: object, key: str) -> str | None:
    value = table.get(key) if isinstance(table, dict) else None
    return value if isinstance(value, str) else None


def with_evidence(cases: dict[str, Case], directory: Path, meta: dict[str, Any]) -> dict[str, Case]:
    """Point each case at the evidence file the harness saved for it (cell.json "evidence")."""
    saved = meta.get("evidence")
    if not isinstance(saved, dict):
        return cases
    return {name: replace(case, evidence=str(directory / saved[name])) if name in saved else case
            for name, case in cases.items()}
