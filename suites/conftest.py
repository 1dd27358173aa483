"""Options, knobs and the recorder of the suite.

The suite needs only pytest and torch, so that it runs inside any image without the harness.
With --results-dir it writes env.json (the observed stack) and results.jsonl (one line per
case, appended as each case ends) there; README.md beside this file gives the schema.
Isolation of cases (--isolate, --case-timeout, --gpu-per-worker) lives in isolation.py.
"""

from __future__ import annotations

import configparser
import contextlib
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import pytest

SUITE_DIR = os.path.dirname(os.path.abspath(__file__))


def _load_beside(stem: str) -> Any:
    """<stem>.py beside this file, loaded by path under a name of its own: whatever pytest's
    rootdir and import mode (which decide whether suites/ is on sys.path) and whatever else is
    called `isolation` or `records` on the path."""
    name = f"convmatrix_suite_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(SUITE_DIR, f"{stem}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while it loads
        spec.loader.exec_module(module)
    return sys.modules[name]


# records.py is the one definition of the lines and env.json written here (the harness reads
# them with it); isolation.py holds the case isolation; options.py the suite's options.
records = _load_beside("records")
libaudit = _load_beside("libaudit")
isolation = _load_beside("isolation")
options = _load_beside("options")
casefile = _load_beside("casefile")
SUITE_INI = os.path.join(SUITE_DIR, "pytest.ini")
NUMERIC_KEY = "convmatrix_numeric"
FACTS_KEY = "convmatrix_facts"
# Facts a test hands the recorder (record_facts), written as top-level keys of its results line.
FACT_FIELDS = ("timing", "fingerprint", "need_mb", "scaled", "shapes", "view", "trigger", "sources", "backend",
               "cudnn_path", "audit")
# A results line is written with one write() on an O_APPEND fd so that xdist workers never
# interleave; keep it well under 64 KiB by bounding the free-text fields.
LINE_LIMIT = 60000
MESSAGE_LIMIT = 4000
WARNING_MESSAGE_LIMIT = 1000
WARNINGS_LIMIT = 20
# The order in which a phase outcome wins over another for the case's one status.
SEVERITY = {"passed": 0, "skipped": 1, "failed": 2, "error": 3, "timeout": 4}


@dataclass(frozen=True)
class Settings:
    knobs: dict[str, Any]
    worker: str
    results_dir: str | None
    cell_id: str | None
    isolation: Any  # isolation.Options
    continue_run: bool = False  # --continue-run


SETTINGS = pytest.StashKey[Settings]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("convmatrix", "convmatrix suite")
    # One table (options.py), which the harness also checks a run's suite options by.
    options.addoptions(group, "suite")
    options.addoptions(group, "isolation")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # Before xdist's own tryfirst hook: this conftest registers after the xdist plugin, and among
    # tryfirst implementations the later-registered runs first. In a worker: pin its GPU before
    # anything (pytest_configure's torch.cuda.is_available() among them) initialises CUDA.
    isolation.prepare(config)


class UserCases:
    """The cases of the run's --cases files, which test_conv.py parametrizes with beside the
    catalog's (found as the plugin "convmatrix_cases")."""

    def __init__(self, paths: list[str]) -> None:
        import catalog  # suites/ is on sys.path once this conftest is loaded, as for test_conv.py

        try:
            taken = [case.id for case in (*catalog.CASES, *catalog.ZOO_CASES)]
            self.cases = casefile.load(paths, catalog.Case, taken=taken)
        except casefile.CaseFileError as exc:
            # pytest prints a usage error's message after "ERROR: ": one line a problem.
            raise pytest.UsageError("\n".join(exc.lines)) from None
        self.files = [{"path": path, "stem": casefile.stem_of(path)} for path in paths]


