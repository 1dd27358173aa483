"""The one owner of a cell's results directory: its layout, its files and their replacement.

    <run>/<cell-id>@<gpu-key>@<host>/   what one cell left on one GPU of one host (docs/contracts.md)
        cell.json                        the harness's record: request, GPU, exit status, evidence
        env.json                         the suite's record of the stack it observed
        results.jsonl                    one line per case (format: suites/records.py)
        log.txt                          everything the suite printed
        evidence/<case>.txt              where each failing case's failure first shows in log.txt
        blocking/                        the CUDA_LAUNCH_BLOCKING=1 re-run, the same layout
        first_cause.json                 triage's first cause in log.txt
    <run>/<cell-id>@<gpu-key>@<host>.partial/  a run in progress: swapped in whole when it ends
    <run>/plans/<host>-<digest>.json    what each run meant to run (results/plans.py)
    <run>/.locks/<result name>          held while a run writes that result (held_lock)

A rerun never appends to an earlier result: it writes a fresh `.partial` directory and swaps it
in when the harness has finished it, so a directory holds exactly one run, and a run killed
with the harness leaves the earlier result untouched beside its `.partial`.

Stdlib only: nox imports this in its own interpreter.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import io
import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

from convmatrix import jsonread
from convmatrix.errors import BadInput
from convmatrix.shipped import shipped
from convmatrix.tree import Refused, Tree, describe, parent_of, under

# The report files written beside a run's results (nox -s nightly, the fleet engines' merge):
# format, file name.
REPORT_FILES = (("json", "report.json"), ("markdown", "report.md"), ("html", "report.html"),
                ("junit", "junit.xml"))


def find_suite_dir() -> Path:
    """The suite this harness runs: the checkout's suites/ from a source tree (each clone runs its
    own suite), else the copy the wheel carries (convmatrix/suites/). `convmatrix --version` and
    every cell.json name the one chosen."""
    return shipped("suites", "conftest.py")


SUITE_DIR = find_suite_dir()
CELL_JSON = "cell.json"
ENV_JSON = "env.json"
RESULTS = "results.jsonl"
LOG = "log.txt"
FIRST_CAUSE = "first_cause.json"  # triage's first cause in log.txt, written when the cell finishes
EVIDENCE = "evidence"
BLOCKING = "blocking"
EXPLAIN = "explain"  # --explain: each failing case re-run with cuDNN's log on (run/explain.py)
ATTEMPTS = "attempts"  # --retries: attempts/<n>/, each earlier attempt of the cell, whole (run/orchestrate.py)
PARTIAL = ".partial"
# A host name goes into result directory names and the report: a DNS label's characters, and
# dots and underscores, no more (nothing that could climb out of the run directory or split a
# cell@gpu@host name).
HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", re.ASCII)
LOCKS = ".locks"  # <run>/.locks/<result name>: held while a run writes that result
CELL_SCHEMA = 1
PYTEST_EXIT_OK = (0, 1)  # all passed / some cases failed: both are a completed run


def suite_module(stem: str) -> ModuleType:
    """suites/<stem>.py loaded by path (suites/ is no package): records.py, the schema the suite
    writes by; options.py, the suite's own options, which a run's suite options are checked by;
    catalog.py and casefile.py, by which a run's case files are checked before any cell runs."""
    name = f"convmatrix_suite_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SUITE_DIR / f"{stem}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


records = suite_module("records")
suite_options = suite_module("options")


def explain_name(case: str) -> str:
    """The name of a failing case's --explain files, explain/<name>/ and explain/<name>.json: the
    first 16 hex digits of the SHA-256 of its id. Not the id itself: two ids may be one name after
    a suffix (`zz` and `zz.json`: the second's folder is the first's file) or a case fold (`Zz` and
    `zz` on macOS's file system), and an id may be 160 characters; hex digits are lower case,
    never end in `.json` and never collide with one another's files (docs/contracts.md)."""
    return hashlib.sha256(case.encode("utf-8")).hexdigest()[:16]


def result_name(cell_id: str, gpu_key: str, host: str) -> str:
    """<cell-id>@<gpu-key>@<host>: runs of one cell on two hosts never share a directory (results
    written before hosts were recorded are <cell-id>@<gpu-key>, and still read)."""
    return f"{cell_id}@{gpu_key}@{host}" if host else f"{cell_id}@{gpu_key}"


def staging_dir(final: Path) -> Path:
    return final.with_name(final.name + PARTIAL)


def final_dir(staging: Path) -> Path:
    return staging.with_name(staging.name.removesuffix(PARTIAL))


