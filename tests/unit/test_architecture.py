"""The package's shape (docs/architecture.md): each folder a stage, every import pointing down
the stages, no import cycle, no function-level import hiding one, and package faces light
enough for nox's own interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit import REPO

SRC = REPO / "src"
PACKAGE = SRC / "convmatrix"
# The stages, lowest first. A module may import its own package and any lower stage; packages of
# one stage are siblings and never import each other (report and triage; engines and prove). The
# shared basics of the first stage are single modules and may use one another (popen, interrupts).
STAGES: tuple[tuple[str, ...], ...] = (
    ("convmatrix", "convmatrix.errors", "convmatrix.escape", "convmatrix.home", "convmatrix.interrupts",
     "convmatrix.popen", "convmatrix.shipped", "convmatrix.tree", "convmatrix.jsonread", "convmatrix.tomlwrite",
     "convmatrix.forkmap"),
    ("convmatrix.matrix",),
    ("convmatrix.gpus",),
    ("convmatrix.results",),
    ("convmatrix.history",),
    ("convmatrix.report", "convmatrix.triage"),
    ("convmatrix.capture",),  # cases from outside the suite: the zoo records through triage/from_model
    ("convmatrix.run",),
    ("convmatrix.engines", "convmatrix.prove"),
    ("convmatrix.explore",),  # above prove: a find's repro is prove/minimal's script
    ("convmatrix.atlas",),
    ("convmatrix.cli",),
    ("convmatrix.__main__",),
)
# What noxfile.py imports into nox's interpreter, which has neither rich, docker nor tabulate.
THIRD_PARTY = ("rich", "docker", "tabulate")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def owner(module: str) -> str:
    """The stage unit a module belongs to: its subpackage (convmatrix.report), or itself at the top."""
    parts = module.split(".")
    if len(parts) > 1 and f"convmatrix.{parts[1]}" in MODULES and (PACKAGE / parts[1]).is_dir():
        return f"convmatrix.{parts[1]}"
    return module


def stage(module: str) -> int:
    unit = owner(module)
    for level, units in enumerate(STAGES):
        if unit in units:
            return level
    raise AssertionError(f"{module}: in no stage of STAGES; give it one (and a place in docs/architecture.md)")


def imports(path: Path) -> Iterator[tuple[str, int, bool]]:
    """(imported convmatrix module, line, whether at function level) for each import in path."""
    tree = ast.parse(path.read_text(), str(path))
    nested: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested |= {id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from convmatrix.report import grid` imports the module convmatrix.report.grid.
            targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                       for a in node.names]
        else:
            continue
        for target in targets:
            if target == "convmatrix" or target.startswith("convmatrix."):
                yield target, node.lineno, id(node) in nested


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges[name] = {target for target, _, _ in imports(path) if target != name}
        # Importing a submodule runs its package's face first.
        parent = name.rpartition(".")[0]
        if parent and name != "convmatrix":
            edges[name].add(parent)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle through a package face's import of its own submodules counts (a face that imports
    a module that imports the face is the one allowed loop: Python resolves the submodule)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt.startswith(node + "."):
                continue  # a face importing its own submodule: the parent edge runs the other way
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_every_module_has_a_stage() -> None:
    for name in MODULES:
        stage(name)


def test_there_is_no_import_cycle() -> None:
    edges = graph()
    # A package's own face imports its submodules; a submodule's edge to its parent is that face.
    flat = {m: {t for t in ts if not (m.startswith(t + ".") and t != "convmatrix")} for m, ts in edges.items()}
    assert cycles(flat) == []


def test_every_import_points_down_the_stages() -> None:
    upward = []
    for name, path in MODULES.items():
        for target, line, _ in imports(path):
            if owner(target) == owner(name):
                continue
            below = stage(target) < stage(name) or (stage(target) == stage(name) == 0)
            if not below:
                upward.append(f"{path.relative_to(REPO)}:{line}: {name} (stage {stage(name)}) imports "
                              f"{target} (stage {stage(target)})")
    assert upward == []


def test_a_function_level_import_says_why() -> None:
    """Lazy imports are for start-up time only, and say so; none may hide a cycle (the graph
    above counts them like any other)."""
    silent = []
    for path in MODULES.values():
        lines = path.read_text().splitlines()
        for _target, line, nested in imports(path):
            if nested and "#" not in lines[line - 1]:
                silent.append(f"{path.relative_to(REPO)}:{line}: {lines[line - 1].strip()}")
    assert silent == []


def test_no_type_checking_imports_of_the_package() -> None:
    """A TYPE_CHECKING import of a convmatrix module is a cycle worked around, not removed."""
    found = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                found += [f"{path.relative_to(REPO)}:{n.lineno}" for n in ast.walk(node)
                          if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("convmatrix")]
    assert found == []


def test_no_face_exports_a_name_its_package_has_a_module_of() -> None:
    """`matrix/load.py` beside a face exporting `load` would make convmatrix.matrix.load the module
    or the function depending on what was imported first."""
    clashes = []
    for name, path in MODULES.items():
        if path.name != "__init__.py":
            continue
        exported = {a.asname or a.name for n in ast.walk(ast.parse(path.read_text()))
                    if isinstance(n, ast.ImportFrom) for a in n.names}
        clashes += [f"{name}.{e}" for e in exported if f"{name}.{e}" in MODULES]
    assert clashes == []


def noxfile_imports() -> list[str]:
    return sorted({target for target, _, _ in imports(REPO / "noxfile.py")})


def test_the_faces_and_what_the_noxfile_imports_load_in_a_bare_interpreter() -> None:
    """No site-packages at all (-S -I): what noxfile.py imports, and every package face, must load
    on the standard library alone, as in nox's own interpreter."""
    faces = sorted(module_name(p) for p in PACKAGE.rglob("__init__.py"))
    wanted = [*noxfile_imports(), *faces]
    assert "convmatrix.matrix" in wanted and "convmatrix.run.options" in wanted
    script = (f"import sys; sys.path.insert(0, {str(SRC)!r}); import importlib\n"
              f"for m in {wanted!r}: importlib.import_module(m)\n"
              f"print(sorted(m for m in sys.modules if m.split('.')[0] in {THIRD_PARTY!r}))")
    done = subprocess.run([sys.executable, "-S", "-I", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["convmatrix.report.model", "convmatrix.report.verdicts"])
def test_the_report_never_loads_the_log_scanner(module: str) -> None:
    """The report reads a cell's stored first cause (first_cause.json); the cli hands in the rest."""
    script = (f"import sys; sys.path.insert(0, {str(SRC)!r}); import {module}; "
              f"print('convmatrix.triage.scan' in sys.modules)")
    done = subprocess.run([sys.executable, "-S", "-I", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"



# The CLI runs where there is no torch (the harness installs torch in each cell's venv, not its own):
# no module imports it. `convmatrix cases --from-model` records in a child interpreter, whose code
# (suites/capture.py) imports torch there (issue 46).
TORCH_IMPORTERS: set[str] = set()


def test_only_the_model_recorder_imports_torch_and_lazily() -> None:
    found: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                       [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(t == "torch" or t.startswith("torch.") for t in targets):
                found.setdefault(name, []).append("top level" if id(node) in top else "lazily")
    assert set(found) == TORCH_IMPORTERS
    assert all(where == "lazily" for places in found.values() for where in places)
    script = (f"import sys; sys.path.insert(0, {str(SRC)!r}); import convmatrix.cli.main, "
              "convmatrix.triage.from_model; print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"

# tree.py is the one writer under a run or the home (docs/architecture.md). A write is an `open`
# for writing, `os.open` with a flag that writes or creates, a Path's write_text/write_bytes/
# mkdir/unlink/rename/touch/symlink_to, and os's or shutil's calls that make, move or remove
# files. tree.Tree's own methods of those names take the name as their first argument (Path's
# take none, or the content or the target), which is how the scan tells them apart. What is left
# outside tree.py writes elsewhere, or is listed here with its reason.
WRITERS_ALLOWED = {
    "convmatrix/tree.py": "the owner itself",
    "convmatrix/home.py": "lock files (O_NOFOLLOW, their folders made path by path) and the machine's "
                          "shared /tmp/convmatrix-image-locks; to move into tree.py next",
    "convmatrix/cli/main.py": "/dev/null for a closed stdout: no file under a run",
    "convmatrix/cli/output.py": "-o's folder, a place the user names (the file itself: rundir.write_whole)",
    "convmatrix/capture/zoo.py": "the zoo's files in the checkout's suites/models (or --out): source, not a run",
    "convmatrix/cli/cases.py": "a probe in a fresh temporary folder",
    "convmatrix/engines/slurm.py": "the sbatch scripts in <out>/slurm/, written before any cell runs (the MIG "
                                   "worker's module: not touched in issue 32)",
    "convmatrix/prove/bisect.py": "the step matrices in <out>/matrices/, before any cell runs",
    "convmatrix/run/options.py": "reports/runs/LATEST in the working folder, not a run",
    "convmatrix/run/lanes/images.py": "a build context in a fresh temporary folder",
    "convmatrix/run/lanes/base_image.py": "a base image's root file system being assembled, not a run",
    "convmatrix/run/lanes/containers.py": "the folder of Podman's service socket",
}
_WRITE_FLAGS = ("O_CREAT", "O_WRONLY", "O_RDWR", "O_APPEND", "O_TRUNC")
_OS_WRITES = {"mkdir", "makedirs", "unlink", "remove", "rmdir", "rename", "replace", "renames", "symlink", "link"}
_SHUTIL_WRITES = {"rmtree", "copy", "copy2", "copyfile", "copytree", "move"}


def writes(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
        positional = len(node.args)
        mode = next((k.value for k in node.keywords if k.arg == "mode"), None)
        if name == "open" and owner == "os":
            written = positional > 1 and any(f in ast.unparse(node.args[1]) for f in _WRITE_FLAGS)
        elif name == "open" and not owner:
            mode = node.args[1] if positional > 1 else mode
            written = isinstance(mode, ast.Constant) and bool(set(str(mode.value)) & set("wax+"))
        elif name == "open":  # Path.open(mode)
            mode = node.args[0] if positional else mode
            written = isinstance(mode, ast.Constant) and bool(set(str(mode.value)) & set("wax+"))
        elif owner == "os":
            written = name in _OS_WRITES
        elif owner == "shutil":
            written = name in _SHUTIL_WRITES
        elif name in ("mkdir", "unlink", "touch"):
            written = positional == 0  # Path's; Tree's take the name
        elif name in ("write_text", "write_bytes", "rename", "symlink_to", "hardlink_to"):
            written = positional == 1  # Path's; Tree.write_text and Tree.rename take the name first
        else:
            written = False
        if written:
            yield node.lineno, ast.unparse(node)[:100]


def test_tree_is_the_only_writer_under_a_run_or_the_home() -> None:
    found = [f"{path.relative_to(SRC)}:{line}: {text}" for path in MODULES.values()
             for line, text in writes(path) if str(path.relative_to(SRC)) not in WRITERS_ALLOWED]
    assert found == []


def test_the_write_scan_sees_each_kind_of_write(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os, shutil\nopen(p, 'w')\nos.open(p, os.O_WRONLY | os.O_CREAT)\np.write_text('x')\n"
                      "p.mkdir(parents=True)\np.unlink()\nshutil.rmtree(p)\nos.replace(a, b)\np.open('ab')\n"
                      "tree.write_text('name', 'x')\ntree.mkdir('name')\ntree.unlink('name')\nopen(p)\n")
    assert [line for line, _ in writes(sample)] == [2, 3, 4, 5, 6, 7, 8, 9]


# The one judged night (results/night.py): only results/ judges. Whatever is above it reads the
# verdicts the night holds and asks it what is red, never the verdict functions themselves.
JUDGES = frozenset({"case_verdict", "cell_verdict", "fails", "RED"})
VERDICTS = "convmatrix.results.verdicts"


def judging(path: Path, text: str | None = None) -> list[str]:
    """Where a module calls a verdict function or reads RED: imported by name, or through an alias
    of the verdicts module."""
    tree = ast.parse(path.read_text() if text is None else text, str(path))
    aliases: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == VERDICTS:
            found += [f"{path.relative_to(REPO)}:{node.lineno}: imports {a.name}" for a in node.names
                      if a.name in JUDGES]
        elif isinstance(node, ast.ImportFrom) and node.module == "convmatrix.results":
            aliases |= {a.asname or a.name for a in node.names if a.name == "verdicts"}
        elif isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == VERDICTS}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in JUDGES
                and ast.unparse(node.value) in aliases):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_results_judges() -> None:
    """Issue 45: history, prove and the atlas each rebuilt their own idea of red (history stored
    `verdict in RED` for cases whose control was sick). Only results/ may judge."""
    found = [hit for name, path in MODULES.items() if owner(name) != "convmatrix.results" for hit in judging(path)]
    assert found == []


def test_the_judging_rule_finds_a_module_that_judges(tmp_path: Path) -> None:
    """The rule above can fail: both ways of reaching the verdict functions are seen."""
    probe = REPO / "probe.py"
    text = ("from convmatrix.results.verdicts import RED\nfrom convmatrix.results import verdicts as v\n"
            "def f(x):\n    return x in RED or v.fails(x)\n")
    assert len(judging(probe, text)) == 2