def pytest_configure(config: pytest.Config) -> None:
    _adopt_suite_ini(config)
    # Before torch is first imported here (_settings asks it for a device): the audit's child
    # imports torch beside this process's own import and the collection.
    if EarlyAudit.wanted(config):
        config.pluginmanager.register(EarlyAudit(config), "convmatrix_early_audit")
    # Before anything is written: a bad case file is a usage error, like a bad option.
    config.pluginmanager.register(UserCases(config.getoption("cases") or []), "convmatrix_cases")
    settings = _settings(config)
    config.stash[SETTINGS] = settings
    import torch  # here, not at the top: after the audit's child has started (EarlyAudit)

    torch.backends.cudnn.benchmark = settings.knobs["cudnn_benchmark"]
    if settings.knobs.get("cudnn_enabled") is False:
        torch.backends.cudnn.enabled = False
    torch.backends.cudnn.deterministic = settings.knobs["cudnn_deterministic"]
    # Warn-once warnings (cuDNN plan failures among them) would otherwise land only on
    # whichever case ran first in the process; each case should carry its own.
    torch.set_warn_always(True)
    in_worker = isolation.is_worker(config)
    has_xdist = config.pluginmanager.hasplugin("xdist")
    watchdog = None
    if (in_worker or settings.isolation.in_process) and settings.isolation.case_timeout > 0:
        watchdog = isolation.Watchdog(settings.isolation.case_timeout, settings.worker)
    if settings.results_dir is None:
        if watchdog is not None:
            config.pluginmanager.register(isolation.Guard(watchdog), "convmatrix_guard")
        elif settings.isolation.gpu_per_worker and has_xdist and not in_worker:
            config.pluginmanager.register(isolation.GpuSlots(lambda worker, facts: None),
                                          "convmatrix_gpu_slots")
        return
    prepare_results_dir(settings.results_dir)  # the controller's check comes before any worker
    config.pluginmanager.register(CaseRecorder(settings, watchdog), "convmatrix_recorder")
    counter = None
    if settings.knobs["device"] == "cuda":  # on a GPU, what the processes mapped after the convs
        counter = CasesRan()
        config.pluginmanager.register(counter, "convmatrix_cases_ran")
    if not in_worker:  # xdist workers leave env.json to the controller
        env_writer = EnvWriter(settings)
        config.pluginmanager.register(env_writer, "convmatrix_env")
        if counter is not None:
            config.pluginmanager.register(AfterConvs(settings, counter), "convmatrix_after_convs")
        if settings.continue_run:
            config.pluginmanager.register(Continuation(settings.results_dir), "convmatrix_continuation")
        if settings.isolation.gpu_per_worker and has_xdist:
            config.pluginmanager.register(isolation.GpuSlots(env_writer.assign_worker),
                                          "convmatrix_gpu_slots")
        # pytest_handlecrashitem came with xdist 2.2.1; before it, the markers of crashed
        # workers stay and the harness writes their `crashed` lines at the end.
        if settings.isolation.isolate and hasattr(config.hook, "pytest_handlecrashitem"):
            config.pluginmanager.register(
                isolation.CrashHandler(settings.results_dir, settings.isolation.case_timeout,
                                       CrashLines(settings).write, records.outran),
                "convmatrix_crashes")


# What -k and -m see of the audit case (pytest's KeywordMatcher: the names of its nodes, its markers).
AUDIT_KEYWORDS = ("suites", "test_audit.py", "test_audit[audit-cuda-libraries]", "audit-cuda-libraries",
                  "parametrize")
AUDIT_MARKS = ("parametrize",)


