"""Infrastructure causes (docs/contracts.md: Infrastructure causes): why a cell could not install,
build, start or finish, read from the first decisive line of its install, build or engine log,
and whether running it again can fix that.

One table, CAUSES: (cause, evidence, retryable). A log's root cause is the cause of its FIRST
line that matches any evidence (pip warns of the DNS failure on every retry before it says it
found no version: the DNS line is the cause, the resolver's verdict only its consequence). A
cause is retryable when the same run on another try can succeed (the agent or node went, the
GPU fell off the bus, the OOM killer chose this process, the harness's own deadline, an index
that was slow rather than absent: vLLM's CI retries only such agent losses, never a test's exit
code); the others (a name that does not resolve, a build that fails, a driver too old) fail the
same way again.

The evidence patterns are the tools' own words:
- pip (urllib3 through requests): `WARNING: Retrying (...) after connection broken by
  'NewConnectionError(...: Failed to establish a new connection: [Errno -3] Temporary failure in
  name resolution')'`, then `ERROR: Could not find a version that satisfies the requirement`
  (github.com/pypa/pip/issues/14250, github.com/jaraco/pip-run/issues/65); `Could not fetch URL
  ...: connection error` (github.com/pypa/packaging-problems/issues/187); a slow index:
  `ReadTimeoutError(... Read timed out.)`.
- uv: `error: Failed to fetch: `https://pypi.org/simple/<name>/``, `Caused by: error sending
  request for url`, `Caused by: dns error: failed to lookup address information: Temporary
  failure in name resolution` (github.com/astral-sh/uv/issues/1971, /12016); `Could not connect,
  are you offline?`; its resolver's `No solution found when resolving dependencies`.
- Docker/BuildKit: `ERROR: failed to solve: <image>: failed to resolve source metadata for
  docker.io/...: failed to do request: Head "https://registry-1.docker.io/v2/...": dial tcp:
  lookup registry-1.docker.io: no such host` (github.com/moby/moby/issues/42867,
  github.com/docker/for-mac/issues/2012); the engine: `Cannot connect to the Docker daemon at
  unix:///var/run/docker.sock. Is the docker daemon running?`; no GPU runtime: `could not select
  device driver "" with capabilities: [[gpu]]`.
- The kernel's OOM killer: `Out of memory: Killed process N`; Kubernetes: `OOMKilled`,
  `DeadlineExceeded`; Slurm: `CANCELLED ... DUE TO TIME LIMIT`, `DUE TO NODE FAILURE`; NVIDIA's
  driver: `NVRM: Xid (PCI:...): 79, ... GPU has fallen off the bus`, `uncorrectable ECC error`.
- convmatrix's own lines (run/lanes: `install failed`, `image build failed`, `the engine is not
  reachable`; run/runner: `the suite process died (signal 9, SIGKILL)`).

Here in results/, beside the failure families: it classifies what a cell left (cell.json's
`cause`, written by the harness), and the report reads it back without scanning a log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convmatrix.results import rundir


@dataclass(frozen=True)
class Cause:
    name: str  # the word every format shows ("index unreachable")
    evidence: re.Pattern[str]
    retryable: bool


# A grid entry's room is a column's: the cause in a word there ("INVALID index"); every other place
# says it whole.
SHORT = {"registry unreachable": "registry", "index timed out": "index", "index unreachable": "index",
         "engine down": "engine", "engine lost": "engine", "no GPU": "no-GPU", "driver too old": "driver",
         "GPU lost": "GPU-lost", "OOM killed": "OOM", "killed": "killed", "timed out": "deadline",
         "node lost": "node", "build failed": "build"}


def _any(*patterns: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


# Order matters only within one line: the first cause whose evidence the line holds (a registry's
# DNS failure is the registry's, not an index's; a timeout before an unreachable host).
CAUSES: tuple[Cause, ...] = (
    Cause("registry unreachable", _any(
        r"failed to resolve source metadata", r"registry-1\.docker\.io", r"failed to do request: Head",
        r"Error response from daemon: Get \"?https://", r"toomanyrequests", r"pull access denied"), retryable=False),
    Cause("index timed out", _any(
        r"ReadTimeoutError", r"Read timed out", r"operation timed out", r"Connection timed out"), retryable=True),
    Cause("index unreachable", _any(
        r"Failed to fetch: `?https?://", r"error sending request for url", r"Could not fetch URL",
        r"NewConnectionError", r"Failed to establish a new connection", r"Temporary failure in name resolution",
        r"Name or service not known", r"getaddrinfo failed", r"dns error", r"Could not connect, are you offline",
        r"failed to lookup address information"), retryable=False),
    Cause("engine down", _any(
        r"Cannot connect to the Docker daemon", r"Is the docker daemon running", r"the engine is not reachable",
        r"Error while fetching server API version", r"no Docker engine", r"no container engine"), retryable=False),
    Cause("engine lost", _any(r"lost the container", r"the container \S+ was removed"), retryable=True),
    Cause("no GPU", _any(
        r"could not select device driver .* with capabilities: \[\[gpu\]\]",
        r"nvidia-container-cli: initialization error",
        r"NVIDIA-SMI has failed", r"no CUDA-capable device is detected", r"this runner has no GPU",
        r"attaches no GPU"), retryable=False),
    Cause("driver too old", _any(
        r"CUDA driver version is insufficient", r"unsatisfied condition: cuda>=", r"driver \S+ too old"),
        retryable=False),
    Cause("GPU lost", _any(
        r"\bNVRM: Xid\b", r"\bXid \d+", r"fallen off the bus", r"uncorrectable ECC", r"cudaErrorECCUncorrectable"),
        retryable=True),
    Cause("OOM killed", _any(r"Out of memory: Kill(?:ed)? process", r"\boom-kill\b", r"\bOOMKilled\b",
                             r"Memory cgroup out of memory"), retryable=True),
    # SIGKILL comes from outside the test (the OOM killer, a preemption, an agent going): a test's
    # own failure is an exception or a signal it raised itself (SIGSEGV, SIGABRT), never this.
    Cause("killed", _any(r"signal 9, SIGKILL", r"\bexit code 137\b", r"\bexited 137\b"), retryable=True),
    Cause("timed out", _any(r"DUE TO TIME LIMIT", r"\bDeadlineExceeded\b", r"harness deadline"), retryable=True),
    Cause("node lost", _any(r"DUE TO NODE FAILURE", r"\bNodeLost\b", r"node \S+ (?:was )?lost", r"\bEvicted\b"),
          retryable=True),
    Cause("build failed", _any(
        r"image build failed", r"install failed", r"ERROR: failed to solve", r"error: Failed to build",
        r"No solution found when resolving", r"Could not find a version that satisfies",
        r"No matching distribution found", r"ResolutionImpossible"), retryable=False),
)
BY_NAME = {cause.name: cause for cause in CAUSES}
# Causes that every cell needing the same thing shares: found once, the others are not tried (run/).
SHARED = {"index unreachable": "index", "registry unreachable": "registry", "engine down": "engine"}
LINE = 300  # characters kept of the decisive line (the log is the cell's, untrusted)
HEAD = 8 * 1024 * 1024  # bytes of a log read: the first decisive line is near its start


@dataclass(frozen=True, kw_only=True)
class RootCause:
    """A cell's infrastructure cause: what, the decisive line, where (the log, its line), retryable."""

    cause: str
    line: str
    log: str | None = None
    line_no: int | None = None  # 1-based, in log

    @property
    def retryable(self) -> bool:
        return BY_NAME[self.cause].retryable

    @property
    def short(self) -> str:
        """The cause in a word, for a grid entry."""
        return SHORT[self.cause]

    @property
    def shared(self) -> str | None:
        """What every cell needing it shares (index, registry, engine), or None."""
        return SHARED.get(self.cause)

    def words(self) -> str:
        """The one line every format shows: `index unreachable: <line> (log <path>:<n>)`."""
        where = f" (log {self.log}{f':{self.line_no}' if self.line_no else ''})" if self.log else ""
        return f"{self.cause}: {self.line}{where}"

    def record(self) -> dict[str, Any]:
        """cell.json's `cause`."""
        return {"cause": self.cause, "line": self.line, "log": self.log, "line_no": self.line_no,
                "retryable": self.retryable}


