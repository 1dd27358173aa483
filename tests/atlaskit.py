"""Bundles for the atlas's tests, made as model objects (atlas/model.py) and, where a test needs
the file, written with atlas/bundle.py: two fleets that disagree on a stack, a MIG slice, a failing
case with repro fields prove/repro.py accepts, and one with fields it refuses."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from convmatrix.atlas import bundle as bundle_file
from convmatrix.atlas.model import Bundle, Case, Cell, Gpu, Repro, Run, Stack

HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
H200 = Gpu(model="NVIDIA H200", capability="9.0", generation="sm90")
H200_MIG = Gpu(model="NVIDIA H200", capability="9.0", generation="sm90", mig="1g.18gb")
V100 = Gpu(model="Tesla V100-SXM2-16GB", capability="7.0", generation="sm70")
A100 = Gpu(model="NVIDIA A100-SXM4-80GB", capability="8.0", generation="sm80")
OLD = Stack(torch="2.5.1+cu124", cuda="12.4", cudnn="9.1.0", driver="550.54.15", image_digest=None, lane="baremetal")
NEW = Stack(torch="2.9.1+cu128", cuda="12.8", cudnn="9.11.0", driver="570.86.10", image_digest=None, lane="baremetal")
SIGNATURE = "cudnn_not_supported"


def params(**changes: Any) -> dict[str, Any]:
    """A results line's params (the catalog's Case fields): an fp16 conv2d prove/repro.py accepts."""
    found: dict[str, Any] = {
        "op": "conv2d", "n": 2, "c_in": 8, "c_out": 8, "size": [16, 16], "kernel": [3, 3], "stride": 1,
        "padding": 1, "dilation": 1, "groups": 1, "dtype": "float16", "autocast": None,
        "memory_format": "contiguous", "layout": None, "backward": False, "direction": None,
        "output_padding": 0, "tf32": None, "benchmark": None, "deterministic": None, "via": None, "bias": True,
    }
    found.update(changes)
    return found


def repro(**changes: Any) -> Repro:
    return Repro(params=params(**changes), shapes=None, knobs={}, device="cuda")


def failed(case: str, *, family: str | None = SIGNATURE, subcode: int | None = 3002, reason: str | None = None,
           known: tuple[str, ...] = (), verdict: str = "regression", with_repro: Repro | None = None,
           sources: tuple[str, ...] = ()) -> Case:
    return Case(case=case, verdict=verdict, outcome="fail", family=family, subcode=subcode,
                reason=reason or f"{family}: CUDNN_STATUS_NOT_SUPPORTED (sub-code {subcode})", known=known,
                sources=sources, repro=with_repro if with_repro is not None else repro())


def passed(case: str, verdict: str = "ok") -> Case:
    return Case(case=case, verdict=verdict, outcome="pass")


def cell(stack: Stack, gpu: Gpu, *cases: Case, verdict: str | None = None, control: bool = False) -> Cell:
    if verdict is None:
        verdict = "regression" if any(c.outcome == "fail" for c in cases) else "ok"
    return Cell(stack=stack, gpu=gpu, verdict=verdict, control=control, cases=cases)


def run(ident: str, date: str, *cells: Cell) -> Run:
    return Run(run=(ident * 16)[:16], date=date, cells=cells)


def fleet_a() -> Bundle:
    """Fleet a: the new stack fails conv2d-fp16 on the H200 on two nights; the old one passes; a MIG
    slice passes too."""
    return Bundle(fleet="fleet-a", created="2026-12-04", tool="0.1.0", runs=(
        run("a1", "2026-12-01", cell(NEW, H200, failed("conv2d-fp16"), passed("conv2d-fp32")),
            cell(OLD, H200, passed("conv2d-fp16"), passed("conv2d-fp32"), verdict="control", control=True),
            cell(NEW, H200_MIG, passed("conv2d-fp16"), passed("conv2d-fp32"))),
        run("a2", "2026-12-03", cell(NEW, H200, failed("conv2d-fp16"), passed("conv2d-fp32"))),
    ), dropped=("host names", "user names", "paths"))


def fleet_b() -> Bundle:
    """Fleet b: the same new stack passes on its H200 (a disagreement with fleet a), and fails on a
    V100 with an arch mismatch (a repro with params prove/repro.py refuses) and a crash."""
    return Bundle(fleet="fleet-b", created="2026-12-05", tool="0.1.0", runs=(
        run("b1", "2026-12-05", cell(NEW, H200, passed("conv2d-fp16"), passed("conv2d-fp32")),
            cell(NEW, V100, failed("conv2d-fp16", family="cudnn_arch_mismatch", subcode=None,
                                   known=("pytorch-162574-cudnn-9-11-drops-pre-turing",),
                                   with_repro=repro(groups=3)),
                 failed("conv2d-fp32", family="crash", subcode=None, reason="Fatal Python error: Segmentation fault"))),
    ))


def hostile(*, readable: bool = False) -> Bundle:
    """A bundle whose free text is markup: the reason and what was dropped (the reader lets free
    text through, bounded). Unless `readable`, also what the reader refuses but the site must
    survive all the same (it is handed Bundle objects too): markup in the fleet label, the GPU
    model and the MIG profile, a formula for a spreadsheet, a javascript: link."""
    bad = failed("conv2d-fp16", reason=HOSTILE, with_repro=repro(), sources=("https://example.com/a",))
    gpu, fleet = A100, "hostile"
    if not readable:
        bad = dataclasses.replace(bad, sources=("https://example.com/a", "javascript:alert(3)"),
                                  known=(HOSTILE,))
        gpu = dataclasses.replace(A100, model=HOSTILE, mig=HOSTILE)
        fleet = "=HYPERLINK(\"http://x\")" + HOSTILE
    return Bundle(fleet=fleet, created="2026-12-05", tool="0.1.0", runs=(
        run("c1", "2026-12-05", cell(OLD, gpu, bad)),), dropped=(HOSTILE,))


def write(path: Path, found: Bundle) -> Path:
    path.write_bytes(bundle_file.write(found))
    return path
