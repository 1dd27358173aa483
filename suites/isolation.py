"""Case isolation for the suite: --isolate, --case-timeout, --in-process and --gpu-per-worker.

Stdlib and pytest only (no torch), so that the project's tests can load it on their own.

With --in-process (what convmatrix passes, beside --case-timeout) the cases run in this one
process, with the same watchdog and the same exits after a timeout or a sticky CUDA error as a
worker's, and a case that kills the process leaves its running-main.json marker. Whoever
started the suite records that case and runs the rest in a fresh process (--continue-run skips
what already has a line): a run without a crash pays for no second interpreter.

With --isolate (turned on by --case-timeout > 0 without --in-process) the cases run in pytest-xdist workers (one,
unless -n says more) and a case that kills its worker costs that case alone: xdist starts a
fresh worker for the rest. Who writes which results line:

- the worker writes every line it can: a case's own outcome, and `timeout` from its watchdog
  (a timer thread) before it leaves with os._exit; after a case whose message is a sticky CUDA
  error (the context is unusable afterwards) it writes the line and then leaves too;
- the controller writes `crashed` (or `timeout`, when the case had outrun its time) for a case
  whose worker died without writing its line (SIGSEGV, SIGABRT, os._exit, a hang that held the
  GIL past the watchdog's grace); it learns of it through xdist's pytest_handlecrashitem and
  the worker's running-<worker>.json marker, which it then removes.

The controller also gives each worker a GPU slot (the lowest slot no live worker holds, so a
replacement takes over its predecessor's) and, with --gpu-per-worker on, the worker sets
CUDA_VISIBLE_DEVICES to the GPU of that slot, an entry of the outer CUDA_VISIBLE_DEVICES (or
of `nvidia-smi -L` when that is unset), before anything initialises CUDA.
"""

from __future__ import annotations

import faulthandler
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import pytest

# Messages of CUDA errors after which the context is unusable ("sticky"): every later CUDA call
# in the process fails too, so the worker must go. Matched anywhere in the message, any case.
STICKY_CUDA_ERRORS = (
    "an illegal memory access was encountered",
    "an illegal instruction was encountered",
    "misaligned address",
    "invalid program counter",
    "unspecified launch failure",
    "device-side assert triggered",
    "hardware stack error",
    "uncorrectable ECC error",
    "the launch timed out and was terminated",
    "operation not permitted when stream is capturing",
    "operation failed due to a previous error during capture",
)
STICKY = re.compile("|".join(re.escape(text) for text in STICKY_CUDA_ERRORS), re.IGNORECASE)
# xdist's default restart limit (4 per worker) would end an isolated run after a few crashes;
# each crash costs one case, so allow far more (the user's --max-worker-restart still wins).
MAX_WORKER_RESTART = 1000
TIMEOUT_EXIT_CODE = 124  # the worker's exit status after its watchdog fired
STICKY_EXIT_CODE = 75  # the worker's exit status after a sticky CUDA error
GPU_INPUT_KEY = "convmatrix_cuda_visible_devices"  # in an xdist workerinput
# The largest --case-timeout: 30 days, far below what threading.Timer and faulthandler accept
# (about 292 years, where their clocks overflow), grace period included.
MAX_CASE_TIMEOUT = 30 * 24 * 3600.0


class RanPastItsTime(Exception):
    """A case whose own bounded wait ran out (the library audit's child): recorded `timeout`, as
    the watchdog records a case that runs past --case-timeout, never as what the case looks for.
    Told by its `case_status`, not its class: a case module imports this file under its own name,
    conftest.py under another (conftest._load_beside), so the two classes differ."""

    case_status = "timeout"


@dataclass(frozen=True)
class Options:
    isolate: bool  # in xdist workers
    case_timeout: float  # 0: no timeout
    gpu_per_worker: bool
    in_process: bool = False  # no workers: the caller runs the rest after a crash

    def as_json(self) -> dict[str, Any]:
        return {"isolate": self.isolate, "case_timeout": self.case_timeout,
                "gpu_per_worker": self.gpu_per_worker, "in_process": self.in_process}


