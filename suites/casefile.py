"""User case files: a team's own convolutions, as `[[case]]` tables, run beside the catalog.

    pytest suites/ --cases cases/prod.toml [--cases more.json ...]

A file is TOML (read where the interpreter has tomllib, Python 3.11+) or the same data as JSON
(anywhere: the harness hands every lane JSON, so a base image on Python 3.10 runs them too):

    [[case]]
    name = "unet_up_1280"          # the case's tag: lower-case letters, digits, underscores, hyphens
    op = "conv2d"                  # conv1d/2d/3d, conv_transpose1d/2d/3d
    input = [2, 1280, 32, 32]      # the whole input shape, batch and channels first
    out_channels = 1280
    kernel = 3                     # an int, or one per spatial dimension
    padding = 1                    # stride, padding, dilation, output_padding likewise
    dtype = "float16"              # float32, float16, bfloat16, float64
    memory_format = "channels_last"
    direction = "backward"         # forward, backward, backward_input, backward_weight, double_backward
    benchmark = true               # cudnn.benchmark while the case runs (absent: the run's)
    sources = ["https://github.com/pytorch/pytorch/issues/..."]

A `[case.sweep]` table after a case lists values for named fields; the case expands to their
product (at most MAX_SWEEP, 256, a table; MAX_CASES a file, counted as the tables expand), each
expanded case tagged with its values:

    [case.sweep]
    batch = [31, 32]               # the input's first number; or any of SWEEP_FIELDS
    kernel = [1, 3]
    dtype = ["float32", "bfloat16"]  # 8 cases: prod-conv2d-bf16-k3-...-unet_up_1280-batch32-kernel3-dtype_bfloat16

A view of the input's own, and the weight's format apart from the input's:

    input_strides = [1024, 1, 1]   # the input's exact strides (as_strided over a buffer large enough)
    storage_offset = 0             # elements before the view's first, in that buffer
    weight_memory_format = "contiguous"  # e.g. an NCHW weight beside a channels_last input
    weight_strides = [576, 9, 3, 1]  # the weight's own view (a shard of a flat parameter buffer)
    weight_storage_offset = 4096   # elements before the weight's first, in that buffer

The other keys: groups, bias, autocast, layout (permuted, sliced, transposed, nhwc_strided),
deterministic, allow_tf32, via (eager, compile: through torch.compile; cuda_graph: replayed from a
captured CUDA graph, forward only, GPU only), gpu_only, source (a sentence: why the case exists) and
captured_from (where `convmatrix cases --from-log` found it, or the model and inputs `--from-model`
ran). A case's id is made as the catalog's are, prefixed with the file's stem:
`prod-conv2d-fp16-k3-p1-channels_last-bwd-bench_on-unet_up_1280`,
so `-k prod` selects a file's cases and results compare across stacks.

Every problem (every bad field of a case, not only the first; an id over records.CASE_ID's 160
characters) is one line naming the file, the case and the field; the suite stops with a usage
error (exit 4) before any case runs, `convmatrix cases` and `convmatrix run` with exit 2. Like
catalog.py this module imports neither torch nor pytest (the harness loads it by path), and it
keeps to Python 3.8 syntax.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from typing import Any, Callable, Sequence

MAX_FILE_BYTES = 4 << 20  # a case file is a few kB; a bigger one is a mistake, not data
MAX_CASES = 10000  # per file
MAX_EXTENT = 1 << 40  # any one dimension: beyond any GPU, and far from overflowing a float
MAX_ELEMENTS = 1 << 44  # elements in one tensor
MAX_SOURCES = 32
# An id's bound: records.CASE_ID's (a result's file name holds the id). Checked here, where ids
# are made, so that `cases` and `run` refuse what `report` would; a unit test holds the two equal
# (this module loads by path and imports no sibling).
MAX_ID = 160
MAX_TEXT = 2000  # characters of a free-text field
TOP_LEVEL = ("case", "description", "provenance")
# [provenance]: where a file's cases came from (issue 50; the zoo's files and explore's finds): the
# package and its version, the model (MODULE:CALLABLE), its config or keyword arguments, the inputs
# and dtype it ran on. Read and checked; no case's id or run depends on it.
PROVENANCE_REQUIRED = ("package", "version", "model", "inputs", "dtype")
PROVENANCE_KEYS = (*PROVENANCE_REQUIRED, "config", "kwargs", "backward", "channels_last", "torch", "recorded_by",
                   "matched", "notes")
# A case's name ends its id, whose parts are joined by '-': a name may hold hyphens as the
# catalogue's ids do (`dilated-det`), between words only, so that no name starts or ends a part
# empty and an id reads back as written.
NAME = re.compile(r"(?=.{1,64}\Z)[a-z0-9_]+(-[a-z0-9_]+)*\Z")
STEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}\Z")
URL = re.compile(r"https://[!-~]{1,2000}\Z")
SPATIAL_DIMS = {"conv1d": 1, "conv2d": 2, "conv3d": 3,
                "conv_transpose1d": 1, "conv_transpose2d": 2, "conv_transpose3d": 3}
DTYPES = ("float32", "float16", "bfloat16", "float64")
INPUT_DTYPES = (*DTYPES, "int64", "int32", "bool")  # a recorded model's inputs ([provenance] inputs)
MEMORY_FORMATS = ("contiguous", "channels_last", "channels_last_3d")
LAYOUTS = ("permuted", "sliced", "transposed", "nhwc_strided")
DIRECTIONS = ("forward", "backward", "backward_input", "backward_weight", "double_backward")
REQUIRED = ("name", "op", "input", "out_channels", "kernel")
# key -> (what it takes, checker). Checkers return the value for the case, or raise Bad.
KEYS = ("name", "op", "input", "out_channels", "kernel", "stride", "padding", "dilation", "groups",
        "output_padding", "bias", "dtype", "autocast", "memory_format", "layout", "direction", "benchmark",
        "deterministic", "allow_tf32", "via", "sources", "source", "gpu_only", "captured_from", "sweep",
        "input_strides", "storage_offset", "weight_memory_format", "weight_strides", "weight_storage_offset")
# [case.sweep]: the fields a sweep may list values for (a case's shape and settings; not its name,
# op or the texts), `batch` being the input's first number.
SWEEP_FIELDS = ("batch", "input", "out_channels", "kernel", "stride", "padding", "dilation", "groups",
                "output_padding", "bias", "dtype", "autocast", "memory_format", "layout", "direction", "benchmark",
                "deterministic", "allow_tf32", "via", "gpu_only", "input_strides", "storage_offset",
                "weight_memory_format", "weight_strides", "weight_storage_offset")
MAX_SWEEP = 256  # cases one [[case]] table's sweep expands to: a product grows fast
VIAS = ("eager", "compile", "cuda_graph")


class CaseFileError(Exception):
    """Problems with case files: one line each, "FILE: case N (NAME): FIELD: what is wrong"."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


