"""`convmatrix stacks --refresh`'s reading of package indexes (matrix/stacks_index.py), against a
fake index served from this process on 127.0.0.1: PEP 691 JSON pages, a PEP 503 HTML page, PEP
658/714 metadata files, and the failures an untrusted network gives (gone, huge, slow)."""

from __future__ import annotations

import datetime
import hashlib
import http.server
import json
import socket
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from convmatrix.errors import InfrastructureError
from convmatrix.matrix import stacks, stacks_index
from convmatrix.matrix.stacks_index import Limits, Reader, Unreadable

JSON = "application/vnd.pypi.simple.v1+json"
FAST = Limits(timeout=2, response=1, total=20)


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake index is on this machine: a proxy set for CI must not be asked for it (urllib honours no_proxy)."""
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@dataclass
class Route:
    body: bytes
    ctype: str = "application/octet-stream"
    trickle: float = 0.0  # seconds between bytes
    length: bool = True  # send a Content-Length


@dataclass
class Site:
    routes: dict[str, Route] = field(default_factory=dict)
    url: str = ""
    asked: list[str] = field(default_factory=list)

    def json_page(self, path: str, files: list[dict[str, object]]) -> None:
        self.routes[path] = Route(json.dumps({"meta": {"api-version": "1.1"}, "name": "x", "files": files}).encode(),
                                  JSON)


class Handler(http.server.BaseHTTPRequestHandler):
    site: Site

    def do_GET(self) -> None:
        self.site.asked.append(self.path)
        route = self.site.routes.get(self.path)
        if route is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", route.ctype)
        if route.length:
            self.send_header("Content-Length", str(len(route.body)))
        self.end_headers()
        try:
            if not route.trickle:
                self.wfile.write(route.body)
                return
            for i in range(len(route.body)):
                self.wfile.write(route.body[i:i + 1])
                self.wfile.flush()
                time.sleep(route.trickle)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader gave up, as it should

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def site() -> Iterator[Site]:
    site = Site()
    handler = type("SiteHandler", (Handler,), {"site": site})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    site.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield site
    server.shutdown()
    server.server_close()
    thread.join()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


METADATA_2_15 = (b"Metadata-Version: 2.1\nName: torch\nVersion: 2.15.0\nRequires-Python: >=3.11\n"
                 b"Requires-Dist: filelock\n"
                 b"Requires-Dist: cuda-toolkit[cublas,cudart]==13.2.2; platform_system == \"Linux\"\n"
                 b"Requires-Dist: nvidia-cudnn-cu13==9.26.0.51; platform_system == \"Linux\"\n"
                 b"Requires-Dist: nvidia-nccl-cu13==2.30.7; platform_system == \"Linux\"\n\nREADME\n")
METADATA_CU130 = METADATA_2_15.replace(b"13.2.2", b"13.0.2").replace(b"2.15.0\n", b"2.15.0+cu130\n")


def wheel(name: str, *, metadata: object = True, yanked: bool = False) -> dict[str, object]:
    return {"filename": name, "url": f"../../files/{name}", "hashes": {}, "core-metadata": metadata, "yanked": yanked}


def publish(site: Site) -> None:
    """PyPI at /pypi/ (JSON), download.pytorch.org's cu130 at /whl/cu130/ (HTML)."""
    sha = hashlib.sha256(METADATA_2_15).hexdigest()
    site.json_page("/pypi/torch/", [
        wheel("torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl", metadata={"sha256": sha}),
        wheel("torch-2.15.0-cp315-cp315-manylinux_2_28_x86_64.whl"),
        wheel("torch-2.15.0-cp312-cp312-win_amd64.whl", metadata=False),
        wheel("torch-2.14.0-cp310-cp310-manylinux_2_28_x86_64.whl"),  # its .metadata is missing: 404
        wheel("torch-2.14.1-cp310-cp310-manylinux_2_28_x86_64.whl", yanked=True),
        wheel("torch-2.16.0rc1-cp311-cp311-manylinux_2_28_x86_64.whl"),
        wheel("torch-1.13.1-cp310-cp310-manylinux1_x86_64.whl"),
        {"filename": 'torch-2.15.0"]\nevil = 1-cp311-cp311-linux_x86_64.whl', "url": "x.whl"},
    ])
    site.routes["/files/torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl.metadata"] = Route(METADATA_2_15)
    site.json_page("/pypi/nvidia-cudnn-cu13/", [
        wheel("nvidia_cudnn_cu13-9.26.0.51-py3-none-manylinux_2_27_x86_64.whl"),
        wheel("nvidia_cudnn_cu13-9.20.0.48-py3-none-manylinux_2_27_x86_64.whl"),
        wheel("nvidia_cudnn_cu13-9.25.0.15-py3-none-manylinux_2_27_x86_64.whl", yanked=True),
        wheel("nvidia_cudnn_cu13-9.24.0.1-py3-none-win_amd64.whl"),
        wheel("nvidia_cudnn_cu13-0.0.0a0-py2.py3-none-any.whl"),
    ])
    html = ('<!DOCTYPE html><html><body><h1>Links for torch</h1>\n'
            '<a href="/whl/files/torch-2.15.0%2Bcu130-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=00" '
            'data-requires-python="&gt;=3.11" data-core-metadata="true">torch-2.15.0+cu130-cp311-cp311-'
            'manylinux_2_28_x86_64.whl</a><br/>\n'
            '<a href="/whl/files/torch-2.14.0%2Bcu130-cp310-cp310-manylinux_2_28_x86_64.whl">torch-2.14.0+cu130-'
            'cp310-cp310-manylinux_2_28_x86_64.whl</a><br/>\n'
            '<a href="/whl/files/torch-2.15.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl">torch-2.15.0+cpu-'
            'cp311-cp311-manylinux_2_28_x86_64.whl</a><br/>\n</body></html>\n')
    site.routes["/whl/cu130/torch/"] = Route(html.encode(), "text/html")
    site.routes["/whl/files/torch-2.15.0%2Bcu130-cp311-cp311-manylinux_2_28_x86_64.whl.metadata"] = Route(
        METADATA_CU130)


