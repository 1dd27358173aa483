"""suites/libaudit.py without torch: the ELF reader, the loader's order, who owns a file, cuDNN's own
lines, and the judgement over a table (issue 47). The real loading (a child importing torch) is
tested for real in tests/integration/test_audit_runs.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from strategies import AUDIT_SUBLIBRARIES, AUDIT_UNLOADABLE, AUDIT_VERSIONS, audit_child_ends, audit_rows, json_values
from testkit import load_suite_module

libaudit = load_suite_module("libaudit")


def ran(stderr: str = "", code: int | None = 0) -> dict[str, Any]:
    return {"stages": [], "exit": code, "stderr": stderr}


# --- the ELF reader and the loader ------------------------------------------------------------------

def test_elf_dynamic_reads_a_real_library() -> None:
    """The interpreter's own libpython or libc: a real ELF file of this machine."""
    target = next(p for p in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1",
                              os.path.realpath(sys.executable)) if os.path.exists(p))
    dynamic = libaudit.elf_dynamic(target)
    assert "libc.so.6" in dynamic["needed"]


@pytest.mark.parametrize("content", [b"", b"not an elf at all", b"\x7fELF" + b"\0" * 10, b"\x7fELF\x01\x01" + b"\0" * 80])
def test_elf_dynamic_of_anything_else_is_empty(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "x.so").write_bytes(content)
    assert libaudit.elf_dynamic(str(tmp_path / "x.so")) == {}
    assert libaudit.elf_dynamic(str(tmp_path / "absent.so")) == {}


def test_dlopened_names_reads_plain_strings_and_skips_huge_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = tmp_path / "libcudnn_graph.so.9"
    graph.write_bytes(b"\0libcudnn_engines_tensor_ir.so\0libcudnn_heuristic.so\0libnvrtc.so\0")
    assert libaudit.dlopened_names(str(graph)) == ["libcudnn_engines_tensor_ir.so", "libcudnn_heuristic.so"]
    monkeypatch.setattr(libaudit, "READ_LIMIT", 4)
    assert libaudit.dlopened_names(str(graph)) == []


def test_would_pick_follows_the_loaders_order(tmp_path: Path) -> None:
    """LD_LIBRARY_PATH before the caller's RUNPATH ($ORIGIN); a caller's DT_RPATH (no RUNPATH) before
    both; the first name of cuDNN's list found anywhere wins; nothing found is (None, None)."""
    wheel, planted, early = tmp_path / "wheel", tmp_path / "planted", tmp_path / "rpath"
    for folder in (wheel, planted, early):
        folder.mkdir()
        (folder / "libcudnn_cnn.so.9").write_bytes(b"x")
    caller = str(wheel / "libcudnn.so.9")
    runpath = {"runpath": ["$ORIGIN"]}
    names = ["libcudnn_cnn.so.9.4.0", "libcudnn_cnn.so.9.4", "libcudnn_cnn.so.9", "libcudnn_cnn.so"]
    env = {"LD_LIBRARY_PATH": f"{tmp_path / 'empty'}:{planted}"}
    assert libaudit.would_pick(names, env, caller, runpath, {}) == (str(planted / "libcudnn_cnn.so.9"), "LD_LIBRARY_PATH")
    assert libaudit.would_pick(names, {}, caller, runpath, {}) == (str(wheel / "libcudnn_cnn.so.9"), "runpath")
    assert libaudit.would_pick(names, env, caller, {"rpath": [str(early)]}, {}) == (
        str(early / "libcudnn_cnn.so.9"), "rpath")
    # A file of the exact version's name, wherever it is, comes before the plain soname.
    (tmp_path / "cache").mkdir()
    exact = tmp_path / "cache" / "libcudnn_cnn.so.9.4.0"
    exact.write_bytes(b"x")
    assert libaudit.would_pick(names, env, caller, runpath, {"libcudnn_cnn.so.9.4.0": str(exact)}) == (
        str(exact), "ld cache")
    assert libaudit.would_pick(["libcudnn_engines_tensor_ir.so.9"], {}, caller, runpath, {}) == (None, None)