class Bad(Exception):
    """A case's bad fields, a line each in `problems` (the caller adds the file and the case)."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = list(problems) or [message]


def stem_of(path: str) -> str:
    """The id prefix of a file's cases: its name without the last suffix (prod.toml -> prod)."""
    return os.path.splitext(os.path.basename(path))[0]


def read(path: str) -> dict[str, Any]:
    """A case file's data: TOML by its .toml suffix, JSON otherwise (tried as JSON first when the
    suffix says nothing), bounded in size."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise CaseFileError([f"{path}: cannot read it ({exc.strerror or exc})"]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise CaseFileError([f"{path}: over {MAX_FILE_BYTES >> 20} MiB; a case file is a few kB"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CaseFileError([f"{path}: not UTF-8 text (byte {exc.start})"]) from None
    if path.endswith(".toml"):
        try:
            import tomllib  # Python 3.11+; lazily, since the JSON path runs on older bases
        except ImportError:
            raise CaseFileError([f"{path}: this Python has no tomllib (3.11+): hand the suite the same "
                                 "data as JSON (convmatrix does)"]) from None
        try:
            data: Any = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise CaseFileError([f"{path}: not valid TOML: {exc}"]) from None
    else:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise CaseFileError([f"{path}: not valid JSON: {exc}"]) from None
    if not isinstance(data, dict):
        raise CaseFileError([f"{path}: expected a table of [[case]] entries"])
    return data


def entries(path: str, data: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The [[case]] tables of a file's data, and the problems of its top level."""
    problems = []
    for key in data:
        if key not in TOP_LEVEL:
            problems.append(f"{path}: {_printable(key)}: unknown top-level key{_hint(key, TOP_LEVEL)} "
                            "(cases go in [[case]] tables)")
    if "provenance" in data:
        problems += [f"{path}: provenance{problem}" for problem in provenance_problems(data["provenance"])]
    listed = data.get("case")
    if not isinstance(listed, list) or not listed:
        problems.append(f"{path}: case: no [[case]] tables")
        return [], problems
    if len(listed) > MAX_CASES:
        problems.append(f"{path}: case: {len(listed)} cases, at most {MAX_CASES} a file")
        return [], problems
    return listed, problems