def options_of(config: pytest.Config) -> Options:
    timeout = config.getoption("case_timeout")
    # argparse's float() takes "inf", "nan" and "1e999" too; the watchdog's timer and
    # faulthandler overflow on such values inside the worker (an INTERNALERROR), so they are
    # refused here, as a usage error (exit 4), before any worker starts.
    if not math.isfinite(timeout) or not 0 <= timeout <= MAX_CASE_TIMEOUT:
        raise pytest.UsageError(
            f"--case-timeout takes a number of seconds >= 0 and at most {MAX_CASE_TIMEOUT:.0f} "
            f"(30 days), not {timeout}; 0 means no timeout")
    # Workers asked for by name (--isolate, -n N) win over --in-process, which the harness
    # passes before the user's own options.
    explicit = bool(config.getoption("isolate"))
    workers = explicit or bool(getattr(config.option, "numprocesses", None))
    in_process = bool(config.getoption("in_process")) and not workers
    return Options(isolate=explicit or (timeout > 0 and not in_process),
                   case_timeout=float(timeout),
                   gpu_per_worker=config.getoption("gpu_per_worker") == "on",
                   in_process=in_process)


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def prepare(config: pytest.Config) -> None:
    """pytest_cmdline_main, tryfirst: before xdist's own (conftests register after plugins,
    and among tryfirst hooks the later-registered runs first) turns -n into workers."""
    options = options_of(config)
    if is_worker(config):
        pin_worker_gpu(config.workerinput, os.environ)  # type: ignore[attr-defined]
        return
    if not options.isolate:
        return
    if not config.pluginmanager.hasplugin("xdist") or not hasattr(config.option, "numprocesses"):
        raise pytest.UsageError(
            "--isolate (which --case-timeout turns on) needs pytest-xdist: "
            "install it (pip install pytest-xdist) and do not disable it with -p no:xdist")
    if not config.option.numprocesses:  # no -n, or -n 0
        config.option.numprocesses = 1
    if getattr(config.option, "maxworkerrestart", None) is None:
        config.option.maxworkerrestart = str(MAX_WORKER_RESTART)


# --- one GPU per worker --------------------------------------------------------------------

def outer_gpus(environ: Mapping[str, str], count_gpus: Callable[[], int]) -> list[str]:
    """The GPUs the run may use: the entries of CUDA_VISIBLE_DEVICES (indices, UUIDs or MIG
    ids, kept as written) when it is set, even to nothing; else 0..count_gpus()-1."""
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [entry.strip() for entry in listed.split(",") if entry.strip()]
    return [str(index) for index in range(count_gpus())]


def gpu_for_slot(slot: int, gpus: Sequence[str]) -> str | None:
    """The CUDA_VISIBLE_DEVICES of the worker in `slot`: one GPU, round-robin; None without GPUs."""
    if slot < 0:
        raise ValueError(f"a worker slot is >= 0, not {slot}")
    return gpus[slot % len(gpus)] if gpus else None


