"""results/libraries.py: the audit's table read as untrusted data, and the stack line (issue 47)."""

from __future__ import annotations

from typing import Any

from hypothesis import given

from convmatrix.results import libraries
from strategies import audit_rows

WHEEL = "/v94/site-packages/nvidia/cudnn/lib"


def row(name: str, version: str, origin: str, loaded: bool = True, family: str = "cudnn") -> dict[str, Any]:
    return {"name": name, "family": family, "path": f"/{origin}/{name}", "loaded": loaded, "version": version,
            "package": None, "origin": origin}


def test_the_issues_example() -> None:
    """Only 9.2.1's libcudnn_cnn on LD_LIBRARY_PATH beside a 9.4.0 wheel (issue 47, Done when (b))."""
    rows = libraries.table({"libraries": [row("libcudnn.so.9", "9.4.0", "wheel"),
                                          row("libcudnn_graph.so.9", "9.4.0", "wheel"),
                                          row("libcudnn_cnn.so.9", "9.2.1", "LD_LIBRARY_PATH", loaded=False)]})
    assert libraries.stack_line(rows) == "cuDNN 9.4.0 (wheel) · libcudnn_cnn 9.2.1 from LD_LIBRARY_PATH"


def test_a_whole_swap_names_every_file_once_per_place() -> None:
    rows = libraries.table({"libraries": [row("libcudnn.so.9", "9.4.0", "wheel"),
                                          *(row(f"libcudnn_{n}.so.9", "9.2.1", "LD_LIBRARY_PATH")
                                            for n in ("graph", "ops", "cnn", "adv"))]})
    assert libraries.stack_line(rows) == ("cuDNN 9.4.0 (wheel) · libcudnn_adv, libcudnn_cnn, libcudnn_graph, "
                                          "libcudnn_ops 9.2.1 from LD_LIBRARY_PATH")


@given(audit_rows())
def test_one_version_shows_no_line(rows: list[dict[str, Any]]) -> None:
    """What loaded is what was installed, wherever it came from: nothing to say."""
    assert libraries.stack_line(libraries.table({"libraries": rows})) is None


def test_anything_else_is_no_table() -> None:
    values: tuple[object, ...] = (None, 3, "x", [], {"libraries": "x"}, {"libraries": [1, {"name": 3}, {"path": "/x"}]})
    for value in values:
        assert libraries.table(value) == ()
    long = libraries.table({"libraries": [{"name": "n" * 10**4, "loaded": "yes", "version": 9}] * 1000})
    assert len(long) == libraries.MAX_ROWS and len(long[0].name) == libraries.MAX_TEXT
    assert long[0].loaded is False and long[0].version is None


def test_a_loaded_cudnn_file_of_unknown_version_from_elsewhere_is_shown() -> None:
    """A system copy named .so.9 that no wheel owns (Done when (c): the loader cache's cnn)."""
    rows = libraries.table({"libraries": [row("libcudnn.so.9", "9.1.0", "wheel"),
                                          {**row("libcudnn_cnn.so.9", "", "ld cache"), "version": None},
                                          {**row("libcudnn_tensor_ir.so.9", "", "ld cache", loaded=False),
                                           "version": None}]})
    assert libraries.stack_line(rows) == "cuDNN 9.1.0 (wheel) · libcudnn_cnn (version unknown) from ld cache"
