"""The suite's own command-line options, as one table: conftest.py and isolation.py add them to
pytest from it, and the harness (convmatrix run, the fleet engines) loads this file by its path
to check a run's suite options once, before any cell runs, instead of every cell's suite exiting
4 on a mistyped one. Standard library only: the harness has no torch and no pytest.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

MAX_CASE_TIMEOUT = 30 * 24 * 3600.0  # 30 days: beyond it the watchdog's timers overflow


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    default: Any = None
    choices: tuple[str, ...] | None = None
    kind: str = "text"  # text, int, float, flag, append (repeatable, a list)
    metavar: str | None = None
    group: str = "suite"  # suite (conftest.py) or isolation (isolation.py)
    extra: dict[str, Any] = field(default_factory=dict)


OPTIONS: tuple[Option, ...] = (
    Option("--results-dir", "write env.json and results.jsonl here (created if missing)"),
    Option("--cell-id", "the cell this run belongs to"),
    Option("--device", "auto: cuda when torch sees a GPU, else cpu", default="auto", choices=("auto", "cuda", "cpu")),
    Option("--cudnn-benchmark", "torch.backends.cudnn.benchmark", default="off", choices=("on", "off")),
    Option("--cudnn-deterministic", "torch.backends.cudnn.deterministic", default="off", choices=("on", "off")),
    Option("--cudnn-enabled", "torch.backends.cudnn.enabled: off runs every conv without cuDNN (convmatrix "
           "--explain re-runs a failing case so, to tell whether cuDNN's path is the cause)", default="on",
           choices=("on", "off")),
    Option("--channels-last", "remedy knob: run every case's input and weight in channels_last memory format",
           default="off", choices=("on", "off")),
    Option("--pad-channels", "remedy knob: zero-pad channel counts up to a multiple of N (8: the tensor-core "
           "remedy)", default=0, kind="int", metavar="N"),
    Option("--cases", "a case file of your own convolutions ([[case]] tables, TOML or JSON; suites/casefile.py), "
           "run beside the catalog; repeat for more files", kind="append", metavar="FILE"),
    Option("--continue-run", "add to the results of a run that ended early (convmatrix passes it when it runs "
           "the rest of a cell after a crash): skip the cases that have a line, keep its env.json",
           default=False, kind="flag"),
    Option("--case-timeout", "record a case that runs longer as `timeout` and go on with the rest in a fresh "
           "worker (0, the default: no timeout); turns on --isolate unless --in-process",
           default=0.0, kind="float", metavar="SECONDS", group="isolation"),
    Option("--isolate", "run the cases in pytest-xdist workers (-n 1 unless -n says more) so that a case that "
           "crashes, hangs or poisons the CUDA context costs that case alone",
           default=False, kind="flag", group="isolation"),
    Option("--in-process", "run the cases in this process even with --case-timeout: a timeout or a sticky CUDA "
           "error ends the process after writing its case's line, a crash leaves running-main.json, and the "
           "caller runs the rest (convmatrix does); --isolate or -n N still means workers",
           default=False, kind="flag", group="isolation"),
    Option("--gpu-per-worker", "under xdist, give each worker one GPU of the outer CUDA_VISIBLE_DEVICES (by worker "
           "slot modulo the GPU count)", default="on", choices=("on", "off"), group="isolation"),
)
BY_NAME = {o.name: o for o in OPTIONS}
# Set by convmatrix on every suite run it starts (run/runner.py's suite_command): where the cell's
# files go and whose they are. Never taken from a run's suite options, exact or abbreviated.
HARNESS_OWNED = ("--results-dir", "--cell-id")
_TYPES: dict[str, Callable[[str], Any]] = {"int": int, "float": float}


def addoptions(group: Any, which: str) -> None:
    """Add this table's options of one group (suite, isolation) to a pytest option group."""
    for option in OPTIONS:
        if option.group != which:
            continue
        kwargs: dict[str, Any] = {"default": option.default, "help": option.help}
        if option.kind == "flag":
            kwargs["action"] = "store_true"
        elif option.kind == "append":
            kwargs["action"] = "append"
        elif option.kind in _TYPES:
            kwargs["type"] = _TYPES[option.kind]
        if option.choices:
            kwargs["choices"] = option.choices
        if option.metavar:
            kwargs["metavar"] = option.metavar
        group.addoption(option.name, **kwargs)


def owned(arg: str) -> str | None:
    """The option of HARNESS_OWNED that arg names, exactly or as an abbreviation argparse would
    expand (`--results-d`, `--ce=x`: a prefix of it, past the `--`), else None. Every prefix
    counts, even one that argparse would call ambiguous among pytest's options: pytest 9 takes no
    abbreviation (its parser has allow_abbrev=False, _pytest/config/argparsing.py), but a cell's
    venv may hold another pytest or plugins, and no option of pytest's is a prefix of these two."""
    if not arg.startswith("--") or arg == "--":
        return None
    name = arg.partition("=")[0]
    return next((o for o in HARNESS_OWNED if o.startswith(name)), None)


def owned_problems(args: Sequence[str]) -> list[str]:
    """The options among args that the harness sets for each suite run, and any `@FILE` argument
    (pytest reads more arguments from that file, fromfile_prefix_chars="@", where they could not be
    checked). Every argument is looked at, a value included: the check must not be steered past."""
    found: list[str] = []
    for arg in args:
        option = owned(arg)
        if option is not None:
            said = arg.partition("=")[0]
            spelt = said if said == option else f"{said} (an abbreviation of {option})"
            found.append(f"{spelt} is set by convmatrix for each cell")
        elif arg.startswith("@"):
            found.append(f"{arg[:80]}: pytest would read options from that file, which convmatrix cannot check")
    return found


def problems(args: Sequence[str]) -> list[str]:
    """What is wrong with the suite's own options among args (pytest's own, and -k, -p, -n..., are
    left to pytest): an option the harness sets (owned_problems), a bad value, a missing value, or a
    name one typo away from one of ours."""
    found: list[str] = owned_problems(args)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("--") or arg == "--":
            continue
        name, eq, inline = arg.partition("=")
        option = BY_NAME.get(name)
        if owned(arg) is not None:
            continue  # said once, by owned_problems
        if option is None:
            close = difflib.get_close_matches(name, list(BY_NAME), n=1, cutoff=0.85)
            if close:
                found.append(f"{name}: no such suite option (did you mean {close[0]}?)")
            continue
        if option.kind == "flag":
            if eq:
                found.append(f"{name} takes no value")
            continue
        if eq:
            value = inline
        elif i < len(args):
            value = args[i]
            i += 1
        else:
            found.append(f"{name}: needs a value")
            continue
        found += [f"{name} {value}: {p}" for p in value_problems(option, value)]
    return found


def value_problems(option: Option, value: str) -> list[str]:
    if option.choices and value not in option.choices:
        return [f"expected one of {', '.join(option.choices)}"]
    if option.kind == "int":
        try:
            int(value)
        except ValueError:
            return ["expected a whole number"]
    if option.kind == "float":
        try:
            number = float(value)
        except ValueError:
            return ["expected a number"]
        if option.name == "--case-timeout" and not (math.isfinite(number) and 0 <= number <= MAX_CASE_TIMEOUT):
            return [f"expected seconds >= 0 and at most {MAX_CASE_TIMEOUT:.0f} (30 days)"]
    return []