class EarlyAudit:
    """The library audit's children, started as the session starts, in the process that will run
    the audit case (no xdist worker runs here: the main process, --in-process among them): each
    child imports torch beside this process's own import and the collection, so the audit case
    finds its table nearly ready (the audit's cost to a cell, issue 47; docs/performance.md). One
    child for this environment, and one for the image as shipped where that differs
    (libaudit.shipped_env). The case takes the child started in its own environment
    (the `audit_child` fixture); a changed environment gets a fresh child from the case."""

    def __init__(self, config: pytest.Config) -> None:
        here = dict(os.environ)
        shipped = libaudit.shipped_env(here)
        timeout = libaudit.child_timeout(config.getoption("case_timeout", 0))  # the case's own limit
        self.children = [libaudit.Child(here, timeout),
                         *([libaudit.Child(shipped, timeout)] if shipped is not None else [])]

    @staticmethod
    def wanted(config: pytest.Config) -> bool:
        """Where the audit case will likely run here: not in an xdist worker nor a controller (which
        runs no case), not to list the cases, not to continue a run, and neither the paths nor -k
        nor -m leave it out. A wrong guess costs time only: a child nobody takes is killed after
        the collection, and a case with no child starts its own."""
        if isolation.is_worker(config) or getattr(config.option, "numprocesses", None) or config.option.collectonly:
            return False
        if config.getoption("continue_run", False):
            return False  # a run continued after a crash: its audit is nearly always recorded already
        return (EarlyAudit.named(config.args, str(config.invocation_params.dir))
                and EarlyAudit.selects(config.option.keyword, AUDIT_KEYWORDS)
                and EarlyAudit.selects(config.option.markexpr, AUDIT_MARKS, exact=True))

    @staticmethod
    def named(args: list[str], cwd: str) -> bool:
        """Whether the command-line paths reach test_audit.py: the suite's folder or one above it,
        or the file itself (with or without a node id)."""
        audit = os.path.join(SUITE_DIR, "test_audit.py")
        for arg in args or ["."]:
            path = os.path.realpath(os.path.join(cwd, arg.split("::", 1)[0]))
            if path == audit or os.path.commonpath([path, audit]) == path:
                return True
        return False

    @staticmethod
    def selects(expression: str, names: tuple[str, ...], exact: bool = False) -> bool:
        """Whether a -k (names matched as substrings, as pytest does) or -m (exact) expression
        keeps a case of these names, by pytest's own expression parser; True when it cannot tell."""
        if not expression:
            return True
        try:
            from _pytest.mark.expression import Expression  # pytest's own -k/-m grammar (private)

            def match(name: str, /, **kwargs: str | int | bool | None) -> bool:
                low = name.lower()
                return any((low == n.lower()) if exact else (low in n.lower()) for n in names)

            return bool(Expression.compile(expression).evaluate(match))
        except Exception:
            return True

    # Set by pytest itself while a case runs (PYTEST_CURRENT_TEST): not a difference in what loads.
    PYTEST_OWN = ("PYTEST_CURRENT_TEST",)

    @staticmethod
    def same(one: dict[str, str], other: dict[str, str]) -> bool:
        """Whether two environments are the same but for what pytest sets while a case runs."""
        own = EarlyAudit.PYTEST_OWN
        return {k: v for k, v in one.items() if k not in own} == {k: v for k, v in other.items() if k not in own}

    def take(self, env: dict[str, str]) -> dict[str, Any] | None:
        for child in self.children:
            if self.same(child.env, env):
                self.children.remove(child)
                ran: dict[str, Any] = child.result()
                return ran
        return None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if not any(libaudit.AUDIT_CASE in item.nodeid for item in items):
            self.stop()  # the audit is deselected (-k, --continue-run): nobody will read them

    def pytest_unconfigure(self) -> None:
        self.stop()

    def stop(self) -> None:
        for child in self.children:
            child.stop()
        self.children = []


@pytest.fixture
def audit_child(pytestconfig: pytest.Config) -> Callable[[dict[str, str]], dict[str, Any] | None]:
    """What the child EarlyAudit started in this environment gave, or None (no such child)."""
    early = pytestconfig.pluginmanager.get_plugin("convmatrix_early_audit")
    return early.take if isinstance(early, EarlyAudit) else (lambda env: None)


