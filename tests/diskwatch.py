"""How much disk the test session left free, and when it was least: a line per filesystem at the
end of the run. The integration tests install real CUDA builds of torch (several GB a stack) and
build real images, and CI's machine has a disk of its own size: a run that ends in "No space left
on device" should say which test brought the disk lowest, not only which one hit the wall.

Sampled in the process that reports (xdist's controller, or the only one): after each test's
teardown, one statvfs per filesystem, nothing walked."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

GB = 1e9


def watched() -> dict[int, Path]:
    """The filesystems the tests write to, one path each: the temporary folder (pytest's tmp_path),
    the home (uv's cache, the cells' venvs) and Docker's data root where it can be read."""
    paths = [Path(tempfile.gettempdir()), Path.home(), Path("/var/lib/docker")]
    found: dict[int, Path] = {}
    for path in paths:
        try:
            found.setdefault(os.stat(path).st_dev, path)
        except OSError:
            continue
    return found


@dataclass
class Watch:
    paths: dict[int, Path]
    start: dict[int, float] = field(default_factory=dict)
    least: dict[int, tuple[float, str]] = field(default_factory=dict)

    def sample(self, after: str) -> None:
        for dev, path in self.paths.items():
            try:
                free = shutil.disk_usage(path).free
            except OSError:
                continue
            self.start.setdefault(dev, free)
            if dev not in self.least or free < self.least[dev][0]:
                self.least[dev] = (free, after)

    def lines(self) -> list[str]:
        out = []
        for dev, path in self.paths.items():
            try:
                now = shutil.disk_usage(path).free
            except OSError:
                continue
            if dev not in self.least:
                continue
            least, after = self.least[dev]
            out.append(f"disk of {path}: {self.start[dev] / GB:.1f} GB free at start, {now / GB:.1f} GB at the end, "
                       f"least {least / GB:.1f} GB after {after}")
        return out


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # xdist's workers report to the controller, which samples
        config.pluginmanager.register(Reporter(Watch(watched())), "diskwatch-reporter")


class Reporter:
    """The hooks, on the one Watch of the session."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        watch.sample("the start")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.watch.sample(report.nodeid)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        for line in self.watch.lines():
            terminalreporter.write_line(line)
