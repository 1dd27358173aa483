"""`convmatrix stacks --refresh`: the stack facts a package index says, read into stacks_index.toml.

What is read, from each index (a "simple" repository API):
- torch's project page: its releases (patches), the Python versions its wheels are built for, and
  for each release the core metadata of one Linux x86_64 wheel, whose Requires-Dist pins
  nvidia-cudnn-cuXX (the cuDNN the wheel loads) and names its CUDA (nvidia-cuda-runtime-cuXX or
  cuda-toolkit): the variant. A wheel of download.pytorch.org/whl/<variant>/ names its variant in
  its local version label (2.9.0+cu128); a PyPI wheel carries none, its variant is PyPI's default.
- from the indexes that are not one variant's (PyPI): the published nvidia-cudnn-cu11/12/13 versions.

The pages are read through the JSON form of the simple API where the index offers it (PEP 691,
https://peps.python.org/pep-0691/), else its HTML form (PEP 503, https://peps.python.org/pep-0503/),
and a wheel's metadata from the file the index serves beside it (PEP 658,
https://peps.python.org/pep-0658/, keys renamed by PEP 714, https://peps.python.org/pep-0714/), so no
wheel (gigabytes for torch) is ever downloaded. A wheel whose metadata the index does not offer keeps
an unknown pin. Everything read is untrusted: each response is bounded in size and time, only
http(s) links are followed, and only version-shaped strings are kept.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.parser import HeaderParser
from html.parser import HTMLParser
from typing import Any

from convmatrix import tomlwrite
from convmatrix.errors import InfrastructureError
from convmatrix.matrix import stacks

PYPI = "https://pypi.org/simple/"
PYTORCH = "https://download.pytorch.org/whl/{variant}/"
# The variant indexes asked by default: every CUDA variant of the releases convmatrix knows.
VARIANTS = ("cu118", "cu121", "cu124", "cu126", "cu128", "cu129", "cu130", "cu132")
DEFAULT_INDEXES = (PYPI, *(PYTORCH.format(variant=v) for v in VARIANTS))
CUDNN_PACKAGES = ("nvidia-cudnn-cu11", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13")
OLDEST = (2, 0)  # convmatrix's facts start at torch 2.0 (the first on the nvidia-* pip wheels)
SCHEMA = 1

# PEP 691: ask for the JSON form, accept the HTML one (the only one some indexes serve).
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"

VERSION = re.compile(r"\d+(\.\d+)*")
VARIANT = re.compile(r"cu\d{3}")
PYTHON_TAG = re.compile(r"cp(\d)(\d{1,2})")
# A Requires-Dist line pinned with ==: `name[extras] (==1.2.3) ; markers` (PEP 508).
PINNED = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?\s*==\s*([0-9][0-9.]*)")


@dataclass(frozen=True)
class Limits:
    """Bounds on what is read from the network (untrusted input)."""

    timeout: float = 30.0  # seconds a connection may sit silent
    response: float = 60.0  # seconds one response may take, however it trickles
    total: float = 600.0  # seconds the whole refresh may take; what is left unread stays unknown
    page_bytes: int = 16 * 1024 * 1024  # a project page (torch's JSON page on PyPI is ~0.5 MB)
    metadata_bytes: int = 1024 * 1024  # one wheel's METADATA (torch's is ~10 kB)


class Unreadable(Exception):
    """A URL that could not be read; missing is a 404/410 (the index has no such file)."""

    def __init__(self, url: str, why: str, *, missing: bool = False) -> None:
        super().__init__(f"{url}: {why}")
        self.missing = missing


@dataclass
class Reader:
    limits: Limits = field(default_factory=Limits)
    started: float = field(default_factory=time.monotonic)

    def get(self, url: str, *, accept: str, limit: int) -> tuple[str, bytes]:
        """(content type, body) of url, or Unreadable: only http(s), at most limit bytes and the
        time bounds of self.limits."""
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise Unreadable(url, "not an http(s) URL")
        left = self.limits.total - (time.monotonic() - self.started)
        if left <= 0:
            raise Unreadable(url, f"the refresh's {self.limits.total:g} s were spent")
        deadline = time.monotonic() + min(self.limits.response, left)
        request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "convmatrix-stacks"})
        try:
            with urllib.request.urlopen(request, timeout=min(self.limits.timeout, left)) as response:
                ctype = response.headers.get_content_type()
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise Unreadable(url, f"{declared} bytes, over the {limit} byte bound")
                body = bytearray()
                # read1: what has arrived, so that a trickle cannot hold one read past the deadline
                # (each wait for more is bounded by the timeout).
                while chunk := response.read1(min(65536, limit + 1 - len(body))):
                    body += chunk
                    if len(body) > limit:
                        raise Unreadable(url, f"over the {limit} byte bound")
                    if time.monotonic() > deadline:
                        raise Unreadable(url, f"slower than the {self.limits.response:g} s bound")
                return ctype, bytes(body)
        except urllib.error.HTTPError as exc:
            raise Unreadable(url, f"HTTP {exc.code}", missing=exc.code in (404, 410)) from None
        except urllib.error.URLError as exc:
            raise Unreadable(url, str(exc.reason)) from None
        except (OSError, ValueError) as exc:  # timeouts, resets, a malformed URL or response
            raise Unreadable(url, str(exc) or type(exc).__name__) from None


@dataclass(frozen=True)
class File:
    filename: str
    url: str  # absolute, without fragment
    metadata: bool  # the index serves its core metadata at url + ".metadata"
    metadata_sha256: str  # "" when the index gave no hash of it
    yanked: bool


def normalize(name: str) -> str:
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_files(reader: Reader, index: str, project: str) -> list[File]:
    page = urllib.parse.urljoin(index if index.endswith("/") else index + "/", normalize(project) + "/")
    ctype, body = reader.get(page, accept=ACCEPT, limit=reader.limits.page_bytes)
    text = body.decode("utf-8", errors="replace")
    if ctype == JSON_TYPE or (ctype == "application/json" and text.lstrip().startswith("{")):
        return _json_files(page, text)
    return _html_files(page, text)


def _json_files(page: str, text: str) -> list[File]:
    """PEP 691 JSON: {"meta": {"api-version": "1.x"}, "files": [{"filename", "url", "yanked",
    "core-metadata" (PEP 714; "dist-info-metadata" before it): bool or {hash: value}}]}."""
    try:
        data = json.loads(text)
        version = str(data["meta"]["api-version"])
        files = data["files"]
    except (ValueError, KeyError, TypeError):
        raise Unreadable(page, "not a PEP 691 project page") from None
    if version.split(".")[0] != "1" or not isinstance(files, list):
        raise Unreadable(page, f"simple API version {version!r} is not 1.x")
    found = []
    for f in files:
        if not (isinstance(f, dict) and isinstance(f.get("filename"), str) and isinstance(f.get("url"), str)):
            continue
        meta = f.get("core-metadata", f.get("dist-info-metadata", False))
        sha = meta.get("sha256", "") if isinstance(meta, dict) else ""
        found.append(_file(page, f["filename"], f["url"], bool(meta), str(sha), bool(f.get("yanked", False))))
    return found


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open, self._text = dict(attrs), ""

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.anchors.append((self._open, self._text.strip()))
            self._open = None


def _html_files(page: str, text: str) -> list[File]:
    """PEP 503 HTML: one <a href> per file, its text the filename; data-core-metadata (PEP 714;
    data-dist-info-metadata before it, PEP 658) = "true" or "<hash>=<value>"; data-yanked."""
    parser = _Anchors()
    parser.feed(text)
    parser.close()
    found = []
    for attrs, name in parser.anchors:
        href = attrs.get("href")
        if not href:
            continue
        meta = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))
        offered = meta is not None and meta.lower() != "false"
        sha = meta.partition("=")[2] if meta and meta.startswith("sha256=") else ""
        filename = name or urllib.parse.unquote(href.split("#")[0].rsplit("/", 1)[-1])
        found.append(_file(page, filename, href, offered, sha, "data-yanked" in attrs))
    return found


def _file(page: str, filename: str, url: str, metadata: bool, sha: str, yanked: bool) -> File:
    absolute = urllib.parse.urljoin(page, url).split("#")[0]
    return File(urllib.parse.unquote(filename), absolute, metadata, sha.lower(), yanked)


@dataclass(frozen=True)
class Wheel:
    version: str  # "2.9.0"
    label: str  # the local version label: "cu128", or "" (PyPI's)
    python: tuple[int, int] | None  # the CPython it is built for, (3, 11)
    linux_x86: bool
    free_threaded: bool


def parse_wheel(filename: str, project: str) -> Wheel | None:
    """A wheel's name, `{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl` (the binary
    distribution format, https://packaging.python.org/en/latest/specifications/binary-distribution-format/)."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6) or normalize(parts[0]) != normalize(project):
        return None
    version, label = parts[1].partition("+")[::2]
    python, abi, platform = parts[-3:]
    if not VERSION.fullmatch(version):
        return None  # a pre-release, a dev or post build: not a published release's version
    tag = PYTHON_TAG.fullmatch(python)
    return Wheel(
        version=version,
        label=label,
        python=(int(tag[1]), int(tag[2])) if tag else None,
        linux_x86="linux" in platform and platform.endswith("x86_64"),
        free_threaded=abi.endswith("t"),
    )


