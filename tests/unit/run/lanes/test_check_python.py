"""images/check-python on its own, with stand-ins for a base's python3, apt-get and pip on PATH
(the integration tests build real images from it: tests/integration/test_plain_bases_runs.py).
Every way it can fail ends the build's output with one `convmatrix: ...` line naming what is
missing and what to do, after at most a few lines of the failing tool's own output."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from testkit import REPO

SCRIPT = REPO / "images" / "check-python"
# The commands the script and the stand-ins use besides python3 and apt-get: PATH holds these
# alone, so that this machine's own python3 and apt-get are never found.
TOOLS = ("sh", "rm", "tail", "head", "mktemp", "mkdir", "cp", "cat", "chmod")
NOISE = 4  # at most this many lines before the final one (the failing tool's last lines, a progress line)

# A base's python3: what it has is files in $STATE (torch, venv: its ensurepip; pip), as apt-get
# leaves them. A venv it makes gets a python that runs pip when $STATE/venv-pip says it works.
PYTHON3 = r"""#!/bin/sh
case "$1" in
-c)
    case "$2" in
    *torch*)
        [ -f "$STATE/torch" ] && exit 0
        echo 'Traceback (most recent call last):' >&2
        echo '  File "<string>", line 1, in <module>' >&2
        echo "ModuleNotFoundError: No module named 'torch'" >&2
        exit 1;;
    *) cat "$STATE/version-${0##*/}" 2>/dev/null || cat "$STATE/version"; exit 0;;
    esac;;
esac
[ "$1" = -m ] || { echo "fake python3: $*" >&2; exit 2; }
module="$2"; shift 2
case "$module" in
venv)
    bare=no
    for arg in "$@"; do
        [ "$arg" = --without-pip ] && bare=yes
        dir="$arg"
    done
    mkdir -p "$dir/bin"
    if [ "$bare" = no ] && [ ! -f "$STATE/venv" ]; then
        echo 'The virtual environment was not created successfully because ensurepip is not'
        echo 'available.  On Debian/Ubuntu systems, you need to install the python3-venv'
        echo 'package using the following command.'
        echo ''
        echo '    apt install python3.11-venv'
        echo ''
        echo "Failing command: $dir/bin/python3"
        exit 1
    fi
    cp "$STATE/cell-python" "$dir/bin/python"
    echo "${0##*/}" > "$dir/made-by"
    exit 0;;
pip)
    if [ ! -f "$STATE/pip" ]; then echo '/usr/bin/python3: No module named pip' >&2; exit 1; fi
    [ "$1" = --version ] && { echo 'pip 23.0.1 from /usr/lib/python3/dist-packages/pip (python 3.11)'; exit 0; }
    if [ -f "$STATE/pip-offline" ]; then
        for left in 4 3 2 1 0; do
            echo "WARNING: Retrying (Retry(total=$left)) after connection broken by 'NewConnectionError': /simple/pip/" >&2
        done
        echo 'ERROR: Could not find a version that satisfies the requirement pip (from versions: none)' >&2
        echo 'ERROR: No matching distribution found for pip' >&2
        exit 1
    fi
    exit 0;;
esac
echo "fake python3: -m $module" >&2
exit 2
"""

CELL_PYTHON = r"""#!/bin/sh
[ -f "$STATE/venv-pip-fails" ] && { echo 'ERROR: pip: cannot install into the venv' >&2; exit 1; }
exit 0
"""

# apt-get as the base's distribution answers it: $STATE/apt says how (works, offline, or hollow:
# it says it installed the packages and did not).
APT_GET = r"""#!/bin/sh
how=$(cat "$STATE/apt")
while [ "$1" = -o ]; do shift 2; done
case "$1" in
update)
    if [ "$how" = offline ]; then
        echo "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Temporary failure resolving 'deb.debian.org'"
        echo 'W: Some index files failed to download. They have been ignored, or old ones used instead.'
    fi
    exit 0;;
