"""atlas/bundle.py: the bundle file written and read back, and the reader as the atlas's
untrusted-input boundary (issue 40): every bound, pattern and type refused with one BadBundle line
naming the file and the field; never another exception, whatever the bytes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convmatrix.atlas import bundle
from convmatrix.atlas.bundle import BadBundle
from convmatrix.atlas.model import Bundle, Case, Cell, Cost, Gpu, Libraries, LoadedFile, Repro, Run, Stack
from strategies import atlas_bundles, nested

NAME = "fleet-a.bundle.json"


def sample() -> Bundle:
    failing = Case(case="conv2d-fp32-k1-bwd-over2g-pointwise_extreme-wide_channels", verdict="regression",
                   outcome="fail", family="cuda_illegal_address", subcode=None,
                   reason="cuda_illegal_address: AcceleratorError: CUDA error: an illegal memory access was encountered",
                   known=("cudnn-9-wide-channels",), sources=("https://github.com/pytorch/pytorch/issues/77844",),
                   repro=Repro(params={"op": "conv2d", "n": 4, "size": [1, 1], "autocast": None, "bias": True},
                               shapes={"input": [4, 16384, 1, 1]}, knobs={"pad_channels": 0}, device="cuda"))
    cell = Cell(stack=Stack(torch="2.11.0+cu130", cuda="13.0", cudnn="9.19.0", driver="580.159.04",
                            image_digest=None, lane="host"),
                gpu=Gpu(model="NVIDIA H200", capability="9.0", generation="sm90", mig="3g.71gb"),
                verdict="regression", cases=(failing, Case(case="conv1d-a", verdict="ok", outcome="pass"),
                                             Case(case="conv3d-fp32-k3-batch", verdict="fallback", outcome="pass",
                                                  cost=Cost(backend="Slow3d", control_backend="Mkldnn",
                                                            memory_ratio=14.0, time_ratio=3.05, time_ratio_low=2.41))),
                libraries=Libraries(swapped=True, cudnn=(
                    LoadedFile(name="libcudnn", version="9.19.0", origin="wheel"),
                    LoadedFile(name="libcudnn_cnn", version="9.2.1", origin="LD_LIBRARY_PATH"),
                    LoadedFile(name="libcudnn_engines_tensor_ir", version=None, origin=None))))
    return Bundle(fleet="fleet-a", created="2026-12-05", tool="0.1.0",
                  runs=(Run(run="0123456789abcdef", date="2026-12-04", cells=(cell,)),),
                  dropped=("host names",))


def plain(made: Bundle) -> Any:
    """The bundle as its file holds it: lists, not tuples."""
    return json.loads(json.dumps(dataclasses.asdict(made)))


def signed(value: Any, **top: Any) -> bytes:
    """A bundle file around value with a checksum that matches it: what a hostile fleet can write."""
    wrapper = {"format": "convmatrix-bundle", "version": 2,
               "sha256": hashlib.sha256(bundle.canonical(value)).hexdigest(), "bundle": value, **top}
    return json.dumps(wrapper).encode()


def edited(path: str, new: Any) -> bytes:
    """The sample with one field (a dotted path, list indices as numbers) set to new, re-signed."""
    value = plain(sample())
    *parents, last = path.split(".")
    place: Any = value
    for part in parents:
        place = place[int(part)] if isinstance(place, list) else place[part]
    if new is KeyError:
        del place[last]
    else:
        place[int(last) if isinstance(place, list) else last] = new
    return signed(value)


def refused(data: bytes) -> str:
    with pytest.raises(BadBundle) as caught:
        bundle.parse(data, NAME)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{NAME}: "), message
    return message


def outcome(data: bytes) -> Bundle | str:
    """The bundle read, or the one line refusing it; any other exception fails the test."""
    try:
        return bundle.parse(data, NAME)
    except BadBundle as exc:
        return str(exc)


def test_round_trip_of_a_sample() -> None:
    made = bundle.write(sample())
    assert bundle.parse(made, NAME) == sample()
    top = json.loads(made)
    assert (top["format"], top["version"]) == ("convmatrix-bundle", 2)
    assert top["sha256"] == hashlib.sha256(bundle.canonical(top["bundle"])).hexdigest()
    assert made.isascii()


@given(atlas_bundles())
def test_round_trip_of_generated_bundles(made: Bundle) -> None:
    assert bundle.parse(bundle.write(made), NAME) == made
    # The writer's own conversion is asdict's value, the format's definition (ATLAS.md).
    assert bundle.canonical(bundle.plain(made)) == bundle.canonical(dataclasses.asdict(made))


@given(atlas_bundles(max_runs=1, max_cells=2, max_cases=2), st.data())
def test_any_mutation_is_refused_or_reads_a_valid_bundle(made: Bundle, data: st.DataObject) -> None:
    raw = bytearray(bundle.write(made))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        action = data.draw(st.sampled_from(["flip", "delete", "insert"]))
        if action == "flip":
            raw[at] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "delete":
            del raw[at:at + data.draw(st.integers(1, 8))]
        else:
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    got = outcome(bytes(raw))
    # Refused in one line, or a mutation that left the checksum and every field sound (a space).
    assert "\n" not in got if isinstance(got, str) else bundle.parse(bundle.write(got), NAME) == got


@given(atlas_bundles(max_runs=1, max_cells=1, max_cases=2), st.data())
def test_any_re_signed_edit_is_refused_or_valid(made: Bundle, data: st.DataObject) -> None:
    """A hostile fleet signs what it edits: the fields alone must hold the line."""
    from strategies import json_values

    value = plain(made)
    places = list(_places(value))
    parent, key = data.draw(st.sampled_from(places))
    parent[key] = data.draw(json_values())
    got = outcome(signed(value))
    assert "\n" not in got if isinstance(got, str) else bundle.parse(bundle.write(got), NAME) == got


def _places(value: Any) -> Any:
    """(container, key) of every value inside value."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield value, key
        yield from _places(item)


