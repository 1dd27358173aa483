"""The CUDA library audit (issue 47): which files a cell's torch really loads, and from where.

Standard library only, Python 3.8 syntax, no convmatrix: it runs in the cell's own interpreter and
environment, like every case (test_audit.py is the case). Two halves:

- ``child()`` runs as ``python libaudit.py --child`` in a fresh process of the cell's interpreter:
  it imports torch (so torch's own DT_RPATH and preloads decide, as in a user's job), then calls
  cuDNN's version checks through the ``libcudnn.so.9`` torch mapped (cudnnGraphVersionCheck,
  cudnnOpsVersionCheck, cudnnCnnVersionCheck, cudnnAdvVersionCheck), which makes cuDNN 9 open its
  sub-libraries without a GPU, and prints ``/proc/self/maps``' libraries after each step as one
  JSON line. A foreign sub-library makes cuDNN print "Unable to load any of {...}" and abort: the
  process is a child so that its abort is this case's failure, with cuDNN's own stderr as evidence.
- ``audit()`` (in the case's process) runs the child, then reads the ELF dynamic sections of the
  cuDNN files it loaded (bounded) for the sub-libraries cuDNN asks for by bare soname, works out
  the file the loader would pick for each (LD_LIBRARY_PATH, the caller's RUNPATH, the loader
  cache, the default folders: ld.so(8)), names the package that owns every file and judges.

cuDNN's engines (libcudnn_engines_*.so.9, libcudnn_heuristic.so.9) are opened by libcudnn_graph
only when a plan is built, which needs a GPU: for those the audit says which file would load.
``after_convs()`` compares what a process mapped after its conv cases ran (``mapped()``, bounded)
with the audit's table, a finding for each file the audit did not name or named elsewhere; pure,
tested on sample maps text. Calling it at a GPU session's end is not wired yet (issue 47).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import re
import struct
import subprocess
import sys
import time
from typing import Any, Callable, Iterable

SCHEMA = 1
# The four version checks of cuDNN 9's libcudnn.so.9: each opens one sub-library (and what it needs).
CHECKS = ("cudnnGraphVersionCheck", "cudnnOpsVersionCheck", "cudnnCnnVersionCheck", "cudnnAdvVersionCheck")
# The CUDA-family libraries torch loads, by the stem of their soname: (family, the name shown).
FAMILIES: dict[str, tuple[str, str]] = {
    "libcudnn": ("cudnn", "cuDNN"),
    "libcublas": ("cublas", "cuBLAS"),
    "libcublasLt": ("cublas", "cuBLASLt"),
    "libcufft": ("cufft", "cuFFT"),
    "libcusparse": ("cusparse", "cuSPARSE"),
    "libcusparseLt": ("cusparse", "cuSPARSELt"),
    "libnccl": ("nccl", "NCCL"),
    "libnvrtc": ("nvrtc", "NVRTC"),
    "libnvJitLink": ("nvjitlink", "nvJitLink"),
    "libcudart": ("cudart", "CUDA runtime"),
    "libcurand": ("curand", "cuRAND"),
    "libcusolver": ("cusolver", "cuSOLVER"),
    "libcupti": ("cupti", "CUPTI"),
    "libcuda": ("driver", "CUDA driver"),
}
_LIB = re.compile(r"/(lib(?:cudnn(?:_[a-z_]+)?|cublasLt|cublas|cufft|cusparseLt|cusparse|nccl|nvrtc|nvJitLink|"
                  r"cudart|curand|cusolver|cupti|cuda))(?:-[0-9a-f]{8})?\.so(?:\.[0-9.]+)?$")
# cuDNN's own lines when it cannot open a sub-library (seen with cuDNN 9.4: "Unable to load any of
# {libcudnn_cnn.so.9.4.0, libcudnn_cnn.so.9.4, libcudnn_cnn.so.9, libcudnn_cnn.so}", then "Invalid
# handle. Cannot load symbol cudnnCnnVersionCheck", then abort).
CUDNN_LINE = re.compile(r"(Unable to load any of \{[^}\n]{0,400}\}|Invalid handle\. Cannot load symbol \S{1,80}|"
                        r"Could not load library \S{1,200}|CUDNN_STATUS_[A-Z_]{1,60})")
# torch 2.12.1+cu130 pins nvidia-cudnn-cu13 9.20.0.48, whose libcudnn_graph.so.9 names
# libcudnn_engines_tensor_ir.so by bare soname though the wheel ships none (the file first comes with
# 9.23): another cuDNN 9 on the loader path is then mixed in (pytorch/pytorch#188892, #187824, and the
# LD_DEBUG trace in #185512): hence every such name is looked up, shipped or not.
# cuDNN names the sub-libraries it dlopens as plain strings, "libcudnn_engines_precompiled.so", and
# adds its version: "libcudnn_engines_precompiled.so.9.4.0", ".9.4", ".9", then none.
_DLOPENED = re.compile(rb"libcudnn_[a-z_]{2,60}\.so")
READ_LIMIT = 64 << 20  # bytes of a cuDNN file scanned for those names (graph: 4 MB; the engines: 0.4 GB, not read)
# The files that dlopen the sub-libraries (the shim and libcudnn_graph) are read whole, in chunks, up
# to this: 9.23's libcudnn_graph.so.9 is 128 MB (0.2 s here), and names libcudnn_engines_tensor_ir.
DLOPENER_LIMIT = 512 << 20
DLOPENERS = ("libcudnn", "libcudnn_graph")
CHUNK = 16 << 20
# The child's time where the session has no --case-timeout. Where it has one (the harness gives
# 900 s), the child gets nearly that (child_timeout): the case's own limit bounds the audit as any
# case. A cold page cache and a loaded runner: torch's import took 350 s once here.
CHILD_TIMEOUT = 300.0
STDERR_LIMIT = 64 << 10
STDOUT_LIMIT = 4 << 20
DEFAULT_DIRS_TAIL = ("lib64", "usr/lib64", "lib", "usr/lib")
# What test_audit.py's message starts each finding with: results/families.py knows these words.
SWAP = "CUDA library swap:"
MISMATCH = "cuDNN version mismatch:"
# cuDNN 9's statuses a version check returns (cudnn_graph.h; results/families.py knows them all).
CHECK_STATUS = {1002: "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH", 1008: "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED"}
# Each check's sub-library: a check that does not return 0 names the file it opened.
CHECKED = {"cudnnGraphVersionCheck": "libcudnn_graph", "cudnnOpsVersionCheck": "libcudnn_ops",
           "cudnnCnnVersionCheck": "libcudnn_cnn", "cudnnAdvVersionCheck": "libcudnn_adv"}
MISSING = "cuDNN library missing:"


# --- the child -----------------------------------------------------------------------------------

MAPS_LIMIT = 16 << 20  # bytes of /proc/self/maps read (a CUDA process's is a few hundred kB)


def mapped_in(text: str) -> list[str]:
    """The CUDA-family files a /proc/<pid>/maps text names (their real paths), each once, in order."""
    found: list[str] = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and _LIB.search(parts[5]) and parts[5] not in found:
            found.append(parts[5])
    return found


def mapped(maps: str = "/proc/self/maps") -> list[str]:
    """The CUDA-family files this process has mapped, from /proc/self/maps (at most MAPS_LIMIT bytes)."""
    with open(maps, encoding="utf-8", errors="replace") as handle:
        return mapped_in(handle.read(MAPS_LIMIT))


_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def after_convs(paths: Iterable[str], rows: Iterable[dict[str, Any]],
                resolve: Callable[[str], str] = lambda path: path) -> list[str]:
    """What the process mapped after the conv cases ran (`paths`, mapped()) against the audit's table
    (`rows`, audit()["libraries"]): a file of a library the audit named, mapped from another file
    than the one the audit named, is a finding (`CUDA library swap:`, one a file). `resolve` makes
    the table's paths real ones (os.path.realpath where the files are: /proc/self/maps names real
    paths, the audit may name a symlink); pure with the default. A file of a library the audit did
    not name is not a finding: on a GPU, cuDNN and NVRTC open more than the CPU-side audit can make
    them open (the driver's JIT, nvrtc-builtins), which is no swap; the line lists those files."""
    named: dict[str, list[str]] = {}
    for row in rows:
        if isinstance(row, dict) and isinstance(row.get("name"), str):
            path = row.get("path")
            named.setdefault(stem(row["name"]), []).append(resolve(path) if isinstance(path, str) and path else "")
    findings: list[str] = []
    for path in paths:
        name = os.path.basename(path)
        where = named.get(stem(name))
        if where is not None and path not in where:
            audited = ", ".join(p or "none found" for p in where)
            # The table is read back from a results line a cell wrote: control characters are shown
            # escaped, so that each finding stays one line.
            findings.append(_CONTROL.sub(_escaped, f"{SWAP} {name} mapped after the conv cases ran from {path}, "
                                                   f"where the audit named {audited}"))
    return findings


def _escaped(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}" if ord(match.group()) < 0x100 else f"\\u{ord(match.group()):04x}"


# What a GPU cell's processes mapped after the conv cases ran (conftest.py AfterConvs): each process
# that ran cases reads its own maps as it ends; the one that sees them all end writes one more
# results line, case AFTER_CASE, judged by after_convs against the audit's table, which it reads
# back from the audit's own line (a run continued after a crash skips the audit already recorded).
AFTER_CASE = "audit-after-convs"
AFTER_NODEID = "suites/test_audit.py::" + AFTER_CASE
AUDIT_CASE = "audit-cuda-libraries"  # the audit case's id (test_audit.py CASE_ID is this)
MAPPED_LIMIT = 512  # files kept on the line (a CUDA process maps a few dozen of these)
RESULTS_LIMIT = 256 << 20  # bytes of results.jsonl read back for the audit's line


def seen(ran: int, maps: str = "/proc/self/maps") -> dict[str, Any]:
    """What one process hands over when it ends: how many cases it ran and what it mapped."""
    try:
        files = mapped(maps)[:MAPPED_LIMIT]
    except OSError as exc:
        return {"ran": ran, "mapped": [], "error": f"{maps}: {exc.strerror or exc}"}
    return {"ran": ran, "mapped": files}


def recorded(results_path: str, limit: int = RESULTS_LIMIT) -> tuple[dict[str, Any] | None, bool]:
    """The audit's table from its results line (None without one) and whether an after line is
    already there (a continued run writes it once). At most `limit` bytes are read."""
    table: dict[str, Any] | None = None
    written = False
    try:
        with open(results_path, "rb") as handle:
            data = handle.read(limit)
    except OSError:
        return None, False
    for raw in data.splitlines():
        if AUDIT_CASE.encode() not in raw and AFTER_CASE.encode() not in raw:
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(line, dict):
            continue
        if line.get("case") == AUDIT_CASE and isinstance(line.get("audit"), dict):
            table = line["audit"]
        elif line.get("case") == AFTER_CASE:
            written = True
    return table, written


def judged(handed: list[dict[str, Any]], lost: int, table: dict[str, Any],
           resolve: Callable[[str], str] = os.path.realpath) -> dict[str, Any]:
    """The `audit-after-convs` line's own fields (status, message, exc_type, after_convs) from what
    each process handed over (`lost`: workers that died without handing anything) and the audit's
    table; the recorder adds the fields every line has."""
    paths: list[str] = []
    for one in handed:
        for path in one.get("mapped") or []:
            if isinstance(path, str) and path not in paths and len(paths) < MAPPED_LIMIT:
                paths.append(path)
    listed = table.get("libraries")
    rows = [row for row in listed if isinstance(row, dict)] if isinstance(listed, list) else []
    findings = after_convs(paths, rows, resolve)
    named = {stem(str(row.get("name"))) for row in rows}
    return {
        "status": "failed" if findings else "passed",
        "message": "\n".join(findings) or None,
        "exc_type": "LibraryAuditFailure" if findings else None,
        "after_convs": {
            "mapped": paths,
            # Files of libraries the audit did not name (the driver's JIT, nvrtc-builtins): shown, not judged.
            "unnamed": [p for p in paths if stem(os.path.basename(p)) not in named],
            "processes": len(handed),
            "lost": lost,
            "errors": [one["error"] for one in handed if isinstance(one.get("error"), str)],
        },
    }


def _emit(stage: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps(dict(stage=stage, mapped=mapped(), **fields)) + "\n")
    sys.stdout.flush()


def child() -> int:
    import ctypes

    import torch  # noqa: F401  (torch's own loading decides what comes first)

    _emit("torch")
    tops = [path for path in mapped() if os.path.basename(path).startswith("libcudnn.so")]
    if not tops:
        _emit("done", version=None, checks={})
        return 0
    top = ctypes.CDLL(tops[0])
    version = int(top.cudnnGetVersion())
    checks: dict[str, int | None] = {}
    for name in CHECKS:
        function = getattr(top, name, None)
        if function is None:  # cuDNN 8 has no sub-library checks
            continue
        _emit("check", check=name)  # the last one printed is the one that died, if one does
        checks[name] = int(function())
    for driver in ("libcuda.so.1",):  # the driver's library, where the machine has one
        with contextlib.suppress(OSError):
            ctypes.CDLL(driver)
    _emit("done", version=version, checks=checks)
    return 0


# --- ELF and the loader --------------------------------------------------------------------------

def elf_dynamic(path: str) -> dict[str, Any]:
    """DT_NEEDED, DT_SONAME, DT_RPATH and DT_RUNPATH of a 64-bit little-endian ELF file; {} for
    anything else. Reads the header, the program headers and the dynamic strings only (bounded)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return {}
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            if phentsize != 56 or phnum > 256:
                return {}
            handle.seek(phoff)
            table = handle.read(56 * phnum)
            loads, dynamic = [], None
            for index in range(phnum):
                kind, _f, offset, vaddr, _p, filesz, _m, _a = struct.unpack_from("<IIQQQQQQ", table, 56 * index)
                if kind == 1:
                    loads.append((vaddr, offset, filesz))
                elif kind == 2:
                    dynamic = (offset, min(filesz, 1 << 16))
            if dynamic is None:
                return {}
            handle.seek(dynamic[0])
            raw = handle.read(dynamic[1])
            entries = [struct.unpack_from("<qQ", raw, i) for i in range(0, len(raw) - 15, 16)]
            tags: dict[int, list[int]] = {}
            for tag, value in entries:
                if tag == 0:
                    break
                tags.setdefault(tag, []).append(value)
            strtab, strsz = tags.get(5, [None])[0], min(tags.get(10, [0])[0], 4 << 20)
            if strtab is None:
                return {}
            start = next((o + strtab - v for v, o, s in loads if v <= strtab < v + s), None)
            if start is None:
                return {}
            handle.seek(start)
            strings = handle.read(strsz)
    except (OSError, struct.error):
        return {}

    def text(offset: int) -> str:
        end = strings.find(b"\0", offset)
        return strings[offset:end if end >= 0 else len(strings)].decode("utf-8", "replace")

    return {"needed": [text(v) for v in tags.get(1, [])], "soname": text(tags[14][0]) if 14 in tags else None,
            "rpath": [p for v in tags.get(15, []) for p in text(v).split(":") if p],
            "runpath": [p for v in tags.get(29, []) for p in text(v).split(":") if p]}


def dlopened_names(path: str, limit: int | None = None) -> list[str]:
    """The cuDNN sub-libraries a file names as plain strings (what it dlopens): none for a file over
    `limit` bytes, else all of it, read a chunk at a time (a name across two chunks is kept)."""
    found: set[str] = set()
    limit = READ_LIMIT if limit is None else limit
    try:
        if os.path.getsize(path) > limit:
            return []
        with open(path, "rb") as handle:
            tail = b""
            while True:
                data = handle.read(CHUNK)
                if not data:
                    break
                window = tail + data
                found.update(m.decode() for m in _DLOPENED.findall(window))
                tail = window[-80:]
    except OSError:
        return []
    return sorted(found)


def ld_cache() -> dict[str, str]:
    """soname -> path from the loader cache (`ldconfig -p`), the first entry of this machine's kind."""
    for tool in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "/sbin/ldconfig.real"):
        if os.path.exists(tool):
            try:
                done = subprocess.run([tool, "-p"], capture_output=True, text=True, timeout=30, check=False)
            except (OSError, subprocess.SubprocessError):
                return {}
            found: dict[str, str] = {}
            for line in done.stdout.splitlines():
                match = re.match(r"\s+(\S+) \(([^)]*)\) => (\S+)$", line)
                if match and ("x86-64" in match.group(2) or platform.machine() not in ("x86_64", "AMD64")):
                    found.setdefault(match.group(1), match.group(3))
            return found
    return {}


