"""The runner's GPUs: discovery through nvidia-smi, and the key that names a result directory."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from convmatrix.matrix import stacks

CPU_KEY = "cpu"


@dataclass(frozen=True, kw_only=True)
class Gpu:
    index: int
    name: str
    capability: str  # "9.0"
    memory_mb: int = 0

    @property
    def key(self) -> str:
        return gpu_key(self.name, self.capability)

    @property
    def generation(self) -> str:
        return stacks.load().generation(self.capability)


def gpu_key(name: str, capability: str) -> str:
    """'NVIDIA H200', '9.0' -> 'h200-sm90': short, readable, safe in a directory name."""
    words = re.sub(r"(?i)\bnvidia\b", "", name)
    slug = re.sub(r"[^a-z0-9]+", "-", words.lower()).strip("-") or "gpu"
    return f"{slug}-sm{capability.replace('.', '')}"


def discover() -> list[Gpu]:
    """Every GPU nvidia-smi lists; none when there is no driver (a CPU runner)."""
    out = _query("index,name,compute_cap,memory.total", "--format=csv,noheader,nounits")
    return parse_smi(out) if out is not None else []


def driver() -> str:
    """The NVIDIA driver's version ("none" without one): a result depends on it."""
    out = _query("driver_version", "--format=csv,noheader")
    return ((out or "").split() or ["none"])[0]


def _query(fields: str, fmt: str) -> str | None:
    """nvidia-smi --query-gpu=FIELDS's output; None without nvidia-smi or when it fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        return subprocess.run([smi, f"--query-gpu={fields}", fmt],
                              capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def parse_smi(text: str) -> list[Gpu]:
    gpus = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 4 and re.fullmatch("[0-9]+", fields[0]):
            memory = int(fields[3]) if re.fullmatch("[0-9]+", fields[3]) else 0
            gpus.append(Gpu(index=int(fields[0]), name=fields[1], capability=fields[2], memory_mb=memory))
    return gpus


def one_per_generation(gpus: list[Gpu]) -> list[Gpu]:
    """The first GPU of each key: identical GPUs are one generation and give one result."""
    first: dict[str, Gpu] = {}
    for gpu in gpus:
        first.setdefault(gpu.key, gpu)
    return list(first.values())


def select(gpus: list[Gpu], wanted: str | None) -> list[Gpu]:
    """--gpus 0,1: the listed indices; none given: all of them."""
    if not wanted:
        return gpus
    indices = {int(i) for i in wanted.split(",") if re.fullmatch("[0-9]+", i.strip())}
    return [g for g in gpus if g.index in indices]
