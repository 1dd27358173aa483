"""Discovery and keys (gpus.py), from nvidia-smi output in NVIDIA's documented format: whole GPUs,
MIG slices of several profiles, a MIG mode pending a reset (issue 37)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given

from convmatrix import gpus
from convmatrix.matrix import values
from strategies import gpu_names, mig_profiles
from testkit import H200_SLICES, SLICE_UUIDS, TWO_H100, stub_nvidia_smi

# The four fields of drivers before discovery asked for UUIDs and MIG modes: still read.
OLD_QUERY = """0, NVIDIA H200, 9.0, 143771
1, NVIDIA GeForce RTX 4090, 8.9, 24564
"""

# One machine with everything at once: GPU 0 in MIG mode, split three ways (two profiles, one
# with media extensions); GPU 1 whole (MIG off); GPU 2 a GPU without MIG ([N/A]); GPU 3 asked
# to enter MIG mode at its next reset (pending Enabled, current Disabled); GPU 4 leaving MIG
# mode at its next reset, with one slice still; GPU 5 in MIG mode without any MIG device.
QUERY = """0, GPU-00000000-0000-0000-0000-000000000000, NVIDIA H200, 9.0, 143771, Enabled, Enabled
1, GPU-11111111-1111-1111-1111-111111111111, NVIDIA H200, 9.0, 143771, Disabled, Disabled
2, GPU-22222222-2222-2222-2222-222222222222, NVIDIA GeForce RTX 4090, 8.9, 24564, [N/A], [N/A]
3, GPU-33333333-3333-3333-3333-333333333333, NVIDIA H200, 9.0, 143771, Disabled, Enabled
4, GPU-44444444-4444-4444-4444-444444444444, NVIDIA A100-SXM4-80GB, 8.0, 81920, Enabled, Disabled
5, GPU-55555555-5555-5555-5555-555555555555, NVIDIA H200, 9.0, 143771, Enabled, Enabled
"""
LISTING = """GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)
  MIG 3g.71gb     Device  0: (UUID: MIG-0929581a-2be6-5dec-bf34-0954c6c529a6)
  MIG 2g.35gb     Device  1: (UUID: MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23)
  MIG 1g.18gb+me  Device  2: (UUID: MIG-a25704ba-3a06-5299-a795-fd7cf4d13973)
GPU 1: NVIDIA H200 (UUID: GPU-11111111-1111-1111-1111-111111111111)
GPU 2: NVIDIA GeForce RTX 4090 (UUID: GPU-22222222-2222-2222-2222-222222222222)
GPU 3: NVIDIA H200 (UUID: GPU-33333333-3333-3333-3333-333333333333)
GPU 4: NVIDIA A100-SXM4-80GB (UUID: GPU-44444444-4444-4444-4444-444444444444)
  MIG 1c.3g.40gb  Device  0: (UUID: MIG-GPU-44444444-4444-4444-4444-444444444444/2/0)
