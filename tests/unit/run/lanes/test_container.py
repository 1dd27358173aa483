"""The container lane's own steps (run/lanes/container.py) that need no engine: what a cell's
image preparation holds. The lane against real engines: tests/integration/test_container_lane.py
and test_podman_lane.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from convmatrix import home
from convmatrix.matrix import load
from convmatrix.run.lanes import container, containers, images


def test_a_cells_image_is_held_from_before_it_is_looked_for_to_the_end_of_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen (a review): the container lane held no image at all, so `convmatrix gc` removed a cell
    image between two cells of a running job (only a container that exists keeps one)."""
    monkeypatch.setenv("CONVMATRIX_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CONVMATRIX_IMAGE_LOCKS", raising=False)
    monkeypatch.setattr(home, "SHARED_IMAGE_LOCKS", tmp_path / "convmatrix-image-locks")
    monkeypatch.setattr(home, "_KEPT", {})
    (tmp_path / "m.toml").write_text('name = "t"\n[axes]\nlane = ["container"]\ntorch = ["2.5.1"]\n'
                                     'cuda = ["cu124"]\ncudnn = ["bundled"]\npython = ["3.11"]\n[container]\nbase = "convmatrix/base:bookworm"\n')
    matrix = load(tmp_path / "m.toml")
    (cell,) = matrix.cells
    digest = "f" * 64
    plan = images.Plan(cell=cell, digest=digest, args={}, wheelhouse=None)
    held_when_looked_for: list[bool] = []

    def todo(engine: Any, plans: list[images.Plan]) -> list[container.Todo]:
        with home.exclusive(home.IMAGES, digest) as free:
            held_when_looked_for.append(not free)
        return [container.Todo(plan=p, reason=None) for p in plans]

    monkeypatch.setattr(container, "plans", lambda engine, matrix, cells, wheelhouse: [plan])
    monkeypatch.setattr(container, "todo", todo)
    monkeypatch.setattr(containers, "describe", lambda engine, p: {"image": p.tag, "image_hash": p.digest})
    try:
        assert container.ensure_image(object(), matrix, cell, print)["image_hash"] == digest
        assert held_when_looked_for == [True]
        with home.exclusive(home.IMAGES, digest) as free:
            assert not free  # still held: until this process (the run) ends
        assert home.last_held(home.IMAGES, digest) is not None
    finally:
        for fd in home._KEPT.values():
            os.close(fd)
