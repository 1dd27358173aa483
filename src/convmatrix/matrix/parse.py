"""Matrix files (matrix/*.toml): strict parsing, expansion into cells, pruning, the control."""

from __future__ import annotations

import itertools
import os
import tomllib
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from convmatrix.errors import BadInput
from convmatrix.matrix import knobs, values
from convmatrix.matrix.cells import ENGINES, Cell
from convmatrix.matrix.prune import impossible
from convmatrix.shipped import shipped

TOP_KEYS = {"name", "description", "wheelhouse", "cases", "axes", "include", "exclude", "control", "container",
            "fleet", "expected_skip", "allow_cpu"}
SKIP_KEYS = {"cells", "cases", "reason"}
MAX_SKIPS = 64  # [[expected_skip]] entries (results/read.py reads at most as many from a cell.json)
MAX_GLOBS = 64  # globs in one entry's cells or cases
MAX_GLOB = 200  # characters of one glob
MAX_REASON = 500
MAX_CASE_FILES = 64
FLEET_KEYS = {"gpus"}
CONTAINER_KEYS = {"base", "flavour", "engine"}
FLAVOURS = ("wheel", "system")
CELL_AXES = ("lane", "torch", "cuda", "cudnn", "python")
SHOWN_REASONS = 4  # reasons the "no cells" error spells out; the rest are counted
DEFAULT_MATRIX = "matrix/default.toml"


def default_matrix() -> str:
    """The matrix a command runs when none is named: $CONVMATRIX_MATRIX, else matrix/default.toml
    (relative to the current directory, the checkout, as the nox sessions run it)."""
    return os.environ.get("CONVMATRIX_MATRIX") or DEFAULT_MATRIX


@dataclass(frozen=True, kw_only=True)
class Pruned:
    values: dict[str, str]
    reason: str


@dataclass(frozen=True, kw_only=True)
class ExpectedSkip:
    cells: tuple[str, ...]  # cell id globs
    cases: tuple[str, ...]  # case id globs
    reason: str


@dataclass(frozen=True, kw_only=True)
class Matrix:
    path: Path
    name: str
    wheelhouse: Path | None
    cells: tuple[Cell, ...]
    pruned: tuple[Pruned, ...]
    control: Cell | None
    # Cells whose absence fails nothing ([[include]] optional = true): shown when not run, greyed.
    optional: frozenset[str] = frozenset()
    fleet_gpus: tuple[str, ...] = ()  # [fleet].gpus: the GPU generations a merged run must cover
    # `cases`: user case files (suites/casefile.py) every cell runs beside the catalog, resolved
    # against the matrix file's directory; their content is checked when a run starts.
    cases: tuple[Path, ...] = ()
    # [[expected_skip]]: skips of cases the control ran that the matrix declares expected on some
    # cells (each shown as declared; never a failure or a missing case): (cell globs, case globs, reason).
    expected_skips: tuple[ExpectedSkip, ...] = ()
    # allow_cpu = true: its CUDA stacks may run on a runner without a GPU, on the CPU, on purpose
    # (the default matrix: a first run anywhere); otherwise such a run is refused (--allow-cpu).
    allow_cpu: bool = False

    def skips_for(self, cell_id: str) -> list[dict[str, Any]]:
        """The expected skips that apply to a cell, as its cell.json carries them."""
        return [{"cases": list(s.cases), "reason": s.reason} for s in self.expected_skips
                if any(fnmatchcase(cell_id, glob) for glob in s.cells)]

    def lane(self, lane: str) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.lane == lane)

    def cell(self, cell_id: str) -> Cell:
        for cell in self.cells:
            if cell.id == cell_id:
                return cell
        raise BadInput(f"{self.path}: no cell {cell_id!r} in this matrix")

    def through(self, engine: str) -> Matrix:
        """The same matrix with its container cells run by another engine (run option --engine)."""
        if engine not in ENGINES:
            raise BadInput(f"run options: --engine {engine!r} is not one of {', '.join(ENGINES)}")
        return replace(self, cells=tuple(run_by(c, engine) for c in self.cells),
                       control=run_by(self.control, engine) if self.control else None)


def run_by(cell: Cell, engine: str) -> Cell:
    """The cell run by that engine: a container cell's engine; other lanes have none."""
    return replace(cell, engine=engine) if cell.lane == "container" else cell