def prepare_results_dir(path: str) -> None:
    """Create --results-dir and prove it writable, or stop with a usage error (exit 4) naming
    it: a file in its place, a read-only directory or file system, a parent one cannot create
    in would otherwise surface as an INTERNALERROR traceback at the first write."""
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        pass  # something not a directory is there: told below
    except OSError as exc:
        raise pytest.UsageError(f"--results-dir {path}: cannot create it ({exc.strerror or exc})") from None
    if not os.path.isdir(path):
        raise pytest.UsageError(f"--results-dir {path}: not a directory")
    try:  # os.access is no proof: root passes it on a read-only mount, and ACLs differ
        fd, probe = tempfile.mkstemp(prefix=".convmatrix-probe-", dir=path)
        os.close(fd)
        os.remove(probe)
    except OSError as exc:
        raise pytest.UsageError(f"--results-dir {path}: cannot write there ({exc.strerror or exc})") from None


def _adopt_suite_ini(config: pytest.Config) -> None:
    """Apply what the suite needs from suites/pytest.ini when pytest read another file.

    pytest takes the ini file nearest the common ancestor of its path arguments, and a
    --results-dir that exists is one: results under a project with its own pytest config (the
    harness writes them to reports/ in this repository) make pytest read that config instead.
    """
    if config.inipath is not None and os.path.samefile(config.inipath, SUITE_INI):
        return
    ini = configparser.ConfigParser()
    ini.read(SUITE_INI)
    for line in ini["pytest"]["markers"].strip().splitlines():
        config.addinivalue_line("markers", line.strip())
    # Warnings are data here: a foreign "error" filter must not turn them into failures.
    # Filters listed later win, and command-line -W filters still win over these.
    config.addinivalue_line("filterwarnings", "default")


def _settings(config: pytest.Config) -> Settings:
    results_dir = config.getoption("results_dir")
    cell_id = config.getoption("cell_id")
    if results_dir is not None and not cell_id:
        raise pytest.UsageError("--cell-id is required with --results-dir")
    knobs = {
        "device": _resolve_device(config.getoption("device")),
        "cudnn_benchmark": config.getoption("cudnn_benchmark") == "on",
        "cudnn_deterministic": config.getoption("cudnn_deterministic") == "on",
        "channels_last": config.getoption("channels_last") == "on",
        "pad_channels": config.getoption("pad_channels"),
    }
    if config.getoption("cudnn_enabled") == "off":  # a knob only when off: every other line stays as it was
        knobs["cudnn_enabled"] = False
    if knobs["pad_channels"] < 0:
        raise pytest.UsageError("--pad-channels takes a non-negative multiple, e.g. 8")
    return Settings(knobs, _worker(config), results_dir, cell_id, isolation.options_of(config),
                    bool(config.getoption("continue_run")))


def _resolve_device(requested: str) -> str:
    if requested != "auto":
        return requested
    import torch  # (not at the top: see pytest_configure)

    return "cuda" if torch.cuda.is_available() else "cpu"


def _worker(config: pytest.Config) -> str:
    """gw0, gw1 … in an xdist worker, else main."""
    workerinput = getattr(config, "workerinput", None)
    return "main" if workerinput is None else str(workerinput["workerid"])


def pytest_report_header(config: pytest.Config) -> str:
    import torch

    settings = config.stash[SETTINGS]
    cudnn, cudnn_error = cudnn_version()
    return (f"convmatrix: cell={settings.cell_id} torch={torch.__version__} "
            f"cuda={torch.version.cuda} cudnn={cudnn_error or cudnn} knobs={settings.knobs}")


@pytest.fixture
def device(pytestconfig: pytest.Config) -> str:
    """The device the cases run on: "cuda" or "cpu"."""
    return str(pytestconfig.stash[SETTINGS].knobs["device"])


@pytest.fixture
def record_numeric(request: pytest.FixtureRequest) -> Callable[[dict[str, float]], None]:
    """Hands the case's numeric error to the recorder (the last value handed wins)."""
    def record(numeric: dict[str, float]) -> None:
        request.node.user_properties.append((NUMERIC_KEY, numeric))
    return record


