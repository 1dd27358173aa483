"""history/backends.py: which database, checked; errors as one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from convmatrix.errors import BadInput
from convmatrix.history import backends


def test_the_choice_of_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVMATRIX_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CONVMATRIX_HISTORY", raising=False)
    assert backends.chosen(None) == f"sqlite:///{tmp_path / 'home' / 'history.sqlite'}"
    assert (tmp_path / "home").is_dir()
    monkeypatch.setenv("CONVMATRIX_HISTORY", "postgresql://u@db/h")
    assert backends.chosen(None) == "postgresql://u@db/h"
    assert backends.chosen("sqlite:////x.sqlite") == "sqlite:////x.sqlite"


@pytest.mark.parametrize(("url", "said"), [
    ("nonsense", "not a database URL"),
    ("mysql://u@h/db", "not a database this convmatrix records into"),
    ("sqlite://", "needs a file"),
    ("sqlite:///:memory:", "needs a file"),
])
def test_a_url_it_cannot_use_is_bad_input(url: str, said: str) -> None:
    with pytest.raises(BadInput, match=said):
        backends.parse(url)


def test_postgresql_goes_through_psycopg_3_and_no_password_is_shown() -> None:
    assert backends.parse("postgresql://u:pw@h/db").drivername == "postgresql+psycopg"
    assert backends.shown("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert backends.shown("::") == "<not a database URL>"
