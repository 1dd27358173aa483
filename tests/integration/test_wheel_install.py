"""The built wheel on its own: installed into a fresh venv outside the checkout, `convmatrix`
finds the suite the wheel carries (convmatrix/suites/), runs a host cell with it and reports it,
from a directory that is not the repository (issue 25: only a source checkout used to work)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from testkit import REPO, load_suite_module
from wheelkit import build_wheel, sh

pytestmark = pytest.mark.slow  # (tests/integration/conftest.py marks it too)

HOST_MATRIX = 'name = "wheel-host"\n[[include]]\nlane = "host"\n'
CASE = "conv2d-fp32-k3-p1"


def test_the_wheel_alone_runs_and_reports_a_host_cell(tmp_path: Path) -> None:
    if shutil.which("uv") is None:
        pytest.skip("uv is not installed (the project's test extra has it)")
    wheel = build_wheel(tmp_path)

    # The wheel carries the suite as the checkout has it (a folder named suites, no __init__.py, its zoo),
    # and every package of src/convmatrix (pyproject.toml lists them).
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n.removeprefix("convmatrix/suites/") for n in names if n.startswith("convmatrix/suites/")}
    source = {p.name for p in (REPO / "suites").iterdir() if p.suffix == ".py" or p.name == "pytest.ini"}
    source |= {f"models/{p.name}" for p in (REPO / "suites" / "models").glob("*.json")}  # the zoo (issue 50)
    assert shipped == source, shipped ^ source
    packages = {p.parent.relative_to(REPO / "src").as_posix() for p in (REPO / "src" / "convmatrix").rglob("__init__.py")}
    assert {p for p in packages if f"{p}/__init__.py" not in names} == set(), "a package left out of pyproject.toml"

    # A fresh venv outside the checkout, the wheel and its dependencies from the index (uv's cache).
    venv = tmp_path / "venv"
    sh("uv", "venv", "-q", "--python", sys.executable, venv, cwd=tmp_path)
    sh("uv", "pip", "install", "-q", "--python", venv / "bin" / "python", wheel, cwd=tmp_path, timeout=600)
    site = Path(sh(venv / "bin" / "python", "-c", "import convmatrix; print(convmatrix.__file__)",
                   cwd=tmp_path).stdout.strip()).parent
    assert venv in site.parents and REPO not in site.parents
    installed_suite = site / "suites"
    # The container lane's build context comes with it, and the lane finds it there.
    context = sh(venv / "bin" / "python", "-c", "from convmatrix.run.lanes import images; print(images.IMAGES_DIR)",
                 cwd=tmp_path).stdout.strip()
    assert Path(context) == site / "images"
    assert {p.name for p in Path(context).iterdir()} >= {"Dockerfile", "check-python", "pip-install"}

    work = tmp_path / "work"  # not the repository: nothing there to fall back on
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CONVMATRIX_PYTHON")}
    # The suite runs on the test interpreter (it has torch and pytest); the harness is the venv's.
    env.update(CONVMATRIX_PYTHON=sys.executable, CONVMATRIX_HOME=str(tmp_path / "home"))
    convmatrix = venv / "bin" / "convmatrix"

    checkout_version = load_suite_module("records").suite_version(str(REPO / "suites"))
    version = sh(convmatrix, "--version", cwd=work, env=env).stdout
    assert str(installed_suite) in version and checkout_version in version, version

    matrix = work / "matrix.toml"
    matrix.write_text(HOST_MATRIX)
    out = work / "run"
    sh(convmatrix, "run", "-m", matrix, "--out", out, "--", "--device", "cpu", "-k", CASE, cwd=work, env=env, timeout=600)
    (cell_dir,) = [d for d in out.iterdir() if d.is_dir() and d.name.startswith("host@")]
    cell = json.loads((cell_dir / "cell.json").read_text())
    assert cell["exit_code"] == 0, cell
    assert cell["suite"] == {"path": str(installed_suite), "version": checkout_version}
    env_json = json.loads((cell_dir / "env.json").read_text())
    assert env_json["suite_version"] == checkout_version  # the same suite, so the same test ids and digest
    lines = [json.loads(line) for line in (cell_dir / "results.jsonl").read_text().splitlines() if line.strip()]
    assert lines and all(CASE in str(line.get("case", "")) for line in lines), lines
    assert all(line["nodeid"] == f"suites/test_conv.py::test_conv[{line['case']}]" for line in lines), lines

    report = sh(convmatrix, "report", out, "--format", "json", cwd=work, env=env)
    cells = {c["cell"] for c in json.loads(report.stdout)["cases"]}
    assert cells == {"host"}, report.stdout
    text = sh(convmatrix, "report", out, cwd=work, env=env)
    assert "host" in text.stdout

    sh(convmatrix, "triage", cell_dir / "log.txt", cwd=work, env=env)
    # A failed job's log: the commands that would prove a fix name what this install has (its
    # suite, by path), not a checkout's suites/, matrix/ or noxfile, which `work` lacks.
    job = work / "job.log"
    job.write_text("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed "
                   "in a non-contiguous input.\n")
    verify = json.loads(sh(convmatrix, "triage", job, "--format", "json", cwd=work, env=env).stdout)["verify"]
    assert verify[0].startswith(f"python -m pytest {installed_suite} "), verify
    named = [w for cmd in verify for w in shlex.split(cmd) if "/" in w and not w.startswith("reports/")]
    assert all(Path(w).is_absolute() and Path(w).exists() for w in named) and "nox" not in str(verify), verify
    assert any(cmd.startswith("convmatrix run -m ") and "/convmatrix/matrix/examples/fix-proof.toml" in cmd
               for cmd in verify), verify  # the wheel carries the example matrix
    dry = sh(convmatrix, "slurm", "-m", matrix, "--shards", "1", "--out", work / "fleet", "--dry-run", cwd=work, env=env)
    assert "sbatch" in dry.stdout or "#SBATCH" in dry.stdout, dry.stdout
