"""The harness against the plain alternative, each figure measured in the same run (issue 12).

    python bench/run.py [--json] [--select EXPR] [--only NAME ...] [--triage-mb N]

Needs uv, a Docker engine and convmatrix/base:bookworm (`nox -s base-image`). A warm-up, not
timed, builds the bench matrix's images (`convmatrix build`) and fills uv's cache, so that no
figure times a download. Then, over bench/matrix.toml (3 container, 3 baremetal cells; the suite
on the CPU, `-k SELECT`):

    matrix_vs_naive      `convmatrix run --jobs 2` from empty venvs, over a plain sequential
                         script that builds each image and `docker run`s pytest in it, and makes
                         each venv and runs pytest in it (same cells, same cases, same caches)
    pool_speedup         the same cells on a stub runner listing 2 GPUs (a stub nvidia-smi;
                         the suite runs with --device cpu): one GPU (--gpus 0) over the pool
    noop_rerun_s         the same matrix again, everything cached (--reuse-results)
    report_merge_s       `convmatrix report --format json` over 1,000 cells x 200 cases (the median
    report_merge_peak_mb   of 5 runs), and its peak resident memory (the largest of the 5)
    per_case_overhead    the control cell through the harness over raw pytest of the same cases
                         (the median of 5 alternated runs of each)
    triage_vs_grep       throughput of `convmatrix triage` over `grep -F` on a multi-rank log
                         (the median of 5 alternated runs of each)

Prints one line per figure, or with --json one JSON object: each figure, its target, whether it
was met, and the commands behind it. Asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from convmatrix import matrix as matrices  # noqa: E402
from convmatrix.run.lanes import container, containers, images, install  # noqa: E402

MATRIX = REPO / "bench" / "matrix.toml"
SELECT = "conv1d-fp32"  # a small, real subset: startup and environments dominate, as in a nightly's cells
OVERHEAD_SELECT = "conv2d and not large"  # enough cases that per-case costs show
# Each side of per_case_overhead and triage_vs_grep, and report_merge_s, is timed this many
# times (the two sides alternating) and the median taken: on a shared 2-core runner one run
# varies by 10-30 %, more than the gap per_case_overhead measures (a 3-run median of the same
# harness and code gave 1.14 and 0.87 an hour apart).
ROUNDS = 5
STUB_SMI = """#!/bin/sh
case "$*" in
  *driver_version*) echo "550.54.15" ;;
  *) printf '0, NVIDIA H100 80GB HBM3, 9.0, 81559\\n1, NVIDIA H100 80GB HBM3, 9.0, 81559\\n' ;;
