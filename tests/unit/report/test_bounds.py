"""report/bounds.py: what a report embeds of a message or an evidence file stays bounded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from convmatrix.report import bounds
from convmatrix.results import rundir


def test_an_evidence_file_that_grows_while_it_is_read_is_read_no_further(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46: read_tail took the file's size, seeked back from it, then read to the end: a file a
    process left behind by the cell kept writing was read as far as it had grown. The file here is
    10 MB when read and 1,000 bytes when its size was taken."""
    evidence = tmp_path / "cell" / "evidence" / "case.txt"
    evidence.parent.mkdir(parents=True)
    evidence.write_bytes(b"x" * (10 << 20))
    real = rundir.open_plain
    read: list[int] = []

    class Grown:
        def __init__(self, handle: Any) -> None:
            self.handle = handle

        def __enter__(self) -> Grown:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()

        def seek(self, offset: int, whence: int = 0) -> int:
            return 1000 if whence == 2 else self.handle.seek(offset, whence)

        def read(self, size: int = -1) -> bytes:
            data: bytes = self.handle.read(size)
            read.append(len(data))
            return data

    monkeypatch.setattr(rundir, "open_plain", lambda path, base: Grown(real(path, base)))
    cut = bounds.read_tail(str(evidence), 100)
    assert cut is not None and len(cut.text) <= 100
    assert sum(read) <= 400
