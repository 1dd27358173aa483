"""Infrastructure causes: the first decisive line of a cell's install, build or engine log."""

from __future__ import annotations

from pathlib import Path

import pytest

from convmatrix.results import infra

# pip through a dead resolver: a warning per retry, then the resolver's verdict (pypa/pip#14250).
PIP_DNS = """\
Looking in indexes: https://download.pytorch.org/whl/cu124
WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /whl/cu124/torch/
ERROR: Could not find a version that satisfies the requirement torch==2.5.1 (from versions: none)
ERROR: No matching distribution found for torch==2.5.1
"""
# uv's own words (astral-sh/uv#1971, #12016).
UV_DNS = """\
# convmatrix: install log of cell-a
Using Python 3.11.2 environment at: /v/cell-a
error: Failed to fetch: `https://download.pytorch.org/whl/cu124/torch/`
  Caused by: Could not connect, are you offline?
  Caused by: dns error: failed to lookup address information: Temporary failure in name resolution
"""
UV_SLOW = "error: Failed to fetch: `https://pypi.org/simple/torch/`\n  Caused by: operation timed out\n"
BUILDKIT = ('ERROR: failed to solve: python:3.11-slim: failed to resolve source metadata for '
            'docker.io/library/python:3.11-slim: failed to do request: Head "https://registry-1.docker.io/v2/library/'
            'python/manifests/3.11-slim": dial tcp: lookup registry-1.docker.io: no such host')


def test_pip_the_first_decisive_line_is_the_dns_failure_not_the_resolver(tmp_path: Path) -> None:
    log = tmp_path / "cell.install.log"
    log.write_text(PIP_DNS)
    found = infra.classify_log(log, "cell: install failed: `pip install torch` exited 1")
    assert found is not None
    assert (found.cause, found.line_no, found.log, found.retryable) == ("index unreachable", 2, str(log), False)
    assert "Temporary failure in name resolution" in found.line
    assert found.words().startswith("index unreachable: WARNING: Retrying") and found.words().endswith(f"(log {log}:2)")


@pytest.mark.parametrize(("text", "cause", "retryable"), [
    (UV_DNS, "index unreachable", False),
    (UV_SLOW, "index timed out", True),
    (BUILDKIT, "registry unreachable", False),
    ("docker: the engine is not reachable (unix:///var/run/docker.sock: No such file or directory)", "engine down",
     False),
    ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
     "engine down", False),
    ('could not select device driver "" with capabilities: [[gpu]]', "no GPU", False),
    ("CUDA driver version is insufficient for CUDA runtime version", "driver too old", False),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", "GPU lost", True),
    ("Out of memory: Killed process 4242 (python)", "OOM killed", True),
    ("the suite process died (signal 9, SIGKILL) while this case ran", "killed", True),
    ("slurmstepd: error: *** JOB 77 ON gpu01 CANCELLED AT 2026-12-05T01:00:00 DUE TO TIME LIMIT ***", "timed out",
     True),
    ("slurmstepd: error: *** JOB 77 ON gpu01 CANCELLED DUE TO NODE FAILURE ***", "node lost", True),
    ("cell: image build failed (exit 1): RUN pip install nothing", "build failed", False),
    ("  × No solution found when resolving dependencies:", "build failed", False),
])
def test_each_cause_is_told_by_its_tool_s_own_words(text: str, cause: str, retryable: bool) -> None:
    found = infra.classify(text.splitlines())
    assert found is not None and (found.cause, found.retryable) == (cause, retryable)


@pytest.mark.parametrize("text", [
    "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous",
    "AssertionError: numeric mismatch: max abs diff 0.5",
    "the suite process died (signal 11, SIGSEGV) while this case ran",
    "the case ran past its 2 s timeout",
    "passed",
])
def test_a_test_s_own_failure_is_no_infrastructure_cause(text: str) -> None:
    assert infra.classify([text]) is None


