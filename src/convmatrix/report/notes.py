"""The report's notes: what a reader should know beside the grid and the case table (inputs
dropped, unhealthy controls, mismatches, warnings the run survived, first causes, evidence files,
blocking re-runs, numeric drift), as plain lines that each format escapes."""

from __future__ import annotations

import os
from collections import Counter

from convmatrix.matrix import knobs
from convmatrix.report.model import Report
from convmatrix.results.families import SIGNATURE
from convmatrix.results.outcomes import Outcome, Verdict

NO_GPU = ("NO GPU took part: every cell that ran, ran on the CPU, so cuDNN was never exercised: these verdicts "
          "say nothing of cuDNN")

AUDIT_ONLY = ("AUDIT ONLY (convmatrix run --audit-only): each cell ran its CUDA library audit alone, so each "
              "verdict is its audit's: its conv cases did not run, and are neither passed nor missing")


def alerts(report: Report, said: list[str] | None = None) -> list[str]:
    """What every format says first, before the grid: a control that is unhealthy, and a control
    that hits the signature itself (it is not known-good for those cases: a candidate failing
    them the same way is `same`, not a pass). The same lines in text, markdown, html and json.
    First of all, a night of the library audit alone (results/night.audit_only): its `ok` is the
    audit's; then a night in which no GPU took part (the judged night's fact, results/night.no_gpu):
    its `ok` says nothing of cuDNN."""
    lines = [AUDIT_ONLY] if report.judged is not None and report.judged.audit_only else []
    lines += [NO_GPU] if report.judged is not None and report.judged.no_gpu else []
    lines += settings(report) if said is None else said  # said: settings(report), when the caller has it
    lines += [f"CONTROL UNHEALTHY on {key}: {health.reason}: no verdicts on this GPU"
              for key, health in report.health.items() if not health.healthy]
    hit: dict[str, list[str]] = {}
    for case in report.cases:
        if case.cell == report.control and case.family == SIGNATURE and case.outcome.failing:
            hit.setdefault(case.gpu, []).append(case.case)
    unsupported = [c for c in report.cells if c.verdict == Verdict.UNSUPPORTED]
    if unsupported:
        shown = "; ".join(f"{c.where} ({c.unsupported})" for c in unsupported[:5])
        more = f" and {len(unsupported) - 5} more" if len(unsupported) > 5 else ""
        lines.append(f"UNSUPPORTED on this runner: {len(unsupported)} cell(s) its driver cannot run, which "
                     f"fails nothing: {shown}{more}")
    lines += infrastructure(report)
    for key, cases in hit.items():
        shown = ", ".join(cases[:5]) + (f" and {len(cases) - 5} more" if len(cases) > 5 else "")
        lines.append(f"CONTROL HITS THE SIGNATURE on {key} in {len(cases)} case(s): {shown}: it is not "
                     "known-good for these")
    return lines


def infrastructure(report: Report) -> list[str]:
    """The infrastructure counted apart from the findings (fleet owners read it; the cuDNN findings
    are not drowned in it): how many cells did not run, by cause."""
    causes = Counter(c.infra_cause.cause for c in report.cells if c.did_not_run and c.infra_cause)
    retried = [c for c in report.cells if c.attempts]
    lines = []
    if causes:
        by = ", ".join(f"{cause} ×{n}" for cause, n in causes.most_common())
        lines.append(f"INFRASTRUCTURE: {sum(causes.values())} cell(s) did not run ({by}): not findings about "
                     "their stacks; each cell's line names its cause and log")
    if retried:
        again = Counter(a.cause.cause for c in retried for a in c.attempts)
        by = ", ".join(f"{cause} ×{n}" for cause, n in again.most_common())
        lines.append(f"INFRASTRUCTURE: {len(retried)} cell(s) ran again (--retries) after {by}; each shows its "
                     "first attempt beside its last")
    # Each retried cell: its first attempt beside its last (the one judged), one line.
    lines += [f"RETRIED {cell.where}: {cell.attempts[0].words(len(cell.attempts) + 1)}; "
              f"attempt {len(cell.attempts) + 1} of {len(cell.attempts) + 1} (last, judged): {cell.verdict}"
              for cell in retried]
    return lines


# What the suite records of its settings on every results line -> (the knob of a matrix's knobs
# axis that sets it, its value when nothing sets it), and how a forced value reads.
_SETTINGS: dict[str, tuple[str | None, object]] = {
    "cudnn_enabled": (None, True),
    "cudnn_benchmark": ("benchmark", False),
    "cudnn_deterministic": ("deterministic", False),
    "channels_last": ("channels_last", False),
    "pad_channels": ("pad", 0),
}