def test_owner_reads_the_record_of_the_wheel_in_any_environment(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    lib = site / "nvidia" / "cudnn" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudnn_cnn.so.9").write_bytes(b"x")
    info = site / "nvidia_cudnn_cu12-9.2.1.18.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("nvidia/cudnn/lib/libcudnn_cnn.so.9,sha256=x,1\nnvidia/__init__.py,,\n")
    found = libaudit.owner(str(lib / "libcudnn_cnn.so.9"))
    assert found == ("nvidia-cudnn-cu12", "9.2.1.18", str(site))
    assert libaudit.version_of(str(lib / "libcudnn_cnn.so.9"), found) == "9.2.1.18"
    assert libaudit.owner(str(tmp_path / "libcudnn_cnn.so.9")) is None


def test_version_of_a_system_file_is_its_real_names(tmp_path: Path) -> None:
    real = tmp_path / "libcudnn_cnn.so.9.5.1"
    real.write_bytes(b"x")
    (tmp_path / "libcudnn_cnn.so.9").symlink_to(real.name)
    assert libaudit.version_of(str(tmp_path / "libcudnn_cnn.so.9"), None) == "9.5.1"
    assert libaudit.short("9.4.0.58") == "9.4.0"


def test_origin_of_a_linked_folder_on_ld_library_path(tmp_path: Path) -> None:
    """/proc/self/maps names a link's target: a folder of links on LD_LIBRARY_PATH still counts."""
    target = tmp_path / "real" / "libcudnn_cnn.so.9"
    target.parent.mkdir()
    target.write_bytes(b"x")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "libcudnn_cnn.so.9").symlink_to(target)
    env = {"LD_LIBRARY_PATH": str(tmp_path / "links")}
    assert libaudit.origin_of(str(target), None, env, {}) == "LD_LIBRARY_PATH"
    assert libaudit.origin_of(str(target), None, {}, {"libcudnn_cnn.so.9": str(target)}) == "ld cache"
    assert libaudit.origin_of(str(target), None, {}, {}) == "system path"


def test_cudnn_lines_keeps_cudnns_own_words_bounded() -> None:
    stderr = ("noise\n" * 5 + "Unable to load any of {libcudnn_cnn.so.9.4.0, libcudnn_cnn.so.9}\n"
              "Invalid handle. Cannot load symbol cudnnCnnVersionCheck\n" + "x" * 100000)
    assert libaudit.cudnn_lines(stderr) == ["Unable to load any of {libcudnn_cnn.so.9.4.0, libcudnn_cnn.so.9}",
                                            "Invalid handle. Cannot load symbol cudnnCnnVersionCheck"]


# --- the judgement --------------------------------------------------------------------------------

def test_an_abort_is_a_missing_library_with_cudnns_line() -> None:
    line = "Unable to load any of {libcudnn_cnn.so.9.4.0, libcudnn_cnn.so.9.4, libcudnn_cnn.so.9, libcudnn_cnn.so}"
    findings = libaudit.judge([], None, {}, ran(line + "\n", -6), {"stage": "check", "check": "cudnnCnnVersionCheck"})
    assert findings == [f"{libaudit.MISSING} the loading process exited -6 at cudnnCnnVersionCheck; cuDNN said: {line}"]


