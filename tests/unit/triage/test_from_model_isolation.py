"""Issue 46: `convmatrix cases --from-model` records in a child interpreter (suites/capture.py), so
that the user's code cannot end, print into, outlive or out-grow the harness's process. Each
misbehaviour seen in the issue is run through the real command, in a process of its own (an exit
or a loop that swallows every exception would take the test process with it otherwise), with
short bounds ($CONVMATRIX_FROM_MODEL_SECONDS, $CONVMATRIX_FROM_MODEL_MEMORY_MB). The invariant:
either a valid case file and exit 0, or exactly one line on stderr, exit 2 and no file, within
the bound (plus the interpreters' start and torch's import)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import capturezoo
from strategies import Misbehaviour, misbehaviours
from testkit import REPO

# What an interpreter start, torch's import and the recorder add to a bound, at most, on a slow
# shared runner; the bounds themselves are a few seconds here.
SLACK_S = 90.0


@dataclass
class Ran:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def err_lines(self) -> list[str]:
        return self.err.strip().splitlines()


def cases_cli(cwd: Path, *args: str, seconds: float | None = None, memory_mb: int | None = None,
              pythonpath: tuple[Path, ...] = (), timeout: float = 240) -> Ran:
    """`python -m convmatrix cases ARGS` in its own process, in `cwd`, with capturezoo importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVMATRIX_FROM_MODEL_")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (*pythonpath, REPO / "src", REPO / "tests"))
    if seconds is not None:
        env["CONVMATRIX_FROM_MODEL_SECONDS"] = str(seconds)
    if memory_mb is not None:
        env["CONVMATRIX_FROM_MODEL_MEMORY_MB"] = str(memory_mb)
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "convmatrix", "cases", *args], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`convmatrix cases {' '.join(args)}` ran past {timeout} s: {exc.stderr!r}")
    return Ran(done.returncode, done.stdout, done.stderr, time.monotonic() - start)


def assert_one_line_exit_2(ran: Ran, *words: str) -> str:
    assert ran.code == 2, (ran.code, ran.err[-3000:])
    assert len(ran.err_lines) == 1, ran.err[-3000:]
    line = ran.err_lines[0]
    assert line.startswith("convmatrix: --from-model "), line
    assert "Traceback" not in ran.err
    for word in words:
        assert word in line, line
    assert ran.out == ""
    return line


def test_a_callable_that_calls_sys_exit_0_is_one_line_and_exit_2(tmp_path: Path) -> None:
    ran = cases_cli(tmp_path, "--from-model", "capturezoo:exits_0", "--input", "1x1x4x4", "-o", "out.toml")
    line = assert_one_line_exit_2(ran, "capturezoo:exits_0", "sys.exit(0)")
    assert "the callable" in line
    assert not (tmp_path / "out.toml").exists()


def test_a_model_that_raises_system_exit_3_is_not_the_control_unhealthy_code(tmp_path: Path) -> None:
    ran = cases_cli(tmp_path, "--from-model", "capturezoo:exits_3", "--input", "1x1x4x4", "-o", "out.toml")
    line = assert_one_line_exit_2(ran, "sys.exit(3)", "1x1x4x4")
    assert "the model" in line
    assert not (tmp_path / "out.toml").exists()


def test_what_the_model_prints_stays_out_of_the_case_file_on_stdout(tmp_path: Path) -> None:
    ran = cases_cli(tmp_path, "--from-model", "capturezoo:prints", "--input", "1x1x4x4")
    assert ran.code == 0, ran.err[-3000:]
    cases = tomllib.loads(ran.out)["case"]
    assert [c["name"] for c in cases] == ["prints_1"]
    assert "injected_by_print" not in ran.out and capturezoo.INJECTED not in ran.out
    # The model's own lines are neither in the file nor on convmatrix's stderr (one line: the count).
    assert ran.err_lines == [ran.err_lines[0]] and "1 case(s) from 1 convolution call(s)" in ran.err
    assert "a line on stderr" not in ran.err


