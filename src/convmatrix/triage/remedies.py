"""What to do about a failure family, and how to prove it fixed (used by triage).

Data only: ``REMEDIES`` maps each family of ``classify.FAMILIES`` to short remedies, ``SUITE_K``
to the ``pytest -k`` expression that selects the suite cases a fix-proof run should watch, and
``verify_commands`` turns them into commands to copy.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from convmatrix.escape import one_line
from convmatrix.results import known, rundir
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
    "cuda_library_swapped": (
        "remove the folder the audit names from LD_LIBRARY_PATH (or unregister it from the loader cache: "
        "ldconfig), so that torch loads the libraries its own wheels installed",
        "or install the version that folder holds, so that both agree",
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


# A proof on the log's own stack (issue 49): the versions the log printed, each matched to a strict
# shape before it is written into a command (a log is untrusted text).
_TORCH_RELEASE = re.compile(r"([0-9]{1,2}\.[0-9]{1,3}\.[0-9]{1,3})(?:\+(cu[0-9]{3}|cpu|rocm[0-9.]{1,8}))?")
_CUDA_BUILD = re.compile(r"([0-9]{2})\.([0-9])")
_EXAMPLE_STACK = ("2.5.1", "cu124")  # matrix/examples/fix-proof.toml's failing stack
_STACK_PROOF = "triage-proof.toml"
_STACK_PROOF_OUT = "reports/runs/triage-proof"


def stack_text(stack: known.Stack) -> str:
    """The stack a log printed, in words (each value reduced to printable ASCII, bounded)."""
    cudnn = "unknown" if stack.cudnn is None else str(stack.cudnn)
    return (f"torch {one_line(str(stack.torch))[:40]}, CUDA {one_line(str(stack.cuda or 'unknown'))[:20]}, "
            f"cuDNN {cudnn}")


def proof_on_stack(family: str | None, stack: known.Stack | None) -> tuple[str, list[str]]:
    """What triage read of the log's stack (a line to print) and the commands that would prove a fix
    on that stack: a generated matrix of the log's torch and CUDA variant (as is, and with
    --pad-channels 8), or the shipped fix-proof example where that is the log's stack or the log
    printed none (said so)."""
    if family is None:
        return "", []
    example = verify_commands(family)
    if stack is None or stack.torch is None:
        return ("the log printed no torch version (print `python -m torch.utils.collect_env` in the job): "
                "the proof below runs the shipped example's stack (torch 2.5.1, cu124), not necessarily yours"), example
    read = f"the log's stack: {stack_text(stack)}"
    release = _TORCH_RELEASE.fullmatch(stack.torch)
    variant = release.group(2) if release else None
    if release and variant is None and stack.cuda and (build := _CUDA_BUILD.fullmatch(stack.cuda)):
        variant = f"cu{build.group(1)}{build.group(2)}"
    if release is None or variant is None or not variant.startswith("cu"):
        why = "not a torch release" if release is None else "no CUDA variant read"
        return f"{read} ({why}): the proof below runs the shipped example's stack (torch 2.5.1, cu124)", example
    if (release.group(1), variant) == _EXAMPLE_STACK:
        return f"{read}: the shipped fix-proof example runs this stack", example
    lines = ['name = "triage-proof"', "[axes]", 'lane = ["baremetal"]', f'torch = ["{release.group(1)}"]',
             f'cuda = ["{variant}"]', 'cudnn = ["bundled"]', 'python = ["3.11"]', 'knobs = ["default", "pad=8"]']
    write = "printf '%s\\n' " + " ".join(shlex.quote(line) for line in lines) + f" > {_STACK_PROOF}"
    suite_run = example[0] if example else ""
    commands = [c for c in (suite_run,) if c]
    commands += [write, f"convmatrix run -m {_STACK_PROOF} --strict --out {_STACK_PROOF_OUT}",
                 f"convmatrix report {_STACK_PROOF_OUT} --fail-on signature"]
    note = f"{read}: the proof below runs torch {release.group(1)} {variant} (the cuDNN its wheel bundles)"
    if stack.cudnn is not None:
        note += f"; the log's cuDNN {stack.cudnn} may be an override: add it to the matrix's cudnn axis"
    return note, commands
