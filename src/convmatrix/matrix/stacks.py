"""The project's stack facts (stacks.toml beside this module): releases, variants, cuDNN pins, GPU generations."""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True, kw_only=True)
class Release:
    minor: str
    patches: tuple[str, ...]
    python_min: str
    python_max: str  # "" when the highest supported Python is not known
    pypi_default: str
    cudnn_pins: dict[str, str]  # variant -> cuDNN the wheel pins ("" = unknown)

    @property
    def variants(self) -> tuple[str, ...]:
        return ("cpu", *self.cudnn_pins)


@dataclass(frozen=True, kw_only=True)
class Facts:
    releases: dict[str, Release]  # by minor, e.g. "2.5"
    cudnn_wheels: dict[str, tuple[str, ...]]
    generations: dict[str, str]
    driver_minimum: dict[str, str]  # CUDA major -> the lowest driver its wheels run on (Linux)

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


@functools.cache
def load() -> Facts:
    raw = tomllib.loads(resources.files("convmatrix.matrix").joinpath("stacks.toml").read_text())
    releases = {
        r["minor"]: Release(
            minor=r["minor"],
            patches=tuple(r["patches"]),
            python_min=r["python"][0],
            python_max=r["python"][1],
            pypi_default=r["pypi_default"],
            cudnn_pins=dict(r["variants"]),
        )
        for r in raw["release"]
    }
    return Facts(
        releases=releases,
        cudnn_wheels={k: tuple(v) for k, v in raw["cudnn_wheels"].items()},
        generations=dict(raw["generations"]),
        driver_minimum=dict(raw["driver_minimum"]),
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
