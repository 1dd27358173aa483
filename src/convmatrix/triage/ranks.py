"""Who printed a log line: rank, node and device heuristics of triage.

Multi-process jobs interleave their workers' output, each line tagged by whatever launched them:
torchrun's ``[rankN]:``, a host label from pdsh or ``srun --label``, a CI timestamp. These
functions read those tags (and the rank/device mentions inside a message) without deciding
anything about failures; triage.py asks them about the lines it has already chosen.

- ``split_prefix``: the tags before the text as the program printed it.
- ``of_line``: the rank, node and device one line names (``Where``).
- ``of_collateral``: the same for a line after the cause, where torchelastic's failure summary
  puts the rank on the line above (``rank : 1 (local_rank: 1)`` over ``exitcode : 1``).
- ``root_cause_field``: one ``key : value`` field of the elastic "Root Cause" block.
- ``resolve``: fills what the cause's own line lacks from the Root Cause block or the device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

# Tags that launchers put before every line of a worker, and the one space after them.
_TRANSPORT = re.compile(
    r"(?:(?P<rank>\[(?:rank|default)\d+\]:)"  # torchrun / torchelastic
    r"|(?P<stamp>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)(?= )"  # CI per-line timestamps
    r"|(?P<host>[a-z][a-z0-9-]*\d[a-z0-9.-]*:)(?= )"  # pdsh / srun host labels: "gpu-node-17: "
    r"|(?P<task>\d{1,5}:)(?= )"  # srun --label task ids: "0: "
    r") ?"
)
_RANK_PREFIX = re.compile(r"\[(?:rank|default)(\d+)\]:")
_HOST_PREFIX = re.compile(r"^([a-z][a-z0-9-]*\d[a-z0-9.-]*):\s")
# Each starts with a literal (which keeps the search fast on long lines); the word boundaries
# around them are checked by _word.
_RANK_ENV = re.compile(r"RANK=(\d+)")
_LOCAL_RANK_ENV = re.compile(r"LOCAL_RANK=(\d+)")
_PG_RANK = re.compile(r"Rank (\d+)")  # a process group's "[PG 0 (default_pg) Rank 3]", NCCL's "[Rank 3]"
_CUDA_DEVICE = re.compile(r"cuda:(\d+)")
_GPU_DEVICE = re.compile(r"GPU ?(\d+)")
_FIELD = re.compile(r"^\s*(host|rank|local_rank|exitcode)\s*:\s*(\S+)")
_LOCAL_RANK_FIELD = re.compile(r"local_rank:?\s*(\d+)")


@dataclass(frozen=True)
class Where:
    """The rank (and how it was found), node and device of a line; None where it does not say."""

    rank: int | None = None
    rank_source: str | None = None
    node: str | None = None
    device: str | None = None


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _word(pattern: re.Pattern[str], text: str, *, end: bool = False) -> str | None:
    """Group 1 of the first match of ``pattern`` with a word boundary before it (and after it,
    with ``end``), as ``\\b...`` would find it."""
    for match in pattern.finditer(text):
        start, stop = match.start(), match.end()
        if start > 0 and _is_word(text[start - 1]):
            continue
        if end and stop < len(text) and _is_word(text[stop]):
            continue
        return match.group(1)
    return None


def split_prefix(text: str) -> tuple[str, str]:
    """``(tags, body)``: the launcher's tags (timestamps left out) and the line as printed.

    Two lines with different tags come from different processes, so one cannot continue the
    other; the body keeps its own indentation (one space after the tags is the separator).
    """
    tags: list[str] = []
    pos = 0
    while True:
        match = _TRANSPORT.match(text, pos)
        if match is None or match.end() == pos:
            return "".join(tags), text[pos:]
        if match.group("stamp") is None:
            tags.append(match.group(0).rstrip(" "))
        pos = match.end()


def of_line(text: str) -> Where:
    """The rank, node and device that one line names.

    The rank comes from, in order: torchrun's ``[rankN]:`` prefix, ``RANK=N`` / ``LOCAL_RANK=N``
    in the text, a process group's ``[PG ... Rank N]`` / ``Rank N``. The node is a host label
    before the line; the device a ``cuda:N`` or ``GPU N``.
    """
    host = _HOST_PREFIX.match(text)
    node = host.group(1) if host else None
    rank: int | None = None
    source: str | None = None
    prefix = _RANK_PREFIX.search(text)
    if prefix:
        rank, source = int(prefix.group(1)), "prefix"
    else:
        for pattern, name in ((_RANK_ENV, "RANK"), (_LOCAL_RANK_ENV, "LOCAL_RANK")):
            digits = _word(pattern, text)
            if digits is not None:
                rank, source = int(digits), name
                break
    if rank is None:
        digits = _word(_PG_RANK, text, end=True)
        if digits is not None:
            rank, source = int(digits), "process-group"
    index = _word(_CUDA_DEVICE, text)
    if index is None:
        index = _word(_GPU_DEVICE, text, end=True)
    device = f"cuda:{index}" if index is not None else None
    return Where(rank=rank, rank_source=source, node=node, device=device)


def of_collateral(text: str, line_above: str) -> Where:
    """``of_line``, and for a line without a rank, the elastic summary's rank field above it or a
    ``local_rank: N`` in the line itself."""
    where = of_line(text)
    if where.rank is not None:
        return where
    field = _FIELD.match(line_above)
    if field and field.group(1) == "rank" and field.group(2).isdigit():
        return replace(where, rank=int(field.group(2)), rank_source="elastic")
    local = _LOCAL_RANK_FIELD.search(text)
    if local:
        return replace(where, rank=int(local.group(1)), rank_source="local_rank")
    return where


def root_cause_field(text: str) -> tuple[str, str] | None:
    """``(key, value)`` of a ``host`` / ``rank`` / ``local_rank`` / ``exitcode`` field line."""
    field = _FIELD.match(text)
    return (field.group(1), field.group(2)) if field else None


def resolve(where: Where, root_cause: dict[str, str]) -> Where:
    """The cause's whereabouts, with what its own line lacks filled in (a new value).

    A missing rank comes from the Root Cause block's rank field, else from the device index; a
    missing node from the block's host field.
    """
    if where.rank is None and root_cause.get("rank", "").isdigit():
        where = replace(where, rank=int(root_cause["rank"]), rank_source="root_cause")
    if where.node is None and "host" in root_cause:
        where = replace(where, node=root_cause["host"])
    if where.rank is None and where.device is not None:
        where = replace(where, rank=int(where.device.split(":")[1]), rank_source="device")
    return where