def parse(path: str, case_class: Callable[..., Any], *, stem: str | None = None) -> list[Any]:
    """The cases of one file, as `case_class` (catalog.Case) objects; CaseFileError naming every
    problem. `stem` overrides the prefix (the harness hands a copy under another name)."""
    prefix = stem_of(path) if stem is None else stem
    if not STEM.match(prefix):
        raise CaseFileError([f"{path}: the file's name gives its cases' id prefix {_printable(prefix)!r}: "
                             "use up to 64 letters, digits, '_', '.', '+' and '-', starting with a letter "
                             "or digit"])
    listed, problems = entries(path, read(path))
    made: list[Any] = []
    by_id: dict[str, str] = {}
    swept = 0  # cases the tables so far expand to: bounded before they are made, not after
    for number, entry in enumerate(listed, 1):
        where = f"{path}: case {number}"
        if not isinstance(entry, dict):
            problems.append(f"{where}: expected a table")
            continue
        name = entry.get("name")
        if isinstance(name, str) and NAME.match(name):
            where += f" ({name})"
        try:
            expanded = sweep(entry)
        except Bad as exc:
            problems += [f"{where}: {problem}" for problem in exc.problems]
            continue
        swept += len(expanded)
        if swept > MAX_CASES:
            # 3,000 tables of 256 each would take a minute to make before one count refused them.
            problems.append(f"{where}: sweep: the file's cases pass {MAX_CASES} here, once swept (at most "
                            f"{MAX_CASES} a file)")
            break
        said: set[str] = set()  # a bad swept value fails each case it is in: said once
        for one, point in expanded:
            at = f"{where}, sweep {point}" if point else where
            try:
                fields = case_fields(one, prefix)
            except Bad as exc:
                for line in (f"{where}: {problem}" for problem in exc.problems):
                    if line not in said:
                        said.add(line)
                        problems.append(line)
                continue
            if point:
                # The table's name with a word per swept value (`sweep-batch31-kernel3-dtype_bfloat16`):
                # the ids differ by what was swept, `-k` finds them, and MAX_ID bounds the whole.
                fields["tag"] = f"{fields['tag']}-{words(one, entry['sweep'])}"
            try:
                case = case_class(**fields)
            except ValueError as exc:
                found = getattr(exc, "problems", None) or [str(exc)]
                problems += [f"{at}: {problem}" for problem in found]
                continue
            if len(case.id) > MAX_ID:
                problems.append(f"{at}: name: the id {case.id[:48]}... is {len(case.id)} characters, over "
                                f"{MAX_ID} (a result's file name holds it): shorten the name or the file's name")
                continue
            if case.id in by_id:
                problems.append(f"{at}: name: the same case as {by_id[case.id]} (id {case.id}): give each its "
                                "own name")
                continue
            by_id[case.id] = f"case {number}" + (f", sweep {point}" if point else "")
            made.append(case)
    if problems:
        raise CaseFileError(problems)
    return made