@given(audit_rows(), audit_child_ends())
@example(rows=[], child=ran("", None))  # the CI defect: killed for time, cuDNN silent, said "missing"
def test_only_a_child_that_died_or_a_cudnn_that_could_not_load_is_a_missing_library(
        rows: list[dict[str, Any]], child: dict[str, Any]) -> None:
    """Over every way the child can end: `cuDNN library missing` exactly when it died on its own (a
    non-zero exit, a signal) or cuDNN said a sub-library could not load; a child killed for time in
    silence is no finding, and then (ran_past) the case's timeout, never a pass."""
    installed = {r["name"]: ("nvidia-cudnn-cu12", r["version"] + ".1", "/v/" + r["name"]) for r in rows}
    findings = libaudit.judge(rows, rows[0] if rows else None, installed, child, {"stage": "torch"})
    said = any(line in child["stderr"] for line in AUDIT_UNLOADABLE)
    died = child["exit"] not in (0, None)
    assert any(f.startswith(libaudit.MISSING) for f in findings) is (said or died)
    timed_out = libaudit.ran_past({"exit": child["exit"], "findings": findings})
    assert timed_out is (child["exit"] is None and not findings)
    assert timed_out or findings or child["exit"] == 0  # nothing else is clean


@given(audit_rows())
def test_one_cudnn_of_one_version_is_clean_wherever_it_came_from(rows: list[dict[str, Any]]) -> None:
    """A cell whose loaded cuDNN equals what it installed is clean, LD_LIBRARY_PATH or not."""
    installed = {r["name"]: ("nvidia-cudnn-cu12", r["version"] + ".1", "/v/" + r["name"]) for r in rows}
    assert libaudit.judge(rows, rows[0], installed, ran(), {"stage": "done"}) == []


@given(audit_rows(), st.data())
def test_a_sub_library_of_another_version_is_a_mismatch_naming_it(rows: list[dict[str, Any]], data: st.DataObject) -> None:
    index = data.draw(st.integers(2, len(rows) - 1)) if len(rows) > 2 else None
    if index is None:
        return
    other = data.draw(st.sampled_from([v for v in AUDIT_VERSIONS if v != rows[index]["version"]]))
    rows[index] = dict(rows[index], version=other)
    findings = libaudit.judge(rows, rows[0], {}, ran(), {"stage": "done"})
    assert len(findings) == 1 and findings[0].startswith(libaudit.MISMATCH)
    assert rows[index]["name"] in findings[0] and rows[index]["path"] in findings[0] and other in findings[0]


@given(audit_rows(version="9.2.1"))
def test_a_whole_cudnn_from_another_install_is_a_swap(rows: list[dict[str, Any]]) -> None:
    """Every file 9.2.1 and consistent, but this interpreter installed 9.4.0.58 elsewhere: a swap,
    naming the installed package and the file that loaded instead."""
    installed = {name: ("nvidia-cudnn-cu12", "9.4.0.58", "/mine/" + name) for name in AUDIT_SUBLIBRARIES}
    findings = libaudit.judge(rows, rows[0], installed, ran(), {"stage": "done"})
    loaded = [r for r in rows if r["loaded"] and r["name"] in installed]
    assert len(findings) == len(loaded) >= 1
    assert all(f.startswith(libaudit.SWAP) and "nvidia-cudnn-cu12 9.4.0.58" in f and "9.2.1" in f for f in findings)


def test_a_version_check_that_is_not_success_is_a_mismatch_naming_the_file() -> None:
    """Seen in the container lane (Done when (c)): torch 2.5.1's 9.1.0 libcudnn.so.9 took 9.2.1.18's
    libcudnn_cnn.so.9 from the loader cache, whose version its name does not tell, and
    cudnnCnnVersionCheck returned 1002 without an abort: cuDNN's own verdict is the finding."""
    top = {"name": "libcudnn.so.9", "family": "cudnn", "path": "/w/libcudnn.so.9", "loaded": True, "version": "9.1.0",
           "origin": "wheel"}
    cnn = {"name": "libcudnn_cnn.so.9", "family": "cudnn", "path": "/usr/lib/cudnn-other/libcudnn_cnn.so.9",
           "loaded": True, "version": None, "origin": "ld cache"}
    checks = {"cudnnGraphVersionCheck": 0, "cudnnOpsVersionCheck": 0, "cudnnCnnVersionCheck": 1002,
              "cudnnAdvVersionCheck": 0}
    findings = libaudit.judge([top, cnn], top, {}, ran(), {"stage": "done", "checks": checks})
    assert findings == [f"{libaudit.MISMATCH} cudnnCnnVersionCheck returned 1002 (CUDNN_STATUS_SUBLIBRARY_VERSION_"
                        "MISMATCH): libcudnn_cnn.so.9 (version unknown) loaded from ld cache "
                        "(/usr/lib/cudnn-other/libcudnn_cnn.so.9) beside cuDNN 9.1.0; remedy: unregister "
                        "/usr/lib/cudnn-other from the loader cache (/etc/ld.so.conf.d, then ldconfig)"]
    # Every check at 0 (or cuDNN 8, which has none): nothing.
    assert libaudit.judge([top, cnn], top, {}, ran(), {"stage": "done", "checks": dict.fromkeys(checks, 0)}) == []


