"""Issue 40, done when (its site half): runs on two stand-in GPUs (an sm90 H100 and an sm70 V100,
result directories as the harness leaves them: tests/exportkit.py) and the real H200 runs in
tests/data/gpu export to bundles; `convmatrix atlas` merges them with two fleets that disagree
(tests/atlaskit.py) into a site whose grid shows both generations, with a page per failing family
holding each case's repro script, the known issues marked as from sources, nothing identifying of
the runs in any file, and chromium renders it. CONVMATRIX_SCREENSHOT=docs/atlas.png keeps the picture."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import atlaskit
import cdp
import exportkit
from cdp import require_chromium
from testkit import REPO

pytestmark = pytest.mark.slow
H200_RUNS = [REPO / "tests/data/gpu/h200-torch2.11-cudnn9.19/run",
             REPO / "tests/data/gpu/h200-torch2.11-cudnn9.19/rerun", REPO / "tests/data/gpu/h200-wheel-torch2.11/run"]


def convmatrix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "convmatrix", *args], cwd=REPO, capture_output=True, text=True,
                          check=False, timeout=600)


def test_exported_runs_make_a_site_with_both_generations(tmp_path: Path) -> None:
    runs = [exportkit.write_run(tmp_path / "night-h100", tmp_path, exportkit.H100),
            exportkit.write_run(tmp_path / "night-v100", tmp_path, exportkit.V100, cudnn=91100)]
    bundles = []
    for run, fleet in zip(runs, ("lab-h100", "lab-v100"), strict=True):
        bundles.append(tmp_path / f"{fleet}.json")
        assert convmatrix("export", str(run), "-o", str(bundles[-1]), "--fleet", fleet).returncode == 0
    bundles.append(tmp_path / "h200.json")
    done = convmatrix("export", *map(str, H200_RUNS), "-o", str(bundles[-1]), "--fleet", "h200-box")
    assert done.returncode == 0, done.stderr
    bundles += [atlaskit.write(tmp_path / "a.json", atlaskit.fleet_a()),
                atlaskit.write(tmp_path / "b.json", atlaskit.fleet_b())]
    out = tmp_path / "site"
    done = convmatrix("atlas", *map(str, bundles), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "5 bundle(s) merged (5 fleet(s)" in done.stdout and "1 where fleets disagree" in done.stdout

    data = json.loads((out / "atlas.json").read_text())
    assert [c["key"] for c in data["columns"]] == ["sm70", "sm90", "sm90 1g.18gb"]
    v100 = next(c for c in data["cells"]
                if c["column"] == "sm70" and c["cudnn"] == "9.11.0" and c["torch"] == "2.11.0+cu130")
    assert v100["status"] == "fail" and v100["fleets"][0]["fleet"] == "lab-v100"
    h200 = [c for c in data["cells"] if any(f["fleet"] == "h200-box" for f in c["fleets"])]
    assert h200 and {c["column"] for c in h200} == {"sm90"}
    pre_turing = next(s for s in data["sources"] if s["id"] == "pytorch-162574-cudnn-9-11-drops-pre-turing")
    assert pre_turing["columns"] == ["sm70"] and pre_turing["link"] == "https://github.com/pytorch/pytorch/issues/162574"

    page = (out / v100["pages"]["cudnn_not_supported"]).read_text()
    scripts = re.findall(r'<a href="\.\./(repro/[^"]+\.py)" download=', page)
    assert scripts and all("CASE_ID = 'conv2d-b'" in (out / s).read_text() for s in scripts)
    index = (out / "index.html").read_text()
    assert index.count('<tr class="row source"') == len(data["sources"])

    # Nothing identifying of the runs in any file of the site (the bundles' scan, on the site; the
    # style sheet left out: its ":root" is the user name where the tests run as root).
    for path in out.rglob("*"):
        if path.is_file():
            text = re.sub(r"<style>.*?</style>", "", path.read_text(), flags=re.DOTALL)
            assert exportkit.leaks(text, *runs, tmp_path) == [], path

    with cdp.browser(require_chromium(), width=1400, height=900) as page_:
        page_.open((out / "index.html").as_uri())
        assert page_.named("Runtime.exceptionThrown") == []
        heads = page_.evaluate("[...document.querySelectorAll('thead th.col')].map(t => t.textContent)")
        assert heads == ["sm70Volta", "sm90Hopper", "sm901g.18gb"]
        shot = page_.screenshot(tmp_path / "atlas.png")
        assert shot.stat().st_size > 20_000
        if os.environ.get("CONVMATRIX_SCREENSHOT"):  # docs/atlas.png: CONVMATRIX_SCREENSHOT=docs/atlas.png
            page_.screenshot(Path(os.environ["CONVMATRIX_SCREENSHOT"]))