def requirements(metadata: str) -> dict[str, str]:
    """Requires-Dist names (normalized) -> their == pin, from a wheel's METADATA (core metadata,
    https://packaging.python.org/en/latest/specifications/core-metadata/)."""
    pins = {}
    for line in HeaderParser().parsestr(metadata).get_all("Requires-Dist") or []:
        m = PINNED.match(line)
        if m and VERSION.fullmatch(m[2].rstrip(".")):
            pins[normalize(m[1])] = m[2].rstrip(".")
    return pins


def variant_from(pins: dict[str, str]) -> str:
    """The CUDA variant a wheel's pins name: nvidia-cuda-runtime-cu12==12.8.90 -> cu128,
    cuda-toolkit==13.0.2 -> cu130; "" when none does or they disagree on the CUDA major."""
    cuda = ""
    for name in ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime-cu12",
                 "nvidia-cuda-runtime-cu13", "cuda-toolkit"):
        if name in pins:
            cuda = pins[name]
            suffix = name.rpartition("-cu")[2] if "-cu1" in name else ""
            if suffix and cuda.split(".")[0] != suffix:
                return ""
            break
    parts = cuda.split(".")
    if len(parts) < 2:
        return ""
    majors = {name.rpartition("-cu")[2] for name in pins if name.startswith("nvidia-") and re.search(r"-cu1\d$", name)}
    if majors - {parts[0]}:
        return ""  # an nvidia-*-cu12 beside CUDA 13: not one variant
    return f"cu{parts[0]}{parts[1]}"