def smi_gpu_count() -> int:
    """How many GPUs `nvidia-smi -L` lists (0 without it); unlike torch.cuda.device_count(),
    this never initialises CUDA in the asking process."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    if done.returncode != 0:
        return 0
    return sum(1 for line in done.stdout.splitlines() if line.startswith("GPU "))


def lowest_free_slot(taken: Sequence[int]) -> int:
    slot = 0
    while slot in taken:
        slot += 1
    return slot


def pin_worker_gpu(workerinput: Mapping[str, Any], environ: Any) -> str | None:
    """In a worker, before CUDA initialises: take the GPU the controller gave this worker."""
    device = workerinput.get(GPU_INPUT_KEY)
    if device is not None:
        environ["CUDA_VISIBLE_DEVICES"] = device
    return device


class GpuSlots:
    """xdist controller plugin: a slot per live worker, and the GPU of that slot."""

    def __init__(self, on_assign: Callable[[str, dict[str, Any]], None],
                 environ: Mapping[str, str] = os.environ,
                 count_gpus: Callable[[], int] = smi_gpu_count) -> None:
        self.on_assign = on_assign
        self.environ = environ
        self.count_gpus = count_gpus
        self.gpus: list[str] | None = None
        self.slots: dict[str, int] = {}

    def pytest_configure_node(self, node: Any) -> None:
        if self.gpus is None:
            self.gpus = outer_gpus(self.environ, self.count_gpus)
        worker = str(node.workerinput["workerid"])
        slot = lowest_free_slot(list(self.slots.values()))
        self.slots[worker] = slot
        device = gpu_for_slot(slot, self.gpus)
        node.workerinput[GPU_INPUT_KEY] = device
        self.on_assign(worker, {"slot": slot, "cuda_visible_devices": device})

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        workerinput = getattr(node, "workerinput", None) or {}
        self.slots.pop(str(workerinput.get("workerid")), None)


# --- the worker's watchdog -----------------------------------------------------------------

_STDERR: list[Any] = []


def stderr_copy() -> Any:
    """A file on the real stderr, for notes written just before the worker leaves (pytest
    redirects fd 2 while a case runs); it ends up in the run's log. Take it at configure time,
    while pytest's capture is suspended."""
    if not _STDERR:
        try:
            _STDERR.append(os.fdopen(os.dup(sys.__stderr__.fileno()), "w"))  # type: ignore[union-attr]  # None: AttributeError below
        except (AttributeError, OSError, ValueError):
            _STDERR.append(None)
    return _STDERR[0]


def leave(code: int, note: str, stream: Any, traceback: bool = False) -> None:
    """Ends the worker now, without running anything more in it (os._exit)."""
    if stream is not None:
        try:
            stream.write(f"\nconvmatrix: {note}\n")
            stream.flush()
            if traceback:
                faulthandler.dump_traceback(file=stream, all_threads=True)
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


class Watchdog:
    """Ends a case that runs past the timeout: the callback writes its `timeout` line, then the
    process leaves (in a worker, xdist starts a fresh one for the rest; in-process, the caller
    does). One thread, started with the first case, watches every case: arming a case only
    sets its deadline (a thread started per case cost the suite a few milliseconds a case,
    waiting for it to be scheduled beside torch's busy threads). Should the case hold the GIL so
    that the thread cannot run, faulthandler ends the process after a grace period and whoever
    finds its marker writes the line instead."""

    def __init__(self, timeout: float, worker: str) -> None:
        self.timeout = timeout
        self.worker = worker
        self.grace = min(10.0, max(2.0, timeout))
        self.stream = stderr_copy()
        self.cond = threading.Condition()
        self.armed: tuple[float, pytest.Item] | None = None  # the deadline (monotonic) and its case
        self.thread: threading.Thread | None = None
        self.on_timeout: Callable[[pytest.Item], None] | None = None

    def arm(self, item: pytest.Item) -> None:
        with self.cond:
            self.armed = (time.monotonic() + self.timeout, item)
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, name="convmatrix-watchdog", daemon=True)
                self.thread.start()
            self.cond.notify()
        if self.stream is not None:
            faulthandler.dump_traceback_later(self.timeout + self.grace, exit=True, file=self.stream)

    def disarm(self) -> None:
        """Idempotent; once it returns, the case's deadline can no longer fire. Blocks for good
        when it already fired (the process is on its way out)."""
        with self.cond:
            self.armed = None
        faulthandler.cancel_dump_traceback_later()

    def _watch(self) -> None:
        with self.cond:
            while True:
                if self.armed is None:
                    self.cond.wait()
                    continue
                deadline, item = self.armed
                left = deadline - time.monotonic()
                if left > 0:
                    self.cond.wait(left)  # woken early by the next arm or disarm: look again
                    continue
                self._fire(item)  # holding the lock: disarm waits until the process is gone

    def _fire(self, item: pytest.Item) -> None:
        try:
            if self.on_timeout is not None:
                self.on_timeout(item)
        finally:
            leave(TIMEOUT_EXIT_CODE,
                  f"{item.nodeid} ran past its {self.timeout:g} s timeout; worker {self.worker} "
                  "leaves (where it was follows)", self.stream, traceback=True)


