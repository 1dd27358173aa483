"""Preparing cells' environments (venvs, images) ahead of their runs, bounded.

The orchestration hands every cell to a Preparer in run order; it makes at most `builds` of them
at once in worker threads, so the next cells' venvs and images are ready while earlier cells run.
Two bounds keep that from crowding the runner out:

- builds at once (--prepare-ahead N; 0: none ahead: a cell is prepared only when a slot would
  otherwise wait for it);
- disk (--prepare-disk GB): once the builds of this run have taken that much disk (the drop in
  free space where venvs and images live: home.venvs(), and the engine's data root as the engine
  says, /var/lib/docker only when it cannot say), nothing more is prepared ahead; the next cell
  is prepared only when a slot is free for it.

Nothing is downloaded twice in a run: cells that install the same torch wheel are prepared one
after another (the first fills uv's or BuildKit's cache, the next ones find it there), never side
by side, where both would fetch it.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from convmatrix import home, interrupts
from convmatrix.errors import InfrastructureError
from convmatrix.matrix.cells import Cell

T = TypeVar("T")

POLL_S = 0.5  # how often a held-back build looks again
DOCKER_ROOT = Path("/var/lib/docker")  # the engine's data root where the engine cannot say


@dataclass(frozen=True, kw_only=True)
class Limits:
    builds: int  # at once, ahead of the runs; 0: only when a slot waits
    disk_gb: float | None  # None: no bound
    disk_paths: tuple[Path, ...] = ()  # where builds take disk besides the engine's data (the venvs)
    engine: bool = True  # whether the engine's data root counts too (a run with container cells)
    engine_name: str = "docker"  # which engine's: the container cells' (--engine, [container].engine)


class DiskBudget:
    """Disk taken since the run began, on the filesystems the builds write to: paths, and the
    engine's data root when `engine` (asked here, so only a run with a disk bound asks it)."""

    def __init__(self, paths: tuple[Path, ...], *, engine: bool = True, engine_name: str = "docker") -> None:
        wanted = (*paths, engine_root(engine_name)) if engine else paths
        self.paths = [p for p in wanted if p.exists()]
        self.start = self.free()

    def free(self) -> int:
        seen: dict[int, int] = {}
        for path in self.paths:
            seen[path.stat().st_dev] = shutil.disk_usage(path).free  # one figure per filesystem
        return sum(seen.values())

    def used_gb(self) -> float:
        return max(0, self.start - self.free()) / 1e9


def build_paths() -> tuple[Path, ...]:
    """Where builds take disk besides the engine's data: the baremetal venvs (their nearest
    existing directory)."""
    venvs = home.venvs()
    while not venvs.exists() and venvs != venvs.parent:
        venvs = venvs.parent
    return (venvs,)


def engine_root(name: str = "docker") -> Path:
    """Where the engine keeps images and build cache, as it says (`docker info`: DockerRootDir,
    which data-root or a rootless engine moves; Podman answers with its graph root); DOCKER_ROOT
    only when it cannot say (no engine, no docker SDK)."""
    try:
        from convmatrix.run.lanes import containers  # the docker SDK: loaded only where a run bounds disk
    except ImportError:
        return DOCKER_ROOT
    try:
        with containers.client(name) as engine:
            return containers.engine_root(engine) or DOCKER_ROOT
    except InfrastructureError:
        return DOCKER_ROOT


def download_key(cell: Cell) -> tuple[str, str, str]:
    """Cells that fetch the same torch wheel (the bulk of every download)."""
    return (cell.lane, cell.torch, cell.cuda)


class Preparer:
    """Prepares cells in worker threads, within Limits. slot_free says whether a run slot would
    wait for a prepared cell (then a build goes ahead whatever the bounds)."""

    def __init__(self, limits: Limits, slot_free: Callable[[], bool], log: Callable[[str], None]) -> None:
        self.limits = limits
        self.slot_free = slot_free
        self.log = log
        self.budget = (DiskBudget(limits.disk_paths, engine=limits.engine, engine_name=limits.engine_name)
                       if limits.disk_gb is not None else None)
        self.executor = ThreadPoolExecutor(max_workers=max(1, limits.builds), thread_name_prefix="prepare")
        self.locks: dict[tuple[str, str, str], threading.Lock] = {}
        self.guard = threading.Lock()
        self.said_over = False
        self.active: list[str] = []  # the cells being prepared now

    def submit(self, cell: Cell, prepare: Callable[[], T]) -> Future[T]:
        return self.executor.submit(self._prepare, cell, prepare)

    def _prepare(self, cell: Cell, prepare: Callable[[], T]) -> T:
        while not self.may_start():
            interrupts.raise_if_stopped()
            time.sleep(POLL_S)
        interrupts.raise_if_stopped()
        with self.lock_for(cell):
            self.active.append(cell.id)
            try:
                return prepare()
            finally:
                self.active.remove(cell.id)

    def may_start(self) -> bool:
        if self.slot_free():
            return True  # a slot would idle otherwise: this is the critical path, not ahead of it
        if self.limits.builds == 0:
            return False
        if self.budget is not None and self.limits.disk_gb is not None:
            used = self.budget.used_gb()
            if used > self.limits.disk_gb:
                if not self.said_over:
                    self.said_over = True
                    self.log(f"prepare-ahead paused: this run's builds took {used:.1f} GB "
                             f"(--prepare-disk {self.limits.disk_gb:g}); the next cells are prepared as slots free up")
                return False
        return True

    def lock_for(self, cell: Cell) -> threading.Lock:
        with self.guard:
            return self.locks.setdefault(download_key(cell), threading.Lock())

    def shutdown(self, *, wait: bool = True) -> None:
        self.executor.shutdown(wait=wait, cancel_futures=not wait)