def cudnn_pin(pins: dict[str, str], variant: str) -> str:
    """The nvidia-cudnn-cuXX pin of a wheel, if it is the package of the wheel's CUDA major."""
    return pins.get(stacks.cudnn_package(variant), "") if variant else ""


@dataclass
class Read:
    """What one refresh read, release by release."""

    patches: dict[str, set[str]] = field(default_factory=dict)  # minor -> versions
    pythons: dict[str, set[tuple[int, int]]] = field(default_factory=dict)  # minor -> CPython versions
    # (minor, variant) -> {patch: pin ("" = unknown)}
    pins: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    defaults: dict[str, dict[str, str]] = field(default_factory=dict)  # minor -> {patch: PyPI's variant}
    wheels: dict[str, list[str]] = field(default_factory=dict)  # cudnn package -> versions
    read: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # why each unread index was not read
    notes: list[str] = field(default_factory=list)  # one line per index: what it could not say


def index_variant(index: str) -> str:
    """cu128 for https://download.pytorch.org/whl/cu128/: an index of one variant's wheels; "" else."""
    last = urllib.parse.urlsplit(index).path.rstrip("/").rpartition("/")[2]
    return last if VARIANT.fullmatch(last) else ""


def refresh(indexes: Iterable[str], limits: Limits | None = None) -> Read:
    """Read every index; an index that cannot be read is noted (its facts stay unknown). Raises
    InfrastructureError when no index could be read at all."""
    reader = Reader(limits or Limits())
    got = Read()
    for index in indexes:
        try:
            _read_index(reader, index, got)
        except Unreadable as exc:
            got.unread.append(index)
            got.failures.append(str(exc))
            got.notes.append(f"{index}: not read ({exc}); what only it knows stays unknown")
        else:
            got.read.append(index)
    if not got.read:
        raise InfrastructureError("stacks --refresh: no index could be read: " + "; ".join(got.failures))
    return got