def default_dirs() -> list[str]:
    triplet = f"{platform.machine()}-linux-gnu"
    return ["/lib/" + triplet, "/usr/lib/" + triplet] + ["/" + d for d in DEFAULT_DIRS_TAIL]


def search_path(env: dict[str, str], caller: str | None, dynamic: dict[str, Any]) -> list[tuple[str, str]]:
    """(folder, how) in ld.so's order for a dlopen from `caller` (ld.so(8)): its DT_RPATH when it has
    no DT_RUNPATH, LD_LIBRARY_PATH, its DT_RUNPATH; the loader cache and the defaults come after."""
    origin = os.path.dirname(caller) if caller else ""

    def expand(folder: str) -> str:
        return folder.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)

    order: list[tuple[str, str]] = []
    if not dynamic.get("runpath"):
        order += [(expand(d), "rpath") for d in dynamic.get("rpath", [])]
    order += [(d or ".", "LD_LIBRARY_PATH") for d in re.split(r"[:;]", env.get("LD_LIBRARY_PATH", "")) if d]
    order += [(expand(d), "runpath") for d in dynamic.get("runpath", [])]
    return order


def would_pick(names: Iterable[str], env: dict[str, str], caller: str | None, dynamic: dict[str, Any],
               cache: dict[str, str]) -> tuple[str | None, str | None]:
    """(path, how) of the file ld.so would open for the first of `names` it finds, or (None, None)."""
    folders = search_path(env, caller, dynamic)
    for name in names:
        for folder, how in folders:
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                return os.path.realpath(path), how
        if name in cache and os.path.isfile(cache[name]):
            return os.path.realpath(cache[name]), "ld cache"
        for folder in default_dirs():
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                return os.path.realpath(path), "system path"
    return None, None


