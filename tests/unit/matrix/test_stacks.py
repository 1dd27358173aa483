"""Invariants of matrix/stacks.toml, and the facts the lanes rely on."""

from __future__ import annotations

import pytest

from convmatrix.matrix import stacks


def test_every_pin_is_a_published_cudnn_wheel() -> None:
    facts = stacks.load()
    for release in facts.releases.values():
        for variant, pin in release.cudnn_pins.items():
            if pin:
                assert pin in facts.cudnn_wheels[stacks.cudnn_package(variant)], (release.minor, variant)


def test_pypi_default_is_a_published_variant() -> None:
    for release in stacks.load().releases.values():
        assert release.pypi_default in release.variants
        assert all(p.startswith(release.minor + ".") for p in release.patches)


@pytest.mark.parametrize(("version", "encoded"), [("9.1.0.70", 90100), ("9.5.1.17", 90501), ("8.9.2.26", 8902)])
def test_cudnn_int_matches_torch_encoding(version: str, encoded: int) -> None:
    assert stacks.cudnn_int(version) == encoded


def test_variant_helpers() -> None:
    assert stacks.cuda_version("cu124") == "12.4"
    assert stacks.cuda_version("cu130") == "13.0"
    assert stacks.cuda_version("cpu") is None
    assert stacks.cudnn_package("cu118") == "nvidia-cudnn-cu11"
    assert stacks.cudnn_package("cu132") == "nvidia-cudnn-cu13"


@pytest.mark.parametrize(("cc", "gen"), [("9.0", "Hopper"), ("8.9", "Ada"), ("8.6", "Ampere"),
                                         ("7.5", "Turing"), ("7.0", "Volta"), ("6.1", "Pascal"),
                                         ("12.0", "Blackwell"), ("3.5", "unknown")])
def test_generation(cc: str, gen: str) -> None:
    assert stacks.load().generation(cc) == gen


@pytest.mark.parametrize(("variant", "floor"), [("cu118", "450.80.02"), ("cu121", "525.60.13"), ("cu124", "525.60.13"),
                                                ("cu128", "525.60.13"), ("cu130", "580.65.06"), ("cu132", "580.65.06"),
                                                ("cpu", None), ("image", None)])
def test_each_cuda_major_has_its_driver_floor(variant: str, floor: str | None) -> None:
    assert stacks.driver_floor(variant) == floor


@pytest.mark.parametrize(("driver", "variant", "too_old"), [
    ("470.82.01", "cu124", True), ("525.60.13", "cu124", False), ("525.60.12", "cu121", True),
    ("575.57.08", "cu130", True), ("580.95.05", "cu130", False), ("none", "cu124", False), ("550", "cu124", False),
])
def test_a_driver_below_the_floor_is_too_old(driver: str, variant: str, too_old: bool) -> None:
    assert (stacks.driver_too_old(driver, variant) is not None) is too_old
