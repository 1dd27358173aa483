"""Issue 46, "Logs are opened by path after a check": evidence.write and scan.first_cause read a
cell's log.txt through one descriptor, opened once without following a link relative to the cell
directory's (tree.Tree), and read no more than rundir.MAX_LOG bytes of it per pass. A process the
cell left behind that swaps log.txt for a symlink got a file outside the run copied into
evidence/ (149 of 3,000 tries)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import given

from convmatrix.results import rundir
from convmatrix.results.read import FirstCause
from convmatrix.run import evidence
from convmatrix.triage import scan
from strategies import (
    OUTSIDE_MARK,
    LogCase,
    bytes_read,
    log_cases,
    log_object,
    make_outside,
    outside_log,
    plant,
    snapshot,
    swapping,
)
from testkit import record, write_result

SIG = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."
LOG = f"suites/test_conv.py::test_conv[a] FAILED\nE   {SIG}\n"
# What a file outside the cell holds: the same case failing, with another first cause on line 2.
OUTSIDE = (f"suites/test_conv.py::test_conv[a] FAILED\n"
           f"E   torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\nE   {SIG}\n")
RACE_S = 3.0  # how long each race runs (a bounded loop)
BOUND = 1 << 20  # rundir.MAX_LOG in these tests
# Reads of the log one evidence.write (6 passes at most: sections, its message, the windows, each
# needle, the tail) and one first_cause (3, tests/unit/triage/test_scan_fd.py) make, each within the bound.
PASSES = 9
SLACK = 8 << 20  # results.jsonl, the evidence read back, imports: everything else this process reads

T = TypeVar("T")


def within(seconds: float, call: Callable[[], T]) -> T:
    """call's result, failing the test (not hanging it: a FIFO opened by path blocks) past seconds."""
    box: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            box.append(call())
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s: it blocked"
    if errors:
        raise errors[0]
    return box[0]


def failing_cell(root: Path) -> tuple[Path, Path]:
    """A cell whose case a failed, its log.txt a hard link to real (outside the cell, the swap's
    way back), and real."""
    cell = write_result(root / "run", "c", [record("a", "failed", SIG)])
    real = root / "real-log.txt"
    real.write_text(LOG)
    os.link(real, cell / rundir.LOG)
    return cell, real


def evidence_text(cell: Path, saved: dict[str, str]) -> str:
    return "".join((cell / rel).read_text(errors="replace") for rel in saved.values())


def test_a_log_swapped_for_a_symlink_never_brings_an_outside_file_into_evidence(tmp_path: Path) -> None:
    cell, real = failing_cell(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(outside_log(tmp_path, OUTSIDE))
    tries = found = 0
    with swapping(cell / rundir.LOG, real, link, "outside-link"):
        deadline = time.monotonic() + RACE_S
        while time.monotonic() < deadline and tries < 2000:
            saved = within(30, lambda: evidence.write(cell))
            tries += 1
            found += bool(saved)
            assert OUTSIDE_MARK not in evidence_text(cell, saved), f"an outside file in evidence/ at try {tries}"
    assert tries >= 20
    assert evidence.write(cell) == {"a": "evidence/a.txt"} and SIG in evidence_text(cell, {"a": "evidence/a.txt"})


def test_a_log_swapped_for_a_symlink_never_gives_an_outside_file_s_first_cause(tmp_path: Path) -> None:
    cell, real = failing_cell(tmp_path)
    own = scan.first_cause(cell / rundir.LOG)
    assert own is not None and own.family == "cudnn_not_supported"
    link = tmp_path / "link"
    link.symlink_to(outside_log(tmp_path, OUTSIDE))
    tries = 0
    with swapping(cell / rundir.LOG, real, link, "outside-link"):
        deadline = time.monotonic() + RACE_S
        while time.monotonic() < deadline and tries < 2000:
            cause = within(30, lambda: scan.first_cause(cell / rundir.LOG))
            tries += 1
            assert cause is None or cause == own, f"{cause} at try {tries}: read from the outside file"
    assert tries >= 20


def check_reads(cell: Path, real: Path, saved: dict[str, str], cause: FirstCause | None, kind: str) -> None:
    """Nothing from outside the cell; what was read of the cell's own log is its own."""
    assert OUTSIDE_MARK not in evidence_text(cell, saved)
    assert set(saved) <= {"a"}
    if cause is not None:
        assert (cause.family, cause.line) == ("cudnn_not_supported", 2)
    if kind == "normal":
        assert saved == {"a": "evidence/a.txt"} and cause is not None


@given(case=log_cases())
def test_a_log_whatever_it_is_or_becomes_is_read_inside_the_cell_and_bounded(case: LogCase) -> None:
    rounds = 2 if case.swap == "during" else 1
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr(rundir, "MAX_LOG", BOUND, raising=False)
        root = Path(tmp)
        outside_dir = make_outside(root / "outside")
        outside = outside_log(outside_dir, OUTSIDE)
        cell, real = failing_cell(root)
        obj = root / "obj"
        if case.swap == "before":
            (cell / rundir.LOG).unlink()
            log_object(cell / rundir.LOG, case.kind, real, outside)
        elif case.kind != "dir":
            log_object(obj, case.kind, real, outside)
        plant(cell, list(case.tree), outside_dir)
        before = snapshot(outside_dir)
        start = bytes_read()
        swap = swapping(cell / rundir.LOG, real, obj, case.kind) if case.swap == "during" else contextlib.nullcontext()
        with swap:
            for _ in range(rounds):
                saved = within(60, lambda: evidence.write(cell))
                cause = within(60, lambda: scan.first_cause(cell / rundir.LOG))
                check_reads(cell, real, saved, cause, case.kind if case.swap == "before" else "swapped")
        read = bytes_read() - start
        assert read <= rounds * PASSES * BOUND + SLACK, f"{read:,} bytes read for {case.kind} {case.swap}"
        assert snapshot(outside_dir) == before