def cause_of(line: str) -> Cause | None:
    """The first cause whose evidence this line holds."""
    return next((cause for cause in CAUSES if cause.evidence.search(line)), None)


# uv says why in a chain under its error (`  Caused by: ...`, `  cause: ...` in newer releases (seen
# with this machine's uv), or `├─▶`/`╰─▶` in its fancy form): a timeout anywhere in the chain makes
# the error a timeout, not an absent index.
CHAIN = re.compile(r"^\s*(?:Caused by:|cause:|[├╰]─▶)")
REFINES = "index timed out"


def classify(lines: Iterable[str], log: str | None = None) -> RootCause | None:
    """The cause of the first decisive line (refined by the chain of reasons under it), or None
    when no line names one."""
    found: RootCause | None = None
    for number, line in enumerate(lines, 1):
        if found is not None:
            if not CHAIN.match(line):
                break
            if (cause := cause_of(line)) is not None and cause.name == REFINES:
                return RootCause(cause=cause.name, line=_cut(line), log=log, line_no=number if log else None)
            continue
        cause = cause_of(line)
        if cause is not None:
            found = RootCause(cause=cause.name, line=_cut(line), log=log, line_no=number if log else None)
    return found


def classify_log(path: Path | None, *fallback: str) -> RootCause | None:
    """The root cause in a log's first HEAD bytes, else in the fallback texts (the harness's own
    message, which names the step that failed), else None. A log that cannot be read is passed by."""
    if path is not None:
        try:  # the shared regular-file opener: a link or a FIFO planted at the log's path is not read
            with rundir.open_plain(path, path.parent) as handle:
                text = handle.read(HEAD).decode("utf-8", errors="replace")
        except (OSError, rundir.NotPlain):
            text = ""
        found = classify(text.splitlines(), str(path))
        if found is not None:
            return found
    for said in fallback:
        found = classify(said.splitlines())
        if found is not None:
            return replace_log(found, str(path) if path is not None else None)
    return None


