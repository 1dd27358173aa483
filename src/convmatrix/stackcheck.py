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