def test_a_refresh_reads_releases_variants_pins_and_published_cudnn(site: Site) -> None:
    publish(site)
    got = stacks_index.refresh([f"{site.url}/pypi/", f"{site.url}/whl/cu130/"], FAST)
    data = stacks_index.facts(got, datetime.date(2026, 12, 4))
    assert data["indexes"] == [f"{site.url}/pypi/", f"{site.url}/whl/cu130/"] and data["unread"] == []
    assert data["cudnn_wheels"] == {"nvidia-cudnn-cu13": ["9.20.0.48", "9.26.0.51"]}  # no yanked, Windows or pre
    assert data["release"] == [
        # 2.14.0's PyPI metadata is missing and the cu130 index offers none: listed, pins unknown.
        {"minor": "2.14", "patches": ["2.14.0"], "python": ["3.10", "3.10"], "pypi_default": "",
         "variants": {"cu130": ""}, "variants_complete": True},
        {"minor": "2.15", "patches": ["2.15.0"], "python": ["3.11", "3.15"], "pypi_default": "cu132",
         "variants": {"cu130": "9.26.0.51", "cu132": "9.26.0.51"}, "variants_complete": True},
    ]
    assert got.notes == [
        f"{site.url}/pypi/: could not read the metadata of 1 torch release(s) (2.14.0): their variant and cuDNN "
        "pin stay unknown",
        f"{site.url}/whl/cu130/: offers no core metadata (PEP 658/714) of 1 torch release(s) (2.14.0+cu130): "
        "their variant and cuDNN pin stay unknown",
    ]
    # Never a wheel: only pages and .metadata files were asked for.
    assert all(p.endswith(("/", ".metadata")) for p in site.asked), site.asked


def test_a_variant_whose_metadata_is_missing_stays_unknown_and_prunes_nothing(site: Site) -> None:
    site.json_page("/pypi/torch/", [wheel("torch-2.16.0-cp311-cp311-manylinux_2_28_x86_64.whl")])  # .metadata: 404
    got = stacks_index.refresh([f"{site.url}/pypi/"], FAST)
    data = stacks_index.facts(got, datetime.date(2026, 12, 4))
    (release,) = data["release"]
    assert release["variants"] == {} and release["pypi_default"] == "" and not release["variants_complete"]
    merged = stacks.merge(tomllib.loads(_hand()), tomllib.loads(stacks_index.render(data)))
    assert not merged.releases["2.16"].variants_known and merged.releases["2.16"].patches == ("2.16.0",)


def _hand() -> str:
    from importlib import resources

    return resources.files("convmatrix.matrix").joinpath(stacks.HAND_KEPT).read_text(encoding="utf-8")


def test_metadata_that_fails_its_hash_or_points_off_http_is_not_believed(site: Site) -> None:
    site.json_page("/pypi/torch/", [
        wheel("torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl", metadata={"sha256": "0" * 64}),
        {"filename": "torch-2.14.0-cp311-cp311-manylinux_2_28_x86_64.whl", "url": "file:///etc/passwd",
         "core-metadata": True},
    ])
    site.routes["/files/torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl.metadata"] = Route(METADATA_2_15)
    got = stacks_index.refresh([f"{site.url}/pypi/"], FAST)
    assert got.pins == {} and got.defaults == {}
    assert "2.15.0 (hash mismatch)" in got.notes[0] and "2.14.0" in got.notes[0]