def test_a_sub_library_the_installed_cudnn_does_not_ship_taken_from_elsewhere_is_named() -> None:
    """pytorch/pytorch#188892: 9.20.0.48's libcudnn_graph names libcudnn_engines_tensor_ir, which that
    wheel does not ship; the loader would take a 9.23 one from LD_LIBRARY_PATH (Done when (e))."""
    lib = "/site/nvidia/cudnn/lib"
    rows: list[dict[str, Any]] = [{"name": n, "family": "cudnn", "path": f"{lib}/{n}", "loaded": True,
                                   "version": "9.20.0", "origin": "wheel"}
            for n in ("libcudnn.so.9", "libcudnn_graph.so.9")]
    rows.append({"name": "libcudnn_engines_tensor_ir.so.9", "family": "cudnn", "loaded": False, "version": "9.23.2",
                 "path": "/v923/nvidia/cudnn/lib/libcudnn_engines_tensor_ir.so.9", "origin": "LD_LIBRARY_PATH"})
    installed = {n: ("nvidia-cudnn-cu13", "9.20.0.48", f"{lib}/{n}") for n in ("libcudnn.so.9", "libcudnn_graph.so.9")}
    findings = libaudit.judge(rows, rows[0], installed, ran(), {"stage": "done"})
    assert len(findings) == 1 and findings[0].startswith(libaudit.MISMATCH)  # named once
    assert any("libcudnn_engines_tensor_ir.so.9 9.23.2 would load from LD_LIBRARY_PATH "
               "(/v923/nvidia/cudnn/lib/libcudnn_engines_tensor_ir.so.9)" in f for f in findings)
    # Nothing on the loader's path: cuDNN does without it, and nothing is said.
    rows[2] = dict(rows[2], path=None, version=None, origin=None)
    assert libaudit.judge(rows, rows[0], installed, ran(), {"stage": "done"}) == []


def test_dlopened_names_reads_a_dlopener_whole_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(libaudit, "CHUNK", 64)
    big = tmp_path / "libcudnn_graph.so.9"
    big.write_bytes(b"\0" * 100 + b"libcudnn_engines_tensor_ir.so" + b"\0" * 50)  # across the first chunk's end
    assert libaudit.dlopened_names(str(big), 1 << 20) == ["libcudnn_engines_tensor_ir.so"]
    assert libaudit.dlopened_names(str(big), 10) == []


def test_the_audit_imports_no_convmatrix() -> None:
    """It runs in the cell's interpreter, which has no convmatrix (a container has none at all)."""
    for name in ("libaudit.py", "test_audit.py"):
        source = (Path(libaudit.__file__).parent / name).read_text()
        assert "import convmatrix" not in source and "from convmatrix" not in source, name


# --- what the process mapped after the conv cases ran (pure: sample maps text) ----------------------

