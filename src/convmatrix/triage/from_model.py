"""A model's convolutions as case entries (`convmatrix cases --from-model`), recorded on the CPU
with no memory for the model and no weights, in an interpreter of their own.

The recording runs in a child process (suites/capture.py, run by this same Python with `-I`, in a
session of its own, handed this process's `sys.path`): the user's code runs there, so that nothing
it does reaches this process. It says what it does on a pipe of its own (JSON lines: torch imported
and its memory then, each phase, then the recording or one line of error); what the model prints on
stdout and stderr is read apart and never reaches the case file. This process enforces the bounds:
past MAX_SECONDS of wall time (from torch's import on: the module's import, the build and the run)
or past MAX_RSS_GROWTH of resident memory above the child's own after `import torch` (its process
group's, read every _POLL_S), the child's process group is killed (SIGKILL). Any end of the child
that is not a finished recording (an exit of the model's own, a signal, a kill) is one line of
BadInput (exit 2), nothing written. What it hands over is checked as the suite reads case entries
(suites/casefile.py) before it becomes the Recorded cases. $CONVMATRIX_FROM_MODEL_SECONDS and
$CONVMATRIX_FROM_MODEL_MEMORY_MB set the two bounds (bounds_from_env).

How the child records (suites/capture.py says it in full): the model is built by the user's
callable under ``torch.device("meta")`` (every parameter and buffer a meta tensor: shapes and
strides, no storage), cast on meta, and run on meta inputs of the given shapes inside a
``TorchDispatchMode`` that sees each aten call as the model made it. Each convolution
(``aten.convolution``, ``aten._convolution``, and with ``--backward`` ``aten.convolution_backward``)
is read for its shapes, strides, groups, padding, stride, dilation, transposition, output padding
and dtype, and becomes a case entry of suites/casefile.py's keys; identical convolutions (the 16
bottleneck 3x3s of a ResNet stage) are one case with a call count. A builder that reads a tensor's
value (`.item()`) is run for real on the CPU instead, under the same bounds, and the model moved to
meta; the file's header says so.

What is observed and what is stamped:
- dtype, memory format (from the input's strides, or the weight's: PyTorch's convolution picks
  channels_last when either is), groups, padding, stride, dilation, transposition: observed.
- ``--autocast``: stamped. Autocast does not apply to meta tensors without CUDA (the meta device has
  no autocast dispatch key of its own), so the model runs in float32 and each case is written
  ``dtype = "float32"``, ``autocast = X``, which is what an autocast region hands cuDNN's
  convolution: a float32 module whose convolution runs in X. The file's header says so.
- The backend's own overloads (``aten.cudnn_convolution``, ``aten.mkldnn_convolution``, ...) are
  chosen below ``aten.convolution`` on a real device; on meta the call stops at
  ``aten.convolution``'s meta kernel, so they never show: recording them would need the device.

This module imports no torch: only the child does.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convmatrix.errors import BadInput
from convmatrix.results import rundir
from convmatrix.triage import snippets

MAX_SECONDS = 120.0  # a ResNet-50's forward and backward records in well under a second
MAX_RSS_GROWTH = 2 << 30  # bytes: a meta model holds no data; a few hundred MB of Python objects at most
MAX_CASES = 1000  # distinct convolutions; suites/casefile.py takes 10,000 a file, a model has a few hundred
MAX_INPUTS = 16
MAX_KWARGS = 64 << 10  # characters of --kwargs
TORCH_IMPORT_SECONDS = 300.0  # the child's import of torch, before the bound on the recording starts
TORCH_RSS = 1 << 30  # bytes torch's import may take, before the child's own baseline is known
MAX_SAID = 64 << 20  # bytes the child may say on its pipe: a recording of 1,000 cases is under 1 MB
SECONDS_ENV = "CONVMATRIX_FROM_MODEL_SECONDS"
MEMORY_ENV = "CONVMATRIX_FROM_MODEL_MEMORY_MB"
_POLL_S = 0.02  # seconds between two reads of the child's memory
_GROUP_EVERY = 10  # polls between two reads of its whole process group's (a scan of /proc)
_TAIL = 4096  # bytes of the model's output kept, for its last line when the child dies
DTYPES = ("float32", "float16", "bfloat16", "float64")
# An input's own dtype (`--input SHAPE:DTYPE`): a timestep, token ids or a grid are integers.
INPUT_DTYPES = (*DTYPES, "int64", "int32", "bool")
_SHAPE = re.compile(r"[1-9][0-9]{0,9}(?:x[1-9][0-9]{0,9}){0,7}\Z")
_TARGET = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*\Z")
_FIELD_ORDER = ("name", "op", "input", "out_channels", "kernel", "stride", "padding", "dilation", "groups",
                "output_padding", "bias", "dtype", "autocast", "memory_format", "direction", "captured_from",
                "source")
# What the child is doing, as the line of a kill says it.
_PHASES = {"torch": "importing torch", "build": "building the model",
           "build_cpu": "building the model on the CPU (its builder reads tensor values)",
           "run": "running the model", "hand_over": "handing over the recording"}


@dataclass
class Recorded:
    """The distinct convolutions of one run, in the order first seen, and how often each ran."""

    cases: list[dict[str, Any]] = field(default_factory=list)
    counts: list[dict[str, int]] = field(default_factory=list)  # per case: forward, backward calls
    calls: int = 0  # convolution calls seen (forward and backward)
    aten_calls: int = 0
    notes: list[str] = field(default_factory=list)


def parse_shape(text: str) -> tuple[int, ...]:
    """`8x3x224x224` as a shape; BadInput naming --input otherwise."""
    if not _SHAPE.match(text):
        raise BadInput(f"--input {text!r}: expected extents joined by 'x', e.g. 8x3x224x224 (1 to 8 of them)")
    return tuple(int(part) for part in text.split("x"))


def parse_target(text: str) -> tuple[str, str]:
    """`MODULE:CALLABLE` (dotted on both sides) as its two halves."""
    if not _TARGET.match(text):
        raise BadInput(f"--from-model {text!r}: expected MODULE:CALLABLE, e.g. torchvision.models:resnet50")
    module, _, name = text.partition(":")
    return module, name


def parse_input(text: str) -> tuple[tuple[int, ...], str | None]:
    """`--input SHAPE[:DTYPE]`: a shape, and the dtype of that input where it is not the model's
    (`1:int64` for a timestep, `2x3:int64` for Qwen2-VL's grid_thw); BadInput naming --input."""
    shape, colon, dtype = text.partition(":")
    if colon and dtype not in INPUT_DTYPES:
        raise BadInput(f"--input {text!r}: the dtype after ':' is one of {', '.join(INPUT_DTYPES)}")
    return parse_shape(shape), (dtype if colon else None)


def parse_config(text: str | None) -> dict[str, Any] | None:
    """--config: a JSON object (text starting with '{') or a JSON file (a model's config.json), the
    dict a transformers or diffusers class is built from (from_config / config_class)."""
    if text is None:
        return None
    where = "--config"
    if not text.lstrip().startswith("{"):
        where = f"--config {text}"
        try:
            with open(text, "rb") as handle:
                raw = handle.read(MAX_KWARGS + 1)
        except OSError as exc:
            raise BadInput(f"{where}: cannot read it ({exc.strerror or exc})") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput(f"{where}: not UTF-8 text") from None
    if len(text) > MAX_KWARGS:
        raise BadInput(f"{where}: over {MAX_KWARGS} characters")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"{where}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BadInput(f"{where}: expected a JSON object, a model's config (e.g. '{{\"block_out_channels\": [128]}}')")
    return value


def parse_kwargs(text: str | None) -> dict[str, Any]:
    """--kwargs: a JSON object of the callable's keyword arguments (bounded: a few settings)."""
    if text is None:
        return {}
    if len(text) > MAX_KWARGS:
        raise BadInput(f"--kwargs: over {MAX_KWARGS} characters")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"--kwargs: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BadInput("--kwargs: expected a JSON object of keyword arguments, e.g. '{\"num_classes\": 10}'")
    return value


def bounds_from_env(environ: Mapping[str, str]) -> tuple[float, int]:
    """The recording's bounds: wall seconds ($CONVMATRIX_FROM_MODEL_SECONDS, default MAX_SECONDS)
    and bytes of memory growth ($CONVMATRIX_FROM_MODEL_MEMORY_MB, in MiB, default MAX_RSS_GROWTH)."""
    seconds, growth = MAX_SECONDS, MAX_RSS_GROWTH
    text = environ.get(SECONDS_ENV, "").strip()
    if text:
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds) or not 0 < seconds <= 86400:
            raise BadInput(f"${SECONDS_ENV}={text[:40]!r}: expected the seconds a recording may take, a number "
                           "over 0 and at most 86400")
    text = environ.get(MEMORY_ENV, "").strip()
    if text:
        if not text.isdigit() or not 0 < int(text) <= 1 << 24:
            raise BadInput(f"${MEMORY_ENV}={text[:40]!r}: expected the MiB of memory a recording may grow by, a "
                           "whole number from 1 to 16777216")
        growth = int(text) << 20
    return seconds, growth


def record(target: str, inputs: Sequence[tuple[int, ...]], *, dtype: str = "float32", autocast: str | None = None,
           channels_last: bool = False, backward: bool = False, kwargs: Mapping[str, Any] | None = None,
           max_seconds: float = MAX_SECONDS, max_rss_growth: int = MAX_RSS_GROWTH,
           max_cases: int = MAX_CASES, input_dtypes: Sequence[str | None] | None = None,
           config: Mapping[str, Any] | None = None) -> Recorded:
    """Every convolution `target`'s model runs on meta inputs of `inputs` shapes, as case entries,
    recorded in a child interpreter under the bounds."""
    if dtype not in DTYPES:
        raise BadInput(f"--dtype {dtype}: expected one of {', '.join(DTYPES)}")
    if autocast is not None and autocast not in ("float16", "bfloat16"):
        raise BadInput(f"--autocast {autocast}: expected float16 or bfloat16")
    if autocast is not None and dtype != "float32":
        raise BadInput("--autocast runs a float32 model (the autocast dtype is the convolutions'): drop --dtype")
    if not inputs or len(inputs) > MAX_INPUTS:
        raise BadInput(f"--input: give 1 to {MAX_INPUTS} input shapes")
    given = list(input_dtypes) if input_dtypes is not None else [None] * len(inputs)
    if len(given) != len(inputs) or any(d is not None and d not in INPUT_DTYPES for d in given):
        raise BadInput(f"--input: a dtype per input, each one of {', '.join(INPUT_DTYPES)}")
    module, _ = parse_target(target)
    request = {"target": target, "inputs": [list(shape) for shape in inputs], "dtype": dtype, "autocast": autocast,
               "channels_last": channels_last, "backward": backward, "kwargs": dict(kwargs or {}),
               "max_cases": max_cases, "path": [str(p) for p in sys.path], "parent": os.getpid(),
               "input_dtypes": given, "config": None if config is None else dict(config)}
    done = _Child(target, module, max_seconds, max_rss_growth).run(request)
    found = _checked(target, done, max_cases)
    if not found.cases:
        raise BadInput(f"--from-model {target}: the model ran no convolution on inputs {_shapes(inputs)}")
    return found


def header(target: str, inputs: Sequence[tuple[int, ...]], found: Recorded, *, autocast: str | None,
           backward: bool, seconds: float) -> str:
    """What the case file's header says: where the cases come from, what was stamped."""
    said = (f"Recorded by `convmatrix cases --from-model {target}` on inputs {_shapes(inputs)}"
            f"{' forward and backward' if backward else ' forward'}, on the meta device (no weights, no "
            f"memory): {found.calls} convolution call(s) as {len(found.cases)} distinct case(s) in {seconds:.2f} s; "
            "each case's source says how many calls it stands for.")
    if autocast is not None:
        said += (f" autocast = {autocast} is stamped by the tool, not observed: autocast does not apply to meta "
                 "tensors, so the model ran in float32 and each convolution is written as a float32 case run "
                 f"under {autocast} autocast.")
    for note in found.notes:
        said += f" {note}"
    return said


def to_case_file(cases: list[dict[str, Any]], said: str, suffix: str) -> str:
    """The recorded cases as a case file in its suffix's format (snippets.case_file, --from-log's writer too)."""
    return snippets.case_file(cases, said, suffix)


# -- the child ------------------------------------------------------------------------------------

class _Child:
    """One run of suites/capture.py: started, fed its request, watched and, past a bound, killed
    with its whole process group; what it handed over, or one line of BadInput."""

    def __init__(self, target: str, module: str, max_seconds: float, max_rss_growth: int) -> None:
        self.target, self.module = target, module
        self.max_seconds, self.growth = max_seconds, max_rss_growth
        self.phase = "torch"
        self.baseline: int | None = None  # the child's RSS after `import torch`
        self.said = bytearray()  # the pipe's bytes not yet a whole line
        self.heard = 0  # bytes the child said in all
        self.tail = b""  # the end of what the model printed
        self.final: dict[str, Any] | None = None  # {"done": ...} or {"error": ...}

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        if not sys.executable:
            raise BadInput(f"--from-model {self.target}: this Python does not know its own interpreter "
                           "(sys.executable is empty), which the recording runs in")
        script = rundir.SUITE_DIR / "capture.py"
        flags = ["-B"] if sys.flags.dont_write_bytecode else []
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen([sys.executable, "-I", *flags, str(script), str(write_end)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    pass_fds=(write_end,), start_new_session=True)
        except OSError as exc:
            os.close(read_end)
            raise BadInput(f"--from-model {self.target}: cannot start {sys.executable} to record in "
                           f"({exc.strerror or exc})") from None
        finally:
            os.close(write_end)
        try:
            return self._watch(proc, read_end, request)
        finally:
            self._end(proc)
            os.close(read_end)

    def _watch(self, proc: subprocess.Popen[bytes], channel: int, request: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        with contextlib.suppress(OSError):  # a child gone already is told below, by how it ended
            proc.stdin.write(json.dumps(request).encode("utf-8"))
        with contextlib.suppress(OSError):
            proc.stdin.close()
        output = proc.stdout.fileno()
        os.set_blocking(output, False)
        os.set_blocking(channel, False)
        started = time.monotonic()
        recording_since: float | None = None
        polls = 0
        with selectors.DefaultSelector() as selector:
            selector.register(channel, selectors.EVENT_READ)
            selector.register(output, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if recording_since is None:
                    left = started + TORCH_IMPORT_SECONDS - now
                    if left <= 0:
                        self._kill(proc)
                        raise BadInput(f"--from-model {self.target}: importing torch took over "
                                       f"{TORCH_IMPORT_SECONDS:g} s")
                else:
                    left = recording_since + self.max_seconds - now
                    if left <= 0:
                        self._kill(proc)
                        raise BadInput(f"--from-model {self.target}: recording took over {self.max_seconds:g} s "
                                       f"(killed while {self._doing()})")
                for key, _ in selector.select(min(_POLL_S, left)):
                    fd = key.fd
                    data = _read(fd)
                    if data is None:
                        continue
                    if not data:
                        selector.unregister(fd)
                    elif fd == channel:
                        self._hear(proc, data)
                    else:
                        self.tail = (self.tail + data)[-_TAIL:]
                if self.baseline is not None and recording_since is None:
                    recording_since = time.monotonic()
                polls += 1
                self._check_memory(proc, polls % _GROUP_EVERY == 0)
                if _exited(proc.pid):
                    break
            # The child has ended: what it said last, if it said anything (a subprocess of the
            # model's may hold the pipe open: what is there now is all).
            while data := _read(channel):
                self._hear(proc, data)
        self._kill(proc)  # what the model left running in the child's process group (the child is not reaped yet)
        code = proc.wait()
        final = self.final or {}
        if "error" in final:
            raise BadInput(" ".join(str(final["error"]).split("\n"))[:4000])
        if "done" in final and code == 0:
            done: dict[str, Any] = final["done"]
            return done
        raise BadInput(self._unfinished(code))

    def _hear(self, proc: subprocess.Popen[bytes], data: bytes) -> None:
        self.heard += len(data)
        if self.heard > MAX_SAID:
            self._kill(proc)
            raise BadInput(f"--from-model {self.target}: the recorder said over {MAX_SAID >> 20} MiB: not a "
                           "recording")
        self.said += data
        while (end := self.said.find(b"\n")) >= 0:
            line = bytes(self.said[:end])
            del self.said[:end + 1]
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):
                message = None
            if not isinstance(message, dict) or len(message) != 1:
                self._kill(proc)
                raise BadInput(f"--from-model {self.target}: the recorder said something that is not a recording "
                               f"(while {self._doing()})")
            if "torch" in message:
                torch_said = message["torch"]
                rss = torch_said.get("rss") if isinstance(torch_said, dict) else None
                self.baseline = rss if isinstance(rss, int) and rss >= 0 else 0
                self.phase = "import"
            elif "phase" in message:
                self.phase = str(message["phase"])
            elif "done" in message or "error" in message:
                self.final = message

    def _check_memory(self, proc: subprocess.Popen[bytes], whole_group: bool) -> None:
        used = max(_rss(proc.pid), _group_rss(proc.pid) if whole_group else 0)
        limit = (TORCH_RSS if self.baseline is None else self.baseline) + self.growth
        if used <= limit:
            return
        self._kill(proc)
        grown = self.growth >> 20
        if self.phase == "build_cpu":
            raise BadInput(f"--from-model {self.target}: the recording grew past {grown} MiB of memory (killed while "
                           f"{self._doing()}): the model is built for real there; allow it more with ${MEMORY_ENV}, "
                           "or make its builder run on the meta device")
        raise BadInput(f"--from-model {self.target}: the recording grew past {grown} MiB of memory (killed while "
                       f"{self._doing()}): does the model build tensors off the meta device?")

    def _doing(self) -> str:
        return f"importing {self.module}" if self.phase == "import" else _PHASES.get(self.phase, "recording")

    def _unfinished(self, code: int) -> str:
        if code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"ended with exit status {code}"
        last = [line for line in self.tail.decode("utf-8", "replace").splitlines() if line.strip()]
        printed = f"; its last line of output: {last[-1].strip()[:300]}" if last else ""
        return (f"--from-model {self.target}: the recording's interpreter {how} while {self._doing()}, before the "
                f"recording was finished{printed}")

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL to the child's process group (its own subprocesses too), while the child is not
        yet reaped (so its process group id cannot be anyone else's)."""
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            proc.kill()

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        """Whatever happened: the child and its process group gone, the child reaped, its pipes closed."""
        if proc.returncode is None:
            self._kill(proc)
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _read(fd: int) -> bytes | None:
    """What a pipe holds now: b"" at its end, None when it is open with nothing in it."""
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _exited(pid: int) -> bool:
    """Whether the child has ended, without reaping it (its pid, its process group's id, stay its)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _checked(target: str, done: Any, max_cases: int) -> Recorded:
    """What the child handed over, as Recorded: each case checked as suites/casefile.py reads a
    [[case]] table (the file as a whole is checked again where it is written)."""
    casefile = rundir.suite_module("casefile")
    catalog = rundir.suite_module("catalog")

    def bad(why: str) -> BadInput:
        return BadInput(f"--from-model {target}: the recording is not a set of case entries: {why}")

    if not isinstance(done, dict):
        raise bad("not a table")
    cases, counts, calls, aten_calls, notes = (done.get(k) for k in ("cases", "counts", "calls", "aten_calls",
                                                                     "notes"))
    if not isinstance(cases, list) or len(cases) > max_cases:
        raise bad(f"expected a list of at most {max_cases} cases")
    if not isinstance(counts, list) or len(counts) != len(cases) or not all(
            isinstance(c, dict) and set(c) == {"forward", "backward"} and all(_count(v) for v in c.values())
            for c in counts):
        raise bad("expected a forward and a backward count per case")
    if not _count(calls) or not _count(aten_calls):
        raise bad("expected whole numbers of calls")
    if not isinstance(notes, list) or len(notes) > 8 or not all(isinstance(n, str) and len(n) <= 1000 for n in notes):
        raise bad("expected a few notes")
    for number, case in enumerate(cases, 1):
        if not isinstance(case, dict) or list(case) != [k for k in _FIELD_ORDER if k in case]:
            raise bad(f"case {number}: expected the keys {', '.join(_FIELD_ORDER)}, in this order")
        try:
            catalog.Case(**casefile.case_fields(case, "recorded"))
        except (casefile.Bad, ValueError, TypeError) as exc:
            raise bad(f"case {number}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    return Recorded(cases=cases, counts=counts, calls=done["calls"], aten_calls=done["aten_calls"],
                    notes=[" ".join(n.split()) for n in notes])


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# -- helpers --------------------------------------------------------------------------------------

def _rss(pid: int | None = None) -> int:
    """Resident bytes of a process, this one by default (Linux's /proc; 0 elsewhere, where the
    bound does not apply)."""
    try:
        with open(f"/proc/{'self' if pid is None else pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _group_rss(group: int) -> int:
    """Resident bytes of every process of a process group (a scan of /proc; 0 elsewhere)."""
    total = 0
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0
    page = os.sysconf("SC_PAGE_SIZE")
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
            fields = stat[stat.rindex(b")") + 2:].split()
            if int(fields[2]) == group:  # pgrp; rss is field 24 of stat, the 22nd after the name
                total += int(fields[21]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total


def _shapes(inputs: Sequence[tuple[int, ...]]) -> str:
    return ", ".join("x".join(str(v) for v in shape) for shape in inputs)