# --- who owns a file -----------------------------------------------------------------------------

_OWNERS: dict[str, dict[str, tuple[str, str]]] = {}


def _record_owners(site: str) -> dict[str, tuple[str, str]]:
    """relative path -> (package, version) of the CUDA wheels and torch installed in one site-packages."""
    if site not in _OWNERS:
        owners: dict[str, tuple[str, str]] = {}
        try:
            names = os.listdir(site)
        except OSError:
            names = []
        for name in names:
            match = re.match(r"(nvidia[-_][A-Za-z0-9_.]*?|torch)-([0-9][^-]*)\.dist-info$", name)
            if match is None:
                continue
            package = match.group(1).replace("_", "-")
            try:
                with open(os.path.join(site, name, "RECORD"), encoding="utf-8", errors="replace") as handle:
                    lines = handle.read(8 << 20).splitlines()
            except OSError:
                continue
            for line in lines:
                relative = line.split(",", 1)[0]
                if ".so" in relative:
                    owners[os.path.normpath(relative)] = (package, match.group(2))
        _OWNERS[site] = owners
    return _OWNERS[site]


def owner(path: str) -> tuple[str, str, str] | None:
    """(package, version, its site-packages) of the wheel a file came from, in any environment."""
    parts = path.split(os.sep)
    for index in range(len(parts) - 1, 0, -1):
        if parts[index] in ("site-packages", "dist-packages"):
            site = os.sep.join(parts[:index + 1])
            found = _record_owners(site).get(os.sep.join(parts[index + 1:]))
            return (found[0], found[1], site) if found else None
    return None


