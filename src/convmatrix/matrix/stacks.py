"""The project's stack facts: releases, variants, cuDNN pins, GPU generations.

Two files beside this module: stacks.toml, kept by hand (what no package index says: driver floors,
GPU generations, the variants only download.pytorch.org knows, with their sources), and
stacks_index.toml, written by `convmatrix stacks --refresh` from the package indexes
(matrix/stacks_index.py). load() merges them: a fact the index read wins, the hand-kept one stands
where the index said nothing. An empty string is an unknown fact, and nothing is pruned on one.
"""

from __future__ import annotations

import datetime
import functools
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

HAND_KEPT = "stacks.toml"
INDEX = "stacks_index.toml"


@dataclass(frozen=True, kw_only=True)
class Release:
    minor: str
    patches: tuple[str, ...]
    python_min: str  # "" when the lowest supported Python is not known
    python_max: str  # "" when the highest supported Python is not known
    pypi_default: str  # the variant plain PyPI `torch==X` is ("" = unknown)
    cudnn_pins: dict[str, str]  # variant -> cuDNN the wheel pins ("" = unknown)
    # False when the list of variants is known to be incomplete: no cell is pruned as "never
    # published for <variant>" then (an unknown fact prunes nothing).
    variants_known: bool = True
    # Where each fact came from: "patches", "python", "pypi_default" and each variant ->
    # "hand-kept 2026-12-02" or "index 2026-12-04".
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def variants(self) -> tuple[str, ...]:
        return ("cpu", *self.cudnn_pins)


@dataclass(frozen=True, kw_only=True)
class Facts:
    releases: dict[str, Release]  # by minor, e.g. "2.5"
    cudnn_wheels: dict[str, tuple[str, ...]]
    generations: dict[str, str]
    driver_minimum: dict[str, str]  # CUDA major -> the lowest driver its wheels run on (Linux)
    hand_kept: str = ""  # the date the hand-kept facts were compiled
    generated: str = ""  # the date the index facts were read ("" = no index file)
    indexes: tuple[str, ...] = ()  # the indexes they were read from
    unread: tuple[str, ...] = ()  # the indexes asked but not read: what only they know is unknown
    wheel_sources: dict[str, str] = field(default_factory=dict)  # cudnn package -> where its list came from

    def release(self, torch: str) -> Release | None:
        return self.releases.get(minor_of(torch))

    def generation(self, capability: str) -> str:
        """'9.0' -> 'Hopper'; exact capability first, then its major."""
        major = capability.split(".")[0]
        return self.generations.get(capability) or self.generations.get(major) or "unknown"


def minor_of(version: str) -> str:
    return ".".join(version.split(".")[:2])


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isascii() and p.isdigit())


def cuda_version(variant: str) -> str | None:
    """'cu124' -> '12.4' (what torch.version.cuda reports); 'cpu' -> None."""
    if variant == "cpu":
        return None
    digits = variant[2:]
    return f"{digits[:-1]}.{digits[-1]}"


def cudnn_package(variant: str) -> str:
    """The nvidia-cudnn wheel a CUDA variant's torch loads: cu124 -> nvidia-cudnn-cu12."""
    major = cuda_version(variant)
    assert major is not None, "cpu wheels load no cuDNN"
    return f"nvidia-cudnn-cu{major.split('.')[0]}"


def cudnn_int(version: str) -> int:
    """'9.1.0.70' -> 90100, '8.9.2.26' -> 8902: the encoding of torch.backends.cudnn.version()."""
    major, minor, patch = (int(p) for p in version.split(".")[:3])
    # cuDNN 9 widened the minor field (CUDNN_VERSION = major*10000 + minor*100 + patch).
    return major * 10000 + minor * 100 + patch if major >= 9 else major * 1000 + minor * 100 + patch


def dotted_cudnn(version: int) -> str:
    """torch.backends.cudnn.version()'s int as a version (cudnn_int's inverse): 90100 -> 9.1.0, 8907 -> 8.9.7."""
    if version >= 90000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


@functools.cache
def load() -> Facts:
    """The merged facts of the two files beside this module (the index file may be absent)."""
    here = resources.files("convmatrix.matrix")
    hand = tomllib.loads(here.joinpath(HAND_KEPT).read_text(encoding="utf-8"))
    index_file = here.joinpath(INDEX)
    index = tomllib.loads(index_file.read_text(encoding="utf-8")) if index_file.is_file() else None
    return merge(hand, index)


