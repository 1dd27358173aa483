"""Report models made to measure, for the report formats' tests: a matrix of stacks (matrix-style
cell ids and requested stacks) on several GPU generations, each with its cases, some failing."""

from __future__ import annotations

from typing import Any

from convmatrix.report.model import CaseRow, CellRow, GpuInfo, Report
from convmatrix.report.verdicts import Health
from convmatrix.results.outcomes import Delta, Outcome, Verdict

GPUS = (("h200-sm90", "NVIDIA H200", "9.0", "Hopper"), ("a100-sm80", "NVIDIA A100", "8.0", "Ampere"),
        ("l4-sm89", "NVIDIA L4", "8.9", "Ada"), ("v100-sm70", "Tesla V100", "7.0", "Volta"),
        ("t4-sm75", "Tesla T4", "7.5", "Turing"), ("b200-sm100", "NVIDIA B200", "10.0", "Blackwell"),
        ("h100-80gb-hbm3-sm90", "NVIDIA H100 80GB HBM3", "9.0", "Hopper"), ("a10g-sm86", "NVIDIA A10G", "8.6", "Ampere"),
        ("rtx4090-sm89", "NVIDIA GeForce RTX 4090", "8.9", "Ada"), ("p100-sm60", "Tesla P100", "6.0", "Pascal"))
TORCHES = ("2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0")
CUDAS = ("cu121", "cu124", "cu126", "cu128")
CUDNNS = ("bundled", "9.5.1.17", "9.10.2.21")
SIGNATURE = "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."


def stacks(count: int) -> list[dict[str, str]]:
    """count distinct matrix stacks (lane, torch, CUDA, cuDNN), the control's first."""
    found = [{"lane": lane, "torch": t, "cuda": c, "cudnn": d, "python": "3.11", "base": ""}
             for lane in ("baremetal", "container") for t in TORCHES for c in CUDAS for d in CUDNNS]
    return found[:count]


def cell_id(stack: dict[str, str]) -> str:
    return f"{stack['lane']}-torch{stack['torch']}-{stack['cuda']}-cudnn{stack['cudnn']}-py{stack['python']}"


def matrix(n_stacks: int, n_gpus: int, n_cases: int = 99, message: str = SIGNATURE,
           failing_every: int = 3, failures: int = 20) -> Report:
    """Every stack on every GPU: the first stack the control, every failing_every-th stack
    regressed in its first `failures` cases with message."""
    cells: list[CellRow] = []
    cases: list[CaseRow] = []
    chosen = stacks(n_stacks)
    control = cell_id(chosen[0])
    for index, stack in enumerate(chosen):
        for key, name, capability, generation in GPUS[:n_gpus]:
            bad = index % failing_every == 1
            rows = [case(cell_id(stack), key, f"conv2d-fp16-k3-p1-case{i:03d}", bad and i < failures, message,
                         control=index == 0) for i in range(n_cases)]
            cases += rows
            cells.append(cell(cell_id(stack), stack, GpuInfo(key=key, name=name, capability=capability,
                                                             generation=generation), rows, control=index == 0))
    health = {key: Health(healthy=True, reason=None) for key, *_ in GPUS[:n_gpus]}
    return Report(control=control, health=health, cells=tuple(cells), cases=tuple(cases))


def case(cell: str, gpu: str, name: str, failing: bool, message: str, *, control: bool) -> CaseRow:
    return CaseRow(cell=cell, gpu=gpu, case=name, knobs={"device": "cuda", "cudnn_benchmark": False},
                   outcome=Outcome.FAIL if failing else Outcome.PASS,
                   family="cudnn_not_supported" if failing else None, message=message if failing else None,
                   warnings=(), control_outcome=None if control else Outcome.PASS,
                   delta=None if control else Delta.REGRESSION if failing else Delta.SAME,
                   verdict=Verdict.CONTROL if control else Verdict.REGRESSION if failing else Verdict.OK)


def cell(cell_id: str, stack: dict[str, str], gpu: GpuInfo, rows: list[CaseRow], *, control: bool,
         **extra: Any) -> CellRow:
    failed = sum(1 for r in rows if r.outcome == Outcome.FAIL)
    counts = {"pass": len(rows) - failed, **({"cudnn_not_supported": failed} if failed else {})}
    verdict = Verdict.CONTROL if control else Verdict.REGRESSION if failed else Verdict.OK
    fields: dict[str, Any] = {
        "cell": cell_id, "gpu": gpu, "lane": stack["lane"], "path": f"run/{cell_id}@{gpu.key}", "stack": stack,
        "observed": {"torch": f"{stack['torch']}+{stack['cuda']}", "cuda": "12.4", "cudnn": 90100,
                     "driver": "550.54.15", "image_id": "sha256:0123abcd"},
        "mismatches": (), "problems": (), "counts": counts, "signature": bool(failed), "warning_signature": False,
        "first_cause": None, "regressions": failed, "fixed": 0, "slowdown": None, "fingerprint_changed": 0,
        "verdict": verdict,
    }
    fields.update(extra)
    return CellRow(**fields)