def version_of(path: str, found: tuple[str, str, str] | None) -> str | None:
    """A file's version: its CUDA wheel's (torch's bundled copies have none), else the digits after
    .so in its real name (a system cuDNN's libcudnn_cnn.so.9.5.1)."""
    if found is not None and found[0].startswith("nvidia"):
        return found[1]
    match = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)*)$", os.path.realpath(path))
    return match.group(1) if match else None


def short(version: str | None) -> str | None:
    """Three parts, the way cuDNN numbers itself (9.4.0.58 and 9.4.0 are one cuDNN)."""
    return ".".join(version.split(".")[:3]) if version else None


def stem(name: str) -> str:
    return re.sub(r"(-[0-9a-f]{8})?\.so(\.[0-9.]*)?$", "", name)


# --- the audit -----------------------------------------------------------------------------------

class Child:
    """The audit's child (`python libaudit.py --child`), started now and read when it is wanted:
    the suite starts it as the session starts, so that its torch import overlaps the session's own
    and the collection (conftest.py EarlyAudit: the audit's cost to a cell, issue 47). Pipes, not
    files: its output is a few stages of a few kB, and a full pipe only pauses it until read."""

    def __init__(self, env: dict[str, str], timeout: float = CHILD_TIMEOUT) -> None:
        self.env = dict(env)
        self.timeout = timeout
        self.started = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child"], env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def result(self) -> dict[str, Any]:
        """The child's stages, its exit status and the tail of its stderr (cuDNN's own lines), once
        it has ended or its timeout after it started (then killed: exit None)."""
        left = max(0.0, self.timeout - (time.monotonic() - self.started))
        try:
            stdout, stderr = self.proc.communicate(timeout=left)
            code: int | None = self.proc.returncode
        except subprocess.TimeoutExpired:
            self.proc.kill()
            stdout, stderr = self.proc.communicate()
            code = None
        stages = []
        for line in stdout[:STDOUT_LIMIT].decode("utf-8", "replace").splitlines():
            try:
                stage = json.loads(line)
            except ValueError:
                continue
            if isinstance(stage, dict):
                stages.append(stage)
        return {"stages": stages, "exit": code, "stderr": stderr[-STDERR_LIMIT:].decode("utf-8", "replace")}

    def stop(self) -> None:
        """Killed and reaped, unread (its case was deselected, or the session ended first)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def run_child(env: dict[str, str], timeout: float = CHILD_TIMEOUT) -> dict[str, Any]:
    """The child's stages, its exit status and the tail of its stderr, started and read now."""
    return Child(env, timeout).result()