def load(path: str | Path) -> Matrix:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if str(path) != DEFAULT_MATRIX:
            raise BadInput(f"{path}: no such matrix file") from None
        # The default is a checkout's: an installed convmatrix run elsewhere says where to look.
        examples = shipped("matrix/examples", "fix-proof.toml")
        raise BadInput(f"{path}: no such matrix file (the default, looked for in the current directory as in a "
                       f"checkout): give -m MATRIX, e.g. one of {examples}/") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{path}: not valid TOML: {exc}") from None
    return _Parser(path).parse(raw)


class _Parser:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.flavour = "wheel"

    def fail(self, where: str, message: str) -> BadInput:
        return BadInput(f"{self.path}: {where}: {message}")

    def parse(self, raw: dict[str, Any]) -> Matrix:
        self.keys(raw, TOP_KEYS, "top level")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise self.fail("name", "required: a non-empty string")
        if not name.isprintable():
            raise self.fail("name", f"{name!a} holds control or format characters")
        container = self.table(raw, "container")
        self.keys(container, CONTAINER_KEYS, "[container]")
        default_base = self.value("base", container["base"], "[container].base") if "base" in container else ""
        self.flavour = container.get("flavour", "wheel")
        if self.flavour not in FLAVOURS:
            raise self.fail("[container].flavour", f"{self.flavour!r} is not one of {', '.join(FLAVOURS)}")
        engine = container.get("engine", "docker")
        if engine not in ENGINES:
            raise self.fail("[container].engine", f"{engine!r} is not one of {', '.join(ENGINES)}")
        axes = self.axes(self.table(raw, "axes"))
        base_is_axis = "base" in axes
        cells, pruned = self.expand(axes, default_base, base_is_axis)
        cells = with_knobs(cells, axes.get("knobs"))
        cells, pruned, excluded = self.exclude(raw, cells, pruned)
        optional: set[str] = set()
        cells = self.include(raw, axes, cells, default_base, base_is_axis, optional)
        if not cells:
            raise self.fail("[axes]", no_cells(axes, pruned, excluded))
        cells = [run_by(c, engine) for c in cells]
        control = self.control(raw, cells, pruned)
        wheelhouse = raw.get("wheelhouse")
        if wheelhouse is not None and not isinstance(wheelhouse, str):
            raise self.fail("wheelhouse", "must be a path string")
        if wheelhouse is not None and (not wheelhouse or not wheelhouse.isprintable()):
            raise self.fail("wheelhouse", f"{wheelhouse!a} is not a path (empty, or a control character)")
        allow_cpu = raw.get("allow_cpu", False)
        if not isinstance(allow_cpu, bool):
            raise self.fail("allow_cpu", "must be true or false")
        return Matrix(
            path=self.path,
            name=name,
            allow_cpu=allow_cpu,
            # Relative to where nox runs (the repo root), like every other path it is given.
            wheelhouse=Path(wheelhouse).resolve() if wheelhouse else None,
            cells=tuple(cells),
            pruned=tuple(pruned),
            control=control,
            optional=frozenset(optional - ({control.id} if control else set())),
            fleet_gpus=self.fleet(raw),
            cases=self.cases(raw),
            expected_skips=self.expected_skips(raw, cells),
        )

    def expected_skips(self, raw: dict[str, Any], cells: list[Cell]) -> tuple[ExpectedSkip, ...]:
        entries = self.tables(raw, "expected_skip")
        if len(entries) > MAX_SKIPS:
            raise self.fail("expected_skip", f"at most {MAX_SKIPS} [[expected_skip]] tables")
        found = []
        for n, entry in enumerate(entries):
            where = f"expected_skip[{n}]"
            self.keys(entry, SKIP_KEYS, where)
            globs = {key: self.globs(entry, key, where) for key in ("cells", "cases")}
            reason = entry.get("reason")
            if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON \
                    or not reason.isprintable():
                raise self.fail(f"{where}.reason", f"required: why the skip is expected, one printable line of at "
                                f"most {MAX_REASON} characters")
            if not any(fnmatchcase(c.id, glob) for c in cells for glob in globs["cells"]):
                raise self.fail(f"{where}.cells", f"{', '.join(globs['cells'])} matches no cell of this matrix "
                                "(`convmatrix matrix` lists the cell ids)")
            found.append(ExpectedSkip(cells=globs["cells"], cases=globs["cases"], reason=reason))
        return tuple(found)

    def globs(self, entry: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
        listed = entry.get(key)
        if not isinstance(listed, list) or not 1 <= len(listed) <= MAX_GLOBS or not all(
                isinstance(g, str) and g and len(g) <= MAX_GLOB and g.isprintable() for g in listed):
            raise self.fail(f"{where}.{key}", f"required: a list of 1 to {MAX_GLOBS} globs (fnmatch: * ? [..]), "
                            f"each a printable string of at most {MAX_GLOB} characters")
        return tuple(listed)

    def cases(self, raw: dict[str, Any]) -> tuple[Path, ...]:
        listed = raw.get("cases", [])
        if not isinstance(listed, list) or len(listed) > MAX_CASE_FILES:
            raise self.fail("cases", f"expected a list of at most {MAX_CASE_FILES} case file paths")
        found = []
        for item in listed:
            if not isinstance(item, str) or not item or not item.isprintable():
                raise self.fail("cases", f"{item!a} is not a path (empty, not a string, or a control character)")
            path = (self.path.parent / item).resolve()
            if not path.is_file():
                raise self.fail("cases", f"{item}: no such case file (paths are relative to the matrix file)")
            found.append(path)
        return tuple(found)

    def fleet(self, raw: dict[str, Any]) -> tuple[str, ...]:
        table = self.table(raw, "fleet")
        self.keys(table, FLEET_KEYS, "[fleet]")
        listed = table.get("gpus", [])
        if not isinstance(listed, list) or not all(values.is_gpu_key(g) for g in listed):
            raise self.fail("[fleet].gpus", "must be a list of GPU keys like \"h100-sm90\" or \"h200-sm90-mig3g-71gb\" "
                            "(what a result directory is named by: docs/contracts.md, GPU keys)")
        return tuple(dict.fromkeys(listed))

    def keys(self, table: dict[str, Any], allowed: set[str] | tuple[str, ...], where: str) -> None:
        for key in table:
            if key not in allowed:
                raise self.fail(where, f"unknown key {key!r} (allowed: {', '.join(sorted(allowed))})")

    def table(self, raw: dict[str, Any], key: str) -> dict[str, Any]:
        table = raw.get(key, {})
        if not isinstance(table, dict):
            raise self.fail(key, "must be a table")
        return table

    def tables(self, raw: dict[str, Any], key: str) -> list[dict[str, Any]]:
        entries = raw.get(key, [])
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise self.fail(key, f"must be [[{key}]] tables")
        return entries

    def value(self, key: str, value: object, where: str) -> str:
        problem = values.check(key, value)
        if problem:
            raise self.fail(where, problem)
        assert isinstance(value, str)
        return value

    def axes(self, table: dict[str, Any]) -> dict[str, list[str]]:
        self.keys(table, values.AXES, "[axes]")
        axes: dict[str, list[str]] = {}
        for key, items in table.items():
            if not isinstance(items, list) or not items:
                raise self.fail(f"[axes].{key}", "must be a non-empty list")
            axes[key] = [self.value(key, v, f"[axes].{key}[{i}]") for i, v in enumerate(items)]
        return axes

    def expand(
        self, axes: dict[str, list[str]], default_base: str, base_is_axis: bool
    ) -> tuple[list[Cell], list[Pruned]]:
        if not axes:
            return [], []
        lanes = axes.get("lane")
        if not lanes:
            raise self.fail("[axes].lane", "required when [axes] is given")
        cells: list[Cell] = []
        pruned: list[Pruned] = []
        for lane in lanes:
            if lane == "host":
                cells.append(Cell(lane="host"))
                continue
            stack = self.stack_axes(lane, axes)
            missing = [k for k in CELL_AXES if k not in stack]
            if missing:
                raise self.fail(f"[axes].{missing[0]}", f"required for lane {lane!r}")
            bases = self.bases(lane, axes, default_base, "[axes]")
            combos = itertools.product(stack["torch"], stack["cuda"], stack["cudnn"], stack["python"], bases)
            for torch, cuda, cudnn, python, base in combos:
                cell = Cell(lane=lane, torch=torch, cuda=cuda, cudnn=cudnn, python=python,
                            base=base, base_in_id=base_is_axis and lane == "container",
                            flavour=self.flavour if lane == "container" else "")
                self.keep_or_prune(cell, cells, pruned)
        return cells, pruned

    def stack_axes(self, lane: str, axes: dict[str, list[str]]) -> dict[str, list[str]]:
        """The axes a lane's cells are made of: a system base's container cells take what the
        axes leave out (torch, cuda, cudnn, python) from the image."""
        if lane != "container" or self.flavour != "system":
            return axes
        return {**{key: [values.IMAGE] for key in values.FROM_IMAGE}, **axes}

    def bases(self, lane: str, axes: dict[str, list[str]], default_base: str, where: str) -> list[str]:
        if lane != "container":
            return [""]
        if "base" in axes:
            return axes["base"]
        if not default_base:
            raise self.fail(where, "container cells need a base image: set [container].base")
        return [default_base]

    @staticmethod
    def keep_or_prune(cell: Cell, cells: list[Cell], pruned: list[Pruned]) -> None:
        reason = impossible(cell)
        if reason:
            pruned.append(Pruned(values=cell.values(), reason=reason))
        elif cell not in cells:
            cells.append(cell)

    def partial(self, entry: dict[str, Any], where: str) -> dict[str, str]:
        self.keys(entry, values.AXES, where)
        given = {k: self.value(k, v, f"{where}.{k}") for k, v in entry.items()}
        if "knobs" in given:
            given["knobs"] = knobs.canonical(given["knobs"])  # matched as Cell.knobs holds it
        return given

    def exclude(
        self, raw: dict[str, Any], cells: list[Cell], pruned: list[Pruned]
    ) -> tuple[list[Cell], list[Pruned], int]:
        """The cells and pruned combinations no [[exclude]] matches, and how many one did."""
        before = len(cells) + len(pruned)
        for i, entry in enumerate(self.tables(raw, "exclude")):
            match = self.partial(entry, f"[[exclude]] #{i + 1}")
            cells = [c for c in cells if not _matches(c.values(), match)]
            pruned = [p for p in pruned if not _matches(p.values, match)]
        return cells, pruned, before - len(cells) - len(pruned)

    def include(
        self, raw: dict[str, Any], axes: dict[str, list[str]], cells: list[Cell],
        default_base: str, base_is_axis: bool, optional: set[str],
    ) -> list[Cell]:
        for i, entry in enumerate(self.tables(raw, "include")):
            where = f"[[include]] #{i + 1}"
            entry = dict(entry)
            wanted = entry.pop("optional", False)
            if not isinstance(wanted, bool):
                raise self.fail(f"{where}.optional", "must be true or false")
            given = self.partial(entry, where)
            cell = self.explicit_cell(given, axes, default_base, base_is_axis, where)
            reason = impossible(cell)
            if reason:
                raise self.fail(where, f"impossible stack {cell.id}: {reason}")
            # An include that names no knob set gets a cell per set of the axis, as the axes' cells do.
            for knobbed in [cell] if "knobs" in given else with_knobs([cell], axes.get("knobs")):
                if knobbed not in cells:
                    cells.append(knobbed)
                if wanted:
                    optional.add(knobbed.id)
        return cells

    def explicit_cell(
        self, given: dict[str, str], axes: dict[str, list[str]], default_base: str,
        base_is_axis: bool, where: str,
    ) -> Cell:
        lane = given.get("lane")
        if lane is None:
            raise self.fail(where, "needs 'lane'")
        if lane == "host":
            return Cell(lane="host", knobs=given.get("knobs", ""))
        filled = dict(given)
        axes = self.stack_axes(lane, axes)
        for key in CELL_AXES:
            if key not in filled:
                # A single-valued axis is the matrix-wide setting; several values are ambiguous.
                if len(axes.get(key, [])) != 1:
                    raise self.fail(where, f"needs {key!r} (the axes do not give one value for it)")
                filled[key] = axes[key][0]
        if lane == "container" and "base" not in filled:
            if base_is_axis:
                raise self.fail(where, "needs 'base' (base is an axis)")
            filled["base"] = self.bases(lane, {}, default_base, where)[0]
        if lane != "container":
            filled.pop("base", None)
        return Cell(**filled, base_in_id=base_is_axis and lane == "container",
                    flavour=self.flavour if lane == "container" else "")

    def control(self, raw: dict[str, Any], cells: list[Cell], pruned: list[Pruned]) -> Cell | None:
        if "control" not in raw:
            return None
        match = self.partial(self.table(raw, "control"), "[control]")
        if not match:
            raise self.fail("[control]", "names no axis values")
        found = [c for c in cells if _matches(c.values(), match)]
        if len(found) > 1 and "knobs" not in match:
            found = [c for c in found if not c.knobs] or found  # the stack under the suite's defaults
        if len(found) == 1:
            return found[0]
        if found:
            ids = ", ".join(c.id for c in found)
            raise self.fail("[control]", f"matches {len(found)} cells ({ids}); give more keys")
        reasons = [p.reason for p in pruned if _matches(p.values, match)]
        if not reasons and match.get("lane"):
            try:
                reason = impossible(self.explicit_cell(match, {}, "", False, "[control]"))
            except BadInput:
                reason = None
            reasons = [reason] if reason else []
        if reasons:
            raise self.fail("[control]", f"names an impossible stack: {reasons[0]}")
        raise self.fail("[control]", f"matches no cell of this matrix: {match}")


def no_cells(axes: dict[str, list[str]], pruned: list[Pruned], excluded: int) -> str:
    """Why a matrix has no cells, on one line: what was excluded, and which values were pruned and
    why, one entry per reason (the values its combinations share, then the stack facts' reason)."""
    if not axes:
        return "no cells: give [axes] or [[include]]"
    if not pruned:
        return "no cells: every combination was excluded by [[exclude]]"
    if excluded:
        were = "was" if len(pruned) == 1 else "were"
        head = (f"{excluded} combination{'s' if excluded > 1 else ''} excluded by [[exclude]], "
                f"the other {len(pruned)} {were} pruned")
    else:
        head = "the only combination was pruned" if len(pruned) == 1 else f"all {len(pruned)} combinations were pruned"
    groups: dict[str, list[dict[str, str]]] = {}
    for p in pruned:
        groups.setdefault(p.reason, []).append(p.values)
    ranked = sorted(groups.items(), key=lambda item: -len(item[1]))  # the widest reasons first
    entries = [f"{_shared_values(axes, group)}{_count(len(group))}: {reason}" for reason, group in ranked]
    rest = entries[SHOWN_REASONS:]
    if rest:
        hidden = sum(len(group) for _, group in ranked[SHOWN_REASONS:])
        entries = [*entries[:SHOWN_REASONS], f"and {len(rest)} more reason{'s' if len(rest) > 1 else ''}"
                   f"{_count(hidden)}"]
    return f"no cells: {head}: " + "; ".join(entries)


def _shared_values(axes: dict[str, list[str]], group: list[dict[str, str]]) -> str:
    """The values that set a group of pruned combinations apart: on each axis with several values,
    the ones the group has (where it has not all of them); where that names nothing, the stack."""
    order = [k for k in (*CELL_AXES, "base") if k in axes]
    parts = []
    for key in (k for k in order if len(axes[k]) > 1):
        seen = list(dict.fromkeys(v.get(key, "") for v in group))
        if set(seen) != set(axes[key]):
            parts.append(f"{key}={'|'.join(seen)}")
    if not parts:
        parts = [f"{k}={group[0][k]}" for k in CELL_AXES[1:] if k in group[0] and len(axes.get(k, ())) <= 1]
    return " ".join(parts)


def _count(n: int) -> str:
    return f" ({n} combinations)" if n > 1 else ""


def _matches(cell_values: dict[str, str], match: dict[str, str]) -> bool:
    # A value a cell does not record (knobs of a default cell) is "".
    return all(cell_values.get(k, "") == v for k, v in match.items())


def with_knobs(cells: list[Cell], sets: list[str] | None) -> list[Cell]:
    """A cell per knob set of the axis for each stack (the axis absent: the cells as they are)."""
    if not sets:
        return cells
    canonical = list(dict.fromkeys(knobs.canonical(s) for s in sets))  # "default" once, however spelt
    return [replace(cell, knobs=k) for cell in cells for k in canonical]