@pytest.fixture
def record_facts(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Hands the recorder facts of the case (FACT_FIELDS), merged into its results line."""
    def record(**facts: Any) -> None:
        unknown = set(facts) - set(FACT_FIELDS)
        if unknown:
            raise ValueError(f"unknown case facts {sorted(unknown)} (known: {FACT_FIELDS})")
        request.node.user_properties.append((FACTS_KEY, facts))
    return record


# --- observed stack ------------------------------------------------------------------------

def cudnn_version() -> tuple[int | None, str | None]:
    """cuDNN's version, or the error that asking for it raised (a version mismatch, say)."""
    import torch

    try:
        version = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]  # untyped in torch
    except Exception as exc:
        return None, str(exc)
    return (None if version is None else int(version)), None


def driver_version() -> str | None:
    """The NVIDIA driver version, from procfs or nvidia-smi; None when neither tells."""
    try:
        with open("/proc/driver/nvidia/version") as handle:
            text = handle.read()
    except OSError:
        text = ""
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)", text)
    if match:
        return match.group(1)
    return _driver_from_smi()


def _driver_from_smi() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def visible_gpus() -> list[dict[str, Any]]:
    """Every GPU torch sees; empty when CUDA is unusable (the cases then say why)."""
    import torch

    try:
        if not torch.cuda.is_available():
            return []
        gpus = []
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            gpus.append({
                "index": index,
                "name": props.name,
                "capability": f"{props.major}.{props.minor}",
                "memory_mb": props.total_memory // (1024 * 1024),
            })
        return gpus
    except Exception:
        return []


def observe_env(settings: Settings) -> dict[str, Any]:
    import torch

    cudnn, cudnn_error = cudnn_version()
    return {
        "schema": records.SCHEMA,
        "cell_id": settings.cell_id,
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "cudnn_error": cudnn_error,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "driver": driver_version(),
        "gpus": visible_gpus(),
        "device": settings.knobs["device"],
        "lane": os.environ.get("CONVMATRIX_LANE", "direct"),
        "image_id": os.environ.get("CONVMATRIX_IMAGE_ID") or None,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "started": records.now(),
        "ended": None,
        "knobs": dict(settings.knobs),
        "suite_version": records.suite_version(SUITE_DIR),
        "argv": list(sys.argv),
        # how the cases were isolated; workers: each xdist worker's slot and CUDA_VISIBLE_DEVICES
        "isolation": dict(settings.isolation.as_json(), workers={}),
    }


# --- files ---------------------------------------------------------------------------------

def _json_safe(value: Any) -> Any:
    """NaN and infinities are not JSON: write them as the strings "nan", "inf", "-inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    return value


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    """Readers see the old file or the new one, never half of one."""
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "w") as handle:
        json.dump(_json_safe(data), handle, indent=2, allow_nan=False)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def append_line(path: str, line: bytes) -> None:
    """One write() on an O_APPEND fd: concurrent writers never split each other's lines."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _truncate(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


def encode_record(record: dict[str, Any]) -> bytes:
    line = json.dumps(_json_safe(record), allow_nan=False)
    if len(line) > LINE_LIMIT:
        # Only pathological text gets here (say, escaped non-ASCII); keep the head of it.
        record = dict(record, message=_truncate(record["message"], 1000),
                      warnings=[dict(w, message=_truncate(w["message"], 200))
                                for w in record["warnings"][:5]])
        line = json.dumps(_json_safe(record), allow_nan=False)
    return (line + "\n").encode("utf-8")


# --- recording -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Phase:
    status: str
    exc_type: str | None
    message: str | None


def phase_of(report: pytest.TestReport, call: pytest.CallInfo[None]) -> Phase:
    """The outcome of one phase (setup, call, teardown) with the real exception text."""
    if report.passed:
        return Phase("passed", None, None)
    exc = call.excinfo.value if call.excinfo is not None else None
    message = str(exc) if exc is not None else report.longreprtext
    if report.skipped:
        return Phase("skipped", None, message)
    status = "failed" if report.when == "call" else "error"
    if getattr(exc, "case_status", None) == isolation.RanPastItsTime.case_status:
        status = "timeout"  # a case's own bounded wait ran out (isolation.RanPastItsTime)
    return Phase(status, type(exc).__name__ if exc is not None else None, message)