def test_a_checksum_mismatch_is_refused() -> None:
    top = json.loads(bundle.write(sample()))
    top["bundle"]["fleet"] = "someone-else"
    assert "field sha256: does not match" in refused(json.dumps(top).encode())


@pytest.mark.parametrize(("change", "field"), [
    ({"format": "convmatrix-report"}, "field format"),
    ({"version": 3}, "field version"),
    ({"version": True}, "field version"),
    ({"extra": 1}, "field (top).'extra'"),
])
def test_a_wrong_format_or_version_is_refused(change: dict[str, Any], field: str) -> None:
    top = json.loads(bundle.write(sample())) | change
    assert field in refused(json.dumps(top).encode())


def without_costs(value: Any) -> Any:
    """The sample as a version 1 file held it: no case has a `cost` field, no cell `libraries`."""
    for run in value["runs"]:
        for cell in run["cells"]:
            del cell["libraries"]
            for case in cell["cases"]:
                del case["cost"]
    return value


def test_a_version_one_bundle_is_still_read_without_costs() -> None:
    """Issue 48: version 2 adds a case's cost; the fleets' published version 1 files stay readable."""
    old = json.dumps({**json.loads(signed(without_costs(plain(sample())))), "version": 1}).encode()
    read = bundle.parse(old, NAME)
    assert [c.cost for c in read.runs[0].cells[0].cases] == [None, None, None]
    assert read.runs[0].cells[0].cases[2].verdict == "fallback"
    # A version 1 file that holds a cost is not one: the field came with version 2.
    mixed = json.dumps({**json.loads(signed(plain(sample()))), "version": 1}).encode()
    assert "'libraries'" in refused(mixed) and "not a field of this version" in refused(mixed)
    value = plain(sample())
    del value["runs"][0]["cells"][0]["libraries"]
    mixed = json.dumps({**json.loads(signed(value)), "version": 1}).encode()
    assert "cost'" in refused(mixed) and "not a field of this version" in refused(mixed)
    # A version 2 file must say its cost, null or not (and its cells their libraries).
    assert "cases[0].cost: missing" in refused(edited("runs.0.cells.0.cases.0.cost", KeyError))
    assert read.runs[0].cells[0].libraries is None
    assert "cells[0].libraries: missing" in refused(edited("runs.0.cells.0.libraries", KeyError))


def test_a_cells_libraries_round_trip_and_a_swap_family_is_read() -> None:
    """Issue 47: version 2 carries what the cell loaded of cuDNN, no path; the audit's family is one
    the reader knows."""
    made = sample()
    read = bundle.parse(bundle.write(made), NAME)
    assert read.runs[0].cells[0].libraries == made.runs[0].cells[0].libraries
    swapped = bundle.parse(edited("runs.0.cells.0.cases.0.family", "cuda_library_swapped"), NAME)
    assert swapped.runs[0].cells[0].cases[0].family == "cuda_library_swapped"
    assert bundle.parse(edited("runs.0.cells.0.libraries", None), NAME).runs[0].cells[0].libraries is None


@pytest.mark.parametrize(("field", "value", "said"), [
    ("swapped", "yes", "expected true or false"), ("cudnn", {}, "expected a list"),
    ("cudnn", [{"name": "libcudnn", "version": "9.1.0", "origin": "wheel"}] * 33, "more than 32"),
    ("cudnn.0.name", "/usr/lib/libcudnn.so.9", "does not fit"), ("cudnn.0.name", "libcublas", "does not fit"),
    ("cudnn.0.version", "9.1.0<b>", "does not fit"), ("cudnn.0.origin", "/opt/cudnn", "is not one of"),
    ("cudnn.0.path", "/usr/lib", "not a field of this version"),
])
def test_libraries_outside_their_bounds_are_refused(field: str, value: Any, said: str) -> None:
    message = refused(edited(f"runs.0.cells.0.libraries.{field}", value))
    assert "field bundle.runs[0].cells[0].libraries" in message and said in message, message


