"""A second run starting beside this one, for tests only, never the product: at the end of the
cell's session it marks another run directory as the latest, as a run started meanwhile on the
same checkout would (`convmatrix run` writes reports/runs/LATEST as it starts).

Load it with ``-p convmatrix_race`` (with tests/plugins on PYTHONPATH) and set
CONVMATRIX_RACE_LATEST to ``<the LATEST file>:<the run directory to name in it>``. A step after
the run that reads LATEST instead of the run it made then reads the other run (the CI failure of
stop 43: two nightlies in parallel tests, one's report written into nothing).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

RACE_ENV = "CONVMATRIX_RACE_LATEST"


def pytest_sessionfinish(session: pytest.Session) -> None:
    said = os.environ.get(RACE_ENV)
    if not said:
        return
    latest, _, other = said.partition(":")
    Path(latest).write_text(f"{other}\n")
