"""A hostile suite for tests only, never the product: at the end of its session it plants links
in its own results directory where the harness will write next (issue 32, items 1 and 2).

Load it with ``-p convmatrix_plant`` (with tests/plugins on PYTHONPATH) and name a folder in the
CONVMATRIX_PLANT_OUTSIDE environment variable. When the session ends, in the cell's own results
directory (a `--results-dir` whose name ends with `.partial`; re-runs into blocking/ or
explain/<case>/ plant nothing):
- `explain` and `blocking` become symlinks to that folder: a harness that follows them writes
  its re-runs' log.txt, results.jsonl, env.json and <case>.json there;
- `.cell.json.<ppid>.tmp` and `.first_cause.json.<ppid>.tmp` (the names the harness's writer took
  for its temporary files, the harness being this process's parent) become symlinks to files in
  that folder: a writer that opens them with "w" overwrites those files.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

OUTSIDE_ENV = "CONVMATRIX_PLANT_OUTSIDE"
TARGETS = ("cell.json", "first_cause.json")


def pytest_sessionfinish(session: pytest.Session) -> None:
    outside = os.environ.get(OUTSIDE_ENV)
    results = session.config.getoption("--results-dir", default=None)
    if not outside or not results or not str(results).endswith(".partial"):
        return
    here = Path(results)
    for name in ("explain", "blocking"):
        if not os.path.lexists(here / name):
            (here / name).symlink_to(outside, target_is_directory=True)
    for name in TARGETS:
        (here / f".{name}.{os.getppid()}.tmp").symlink_to(Path(outside) / name)