@pytest.mark.parametrize(("field", "value", "said"), [
    ("memory_ratio", -1.0, "from 0 to 1e+09"), ("time_ratio", 1e10, "from 0 to 1e+09"),
    ("time_ratio_low", "2.4", "from 0 to 1e+09"), ("memory_ratio", True, "from 0 to 1e+09"),
    ("backend", "Slow3d<script>", "does not fit"), ("control_backend", "", "does not fit"),
])
def test_a_cost_outside_its_bounds_is_refused(field: str, value: Any, said: str) -> None:
    message = refused(edited(f"runs.0.cells.0.cases.2.cost.{field}", value))
    assert f"field bundle.runs[0].cells[0].cases[2].cost.{field}" in message and said in message, message


@pytest.mark.parametrize("data", [b"", b"\xff\xfe", b"not json", b"[]", b"1e999", b"{" * 5,
                                  pytest.param(b"9" * 5000, id="5000-digits")])
def test_what_is_no_bundle_is_refused(data: bytes) -> None:
    refused(data)


def test_deep_nesting_is_refused_before_parsing() -> None:
    assert "nested" in refused(nested(200_000).encode())


def test_too_many_arrays_and_objects_are_refused_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    made = bundle.write(sample())
    containers = made.count(b"{") + made.count(b"[")
    monkeypatch.setattr(bundle, "MAX_CONTAINERS", containers - 1)
    assert f"{containers:,} arrays and objects, more than" in refused(made)


@pytest.mark.parametrize("where", ["top", "bundle"])
def test_a_key_given_twice_is_refused(where: str) -> None:
    """Another reader takes a key's first value where json takes its last: the file must say one thing."""
    made = bundle.write(sample())
    twice = (made.replace(b'{"format":', b'{"format":"other","format":', 1) if where == "top" else
             made.replace(b'"fleet":"fleet-a"', b'"fleet":"fleet-b","fleet":"fleet-a"', 1))
    assert twice != made
    assert "appears twice" in refused(twice)


def test_a_file_past_the_size_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    made = bundle.write(sample())
    monkeypatch.setattr(bundle, "MAX_BYTES", len(made) - 1)
    assert "more than" in refused(made)