def child_timeout(case_timeout: Any) -> float:
    """The child's time: within the session's --case-timeout where it has one, else CHILD_TIMEOUT.
    Short of the case's own limit by a fifth (at most 30 s), so that the case says the child's
    last step before the watchdog would end it with a word for any case; the child starts before
    the case does (EarlyAudit), which widens that margin."""
    if isinstance(case_timeout, (int, float)) and math.isfinite(case_timeout) and case_timeout > 0:
        return max(case_timeout * 0.8, case_timeout - 30.0)
    return CHILD_TIMEOUT


def ran_past(table: dict[str, Any]) -> bool:
    """Whether the child was killed for time and cuDNN said nothing of a library it could not
    load: no finding about the libraries (a slow import is not a missing file), the case's timeout."""
    return table.get("exit", 0) is None and not table.get("findings")


def shipped_env(env: dict[str, str]) -> dict[str, str] | None:
    """A container cell's image as a user's job sees it (suites/test_audit.py, as_shipped): `env`
    with $CONVMATRIX_SHIPPED_LD_LIBRARY_PATH (images/Dockerfile: the image's LD_LIBRARY_PATH
    without the harness's addition) as its LD_LIBRARY_PATH; None where that is no other environment."""
    shipped = env.get("CONVMATRIX_SHIPPED_LD_LIBRARY_PATH")
    if shipped is None or shipped == env.get("LD_LIBRARY_PATH", ""):
        return None
    other = dict(env, LD_LIBRARY_PATH=shipped)
    if not shipped:
        other.pop("LD_LIBRARY_PATH")
    return other


