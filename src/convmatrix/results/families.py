"""Failure families: one family id per failed case, from its raw message.

See docs/contracts.md, "Failure families".

The suite records raw facts (status, exception type and message, captured warnings); this module
turns them into the vocabulary that compare and report speak. It is deliberately pure text work,
so a better classifier can be re-run over old results, and fast, because triage runs it over logs
of many gigabytes.

The pipeline for one message:

1. ``normalize``: undo what logs do to text (colour codes, CRLF, per-line prefixes from torchrun
   and log frameworks, identifiers broken across lines).
2. Mask warnings that report on the run ("Plan failed with a cudnnException: ...", torch's
   "not compatible with the current PyTorch installation") so that they cannot outvote the
   exception that actually ended the case; they only decide when nothing else does.
3. Collect every family whose marker occurs, then pick one by ``PRECEDENCE``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SIGNATURE = "cudnn_not_supported"

FAMILIES: tuple[str, ...] = (
    SIGNATURE,
    "cudnn_no_engine",
    "cudnn_no_algorithm",
    "cudnn_execution_failed",
    "cudnn_internal_error",
    "cudnn_bad_param",
    "cudnn_mapping_error",
    "cudnn_arch_mismatch",
    "cudnn_not_initialized",
    "cudnn_version_mismatch",
    "cudnn_library_missing",
    "cuda_library_swapped",
    "cuda_no_kernel_image",
    "cuda_illegal_address",
    "cuda_oom",
    "cuda_driver_insufficient",
    "cuda_no_device",
    "numeric_mismatch",
    "crash",
    "timeout",
    "other",
)

# Families that say the environment is broken, not the convolution path: a control that hits one
# is unhealthy (docs/contracts.md: Verdicts). cudnn_not_initialized is here because cudnnCreate fails
# before any convolution-specific work happens, so it says nothing about the conv path.
# cuda_no_kernel_image is NOT here: a wheel without kernels for this GPU generation is a fact about
# the (stack, GPU) pair that the matrix exists to show, not a broken machine.
INFRASTRUCTURE: frozenset[str] = frozenset(
    {
        "cudnn_version_mismatch",
        "cudnn_library_missing",
        # The library audit's silent swap (suites/libaudit.py): the cell loaded another installation's
        # library than its own, so what it ran was not the stack it names.
        "cuda_library_swapped",
        "cuda_driver_insufficient",
        "cuda_no_device",
        "cudnn_not_initialized",
    }
)

# When one message carries markers of several families, the first family here wins. The order
# is by cause, then by specificity:
# - numeric_mismatch: the suite writes that message itself, after the convolution succeeded.
# - no device, driver, missing library, version mismatch: with the environment broken, every cuDNN
#   status that follows is a symptom (a missing sublibrary makes engines "not supported").
# - no kernel image, illegal address, out of memory: CUDA-level causes. An illegal address is a
#   sticky context error, so the cuDNN EXECUTION_FAILED/INTERNAL_ERROR seen after it are fallout;
#   an OOM is what old PyTorch reported as NOT_SUPPORTED or "no valid algorithm".
# - cudnn_not_initialized: the handle never existed, so nothing after it ran.
# - no engine / no algorithm, before the signature: these are the verdict after trying every
#   engine; the NOT_SUPPORTED they mention is each engine's reason, and must not make the case
#   count as the signature (the sibling rule of docs/contracts.md).
# - arch mismatch before not supported: NOT_SUPPORTED_ARCH_MISMATCH is the more specific truth.
# - then the generic cuDNN statuses, most specific first; INTERNAL_ERROR says least.
PRECEDENCE: tuple[str, ...] = (
    "numeric_mismatch",
    "cuda_no_device",
    "cuda_driver_insufficient",
    "cudnn_library_missing",
    "cudnn_version_mismatch",
    "cuda_library_swapped",  # silent: after a library that fails to load or mixes versions
    "cuda_no_kernel_image",
    "cuda_illegal_address",
    "cuda_oom",
    "cudnn_not_initialized",
    "cudnn_no_engine",
    "cudnn_no_algorithm",
    "cudnn_arch_mismatch",
    SIGNATURE,
    "cudnn_bad_param",
    "cudnn_mapping_error",
    "cudnn_execution_failed",
    "cudnn_internal_error",
)

# --- cuDNN status names ---------------------------------------------------------------------
# Every cudnnStatus_t name of cuDNN 8 and 9, and the family it means. The rule of docs/contracts.md is
# "every CUDNN_STATUS_NOT_SUPPORTED* is the signature"; the exceptions are sub-codes whose real
# cause is a sibling family, so counting them as the signature would be a false positive:
#   _ARCH_MISMATCH                 the GPU lacks a feature: cudnn_arch_mismatch
#   _INCOMPATIBLE_CUDA_DRIVER      the driver is too old for the engine: cuda_driver_insufficient
#   _INCOMPATIBLE_CUDART           cuDNN built for another CUDA runtime: cudnn_version_mismatch
#   _RUNTIME_PREREQUISITE_MISSING  libcuda/libnvrtc not found: cudnn_library_missing
#   _SUBLIBRARY_UNAVAILABLE        a cuDNN sublibrary is not installed: cudnn_library_missing
# The rest (_GRAPH_PATTERN, _SHAPE, _DATA_TYPE, _LAYOUT, _PADDING, _SHARED_MEMORY_INSUFFICIENT,
# _BAD_LAUNCH_PARAM, _CUDA_GRAPH_NATIVE_API, _INVALID_DYNAMIC_SHAPE) describe the problem itself:
# the signature. Allocation failures are out of memory; a host allocation failure stays internal.
# Names mapped to None carry no failure (SUCCESS) or no family of ours.
_STATUS_FAMILY: dict[str, str | None] = {
    "CUDNN_STATUS_SUCCESS": None,
    "CUDNN_STATUS_NOT_INITIALIZED": "cudnn_not_initialized",
    "CUDNN_STATUS_ALLOC_FAILED": "cuda_oom",
    "CUDNN_STATUS_BAD_PARAM": "cudnn_bad_param",
    "CUDNN_STATUS_INVALID_VALUE": "cudnn_bad_param",
    "CUDNN_STATUS_INTERNAL_ERROR": "cudnn_internal_error",
    "CUDNN_STATUS_ARCH_MISMATCH": "cudnn_arch_mismatch",
    "CUDNN_STATUS_MAPPING_ERROR": "cudnn_mapping_error",
    "CUDNN_STATUS_EXECUTION_FAILED": "cudnn_execution_failed",
    "CUDNN_STATUS_NOT_SUPPORTED": SIGNATURE,
    "CUDNN_STATUS_LICENSE_ERROR": None,
    "CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING": "cudnn_library_missing",
    "CUDNN_STATUS_RUNTIME_IN_PROGRESS": None,
    "CUDNN_STATUS_RUNTIME_FP_OVERFLOW": None,
    "CUDNN_STATUS_VERSION_MISMATCH": "cudnn_version_mismatch",
    # cuDNN 9 additions
    "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH": "cudnn_version_mismatch",
    "CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH": None,
    "CUDNN_STATUS_DEPRECATED": None,
    "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED": "cudnn_library_missing",
    "CUDNN_STATUS_BAD_PARAM_NULL_POINTER": "cudnn_bad_param",
    "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER": "cudnn_bad_param",
    "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED": "cudnn_bad_param",
    "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND": "cudnn_bad_param",
    "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT": "cudnn_bad_param",
    "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH": "cudnn_bad_param",
    "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH": "cudnn_bad_param",
    "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES": "cudnn_bad_param",
    "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE": "cudnn_bad_param",
    "CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH": "cudnn_bad_param",
    "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE": "cudnn_bad_param",
    "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN": SIGNATURE,
    "CUDNN_STATUS_NOT_SUPPORTED_SHAPE": SIGNATURE,
    "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE": SIGNATURE,
    "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT": SIGNATURE,
    "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER": "cuda_driver_insufficient",
    "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART": "cudnn_version_mismatch",
    "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH": "cudnn_arch_mismatch",
    "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING": "cudnn_library_missing",
    "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE": "cudnn_library_missing",
    "CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT": SIGNATURE,
    "CUDNN_STATUS_NOT_SUPPORTED_PADDING": SIGNATURE,
    "CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM": SIGNATURE,
    "CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API": SIGNATURE,
    "CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE": SIGNATURE,
    "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED": "cudnn_internal_error",
    "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE": "cudnn_internal_error",
    "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED": "cudnn_internal_error",
    "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED": "cuda_oom",
    "CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM": "cudnn_internal_error",
    "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED": "cudnn_internal_error",
    "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER": "cudnn_execution_failed",
    "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS": "cudnn_execution_failed",
    "CUDNN_STATUS_EXECUTION_FAILED_CUDART": "cudnn_execution_failed",
    "CUDNN_STATUS_EXECUTION_FAILED_CURAND": "cudnn_execution_failed",
}

# Longest first, so that a name glued to following text (a wrapped log joined too eagerly) still
# resolves to the longest real name it starts with, and a future sub-code resolves to its base.
_NAMES_LONGEST_FIRST: tuple[str, ...] = tuple(sorted(_STATUS_FAMILY, key=len, reverse=True))

# Old cudnn_frontend printed statuses as numbers ("cudnn_status: 3"). cuDNN 8 numbers are small,
# cuDNN 9 numbers are >= 1000, so one lookup serves both majors.
_STATUS_BY_NUMBER: dict[int, str] = {
    0: "CUDNN_STATUS_SUCCESS",
    1: "CUDNN_STATUS_NOT_INITIALIZED",
    2: "CUDNN_STATUS_ALLOC_FAILED",
    3: "CUDNN_STATUS_BAD_PARAM",
    4: "CUDNN_STATUS_INTERNAL_ERROR",
    5: "CUDNN_STATUS_INVALID_VALUE",
    6: "CUDNN_STATUS_ARCH_MISMATCH",
    7: "CUDNN_STATUS_MAPPING_ERROR",
    8: "CUDNN_STATUS_EXECUTION_FAILED",
    9: "CUDNN_STATUS_NOT_SUPPORTED",
    10: "CUDNN_STATUS_LICENSE_ERROR",
    11: "CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING",
    12: "CUDNN_STATUS_RUNTIME_IN_PROGRESS",
    13: "CUDNN_STATUS_RUNTIME_FP_OVERFLOW",
    14: "CUDNN_STATUS_VERSION_MISMATCH",
    1001: "CUDNN_STATUS_NOT_INITIALIZED",
    1002: "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
    1003: "CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH",
    1004: "CUDNN_STATUS_DEPRECATED",
    1005: "CUDNN_STATUS_LICENSE_ERROR",
    1006: "CUDNN_STATUS_RUNTIME_IN_PROGRESS",
    1007: "CUDNN_STATUS_RUNTIME_FP_OVERFLOW",
    1008: "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED",
    2000: "CUDNN_STATUS_BAD_PARAM",
    2001: "CUDNN_STATUS_INVALID_VALUE",
    2002: "CUDNN_STATUS_BAD_PARAM_NULL_POINTER",
    2003: "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER",
    2004: "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED",
    2005: "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND",
    2006: "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT",
    2007: "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH",
    2008: "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH",
    2009: "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES",
    2010: "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE",
    2011: "CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH",
    2012: "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE",
    3000: "CUDNN_STATUS_NOT_SUPPORTED",
    3001: "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN",
    3002: "CUDNN_STATUS_NOT_SUPPORTED_SHAPE",
    3003: "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE",
    3004: "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT",
    3005: "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER",
    3006: "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART",
    3007: "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH",
    3008: "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING",
    3009: "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE",
    3010: "CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT",
    3011: "CUDNN_STATUS_NOT_SUPPORTED_PADDING",
    3012: "CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM",
    3013: "CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API",
    3014: "CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE",
    4000: "CUDNN_STATUS_INTERNAL_ERROR",
    4001: "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED",
    4002: "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE",
    4003: "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",
    4004: "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
    4005: "CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM",
    4006: "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED",
    5000: "CUDNN_STATUS_EXECUTION_FAILED",
    5001: "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER",
    5002: "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS",
    5003: "CUDNN_STATUS_EXECUTION_FAILED_CUDART",
    5004: "CUDNN_STATUS_EXECUTION_FAILED_CURAND",
}

# Matched against lower-cased text: status names appear upper-case from cudnnGetErrorString, but
# wrappers and hand-written logs vary.
_STATUS_NAME = re.compile(r"cudnn_status_[a-z0-9_]*[a-z0-9]")
_STATUS_NUMBER = re.compile(r"cudnn_status:\s*(\d+)\b")

# --- phrases, per family --------------------------------------------------------------------
# Plain lower-case substrings wherever the real text is fixed (the cheap path: no regex at all),
# regexes only where the text varies. Sources of each text are in tests/unit/results/test_families.py.
_LITERALS: dict[str, tuple[str, ...]] = {
    "cuda_no_device": (
        "no cuda-capable device is detected",
        "found no nvidia driver on your system",
        "torch not compiled with cuda enabled",
        "no cuda gpus are available",
        "cuda driver initialization failed",
        "cudaerrornodevice",
        "cuda_error_no_device",
        "invalid device ordinal",
    ),
    "cuda_driver_insufficient": (
        "driver version is insufficient for cuda runtime version",
        "nvidia driver on your system is too old",
        "cudaerrorinsufficientdriver",
        "unsupported display driver / cuda driver combination",
        "forward compatibility was attempted on non supported hw",
        # PTX JIT needs a driver at least as new as the toolkit that made the PTX.
        "provided ptx was compiled with an unsupported toolchain",
    ),
    "cudnn_library_missing": (
        "unable to load any of {libcudnn",
        "invalid handle. cannot load symbol cudnn",
        "could not load library libcudnn",
        "could not load library cudnn",
        "could not locate cudnn",
        "cudnn library missing:",  # the library audit's own words (suites/libaudit.py)
    ),
    "cudnn_version_mismatch": (
        "cudnn version incompatibility",
        "cudnn version mismatch",
    ),
    # The library audit's own words (suites/libaudit.py SWAP): the only source of this family.
    "cuda_library_swapped": ("cuda library swap:",),
    "cuda_no_kernel_image": (
        "no kernel image is available for execution on the device",
        # Torch's own warnings when the wheel has no kernels for this GPU generation.
        "is not compatible with the current pytorch installation",
        "pytorch no longer supports this gpu because it is too old",
    ),
    "cuda_illegal_address": (
        "illegal memory access",
        "misaligned address",
        "cudaerrorillegaladdress",
        "cuda_error_illegal_address",
    ),
    "cuda_oom": (
        "cuda out of memory",
        "outofmemoryerror",
        "cuda error: out of memory",
        "cudaerrormemoryallocation",
        "cuda_error_out_of_memory",
        "cublas_status_alloc_failed",
    ),
    "cudnn_no_engine": (
        "unable to find an engine",  # "GET was ..." / "FIND was unable to find an engine"
        "no execution plans",  # cudnn_frontend: "... support the graph" / "... built successfully"
        "no valid engine configs",
    ),
    "cudnn_no_algorithm": (
        "unable to find a valid cudnn algorithm",
        "no valid convolution algorithms available",
    ),
}

_PATTERNS: dict[str, tuple[tuple[str, re.Pattern[str]], ...]] = {
    # (cheap needle that must be present, pattern) pairs
    "cudnn_library_missing": (
        (
            "cannot open shared object",
            re.compile(r"libcudnn[\w.]*: cannot open shared object file"),
        ),
    ),
    "cuda_oom": (("out of memory", re.compile(r"\bcuda\b.{0,40}\bout of memory")),),
}

# --- normalization --------------------------------------------------------------------------
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# SGR codes whose ESC byte was lost on the way (copied from a web log viewer): "[31mError[0m".
_ORPHAN_SGR = re.compile(r"\[(?:\d{1,3};)*\d{1,3}m")

_LEVELS = r"(?:CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG|TRACE|NOTICE)"
# Prefixes that tools put before every line; stacked ones ("[rank0]: 2024-... - ERROR - ") are
# removed in one pass by the repetition.
_LINE_PREFIX = re.compile(
    r"^(?:[ \t]*(?:"
    r"\[(?:rank|default)\d+\]:[ \t]?"  # torchrun / torchelastic
    r"|\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?:?[ \t]*"
    r"(?:[-|][ \t]+)?"  # ISO timestamps, bracketed or not, "- " / "| " after them
    r"|\[" + _LEVELS + r"\][ \t]*:?[ \t]*"  # [ERROR]
    r"|" + _LEVELS + r"[ \t]+[-|][ \t]+"  # ERROR - / ERROR |
    r"|" + _LEVELS + r":[\w.<>-]*:"  # Python logging default: ERROR:root:
    r"|[\w.]+[ \t]+-[ \t]+(?=" + _LEVELS + r"\b)"  # logger name before a level
    r"|[IWEF]\d{4}[ \t]+\d\d:\d\d:\d\d(?:\.\d+)?[ \t]+\d+[ \t]+[^\s\]]+:\d+\][ \t]?"  # glog
    r"|[IWEF][ \t]+[^\s\]]+:\d+\][ \t]?"  # glog without time (TensorFlow)
    r"|\[[IWEF](?:\d{4})?[ \t][^\]\n]*?:\d+\][ \t]?"  # c10: [W1220 15:51:29.5 x.cpp:12]
    r"|E(?:[ \t]{2,})"  # pytest failure lines
    r"|##\[(?:error|warning|notice|debug|group|endgroup)\]"  # GitHub Actions
    r"))+",
    re.MULTILINE,
)

# An upper-case identifier broken at an underscore: "CUDNN_STATUS_NOT_" + newline + "SUPPORTED",
# or "CUDNN_STATUS_NOT_SUPPORTED" + newline + "_SHAPE".
_BREAK_AFTER_UNDERSCORE = re.compile(r"(?<=[A-Z0-9]_)\n[ \t]*(?=[A-Z0-9])")
_BREAK_BEFORE_UNDERSCORE = re.compile(r"(?<=[A-Z0-9])\n(?=_[A-Z0-9])")
# An upper-case identifier broken anywhere; joined only when the halves make a known status name.
# Every status name starts with "C", which lets the regex engine skip to candidate heads.
_BREAK_IN_NAME = re.compile(r"(C[A-Z0-9_]*)\n[ \t]*([A-Z0-9_]+)")
# Narrower "wraps" are more likely short lines that happen to share a length.
_MIN_WRAP_WIDTH = 40

# Text that reports on the run without being the error that ended it, masked for the primary
# verdict: cuDNN's per-plan warnings and API-log warnings (each engine that declines says why),
# and torch's warning that the wheel has no kernels for this GPU (it may run on through PTX JIT,
# and then whatever fails is the truth: on a new GPU generation, often the signature).
_SECONDARY = re.compile(
    r"Plan failed with a [^\n]*"
    r"|\bWarning: CUDNN_STATUS_[A-Z0-9_]+;[^\n]*"
    r"|^[^\n]*(?:is not compatible with the current PyTorch installation"
    r"|PyTorch no longer supports this GPU)[^\n]*",
    re.MULTILINE,
)
_SECONDARY_WITNESSES = (
    "Plan failed with a ",
    "Warning: CUDNN_STATUS_",
    "current PyTorch installation",
    "no longer supports this GPU",
)
_NUMERIC_MISMATCH = re.compile(r"\s*(?:[\w.]*AssertionError:\s*)?numeric mismatch:", re.IGNORECASE)
_NUMERIC_LINE = re.compile(r"^\s*numeric mismatch:", re.IGNORECASE | re.MULTILINE)


def strip_ansi(text: str) -> str:
    """The text without ANSI escape sequences (colours, cursor moves, OSC titles)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def normalize(text: str) -> str:
    """Undo what logs do to a message, keeping its lines.

    Removes ANSI colour codes, turns CRLF and lone CR into LF, strips per-line prefixes (torchrun
    ``[rank0]:``, timestamps, log levels, glog headers, pytest ``E``) and rejoins lines that a
    fixed-width wrap cut and status names broken across lines.
    """
    text = strip_ansi(text)
    if "[" in text and "m" in text:
        text = _ORPHAN_SGR.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _LINE_PREFIX.sub("", text)
    if "\n" not in text:
        return text
    # Width first: the joins below change line lengths, which would hide the wrap width.
    text = _unwrap_fixed_width(text)
    # Each join runs only where its cheap witness is present: most log text has none.
    if "_\n" in text:
        text = _BREAK_AFTER_UNDERSCORE.sub("", text)
    if "\n_" in text:
        text = _BREAK_BEFORE_UNDERSCORE.sub("", text)
    # A status name cut anywhere keeps "CUDNN" whole in its head or "_STATUS_" whole in its tail.
    if "CUDNN" in text or "_STATUS_" in text:
        text = _BREAK_IN_NAME.sub(_join_status_name, text)
    return text