def is_staging(path: Path) -> bool:
    return path.name.endswith(PARTIAL)


class Busy(BadInput):
    """Another process is writing this result (another run into the same --out on this host)."""


@contextlib.contextmanager
def replacing(final: Path, *, wait: bool = True, holder: str = "") -> Iterator[Path]:
    """A fresh directory to run into, swapped in for `final` when the block ends normally.

    An exception (an interrupt, a harness bug) leaves the partial directory for the report to
    show as interrupted, and whatever `final` held before stays as it was. Every name is handled
    under the run directory's descriptor (tree.Tree): a link a cell left in place of its result
    is replaced, and an old result however deep is removed, never followed.
    """
    staging = staging_dir(final)
    with held_lock(final, wait=wait, holder=holder):
        recover(final)
        with Tree.open(final.parent, create=True) as run:
            run.remove(staging.name)  # an earlier, interrupted attempt: start afresh
            run.mkdir(staging.name, exist_ok=False)
        yield staging
        swap_in(staging, final)


@contextlib.contextmanager
def held_lock(final: Path, *, wait: bool = True, holder: str = "") -> Iterator[None]:
    """One writer at a time per result directory, in a lock file in <run>/.locks/ that names its
    holder (host and pid) and that the kernel releases when the process ends, however it ends.
    wait: take turns (two shards of one run on one host both run the control: the second waits,
    then replaces the first's result whole); else Busy, naming the holder (two runs into one
    --out would otherwise both write one cell)."""
    # The harness's own directory: a link or a file in its place is replaced, never followed.
    with Tree.open(final.parent, create=True) as run, run.sub(LOCKS, create=True) as locks:
        fd = locks.open_lock(final.name)
    with os.fdopen(fd, "r+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.seek(0)
            who = handle.read(200).strip() or "another process"
            raise Busy(f"{final.name}: being written by {who} (another convmatrix run into the same --out); "
                       "not run here") from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} on {holder or 'this host'}\n")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def recover(final: Path) -> None:
    """A harness killed between swap_in's two renames leaves the earlier result as `.old` and no
    `final`: it is put back, so neither the report nor --resume loses it."""
    old = final.name + ".old"
    with contextlib.suppress(FileNotFoundError, Refused), Tree.open(final.parent) as run:
        if run.lstat(final.name) is None and run.is_dir(old):
            run.rename(old, final.name)


def swap_in(staging: Path, final: Path) -> None:
    """Replace `final` by `staging`: the old result is moved aside first, then removed, so a
    crash between the two renames leaves one complete directory, never a mix of both."""
    old = final.name + ".old"
    with Tree.open(final.parent) as run:
        run.remove(old)
        if run.lstat(final.name) is not None:
            run.rename(final.name, old)
        run.rename(staging.name, final.name)
        with contextlib.suppress(Refused):  # a tree past the entry bound stays as .old; the result is in
            run.remove(old)


def write_json(path: Path, data: dict[str, Any], base: Path | None = None) -> None:
    write_whole(path, [json.dumps(data, indent=2) + "\n"], base)


def write_whole(path: Path, parts: Iterable[str], base: Path | None = None) -> None:
    """path's new text, written whole or not at all (tree.Tree.write: a fresh temporary file
    beside it, O_EXCL under a random name, renamed): readers see the old file or the new one,
    never half of one, and a write that fails leaves the old one and no temporary file. The
    folders from base (default: path's parent) down to it are opened without following a link;
    with a base, they are the harness's own layout, made real folders where missing or replaced."""
    with parent_of(path, base, create=base is not None) as (folder, name):
        folder.write_text(name, parts)


# What a results directory holds is written by the suite (and whatever a cell image runs), so it
# is read as untrusted: each file a regular one inside its cell directory, opened without
# following a symlink or blocking on a FIFO, and read with a bound.
MAX_RECORD = 4 << 20  # cell.json, env.json, first_cause.json: a few KB when sound
MAX_RESULTS = 256 << 20  # results.jsonl: 200 cases of <= 60 KB lines is 12 MB
# results.jsonl's lines: far above the catalogue (233 cases) with its re-runs and user case files;
# a file past it makes its cell INVALID, one line, and is not read (a 10^6-line file took 3.2 GB).
MAX_LINES = 20_000
NotPlain = Refused  # a path in a results directory that is not a regular file inside it (one line)


class TooLarge(NotPlain):
    """A regular file past its size bound: the cell's fault (INVALID), not bad input."""


def inside(path: Path, base: Path) -> None:
    """NotPlain unless path is under base, by names tree.check_name allows (base itself is trusted)."""
    under(base, path)