def installed_here() -> dict[str, tuple[str, str, str]]:
    """file name -> (package, version, path) of every CUDA library this interpreter's wheels install."""
    found: dict[str, tuple[str, str, str]] = {}
    for site in [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]:
        for relative, (package, version) in _record_owners(site).items():
            if package.startswith("nvidia"):
                found.setdefault(os.path.basename(relative), (package, version, os.path.join(site, relative)))
    return found


def origin_of(path: str, found: tuple[str, str, str] | None, env: dict[str, str],
              cache: dict[str, str]) -> str:
    """Where a file came from: a wheel of this interpreter, torch/lib, LD_LIBRARY_PATH, the loader
    cache, or a system folder."""
    here = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    if found is not None and found[2] in here:
        return "torch-lib" if found[0].startswith("torch") else "wheel"
    name = os.path.basename(path)
    for entry in re.split(r"[:;]", env.get("LD_LIBRARY_PATH", "")):
        # a folder of links counts too: the loader opens the link's name, /proc/self/maps names its target
        if entry and os.path.realpath(os.path.join(entry, name)) == path:
            return "LD_LIBRARY_PATH"
    if any(os.path.realpath(p) == path for p in cache.values()):
        return "ld cache"
    return "system path"


def audit(env: dict[str, str] | None = None, ran: dict[str, Any] | None = None,
          timeout: float = CHILD_TIMEOUT) -> dict[str, Any]:
    """The table of one environment (this process's by default): every CUDA-family file the child
    mapped, every cuDNN sub-library asked for by soname, and the findings."""
    env = dict(os.environ if env is None else env)
    ran = run_child(env, timeout) if ran is None else ran
    stages = ran["stages"]
    last = stages[-1] if stages else {"stage": None, "mapped": []}
    cache = ld_cache()
    installed = installed_here()
    rows: list[dict[str, Any]] = []
    for path in last.get("mapped", []):
        name = os.path.basename(path)
        rows.append(_row(name, path, True, None, None, env, cache))
    top = next((r for r in rows if r["name"].startswith("libcudnn.so")), None)
    if top is not None:
        rows += _asked_for(top, rows, env, cache)
    findings = judge(rows, top, installed, ran, last)
    return {"schema": SCHEMA, "libraries": rows, "cudnn_version": last.get("version"),
            "checks": last.get("checks"), "stage": last.get("stage"), "exit": ran["exit"],
            "cudnn_lines": cudnn_lines(ran["stderr"]), "findings": findings,
            "ld_library_path": env.get("LD_LIBRARY_PATH") or None}