def _join_status_name(match: re.Match[str]) -> str:
    head, tail = match.groups()
    joined = head + tail
    return joined if joined in _STATUS_FAMILY else match.group(0)


def _unwrap_fixed_width(text: str) -> str:
    """Join the lines of a log that a terminal or viewer cut at one fixed width.

    Such a log has no line longer than the width W, and several different lines of exactly W that
    run straight on into the next. Requiring both keeps ordinary logs, whose longest line is
    rarely repeated, untouched.
    """
    lines = text.split("\n")
    width = _wrap_width(lines)
    if width is None:
        return text
    out: list[str] = []
    pending = ""
    for index, line in enumerate(lines):
        pending += line
        if len(line) == width and _runs_on(lines, index):
            continue
        out.append(pending)
        pending = ""
    if pending:
        out.append(pending)
    return "\n".join(out)


def _wrap_width(lines: list[str]) -> int | None:
    width = max(len(line) for line in lines)
    if width < _MIN_WRAP_WIDTH:
        return None
    cut = {line for index, line in enumerate(lines) if len(line) == width and _runs_on(lines, index)}
    return width if len(cut) >= 2 else None


def _runs_on(lines: list[str], index: int) -> bool:
    """A cut line runs on when a word touches the cut: tables and rules end and start in symbols."""
    if index + 1 >= len(lines) or not lines[index] or not lines[index + 1]:
        return False
    return _is_word(lines[index][-1]) or _is_word(lines[index + 1][0])


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