def open_plain(path: Path, base: Path | None = None, at: Tree | None = None) -> BinaryIO:
    """path for reading: a regular file (under base, when given: every folder on the way opened
    without following a link), never a symlink, a FIFO or a device. at: path's own folder, open
    already (the caller's: a cell's files read through one descriptor)."""
    if at is not None:
        return at.open_read(path.name)
    with parent_of(path, base) as (folder, name):
        return folder.open_read(name)


def read_plain(path: Path, limit: int, base: Path | None = None, at: Tree | None = None) -> bytes:
    """A regular file's bytes, at most limit of them (NotPlain past it: nothing of it is used);
    at as for open_plain."""
    if at is not None:
        return at.read(path.name, limit)
    with parent_of(path, base) as (folder, name):
        return folder.read(name, limit)


def read_lines(path: Path, base: Path | None = None, at: Tree | None = None) -> tuple[bytes | None, int]:
    """A results.jsonl's bytes and its number of lines (as str.count would give them, a last line
    without its line break counted), read 1 MiB at a time: past max_lines its bytes are dropped
    (None) and it is only counted, so a 10^6-line file is counted in 1 MiB, never held whole.
    TooLarge past MAX_RESULTS bytes."""
    limit, max_lines = MAX_RESULTS, MAX_LINES  # read when called: a test may set them lower
    chunks: list[bytes] | None = []
    newlines = size = 0
    last = b""
    with open_plain(path, base, at) as handle:
        while chunk := handle.read(1 << 20):
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"{path}: larger than {limit:,} bytes; not read")
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
            if chunks is not None:
                chunks.append(chunk)
                if newlines > max_lines:
                    chunks = None
    lines = newlines + (last != b"\n")
    return (None if chunks is None or lines > max_lines else b"".join(chunks)), lines


# log.txt is read through one descriptor, opened once (open_plain, relative to the cell
# directory's), by every pass of whatever reads it (run/evidence.py, triage/scan.first_cause), each
# pass no further than this: triage is tuned for a 1 GB 8-rank log (bench/triage_throughput.py,
# bench/run.py's triage_vs_grep), and a cell's pytest log is far smaller. Past it, the first
# MAX_LOG bytes are read and the reader says so (log_cut); the rest is not read.
MAX_LOG = 1 << 30


class Window(io.RawIOBase):
    """The first `limit` bytes of an open regular file, read by offset (os.pread) at a position of
    its own: the descriptor's offset is neither used nor moved, so any number of passes share one
    open file. Nothing at or past `limit` is ever read. Closing it leaves the descriptor open."""

    def __init__(self, handle: BinaryIO | int, limit: int) -> None:
        super().__init__()
        self._fd = handle if isinstance(handle, int) else handle.fileno()
        self.limit = limit
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self.limit - self._pos)
        if want <= 0:
            return 0
        if hasattr(os, "preadv"):  # straight into the buffer
            got = os.preadv(self._fd, [view[:want]], self._pos)
        else:
            data = os.pread(self._fd, want, self._pos)
            got = len(data)
            view[:got] = data
        self._pos += got
        return got

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        start = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos}.get(whence)
        if start is None:
            start = min(self.size(), self.limit)
        if start + offset < 0:
            raise ValueError(f"negative position {start + offset}")
        self._pos = start + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        """The whole file's size now (what lies past limit included)."""
        return os.fstat(self._fd).st_size


def window(handle: BinaryIO | int, limit: int) -> io.BufferedReader:
    """A buffered reader of the first limit bytes of handle's file (Window): one pass of a log."""
    return io.BufferedReader(Window(handle, limit), buffer_size=1 << 20)


def log_cut(path: Path | str, size: int, limit: int) -> str:
    """The line a reader of log.txt gives when the file is past its bound (MAX_LOG)."""
    return (f"{path}: {size:,} bytes; only its first {limit:,} bytes were read (the bound on a cell's log.txt), "
            "not the rest")


def write_plain(path: Path, data: bytes, base: Path) -> None:
    """path's new bytes, as a regular file under base: the folders on the way made real ones (a
    link or a file the suite left in their place is replaced, never followed), then a fresh
    temporary file renamed over whatever is there."""
    with parent_of(path, base, create=True) as (folder, name):
        folder.write(name, data)


def make_dirs(path: Path, base: Path) -> None:
    """path and the folders from base down to it, real directories (what a cell left in their
    place, a link or a file, is replaced): where a suite run is pointed (blocking/, explain/<name>/)."""
    with Tree.open(base, create=True) as root, root.at(under(base, path), create=True):
        pass