@pytest.mark.parametrize(("path", "value", "field"), [
    ("fleet", "<script>alert(1)</script>", "bundle.fleet"),
    ("fleet", "", "bundle.fleet"),
    ("created", "2026-02-30", "bundle.created"),
    ("created", "2026-12-05T10:11:12", "bundle.created"),
    ("tool", None, "bundle.tool"),
    ("dropped", ["a\nb"], "bundle.dropped[0]"),
    ("dropped", ["x" * 301], "bundle.dropped[0]"),
    ("runs.0.run", "/home/alice/runs/night-1", "bundle.runs[0].run"),
    ("runs.0.date", "yesterday", "bundle.runs[0].date"),
    ("runs.0.cells.0.verdict", "fine", "bundle.runs[0].cells[0].verdict"),
    ("runs.0.cells.0.control", 1, "bundle.runs[0].cells[0].control"),
    ("runs.0.cells.0.stack.torch", "2.11.0<img src=x>", "bundle.runs[0].cells[0].stack.torch"),
    ("runs.0.cells.0.stack.cudnn", 91900, "bundle.runs[0].cells[0].stack.cudnn"),
    ("runs.0.cells.0.stack.driver", "580.159.04 on box-7", "bundle.runs[0].cells[0].stack.driver"),
    ("runs.0.cells.0.stack.image_digest", "ubuntu:latest", "bundle.runs[0].cells[0].stack.image_digest"),
    ("runs.0.cells.0.stack.lane", "venv", "bundle.runs[0].cells[0].stack.lane"),
    ("runs.0.cells.0.gpu.model", "GPU-8e2a4f1c-uuid\n", "bundle.runs[0].cells[0].gpu.model"),
    ("runs.0.cells.0.gpu.capability", "9", "bundle.runs[0].cells[0].gpu.capability"),
    ("runs.0.cells.0.gpu.generation", "sm80", "bundle.runs[0].cells[0].gpu.generation"),
    ("runs.0.cells.0.gpu.mig", "all of it", "bundle.runs[0].cells[0].gpu.mig"),
    ("runs.0.cells.0.gpu.uuid", "GPU-1234", "bundle.runs[0].cells[0].gpu.'uuid'"),
    ("runs.0.cells.0.gpu.model", KeyError, "bundle.runs[0].cells[0].gpu.model: missing"),
    ("runs.0.cells.0.cases.0.case", "../../etc/passwd", "bundle.runs[0].cells[0].cases[0].case"),
    ("runs.0.cells.0.cases.0.verdict", "REGRESSION", "bundle.runs[0].cells[0].cases[0].verdict"),
    ("runs.0.cells.0.cases.0.outcome", "exploded", "bundle.runs[0].cells[0].cases[0].outcome"),
    ("runs.0.cells.0.cases.0.family", "cudnn_something_new", "bundle.runs[0].cells[0].cases[0].family"),
    ("runs.0.cells.0.cases.0.subcode", True, "bundle.runs[0].cells[0].cases[0].subcode"),
    ("runs.0.cells.0.cases.0.subcode", 1 << 70, "bundle.runs[0].cells[0].cases[0].subcode"),
    ("runs.0.cells.0.cases.0.reason", "a\u2028b", "bundle.runs[0].cells[0].cases[0].reason"),
    ("runs.0.cells.0.cases.0.reason", "a\x1b[31mred", "bundle.runs[0].cells[0].cases[0].reason"),
    ("runs.0.cells.0.cases.0.known", ["Not An Id"], "bundle.runs[0].cells[0].cases[0].known[0]"),
    ("runs.0.cells.0.cases.0.known", ["a"] * 9, "bundle.runs[0].cells[0].cases[0].known"),
    ("runs.0.cells.0.cases.0.sources", ["javascript:alert(1)"], "bundle.runs[0].cells[0].cases[0].sources[0]"),
    ("runs.0.cells.0.cases.0.sources", ['https://x.org/"onload="x'], "bundle.runs[0].cells[0].cases[0].sources[0]"),
    ("runs.0.cells.0.cases.0.sources", ["https://x.org/<script>"], "bundle.runs[0].cells[0].cases[0].sources[0]"),
    ("runs.0.cells.0.cases.0.repro.device", "tpu", "bundle.runs[0].cells[0].cases[0].repro.device"),
    ("runs.0.cells.0.cases.0.repro.params.op", "conv2d; rm -rf /", "bundle.runs[0].cells[0].cases[0].repro.params.op"),
    ("runs.0.cells.0.cases.0.repro.params.size", [1.5], "bundle.runs[0].cells[0].cases[0].repro.params.size"),
    ("runs.0.cells.0.cases.0.repro.params.size", list(range(9)), "bundle.runs[0].cells[0].cases[0].repro.params.size"),
    ("runs.0.cells.0.cases.0.repro.params.n", {"a": 1}, "bundle.runs[0].cells[0].cases[0].repro.params.n"),
    ("runs.0.cells.0.cases.0.repro.params.__class__", 1, "bundle.runs[0].cells[0].cases[0].repro.params.'__class__'"),
    ("runs.0.cells.0.cases.0.repro.shapes.hostname", [1], "bundle.runs[0].cells[0].cases[0].repro.shapes.hostname"),
    ("runs.0.cells.0.cases.0.repro.shapes.input", 4, "bundle.runs[0].cells[0].cases[0].repro.shapes.input"),
    ("runs.0.cells.0.cases.0.repro.knobs", [], "bundle.runs[0].cells[0].cases[0].repro.knobs"),
    ("runs.0.cells.0.cases", "all", "bundle.runs[0].cells[0].cases"),
])
def test_a_field_that_does_not_fit_is_refused_by_name(path: str, value: Any, field: str) -> None:
    message = refused(edited(path, value))
    assert f"field {field}" in message, message


def test_the_list_bounds_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle, "MAX_CASES", 1)
    assert "bundle.runs[0].cells[0].cases: 3 entries, more than 1" in refused(bundle.write(sample()))


def test_nulls_where_the_model_allows_them() -> None:
    value = plain(sample())
    value["runs"][0]["cells"][0]["stack"] |= {"torch": None, "cuda": None, "cudnn": None, "driver": None}
    value["runs"][0]["cells"][0]["cases"][0] |= {"repro": None, "family": None, "reason": None}
    got = bundle.parse(signed(value), NAME)
    assert got.runs[0].cells[0].stack.torch is None and got.runs[0].cells[0].cases[0].repro is None


def test_read_takes_a_regular_file_only(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_bytes(bundle.write(sample()))
    assert bundle.read(path) == sample()
    link = tmp_path / "link.json"
    link.symlink_to(path)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for bad in (link, fifo, tmp_path, tmp_path / "absent.json"):
        with pytest.raises(BadBundle) as caught:
            bundle.read(bad)
        assert str(caught.value).startswith(f"{bad}: ") and "\n" not in str(caught.value)


def test_bad_bundle_is_bad_input() -> None:
    assert BadBundle.exit_code == 2
