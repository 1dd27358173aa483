"""`convmatrix cases`: user case files as the suite will run them, and a failing job's log made
into one (`--from-log`: PyTorch's printed repro snippets, triage/snippets.py), or a model's
convolutions (`--from-model`: recorded on the meta device in a child interpreter, triage/from_model.py
and suites/capture.py)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from convmatrix.cli.output import write_output
from convmatrix.errors import BadInput
from convmatrix.escape import one_line
from convmatrix.results import rundir
from convmatrix.run import cases as run_cases


def add_parser(sub: Any) -> None:
    c = sub.add_parser(
        "cases", help="list case files as the suite runs them; --from-log: a failed job's log to a case file; "
                      "--from-model: a model's convolutions to a case file",
        description="With files: every case, its id and parameters, and the shapes the CPU runs where it "
                    "scales a case down. With --from-log: each PyTorch repro snippet in the log as a [[case]] "
                    "table (stdout, or -o FILE). With --from-model: every convolution the model runs on the "
                    "given inputs, recorded on the meta device (no weights, no memory, no GPU), one [[case]] "
                    "per distinct convolution.")
    c.add_argument("files", nargs="*", metavar="FILE", help="case files (TOML or JSON)")
    c.add_argument("--catalog", action="store_true",
                   help="list the suite's own catalogue instead (each case past 2^31 elements with its pair "
                        "just below and just above the bound)")
    c.add_argument("--from-log", metavar="LOG", help="a failed job's log (plain, .gz, rank-prefixed)")
    c.add_argument("--from-model", metavar="MODULE:CALLABLE",
                   help="a callable returning a torch.nn.Module (built on the meta device), e.g. "
                        "torchvision.models:resnet50")
    c.add_argument("--input", action="append", default=[], metavar="NxCxHxW[:DTYPE]",
                   help="with --from-model: an input's shape, and its dtype where it is not the model's "
                        "(1:int64 for a timestep); repeat for a model of several inputs")
    c.add_argument("--config", metavar="JSON|FILE",
                   help="with --from-model: the model's config, a JSON object or a JSON file (config.json), "
                        "for a transformers class (built from its config_class) or a diffusers one (from_config)")
    c.add_argument("--dtype", choices=("float32", "float16", "bfloat16", "float64"), default="float32",
                   help="with --from-model: the model's and its inputs' dtype (default float32)")
    c.add_argument("--autocast", choices=("float16", "bfloat16"),
                   help="with --from-model: stamp the cases as run under autocast (not observed: see docs/matrix.md)")
    c.add_argument("--channels-last", action="store_true",
                   help="with --from-model: the model and its 4-d/5-d inputs in channels_last")
    c.add_argument("--backward", action="store_true", help="with --from-model: record the backward too")
    c.add_argument("--kwargs", metavar="JSON", help="with --from-model: the callable's keyword arguments, a JSON "
                                                    "object (e.g. '{\"num_classes\": 10}')")
    c.add_argument("-o", "--output", type=Path,
                   help="with --from-log or --from-model: write the case file here (FILE.toml: TOML, FILE.json: JSON)")
    c.add_argument("--format", choices=("table", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    model_only = [name for name, given in (("--input", args.input), ("--autocast", args.autocast),
                                           ("--channels-last", args.channels_last), ("--backward", args.backward),
                                           ("--kwargs", args.kwargs), ("--dtype", args.dtype != "float32"),
                                           ("--config", args.config))
                  if given]
    if args.catalog:
        if args.files or args.from_log is not None or args.from_model is not None or model_only:
            raise BadInput("cases: --catalog lists the suite's catalogue alone (no files, --from-log or --from-model)")
        if args.output is not None:
            raise BadInput("cases: -o goes with --from-log or --from-model")
        catalog = rundir.suite_module("catalog")
        # The zoo's cases after the catalogue's, each with its model (suites/models/<model>.json).
        rows = [describe(case) for case in (*catalog.CASES, *catalog.ZOO_CASES)]
        text = json.dumps(rows, indent=2) + "\n" if args.format == "json" else table(rows, ["the catalogue"])
        write_output(text, None)
        return 0
    if args.from_model is not None:
        if args.files or args.from_log is not None:
            raise BadInput("cases: give case files, --from-log LOG or --from-model MODULE:CALLABLE, one of them")
        return from_model(args)
    if model_only:
        raise BadInput(f"cases: {model_only[0]} goes with --from-model")
    if args.from_log is not None:
        if args.files:
            raise BadInput("cases: give case files or --from-log LOG, not both")
        return from_log(args.from_log, args.output)
    if args.output is not None:
        raise BadInput("cases: -o goes with --from-log or --from-model")
    if not args.files:
        raise BadInput("cases: name case files to list, or --from-log LOG")
    found = run_cases.check([Path(f) for f in args.files])
    rows = [describe(case) for case in found]
    if args.format == "json":
        write_output(json.dumps(rows, indent=2) + "\n", None)
    else:
        write_output(table(rows, args.files), None)
    return 0


def describe(case: Any) -> dict[str, Any]:
    """A case as the suite runs it: its id, its parameters, and the CPU's scaled-down shapes."""
    sizing = rundir.suite_module("sizing")
    small = sizing.scaled(case)
    return {"id": case.id, "params": case.params(), "shapes": {k: list(v) for k, v in case.shapes().items()},
            "need_mb": sizing.need_mb(case),
            "cpu_shapes": None if small is case else {k: list(v) for k, v in small.shapes().items()},
            "cpu_view": None if small is case or small.input_strides is None else
            {"input_strides": list(small.input_strides), "storage_offset": small.storage_offset},
            "over_int32": case.over_int32, "cpu_skip": case.gpu_reason if case.needs_gpu else None,
            "model": getattr(case, "model", None)}