install)
    shift
    for pkg in "$@"; do
        case "$pkg" in -*) continue;; esac
        if [ "$how" = offline ]; then echo "E: Package '$pkg' has no installation candidate" >&2; exit 100; fi
        [ "$how" = hollow ] && continue
        case "$pkg" in
        python3) cp "$STATE/python3" "$BIN/python3"; chmod +x "$BIN/python3";;
        python3*-venv) : > "$STATE/venv";;
        python3.*)  # another Python of the distribution, beside its python3 (Ubuntu 22.04's python3.11)
            [ -f "$STATE/has-$pkg" ] || { echo "E: Unable to locate package $pkg" >&2; exit 100; }
            cp "$STATE/python3" "$BIN/$pkg"; chmod +x "$BIN/$pkg"; echo "${pkg#python}" > "$STATE/version-$pkg";;
        esac
    done
    exit 0;;
esac
exit 100
"""


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def base(tmp_path: Path, *, python: str | None = "3.11", venv: bool = True, pip: bool = False,
         torch: bool = False, apt: str | None = None, pip_offline: bool = False,
         venv_pip_fails: bool = False) -> dict[str, str]:
    """The environment of a build on such a base: python None (no python3 at all), venv False (no
    ensurepip: python3-venv missing), apt None (no apt-get) or how apt answers."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    executable(state / "python3", PYTHON3)
    executable(state / "cell-python", CELL_PYTHON)
    (state / "version").write_text(f"{python or '3.11'}\n")
    if python is not None:
        shutil.copy2(state / "python3", bin_dir / "python3")
    flags = {"venv": venv, "pip": pip, "torch": torch, "pip-offline": pip_offline, "venv-pip-fails": venv_pip_fails}
    for flag, on in flags.items():
        if on:
            (state / flag).touch()
    if apt is not None:
        (state / "apt").write_text(apt)
        executable(bin_dir / "apt-get", APT_GET)
    root = tmp_path / "root"
    root.mkdir()
    return {"PATH": str(bin_dir), "BIN": str(bin_dir), "STATE": str(state), "CONVMATRIX_CHECK_ROOT": str(root),
            "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}


def check(env: dict[str, str], want: str = "3.11", flavour: str = "wheel") -> tuple[int, list[str]]:
    """Exit status and every line it printed, stdout and stderr in the order a build log has them."""
    done = subprocess.run([str(SCRIPT), want, flavour], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=60, check=False)
    return done.returncode, done.stdout.splitlines()


def fails_with(result: tuple[int, list[str]], *words: str) -> list[str]:
    """Exit 1, the last line the one convmatrix line that says why (every word in it), and little before it."""
    code, lines = result
    assert code == 1, lines
    assert lines and lines[-1].startswith("convmatrix: "), lines
    assert all(word in lines[-1] for word in words), lines[-1]
    assert len(lines) - 1 <= NOISE, lines
    assert not any("Traceback" in line for line in lines), lines
    return lines[:-1]


def test_a_base_with_the_cells_python_and_its_venv_module_passes(tmp_path: Path) -> None:
    env = base(tmp_path)
    assert check(env) == (0, [])
    assert (Path(env["CONVMATRIX_CHECK_ROOT"]) / "opt" / "cell" / "bin" / "python").is_file()


def test_python_and_venv_come_from_apt_when_the_base_has_none(tmp_path: Path) -> None:
    code, lines = check(base(tmp_path, python=None, venv=False, apt="works"))
    assert (code, lines) == (0, ["convmatrix: python3 installed from the base's distribution packages"])


def test_pip_bootstrapped_into_a_bare_venv_when_apt_cannot_help(tmp_path: Path) -> None:
    code, lines = check(base(tmp_path, venv=False, pip=True, apt="offline"))
    assert code == 0, lines
    assert lines[-1].startswith("convmatrix: no venv module with pip here"), lines


def test_no_python_on_a_system_base(tmp_path: Path) -> None:
    fails_with(check(base(tmp_path, python=None), flavour="system"), "system-flavour", "no python3")


def test_no_python_and_no_apt(tmp_path: Path) -> None:
    fails_with(check(base(tmp_path, python=None)), "no python3", "use a base with Python 3.11")


def test_no_python_and_apt_fails_shows_apts_last_lines_once(tmp_path: Path) -> None:
    before = fails_with(check(base(tmp_path, python=None, apt="offline")), "no python3", "use a base with Python 3.11")
    assert sum("has no installation candidate" in line for line in before) == 1, before


def test_apt_says_it_installed_python_but_there_is_none(tmp_path: Path) -> None:
    """It used to go on and run the python3 that was not there (exit 127, `python3: not found`)."""
    fails_with(check(base(tmp_path, python=None, apt="hollow")), "python3", "still", "use a base with Python 3.11")


def test_another_python(tmp_path: Path) -> None:
    fails_with(check(base(tmp_path, python="3.12")), "Python 3.12", "asks for Python 3.11")


def test_another_python_whose_distribution_has_none_of_the_cells(tmp_path: Path) -> None:
    before = fails_with(check(base(tmp_path, python="3.12", apt="works")), "Python 3.12", "asks for Python 3.11",
                        "its distribution has no python3.11")
    assert before == [], before  # apt's own "Unable to locate" says nothing more


def test_the_cells_python_beside_the_distributions_default_comes_from_apt(tmp_path: Path) -> None:
    """Ubuntu 22.04's python3 is 3.10; python3.11 and python3.11-venv are its packages too."""
    env = base(tmp_path, python="3.10", venv=False, apt="works")
    (Path(env["STATE"]) / "has-python3.11").touch()
    assert check(env) == (0, ["convmatrix: python3.11 installed from the base's distribution packages"])
    made = Path(env["CONVMATRIX_CHECK_ROOT"]) / "opt" / "cell" / "made-by"
    assert made.read_text().strip() == "python3.11"  # the venv is the cell's Python's, not python3's


def test_a_system_base_without_torch_says_so_without_a_traceback(tmp_path: Path) -> None:
    fails_with(check(base(tmp_path), flavour="system"), "must carry torch", "No module named 'torch'")


def test_a_system_base_with_torch_passes(tmp_path: Path) -> None:
    assert check(base(tmp_path, torch=True, venv=False), flavour="system") == (0, [])


def test_no_venv_no_pip_and_apt_fails(tmp_path: Path) -> None:
    fails_with(check(base(tmp_path, venv=False, apt="offline")), "python3.11-venv", "use a base with python3-venv")


def test_apt_says_it_installed_the_venv_module_but_venv_still_fails(tmp_path: Path) -> None:
    fails_with(check(base(tmp_path, venv=False, apt="hollow")), "python3.11-venv", "still cannot make a venv")


def test_bootstrapping_pip_fails_offline_ends_with_what_to_do(tmp_path: Path) -> None:
    """The reviewer's repro: no python3-venv, apt reaches nothing, pip reaches no index. pip's
    five retries and apt's tail are cut to the last lines of the step that failed."""
    before = fails_with(check(base(tmp_path, venv=False, pip=True, apt="offline", pip_offline=True)),
                        "pip", "wheelhouse")
    assert before[-1] == "ERROR: No matching distribution found for pip", before
    assert sum("Retrying" in line for line in before) <= 1 and not any("E: " in line for line in before), before


def test_pip_into_the_venv_fails(tmp_path: Path) -> None:
    fails_with(check(base(tmp_path, venv=False, pip=True, apt="offline", venv_pip_fails=True)), "pip", "venv")


@pytest.mark.parametrize("flavour", ["wheel", "system"])
def test_nothing_is_written_outside_its_root(tmp_path: Path, flavour: str) -> None:
    """What it writes and removes (/opt/cell, apt's lists, its scratch files) is under the root the
    tests give it (an image build gives none): a run here touches nothing of this machine's."""
    env = base(tmp_path, venv=False, pip=True, apt="works", torch=True)
    assert check(env, flavour=flavour)[0] == 0
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {"bin", "state", "root"}, left
    assert os.listdir(env["CONVMATRIX_CHECK_ROOT"]) == ["opt"]


def test_an_image_build_never_takes_the_tests_scratch_root_from_a_base() -> None:
    """A base whose ENV set CONVMATRIX_CHECK_ROOT would move the venv away from /opt/cell."""
    dockerfile = (REPO / "images" / "Dockerfile").read_text()
    assert "CONVMATRIX_CHECK_ROOT= /opt/convmatrix/check-python" in dockerfile