# --- detection ------------------------------------------------------------------------------
def _status_families(low: str) -> set[str]:
    found: set[str] = set()
    for name in _STATUS_NAME.findall(low):
        family = _family_of_status(name.upper())
        if family:
            found.add(family)
    for number in _STATUS_NUMBER.findall(low):
        named = _STATUS_BY_NUMBER.get(int(number))
        family = _STATUS_FAMILY.get(named) if named else None
        if family:
            found.add(family)
    return found


def _family_of_status(name: str) -> str | None:
    if name in _STATUS_FAMILY:
        return _STATUS_FAMILY[name]
    # A sub-code newer than this table, or a name glued to following text: its longest known base.
    for known in _NAMES_LONGEST_FIRST:
        if name.startswith(known):
            return _STATUS_FAMILY[known]
    return None


def _families_in(flat: str) -> set[str]:
    """Every family whose marker occurs in ``flat`` (normalized, whitespace collapsed)."""
    low = flat.lower()
    found = _status_families(low) if "cudnn_status" in low else set()
    for family, literals in _LITERALS.items():
        if any(literal in low for literal in literals):
            found.add(family)
    for family, patterns in _PATTERNS.items():
        if family not in found and any(n in low and p.search(low) for n, p in patterns):
            found.add(family)
    return found