def _read_index(reader: Reader, index: str, got: Read) -> None:
    files = project_files(reader, index, "torch")
    own = index_variant(index)
    versions: dict[str, list[tuple[Wheel, File]]] = {}
    for f in files:
        wheel = parse_wheel(f.filename, "torch")
        if wheel is None or f.yanked or stacks.version_key(wheel.version)[:2] < OLDEST:
            continue
        if wheel.label and not VARIANT.fullmatch(wheel.label):
            continue  # +cpu, +rocm6.2, +xpu: no cuDNN
        versions.setdefault(wheel.version, []).append((wheel, f))
    unknown: list[str] = []  # releases whose metadata was offered but could not be read
    unoffered: list[str] = []  # releases whose Linux x86_64 wheels the index offers no metadata of
    for version, wheels in versions.items():
        minor = stacks.minor_of(version)
        got.patches.setdefault(minor, set()).add(version)
        got.pythons.setdefault(minor, set()).update(w.python for w, _ in wheels if w.python)
        for label in {w.label for w, _ in wheels}:
            variant, pin = _metadata_of(reader, [wf for wf in wheels if wf[0].label == label], label,
                                        unknown, unoffered)
            if label == "" and variant:
                got.defaults.setdefault(minor, {})[version] = variant
            if variant:
                got.pins.setdefault((minor, variant), {})[version] = pin
    for listed, why in ((unoffered, "offers no core metadata (PEP 658/714) of"),
                        (unknown, "could not read the metadata of")):
        if listed:
            shown = sorted(listed, key=stacks.version_key)
            got.notes.append(f"{index}: {why} {len(listed)} torch release(s) ({', '.join(shown[:4])}"
                             f"{', ...' if len(shown) > 4 else ''}): their variant and cuDNN pin stay unknown")
    if own:
        return  # the cuDNN wheels that overrides install are PyPI's: read from the other indexes
    for package in CUDNN_PACKAGES:
        try:
            # A version counts when it has a Linux x86_64 wheel (the lanes install there): 8.9.5.29 is Windows-only.
            published = {w.version for f in project_files(reader, index, package)
                          if not f.yanked and (w := parse_wheel(f.filename, package)) and w.linux_x86}
        except Unreadable as exc:
            if not exc.missing:
                got.notes.append(f"{index}: {package} not read ({exc}); its published versions stay unknown")
            continue
        got.wheels[package] = sorted(set(got.wheels.get(package, [])) | published, key=stacks.version_key)