def test_a_loop_that_swallows_every_exception_is_killed_at_the_bound(tmp_path: Path) -> None:
    ran = cases_cli(tmp_path, "--from-model", "capturezoo:swallows", "--input", "1x1x4x4", "-o", "out.toml",
                    seconds=3)
    assert_one_line_exit_2(ran, "recording took over 3 s", "running the model")
    assert ran.seconds < 3 + SLACK_S
    assert not (tmp_path / "out.toml").exists()
    pid = int((tmp_path / "swallower.pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_a_large_allocation_is_stopped_at_the_memory_bound(tmp_path: Path) -> None:
    ran = cases_cli(tmp_path, "--from-model", "capturezoo:allocates", "--input", "1x1x4x4", "-o", "out.toml",
                    memory_mb=128)
    assert_one_line_exit_2(ran, "grew past 128 MiB of memory", "running the model")
    assert not (tmp_path / "out.toml").exists()


def test_a_builder_that_reads_a_tensors_value_is_built_on_the_cpu_then_recorded(tmp_path: Path) -> None:
    ran = cases_cli(tmp_path, "--from-model", "capturezoo:reads_values", "--input", "2x3x32x32", "-o", "out.toml")
    assert ran.code == 0, ran.err[-3000:]
    text = (tmp_path / "out.toml").read_text()
    cases = tomllib.loads(text)["case"]
    assert [(c["input"], c["out_channels"], c["stride"]) for c in cases] == [([2, 3, 32, 32], 8, 2),
                                                                              ([2, 8, 16, 16], 16, 2)]
    header = " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    assert "built on the CPU" in header and "reads tensor values" in header
    assert "built on the CPU" in ran.err


def test_a_lazy_import_that_fails_at_the_attribute_is_one_line(tmp_path: Path) -> None:
    ran = cases_cli(tmp_path, "--from-model", "capturezoo:lazy.AutoencoderKL", "--input", "1x4x8x8",
                    "-o", "out.toml")
    line = assert_one_line_exit_2(ran, "capturezoo:lazy.AutoencoderKL", "RuntimeError",
                                  "operator torchvision::nms does not exist")
    assert "torchvision's compiled ops do not match torch" in line
    assert not (tmp_path / "out.toml").exists()


@pytest.mark.parametrize(("name", "value"), [("CONVMATRIX_FROM_MODEL_SECONDS", "0"),
                                             ("CONVMATRIX_FROM_MODEL_SECONDS", "soon"),
                                             ("CONVMATRIX_FROM_MODEL_MEMORY_MB", "-1")])
def test_a_bad_bound_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                 name: str, value: str) -> None:
    from convmatrix.cli.main import main

    monkeypatch.setenv(name, value)
    assert main(["cases", "--from-model", "capturezoo:well", "--input", "1x1x4x4"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and name in err


# -- the invariant, over the kinds of misbehaviour and where they happen -------------------------

BOUND_S = 2.0
BOUND_MB = 96


@pytest.mark.properties
@settings(max_examples=max(5, settings().max_examples // 40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=misbehaviours())
def test_any_misbehaviour_ends_in_a_valid_file_or_one_line(tmp_path_factory: pytest.TempPathFactory,
                                                           bad: Misbehaviour) -> None:
    folder = tmp_path_factory.mktemp("misbehaves")
    module = f"misbehaves_{bad.what}_{bad.where}"
    (folder / f"{module}.py").write_text(capturezoo.module_source(bad.what, bad.where, bad.arg))
    ran = cases_cli(folder, "--from-model", f"{module}:build", "--input", "1x1x4x4", "-o", "out.toml",
                    seconds=BOUND_S, memory_mb=BOUND_MB, pythonpath=(folder,))
    if bad.what == "print":
        assert ran.code == 0, ran.err[-3000:]
        text = (folder / "out.toml").read_text()
        assert [c["input"] for c in tomllib.loads(text)["case"]] == [[1, 1, 4, 4]]
        assert "injected_by_print" not in text and ran.out == ""
    else:
        assert_one_line_exit_2(ran, f"{module}:build")
        assert not (folder / "out.toml").exists()
    assert ran.seconds < BOUND_S + SLACK_S