def _first_by_precedence(found: set[str]) -> str | None:
    for family in PRECEDENCE:
        if family in found:
            return family
    return None


def _flatten(text: str) -> str:
    # Collapsing whitespace lets phrases that a word-wrap split over two lines match.
    return " ".join(text.split())


def _families_of(text: str) -> set[str]:
    """Families in a normalized text, read both as word-wrapped and as cut mid-word.

    A single line cut mid-word ("no valid convolution algorithms av" / "ailable") shows no wrap
    width to undo, so the text is also read with its line breaks deleted. Gluing every line to
    the next cannot invent a marker in practice, because markers are long and specific, and a
    status name glued to the next line's first word still resolves (see _family_of_status).
    """
    found = _families_in(_flatten(text))
    if "\n" in text:
        found |= _families_in(_flatten(text.replace("\n", "")))
    return found


def _family_of_text(text: str) -> str | None:
    """The family of a normalized message: its primary error first, secondary reports last."""
    masked = 0
    primary = text
    if any(witness in text for witness in _SECONDARY_WITNESSES):
        primary, masked = _SECONDARY.subn(" ", text)
    family = _first_by_precedence(_families_of(primary))
    if family is None and masked:
        # Nothing but warnings: they are then the best evidence there is.
        family = _first_by_precedence(_families_of(text))
    return family