def merge(hand: dict[str, Any], index: dict[str, Any] | None) -> Facts:
    """The hand-kept facts, with what the index read laid over them: patches, Python range, PyPI
    default, variants and their pins, and the published cuDNN wheels, each where the index knew
    it (a non-empty value). A release only the index knows is added; one it does not know stays."""
    kept_on = f"hand-kept {_date(hand.get('compiled'))}".strip()
    releases = {r["minor"]: _release(r, kept_on) for r in hand["release"]}
    wheels = {k: tuple(v) for k, v in hand["cudnn_wheels"].items()}
    wheel_sources = dict.fromkeys(wheels, kept_on)
    generated = ""
    if index is not None:
        generated = _date(index.get("generated"))
        read_on = f"index {generated}"
        for package, versions in index.get("cudnn_wheels", {}).items():
            if versions:
                wheels[package] = tuple(versions)
                wheel_sources[package] = read_on
        for raw in index.get("release", []):
            releases[raw["minor"]] = _overlay(releases.get(raw["minor"]), _release(raw, read_on))
    ordered = dict(sorted(releases.items(), key=lambda kv: version_key(kv[0])))
    return Facts(
        releases=ordered,
        cudnn_wheels=wheels,
        generations=dict(hand["generations"]),
        driver_minimum=dict(hand["driver_minimum"]),
        hand_kept=_date(hand.get("compiled")),
        generated=generated,
        indexes=tuple(index.get("indexes", ())) if index else (),
        unread=tuple(index.get("unread", ())) if index else (),
        wheel_sources=wheel_sources,
    )


def _date(value: object) -> str:
    return value.isoformat() if isinstance(value, datetime.date) else str(value or "")


def _release(raw: dict[str, Any], source: str) -> Release:
    python = list(raw.get("python", ["", ""]))
    pins = dict(raw.get("variants", {}))
    sources = {"patches": source, "python": source, "pypi_default": source, **dict.fromkeys(pins, source)}
    return Release(
        minor=raw["minor"],
        patches=tuple(raw.get("patches", ())),
        python_min=python[0],
        python_max=python[1],
        pypi_default=raw.get("pypi_default", ""),
        cudnn_pins=pins,
        variants_known=bool(raw.get("variants_complete", True)),
        sources=sources,
    )


def _overlay(kept: Release | None, read: Release) -> Release:
    """read's known facts over kept's (kept None: the index's release as it is)."""
    if kept is None:
        return read
    sources = dict(kept.sources)
    pins = dict(kept.cudnn_pins)
    for variant, pin in read.cudnn_pins.items():
        if pin or variant not in pins:
            pins[variant] = pin
            sources[variant] = read.sources[variant]

    def pick(name: str, mine: str, theirs: str) -> str:
        if theirs:
            sources[name] = read.sources[name]
            return theirs
        return mine

    patches = read.patches or kept.patches
    if read.patches:
        sources["patches"] = read.sources["patches"]
    python_min = pick("python", kept.python_min, read.python_min)
    python_max = pick("python", kept.python_max, read.python_max)
    return Release(
        minor=kept.minor,
        patches=patches,
        python_min=python_min,
        python_max=python_max,
        pypi_default=pick("pypi_default", kept.pypi_default, read.pypi_default),
        cudnn_pins=dict(sorted(pins.items(), key=lambda kv: version_key(kv[0][2:]))),
        variants_known=kept.variants_known or read.variants_known,
        sources=sources,
    )


def driver_floor(variant: str) -> str | None:
    """The lowest driver a CUDA variant's wheels run on (cu124 -> 525.60.13); None for cpu, an
    image's own CUDA, or a major the facts do not know."""
    if not (variant.startswith("cu") and variant[2:].isascii() and variant[2:].isdigit()):
        return None
    version = cuda_version(variant)
    return load().driver_minimum.get(version.split(".")[0]) if version else None


def driver_too_old(driver: str, variant: str) -> str | None:
    """Why this runner's driver cannot run a variant ("driver 470.82 < 525.60.13 for cu124"), or
    None (it can, or one of the two is unknown)."""
    floor = driver_floor(variant)
    have = version_key(driver)
    if floor is None or not have:
        return None
    return f"driver {driver} < {floor} for {variant}" if have < version_key(floor) else None
