"""What each report format says of each cell, read back from the rendered text: for the tests
that every format agrees (the verdict properties, the fleet-scale report)."""

from __future__ import annotations

import json
import re

from convmatrix.report import grid as report_grid
from convmatrix.report import render
from convmatrix.report.model import Report
from convmatrix.results.outcomes import Verdict


def said_by_formats(report: Report) -> dict[str, dict[str, str]]:
    """Each format's word for each cell (where -> verdict), read back from the rendered text."""
    said: dict[str, dict[str, str]] = {}
    data = json.loads(render.render(report, "json"))
    said["json"] = {f"{c['cell']}@{c['gpu']['key']}": c["verdict"] for c in data["cells"]}
    html = render.render(report, "html")
    said["html"] = {m[2]: m[1] for m in re.finditer(r'<td class="v v-([a-z-]+)(?: quiet)?(?: plain-col)?" data-panel="[^"]*">'
                                                     r'<a class="cellref" href="#[^"]*" title="([^":]*):', html)}
    text = render.render(report, "text")
    words = {report_grid.verdict_word(v): str(v) for v in Verdict} | {"not run (optional)": str(Verdict.NOT_RUN)}
    said["text"] = {}
    for line in text.splitlines():
        # "- CELL@GPU: WORD …", or "- CELL on GPU, GPU: WORD …" for a stack that did not run on
        # several GPUs for one reason
        found = re.fullmatch(r"- (\S+?)(?: on ([^:]+))?: (.+)", line)
        word = next((w for w in sorted(words, key=len, reverse=True) if found and found[3].startswith(w)), None)
        if found and word:
            places = [found[1]] if found[2] is None else [f"{found[1]}@{gpu}" for gpu in found[2].split(", ")]
            said["text"].update(dict.fromkeys(places, words[word]))
    return said