def _row(name: str, path: str | None, loaded: bool, asked_by: str | None, how: str | None,
         env: dict[str, str], cache: dict[str, str]) -> dict[str, Any]:
    found = owner(path) if path else None
    family = FAMILIES.get(stem(name).split("_")[0] if stem(name).startswith("libcudnn") else stem(name),
                          ("other", stem(name)))
    return {"name": name, "family": family[0], "path": path, "loaded": loaded,
            "version": short(version_of(path, found)) if path else None,
            "package": f"{found[0]} {found[1]}" if found else None,
            "origin": origin_of(path, found, env, cache) if path else None,
            "asked_by": asked_by, "via": how}


def _asked_for(top: dict[str, Any], rows: list[dict[str, Any]], env: dict[str, str],
               cache: dict[str, str]) -> list[dict[str, Any]]:
    """cuDNN's sub-libraries by bare soname that the child did not map: the file ld.so would pick."""
    major = (top["version"] or "9").split(".")[0]
    full = (top["version"] or "").split(".")
    loaded = {stem(r["name"]) for r in rows}
    added: list[dict[str, Any]] = []
    callers = [r for r in rows if r["name"].startswith("libcudnn") and r["path"]]
    for caller in callers:
        dynamic = elf_dynamic(caller["path"])
        names = [n for n in dynamic.get("needed", []) if n.startswith("libcudnn")]
        limit = DLOPENER_LIMIT if stem(caller["name"]) in DLOPENERS else READ_LIMIT
        names += [n + "." + major for n in dlopened_names(caller["path"], limit)]
        for soname in names:
            if stem(soname) in loaded:
                continue
            loaded.add(stem(soname))
            base = soname.rsplit(".so", 1)[0] + ".so"
            tries = [base + "." + ".".join(full[:3]), base + "." + ".".join(full[:2]), soname, base]
            path, how = would_pick([t for t in tries if not t.endswith(".")], env, caller["path"], dynamic, cache)
            added.append(_row(soname, path, False, caller["name"], how, env, cache))
    return added


def cudnn_lines(stderr: str) -> list[str]:
    """cuDNN's own words in the child's stderr: at most 5 lines, each at most 300 characters."""
    lines: list[str] = []
    for line in stderr.splitlines():
        if CUDNN_LINE.search(line) and line.strip()[:300] not in lines:
            lines.append(line.strip()[:300])
        if len(lines) == 5:
            break
    return lines


def remedy(row: dict[str, Any]) -> str:
    """What to do about a file from the wrong place, naming the place."""
    folder = os.path.dirname(row["path"] or "")
    if row["origin"] == "LD_LIBRARY_PATH":
        return f"remedy: take {folder} off LD_LIBRARY_PATH"
    if row["origin"] == "ld cache":
        return f"remedy: unregister {folder} from the loader cache (/etc/ld.so.conf.d, then ldconfig)"
    return f"remedy: remove {row['path']} or install the version the cell asks for"


