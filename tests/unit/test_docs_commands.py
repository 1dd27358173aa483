"""The commands the README and docs give are ones a user can paste (issue 34 items 5 and 7): what
they write goes under a folder git ignores, and the red-cell recipe's fault file is one the
tests' fault plugin accepts."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

from testkit import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# A command line in a fenced block or an indented one: its --out / -o value.
_WRITES = re.compile(r"(?:--out|-o)[ =]([^\s\]]+)")
_COMMAND = re.compile(r"^(?: {4})?(?:[A-Z_]+=\S+ )*(?:convmatrix|nox|python3 -m nox)\b.*$", re.M)


def written_paths() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for line in _COMMAND.findall(doc.read_text()):
            for path in _WRITES.findall(line):
                if not re.search(r"[A-Z]{3,}", path):  # DIR, FILE: a placeholder, not a path
                    found.append((doc.name, path))
    return found


@pytest.mark.parametrize(("doc", "path"), written_paths())
def test_what_a_documented_command_writes_lands_in_a_folder_git_ignores(doc: str, path: str) -> None:
    """The README's `--out R` examples left an untracked R/ in the checkout."""
    concrete = re.sub(r"<[^>]+>", "x", path)
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", concrete], cwd=REPO, check=False)
    assert done.returncode == 0, f"{doc}: {path} is not under a folder git ignores"


def test_the_docs_name_some_paths_to_check() -> None:
    assert {path for _, path in written_paths()} >= {"reports/runs/upgrade", "reports/runs/red"}


def test_the_red_cell_recipe_is_complete() -> None:
    """docs/report.md's recipe needed a faults.json whose contents it did not give: now it writes
    one, which the fault plugin accepts, and runs sessions the noxfile has."""
    text = (REPO / "docs" / "report.md").read_text()
    recipe = text.split("To make the same red cell", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    spec = json.loads(recipe.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0])
    loader = importlib.util.spec_from_file_location("faults_plugin", REPO / "tests/plugins/convmatrix_faults.py")
    assert loader is not None and loader.loader is not None
    plugin = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(plugin)
    assert set(spec) <= set(plugin.ACTIONS) and spec["raise"] and spec["warn"]
    assert "CONVMATRIX_FAULTS=reports/faults.json" in recipe and "-p convmatrix_faults" in recipe
    noxfile = (REPO / "noxfile.py").read_text()
    for session in re.findall(r"nox -s (\w+)", recipe):
        assert f"def {session}(session" in noxfile, session


# --- issue 49: the docs' examples, run as written ---------------------------------------------------
def _block_after(doc: str, heading: str, fence: str = "```toml\n") -> str:
    text = (REPO / "docs" / doc).read_text()
    return text.split(heading, 1)[1].split(fence, 1)[1].split("```", 1)[0]


def test_the_case_file_example_loads_as_the_docs_say(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/matrix.md's case file: its [case.sweep] sweeps unet_up_1280 (4 cases, tagged as its
    comment says), not the view case after it, and the view is the reporter's (1024, 1, 1024)."""
    from convmatrix.cli.main import main

    cases = tmp_path / "prod.toml"
    cases.write_text(_block_after("matrix.md", "## Your own cases"))
    assert main(["cases", str(cases), "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    ids = [case["id"] for case in (listed["cases"] if isinstance(listed, dict) else listed)]
    unet = [i for i in ids if "unet_up_1280" in i]
    assert len(unet) == 4 and "prod-conv2d-fp16-k3-p1-channels_last-bwd-bench_on-unet_up_1280-batch31-dtype_float16" in unet
    assert [i for i in ids if "pytorch3512" in i] == ["prod-conv_transpose1d-fp32-k1-view1024x1x1024-pytorch3512"]
    # the view a (1, 1, 1024) tensor's transpose(1, 2) is
    import torch
    assert torch.zeros(1, 1, 1024).transpose(1, 2).stride() == (1024, 1, 1024)


def test_the_suites_case_count_is_the_one_the_docs_give() -> None:
    from catalogkit import catalog

    count = len(catalog.CASES)
    for doc in ("suite.md", "contracts.md"):
        text = (REPO / "docs" / doc).read_text()
        stated = {int(n) for n in re.findall(r"(?:^|catalogue has )(\d{3}) cases\b", text, re.M)} | {
            int(n) for n in re.findall(r"owed (\d{3}) case\(s\)", text)}
        assert stated == {count}, f"docs/{doc} says {sorted(stated)} cases; the suite has {count}"


def test_retries_is_worded_alike_in_run_help_and_the_docs(capsys: pytest.CaptureFixture[str]) -> None:
    from convmatrix.cli.main import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    sessions = " ".join((REPO / "docs" / "sessions.md").read_text().split())
    assert "up to N more times" in sessions and "up to N more times" in helptext


def test_the_first_run_says_what_a_cpu_runner_needs_and_what_was_measured() -> None:
    """A CPU runner refuses the default matrix's CUDA stacks without CONVMATRIX_ALLOW_CPU=1 (exit 2):
    the first run's paragraph says so, and its time is the one docs/performance.md measured."""
    first = (REPO / "docs" / "sessions.md").read_text().split("## A first run", 1)[1].split("## ", 1)[0]
    assert "CONVMATRIX_ALLOW_CPU=1" in first
    assert "about a minute" not in first
    assert "docs/performance.md" in first