def test_an_index_that_cannot_be_read_is_one_line_and_its_facts_stay_unknown(site: Site) -> None:
    publish(site)
    gone = f"http://127.0.0.1:{closed_port()}/whl/cu126/"
    got = stacks_index.refresh([f"{site.url}/pypi/", gone], FAST)
    assert got.unread == [gone]
    (note,) = [n for n in got.notes if n.startswith(gone)]
    assert "\n" not in note and "not read" in note
    data = stacks_index.facts(got, datetime.date(2026, 12, 4))
    assert not any(r["variants_complete"] for r in data["release"])  # an index unread: lists incomplete


def test_no_index_read_is_an_infrastructure_failure_in_one_line() -> None:
    with pytest.raises(InfrastructureError) as err:
        stacks_index.refresh([f"http://127.0.0.1:{closed_port()}/simple/"], FAST)
    assert err.value.exit_code == 4 and len(err.value.lines()) == 1
    assert "no index could be read" in str(err.value)


@pytest.mark.parametrize("length", [True, False])
def test_an_oversized_response_is_cut_at_the_bound(site: Site, length: bool) -> None:
    site.routes["/big/torch/"] = Route(b"{" + b" " * 200_000 + b"}", JSON, length=length)
    with pytest.raises(Unreadable, match="over the 1000 byte bound"):
        stacks_index.project_files(Reader(Limits(page_bytes=1000)), f"{site.url}/big/", "torch")


def test_a_slow_response_is_cut_at_the_time_bound(site: Site) -> None:
    site.routes["/slow/torch/"] = Route(b"{" + b" " * 400 + b"}", JSON, trickle=0.02)  # ~8 s in full
    started = time.monotonic()
    with pytest.raises(Unreadable, match=r"slower than the 0\.5 s bound"):
        stacks_index.project_files(Reader(Limits(timeout=2, response=0.5)), f"{site.url}/slow/", "torch")
    assert time.monotonic() - started < 3


def test_the_refresh_stops_when_its_total_time_is_spent(site: Site) -> None:
    publish(site)
    reader = Reader(Limits(total=0.0))
    with pytest.raises(Unreadable, match="were spent"):
        stacks_index.project_files(reader, f"{site.url}/pypi/", "torch")
    assert site.asked == []


def test_a_page_that_is_not_the_simple_api_is_unreadable(site: Site) -> None:
    site.routes["/v2/torch/"] = Route(json.dumps({"meta": {"api-version": "2.0"}, "files": []}).encode(), JSON)
    with pytest.raises(Unreadable, match=r"is not 1\.x"):
        stacks_index.project_files(Reader(FAST), f"{site.url}/v2/", "torch")


@pytest.mark.parametrize(("requires", "variant"), [
    ({"nvidia-cuda-runtime-cu12": "12.8.90", "nvidia-cudnn-cu12": "9.10.2.21"}, "cu128"),
    ({"nvidia-cuda-runtime-cu11": "11.7.99", "nvidia-cudnn-cu11": "8.5.0.96"}, "cu117"),
    ({"cuda-toolkit": "13.0.2", "nvidia-cudnn-cu13": "9.19.0.56"}, "cu130"),
    ({"cuda-toolkit": "13.0.2", "nvidia-cudnn-cu12": "9.19.0.56"}, ""),  # two CUDA majors: not one variant
    ({"nvidia-cuda-runtime-cu12": "13.0.1"}, ""),
    ({"nvidia-cudnn-cu12": "9.1.0.70"}, ""),  # a cuDNN, but no CUDA runtime named
    ({}, ""),
])
def test_the_variant_is_told_by_the_cuda_requirement(requires: dict[str, str], variant: str) -> None:
    assert stacks_index.variant_from(requires) == variant


def test_requirements_read_the_pins_of_core_metadata() -> None:
    pins = stacks_index.requirements(METADATA_2_15.decode() + "Requires-Dist: Old_Style (==1.2.3)\n")
    assert pins["nvidia-cudnn-cu13"] == "9.26.0.51" and pins["cuda-toolkit"] == "13.2.2"
    assert "filelock" not in pins


def test_the_rendered_file_reads_back_as_what_was_read(site: Site) -> None:
    publish(site)
    data = stacks_index.facts(stacks_index.refresh([f"{site.url}/pypi/"], FAST), datetime.date(2026, 12, 4))
    text = stacks_index.render(data)
    assert text.startswith(stacks_index.HEADER) and tomllib.loads(text) == data
    assert "evil" not in text