def table(rows: list[dict[str, Any]], files: list[str]) -> str:
    from tabulate import tabulate

    def shape(values: list[int]) -> str:
        return "x".join(str(v) for v in values)

    body = []
    for row in rows:
        p = row["params"]
        flags = [f"{name}={'on' if p[key] else 'off'}" for name, key in
                 (("benchmark", "benchmark"), ("deterministic", "deterministic"), ("tf32", "tf32"))
                 if p[key] is not None]
        cpu = "as is"
        if row.get("cpu_skip"):
            cpu = "skipped (needs CUDA)"
        elif row["cpu_shapes"]:
            cpu = shape(row["cpu_shapes"]["input"])
            if row.get("cpu_view"):
                cpu += " " + view_text(row["cpu_view"]["input_strides"], row["cpu_view"]["storage_offset"])
        body.append([
            one_line(row["id"]), shape(row["shapes"]["input"]), shape(row["shapes"]["weight"]),
            f"{p['dtype']} autocast {p['autocast']}" if p["autocast"] else p["dtype"],
            layout_text(p), p["direction"] or ("backward" if p["backward"] else "forward"),
            " ".join(flags) or "-",
            p.get("edge") or ("over" if row.get("over_int32") else "-"),  # a Case's edge: None, below or above
            cpu, one_line(row["model"]) if row.get("model") else "-", one_line(" ".join(p["sources"])) or "-",
        ])
    head = f"{len(rows)} case{'' if len(rows) == 1 else 's'} from {', '.join(one_line(f) for f in files)}\n\n"
    return head + tabulate(body, headers=["case", "input", "weight", "dtype", "layout", "direction", "forced",
                                          "2^31", "on the CPU", "model", "sources"],
                           tablefmt="simple", disable_numparse=True) + "\n"


def view_text(strides: list[int], offset: int) -> str:
    """A view as the table shows it: `strides 1024x1x1` (`+3`: its storage offset)."""
    return "strides " + "x".join(str(v) for v in strides) + (f"+{offset}" if offset else "")


def layout_text(p: dict[str, Any]) -> str:
    """How the input lies (its layout, view or memory format) and the weight's format where apart."""
    text = str(p["layout"] or p["memory_format"])
    if p.get("input_strides") is not None:
        text = view_text(p["input_strides"], p.get("storage_offset") or 0)
    if p.get("weight_memory_format") is not None:
        text += f", weight {p['weight_memory_format']}"
    return text


def from_log(log: str, output: Path | None) -> int:
    from convmatrix.triage import snippets  # lazily: only --from-log reads a log

    found = snippets.cases_from_log(log)
    for note in found.notes:
        print(f"convmatrix: {one_line(note)}", file=sys.stderr)
    if not found.cases:
        raise BadInput(f"{log}: no repro snippet to capture (PyTorch prints one on the cuDNN v7 API's errors)")
    suffix = snippets.suffix_of(output)
    write_checked(snippets.to_case_file(found.cases, log, suffix), output, suffix, "captured")
    where = f" in {output}" if output is not None else ""
    print(f"convmatrix: {len(found.cases)} case(s) captured from {one_line(log)}{where}", file=sys.stderr)
    return 0


def write_checked(text: str, output: Path | None, suffix: str, stem: str) -> None:
    """A case file --from-log or --from-model made: checked as the suite will read it (casefile.py,
    under the name it will have: its stem prefixes the ids), then written whole (write_output)."""
    with tempfile.TemporaryDirectory() as folder:
        probe = Path(folder) / f"{output.stem if output is not None else stem}{suffix}"
        probe.write_text(text, encoding="utf-8")
        run_cases.check([probe])
    write_output(text, output)


def from_model(args: argparse.Namespace) -> int:
    from convmatrix.triage import from_model as recorder  # lazily: only --from-model imports torch
    from convmatrix.triage import snippets  # lazily, as --from-log: the case-file writer

    parsed = [recorder.parse_input(text) for text in args.input]
    inputs = [shape for shape, _ in parsed]
    if not inputs:
        raise BadInput("--from-model: name the model's input shapes with --input (e.g. --input 8x3x224x224)")
    kwargs = recorder.parse_kwargs(args.kwargs)
    config = recorder.parse_config(args.config)
    max_seconds, max_rss_growth = recorder.bounds_from_env(os.environ)
    suffix = snippets.suffix_of(args.output)
    start = time.perf_counter()
    # In a child interpreter (suites/capture.py): the model's code, its prints, exits and memory stay there.
    found = recorder.record(args.from_model, inputs, dtype=args.dtype, autocast=args.autocast,
                            channels_last=args.channels_last, backward=args.backward, kwargs=kwargs,
                            max_seconds=max_seconds, max_rss_growth=max_rss_growth,
                            input_dtypes=[dtype for _, dtype in parsed], config=config)
    seconds = time.perf_counter() - start
    said = recorder.header(args.from_model, inputs, found, autocast=args.autocast, backward=args.backward,
                           seconds=seconds)
    write_checked(recorder.to_case_file(found.cases, said, suffix), args.output, suffix, "recorded")
    for note in found.notes:
        print(f"convmatrix: {one_line(note)}", file=sys.stderr)
    where = f" in {args.output}" if args.output is not None else ""
    print(f"convmatrix: {len(found.cases)} case(s) from {found.calls} convolution call(s) of "
          f"{one_line(args.from_model)} recorded in {seconds:.2f} s{where}", file=sys.stderr)
    return 0
