"""`--explain`: after a cell ran, each failing case alone again with cuDNN's own API log on, and
once more with cuDNN off, so that the report can say what cuDNN said and whether its path is the
cause. What it writes, per failing case (docs/contracts.md: Explained failures):

    <cell>/explain/<name>/            the case alone, cuDNN's logging on (log.txt, results.jsonl, env.json)
        cudnn.log                     cuDNN's API log (CUDNN_LOGDEST_DBG), as the suite's process left it
        cudnn_frontend.log            the cudnn-frontend's log (CUDNN_FRONTEND_LOG_FILE)
        cudnn_off/                    the case alone with torch.backends.cudnn.enabled = False
    <cell>/explain/<name>.json        what was found (explained.json's schema, below, its "case" the id), read
                                      by the report

<name> is rundir.explain_name(case), a hash of the id: two ids never share a name (`zz` and
`zz.json` did: the second's folder was the first's file, and the cell stopped .partial).

The logging variables (NVIDIA's cuDNN documentation, "API Logging" in the backend developer guide
for 9.x and the 8.x developer guide; cudnn-frontend's README for its own): cuDNN 9 reads
CUDNN_LOGLEVEL_DBG (1 errors, 2 and warnings, 3 and info) and CUDNN_LOGDEST_DBG (stdout, stderr or
a file); cuDNN 8 reads CUDNN_LOGERR_DBG, CUDNN_LOGWARN_DBG and CUDNN_LOGINFO_DBG with the same
destination; the frontend reads CUDNN_FRONTEND_LOG_INFO and CUDNN_FRONTEND_LOG_FILE; PyTorch's
v8 API path prints its plan attempts with TORCH_CUDNN_V8_API_DEBUG=1. They are set before the
suite's process starts (cuDNN reads them when it initialises), to paths inside the case's own
results directory as the suite sees it (runner.RESULTS_TOKEN: a container mounts it elsewhere).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from convmatrix import jsonread, tree
from convmatrix.results import cudnn_log, families, rundir
from convmatrix.run import runner
from convmatrix.run.lanes import Lane, Log, Prepared, SuiteRun

DIR = rundir.EXPLAIN
LOG = "cudnn.log"
FRONTEND_LOG = "cudnn_frontend.log"
CUDNN_OFF = "cudnn_off"
LEVELS = {"warn": "2", "info": "3"}  # --explain, --explain=info: CUDNN_LOGLEVEL_DBG
MAX_CASES = 50  # failing cases explained per cell: each costs a process; the rest are counted
KEPT = 4 << 20  # bytes kept of each cuDNN log: its end, where the failure is (info level writes gigabytes)
SCHEMA = 1
FAILING = ("failed", "error", "crashed", "timeout")  # a case's statuses that are a failure (suites/records.py)

RunContinuing = Callable[[Lane, Prepared, SuiteRun, Log], int]


def logging_env(level: str) -> dict[str, str]:
    """cuDNN's (8 and 9), its frontend's and PyTorch's logging, into the case's directory."""
    into = runner.RESULTS_TOKEN
    env = {
        "CUDNN_LOGLEVEL_DBG": LEVELS[level], "CUDNN_LOGDEST_DBG": f"{into}/{LOG}",
        "CUDNN_LOGERR_DBG": "1", "CUDNN_LOGWARN_DBG": "1",
        "CUDNN_FRONTEND_LOG_INFO": "1", "CUDNN_FRONTEND_LOG_FILE": f"{into}/{FRONTEND_LOG}",
        "TORCH_CUDNN_V8_API_DEBUG": "1",
    }
    if level == "info":
        env["CUDNN_LOGINFO_DBG"] = "1"
    return env


def case_of(nodeid: str) -> str | None:
    """The case id in a node id `suites/test_conv.py::test_conv[<case>]`, when it is a valid one."""
    found = re.fullmatch(r".*::test_conv\[(.+)\]", nodeid)
    case = found.group(1) if found else None
    return case if case is not None and rundir.records.CASE_ID.fullmatch(case) else None


def explain(lane: Lane, prepared: Prepared, target: runner.Target, args: Sequence[str], level: str,
            log: Log, run_continuing: RunContinuing, *, env: dict[str, str] | None = None) -> int:
    """Explain the failing cases of a finished run of the target; how many were explained."""
    failing = [(nodeid, case) for nodeid in runner.failing_nodeids(target.results_dir)
               if (case := case_of(nodeid)) is not None]
    if not failing:
        return 0
    root = target.results_dir / DIR
    left = rundir.claim_dir(root, target.results_dir)
    if left:
        log(f"{target.cell.id}: {DIR}/ was {left} (the suite left it): replaced by a folder, never followed")
    for nodeid, case in failing[:MAX_CASES]:
        key = rundir.explain_name(case)
        folder = root / key
        logged = SuiteRun(target=target, args=tuple(args), select=(nodeid,), results_dir=folder,
                          env={**(env or {}), **logging_env(level)})
        code = run_continuing(lane, prepared, logged, log)
        runner.record_crashes(target, code, results_dir=folder)
        for name in (LOG, FRONTEND_LOG):
            keep_end(folder / name, folder)
        off = SuiteRun(target=target, args=(*args, "--cudnn-enabled", "off"), select=(nodeid,),
                       results_dir=folder / CUDNN_OFF, env=dict(env or {}))
        code = run_continuing(lane, prepared, off, log)
        runner.record_crashes(target, code, results_dir=folder / CUDNN_OFF)
        rundir.write_json(root / f"{key}.json", found(folder, case, level), target.results_dir)
    more = len(failing) - MAX_CASES
    log(f"{target.cell.id}: {min(len(failing), MAX_CASES)} failing case(s) re-run with cuDNN's log on in {DIR}/"
        + (f" ({more} more not explained: at most {MAX_CASES} a cell)" if more > 0 else ""))
    return min(len(failing), MAX_CASES)


def keep_end(path: Path, folder: Path, limit: int = KEPT) -> None:
    """A log cut to its last `limit` bytes, the cut said on its first line; a log that is not a
    regular file inside the folder (a link the suite left) is removed, never followed."""
    try:
        size = path.lstat().st_size
    except FileNotFoundError:
        return
    try:
        with rundir.open_plain(path, folder) as handle:
            if size <= limit:
                return
            handle.seek(size - limit)
            tail = handle.read(limit)
    except rundir.NotPlain:
        with tree.parent_of(path, folder) as (parent, name):
            parent.unlink(name)
        return
    tail = tail[tail.find(b"\n") + 1:] if b"\n" in tail else tail
    note = f"[convmatrix: the first {size - len(tail):,} bytes of this log were dropped; its last {len(tail):,} kept]\n"
    rundir.write_plain(path, note.encode() + tail, folder)


def found(folder: Path, case: str, level: str) -> dict[str, Any]:
    """What the two re-runs of a case say: cuDNN's reason (cudnn_log.parse of its API log, or of
    the frontend's), else what the log shows it did last, the backend PyTorch chose and by which
    path, and how the case ran without cuDNN."""
    logged = _line(folder / rundir.RESULTS)
    off = _line(folder / CUDNN_OFF / rundir.RESULTS)
    said = None
    which = None
    did = None
    for name in (LOG, FRONTEND_LOG):
        try:
            text = cudnn_log.read(folder / name)
        except OSError:
            continue
        # cuDNN warns NOT_SUPPORTED for each engine it rules out while choosing one, on calls that
        # then succeed too (seen on an H200, cuDNN 9.19: "NOT_SUPPORTED_SHAPE; Reason:
        # leading_dim_in_bits_in % 128 != 0" before a conv that passed). Such a warning explains a
        # failure that is cuDNN's own status; for an illegal address or a timeout only errors count.
        said = cudnn_log.parse(text, warnings=_cudnn_failed(logged))
        if said is not None:
            which = name
            break
        if which is None and text.strip():
            # A log that names no failure is still named: "cuDNN wrote no log" would be false.
            which, did = name, cudnn_log.activity(text) if name == LOG else None
    return {
        "schema": SCHEMA, "case": case, "level": level,
        "status": logged.get("status"), "backend": logged.get("backend"), "cudnn_path": logged.get("cudnn_path"),
        "cudnn_off": off.get("status"),
        # A timeout or a crash with cuDNN is a failure too (seen on an H200: a transposed conv3d past
        # 2^31 output elements ran past 90 s with cuDNN and passed in 2.5 s without it).
        "cudnn_is_the_cause": logged.get("status") in FAILING and off.get("status") == "passed",
        "cudnn": None if said is None else {
            "status": said.status, "subcode": said.subcode, "meaning": said.meaning, "cause": said.cause,
            "reason": said.reason, "function": said.function, "line": said.line, "count": said.count,
        },
        "activity": None if did is None else {
            # executions: in the part read (the log's last 1 MB), not in the whole run.
            "executions": did.executions, "last_operation": did.last_operation, "last_call": did.last_call,
        },
        "log": f"{DIR}/{folder.name}/{which}" if which else None,
    }


def _cudnn_failed(record: dict[str, Any]) -> bool:
    """Whether the case failed with one of cuDNN's own statuses (its family is a cudnn_ one)."""
    message, exc_type = record.get("message"), record.get("exc_type")
    family = families.classify(message if isinstance(message, str) else None, status=str(record.get("status")),
                               exc_type=exc_type if isinstance(exc_type, str) else None)
    return family is not None and family.startswith("cudnn_")


def _line(results: Path) -> dict[str, Any]:
    """The one results line of a case run alone ({} when there is none, or it cannot be read)."""
    try:
        text = rundir.read_plain(results, 1 << 20, results.parent).decode("utf-8", "replace")
    except (OSError, rundir.NotPlain):
        return {}
    for raw in text.split("\n"):
        try:
            record = jsonread.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict):
            return record
    return {}
