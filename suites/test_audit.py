"""The CUDA library audit as a case (issue 47): which cuDNN, cuBLAS, cuFFT, NCCL, ... files this
cell's torch loads and from where, judged before any conv runs. libaudit.py does the work in a
child process, so that cuDNN aborting on a foreign sub-library is this case's failure alone, and
the conv cases after it still run.

The case id is `audit-cuda-libraries`; its results line carries the table as `audit`
(suites/README.md). A container cell also gets the image as shipped: $CONVMATRIX_SHIPPED_LD_LIBRARY_PATH
(images/Dockerfile) is the image's LD_LIBRARY_PATH without the harness's addition; that second
table is recorded (`audit.as_shipped`), never judged: red is decided on the cell as it ran.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest

import isolation
import libaudit

CASE_ID = libaudit.AUDIT_CASE  # "audit-cuda-libraries"


class LibraryAuditFailure(Exception):
    """What the audit found: one finding a line, the worst first (results/families.py reads them)."""


@pytest.mark.parametrize("audit_case", [pytest.param(CASE_ID, id=CASE_ID)])
def test_audit(audit_case: str, record_facts: Callable[..., None], pytestconfig: pytest.Config,
               audit_child: Callable[[dict[str, str]], dict[str, Any] | None]) -> None:
    record_facts(audit=None)
    here = dict(os.environ)
    timeout = libaudit.child_timeout(pytestconfig.getoption("case_timeout"))
    # audit_child: what the child started with the session in this environment gave (conftest.py
    # EarlyAudit), or None, and then the audit starts its own.
    early = audit_child(here)
    table: dict[str, Any] = libaudit.audit(here, early, timeout)
    table["early"] = early is not None  # its child started with the session (the audit's cost)
    shipped = libaudit.shipped_env(here)
    if shipped is not None:
        as_shipped = libaudit.audit(shipped, audit_child(shipped), timeout)
        table["as_shipped"] = {key: as_shipped[key] for key in ("libraries", "findings", "cudnn_version",
                                                               "ld_library_path", "cudnn_lines")}
    record_facts(audit=table)
    if libaudit.ran_past(table):
        # A cold torch import on a loaded runner is slow, not a finding about the libraries.
        raise isolation.RanPastItsTime(f"the library audit's loading process ran past its {timeout:g} s "
                                       f"timeout (its last step: {table['stage'] or 'importing torch'})")
    if table["findings"]:
        raise LibraryAuditFailure("\n".join(table["findings"]))