class Guard:
    """The watchdog around each case, for a run that records nothing (no --results-dir); the
    recorder arms and disarms it itself otherwise."""

    def __init__(self, watchdog: Watchdog) -> None:
        self.watchdog = watchdog

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        self.watchdog.arm(item)
        try:
            yield
        finally:
            self.watchdog.disarm()


def timeout_message(timeout: float) -> str:
    return f"the case ran past its {timeout:g} s timeout"


def is_sticky(message: str | None) -> bool:
    """Whether the text names a CUDA error after which the process's CUDA context is unusable."""
    return bool(message) and STICKY.search(message) is not None  # type: ignore[arg-type]


# --- the controller's side -----------------------------------------------------------------

def _exit_of(node: Any) -> str | None:
    """How the worker process ended, when execnet lets us see it (best effort)."""
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if popen is None:
        return None
    try:
        code = popen.wait(timeout=5)
    except Exception:
        return None
    if code is None:
        return None
    if code < 0:
        import signal
        try:
            return f"signal {-code}, {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class CrashHandler:
    """xdist controller plugin: the line of a case whose worker died before writing it."""

    def __init__(self, results_dir: str, timeout: float,
                 write: Callable[[dict[str, Any], str, str, str], None],
                 outran: Callable[[dict[str, Any], float], bool]) -> None:
        self.results_dir = results_dir
        self.timeout = timeout
        self.write = write  # (marker, status, message, worker)
        self.outran = outran  # records.outran: this module loads on its own, without records

    def marker_path(self, worker: str) -> str:
        return os.path.join(self.results_dir, f"running-{worker}.json")

    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        node = getattr(report, "node", None)
        worker = str(getattr(getattr(node, "gateway", None), "id", "?"))
        path = self.marker_path(worker)
        marker = read_json(path)
        if marker is None or not marker.get("case"):
            # The worker wrote this case's line (timeout, or a sticky CUDA error) and then left.
            report.longrepr = (f"worker {worker} left after {crashitem} (its line in results.jsonl "
                               "says why); a fresh worker runs the rest")
            return
        how = _exit_of(node)
        status, message = self.judge(marker, how, worker)
        self.write(marker, status, message, worker)
        os.remove(path)
        report.longrepr = f"{message} ({marker['case']})"

    def judge(self, marker: dict[str, Any], how: str | None, worker: str) -> tuple[str, str]:
        if self.outran(marker, self.timeout):
            return "timeout", (f"{timeout_message(self.timeout)} (the worker {worker} did not answer "
                               f"its watchdog and was ended{', ' + how if how else ''})")
        return "crashed", (f"the worker process {worker} died ({how or 'cause unknown'}) while "
                           "this case ran; a fresh worker ran the rest")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Markers that xdist never reported as a crash (a worker lost at shutdown)."""
        try:
            names = sorted(os.listdir(self.results_dir))
        except OSError:
            return
        for name in names:
            if name.startswith("running-gw") and name.endswith(".json"):
                path = os.path.join(self.results_dir, name)
                marker = read_json(path)
                worker = name[len("running-"):-len(".json")]
                if marker and marker.get("case"):
                    status, message = self.judge(marker, None, worker)
                    self.write(marker, status, message, worker)
                os.remove(path)


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