def _is_numeric_mismatch(text: str, exc_type: str | None) -> bool:
    """The suite's own verdict: its message starts "numeric mismatch:" (after any type name)."""
    if _NUMERIC_MISMATCH.match(text):
        return True
    return _short_type(exc_type) == "AssertionError" and _NUMERIC_LINE.search(text) is not None


def _short_type(exc_type: str | None) -> str:
    return exc_type.rsplit(".", 1)[-1] if exc_type else ""


QUIET = frozenset({"passed", "skipped"})  # statuses whose cases have no failure family


def classify(message: str | None, *, status: str = "failed", exc_type: str | None = None) -> str | None:
    """The failure family of one case, or None for a case that did not fail.

    ``status`` is the suite's raw status: passed and skipped give None, crashed gives "crash",
    timeout gives "timeout"; anything else (failed, error) is classified from the message, with
    ``exc_type`` as a last hint. A message that names no family is "other".
    """
    state = status.strip().lower()
    if state in QUIET:
        return None
    if state == "crashed":
        return "crash"
    if state == "timeout":
        return "timeout"
    text = normalize(message or "")
    if _is_numeric_mismatch(text, exc_type):
        return "numeric_mismatch"
    family = _family_of_text(text)
    if family is not None:
        return family
    if _short_type(exc_type) == "OutOfMemoryError":
        return "cuda_oom"
    return "other"


