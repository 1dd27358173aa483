"""What to do about a failure family, and how to prove it fixed (used by triage).

Data only: ``REMEDIES`` maps each family of ``classify.FAMILIES`` to short remedies, ``SUITE_K``
to the ``pytest -k`` expression that selects the suite cases a fix-proof run should watch, and
``verify_commands`` turns them into commands to copy.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from convmatrix.results import rundir
from convmatrix.results.families import FAMILIES, SIGNATURE
from convmatrix.shipped import shipped

_NEWER_CUDNN = (
    "try a newer cuDNN with the same torch: pip install 'nvidia-cudnn-cu12==<newer>' in the job's venv, "
    "or add it as an override cell (cudnn = [\"bundled\", \"<newer>\"] in a matrix file)"
)

REMEDIES: dict[str, tuple[str, ...]] = {
    SIGNATURE: (
        "turn autotuning off: torch.backends.cudnn.benchmark = False",
        "turn determinism on: torch.backends.cudnn.deterministic = True",
        "pad or project channels to a multiple of 8 (fp16/bf16 tensor-core engines need it)",
        "make inputs contiguous (x.contiguous()) and keep memory formats consistent "
        "(all channels_last or none)",
        _NEWER_CUDNN,
        "on GPUs below sm80, run the convolution in float32 instead of float16/bfloat16",
    ),
    "cudnn_no_engine": (
        "no cuDNN engine accepts this convolution: turn torch.backends.cudnn.benchmark off and retry",
        "pad channels to a multiple of 8 and make inputs contiguous / one memory format",
        _NEWER_CUDNN,
    ),
    "cudnn_no_algorithm": (
        "often an out-of-memory in disguise: lower the batch size and retry",
        "turn torch.backends.cudnn.benchmark off",
        _NEWER_CUDNN,
    ),
    "cudnn_execution_failed": (
        "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel that failed",
        "check the driver and the GPU health (nvidia-smi -q, dmesg Xid errors)",
        _NEWER_CUDNN,
    ),
    "cudnn_internal_error": (
        "often memory pressure or a broken context: lower the batch size, rerun with CUDA_LAUNCH_BLOCKING=1",
        _NEWER_CUDNN,
    ),
    "cudnn_bad_param": (
        "check the convolution's arguments (shapes, groups, dtypes, strides) for an inconsistent combination",
        "make inputs contiguous",
    ),
    "cudnn_mapping_error": (
        "a texture/stream mapping failed: rerun with CUDA_LAUNCH_BLOCKING=1, check for other processes on the GPU",
    ),
    "cudnn_arch_mismatch": (
        "the GPU lacks a feature this engine needs: use float32, or a GPU of a newer generation",
        "use a torch/cuDNN build that supports this GPU architecture",
    ),
    "cudnn_not_initialized": (
        "cuDNN could not create its handle: check that the GPU is visible (nvidia-smi) and not out of memory",
        "check that the cuDNN libraries match the torch build (python -c 'import torch; "
        "print(torch.backends.cudnn.version())')",
    ),
    "cudnn_version_mismatch": (
        "install the cuDNN that torch was built against (same major, minor >= the build's): "
        "pip install 'nvidia-cudnn-cu12==<matching>'",
        "remove other cuDNN copies from LD_LIBRARY_PATH so torch loads its own",
    ),
    "cudnn_library_missing": (
        "install the cuDNN wheel torch expects: pip install nvidia-cudnn-cu12 (or reinstall torch)",
        "fix LD_LIBRARY_PATH so the libcudnn*.so files (and libcuda.so) are found",
    ),
    "cuda_no_kernel_image": (
        "install a torch build whose CUDA arch list includes this GPU "
        "(python -c 'import torch; print(torch.cuda.get_arch_list())')",
        "for a new GPU generation use a newer CUDA variant (cu12x); for an old one an older torch",
    ),
    "cuda_illegal_address": (
        "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel that faulted (errors after it are fallout)",
        "check for out-of-bounds indices in custom kernels; try a newer cuDNN/torch",
    ),
    "cuda_oom": (
        "lower the batch size, or tile/chunk the input",
        "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
        "use activation checkpointing or mixed precision",
    ),
    "cuda_driver_insufficient": (
        "install a newer NVIDIA driver (at least the one the torch CUDA variant needs)",
        "or use a torch build of an older CUDA variant that this driver supports",
    ),
    "cuda_no_device": (
        "check that the job sees a GPU: nvidia-smi, CUDA_VISIBLE_DEVICES, the container's --gpus",
        "check that torch is a CUDA build (torch.version.cuda is not None)",
    ),
    "numeric_mismatch": (
        "compare with the control cell; try torch.backends.cudnn.deterministic = True and "
        "torch.backends.cudnn.allow_tf32 = False",
    ),
    "crash": ("rerun with CUDA_LAUNCH_BLOCKING=1 and faulthandler (python -X faulthandler) to locate the crash",),
    "timeout": ("find the rank that stopped first: its first error is the cause, the others' timeouts are fallout",),
    "other": ("read the context before the first error; no known remedy applies",),
}

# The suite cases (pytest -k) whose fix-proof run would show the family gone.
SUITE_K: dict[str, str] = {
    SIGNATURE: "fp16 or bf16 or channels_last or dw or permuted or sliced or transposed",
    "cudnn_no_engine": "fp16 or bf16 or channels_last or dw",
    "cudnn_no_algorithm": "conv2d or conv3d",
    "cudnn_arch_mismatch": "fp16 or bf16",
    "cuda_oom": "conv3d",
    "numeric_mismatch": "fp16 or bf16 or autocast",
}

_FIX_PROOF = ("matrix/examples", "fix-proof.toml")  # folder (as shipped() finds it), file
_FIX_PROOF_OUT = "reports/runs/fix-proof"

assert set(REMEDIES) == set(FAMILIES), "every family needs remedies"


def remedies_for(family: str | None) -> list[str]:
    if family is None:
        return []
    return list(REMEDIES.get(family, REMEDIES["other"]))


def fix_proof_matrix() -> Path | None:
    """The fix-proof example matrix: the checkout's matrix/examples/fix-proof.toml, else the copy an
    installed package carries (convmatrix/matrix/examples/); None where there is neither."""
    folder, name = _FIX_PROOF
    path = shipped(folder, name) / name
    return path if path.is_file() else None


def verify_commands(family: str | None) -> list[str]:
    """Commands to copy that would show the family gone after the fix. They name the suite and the
    fix-proof matrix by where this convmatrix has them (a checkout's, or an installed wheel's), so
    they work from any directory: triage runs wherever the log is, seldom in a checkout. `python` is
    the job's own (torch and pytest): the suite needs nothing of convmatrix."""
    if family is None:
        return []
    k = SUITE_K.get(family)
    select = f" -k '{k}'" if k else ""
    suite = shlex.quote(str(rundir.find_suite_dir()))
    commands = [f"python -m pytest {suite} --results-dir reports/triage --cell-id triage{select}"]
    matrix = fix_proof_matrix()
    if matrix is not None:  # a wheel built without the example has none to name: no command that needs it
        # --strict, as `nox -s baremetal` runs it: a cell that could not run here proves nothing.
        commands += [
            f"convmatrix run -m {shlex.quote(str(matrix))} --strict --out {_FIX_PROOF_OUT}",
            f"convmatrix report {_FIX_PROOF_OUT} --fail-on signature",
        ]
    return commands
