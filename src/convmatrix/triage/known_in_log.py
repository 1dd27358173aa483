"""Known issues a failed job's log points at: its versions and failure families against
results/known_issues.toml (results/known.py), with no case to check.

The versions come from the first ``HEAD`` bytes of the log, where PyTorch's collect_env
(``python -m torch.utils.collect_env``) and the usual start-of-job prints put them:

- torch: ``PyTorch version: 2.3.0+cu121``, ``[pip3] torch==2.3.0``, ``torch.__version__: 2.3.0``,
  ``PyTorch: 2.1.0+cu121``, ``torch 2.3.0``
- cuDNN, first found in this order: ``torch.backends.cudnn.version(): 90100`` (what torch loaded),
  ``nvidia-cudnn-cu12==9.1.0.70`` (the wheel torch loads), ``cuDNN version: 8.9.2`` or a
  ``libcudnn.so.8.9.2`` under it (the system's, which a pip torch may not load)
- CUDA: ``torch.version.cuda: 12.1``, ``CUDA used to build PyTorch: 12.1``, else the torch
  version's ``+cu121``
- compute capability: ``capability: 8.6``, ``compute capability (8, 6)``

A fact the log does not print stays unknown, and an entry with a range on it does not match
(results/known.py). Only entries that name a family the log shows are matched; their case
conditions cannot be checked from a log, so each match carries them (KnownIssue.conditions).
"""

from __future__ import annotations

import codecs
import os
import re
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from convmatrix.results import known

HEAD = 1 << 20  # bytes of the log read for versions
LINE_CAP = 16 << 10  # characters of a line looked at
_GZIP_MAGIC = b"\x1f\x8b"

# A version and its suffixes ("2.3.0+cu121", "2.9.0a0", "2.9.0.dev20250801"): each run of letters
# and digits after the numbers is led by a separator, so the pattern cannot backtrack badly.
_V = r"v?(\d+(?:\.\d+){1,3}(?:[A-Za-z][0-9A-Za-z]*)?(?:[+.\-][0-9A-Za-z]+)*)"
_TORCH = (
    re.compile(r"\bPyTorch version\s*:\s*" + _V),
    re.compile(r"\btorch\.__version__\W{0,6}" + _V),
    re.compile(r"\btorch\s*==\s*" + _V),
    re.compile(r"\bPyTorch\s*:\s*" + _V),
    re.compile(r"^\s*torch\s+" + _V + r"\s*$"),
)
_CUDNN = (
    re.compile(r"\bcudnn\.version\(\)\W{0,6}(\d{4,6})\b", re.IGNORECASE),
    re.compile(r"\bnvidia-cudnn-cu\d+\s*==\s*(\d+\.\d+\.\d+(?:\.\d+)?)"),
    re.compile(r"\bcuDNN version\s*:\s*(\d+(?:\.\d+){2,3}|\d{4,6})\b"),
    re.compile(r"\blibcudnn(?:_\w+)?\.so\.(\d+\.\d+\.\d+)"),
)
_CUDA = (
    re.compile(r"\btorch\.version\.cuda\W{0,6}(\d+\.\d+)"),
    re.compile(r"\bCUDA used to build PyTorch\s*:\s*(\d+\.\d+)"),
)
_CAPABILITY = (
    re.compile(r"\bcapability\W{0,4}(\d{1,2})\s*[.,]\s*(\d)\b", re.IGNORECASE),
    re.compile(r"\bwith CUDA capability sm_(\d{1,2})(\d)\b"),  # torch's "not compatible" warning
)
_CU_SUFFIX = re.compile(r"\+cu(\d{2,3})\b")
# Each pattern above needs one of these words (PyTorch, torch., torch==, cudnn, libcudnn,
# capability), case aside: a line holding none, nearly every line of a training log's head, is
# passed over after one search instead of thirteen (1 MiB of such lines took 0.3 s, issue 49's
# triage_vs_grep). Ignoring case it matches a superset of what each pattern's own words match.
_MENTION = re.compile(r"torch|cudnn|capability", re.IGNORECASE)