def classify_warnings(messages: Iterable[str]) -> list[str]:
    """Families seen in captured warnings, deduplicated, in first-seen order.

    A warning names one event, so each contributes its one family by ``PRECEDENCE``; warnings that
    name none (deprecations and the like) contribute nothing.
    """
    seen: list[str] = []
    for message in messages:
        family = _first_by_precedence(_families_of(normalize(message)))
        if family is not None and family not in seen:
            seen.append(family)
    return seen


# --- what a status means, and which side is its cause -------------------------------------------
# One table for src/convmatrix/results/cudnn_log.py (cuDNN's own account of a failure, from its API
# log). Keyed by every name of _STATUS_FAMILY: (a short meaning, the cause). The cause is the side
# of the stack to look at:
#   "gpu"          the GPU itself lacks something (an architecture feature, shared memory, memory);
#   "software"     what was asked of cuDNN (shape, layout, data type, padding, graph pattern, a bad
#                  argument): a different problem, library version or code path may not hit it;
#   "environment"  the installation (driver, CUDA runtime, a missing or mismatched cuDNN library);
#   "unknown"      the status alone does not say.
# The names and their sub-codes are cuDNN 9's cudnnStatus_t (the cudnn_graph library reference,
# https://docs.nvidia.com/deeplearning/cudnn/backend/latest/api/cudnn-graph-library.html); the
# meanings paraphrase what each name says, briefly.
CAUSES: tuple[str, ...] = ("gpu", "software", "environment", "unknown")

