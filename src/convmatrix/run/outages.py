"""Fail fast, once: a cause that every cell needing one thing shares (the package index, the image
registry: results/infra.SHARED) is found by the first cell that meets it, and every later cell of
the run that needs the same thing is recorded not run with that cause instead of trying it again
(26 cells each waiting out pip's retries on one dead index told nothing 26 times).

One run per process (cli run): the orchestrator starts each run with `begin()`; the lanes ask
`check(what, cell)` just before they would need the thing (an install from the index, an image
build that pulls from the registry), so a cell whose venv or image is already made still runs."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from convmatrix.errors import InfrastructureError
from convmatrix.results.infra import RootCause


@dataclass(frozen=True, kw_only=True)
class Outage:
    cell: str  # the cell that found it
    cause: RootCause


class NotTried(InfrastructureError):
    """A cell not tried because what it needs was found down earlier in this run."""

    def __init__(self, cell: str, outage: Outage) -> None:
        super().__init__(f"{cell}: not tried: {outage.cause.cause}, found by {outage.cell} earlier in this run")
        self.outage = outage


_lock = threading.Lock()
_found: dict[str, Outage] = {}


def begin() -> None:
    """A new run: nothing is known down."""
    with _lock:
        _found.clear()


def note(cell: str, cause: RootCause | None) -> Outage | None:
    """Record a shared cause a cell met; the outage when this is the first time, else None."""
    if cause is None or cause.shared is None:
        return None
    with _lock:
        if cause.shared in _found:
            return None
        _found[cause.shared] = Outage(cell=cell, cause=cause)
        return _found[cause.shared]


def check(what: str, cell: str) -> None:
    """NotTried when `what` (index, registry) was found down earlier in this run."""
    with _lock:
        outage = _found.get(what)
    if outage is not None and outage.cell != cell:
        raise NotTried(cell, outage)


def found() -> list[Outage]:
    """What this run found down, in the order found."""
    with _lock:
        return list(_found.values())
