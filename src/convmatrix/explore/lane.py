"""How explore runs a batch of configurations: as ordinary cases of a case file, through
`convmatrix run` on the candidate cell and the matrix's control (their own lane, their own
interpreter, suite arguments after `--` as for `run`), judged by the one judged night
(results/night.py). A Lane is what the search needs; tests give it their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from convmatrix import results
from convmatrix.errors import BadInput, InfrastructureError
from convmatrix.explore.space import Config, entry
from convmatrix.results import night, rundir
from convmatrix.results.outcomes import Verdict
from convmatrix.results.verdicts import COSTS

# What a configuration that fails on the candidate and not on the control is, by its verdict: a
# regression (its failure family), or a cost the control did not pay (fallback, memory, slower).
FINDINGS = frozenset({Verdict.REGRESSION, *COSTS})
COST_NAMES = frozenset(str(v) for v in COSTS)


class Lane(Protocol):
    """Runs configurations on the candidate and the control: for each, what it found (a failure
    family, or a cost verdict's name) or None."""

    def judge(self, configs: Sequence[Config]) -> list[str | None]: ...


def finding(case: night.JudgedCase) -> str | None:
    """A judged case as explore counts it: its family when it regressed, its verdict's name when it
    passed at a cost; None when it is no finding (or could not be judged)."""
    if case.unjudged is not None or case.verdict not in FINDINGS:
        return None
    if case.verdict == Verdict.REGRESSION:
        return case.family or str(case.record.outcome if case.record else "missing")
    return str(case.verdict)


@dataclass
class SuiteLane:
    """Each batch one `convmatrix run` of the two cells into out/batches/<n>/ (its case file, its run
    directory, its output), then the judged night of that run."""

    matrix: Path
    cell: str
    control: str
    out: Path
    suite_args: tuple[str, ...] = ()
    allow_cpu: bool = False
    timeout_s: float = 3600.0
    batches: int = field(default=0)
    last_run: Path | None = None

    def judge(self, configs: Sequence[Config]) -> list[str | None]:
        self.batches += 1
        stem = f"explore{self.batches:04d}"
        where = self.out / "batches" / f"{self.batches:04d}"
        names = [f"c{i:04d}" for i in range(len(configs))]
        data = {"description": "configurations drawn by convmatrix explore",
                "case": [entry(c, n) for c, n in zip(configs, names, strict=True)]}
        case_file = where / f"{stem}.json"
        rundir.write_plain(case_file, (json.dumps(data, indent=1) + "\n").encode(), self.out)
        run_dir = where / "run"
        argv = [sys.executable, "-m", "convmatrix", "run", "-m", str(self.matrix), "--cell", self.control,
                "--cell", self.cell, "--out", str(run_dir), *(["--allow-cpu"] if self.allow_cpu else []),
                # Both cells at once on a runner without GPUs (on GPUs, one per GPU as always).
                "--jobs", "2", "--",
                # The batch's cases only (the catalogue beside them is not what is explored).
                "--cases", str(case_file), *self.suite_args, "-k", stem]
        with rundir.open_log(where / "output.txt", self.out) as log:
            try:
                done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=self.timeout_s,
                                      check=False, env=os.environ.copy())
            except subprocess.TimeoutExpired:
                raise InfrastructureError(f"explore: batch {self.batches} ran past {self.timeout_s:.0f} s "
                                          f"({where / 'output.txt'})") from None
        if done.returncode == 2:
            raise BadInput(f"explore: `convmatrix run` refused batch {self.batches}: "
                           f"{last_line(where / 'output.txt', self.out)}")
        self.last_run = run_dir
        loaded = results.load([str(run_dir)])
        judged = night.judge(loaded.results, self.control)
        mine = [c for c in judged.cells if c.cell == self.cell]
        for cell in [c for c in judged.cells if c.cell in (self.cell, self.control)]:
            if cell.did_not_run:
                # Nothing judged is nothing found: a cell that could not run ends the search (exit 4).
                raise InfrastructureError(f"explore: {cell.cell} did not run (batch {self.batches}): "
                                          f"{cell.result.not_run or 'no result'}")
        if not mine:
            raise InfrastructureError(f"explore: the cell {self.cell} left no result in batch {self.batches} "
                                      f"({where / 'output.txt'})")
        by_name: dict[str, str | None] = {}
        for cell in mine:
            for case in cell.cases:
                name = case.case.rsplit("-", 1)[-1]
                found = finding(case)
                if by_name.get(name) is None:
                    by_name[name] = found
        return [by_name.get(n) for n in names]


def last_line(path: Path, base: Path) -> str:
    """The last line of a batch's output (its last 4 kB read, no more): why `run` refused it."""
    try:
        with rundir.open_plain(path, base) as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            text = f.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return "(no output)"
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"