def _setting_words(name: str, value: object) -> str:
    if name == "cudnn_enabled":
        return "cuDNN DISABLED (torch.backends.cudnn.enabled = False): no convolution ran through cuDNN"
    if name == "pad_channels":
        return f"channels padded to a multiple of {value}"
    return f"{name.replace('cudnn_', 'cudnn.')} forced {'on' if value else 'off'}"


def settings(report: Report) -> list[str]:
    """Settings that change what was tested and that no cell's knob set asked for (a suite option
    given to the whole run, `-- --cudnn-enabled off`): said first in every format, with how many of
    the cells that ran had them. Read from what each results line recorded, never assumed."""
    ran = {c.where: c for c in report.cells if c.not_run is None}
    wanted = {where: dict(knobs.parse(str(cell.stack.get("knobs") or "")).items) for where, cell in ran.items()}
    forced: dict[tuple[str, str], tuple[object, set[str]]] = {}  # (setting, repr) -> (its value, cells)
    for case in report.cases:
        if not case.knobs or case.where not in wanted:  # knobs first: an attribute, where a property
            continue
        for name, (knob, default) in _SETTINGS.items():
            if name not in case.knobs:
                continue
            value = case.knobs[name]
            asked = wanted[case.where].get(knob) if knob else None
            expected = default if asked is None else (int(asked) if knob == "pad" else asked == "on")
            if value != expected:
                forced.setdefault((name, repr(value)), (value, set()))[1].add(case.where)
    lines = []
    for (name, _), (value, cells) in sorted(forced.items(), key=lambda item: item[0]):
        shown = ", ".join(sorted(cells)[:3]) + (f" and {len(cells) - 3} more" if len(cells) > 3 else "")
        lines.append(f"SETTINGS: {_setting_words(name, value)}, in {len(cells)} of {len(ran)} cell(s) that ran, "
                     f"which no knob set asked for: {shown}")
    return lines


def notes(report: Report) -> list[str]:
    lines = list(report.notes)  # what the loader decided, say, one of two results for a cell@gpu dropped
    for cell in report.cells:
        lines += [f"{cell.where}: stack mismatch: {m}" for m in cell.mismatches]
        if cell.libraries_line:  # the library audit: what loaded from where, beside what was installed
            lines.append(f"{cell.where}: libraries: {cell.libraries_line}")
        if cell.verdict != Verdict.CONTROL and not cell.did_not_run:  # that one's line says why, with its cause
            lines += [f"{cell.where}: {p}" for p in cell.problems]
    warned: dict[str, list[str]] = {}
    for case in report.cases:
        if case.outcome == Outcome.PASS and case.warnings:
            warned.setdefault(case.where, []).append(case.case)
    for where, cases in sorted(warned.items()):
        lines.append(
            f"{where}: {len(cases)} passing case(s) warned of a cuDNN failure the run survived "
            f"(warning only, not a failure): {', '.join(cases[:5])}"
            + (f" and {len(cases) - 5} more" if len(cases) > 5 else "")
        )
    return lines + cause_notes(report) + case_notes(report) + drift_notes(report)


def case_notes(report: Report) -> list[str]:
    """Where to look for each failing case: its evidence file and its blocking re-run."""
    lines = []
    evidence: dict[str, list[str]] = {}
    for case in report.cases:
        if case.evidence:
            evidence.setdefault(case.where, []).append(case.evidence)
    for where, files in evidence.items():
        folder = os.path.dirname(files[0])
        lines.append(f"{where}: evidence for {len(files)} failing case(s), each its first occurrence in the log "
                     f"with 100 lines before: {folder}/<case>.txt")
    for case in report.cases:
        if case.blocking:
            first = (case.blocking.message or "").strip().splitlines()[:1]
            lines.append(f"{case.where} {case.case}: under CUDA_LAUNCH_BLOCKING=1: {case.blocking.outcome} "
                         f"{case.blocking.family or ''} {first[0] if first else ''}".rstrip())
    return lines


def cause_notes(report: Report) -> list[str]:
    """triage's first cause in each failing cell's log.txt."""
    lines = []
    for cell in report.cells:
        cause = cell.first_cause
        if cause:
            rank = f" (rank {cause.rank})" if cause.rank is not None else ""
            lines.append(f"{cell.where}: first failure in the log: {cause.family} at {cause.log}:{cause.line}{rank}")
    return lines


def drift_notes(report: Report) -> list[str]:
    """Outputs that changed beyond rounding. (A slower case is its own verdict, `slower`, judged
    per case beyond the noise; the cell keeps its `slowdown` summary, and no cell-level mark.)"""
    lines = []
    for cell in report.cells:
        if cell.fingerprint_changed:
            lines.append(f"{cell.where}: {cell.fingerprint_changed} case(s) computed a different output "
                         f"fingerprint than the control (numeric drift within tolerance)")
    return lines