def describe(row: dict[str, Any]) -> str:
    """`libcudnn_cnn.so.9 9.2.1 from LD_LIBRARY_PATH (/path/libcudnn_cnn.so.9)`."""
    return "{} {} {} {} ({})".format(row["name"], row["version"] or "(version unknown)",
                                     "loaded from" if row["loaded"] else "would load from", row["origin"],
                                     row["path"])


def judge(rows: list[dict[str, Any]], top: dict[str, Any] | None, installed: dict[str, tuple[str, str, str]],
          ran: dict[str, Any], last: dict[str, Any]) -> list[str]:
    """The findings, worst first: a sub-library that cannot load, cuDNN libraries of two versions,
    a library loaded from another installation than the package that installed it."""
    findings: list[str] = []
    lines = cudnn_lines(ran["stderr"])
    unloadable = any("Unable to load" in line or "Cannot load symbol" in line for line in lines)
    # Killed for time with nothing from cuDNN: no finding (ran_past: the case's timeout instead).
    if unloadable or ran["exit"] not in (0, None):
        died = ("the loading process ran past its time" if ran["exit"] is None
                else "the loading process exited {}".format(ran["exit"]))
        where = " at {}".format(last.get("check")) if last.get("stage") == "check" else ""
        findings.append("{} {}{}; cuDNN said: {}".format(MISSING, died, where, " | ".join(lines) or "nothing"))
    # cuDNN's own verdict on each sub-library it opened (seen: torch 2.5.1's 9.1.0 libcudnn.so.9 with
    # 9.2.1.18's libcudnn_cnn.so.9 in the loader cache: cudnnCnnVersionCheck returned 1002, no abort).
    for check, status in sorted((last.get("checks") or {}).items()):
        if status in (0, None):
            continue
        sub = next((r for r in rows if stem(r["name"]) == CHECKED.get(check) and r["loaded"] and r["path"]), None)
        said = "{} returned {} ({})".format(check, status, CHECK_STATUS.get(status, "not success"))
        if sub is None:
            findings.append(f"{MISMATCH} {said}")
        else:
            findings.append(f"{MISMATCH} {said}: {describe(sub)} beside cuDNN "
                            f"{(top or {}).get('version') or '?'}; {remedy(sub)}")
    cudnn = [r for r in rows if r["family"] == "cudnn" and r["path"] and not r["name"].startswith("libcudnn.so")]
    graph = next((r for r in cudnn if r["name"].startswith("libcudnn_graph") and r["loaded"]), None)
    # The version the others are held to: the installed cuDNN's where this interpreter installed one
    # (so the foreign file is the one named), else libcudnn_graph's, the core cudnnGetVersion answers for.
    mine = installed.get("libcudnn_graph.so.9") or installed.get("libcudnn.so.9")
    core = short(mine[1]) if mine else (graph or top or {}).get("version")
    named: set[str] = set()
    if len({r["version"] for r in cudnn if r["version"]}) > 1:
        for row in cudnn:
            if row["version"] and row["version"] != core:
                findings.append(f"{MISMATCH} {describe(row)} beside cuDNN {core}; {remedy(row)}")
                named.add(row["path"])
    # A sub-library cuDNN asks for by bare soname that the installed cuDNN does not ship, which the
    # loader would take from elsewhere with another version: the bug of pytorch/pytorch#188892
    # (9.20.0.48's libcudnn_graph and a 9.23 libcudnn_engines_tensor_ir), whatever else loaded.
    if mine is not None:
        for row in cudnn:
            if (not row["loaded"] and row["version"] and row["path"] not in named and row["name"] not in installed
                    and row["version"] != short(mine[1])):
                findings.append(f"{MISMATCH} {describe(row)}, which {mine[0]} {mine[1]} does not ship, beside cuDNN "
                                f"{short(mine[1])}; {remedy(row)}")
    for row in rows:
        if not row["loaded"] or not row["path"] or not row["version"]:
            continue
        own = installed.get(row["name"]) or installed.get(os.path.basename(row["path"]))
        if own is None or os.path.realpath(own[2]) == row["path"] or short(own[1]) == row["version"]:
            continue  # the installed file, or another copy of the same version: clean
        findings.append(f"{SWAP} {describe(row)}; this interpreter installed {own[0]} {own[1]} ({own[2]}); "
                        f"{remedy(row)}")
    return findings


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    sys.exit(child())
