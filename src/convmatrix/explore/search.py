"""The search: draw configurations (space.draw, seeded), run them through a Lane a batch at a time,
shrink each new family's first failure (shrink.py), and after the budget state each family's
region (regions.py). What was tried before (the tried log of --out, or the history) is never drawn
again: a nightly explores a little each night and never repeats itself."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from convmatrix.explore import regions, shrink
from convmatrix.explore.lane import Lane
from convmatrix.explore.space import Config, draw, key

BATCH = 32  # configurations a suite invocation runs: one interpreter start and torch import per 32


@dataclass
class Exploration:
    seed: int
    tried: list[tuple[Config, str | None]] = field(default_factory=list)  # drawn, with what each found
    # (the budget counts these; shrinking's runs are counted in each Shrunk)
    shrunk: list[shrink.Shrunk] = field(default_factory=list)  # one per family, in the order found
    found_after: dict[str, int] = field(default_factory=dict)  # family -> configurations drawn when first seen
    regions: list[regions.Region] = field(default_factory=list)
    skipped: int = 0  # drawn but tried before (not run again)
    batches: int = 0
    stopped: str = ""  # why the search stopped: the budget, the minutes


def explore(lane: Lane, *, seed: int, budget: int, minutes: float | None = None,
            before: Collection[str] = (), clock: Callable[[], float] = time.monotonic,
            on_batch: Callable[[Exploration], None] | None = None, cuda: bool = True) -> Exploration:
    """Up to `budget` configurations (and within `minutes`, checked between batches), none of
    `before` (space.key), each new family shrunk as soon as it is found. cuda False: the cells
    run on the CPU (space.draw's CPU configurations)."""
    rng = random.Random(seed)
    done = Exploration(seed=seed)
    seen = set(before)
    started = clock()
    while len(done.tried) < budget:
        if minutes is not None and clock() - started >= minutes * 60:
            done.stopped = f"{minutes:g} minutes"
            break
        batch: list[Config] = []
        misses = 0
        while len(batch) < min(BATCH, budget - len(done.tried)) and misses < 10_000:
            made = draw(rng, cuda=cuda)
            name = key(made)
            if name in seen:
                misses += 1
                done.skipped += 1
                continue
            seen.add(name)
            batch.append(made)
        if not batch:
            done.stopped = "the space drawn from is used up"
            break
        said = lane.judge(batch)
        done.batches += 1
        for config, got in zip(batch, said, strict=True):
            done.tried.append((config, got))
            if got is not None and got not in done.found_after:
                done.found_after[got] = len(done.tried)
                done.shrunk.append(shrink.shrink(config, got, lane.judge))
        if on_batch is not None:
            on_batch(done)
    else:
        done.stopped = f"the budget of {budget} configurations"
    # The regions read every configuration run: those drawn, and those shrinking ran (the ones
    # next to a failure's edge say most about where it lies).
    every = {c: got for c, got in [*done.tried, *(pair for s in done.shrunk for pair in s.seen)]}
    families = sorted({got for got in every.values() if got is not None})
    done.regions = [regions.region(family, list(every.items())) for family in families]
    return done
