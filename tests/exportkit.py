"""Runs for the export tests (issue 40): result directories as the harness leaves them, on stand-in
GPUs, whose failure messages quote everything a bundle must not carry (the run's own path, the
test's tmp path, this machine's host and user names, an IPv4 address, a home folder, a GPU UUID),
and the scan that finds any of it in a bundle's text."""

from __future__ import annotations

import getpass
import json
import re
import socket
from pathlib import Path
from typing import Any

from testkit import HOST, env_json, record, write_result

H100 = ("h100-80gb-hbm3-sm90", {"index": 1, "name": "NVIDIA H100 80GB HBM3", "capability": "9.0",
                                 "uuid": "GPU-5b2dd5e9-7a3c-4f1e-9d4a-0c8e2f6a1b02"})
V100 = ("tesla-v100-sxm2-16gb-sm70", {"index": 0, "name": "Tesla V100-SXM2-16GB", "capability": "7.0",
                                       "uuid": "GPU-11111111-2222-3333-4444-555555555555"})
H200_SLICE = ("h200-sm90-mig3g-71gb", {"index": 0, "name": "NVIDIA H200", "capability": "9.0",
                                        "uuid": "MIG-0929581a-2be6-5dec-bf34-0954c6c529a6", "mig_profile": "3g.71gb",
                                        "mig_device": 0, "parent_uuid": "GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39"})
IP = "10.20.30.40"
PARAMS = {"op": "conv2d", "n": 2, "c_in": 8, "c_out": 16, "size": [12, 12], "kernel": 3, "stride": 1, "padding": 1,
          "dilation": 1, "groups": 1, "dtype": "float16", "autocast": None, "memory_format": "channels_last",
          "layout": None, "backward": False, "output_padding": 0, "benchmark": None, "deterministic": None,
          "tf32": None, "bias": True, "direction": None, "via": None,
          "source": f"seen on {socket.gethostname()} by {getpass.getuser()}", "tag": "internal-ticket-7",
          "workload": "/home/alice/models/secret.pt"}
SHAPES = {"input": [2, 8, 12, 12], "weight": [16, 8, 3, 3], "bias": [16], "output": [2, 16, 12, 12]}
KNOBS = {"device": "cuda", "cudnn_benchmark": False, "cudnn_deterministic": False, "channels_last": False,
         "pad_channels": 0}


def leaky_message(run: Path, tmp: Path) -> str:
    """A failure message quoting everything identifying there is (a real one quotes some of it:
    a traceback's file, a cache folder, a rank's host)."""
    return (f"RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED in {run}/cell/log.txt on "
            f"{socket.gethostname()} ({HOST}) user {getpass.getuser()} from {IP}:5000, cache /home/alice/.cache "
            f"and /root/.nv, scratch {tmp}/x, device GPU-5b2dd5e9-7a3c-4f1e-9d4a-0c8e2f6a1b02\nsecond line")


def cell_record(gpu: tuple[str, dict[str, Any]], *, control: bool, ended: str, knobs: str = "default") -> dict[str, Any]:
    return {"lane": "host", "gpu_key": gpu[0], "gpu": gpu[1], "control": control, "knobs": knobs,
            "requested": {"lane": "host"}, "started": ended, "ended": ended, "python": "/home/alice/venv/bin/python",
            "matrix": "/home/alice/m.toml"}


def write_run(run: Path, tmp: Path, gpu: tuple[str, dict[str, Any]], *, ended: str = "2026-12-04T23:59:58.123+00:00",
              sources: list[str] | None = None, cudnn: int = 91900, cases: tuple[str, str] = ("conv2d-a", "conv2d-b"),
              ) -> Path:
    """A run of two cells on gpu: the control (passes both cases) and a candidate whose second case
    fails with leaky_message (a regression); env.json names this machine."""
    env = env_json("c", torch="2.11.0+cu130", cuda="13.0", cudnn=cudnn, driver="580.159.04", device="cuda",
                   hostname=socket.gethostname(), platform=f"Linux-{socket.gethostname()}", argv=[str(run)],
                   started=ended, ended=ended)
    good = [record(cases[0], params=PARAMS, shapes=SHAPES, knobs=KNOBS, device="cuda"),
            record(cases[1], params=PARAMS, shapes=SHAPES, knobs=KNOBS, device="cuda")]
    bad = [good[0], record(cases[1], "failed", leaky_message(run, tmp), params=PARAMS, shapes=SHAPES, knobs=KNOBS,
                           device="cuda", sources=sources or [])]
    write_result(run, "host", good, gpu=gpu[0], env={**env, "cell_id": "host"},
                 cell=cell_record(gpu, control=True, ended=ended), host=HOST)
    write_result(run, "host+pad8", bad, gpu=gpu[0], env={**env, "cell_id": "host+pad8"},
                 cell=cell_record(gpu, control=False, ended=ended, knobs="pad=8"), host=HOST)
    return run


_IPV4 = re.compile(r"(?<![0-9.])(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?![0-9.])")