WHEEL_LIB = "/v/lib/python3.11/site-packages/nvidia/cudnn/lib"
MAPS = "\n".join([
    "55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1 /usr/bin/python3.11",
    f"7f00a0000000-7f00a1000000 r-xp 00000000 08:01 2 {WHEEL_LIB}/libcudnn.so.9",
    f"7f00a1000000-7f00a1100000 r--p 01000000 08:01 2 {WHEEL_LIB}/libcudnn.so.9",
    f"7f00a2000000-7f00a3000000 r-xp 00000000 08:01 3 {WHEEL_LIB}/libcudnn_graph.so.9",
    "7f00a4000000-7f00a5000000 r-xp 00000000 08:01 4 /opt/cudnn92/lib/libcudnn_engines_precompiled.so.9.2.1",
    "7f00a6000000-7f00a7000000 r-xp 00000000 08:01 5 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
    "7f00a8000000-7f00a8001000 rw-p 00000000 00:00 0 ",
    "7f00a9000000-7f00a9001000 r-xp 00000000 08:01 6 /v/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so",
    "7f00aa000000-7f00aa001000 rw-p 00000000 00:00 0 [heap]",
]) + "\n"


def audited(name: str, path: str | None) -> dict[str, Any]:
    return {"name": name, "family": "cudnn", "path": path, "loaded": path is not None, "version": "9.4.0",
            "package": None, "origin": "wheel"}


def test_mapped_in_names_each_cuda_library_once_and_nothing_else() -> None:
    assert libaudit.mapped_in(MAPS) == [f"{WHEEL_LIB}/libcudnn.so.9", f"{WHEEL_LIB}/libcudnn_graph.so.9",
                                        "/opt/cudnn92/lib/libcudnn_engines_precompiled.so.9.2.1",
                                        "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"]
    assert libaudit.mapped_in("") == [] and libaudit.mapped_in("garbage\n\0\n" * 3) == []


def test_mapped_reads_at_most_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    maps = tmp_path / "maps"
    maps.write_text(MAPS + "x" * 100)
    assert libaudit.mapped(str(maps)) == libaudit.mapped_in(MAPS)
    monkeypatch.setattr(libaudit, "MAPS_LIMIT", MAPS.index("libcudnn_graph"))
    assert libaudit.mapped(str(maps)) == [f"{WHEEL_LIB}/libcudnn.so.9"]  # the cut line is not a file
    assert libaudit.mapped("/proc/self/maps") is not None  # this process's own, read for real


def test_after_convs_finds_a_library_the_audit_named_elsewhere_and_not_one_it_did_not_name() -> None:
    """The engines are opened by libcudnn_graph only when a plan is built, on a GPU: the audit says
    which file would load; the mapping after the convs says which did. The driver's libcuda, which
    the CPU-side audit did not name, is not a swap (a GPU opens more than the audit can see)."""
    table = [audited("libcudnn.so.9", f"{WHEEL_LIB}/libcudnn.so.9"),
             audited("libcudnn_graph.so.9", f"{WHEEL_LIB}/libcudnn_graph.so.9"),
             audited("libcudnn_engines_precompiled.so.9", f"{WHEEL_LIB}/libcudnn_engines_precompiled.so.9")]
    found = libaudit.after_convs(libaudit.mapped_in(MAPS), table)
    assert found == [
        f"CUDA library swap: libcudnn_engines_precompiled.so.9.2.1 mapped after the conv cases ran from "
        f"/opt/cudnn92/lib/libcudnn_engines_precompiled.so.9.2.1, where the audit named "
        f"{WHEEL_LIB}/libcudnn_engines_precompiled.so.9"]
    # What the audit named, from the files it named: nothing to say.
    same = [audited(os.path.basename(p), p) for p in libaudit.mapped_in(MAPS)]
    assert libaudit.after_convs(libaudit.mapped_in(MAPS), same) == []