def claim_dir(path: Path, base: Path) -> str | None:
    """path (a folder of the harness's own under base: blocking/, explain/) made a real folder;
    what the cell had left there instead ("a symlink", "a regular file"), for a line, or None."""
    with Tree.open(base) as root, root.at(under(base, path.parent)) as folder:
        found = folder.lstat(path.name)
        left = None if found is None or stat.S_ISDIR(found.st_mode) else describe(found.st_mode)
        folder.sub(path.name, create=True).close()
    return left


def open_log(path: Path, base: Path) -> BinaryIO:
    """path (a log.txt under base) for appending, its folders made real ones on the way; never a
    link or a FIFO (NotPlain)."""
    with parent_of(path, base, create=True) as (folder, name):
        return folder.append(name)


def copy_plain(source: Path, target: Path, limit: int = MAX_RESULTS, only: Iterable[str] | None = None) -> None:
    """The regular files and directories under source into target (of source's top level, only
    the names in `only` when given), none bigger than limit: symlinks, FIFOs, devices and sockets
    are dropped (never followed), as are setuid/setgid bits. NotPlain (one line) past the walk's
    bounds (tree.MAX_DEPTH levels, tree.MAX_ENTRIES entries)."""
    with Tree.open(source) as src, Tree.open(target, create=True) as dst:
        src.copy_into(dst, only=only, limit=limit)


def read_json(path: Path, base: Path | None = None) -> dict[str, Any]:
    """A JSON object, or {} when the file is missing or unreadable, not a regular file or too big
    (for the harness's own bookkeeping; the report reads with rundir.load_object, which names what
    is wrong)."""
    try:
        data = jsonread.loads(read_plain(path, MAX_RECORD, base))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_object(path: Path, errors: list[str], limit: int | None = None,
                at: Tree | None = None) -> dict[str, Any] | None:
    """A JSON object from path (a regular file, at most limit bytes), None when there is no such
    file; what is wrong is added to errors as one line (and {} given). at as for open_plain."""
    try:
        data = jsonread.loads(read_plain(path, limit or MAX_RECORD, at=at))
    except FileNotFoundError:
        return None
    except NotPlain as exc:
        errors.append(str(exc))
        return {}
    except jsonread.TooBig as exc:
        errors.append(f"{path}: {exc}; not read")
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        errors.append(f"{path}: unreadable ({exc.strerror if isinstance(exc, OSError) else exc})")
        return {}
    except ValueError as exc:
        errors.append(f"{path}: not JSON ({exc})")
        return {}
    if not isinstance(data, dict):
        errors.append(f"{path}: not a JSON object")
        return {}
    return data


def append_result(results_dir: Path, record: dict[str, Any], base: Path | None = None) -> None:
    """A line added to results_dir's results.jsonl (never through a link the suite left there)."""
    with parent_of(results_dir / RESULTS, base) as (folder, name), folder.append(name) as fh:
        fh.write((json.dumps(record) + "\n").encode("utf-8"))


def is_complete(results_dir: Path) -> bool:
    """A finished run, which --resume keeps: the suite ended and exited normally, nothing failed
    to set up, and the harness closed it (cell.json has its end)."""
    meta = read_json(results_dir / CELL_JSON)
    env = read_json(results_dir / ENV_JSON)
    return (meta.get("exit_code") in PYTEST_EXIT_OK and bool(meta.get("ended")) and not meta.get("error")
            and bool(env.get("ended")))


def audit_only(results_dir: Path) -> bool:
    """A run of the library audit case alone (`convmatrix run --audit-only`: cell.json's
    `audit_only`): --resume never keeps it, since the cell's other cases never ran."""
    return read_json(results_dir / CELL_JSON).get("audit_only") is True


def set_aside(results_dir: Path, attempt: int) -> str:
    """Everything an attempt of a cell left in results_dir moved, whole, into attempts/<attempt>/
    (what the cell left in place of attempts/, a link or a file, is replaced by a real folder), so
    that the next attempt starts from an empty directory and this one is kept; its path under
    results_dir."""
    claim_dir(results_dir / ATTEMPTS, results_dir)
    with Tree.open(results_dir) as cell, cell.sub(ATTEMPTS) as attempts:
        attempts.remove(str(attempt))
        attempts.mkdir(str(attempt))
        with attempts.sub(str(attempt)) as kept:
            for name, _ in cell.entries():
                if name != ATTEMPTS:
                    cell.rename(name, name, into=kept)
    return f"{ATTEMPTS}/{attempt}"