GPU 5: NVIDIA H200 (UUID: GPU-55555555-5555-5555-5555-555555555555)
"""


def test_older_query_lines_are_whole_gpus_keyed_by_model_and_capability() -> None:
    found = gpus.parse_smi(OLD_QUERY)
    assert [g.key for g in found] == ["h200-sm90", "geforce-rtx-4090-sm89"]
    assert [g.generation for g in found] == ["Hopper", "Ada"]
    assert found[0].memory_mb == 143771 and found[0].mig is None
    assert [g.pin for g in found] == ["0", "1"]  # no UUID given: nvidia-smi's index


def test_mig_slices_are_devices_of_their_own_and_their_gpu_is_not() -> None:
    found = gpus.parse_smi(QUERY, LISTING)
    assert [(g.key, g.selector) for g in found] == [
        ("h200-sm90-mig3g-71gb", "0:0"), ("h200-sm90-mig2g-35gb", "0:1"), ("h200-sm90-mig1g-18gb-plus-me", "0:2"),
        ("h200-sm90", "1"), ("geforce-rtx-4090-sm89", "2"),
        ("h200-sm90", "3"),  # MIG pending: taken as it is now, whole
        ("a100-sxm4-80gb-sm80-mig1c-3g-40gb", "4:0"),  # leaving MIG mode at its reset: a slice until then
    ]  # GPU 5: MIG on, no MIG device: nothing of it runs
    slice0 = found[0]
    assert slice0.pin == slice0.uuid == "MIG-0929581a-2be6-5dec-bf34-0954c6c529a6"
    assert slice0.mig == gpus.Mig(profile="3g.71gb", device=0, parent_uuid="GPU-00000000-0000-0000-0000-000000000000")
    assert (slice0.index, slice0.capability, slice0.generation) == (0, "9.0", "Hopper")
    assert found[3].pin == "GPU-11111111-1111-1111-1111-111111111111"  # a whole GPU by its UUID too
    assert found[6].pin == "MIG-GPU-44444444-4444-4444-4444-444444444444/2/0"  # a driver before R470's form


def test_a_mig_mode_pending_a_reset_is_said_and_changes_nothing_until_the_reset() -> None:
    found = {g.selector: g for g in gpus.parse_smi(QUERY, LISTING)}
    assert found["3"].note == ("GPU 3 (NVIDIA H200): MIG mode is disabled, enabled after its next reset; "
                               "taken as it is now")
    assert "MIG mode is enabled, disabled after its next reset" in found["4:0"].note
    assert not found["0:0"].note and not found["1"].note and not found["2"].note


def test_two_slices_of_one_profile_share_a_key_and_every_gpu_tells_them_apart() -> None:
    first, second = gpus.parse_smi(*H200_SLICES)
    assert first.key == second.key == "h200-sm90-mig3g-71gb"
    assert (first.device_key, second.device_key) == ("h200-sm90-mig3g-71gb-gpu0-mig0", "h200-sm90-mig3g-71gb-gpu0-mig1")
    assert (first.pin, second.pin) == SLICE_UUIDS
    assert (first.slot_name, second.slot_name) == ("gpu0-mig0", "gpu0-mig1")
    assert first.record() == {"index": 0, "name": "NVIDIA H200", "capability": "9.0", "uuid": SLICE_UUIDS[0],
                              "mig_profile": "3g.71gb", "mig_device": 0,
                              "parent_uuid": "GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39"}
    (whole, _) = gpus.parse_smi(*TWO_H100)
    assert whole.record()["mig_profile"] is None and whole.record()["parent_uuid"] is None


def test_lines_that_are_not_devices_are_skipped() -> None:
    query = "index, uuid, name\n[N/A], GPU-1, NVIDIA H200, 9.0, 1, [N/A], [N/A]\n0, GPU-2, NVIDIA H200, [N/A], 1, [N/A], [N/A]\n"
    assert gpus.parse_smi(query) == []
    listing = LISTING.replace("MIG 3g.71gb ", "MIG 3G.71GB/x ").replace("MIG 2g.35gb ", "MIG         ")
    assert [g.mig.profile for g in gpus.parse_smi(QUERY, listing) if g.mig and g.index == 0] == ["1g.18gb+me"]


def test_select_takes_gpu_indices_and_mig_devices() -> None:
    found = gpus.parse_smi(QUERY, LISTING)
    assert gpus.select(found, None) == found
    assert [g.selector for g in gpus.select(found, "0")] == ["0:0", "0:1", "0:2"]  # a GPU: all its slices
    assert [g.selector for g in gpus.select(found, "0:1,2")] == ["0:1", "2"]
    assert gpus.select(found, "7") == [] and gpus.select(found, "1:0") == []
    assert gpus.SELECTOR.fullmatch("0:1,2") and not gpus.SELECTOR.fullmatch("0:") and not gpus.SELECTOR.fullmatch("a")


def test_discover_without_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("convmatrix.gpus.shutil.which", lambda name: None)
    assert gpus.discover() == []


def test_discover_asks_nvidia_smi_for_its_listing_only_where_a_gpu_is_in_mig_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, ...]] = []
    real = gpus._smi

    def counted(*args: str) -> str | None:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(gpus, "_smi", counted)
    monkeypatch.setenv("PATH", f"{stub_nvidia_smi(tmp_path / 'slices', H200_SLICES)}{os.pathsep}{os.environ['PATH']}")
    assert [g.pin for g in gpus.discover()] == list(SLICE_UUIDS)
    assert calls == [(f"--query-gpu={gpus.FIELDS}", "--format=csv,noheader,nounits"), ("-L",)]
    calls.clear()
    monkeypatch.setenv("PATH", f"{stub_nvidia_smi(tmp_path / 'whole')}{os.pathsep}{os.environ['PATH']}")
    assert [g.key for g in gpus.discover()] == ["h100-80gb-hbm3-sm90"] * 2 and len(calls) == 1


@pytest.mark.parametrize(("key", "parts"), [
    ("h200-sm90", ("h200", "9.0", "")), ("b200-sm100", ("b200", "10.0", "")),
    ("h200-sm90-mig3g-71gb", ("h200", "9.0", "3g-71gb")),
    ("h200-sm90-mig3g-71gb-gpu0-mig1", ("h200", "9.0", "3g-71gb")),
    ("h100-80gb-hbm3-sm90-gpu1", ("h100-80gb-hbm3", "9.0", "")),
    ("cpu", None), ("unknown", None),
])
def test_key_parts_read_a_key_back(key: str, parts: tuple[str, str, str] | None) -> None:
    assert gpus.key_parts(key) == parts


@given(gpu_names(), mig_profiles())
def test_every_key_discovery_makes_is_a_valid_gpu_key(name: str, profile: str) -> None:
    """The grammar the user-typed keys are checked by (values.GPU_KEY) admits every key a runner
    can file a result under, a device's too, within the length a directory name allows."""
    for mig in (None, gpus.Mig(profile=profile, device=7, parent_uuid="GPU-1")):
        gpu = gpus.Gpu(index=15, name=name, capability="12.0", mig=mig)
        for key in (gpu.key, gpu.device_key):
            assert values.is_gpu_key(key), key
        parts = gpus.key_parts(gpu.key)
        assert parts is not None and parts[1] == "12.0" and parts[2] == (gpus.slug(profile) if mig else "")


def test_keys_of_two_profiles_differ_even_by_a_media_extension_sign() -> None:
    assert gpus.gpu_key("NVIDIA RTX PRO 6000", "12.0", "1g.24gb+me") != gpus.gpu_key("NVIDIA RTX PRO 6000", "12.0",
                                                                                     "1g.24gb-me")
