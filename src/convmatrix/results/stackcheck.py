"""Requested stack == observed stack: what a cell asked for against what env.json saw."""

from __future__ import annotations

from typing import Any


def mismatches(expected: dict[str, Any], observed: dict[str, Any]) -> list[str]:
    """One line per field that differs; empty when the cell got what it asked for.

    Fields with no expectation (host cells, an unknown cuDNN pin) are not checked.
    """
    problems = []
    torch = expected.get("torch")
    seen_torch = str(observed.get("torch") or "")
    if torch and seen_torch.split("+")[0] != torch:
        problems.append(f"torch: requested {torch}, observed {seen_torch or 'none'}")
    if "cuda" in expected and expected["cuda"] != observed.get("cuda"):
        problems.append(f"cuda: requested {expected['cuda']}, observed {observed.get('cuda')}")
    cudnn = expected.get("cudnn")
    if cudnn is not None and cudnn != observed.get("cudnn"):
        seen = observed.get("cudnn") or observed.get("cudnn_error") or "none"
        problems.append(f"cudnn: requested {cudnn}, observed {seen}")
    return problems


OBSERVED = ("torch", "cuda", "cudnn", "python")  # what cell.json keeps of env.json's stack


def observed(env: dict[str, Any]) -> dict[str, Any]:
    """The stack a cell ran, for cell.json: what a system base carries is recorded, not requested."""
    return {key: env.get(key) for key in OBSERVED}


def describe(env: dict[str, Any]) -> str:
    """torch 2.5.1+cu124, CUDA 12.4, cuDNN 90100, Python 3.11.2: the observed stack on one line."""
    seen = observed(env)
    return (f"torch {seen['torch'] or 'none'}, CUDA {seen['cuda'] or 'none'}, "
            f"cuDNN {seen['cudnn'] or 'none'}, Python {seen['python'] or '?'}")
