"""A Lane for explore's unit tests: a predicate over a configuration's facts (explore/space.facts)
that the search is not told, failing on the 'candidate' only (the real suite's plugin is
tests/plugins/convmatrix_predicate.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convmatrix.explore.space import Config, facts

FAMILY = "cudnn_not_supported"


@dataclass
class PredicateLane:
    predicate: Callable[[Mapping[str, Any]], bool] | None
    family: str = FAMILY
    batches: list[int] = field(default_factory=list)  # the size of each batch judged

    def judge(self, configs: Sequence[Config]) -> list[str | None]:
        self.batches.append(len(configs))
        if self.predicate is None:
            return [None] * len(configs)
        return [self.family if self.predicate(facts(c)) else None for c in configs]


# Planted predicates and the minimal configuration of each under the documented order (a conv1d,
# batch 1, one element wide, kernel 1, every knob at its default, float32 unless needed).
PLANTED: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "bf16-grouped": lambda f: f["dtype"] == "bfloat16" and f["groups"] >= 2,
    "fp16-odd-channels": lambda f: f["dtype"] == "float16" and f["in_channels"] % 8 != 0 and f["in_channels"] >= 3,
    "strided-3d": lambda f: f["rank"] == 3 and f["stride"] >= 2,
    "wide-out": lambda f: f["out_channels"] >= 48,
    "dilated-backward": lambda f: f["dilation"] >= 2 and f["direction"] in ("backward", "backward_input"),
    "bf16-autocast-grouped": lambda f: f["autocast"] == "bfloat16" and f["groups"] >= 2,
}