def combine(phases: list[Phase]) -> Phase:
    """The case's one outcome: the worst phase wins, the earliest among equals."""
    worst = Phase("passed", None, None)
    for phase in phases:
        if SEVERITY[phase.status] > SEVERITY[worst.status]:
            worst = phase
    return worst


def warning_entry(warning: Any) -> dict[str, Any]:
    return {
        "category": warning.category.__name__,
        "message": _truncate(str(warning.message), WARNING_MESSAGE_LIMIT),
        "filename": warning.filename,
        "lineno": warning.lineno,
    }


def bounded_warnings(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept = entries[:WARNINGS_LIMIT]
    if len(entries) > WARNINGS_LIMIT:
        kept.append({"category": "convmatrix.WarningsDropped",
                     "message": f"{len(entries) - WARNINGS_LIMIT} more warnings not recorded",
                     "filename": None, "lineno": None})
    return kept


class CaseRecorder:
    """Writes results.jsonl and the in-flight marker in the process that runs the cases.

    In an xdist controller only forwarded hooks reach it (warnings of cases it does not run),
    which it ignores, so registering it there too is harmless.
    """

    def __init__(self, settings: Settings, watchdog: Any = None) -> None:
        self.settings = settings
        assert settings.results_dir is not None
        self.results_path = os.path.join(settings.results_dir, "results.jsonl")
        self.marker_path = os.path.join(settings.results_dir, f"running-{settings.worker}.json")
        self.phases: dict[str, list[Phase]] = {}
        self.warnings: dict[str, list[dict[str, Any]]] = {}
        self.clocks: dict[str, tuple[str, float]] = {}
        # In an isolated worker, or in-process: the case timeout, and leaving after a sticky
        # CUDA error.
        self.watchdog = watchdog
        if watchdog is not None:
            watchdog.on_timeout = self._timed_out
        self.leave_on_sticky = settings.isolation.in_process or (
            settings.isolation.isolate and settings.worker != "main")

    # tryfirst makes this the outermost wrapper, outside pytest's warnings plugin, which
    # reports a case's warnings only as its own wrapper ends.
    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item,
                                nextitem: pytest.Item | None) -> Generator[None, Any, None]:
        started, clock = records.now(), time.monotonic()
        self.phases[item.nodeid] = []
        self.warnings[item.nodeid] = []
        self.clocks[item.nodeid] = (started, clock)
        # The timeout lets whoever finds the marker of a dead process tell a hang from a crash.
        write_json_atomic(self.marker_path, {"case": case_id(item), "nodeid": suite_nodeid(item),
                                             "pid": os.getpid(), "started": started,
                                             "timeout": self.settings.isolation.case_timeout})
        if self.watchdog is not None:
            self.watchdog.arm(item)
        outcome = yield
        if self.watchdog is not None:
            self.watchdog.disarm()  # from here on the case's own line is the only one
        self.clocks.pop(item.nodeid, None)
        # An interrupted case (Ctrl-C, pytest.exit) has no honest outcome: its marker stays.
        if outcome.excinfo is None:
            record = self._record(item, started, time.monotonic() - clock)
            append_line(self.results_path, encode_record(record))
            os.remove(self.marker_path)
            # In-process, the last case has no next one to spare a poisoned context: the run ends as usual.
            last_in_process = nextitem is None and self.settings.isolation.in_process
            if (self.leave_on_sticky and not last_in_process and record["status"] in ("failed", "error")
                    and isolation.is_sticky(record["message"])):
                isolation.leave(isolation.STICKY_EXIT_CODE,
                                f"{item.nodeid} hit a sticky CUDA error; worker {self.settings.worker} "
                                "leaves so that the next case gets a fresh CUDA context",
                                isolation.stderr_copy())

    def _timed_out(self, item: pytest.Item) -> None:
        """The watchdog's thread, as the case runs past its timeout: its line, then it leaves."""
        started, clock = self.clocks.get(item.nodeid, (records.now(), time.monotonic()))
        timeout = Phase("timeout", None, isolation.timeout_message(self.settings.isolation.case_timeout))
        record = self._record(item, started, time.monotonic() - clock, timeout)
        append_line(self.results_path, encode_record(record))
        with contextlib.suppress(OSError):
            os.remove(self.marker_path)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        if item.nodeid in self.phases:
            self.phases[item.nodeid].append(phase_of(outcome.get_result(), call))

    def pytest_warning_recorded(self, warning_message: Any, when: str, nodeid: str) -> None:
        if when == "runtest" and nodeid in self.warnings:
            self.warnings[nodeid].append(warning_entry(warning_message))

    def _record(self, item: pytest.Item, started: str, duration: float,
                outcome: Phase | None = None) -> dict[str, Any]:
        phases = self.phases.pop(item.nodeid, [])
        phase = combine(phases) if outcome is None else outcome
        knobs = self.settings.knobs
        return {
            "schema": records.SCHEMA,
            "cell_id": self.settings.cell_id,
            "case": case_id(item),
            "nodeid": suite_nodeid(item),
            "params": case_params(item),
            "knobs": dict(knobs),
            "device": knobs["device"],
            "status": phase.status,
            "exc_type": phase.exc_type,
            "message": _truncate(phase.message, MESSAGE_LIMIT),
            "warnings": bounded_warnings(self.warnings.pop(item.nodeid, [])),
            "numeric": numeric_of(item),
            **facts_of(item),
            "duration_s": round(duration, 6),
            "worker": self.settings.worker,
            "started": started,
            "ended": records.now(),
        }


