"""What the container lane sends the engine: unit tests, since no GPU is here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from convmatrix import containers


def spec(tmp_path: Path, gpu: int | None) -> containers.RunSpec:
    return containers.RunSpec(image="sha256:img", command=["python", "-m", "pytest", "/suite"],
                              results_dir=tmp_path / "r", suite_dir=tmp_path / "suites", gpu_index=gpu,
                              environment={"CONVMATRIX_LANE": "container"})


def test_gpu_run_requests_that_gpu_only(tmp_path):
    kwargs = containers.run_kwargs(spec(tmp_path, 3))
    (request,) = kwargs["device_requests"]
    assert request["DeviceIDs"] == ["3"]
    assert request["Capabilities"] == [["gpu"]]


def test_cpu_run_requests_no_device(tmp_path):
    assert containers.run_kwargs(spec(tmp_path, None))["device_requests"] == []


def test_least_privilege(tmp_path):
    kwargs = containers.run_kwargs(spec(tmp_path, 0))
    assert kwargs["user"] == f"{os.getuid()}:{os.getgid()}"
    assert kwargs["network_mode"] == "none"
    assert kwargs["privileged"] is False
    assert kwargs["volumes"][str(tmp_path / "suites")] == {"bind": "/suite", "mode": "ro"}
    assert kwargs["volumes"][str((tmp_path / "r").resolve())] == {"bind": "/results", "mode": "rw"}
    assert len(kwargs["volumes"]) == 2
    assert kwargs["shm_size"] == containers.SHM_SIZE
    assert kwargs["environment"]["CONVMATRIX_LANE"] == "container"
    assert kwargs["environment"]["HOME"] == "/tmp"


def test_unreachable_engine_is_one_line(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(containers.EngineError) as err, containers.client():
        pass
    assert str(err.value).startswith("docker: the engine is not reachable (")
    assert "\n" not in str(err.value)
    assert err.value.exit_code == 2