STATUS_MEANING: dict[str, tuple[str, str]] = {
    "CUDNN_STATUS_SUCCESS": ("no error", "unknown"),
    "CUDNN_STATUS_NOT_INITIALIZED": ("the cuDNN handle was never initialized", "environment"),
    "CUDNN_STATUS_ALLOC_FAILED": ("a memory allocation failed", "gpu"),
    "CUDNN_STATUS_BAD_PARAM": ("an invalid argument was passed", "software"),
    "CUDNN_STATUS_INVALID_VALUE": ("an invalid value was passed", "software"),
    "CUDNN_STATUS_INTERNAL_ERROR": ("an internal cuDNN operation failed", "unknown"),
    "CUDNN_STATUS_ARCH_MISMATCH": ("the GPU lacks a feature the function needs", "gpu"),
    "CUDNN_STATUS_MAPPING_ERROR": ("an access to GPU memory failed", "unknown"),
    "CUDNN_STATUS_EXECUTION_FAILED": ("the GPU program failed to execute", "unknown"),
    "CUDNN_STATUS_NOT_SUPPORTED": ("the requested functionality is not supported", "unknown"),
    "CUDNN_STATUS_LICENSE_ERROR": ("the cuDNN license check failed", "environment"),
    "CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING": ("a runtime library cuDNN needs is missing", "environment"),
    "CUDNN_STATUS_RUNTIME_IN_PROGRESS": ("a runtime check has not finished yet", "unknown"),
    "CUDNN_STATUS_RUNTIME_FP_OVERFLOW": ("a floating-point overflow happened in the computation", "software"),
    "CUDNN_STATUS_VERSION_MISMATCH": ("cuDNN libraries of different versions were mixed", "environment"),
    "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH": ("cuDNN sublibraries of different versions were mixed",
                                                 "environment"),
    "CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH": ("a serialized plan comes from another cuDNN version",
                                                    "environment"),
    "CUDNN_STATUS_DEPRECATED": ("a deprecated API was used", "software"),
    "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED": ("a cuDNN sublibrary failed to load", "environment"),
    "CUDNN_STATUS_BAD_PARAM_NULL_POINTER": ("a null pointer was passed", "software"),
    "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER": ("a misaligned pointer was passed", "software"),
    "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED": ("a descriptor was used before it was finalized", "software"),
    "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND": ("an argument is out of bounds", "software"),
    "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT": ("a buffer passed is too small", "software"),
    "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH": ("the stream does not match the handle's", "software"),
    "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH": ("tensor shapes do not match", "software"),
    "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES": ("an argument holds duplicated entries", "software"),
    "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE": ("an attribute has the wrong type", "software"),
    "CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH": ("the CUDA graph does not match the plan", "software"),
    "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE": ("a descriptor has the wrong type", "software"),
    "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN": ("no engine supports this operation graph pattern", "software"),
    "CUDNN_STATUS_NOT_SUPPORTED_SHAPE": ("no engine supports this tensor shape", "software"),
    "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE": ("no engine supports this data type", "software"),
    "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT": ("no engine supports this memory layout", "software"),
    "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER": ("the CUDA driver is too old for the engine",
                                                            "environment"),
    "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART": ("cuDNN was built for another CUDA runtime",
                                                       "environment"),
    "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH": ("the engine does not support this GPU architecture", "gpu"),
    "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING": ("a runtime library the engine needs is missing",
                                                                "environment"),
    "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE": ("the cuDNN sublibrary the engine needs is not installed",
                                                          "environment"),
    "CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT": ("the GPU has too little shared memory for the engine",
                                                              "gpu"),
    "CUDNN_STATUS_NOT_SUPPORTED_PADDING": ("no engine supports this padding", "software"),
    "CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM": ("the kernel launch parameters are not supported", "software"),
    "CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API": ("native CUDA graphs are not supported here", "software"),
    "CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE": ("the dynamic shape is not supported", "software"),
    "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED": ("runtime compilation of a kernel failed", "unknown"),
    "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE": ("cuDNN met an unexpected internal value", "unknown"),
    "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED": ("a host memory allocation failed", "environment"),
    "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED": ("a GPU memory allocation failed", "gpu"),
    "CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM": ("a kernel was launched with bad parameters", "software"),
    "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED": ("a texture could not be created", "unknown"),
    "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER": ("a CUDA driver call failed", "environment"),
    "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS": ("a cuBLAS call failed", "unknown"),
    # "unknown", not "environment": seen on an H200 (cuDNN 9.19) as cudaGetLastError's "err 700 an
    # illegal memory access" after cuDNN's own input transform, on a stack that passes without cuDNN.
    "CUDNN_STATUS_EXECUTION_FAILED_CUDART": ("a CUDA runtime call failed", "unknown"),
    "CUDNN_STATUS_EXECUTION_FAILED_CURAND": ("a cuRAND call failed", "unknown"),
}