def load(paths: Sequence[str], case_class: Callable[..., Any], taken: Sequence[str] = ()) -> list[Any]:
    """Every file's cases, in order; two files of one stem, or a case whose id another file or
    the catalog (`taken`) already has, are problems too."""
    problems: list[str] = []
    made: list[Any] = []
    stems: dict[str, str] = {}
    seen = set(taken)
    for path in paths:
        stem = stem_of(path)
        if stem in stems:
            problems.append(f"{path}: the same name as {stems[stem]}: the ids of their cases would collide "
                            "(rename one)")
            continue
        stems[stem] = path
        try:
            cases = parse(path, case_class)
        except CaseFileError as exc:
            problems += exc.lines
            continue
        for case in cases:
            if case.id in seen:
                problems.append(f"{path}: {case.tag}: id {case.id} is taken")
            seen.add(case.id)
        made += cases
    if problems:
        raise CaseFileError(problems)
    return made


def provenance_problems(table: Any) -> list[str]:
    """What is wrong with a [provenance] table, a phrase each after `provenance` (".package: ...")."""
    if not isinstance(table, dict):
        return [f": {_shown(table)}: expected a table (package, version, model, inputs, dtype, ...)"]
    problems = [f".{_printable(key)}: unknown key{_hint(key, PROVENANCE_KEYS)}" for key in table
                if key not in PROVENANCE_KEYS]
    problems += [f".{key}: missing (required: {', '.join(PROVENANCE_REQUIRED)})" for key in PROVENANCE_REQUIRED
                 if key not in table]
    for key in ("package", "version", "model", "torch", "recorded_by", "notes"):
        if key not in table:
            continue  # a required one is said missing above
        value = table[key]
        if not isinstance(value, str) or len(value) > MAX_TEXT or (key in PROVENANCE_REQUIRED and not value):
            problems.append(f".{key}: {_shown(value)}: expected a text of 1 to {MAX_TEXT} characters")
    if "dtype" in table and table["dtype"] not in DTYPES:
        problems.append(f".dtype: {_shown(table['dtype'])}: expected one of {', '.join(DTYPES)}")
    for key in ("config", "kwargs"):
        if table.get(key) is not None and not isinstance(table[key], dict):
            problems.append(f".{key}: {_shown(table[key])}: expected a table (the model's {key})")
    for key in ("backward", "channels_last"):
        if key in table and not isinstance(table[key], bool):
            problems.append(f".{key}: {_shown(table[key])}: expected true or false")
    inputs = table.get("inputs", [])
    if not isinstance(inputs, list) or len(inputs) > 16:
        problems.append(".inputs: expected a list of at most 16 {shape, dtype} tables")
    else:
        for number, one in enumerate(inputs, 1):
            shape = one.get("shape") if isinstance(one, dict) else None
            if (not isinstance(one, dict) or set(one) - {"shape", "dtype"} or not isinstance(shape, list)
                    or not 1 <= len(shape) <= 8
                    or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_EXTENT for v in shape)
                    or one.get("dtype") not in INPUT_DTYPES):
                problems.append(f".inputs[{number}]: {_shown(one)}: expected {{shape: 1 to 8 whole numbers, dtype: "
                                f"one of {', '.join(INPUT_DTYPES)}}}")
    matched = table.get("matched", [])
    if not isinstance(matched, list) or not all(
            isinstance(m, dict) and set(m) == {"name", "catalog"} and all(isinstance(v, str) and len(v) <= MAX_ID
                                                                          for v in m.values()) for m in matched):
        problems.append(".matched: expected a list of {name, catalog} tables (a recorded case and the catalogue "
                        "case it is)")
    return problems


# --- sweeps -------------------------------------------------------------------------------------