def _metadata_of(reader: Reader, wheels: list[tuple[Wheel, File]], label: str, unknown: list[str],
                 unoffered: list[str]) -> tuple[str, str]:
    """(variant, cuDNN pin) of one release's wheels of one label, from one Linux x86_64 wheel's
    metadata; the label names the variant when there is one."""
    version = wheels[0][0].version
    name = f"{version}+{label}" if label else version
    linux = sorted((wf for wf in wheels if wf[0].linux_x86),
                   key=lambda wf: (not wf[1].metadata, wf[0].free_threaded, wf[0].python or (0, 0)))
    if not linux or not linux[0][1].metadata:
        # PEP 658: a client may fetch url + ".metadata" only where the index says it serves one.
        (unoffered if linux else unknown).append(name)
        return label, ""
    _, chosen = linux[0]
    try:
        _, body = reader.get(chosen.url + ".metadata", accept="*/*", limit=reader.limits.metadata_bytes)
    except Unreadable:
        unknown.append(name)
        return label, ""
    if chosen.metadata_sha256 and hashlib.sha256(body).hexdigest() != chosen.metadata_sha256:
        unknown.append(f"{name} (hash mismatch)")
        return label, ""
    pins = requirements(body.decode("utf-8", errors="replace"))
    named = variant_from(pins)
    variant = label or named
    if label and named and named != label:
        # A +cu128 wheel pinning CUDA 12.6's runtime: believe the label, not the pin.
        return label, ""
    return variant, cudnn_pin(pins, variant)


def facts(got: Read, today: datetime.date) -> dict[str, Any]:
    """The generated file's content (docs/contracts.md: stacks_index.toml)."""
    complete = not got.unread and any(index_variant(i) for i in got.read)
    releases = []
    for minor in sorted(got.patches, key=stacks.version_key):
        patches = sorted(got.patches[minor], key=stacks.version_key)
        pythons = sorted(got.pythons.get(minor, ()))
        variants = {}
        for (m, variant), by_patch in sorted(got.pins.items(), key=lambda kv: stacks.version_key(kv[0][1][2:])):
            if m == minor:
                known = [by_patch[p] for p in sorted(by_patch, key=stacks.version_key) if by_patch[p]]
                variants[variant] = known[-1] if known else ""  # the newest patch's pin
        defaults = got.defaults.get(minor, {})
        releases.append({
            "minor": minor,
            "patches": patches,
            "python": [".".join(map(str, pythons[0])), ".".join(map(str, pythons[-1]))] if pythons else ["", ""],
            "pypi_default": defaults[max(defaults, key=stacks.version_key)] if defaults else "",
            "variants": variants,
            "variants_complete": complete,
        })
    return {
        "schema": SCHEMA,
        "generated": today,
        "indexes": list(got.read),
        "unread": list(got.unread),
        "cudnn_wheels": {p: got.wheels[p] for p in CUDNN_PACKAGES if p in got.wheels},
        "release": releases,
    }


def pin_changes(got: Read) -> list[str]:
    """One line per release whose patches pin different cuDNN for one variant (the file keeps the newest's)."""
    lines = []
    for (minor, variant), by_patch in sorted(got.pins.items()):
        known = {p: pin for p, pin in by_patch.items() if pin}
        if len(set(known.values())) > 1:
            listed = ", ".join(f"{p}: {known[p]}" for p in sorted(known, key=stacks.version_key))
            lines.append(f"torch {minor} {variant}: patches pin different cuDNN ({listed}); kept the newest")
    return lines


HEADER = """\
# Generated by `convmatrix stacks --refresh` from the package indexes below: do not edit, run it again.
# What the indexes said on the date below (docs/contracts.md: stacks_index.toml); stacks.toml beside it
# keeps what no index says, and convmatrix.matrix.stacks.load() merges the two. An empty string or a
# missing variant is a fact the indexes did not say: nothing is pruned on it.
"""


def render(data: dict[str, Any]) -> str:
    value, key = tomlwrite.value, tomlwrite.key
    out = [HEADER, f"schema = {data['schema']}", f"generated = {value(data['generated'])}",
           f"indexes = {value(data['indexes'])}", f"unread = {value(data['unread'])}", "", "[cudnn_wheels]"]
    out += [f"{key(package)} = {value(versions)}" for package, versions in data["cudnn_wheels"].items()]
    for release in data["release"]:
        out += ["", "[[release]]", *(f"{key(name)} = {value(item)}" for name, item in release.items())]
    return "\n".join(out) + "\n"