esac
"""
TARGETS = {  # figure: (comparison, bound)
    "matrix_vs_naive": ("<=", 0.7),
    "pool_speedup": (">=", 1.7),
    "noop_rerun_s": ("<=", 5.0),
    "report_merge_s": ("<=", 2.0),
    "report_merge_peak_mb": ("<=", 500.0),
    "per_case_overhead": ("<=", 1.10),
    "triage_vs_grep": (">=", 0.5),
}


class Bench:
    def __init__(self, tmp: Path, select: str) -> None:
        self.tmp = tmp
        self.select = select
        self.env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "UV_NATIVE_TLS": "1", "DOCKER_BUILDKIT": "1",
                    "CONVMATRIX_VENVS": str(tmp / "venvs"), "CONVMATRIX_RESULTS_STORE": str(tmp / "store"),
                    # The bench runs the suite with --device cpu on purpose: its cu124 stacks must not be
                    # refused on a runner without a GPU (issue 49: it exited 2 there).
                    "CONVMATRIX_ALLOW_CPU": "1"}
        self.cells = 1000  # report_merge's generated run (--short: fewer)
        self.rounds = ROUNDS
        self.commands: dict[str, list[str]] = {}
        self.notes: dict[str, str] = {}

    def convmatrix(self, *args: str, env: dict[str, str] | None = None) -> float:
        command = [sys.executable, "-m", "convmatrix", *args]
        return timed(command, env=env or self.env, cwd=REPO)

    def run_matrix(self, out: str, *options: str, env: dict[str, str] | None = None) -> float:
        return self.convmatrix("run", "-m", str(MATRIX), "--out", str(self.tmp / out), *options,
                               "--", "--device", "cpu", "-k", self.select, env=env)

    def warm_up(self) -> None:
        """Images built and uv's cache filled, untimed; venvs made here are thrown away."""
        self.convmatrix("build", "-m", str(MATRIX))
        self.run_matrix("warm-up", "--jobs", "2", env={**self.env, "CONVMATRIX_VENVS": str(self.tmp / "warm-venvs")})
        shutil.rmtree(self.tmp / "warm-venvs", ignore_errors=True)

    def matrix_vs_naive(self) -> float:
        ours = self.run_matrix("nightly", "--jobs", "2")
        naive = self.naive()
        self.commands["matrix_vs_naive"] = [
            f"convmatrix run -m bench/matrix.toml --jobs 2 -- --device cpu -k '{self.select}'  ({ours:.1f} s)",
            f"plain script: docker build + docker run per container cell, uv venv + pip install + pytest per "
            f"baremetal cell, one after another  ({naive:.1f} s)"]
        return ours / naive

    def naive(self) -> float:
        """What a plain script does, one cell after another."""
        loaded = matrices.load(MATRIX)
        start = time.perf_counter()
        with containers.client() as engine:
            plans = container.plans(engine, loaded, loaded.lane("container"), None)
        secrets = container.secrets()
        for plan in plans:
            with tempfile.TemporaryDirectory(prefix="naive-build-") as context:
                images.make_context(plan, Path(context))
                must(images.build_command(plan, Path(context), secrets, images.docker_cli()), self.env)
            out = self.tmp / "naive" / plan.cell.id
            out.mkdir(parents=True)
            must([images.docker_cli(), "run", "--rm", "--network", "none", "--user", f"{os.getuid()}:{os.getgid()}",
                  "--shm-size", "2g", "-v", f"{REPO / 'suites'}:/suite:ro", "-v", f"{out}:/results", plan.tag,
                  "/opt/cell/bin/python", "-m", "pytest", "/suite", "-p", "no:cacheprovider", "--results-dir",
                  "/results", "--cell-id", plan.cell.id, "--device", "cpu", "-k", self.select], self.env)
        uv = shutil.which("uv") or "uv"
        for cell in loaded.lane("baremetal"):
            venv = self.tmp / "naive-venvs" / cell.id
            must([uv, "venv", "--python", cell.python, str(venv)], self.env)
            for step in install.plan(cell).steps():
                must([uv, "pip", "install", "--python", str(venv / "bin" / "python"), *step], self.env)
            must([str(venv / "bin" / "python"), "-m", "pytest", str(REPO / "suites"), "-p", "no:cacheprovider",
                  "--results-dir", str(self.tmp / "naive" / cell.id), "--cell-id", cell.id, "--device", "cpu",
                  "-k", self.select], self.env)
        return time.perf_counter() - start

    def noop_rerun_s(self) -> float:
        seconds = self.run_matrix("rerun", "--jobs", "2", "--reuse-results")
        self.commands["noop_rerun_s"] = [f"convmatrix run -m bench/matrix.toml --jobs 2 --reuse-results -- "
                                         f"--device cpu -k '{self.select}'  (venvs, images and results all there)"]
        return seconds

    def pool_speedup(self) -> float:
        bin_dir = self.tmp / "stub-bin"
        bin_dir.mkdir(exist_ok=True)
        smi = bin_dir / "nvidia-smi"
        smi.write_text(STUB_SMI)
        smi.chmod(0o755)
        env = {**self.env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
        one = self.run_matrix("one-gpu", "--gpus", "0", env=env)
        two = self.run_matrix("two-gpus", env=env)
        self.commands["pool_speedup"] = [
            f"stub nvidia-smi listing 2 H100s; convmatrix run -m bench/matrix.toml --gpus 0 -- --device cpu "
            f"-k '{self.select}'  ({one:.1f} s)",
            f"the same with both GPUs, one pool  ({two:.1f} s)"]
        return one / two

    def per_case_overhead(self) -> float:
        control = next(c for c in matrices.load(MATRIX).cells if c.lane == "baremetal" and c.cudnn == "bundled")
        python = str(self.tmp / "venvs" / control.id / "bin" / "python")
        cases = ["--device", "cpu", "-k", OVERHEAD_SELECT]
        harness, raw = alternated(
            lambda _: self.convmatrix("run", "-m", str(MATRIX), "--cell", control.id, "--out",
                                      str(self.tmp / "overhead"), "--prepare-ahead", "0", "--", *cases),
            lambda round_: timed([python, "-m", "pytest", str(REPO / "suites"), "-p", "no:cacheprovider",
                                  "--results-dir", str(self.tmp / f"raw{round_}"), "--cell-id", control.id, *cases],
                                 env=self.env, cwd=REPO))
        count = len((self.tmp / "raw0" / "results.jsonl").read_text().splitlines())
        self.commands["per_case_overhead"] = [
            f"convmatrix run -m bench/matrix.toml --cell {control.id} -- {' '.join(cases)}  (median of "
            f"{ROUNDS}: {harness:.2f} s)",
            f"{control.id}'s python -m pytest suites/ {' '.join(cases)}  (median of {ROUNDS}: {raw:.2f} s, "
            f"{count} cases)"]
        return harness / raw

    def report_merge(self) -> tuple[float, float]:
        """The median of ROUNDS runs (one run here varies by a tenth or more), and the largest peak."""
        runs = self.tmp / "merge"
        write_results(runs, cells=self.cells, cases=200)
        command = [sys.executable, "-m", "convmatrix", "report", str(runs), "--format", "json", "-o",
                   str(self.tmp / "merge.json"), "--fail-on", "never"]
        seconds, peaks = [], []
        for _ in range(self.rounds):
            start = time.perf_counter()
            proc = subprocess.Popen(command, env=self.env, cwd=REPO, stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(proc.pid, 0)
            seconds.append(time.perf_counter() - start)
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode:
                raise SystemExit(f"bench: {' '.join(command)} exited with {proc.returncode}")
            peaks.append(usage.ru_maxrss / 1024)
        self.commands["report_merge_s"] = [f"convmatrix report RUN --format json -o FILE --fail-on never "
                                           f"({self.cells:,} generated cells x 200 cases; the median of {self.rounds}: "
                                           f"{' '.join(f'{s:.2f}' for s in seconds)} s)"]
        return statistics.median(seconds), max(peaks)

    def triage_vs_grep(self, mb: int) -> float:
        path = self.tmp / "job.log"
        write_log: Callable[[Path, int], int] = sibling("triage_throughput").write_log  # its log, not a copy
        write_log(path, mb)
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=False)  # a warm page cache for both
        grep, ours = alternated(
            lambda _: timed(["grep", "-F", "CUDNN_STATUS_NOT_SUPPORTED", str(path)], env=self.env, cwd=REPO,
                            check=False),
            lambda _: timed([sys.executable, "-m", "convmatrix", "triage", str(path), "--format", "json"],
                            env=self.env, cwd=REPO, check=False))
        self.commands["triage_vs_grep"] = [f"grep -F CUDNN_STATUS_NOT_SUPPORTED ({grep:.2f} s) and convmatrix "
                                           f"triage --format json ({ours:.2f} s) on a {mb} MB 8-rank log, the "
                                           f"median of {ROUNDS} alternated runs each", f"rg: {triage_rg()}"]
        path.unlink()
        return grep / ours


def compile_checkout() -> str:
    """The checkout's modules compiled to bytecode, untimed, as an install has them (pip compiles
    a wheel's modules when it installs it): every timed figure starts `python -m convmatrix` from
    src/, and under PYTHONDONTWRITEBYTECODE=1 (set on the machine these figures come from) each
    start compiled the ~100 modules it imports again, 0.3-0.5 s where a compiled import takes
    0.15 s: a third of triage_vs_grep's time (issue 49). Returns what it did, for the output."""
    done = subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "src"), str(REPO / "suites")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return "src/ and suites/ compiled first (compileall)" if done.returncode == 0 else "compileall failed"