def leaks(text: str, *places: Path) -> list[str]:
    """What of the forbidden the text holds: a path given, the host and user names (as words: a
    two-letter host name is inside 'convmatrix'), the harness's host label, an IPv4 address, a
    home folder, a GPU UUID."""
    found = [str(p) for p in places if str(p) in text]
    for name in (socket.gethostname(), socket.getfqdn(), getpass.getuser(), HOST):
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])", text, re.IGNORECASE):
            found.append(name)
    found += _IPV4.findall(text)
    found += [w for w in ("/home/", "/root", "GPU-", "MIG-", "alice") if w in text]
    return found


def bundle_text(path: Path) -> str:
    """The bundle file's text, and once more with JSON's escapes undone (a path written as \\/)."""
    raw = path.read_text()
    return raw + "\n" + json.dumps(json.loads(raw), ensure_ascii=False)


def write_fallback_run(run: Path, ended: str = "2026-12-04T23:59:58.123+00:00") -> Path:
    """A run on H100 whose candidate passes conv3d-a on Slow3d at 14x the control's peak memory
    (the control ran it on Cudnn): a `fallback` (issue 48); conv3d-b the same on both sides."""
    env = env_json("c", torch="2.11.0+cu130", cuda="13.0", cudnn=91900, driver="580.159.04", device="cuda",
                   started=ended, ended=ended)

    def timing(peak: int) -> dict[str, Any]:
        return {"timing": {"peak_bytes": peak, "forward_runs": [1.0, 1.0, 1.0]}}

    control = [record(c, device="cuda", backend="Cudnn", **timing(2 << 20)) for c in ("conv3d-a", "conv3d-b")]
    candidate = [record("conv3d-a", device="cuda", backend="Slow3d", **timing(28 << 20)),
                 record("conv3d-b", device="cuda", backend="Cudnn", **timing(2 << 20))]
    write_result(run, "host", control, gpu=H100[0], env=env, cell=cell_record(H100, control=True, ended=ended), host=HOST)
    write_result(run, "host+nocudnn", candidate, gpu=H100[0], env=env,
                 cell=cell_record(H100, control=False, ended=ended), host=HOST)
    return run


AUDIT_SWAP = [  # the library audit's table of a 9.4.0 wheel whose cnn and ops came from 9.2.1 on LD_LIBRARY_PATH
    {"name": "libcudnn.so.9", "family": "cudnn", "path": "/v/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
     "loaded": True, "version": "9.4.0", "package": "nvidia-cudnn-cu12", "origin": "wheel"},
    {"name": "libcudnn_cnn.so.9", "family": "cudnn", "path": "/secret/cudnn92/lib/libcudnn_cnn.so.9",
     "loaded": True, "version": "9.2.1", "package": "nvidia-cudnn-cu12", "origin": "LD_LIBRARY_PATH"},
    {"name": "libcudnn_ops.so.9", "family": "cudnn", "path": "/secret/cudnn92/lib/libcudnn_ops.so.9",
     "loaded": True, "version": "9.2.1", "package": "nvidia-cudnn-cu12", "origin": "LD_LIBRARY_PATH"},
    {"name": "libcublas.so.12", "family": "cublas", "path": "/v/site-packages/nvidia/cublas/lib/libcublas.so.12",
     "loaded": True, "version": "12.4.5", "package": "nvidia-cublas-cu12", "origin": "wheel"},
]


def write_audit_run(run: Path, ended: str = "2026-12-04T23:59:58.123+00:00") -> Path:
    """A run on H100 whose candidate's library audit found 9.2.1's cnn and ops mixed into its 9.4.0
    wheel from LD_LIBRARY_PATH (issue 47); the control's audit names its wheel's files alone."""
    env = env_json("c", torch="2.5.1+cu124", cuda="12.4", cudnn=90400, driver="580.159.04", device="cuda",
                   started=ended, ended=ended)
    own = [dict(row, path=f"/v/site-packages/nvidia/cudnn/lib/{row['name']}", version="9.4.0", origin="wheel")
           if row["family"] == "cudnn" else row for row in AUDIT_SWAP]

    def audit(rows: list[dict[str, Any]], message: str | None = None) -> dict[str, Any]:
        return record("audit-cuda-libraries", "failed" if message else "passed", message, device="cuda",
                      nodeid="suites/test_audit.py::test_audit[audit-cuda-libraries]",
                      audit={"schema": 1, "libraries": rows})

    swap = ("CUDA library swap: libcudnn_cnn.so.9 9.2.1 loaded from LD_LIBRARY_PATH "
            "/secret/cudnn92/lib/libcudnn_cnn.so.9, not the 9.4.0 of nvidia-cudnn-cu12")
    write_result(run, "host", [audit(own), record("conv2d-a", device="cuda")], gpu=H100[0], env=env,
                 cell=cell_record(H100, control=True, ended=ended), host=HOST)
    write_result(run, "host+swapped", [audit(AUDIT_SWAP, swap), record("conv2d-a", device="cuda")], gpu=H100[0],
                 env=env, cell=cell_record(H100, control=False, ended=ended), host=HOST)
    return run
