"""The slots cells run in: on a GPU runner, the devices of one key form a pool (a cell runs once
per key, on whichever of its devices is free, pinned with CUDA_VISIBLE_DEVICES): identical whole
GPUs, or identical MIG slices (one profile on one GPU model), whichever GPU they are slices of;
a runner may mix whole GPUs and slices, and two slices of one GPU run at once like two GPUs. With
--every-gpu each device is a pool of its own; on a runner without GPUs, --jobs N slots on the CPU.

Each pool runs its cells concurrently, one per slot, in worker threads of its own, so that the
pools of a mixed runner run side by side and one generation's queue never starves another's.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from convmatrix.gpus import CPU_KEY, Gpu

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Slot:
    """Where one cell runs at a time: a GPU, or a share of the CPU (gpu None)."""

    gpu: Gpu | None
    name: str  # "gpu1", "gpu0-mig1", "cpu0": for the progress lines


@dataclass(frozen=True, kw_only=True)
class Spec:
    """A pool's shape: the key its results are filed under, and its slots."""

    key: str  # the devices' key (a GPU generation's, a MIG profile's), one device's (--every-gpu), or "cpu"
    slots: tuple[Slot, ...]
    per_device: bool = False


def specs(chosen: list[Gpu], *, every_gpu: bool, jobs: int) -> list[Spec]:
    """The pools of this runner: one per key among the chosen devices (one per device with
    every_gpu), or one of `jobs` CPU slots where there is no GPU."""
    if not chosen:
        return [Spec(key=CPU_KEY, slots=tuple(Slot(gpu=None, name=f"cpu{i}") for i in range(jobs)))]
    if every_gpu:
        return [Spec(key=g.device_key, slots=(Slot(gpu=g, name=g.slot_name),), per_device=True) for g in chosen]
    by_key: dict[str, list[Slot]] = {}
    for g in chosen:
        by_key.setdefault(g.key, []).append(Slot(gpu=g, name=g.slot_name))
    return [Spec(key=key, slots=tuple(slots)) for key, slots in by_key.items()]


def threads_per_slot(total_slots: int) -> int | None:
    """CPU threads for each concurrent cell: the cores shared out, so that N cells on N cores do
    not each start N intra-op threads and fight over them; None when one cell runs at a time."""
    if total_slots <= 1:
        return None
    return max(1, (os.cpu_count() or 1) // total_slots)


class Pool:
    """A running pool: work submitted runs in a worker thread once one of the slots is free,
    with that slot."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.free: queue.SimpleQueue[Slot] = queue.SimpleQueue()
        for slot in spec.slots:
            self.free.put(slot)
        self.executor = ThreadPoolExecutor(max_workers=len(spec.slots), thread_name_prefix=f"pool-{spec.key}")

    def submit(self, work: Callable[[Slot], T]) -> Future[T]:
        return self.executor.submit(self._with_slot, work)

    def _with_slot(self, work: Callable[[Slot], T]) -> T:
        with self.slot() as slot:
            return work(slot)

    @contextmanager
    def slot(self) -> Iterator[Slot]:
        # As many workers as slots: a worker always finds one free.
        slot = self.free.get()
        try:
            yield slot
        finally:
            self.free.put(slot)

    def shutdown(self, *, cancel: bool = False) -> None:
        """Wait for the runs started; cancel: drop those not started yet."""
        self.executor.shutdown(wait=True, cancel_futures=cancel)