def test_after_convs_compares_real_paths_when_the_audit_named_a_link(tmp_path: Path) -> None:
    """A system cuDNN is a link (libcudnn.so.9 -> libcudnn.so.9.2.1); /proc/self/maps names the file."""
    real = tmp_path / "libcudnn.so.9.2.1"
    real.write_bytes(b"")
    (tmp_path / "libcudnn.so.9").symlink_to(real.name)
    table = [audited("libcudnn.so.9", str(tmp_path / "libcudnn.so.9"))]
    assert libaudit.after_convs([str(real)], table, os.path.realpath) == []
    assert len(libaudit.after_convs([str(real)], table)) == 1  # without resolving: the link is another name


@given(st.lists(st.sampled_from(AUDIT_SUBLIBRARIES), unique=True), st.data())
def test_after_convs_says_exactly_the_named_files_mapped_from_elsewhere(names: list[str], data: st.DataObject) -> None:
    """Each file is named by the table (at its path or elsewhere) or not at all: a finding is exactly
    a file named elsewhere, one line each."""
    paths = [f"{WHEEL_LIB}/{name}" for name in names]
    where = {p: data.draw(st.sampled_from(["here", "elsewhere", "unnamed"])) for p in paths}
    rows = [audited(os.path.basename(p), p if where[p] == "here" else f"/opt/other/{os.path.basename(p)}")
            for p in paths if where[p] != "unnamed"]
    found = libaudit.after_convs(paths, rows)
    assert len(found) == sum(w == "elsewhere" for w in where.values())
    assert all(f.startswith(libaudit.SWAP) and "\n" not in f for f in found)


# --- after the conv cases: what each process hands over, and the line -------------------------------

def test_seen_reads_this_process_maps_and_says_why_it_could_not(tmp_path: Path) -> None:
    mine = libaudit.seen(3)
    assert mine["ran"] == 3 and mine["mapped"] == libaudit.mapped("/proc/self/maps")[:libaudit.MAPPED_LIMIT]
    missing = libaudit.seen(2, str(tmp_path / "absent"))
    assert missing["mapped"] == [] and "absent" in missing["error"]


def results_with(tmp_path: Path, *lines: object) -> str:
    path = tmp_path / "results.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def test_recorded_finds_the_audit_table_and_an_after_line_already_written(tmp_path: Path) -> None:
    table = {"libraries": [audited("libcudnn.so.9", f"{WHEEL_LIB}/libcudnn.so.9")]}
    path = results_with(tmp_path, {"case": "conv2d-x", "status": "passed"}, "not json audit-cuda-libraries",
                        ["audit-cuda-libraries"], {"case": "audit-cuda-libraries", "audit": table})
    assert libaudit.recorded(path) == (table, False)
    path = results_with(tmp_path, {"case": "audit-cuda-libraries", "audit": table},
                        {"case": "audit-after-convs", "status": "passed"})
    assert libaudit.recorded(path) == (table, True)
    assert libaudit.recorded(str(tmp_path / "absent.jsonl")) == (None, False)
    # No audit line (deselected), or one whose table is not an object: nothing to judge against.
    assert libaudit.recorded(results_with(tmp_path, {"case": "audit-cuda-libraries", "audit": None})) == (None, False)


def test_recorded_reads_at_most_its_bound(tmp_path: Path) -> None:
    table: dict[str, Any] = {"libraries": []}
    path = results_with(tmp_path, {"case": "x", "message": "y" * 5000}, {"case": "audit-cuda-libraries", "audit": table})
    assert libaudit.recorded(path)[0] == table
    assert libaudit.recorded(path, limit=4000) == (None, False)  # the audit's line lies past the bound


