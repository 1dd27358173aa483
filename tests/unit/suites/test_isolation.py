"""Case isolation's choices, which need no run and no GPU: the GPU each xdist worker takes,
sticky CUDA errors, a timeout told from a crash, a crash's marker."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from testkit import load_suite_module

isolation = load_suite_module("isolation")
records = load_suite_module("records")


# --- units ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("environ", "count", "gpus"), [
    ({"CUDA_VISIBLE_DEVICES": "2,3"}, 8, ["2", "3"]),
    ({"CUDA_VISIBLE_DEVICES": " GPU-aa , GPU-bb "}, 8, ["GPU-aa", "GPU-bb"]),
    ({"CUDA_VISIBLE_DEVICES": ""}, 8, []),  # set to nothing: no GPU, whatever the machine has
    ({}, 3, ["0", "1", "2"]),
    ({}, 0, []),
])
def test_outer_gpus(environ: dict[str, str], count: int, gpus: list[str]) -> None:
    assert isolation.outer_gpus(environ, lambda: count) == gpus


def test_gpu_for_slot_is_round_robin() -> None:
    gpus = ["4", "6", "7"]
    assert [isolation.gpu_for_slot(slot, gpus) for slot in range(7)] == ["4", "6", "7", "4", "6", "7", "4"]
    assert isolation.gpu_for_slot(2, []) is None
    with pytest.raises(ValueError, match="slot"):
        isolation.gpu_for_slot(-1, gpus)


def node(worker: str) -> Any:
    return SimpleNamespace(workerinput={"workerid": worker})


def test_a_replacement_worker_takes_the_slot_and_gpu_of_the_one_it_replaces() -> None:
    assigned: dict[str, Any] = {}
    slots = isolation.GpuSlots(lambda worker, facts: assigned.update({worker: facts}),
                               environ={"CUDA_VISIBLE_DEVICES": "1,2"}, count_gpus=lambda: 0)
    gw0, gw1, gw2 = node("gw0"), node("gw1"), node("gw2")
    slots.pytest_configure_node(gw0)
    slots.pytest_configure_node(gw1)
    slots.pytest_testnodedown(gw0, "crashed")
    slots.pytest_configure_node(gw2)
    assert [n.workerinput[isolation.GPU_INPUT_KEY] for n in (gw0, gw1, gw2)] == ["1", "2", "1"]
    assert assigned == {"gw0": {"slot": 0, "cuda_visible_devices": "1"},
                        "gw1": {"slot": 1, "cuda_visible_devices": "2"},
                        "gw2": {"slot": 0, "cuda_visible_devices": "1"}}


def test_a_worker_pins_its_gpu_only_when_given_one() -> None:
    environ = {"CUDA_VISIBLE_DEVICES": "1,2"}
    assert isolation.pin_worker_gpu({isolation.GPU_INPUT_KEY: None}, environ) is None
    assert environ == {"CUDA_VISIBLE_DEVICES": "1,2"}
    assert isolation.pin_worker_gpu({isolation.GPU_INPUT_KEY: "2"}, environ) == "2"
    assert environ == {"CUDA_VISIBLE_DEVICES": "2"}


@pytest.mark.parametrize(("message", "sticky"), [
    ("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be ...", True),
    ("CUDA error: misaligned address", True),
    ("CUDA error: unspecified launch failure", True),
    ("CUDA error: device-side assert triggered", True),
    ("CUDA error: operation not permitted when stream is capturing", True),
    ("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if ...", False),
    ("CUDA out of memory. Tried to allocate 2.00 GiB", False),
    ("numeric mismatch: output max_abs_err=0.1", False),
    (None, False),
])
def test_sticky_errors_are_told_by_their_text(message: str | None, sticky: bool) -> None:
    assert isolation.is_sticky(message) is sticky


def test_the_controller_tells_a_timeout_from_a_crash_by_the_time_run() -> None:
    handler = isolation.CrashHandler("/nonexistent", 30.0, lambda *args: None, records.outran)
    long_ago = {"case": "c", "started": "2020-01-01T00:00:00.000+00:00"}
    just_now = {"case": "c", "started": datetime.datetime.now(datetime.UTC).isoformat()}
    assert handler.judge(long_ago, "exit code 1", "gw0")[0] == "timeout"
    status, message = handler.judge(just_now, "signal 11, SIGSEGV", "gw0")
    assert status == "crashed"
    assert message.startswith("the worker process gw0 died (signal 11, SIGSEGV)")
    assert isolation.CrashHandler("/x", 0.0, lambda *args: None, records.outran).judge(long_ago, None, "gw0")[0] == "crashed"


def test_the_marker_of_a_crash_is_consumed(tmp_path: Path) -> None:
    written: list[tuple[Any, ...]] = []
    handler = isolation.CrashHandler(str(tmp_path), 0.0, lambda *args: written.append(args), records.outran)
    (tmp_path / "running-gw3.json").write_text(json.dumps({"case": "c", "nodeid": "n", "started": None}))
    report = SimpleNamespace(node=SimpleNamespace(gateway=SimpleNamespace(id="gw3")), longrepr="x")
    handler.pytest_handlecrashitem("suites/test_conv.py::test_conv[c]", report, None)
    assert [args[1:] for args in written] == [
        ("crashed", "the worker process gw3 died (cause unknown) while this case ran; a fresh worker ran the rest",
         "gw3")]
    assert list(tmp_path.iterdir()) == []
    # No marker: the worker wrote the case's line itself before it left; nothing more is written.
    handler.pytest_handlecrashitem("suites/test_conv.py::test_conv[c]", report, None)
    assert len(written) == 1
