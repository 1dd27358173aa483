"""The local base image: mirror parsing and the error lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from convmatrix.errors import BadInput
from convmatrix.run.lanes import base_image

# The shape of Debian's own /etc/apt/sources.list.d/debian.sources, security stanza first so that
# the parser must pick by suite, not by position.
SOURCES = """\
Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb
URIs: http://mirror.example/debian/
 http://second.example/debian
Suites: bookworm bookworm-updates
Components: main
"""


def test_mirror_is_the_first_deb_uri_serving_bookworm() -> None:
    assert base_image.parse_mirror(SOURCES) == "http://mirror.example/debian"


def test_disabled_or_missing_bookworm_stanza_gives_none() -> None:
    assert base_image.parse_mirror(SOURCES.replace("Suites: bookworm bookworm-updates", "Suites: trixie")) is None
    disabled = SOURCES.replace("Components: main\n", "Components: main\nEnabled: no\n")
    assert base_image.parse_mirror(disabled) is None


def test_apt_mirror_defaults_to_deb_debian_org(tmp_path: Path) -> None:
    assert base_image.apt_mirror(tmp_path / "missing.sources") == base_image.DEFAULT_MIRROR
    (tmp_path / "empty.sources").write_text("")
    assert base_image.apt_mirror(tmp_path / "empty.sources") == base_image.DEFAULT_MIRROR


def test_missing_debootstrap_is_one_line_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr("convmatrix.run.lanes.base_image.shutil.which", lambda _name: None)
    monkeypatch.setattr(base_image, "DEBOOTSTRAP_SBIN", tmp_path / "no-debootstrap")
    with pytest.raises(BadInput, match=r"^debootstrap not found: install it \(apt-get install debootstrap"):
        base_image.ensure(force=True, docker="/nonexistent/docker")
    # The CLI: one line on stderr, BadInput's exit code, no traceback.
    assert base_image.main(["--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("convmatrix: debootstrap not found")


def test_unreachable_docker_is_bad_input() -> None:
    with pytest.raises(BadInput, match="docker CLI not found"):
        base_image.image_id("/nonexistent/docker", base_image.TAG)


def test_a_podman_base_that_cannot_be_made_names_podman_not_docker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Seen (a review): `--engine podman` said 'docker CLI not found (/nonexistent/podman): install
    docker.io', and of a podman that failed, 'Docker daemon not reachable'."""
    monkeypatch.setenv("CONVMATRIX_PODMAN", "/nonexistent/podman")
    assert base_image.main(["--engine", "podman"]) == 2
    err = capsys.readouterr().err
    assert err == "convmatrix: podman CLI not found (/nonexistent/podman): install podman\n"
    failing = tmp_path / "podman"
    failing.write_text("#!/bin/sh\necho 'Error: database is locked' >&2\nexit 125\n")
    failing.chmod(0o755)
    monkeypatch.setenv("CONVMATRIX_PODMAN", str(failing))
    assert base_image.main(["--engine", "podman"]) == 2
    err = capsys.readouterr().err
    assert err == f"convmatrix: podman could not read its image store through {failing}: Error: database is locked\n"
    assert "docker" not in err.lower()