def triage_rg() -> str:
    """The ripgrep `convmatrix triage` runs under this interpreter, as scan.ripgrep finds it (the
    wheel's beside the interpreter first, else PATH's), and its version; or that it has none and
    falls back to GNU grep (much slower with many needles)."""
    beside = Path(sys.executable).parent / "rg"
    rg = str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("rg")
    if rg is None:
        return "none (GNU grep prefilter)"
    done = subprocess.run([rg, "--version"], capture_output=True, text=True, check=False)
    return f"{rg} ({(done.stdout.splitlines() or ['unknown version'])[0]})"


def alternated(first: Callable[[int], float], second: Callable[[int], float]) -> tuple[float, float]:
    """Each side timed ROUNDS times, by round, in turn (a slow moment hits both alike);
    the median of each."""
    firsts, seconds = [], []
    for round_ in range(ROUNDS):
        firsts.append(first(round_))
        seconds.append(second(round_))
    return statistics.median(firsts), statistics.median(seconds)


def sibling(name: str) -> Any:
    """Another bench script, loaded by path (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(command: Sequence[str], *, env: dict[str, str], cwd: Path, check: bool = True) -> float:
    start = time.perf_counter()
    done = subprocess.run(list(command), env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          check=False)
    seconds = time.perf_counter() - start
    if check and done.returncode not in (0, 1):
        tail = done.stdout.decode(errors="replace")[-2000:]
        raise SystemExit(f"bench: `{' '.join(command)}` exited {done.returncode}:\n{tail}")
    return seconds


def must(command: Sequence[str], env: dict[str, str]) -> None:
    timed(command, env=env, cwd=REPO)


def write_results(runs: Path, *, cells: int, cases: int) -> None:
    """A run directory of `cells` complete cells, `cases` results each; cell 0 is the control."""
    rng = random.Random(12)
    stamp = "2026-12-02T18:34:15.123+00:00"
    for i in range(cells):
        cudnn = f"9.{i}.0.0" if i else "bundled"
        cell = f"baremetal-torch2.5.1-cu124-cudnn{cudnn}-py3.11"
        directory = runs / f"{cell}@cpu"
        directory.mkdir(parents=True)
        meta = {"schema": 1, "cell": cell, "lane": "baremetal",
                "requested": {"lane": "baremetal", "torch": "2.5.1", "cuda": "cu124", "cudnn": "bundled",
                              "python": "3.11"},
                "expected": {}, "control": i == 0, "gpu_key": "cpu", "gpu": None, "python": "py",
                "started": stamp, "ended": stamp, "exit_code": 0, "evidence": {}}
        (directory / "cell.json").write_text(json.dumps(meta))
        (directory / "env.json").write_text(json.dumps({"schema": 1, "cell_id": cell, "gpus": [], "knobs": {},
                                                        "argv": [], "isolation": {}, "started": stamp,
                                                        "ended": stamp}))
        lines = []
        for n in range(cases):
            failed = i and rng.random() < 0.01
            lines.append(json.dumps({"schema": 1, "case": f"conv2d-case{n}", "status": "failed" if failed else "passed",
                                     "message": "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED" if failed else None,
                                     "nodeid": f"suites/test_conv.py::test_conv[conv2d-case{n}]", "knobs": {},
                                     "warnings": [], "duration_s": 0.01}))
        (directory / "results.jsonl").write_text("\n".join(lines) + "\n")


def met(name: str, value: float) -> bool:
    comparison, bound = TARGETS[name]
    return value <= bound if comparison == "<=" else value >= bound


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--select", default=SELECT, help=f"the suite's -k for the matrix figures (default {SELECT!r})")
    ap.add_argument("--triage-mb", type=int, default=1000, help="the triage log's size (default 1000 MB)")
    ap.add_argument("--only", nargs="+", choices=["matrix", "report", "overhead", "triage"],
                    help="only these groups (matrix: matrix_vs_naive, noop_rerun_s, pool_speedup)")
    ap.add_argument("--short", action="store_true",
                    help="CI's quick check that the bench runs: report (100 cells) and triage (20 MB), one round "
                         "each; its figures are not the targets' measurements")
    args = ap.parse_args()
    groups = set(args.only or (["report", "triage"] if args.short else ["matrix", "report", "overhead", "triage"]))
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="convmatrix-bench-", dir=REPO / "reports" if (REPO / "reports").is_dir()
                                     else None) as tmp:
        bench = Bench(Path(tmp), args.select)
        if args.short:
            bench.cells, bench.rounds, args.triage_mb = 100, 1, min(args.triage_mb, 20)
        bench.notes["bytecode"] = compile_checkout()
        steps: list[tuple[str, Callable[[], Any]]] = []
        if "matrix" in groups or "overhead" in groups:
            steps.append(("warm_up", bench.warm_up))
        if "matrix" in groups:
            steps += [("matrix_vs_naive", bench.matrix_vs_naive), ("noop_rerun_s", bench.noop_rerun_s),
                      ("pool_speedup", bench.pool_speedup)]
        if "overhead" in groups:
            if "matrix" not in groups:
                steps.append(("venvs", lambda: bench.run_matrix("venvs", "--lane", "baremetal")))
            steps.append(("per_case_overhead", bench.per_case_overhead))
        if "report" in groups:
            steps.append(("report_merge", bench.report_merge))
        if "triage" in groups:
            steps.append(("triage_vs_grep", lambda: bench.triage_vs_grep(args.triage_mb)))
        for name, step in steps:
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            value = step()
            if name == "report_merge":
                figures["report_merge_s"], figures["report_merge_peak_mb"] = value
            elif name in TARGETS:
                figures[name] = value
        result = {name: {"value": round(value, 3), "target": f"{TARGETS[name][0]} {TARGETS[name][1]:g}",
                         "met": met(name, value)} for name, value in figures.items()}
        if args.json:
            print(json.dumps({"figures": result, "commands": bench.commands, "cpus": os.cpu_count(),
                              "load": os.getloadavg()[0], **bench.notes}, indent=2))
        else:
            # The load beside the figures: on a shared machine it moves them more than anything here.
            print(f"bench: {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f} at the end; {bench.notes['bytecode']}")
            for name, item in result.items():
                verdict = "met" if item["met"] else "MISSED"
                print(f"{name:22s} {item['value']:10.3f}   target {item['target']:8s} {verdict}"
                      + (f"   {bench.commands[name][-1]}" if name == "triage_vs_grep" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