# A name to its number: cuDNN 9's (>= 1000: the sub-code) where it has one, else cuDNN 8's.
# Ascending, so that a later (cuDNN 9) number overwrites an earlier (cuDNN 8) one.
_NUMBER_BY_STATUS: dict[str, int] = {name: number for number, name in sorted(_STATUS_BY_NUMBER.items())}


def _known_base(name: str) -> str | None:
    """The name itself when known, else the longest known name it starts with (a newer sub-code)."""
    if name in STATUS_MEANING:
        return name
    for known in _NAMES_LONGEST_FIRST:
        if name.startswith(known):
            return known
    return None


def explain_status(name: str) -> tuple[str, str]:
    """(meaning, cause) of a cuDNN status name; a sub-code newer than the table explains as its base.

    The cause is one of CAUSES; an unknown name is ("unknown cuDNN status", "unknown").
    """
    base = _known_base(name.strip().upper())
    return STATUS_MEANING[base] if base is not None else ("unknown cuDNN status", "unknown")


_CUDNN8_NUMBER_BY_STATUS: dict[str, int] = {name: number for number, name in _STATUS_BY_NUMBER.items() if number < 1000}


def status_code(name: str, *, cudnn8: bool = False) -> int | None:
    """The number of a status name, or None if unknown: cuDNN 9's (the sub-code, >= 1000) where it
    has one, or with ``cudnn8`` cuDNN 8's small number where cuDNN 8 had the name."""
    key = name.strip().upper()
    if cudnn8 and key in _CUDNN8_NUMBER_BY_STATUS:
        return _CUDNN8_NUMBER_BY_STATUS[key]
    return _NUMBER_BY_STATUS.get(key)


def status_name(number: int) -> str | None:
    """The status name of a cudnnStatus_t number of cuDNN 8 (< 1000) or cuDNN 9 (>= 1000)."""
    return _STATUS_BY_NUMBER.get(number)
