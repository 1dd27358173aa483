"""The cases the isolation tests fault, shared by the suite's own (test_isolation_runs) and the
harness's (test_continuing_runs)."""

from __future__ import annotations

# Small float32 cases (they pass on any CPU); the faulted ones are spread among the others so
# that cases run after each fault.
PASSING = ("conv1d-fp32-k3-p1", "conv2d-fp32-k3-p2-dilated2", "conv3d-fp32-k3-p1",
           "conv_transpose1d-fp32-k3-s2", "conv2d-fp32-k3-p1-sliced", "conv_transpose3d-fp32-k3-s2")
FAULTS = {
    "abort": "conv1d-fp32-k3-permuted-bwd",
    "segv": "conv2d-fp32-k3-transposed",
    "hang": "conv2d-fp32-k3-p1",
    "spin": "conv2d-fp32-k1x7-p0x3",
    "sticky": "conv2d-fp32-k3-p1-g4-bwd",
}
CASES = (PASSING[0], FAULTS["abort"], PASSING[1], FAULTS["segv"], PASSING[2], FAULTS["hang"],
         PASSING[3], FAULTS["spin"], PASSING[4], FAULTS["sticky"], PASSING[5])
# The per-case timeout of these runs: the passing cases take 0.01-0.2 s on a quiet 2-core machine (the first in
# a fresh worker the longest); a CI runner with every test worker busy is many times slower, and a passing
# case past the timeout breaks every count here. The hang and spin faults each cost one TIMEOUT a run.
TIMEOUT = 10

# A repro script's fault, prepended to it by the repro tests (full and minimal): every conv entry
# point of torch.nn.functional raises the signature while cuDNN is on, and runs as it does with it off.
CUDNN_SIGNATURE = ("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
                   "non-contiguous input.")
EVERY_CONV_WHEN_CUDNN = f"""
import torch
import torch.nn.functional


def failing(real):
    def conv(*args, **kwargs):
        if torch.backends.cudnn.enabled:
            raise RuntimeError({CUDNN_SIGNATURE!r})
        return real(*args, **kwargs)
    return conv


for name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
    setattr(torch.nn.functional, name, failing(getattr(torch.nn.functional, name)))
"""
