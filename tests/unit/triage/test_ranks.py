"""Who printed a log line (src/convmatrix/triage/ranks.py): launcher tags, rank, node, device."""

from __future__ import annotations

import pytest

from convmatrix.triage import ranks
from convmatrix.triage.ranks import Where


@pytest.mark.parametrize(
    ("line", "tags", "body"),
    [
        ("[rank1]: RuntimeError: boom", "[rank1]:", "RuntimeError: boom"),
        ("[rank1]:   File \"x.py\", line 3, in f", "[rank1]:", '  File "x.py", line 3, in f'),  # indent kept
        ("[rank0]:[E1202 12:10:03.000000 141 ProcessGroupNCCL.cpp:616] x", "[rank0]:", "[E1202 12:10:03.000000 141 ProcessGroupNCCL.cpp:616] x"),
        ("[default3]:step 1", "[default3]:", "step 1"),
        ("2024-06-01T12:00:00.1234567Z [rank2]: step 1", "[rank2]:", "step 1"),  # CI stamps are no tag
        ("gpu-node-17: [rank3]: step 1", "gpu-node-17:[rank3]:", "step 1"),
        ("0: step 1", "0:", "step 1"),  # srun --label
        ("2024-06-01 12:00:00,123 - INFO - step 1", "", "2024-06-01 12:00:00,123 - INFO - step 1"),  # a log's own stamp
        ("  return F.conv2d(input)", "", "  return F.conv2d(input)"),
        ("", "", ""),
    ],
)
def test_split_prefix(line: str, tags: str, body: str) -> None:
    assert ranks.split_prefix(line) == (tags, body)


@pytest.mark.parametrize(
    ("line", "where"),
    [
        ("[rank3]: RuntimeError: CUDA error on cuda:1", Where(3, "prefix", None, "cuda:1")),
        ("LOCAL_RANK=5 RuntimeError: x", Where(5, "LOCAL_RANK", None, None)),
        ("RANK=7 LOCAL_RANK=1 RuntimeError: x", Where(7, "RANK", None, None)),
        ("MY_RANK=7 x", Where()),  # not a word of its own
        ("[PG 0 (default_pg) Rank 2] Watchdog caught collective operation timeout", Where(2, "process-group", None, None)),
        ("[Rank 4] Watchdog caught", Where(4, "process-group", None, None)),
        ("Ranks 4 and Rank 12x", Where()),
        ("host42: torch.OutOfMemoryError: CUDA out of memory. GPU 0 has a total capacity", Where(None, None, "host42", "cuda:0")),
        ("GPU3 fell off the bus", Where(None, None, None, "cuda:3")),
        ("NVIDIA GPU 10a, mycuda:1, GPUS 2", Where()),
        ("cuda:12 and GPU 3", Where(None, None, None, "cuda:12")),  # cuda:N before GPU N
    ],
)
def test_of_line(line: str, where: Where) -> None:
    assert ranks.of_line(line) == where


def test_of_collateral_reads_the_elastic_rank_field_above() -> None:
    assert ranks.of_collateral("  exitcode  : 1 (pid: 143)", "  rank      : 3 (local_rank: 3)") == Where(3, "elastic")
    assert ranks.of_collateral("failed (exitcode: 1) local_rank: 2 (pid: 9)", "x") == Where(2, "local_rank")
    # The line's own rank wins.
    assert ranks.of_collateral("[rank1]: exitcode 1", "  rank : 3") == Where(1, "prefix")


def test_root_cause_field() -> None:
    assert ranks.root_cause_field("  host      : gpu-node-17") == ("host", "gpu-node-17")
    assert ranks.root_cause_field("  rank      : 3 (local_rank: 3)") == ("rank", "3")
    assert ranks.root_cause_field("  time      : 2024-06-01_12:10:05") is None


def test_resolve_fills_what_the_line_lacks_and_returns_a_new_value() -> None:
    root_cause = {"host": "gpu-node-17", "rank": "3"}
    bare = Where(device="cuda:6")
    assert ranks.resolve(bare, root_cause) == Where(3, "root_cause", "gpu-node-17", "cuda:6")
    assert bare == Where(device="cuda:6")
    assert ranks.resolve(bare, {}) == Where(6, "device", None, "cuda:6")
    assert ranks.resolve(Where(1, "prefix", "n1"), root_cause) == Where(1, "prefix", "n1")
    assert ranks.resolve(Where(), {"rank": "<N/A>"}) == Where()