def sweep(entry: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """A [[case]] table as the tables its [case.sweep] expands to (the product of the values it
    lists per field, in order: the last field varies fastest), each with its point ("batch=31
    kernel=3"); a table without a sweep is itself, with no point. Bad names every problem of the
    sweep. (parse tags each expanded case by the words of its point: `words`.)"""
    table = entry.get("sweep")
    if table is None:
        return [(entry, "")]
    if not isinstance(table, dict) or not table:
        raise Bad(f"sweep: {_shown(table)}: expected a table of fields, each a list of values ([case.sweep])")
    problems = []
    for field, values in table.items():
        if field not in SWEEP_FIELDS:
            hint = " (did you mean batch?)" if field in ("n", "N") else _hint(field, SWEEP_FIELDS)
            problems.append(f"sweep.{_printable(field)}: not a field a sweep takes{hint} "
                            f"(one of {', '.join(SWEEP_FIELDS)})")
        elif not isinstance(values, list) or not values:
            problems.append(f"sweep.{field}: {_shown(values)}: expected a list of values")
    if "batch" in table and "input" in table:
        problems.append("sweep.batch: sweep the input's shape or its batch, not both")
    if "batch" in table and not (isinstance(entry.get("input"), list) and entry["input"]):
        problems.append("sweep.batch: the case has no input shape to set the batch of")
    if problems:
        raise Bad(problems[0], problems)
    count = math.prod(len(values) for values in table.values())
    if count > MAX_SWEEP:
        sizes = " x ".join(str(len(values)) for values in table.values())
        raise Bad(f"sweep: {sizes} = {count} cases, at most {MAX_SWEEP} a [[case]] table")
    base = {key: value for key, value in entry.items() if key != "sweep"}
    points: list[tuple[dict[str, Any], str]] = [(base, "")]
    for field, values in table.items():
        points = [(_set(one, field, value), f"{point} {field}={_shown(value)}".strip())
                  for one, point in points for value in values]
    return [(one, point) for one, point in points]


def _set(entry: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    if field == "batch":
        return {**entry, "input": [value, *entry["input"][1:]]}
    return {**entry, field: value}


def words(entry: dict[str, Any], table: dict[str, Any]) -> str:
    """The swept fields' values as words of a name: batch31, kernel1x3, dtype_bfloat16, bias_off."""
    words = []
    for field in table:
        value = entry["input"][0] if field == "batch" else entry.get(field)
        if isinstance(value, bool):
            words.append(f"{field}_{'on' if value else 'off'}")
        elif isinstance(value, int):
            words.append(f"{field}{value}")
        elif isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            words.append(f"{field}{'x'.join(str(v) for v in value)}")
        else:  # a choice (checked with the case's other fields) or a bad value (said there)
            words.append(f"{field}_{re.sub(r'[^a-z0-9_]', '_', str(value).lower())[:20]}")
    return "-".join(words)


# --- one entry ---------------------------------------------------------------------------------

def case_fields(entry: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A [[case]] table as catalog.Case's keyword arguments; Bad naming every bad field (its
    `problems`), not only the first, so that one edit fixes a case."""
    problems: list[str] = []

    def take(check: Callable[..., Any], *args: Any) -> Any:
        try:
            return check(*args)
        except Bad as exc:
            problems.append(str(exc))
            return None

    for key in entry:
        if key not in KEYS:
            problems.append(f"{_printable(key)}: unknown key{_hint(key, KEYS)}")
    problems += [f"{key}: missing (required: {', '.join(REQUIRED)})" for key in REQUIRED if key not in entry]
    name = entry.get("name")
    if "name" in entry and (not isinstance(name, str) or not NAME.match(name)):
        problems.append(f"name: {_shown(name)}: use 1 to 64 lower-case letters, digits and underscores, "
                        "words joined by single hyphens")
    op = take(_choice, entry, "op", tuple(SPATIAL_DIMS), None) if "op" in entry else None
    dims = SPATIAL_DIMS.get(op) if op is not None else None
    n = c_in = None
    size: list[int] = []
    shape = entry.get("input")
    if dims is not None and "input" in entry:
        if not isinstance(shape, list) or len(shape) != dims + 2:
            problems.append(f"input: {_shown(shape)}: {op} takes {dims + 2} numbers (batch, channels, "
                            f"{dims} spatial)")
        else:
            numbers = [take(_int, "input", value, 1) for value in shape]
            if None not in numbers:
                n, c_in, *size = numbers
    fields: dict[str, Any] = {
        "op": op, "n": n, "c_in": c_in,
        "c_out": take(_int, "out_channels", entry["out_channels"], 1) if "out_channels" in entry else None,
        "size": size[0] if dims == 1 and size else tuple(size),
        "groups": take(_int, "groups", entry.get("groups", 1), 1),
        "bias": take(_bool, entry, "bias", True),
        "dtype": take(_choice, entry, "dtype", DTYPES, "float32"),
        "autocast": take(_autocast, entry),
        "memory_format": take(_choice, entry, "memory_format", MEMORY_FORMATS, "contiguous"),
        "layout": take(_layout, entry),
        "direction": take(_choice, entry, "direction", DIRECTIONS, "forward"),
        "benchmark": take(_bool, entry, "benchmark", None),
        "deterministic": take(_bool, entry, "deterministic", None),
        "tf32": take(_bool, entry, "allow_tf32", None),
        "gpu_only": take(_bool, entry, "gpu_only", False),
        "via": None if entry.get("via", "eager") == "eager" else take(_choice, entry, "via", VIAS, "eager"),
        "sources": take(_sources, entry),
        "source": take(_text, entry, "source") or f"the {prefix} case file",
        "tag": name,
        "prefix": prefix,
    }
    fields["storage_offset"] = take(_int, "storage_offset", entry.get("storage_offset", 0), 0)
    if "weight_memory_format" in entry:
        fields["weight_memory_format"] = take(_choice, entry, "weight_memory_format", MEMORY_FORMATS, None)
    if dims is not None and "input_strides" in entry:
        fields["input_strides"] = strides = take(_strides, entry, dims)
        if strides is not None and n is not None and c_in is not None:
            extent = view_extent((n, c_in, *size), strides, fields["storage_offset"] or 0)
            if extent > MAX_ELEMENTS:
                problems.append(f"input_strides: the view reaches {extent} elements of its buffer, over 2^44: "
                                "no GPU holds it")
    if "weight_storage_offset" in entry:
        fields["weight_storage_offset"] = take(_int, "weight_storage_offset", entry["weight_storage_offset"], 0)
    if dims is not None and "weight_strides" in entry:
        fields["weight_strides"] = take(_strides, entry, dims, "weight_strides", "the weight (out, in per "
                                        "group for conv; in, out per group transposed")
    if dims is not None:  # the sizes' rank is the op's: without a known op they cannot be checked
        fields["kernel"] = take(_size, entry, "kernel", dims, 1, None) if "kernel" in entry else None
        for key, least, default in (("stride", 1, 1), ("padding", 0, 0), ("dilation", 1, 1),
                                    ("output_padding", 0, 0)):
            fields[key] = take(_size, entry, key, dims, least, default)
    take(_text, entry, "captured_from")
    weight_strides = fields.get("weight_strides")
    if (weight_strides is not None and c_in is not None and fields["c_out"] is not None and fields["groups"]
            and fields["kernel"] is not None):
        kernel = fields["kernel"] if isinstance(fields["kernel"], tuple) else (fields["kernel"],) * (dims or 1)
        transposed = bool(op and op.startswith("conv_transpose"))
        per = (fields["c_out"] if transposed else c_in) // fields["groups"]
        first = c_in if transposed else fields["c_out"]
        extent = view_extent((first, max(per, 1), *kernel), weight_strides, fields.get("weight_storage_offset") or 0)
        if extent > MAX_ELEMENTS:
            problems.append(f"weight_strides: the view reaches {extent} elements of its buffer, over 2^44: no GPU "
                            "holds it")
    if n is not None and c_in is not None:
        elements = n * c_in * math.prod(size)
        if elements > MAX_ELEMENTS:
            problems.append(f"input: {elements} elements, over 2^44: no GPU holds it")
    if problems:
        raise Bad(problems[0], problems)
    return fields


def _int(field: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Bad(f"{field}: {_shown(value)}: expected a whole number")
    if not least <= value <= MAX_EXTENT:
        raise Bad(f"{field}: {value}: expected {least} to 2^40")
    return value


def _size(entry: dict[str, Any], field: str, dims: int, least: int, default: int | None) -> Any:
    if field not in entry:
        if default is None:
            raise Bad(f"{field}: missing")
        return default
    value = entry[field]
    if isinstance(value, list):
        if len(value) != dims:
            raise Bad(f"{field}: {_shown(value)}: expected one number or {dims} (one per spatial dimension)")
        return tuple(_int(field, item, least) for item in value) if dims > 1 else _int(field, value[0], least)
    return _int(field, value, least)


def _strides(entry: dict[str, Any], dims: int, field: str = "input_strides",
             whose: str = "the input (batch, channels") -> tuple[int, ...]:
    """A view's strides (the input's, or the weight's): one whole number per dimension, none negative."""
    value = entry[field]
    if not isinstance(value, list) or len(value) != dims + 2:
        raise Bad(f"{field}: {_shown(value)}: expected {dims + 2} numbers, one per dimension of {whose}, "
                  f"{dims} spatial)")
    for stride in value:
        if isinstance(stride, int) and not isinstance(stride, bool) and stride < 0:
            raise Bad(f"{field}: {_shown(value)}: a negative stride is no view as_strided builds")
    return tuple(_int(field, stride, 0) for stride in value)


def view_extent(shape: Sequence[int], strides: Sequence[int], offset: int) -> int:
    """Elements of the buffer a view reaches (catalog.view_extent: this module loads by path and
    imports no sibling; a unit test holds the two equal)."""
    return offset + sum((size - 1) * stride for size, stride in zip(shape, strides)) + 1


def _bool(entry: dict[str, Any], field: str, default: bool | None) -> bool | None:
    value = entry.get(field, default)
    if value is not default and not isinstance(value, bool):
        raise Bad(f"{field}: {_shown(value)}: expected true or false")
    return value


def _choice(entry: dict[str, Any], field: str, choices: tuple[str, ...], default: str | None) -> str:
    value = entry.get(field, default)
    if value not in choices or not isinstance(value, str):
        raise Bad(f"{field}: {_shown(value)}: expected one of {', '.join(choices)}{_hint(value, choices)}")
    return value


def _autocast(entry: dict[str, Any]) -> str | None:
    value = entry.get("autocast")
    if value in (None, False, "none"):
        return None
    if value not in ("float16", "bfloat16"):
        raise Bad(f"autocast: {_shown(value)}: expected float16, bfloat16 or none")
    return str(value)


def _layout(entry: dict[str, Any]) -> str | None:
    value = entry.get("layout")
    if value in (None, "contiguous"):
        return None
    if value not in LAYOUTS or not isinstance(value, str):
        raise Bad(f"layout: {_shown(value)}: expected one of {', '.join(LAYOUTS)}{_hint(value, LAYOUTS)}")
    return value


def _sources(entry: dict[str, Any]) -> tuple[str, ...]:
    value = entry.get("sources", [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or len(value) > MAX_SOURCES:
        raise Bad(f"sources: expected a list of at most {MAX_SOURCES} https URLs")
    for url in value:
        if not isinstance(url, str) or not URL.match(url):
            raise Bad(f"sources: {_shown(url)}: expected an https URL (printable ASCII, no spaces)")
    return tuple(value)


def _text(entry: dict[str, Any], field: str) -> str:
    value = entry.get(field, "")
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise Bad(f"{field}: expected a text of at most {MAX_TEXT} characters")
    return " ".join(value.split())


def _hint(value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def _printable(value: Any) -> str:
    """A value as one short line of printable text: a file is untrusted."""
    text = value if isinstance(value, str) else repr(value)
    text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}"
                   for ch in text[:80])
    return text + ("..." if len(str(value)) > 80 else "")


def _shown(value: Any) -> str:
    return _printable(json.dumps(value) if not isinstance(value, str) else repr(value))
