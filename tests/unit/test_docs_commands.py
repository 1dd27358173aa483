"""The commands the README and docs give are ones a user can paste (issue 34 items 5 and 7): what
they write goes under a folder git ignores, and the red-cell recipe's fault file is one the
tests' fault plugin accepts."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess

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