def replace_log(found: RootCause, log: str | None) -> RootCause:
    return RootCause(cause=found.cause, line=found.line, log=log, line_no=None)


def read(data: object) -> tuple[RootCause | None, str | None]:
    """cell.json's `cause` back: (the cause, None), or (None, why it is malformed)."""
    if not isinstance(data, dict):
        return None, "expected an object"
    cause, line, log, number = data.get("cause"), data.get("line"), data.get("log"), data.get("line_no")
    if cause not in BY_NAME:
        return None, f"cause: not one of {', '.join(sorted(BY_NAME))}"
    if not isinstance(line, str):
        return None, "line: expected a string"
    if log is not None and not isinstance(log, str):
        return None, "log: expected a string or null"
    if number is not None and (not isinstance(number, int) or isinstance(number, bool) or number < 1):
        return None, "line_no: expected a 1-based line number or null"
    return RootCause(cause=str(cause), line=_cut(line), log=log[:1000] if log else None, line_no=number), None


def _cut(line: str) -> str:
    line = line.strip()
    return line if len(line) <= LINE else line[: LINE - 1] + "…"


MAX_ATTEMPTS = 100  # cell.json's `attempts` entries read (--retries takes at most 9999; a fleet retries a few)


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """An earlier attempt of a cell that --retries ran again (cell.json's `attempts`): its number,
    where it was kept (attempts/<n>), what ended it, and how its cases ended."""

    attempt: int
    path: str
    cause: RootCause
    counts: tuple[tuple[str, int], ...] = ()

    def words(self, of: int) -> str:
        ran = ", ".join(f"{n} {status}" for status, n in self.counts) or "no case"
        return f"attempt {self.attempt} of {of}: {self.cause.cause}: {self.cause.line} ({ran}; {self.path}/)"


def read_attempts(data: object) -> tuple[tuple[Attempt, ...], str | None]:
    """cell.json's `attempts` back: (the attempts, None), or ((), why it is malformed)."""
    if not isinstance(data, list) or len(data) > MAX_ATTEMPTS:
        return (), f"expected a list of at most {MAX_ATTEMPTS} attempts"
    found = []
    for n, entry in enumerate(data):
        if not isinstance(entry, dict):
            return (), f"entry {n}: expected an object"
        number, path, counts = entry.get("attempt"), entry.get("path"), entry.get("counts", {})
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            return (), f"entry {n}: attempt: expected a number from 1"
        if not isinstance(path, str) or path != f"attempts/{number}":
            return (), f"entry {n}: path: expected attempts/{number}"
        if not isinstance(counts, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                                   for k, v in counts.items()):
            return (), f"entry {n}: counts: expected an object of whole numbers"
        cause, wrong = read(entry.get("cause"))
        if cause is None:
            return (), f"entry {n}: cause: {wrong}"
        found.append(Attempt(attempt=number, path=path, cause=cause,
                             counts=tuple(sorted((k[:40], v) for k, v in counts.items()))[:20]))
    return tuple(found), None
