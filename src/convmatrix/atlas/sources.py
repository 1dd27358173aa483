"""The atlas's rows from published sources: every known issue the project carries
(results/known_issues.toml) and the few published facts only the atlas shows (sources.toml beside
this module), each with its public link. The site shows them as rows of their own, marked as from
a source and never merged with what fleets measured (docs/atlas.md).

Both files have one schema and one checker (results/known.parse): a fact without an https link,
or with a range that does not parse, stops the atlas (KnownIssuesError, exit 2) rather than being
shown half-read."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from importlib import resources

from convmatrix.results import known
from convmatrix.results.known import KnownIssue, KnownIssuesError, Range

FILE = "sources.toml"
CARRIED = "known_issues.toml"
_FACT_NAMES = (("torch", "torch"), ("cuda", "CUDA"), ("cudnn", "cuDNN"), ("capability", "capability"))


@dataclass(frozen=True, kw_only=True)
class Source:
    """One published fact: the entry, and which file of ours carries it."""

    issue: KnownIssue
    origin: str  # CARRIED or FILE

    @property
    def ranges(self) -> str:
        """Its version ranges in words: "cuDNN [9.11.0, inf); capability [-inf, 7.5)"."""
        return "; ".join(f"{name} {bound}" for fact, name in _FACT_NAMES
                         if (bound := getattr(self.issue, fact)) is not None)


@functools.cache
def load() -> tuple[Source, ...]:
    """The carried known issues, then the atlas's own facts (an id in both files is an error)."""
    text = resources.files("convmatrix.atlas").joinpath(FILE).read_text(encoding="utf-8")
    return combine(known.load(), known.parse(text, f"atlas/{FILE}"))


def combine(carried: tuple[KnownIssue, ...], own: tuple[KnownIssue, ...]) -> tuple[Source, ...]:
    clash = sorted({i.id for i in carried} & {i.id for i in own})
    if clash:
        raise KnownIssuesError(f"atlas/{FILE}: issue {clash[0]!r}: id: already in {CARRIED}")
    return (*(Source(issue=i, origin=CARRIED) for i in carried), *(Source(issue=i, origin=FILE) for i in own))


def by_id() -> dict[str, Source]:
    return {source.issue.id: source for source in load()}


def version_key(text: str | None, *, high: bool = False) -> int | None:
    """A version as one number that orders as versions do ("9.10.2" -> 9_010_002), for the site's
    filters (the same arithmetic is in site.js). A part left out counts as 0, or as 999 for the top
    of a range the user typed (`high`: "9.10" then covers 9.10.x); None for no version."""
    numbers = known.version_numbers(text) if text else None
    if numbers is None:
        return None
    parts = [min(n, 999) for n in numbers[:3]]
    given = len(text.strip().lstrip("v").split(".")) if text else 0
    if high:
        parts = [p if i < given else 999 for i, p in enumerate(parts)]
    return parts[0] * 1_000_000 + parts[1] * 1_000 + parts[2]


def bounds(bound: Range | None) -> tuple[int, int]:
    """A [min, max) range as the filters' numbers: unbounded sides as 0 and a number past any."""
    if bound is None:
        return 0, 10**12
    low = version_key(bound.min) if bound.min else 0
    high = version_key(bound.max) if bound.max else 10**12
    return low or 0, high or 10**12


def covers_capability(issue: KnownIssue, capability: str) -> bool:
    """Whether the entry's capability range holds for a GPU of this capability (no range: any)."""
    return known.stack_matches(_capability_only(issue), known.Stack(capability=capability))


def _capability_only(issue: KnownIssue) -> KnownIssue:
    """The entry with its other ranges dropped: which GPU generations it speaks of, whatever the stack."""
    return dataclasses.replace(issue, torch=None, cuda=None, cudnn=None)