def test_judged_joins_what_every_process_mapped_and_names_the_lost_ones() -> None:
    table = {"libraries": [audited("libcudnn.so.9", f"{WHEEL_LIB}/libcudnn.so.9"),
                           audited("libcudnn_cnn.so.9", f"{WHEEL_LIB}/libcudnn_cnn.so.9")]}
    one = {"ran": 5, "mapped": [f"{WHEEL_LIB}/libcudnn.so.9", "/usr/lib/libcuda.so.1"]}
    two = {"ran": 4, "mapped": [f"{WHEEL_LIB}/libcudnn.so.9", "/opt/cudnn92/lib/libcudnn_cnn.so.9"]}
    broken = {"ran": 1, "mapped": [], "error": "/proc/self/maps: Permission denied"}
    fields = libaudit.judged([one, two, broken], 1, table, resolve=lambda p: p)
    assert fields["status"] == "failed" and fields["exc_type"] == "LibraryAuditFailure"
    assert fields["message"] == (f"CUDA library swap: libcudnn_cnn.so.9 mapped after the conv cases ran from "
                                 f"/opt/cudnn92/lib/libcudnn_cnn.so.9, where the audit named {WHEEL_LIB}/libcudnn_cnn.so.9")
    facts = fields["after_convs"]
    assert facts["mapped"] == [f"{WHEEL_LIB}/libcudnn.so.9", "/usr/lib/libcuda.so.1", "/opt/cudnn92/lib/libcudnn_cnn.so.9"]
    assert facts["unnamed"] == ["/usr/lib/libcuda.so.1"]
    assert (facts["processes"], facts["lost"], facts["errors"]) == (3, 1, ["/proc/self/maps: Permission denied"])
    clean = libaudit.judged([one], 0, table, resolve=lambda p: p)
    assert (clean["status"], clean["message"], clean["exc_type"]) == ("passed", None, None)


def test_judged_keeps_at_most_its_bound_of_files() -> None:
    many = [{"ran": 1, "mapped": [f"/x/{i}/libcudnn_ops.so.9" for i in range(libaudit.MAPPED_LIMIT * 2)]}]
    fields = libaudit.judged(many, 0, {"libraries": "not a list of rows"}, resolve=lambda p: p)
    assert len(fields["after_convs"]["mapped"]) == libaudit.MAPPED_LIMIT and fields["status"] == "passed"


def audit_rows_hostile() -> st.SearchStrategy[dict[str, Any]]:
    """Rows shaped like the audit's, with hostile names and paths (control characters, newlines)."""
    return st.fixed_dictionaries({"name": st.sampled_from(["libcudnn_cnn.so.9", "libcudnn.so.9"]) | st.text(max_size=12),
                                  "path": st.text(max_size=30) | st.none() | st.integers()})


@given(st.one_of(json_values(), st.fixed_dictionaries({"libraries": st.lists(json_values() | audit_rows_hostile())})),
       st.lists(st.fixed_dictionaries({"ran": st.integers(0, 3), "mapped": st.lists(
           st.sampled_from([f"{WHEEL_LIB}/libcudnn.so.9", "/opt/x/libcudnn_cnn.so.9", "/usr/lib/libcuda.so.1"])
           | st.text(max_size=20) | st.integers())}), max_size=3))
@example(table={"libraries": 1}, handed=[])  # not a list: it once raised TypeError in the controller
@example(table={"libraries": [{"name": "libcudnn_cnn.so.9", "path": "/a\nCUDA library swap: forged"}]},
         handed=[{"ran": 1, "mapped": ["/opt/x/libcudnn_cnn.so.9"]}])  # a newline once made two findings
def test_judged_of_a_hostile_table_never_raises_and_says_one_finding_a_line(table: Any, handed: list[Any]) -> None:
    """The audit's table is read back from results.jsonl, which a cell writes: anything may be there."""
    fields = libaudit.judged(handed, 0, table if isinstance(table, dict) else {"libraries": table},
                             resolve=lambda p: p)
    assert fields["status"] in ("passed", "failed") and (fields["message"] is None) == (fields["status"] == "passed")
    for line in (fields["message"] or "").split("\n") if fields["message"] else []:
        assert line.startswith(libaudit.SWAP), line
    assert all(isinstance(p, str) for p in fields["after_convs"]["mapped"])
