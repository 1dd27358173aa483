"""No value reaches a generated script as code (issue 21, item 4): control characters are refused
with one line, paths are normalised before they are checked, and what is left is quoted, so
running the generated scripts with a shell executes nothing a value holds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from convmatrix.cli.main import main
from testkit import REPO

MATRIX = str(REPO / "matrix" / "nightly.toml")
HOSTILE = ["$(touch {marker})", "`touch {marker}`", "x; touch {marker}", "x' ; touch {marker}; '", "x && touch {marker}",
           "x | touch {marker}"]


@pytest.fixture(autouse=True)
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


def slurm(capsys: pytest.CaptureFixture[str], out: str, *extra: str) -> tuple[int, str, str]:
    code = main(["slurm", "-m", MATRIX, "--shards", "2", "--out", out, "--convmatrix", "/bin/echo", "--dry-run",
                 *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("option", ["--out", "--partition", "--gres", "--time", "--constraint", "--job-name",
                                    "--convmatrix"])
@pytest.mark.parametrize("bad", ["/tmp/sl\nid > /tmp/PWNED\n#", "a\rb", "a\x1b]0;t\x07", "a\u2028b", "a\x00b"])
def test_a_control_character_in_any_slurm_option_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str, bad: str
) -> None:
    args = ["slurm", "-m", MATRIX, "--shards", "2", "--out", str(tmp_path / "run"), "--dry-run"]
    args += [option, bad] if option != "--out" else []
    if option == "--out":
        args[args.index("--out") + 1] = bad
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "control character" in captured.err


def run_script(text: str, cwd: Path) -> None:
    """The script's shell lines as bash runs them (#SBATCH lines are comments to it)."""
    subprocess.run(["bash", "-c", text], cwd=cwd, env={**os.environ, "SLURM_ARRAY_TASK_ID": "1"},
                   capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_slurm_values_are_quoted_and_nothing_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                          template: str) -> None:
    marker = tmp_path / "PWNED"
    value = template.format(marker=marker)
    out = str(tmp_path / "run" / value.replace("/", "_"))
    code, text, err = slurm(capsys, out, "--partition", value, "--gres", value, "--time", value, "--constraint", value,
                            "--job-name", value, "--", "--", "-k", value)
    assert code == 0, err
    shards, merge = text.split("# " + out + "/slurm/merge.sbatch")
    run_script(shards.split("\n", 1)[1], tmp_path)
    run_script(merge.split("\n", 1)[1], tmp_path)
    assert not marker.exists()


@pytest.mark.parametrize(("out", "says"), [
    ("/results/../etc", "must lie under the claim's mount /results"),
    ("/results/x/../../etc/cron.d", "must lie under the claim's mount /results"),
    ("/results/x\r", "control character"),
    ("/results/x\n#", "control character"),
])
def test_a_k8s_out_that_leaves_the_claim_or_holds_a_control_is_refused(
    capsys: pytest.CaptureFixture[str], out: str, says: str
) -> None:
    assert main(["k8s", "-m", MATRIX, "--shards", "2", "--image", "i", "--claim", "c", "--out", out]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_k8s_values_are_quoted_and_nothing_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        template: str) -> None:
    marker = tmp_path / "PWNED"
    value = template.format(marker=marker)
    mount = str(tmp_path / "results")
    out = f"{mount}/{value.replace('/', '_')}"
    assert main(["k8s", "-m", MATRIX, "--shards", "2", "--image", "i", "--claim", "c", "--mount", mount, "--out", out,
                 "--convmatrix", "/bin/echo", "--merge-deadline", "1", "--", "--", "-k", value]) == 0
    docs: list[dict[str, Any]] = list(yaml.safe_load_all(capsys.readouterr().out))
    shard = docs[0]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    merge = docs[1]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    wait = docs[1]["spec"]["template"]["spec"]["initContainers"][0]["command"][2]
    for script in (shard, merge):
        subprocess.run(["sh", "-c", script], cwd=tmp_path, env={**os.environ, "JOB_COMPLETION_INDEX": "0",
                                                               "NODE_NAME": "n"},
                       capture_output=True, timeout=60, check=False)
    subprocess.run(["sh", "-c", wait], cwd=tmp_path, capture_output=True, timeout=60, check=False)  # waits 1 s
    assert not marker.exists()