def suite_nodeid(item: pytest.Item) -> str:
    """The node id as seen from the repository root, suites/test_conv.py::test_conv[<case>],
    whichever rootdir pytest chose and wherever suites/ is mounted, so that lanes agree."""
    path = os.path.relpath(str(item.path), SUITE_DIR).replace(os.sep, "/")
    return f"suites/{path}::{item.nodeid.split('::', 1)[1]}"


def case_id(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    return callspec.id if callspec is not None else item.name


def case_params(item: pytest.Item) -> dict[str, Any]:
    """The parameters of the case object a test is parametrized with (a catalog.Case)."""
    callspec: Any = getattr(item, "callspec", None)
    case: Any = callspec.params.get("case") if callspec is not None else None
    return dict(case.params()) if hasattr(case, "params") else {}


def facts_of(item: pytest.Item) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for key, value in item.user_properties:
        if key == FACTS_KEY and isinstance(value, dict):
            facts.update(value)
    return facts


def numeric_of(item: pytest.Item) -> dict[str, float] | None:
    values = [value for key, value in item.user_properties if key == NUMERIC_KEY and isinstance(value, dict)]
    return values[-1] if values else None


class EnvWriter:
    """Writes env.json at the start and again at the end, in the main or controller process.

    With --continue-run the first attempt's env.json stays what it was (its start, its argv),
    and each later attempt adds itself to its `continued` list."""

    def __init__(self, settings: Settings) -> None:
        assert settings.results_dir is not None
        self.path = os.path.join(settings.results_dir, "env.json")
        observed = observe_env(settings)
        earlier = isolation.read_json(self.path) if settings.continue_run else None
        if earlier is None:
            self.env = observed
        else:
            self.env = earlier
            attempt = {key: observed[key] for key in ("pid", "started", "argv")}
            self.env["continued"] = [*self.env.get("continued", []), attempt]

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        write_json_atomic(self.path, self.env)

    def assign_worker(self, worker: str, facts: dict[str, Any]) -> None:
        """An xdist worker's slot and GPU, as the controller hands them out."""
        self.env["isolation"]["workers"][worker] = facts
        write_json_atomic(self.path, self.env)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.env["ended"] = records.now()
        write_json_atomic(self.path, self.env)


AFTER_CONVS_KEY = "convmatrix_after_convs"  # what an xdist worker hands its controller as it ends


class CasesRan:
    """On a GPU run, in every process that runs cases: counts the cases other than the audit, and
    in an xdist worker hands that count and the CUDA-family files it mapped to the controller."""

    def __init__(self) -> None:
        self.ran = 0

    # pytest_runtest_call runs only where the case runs (xdist forwards the log hooks to its
    # controller, which runs none).
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        if libaudit.AUDIT_CASE not in item.nodeid:
            self.ran += 1

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(session.config, "workeroutput", None)
        if output is not None:
            output[AFTER_CONVS_KEY] = libaudit.seen(self.ran)


class AfterConvs:
    """On a GPU run, in the main process or xdist's controller: once every process has ended, the
    `audit-after-convs` line (libaudit.judged): what they mapped against the audit's table."""

    def __init__(self, settings: Settings, own: CasesRan) -> None:
        assert settings.results_dir is not None
        self.settings, self.own = settings, own
        self.results_path = os.path.join(settings.results_dir, "results.jsonl")
        self.handed: list[dict[str, Any]] = []
        self.lost = 0
        self.started = records.now()

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        given = getattr(node, "workeroutput", {}).get(AFTER_CONVS_KEY)
        if isinstance(given, dict):
            self.handed.append(given)
        else:
            self.lost += 1  # a worker that died (a crash, a timeout's exit) hands nothing over

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.own.ran:  # this process ran cases itself (no xdist, or --in-process)
            self.handed.append(libaudit.seen(self.own.ran))
        if not any(one.get("ran") for one in self.handed):
            return  # no conv case ran (an audit-only run, -k audit): nothing ran after the audit
        table, written = libaudit.recorded(self.results_path)
        if table is None or written:
            return  # no audit to judge against (deselected), or a continued run already has its line
        fields = libaudit.judged(self.handed, self.lost, table)
        # A crash line's fields (no params, no numeric, no duration), with this case's own outcome.
        record = records.crash_record(cell_id=self.settings.cell_id, case=libaudit.AFTER_CASE,
                                      nodeid=libaudit.AFTER_NODEID, status=fields["status"], message="",
                                      worker=self.settings.worker, started=self.started, knobs=self.settings.knobs)
        record.update(fields)
        append_line(self.results_path, encode_record(record))


class Continuation:
    """--continue-run: the cases that already have a line are deselected (each case is recorded
    once), and the exit status speaks for the whole run, earlier attempts included."""

    def __init__(self, results_dir: str) -> None:
        self.results_path = os.path.join(results_dir, "results.jsonl")

    def recorded(self) -> dict[str, str]:
        """node id -> status of every readable line so far."""
        statuses: dict[str, str] = {}
        with contextlib.suppress(OSError), open(self.results_path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if isinstance(record, dict) and isinstance(record.get("nodeid"), str):
                        statuses[record["nodeid"]] = str(record.get("status"))
        return statuses

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        done = self.recorded()
        keep = [item for item in items if suite_nodeid(item) not in done]
        if len(keep) < len(items):
            config.hook.pytest_deselected(items=[item for item in items if suite_nodeid(item) in done])
            items[:] = keep

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
            failing = any(status not in ("passed", "skipped") for status in self.recorded().values())
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if failing else pytest.ExitCode.OK


class CrashLines:
    """The line the xdist controller writes for a case whose worker died before writing it."""

    def __init__(self, settings: Settings) -> None:
        assert settings.results_dir is not None
        self.settings = settings
        self.results_path = os.path.join(settings.results_dir, "results.jsonl")

    def write(self, marker: dict[str, Any], status: str, message: str, worker: str) -> None:
        record = records.crash_record(cell_id=self.settings.cell_id, case=marker["case"],
                                      nodeid=marker.get("nodeid"), status=status, message=message,
                                      worker=worker, started=marker.get("started"), knobs=self.settings.knobs)
        append_line(self.results_path, encode_record(record))