def test_the_record_reads_back_and_a_malformed_one_is_named() -> None:
    found = infra.classify(UV_DNS.splitlines(), "/v/cell-a.install.log")
    assert found is not None
    assert infra.read(found.record()) == (found, None)
    assert infra.read({"cause": "gremlins", "line": "x"})[1] == f"cause: not one of {', '.join(sorted(infra.BY_NAME))}"
    assert infra.read({"cause": "killed", "line": 3})[1] == "line: expected a string"
    assert infra.read({"cause": "killed", "line": "x", "line_no": 0})[1] == "line_no: expected a 1-based line number or null"
    assert infra.read([])[1] == "expected an object"


def test_a_long_line_is_cut_and_an_unreadable_log_falls_back_to_the_message(tmp_path: Path) -> None:
    found = infra.classify(["dns error: " + "x" * 1000])
    assert found is not None and len(found.line) == infra.LINE
    fallback = infra.classify_log(tmp_path / "gone.log", "cell: image build failed (exit 1): oops")
    assert fallback is not None and fallback.cause == "build failed" and fallback.log == str(tmp_path / "gone.log")
    assert infra.classify_log(None, "nothing to see") is None


def test_shared_causes_name_what_the_cells_share() -> None:
    shared = {c.name: infra.RootCause(cause=c.name, line="").shared for c in infra.CAUSES}
    assert {name: what for name, what in shared.items() if what} == {
        "index unreachable": "index", "registry unreachable": "registry", "engine down": "engine"}


def test_attempts_read_back_and_a_malformed_entry_is_named() -> None:
    cause = {"cause": "killed", "line": "the suite process died (signal 9, SIGKILL) while this case ran"}
    (attempt,), wrong = infra.read_attempts([{"attempt": 1, "path": "attempts/1", "cause": cause,
                                              "counts": {"passed": 2, "crashed": 1}}])
    assert wrong is None and attempt.cause.retryable
    assert attempt.words(2) == ("attempt 1 of 2: killed: the suite process died (signal 9, SIGKILL) while this case "
                                "ran (1 crashed, 2 passed; attempts/1/)")
    assert infra.read_attempts([{"attempt": 1, "path": "../etc", "cause": cause}])[1] == \
        "entry 0: path: expected attempts/1"
    assert infra.read_attempts([{"attempt": True, "path": "attempts/1", "cause": cause}])[1] == \
        "entry 0: attempt: expected a number from 1"
    assert infra.read_attempts({})[1] == f"expected a list of at most {infra.MAX_ATTEMPTS} attempts"


def test_uv_s_newer_chain_is_read_too() -> None:
    # uv as this machine has it: `cause:` lines under `error: Request failed after 3 retries`.
    chain = ["error: Request failed after 3 retries in 6.5s", "  cause: Failed to fetch: http://127.0.0.1:9/simple/torch/",
             "  cause: error sending request for url (http://127.0.0.1:9/simple/torch/)", "  cause: operation timed out"]
    found = infra.classify(chain)
    assert found is not None and (found.cause, found.line) == ("index timed out", "cause: operation timed out")
    refused = infra.classify([*chain[:3], "  cause: Connection refused (os error 111)"])
    assert refused is not None and (refused.cause, refused.line) == (
        "index unreachable", "cause: Failed to fetch: http://127.0.0.1:9/simple/torch/")


def test_every_cause_has_a_word_for_the_grid() -> None:
    assert {c.name for c in infra.CAUSES} == set(infra.SHORT)
    assert all(" " not in word and len(word) <= 8 for word in infra.SHORT.values())


@pytest.mark.parametrize("planted", ["fifo", "link"])
def test_a_fifo_or_a_link_at_the_logs_path_is_passed_by(planted: str, tmp_path: Path) -> None:
    """classify_log opened the install log with a plain open(): a FIFO there hung the run, a link
    was followed. It reads through rundir's regular-file opener, and the fallback speaks."""
    import os

    log = tmp_path / "cell.install.log"
    if planted == "fifo":
        os.mkfifo(log)
    else:
        (tmp_path / "elsewhere.txt").write_text("ERROR: Could not find a version that satisfies the requirement x\\n")
        log.symlink_to(tmp_path / "elsewhere.txt")
    found = infra.classify_log(log, "Temporary failure in name resolution")
    assert found is not None and found.line != "ERROR: Could not find a version that satisfies the requirement x"