def stack_from_lines(lines: Iterable[str]) -> known.Stack:
    """The stack facts the lines print (the first of each, by the order in the module doc)."""
    torch: list[str | None] = [None] * len(_TORCH)
    cudnn: list[int | None] = [None] * len(_CUDNN)
    cuda: list[str | None] = [None] * len(_CUDA)
    capability: str | None = None
    for line in lines:
        text = line[:LINE_CAP]
        if not _MENTION.search(text):
            continue
        _first(_TORCH, text, torch, lambda found: found)
        _first(_CUDNN, text, cudnn, known.cudnn_number)
        _first(_CUDA, text, cuda, lambda found: found)
        for pattern in _CAPABILITY:
            if capability is None and (cap := pattern.search(text)):
                capability = f"{int(cap.group(1))}.{cap.group(2)}"
    version = next((v for v in torch if v), None)
    build = next((c for c in cuda if c), None)
    if build is None and version and (suffix := _CU_SUFFIX.search(version)):
        digits = suffix.group(1)
        build = f"{digits[:-1]}.{digits[-1]}"
    return known.Stack(torch=version, cuda=build, cudnn=next((c for c in cudnn if c), None), capability=capability)


def _first(patterns: tuple[re.Pattern[str], ...], text: str, slots: list[Any], convert: Any) -> None:
    for index, pattern in enumerate(patterns):
        if slots[index] is None and (found := pattern.search(text)):
            slots[index] = convert(found.group(1))


def families_of(result: Mapping[str, Any]) -> list[str]:
    """The failure families a scan result (triage/scan.py) names: the cause's and every other one."""
    seen = [result.get("family")] + [f.get("family") for f in result.get("families") or ()]
    return [f for f in dict.fromkeys(seen) if isinstance(f, str)]


def from_log(lines: Iterable[str], families: Iterable[str]) -> list[known.KnownIssue]:
    """The known issues a log's lines and its failure families point at (results.known.match_stack)."""
    return known.match_stack(stack_from_lines(lines), families)


def read_head(path: str, limit: int = HEAD) -> list[str]:
    """The first `limit` bytes of a log (plain, gzip or UTF-16) as lines; [] for stdin ('-'),
    anything but a regular file, or a file that cannot be read: the versions are then unknown.
    A damaged gzip gives what came before the damage."""
    if path == "-" or not os.path.isfile(path):
        return []
    try:
        with open(path, "rb") as handle:
            magic = handle.read(2)
            handle.seek(0)
            data = _gunzip_head(handle, limit) if magic == _GZIP_MAGIC else handle.read(limit)
    except OSError:
        return []
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text = data.decode("utf-16", errors="replace")
    else:
        text = data.decode("utf-8", errors="replace")
    return text.splitlines()


def _gunzip_head(handle: Any, limit: int) -> bytes:
    out = bytearray()
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        while len(out) < limit:
            pending = handle.read(1 << 16)
            if not pending:
                break
            while pending and len(out) < limit and not inflate.eof:
                out += inflate.decompress(pending, limit - len(out))
                pending = inflate.unconsumed_tail
            if inflate.eof:  # one member is enough for the head
                break
    except zlib.error:
        pass
    return bytes(out[:limit])


def from_path(path: str, families: Iterable[str]) -> list[known.KnownIssue]:
    """The known issues of a log file (see read_head) for the families a scan found in it."""
    return from_log(read_head(path), families)


def as_json(issue: known.KnownIssue) -> dict[str, str]:
    """An entry as the triage JSON's "known" list carries it."""
    return {
        "id": issue.id,
        "summary": issue.summary,
        "source": issue.source,
        "fixed_in": issue.fixed_in,
        "workaround": issue.workaround,
        "conditions": issue.conditions,
        "annotation": known.annotation(issue),
    }
