"""CONVMATRIX_HOME and its parts (issue 25, item 3), and the holds that keep `convmatrix gc` off
what a running job uses."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from convmatrix import home
from convmatrix.errors import BadInput, InfrastructureError
from convmatrix.matrix.cells import Cell
from convmatrix.results import rundir
from convmatrix.run import gc, reuse
from convmatrix.run.lanes import baremetal


@pytest.fixture(autouse=True)
def fresh_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("CONVMATRIX_HOME", "CONVMATRIX_VENVS", "CONVMATRIX_RESULTS_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CONVMATRIX_IMAGE_LOCKS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setattr(home, "_KEPT", {})  # hold()'s descriptors: this test's only
    monkeypatch.setattr(home, "SHARED_IMAGE_LOCKS", tmp_path / "machine" / "convmatrix-image-locks")
    (tmp_path / "machine").mkdir()


def test_the_default_home_is_outside_the_checkout_and_holds_every_part(tmp_path: Path) -> None:
    root = (tmp_path / "user" / ".cache" / "convmatrix").resolve()
    assert home.home() == root
    assert (home.venvs(), home.results_store(), home.locks()) == (root / "venvs", root / "results", root / "locks")
    assert baremetal.venvs_root() == root / "venvs" and reuse.store() == root / "results"
    cell = Cell(lane="baremetal", torch="2.5.1", cuda="cu124", cudnn="bundled", python="3.11")
    assert baremetal.venv_dir(cell).parent == root / "venvs"


def test_convmatrix_home_moves_them_all_and_the_old_variables_still_move_their_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVMATRIX_HOME", "~/ci-cache")
    root = (tmp_path / "user" / "ci-cache").resolve()
    assert home.home() == root and home.venvs() == root / "venvs" and home.locks() == root / "locks"
    monkeypatch.setenv("CONVMATRIX_VENVS", str(tmp_path / "v"))
    monkeypatch.setenv("CONVMATRIX_RESULTS_STORE", str(tmp_path / "s"))
    assert (home.venvs(), home.results_store()) == (tmp_path / "v", tmp_path / "s")
    assert home.locks() == root / "locks"  # the holds stay in the home


def test_a_lock_name_never_leaves_its_folder() -> None:
    for kind, name in (("venvs", "../x"), ("venvs", ".."), ("venvs", ""), ("other", "x")):
        with pytest.raises(ValueError, match="no lock for"):
            home.lock_path(kind, name)


def test_a_held_thing_cannot_be_taken_by_gc_and_a_hold_marks_its_use(tmp_path: Path) -> None:
    assert home.last_held(home.VENVS, "v") is None
    with home.held(home.VENVS, "v"):
        assert home.last_held(home.VENVS, "v") is not None
        with home.exclusive(home.VENVS, "v") as free:
            assert not free
    with home.exclusive(home.VENVS, "v") as free:
        assert free


def test_a_hold_for_the_process_is_taken_once(tmp_path: Path) -> None:
    home.hold(home.RESULTS, "k")
    home.hold(home.RESULTS, "k")
    assert len(home._KEPT) == 1
    with home.exclusive(home.RESULTS, "k") as free:
        assert not free
    for fd in home._KEPT.values():
        os.close(fd)


def test_gc_s_own_lock_file_never_passes_for_a_use_and_a_dry_run_makes_none() -> None:
    with home.exclusive(home.VENVS, "dry", create=False) as free:
        assert free
    assert not home.lock_path(home.VENVS, "dry").exists()
    with home.exclusive(home.VENVS, "made") as free:
        assert free
    assert home.last_held(home.VENVS, "made") == 0.0


def test_a_holder_that_waited_on_a_lock_file_gc_removed_holds_the_new_one() -> None:
    taken, release = threading.Event(), threading.Event()

    def holder() -> None:
        with home.held(home.VENVS, "v"):
            taken.set()
            release.wait(10)

    with home.exclusive(home.VENVS, "v") as free:
        assert free
        thread = threading.Thread(target=holder)
        thread.start()
        assert not taken.wait(0.2)  # waits while gc removes the thing
        home.lock_path(home.VENVS, "v").unlink()  # gc is done: its lock file goes with the thing
    assert taken.wait(10)
    with home.exclusive(home.VENVS, "v") as free:
        assert not free  # the holder holds the lock file that is there now
    release.set()
    thread.join(10)


@pytest.fixture
def read_only_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """CONVMATRIX_HOME on a read-only mount (a bind mount -o ro), which a test cannot make: writing
    under it fails with EROFS, and access() says so."""
    root = tmp_path / "ro"
    for venv in ("old", "new"):  # an old venv's lock file is there; a new one's gc would have to make
        (root / "venvs" / venv).mkdir(parents=True)
        (root / "venvs" / venv / home.MARKER).write_text("")  # convmatrix's own: gc would remove it
    (root / "locks" / "venvs").mkdir(parents=True)
    (root / "locks" / "venvs" / "old").write_text("")
    monkeypatch.setenv("CONVMATRIX_HOME", str(root))
    real_open, real_mkdir, real_access = os.open, os.mkdir, os.access

    def under(path: Any) -> bool:
        return str(path).startswith(str(root))

    def refused(path: Any) -> OSError:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if under(path) and flags & (os.O_RDWR | os.O_WRONLY | os.O_CREAT):
            raise refused(path)
        return real_open(path, flags, *args, **kwargs)

    def mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if under(path):
            raise FileExistsError(errno.EEXIST, "File exists", str(path)) if os.path.lexists(path) else refused(path)
        real_mkdir(path, *args, **kwargs)

    def access(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        return not (under(path) and mode & os.W_OK) and real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "access", access)
    return root


def test_where_no_lock_file_can_be_made_a_job_goes_on_unheld(read_only_home: Path) -> None:
    with home.held(home.VENVS, "v"):
        pass
    home.hold(home.VENVS, "v")
    assert not home._KEPT


@pytest.mark.parametrize("name", ["old", "new"])  # a lock file there, and one gc would have to make
@pytest.mark.parametrize("create", [True, False])  # the real run, and the dry run, which makes nothing
def test_where_gc_cannot_lock_it_says_so_and_never_that_a_job_holds_it(
    read_only_home: Path, name: str, create: bool
) -> None:
    path = read_only_home / "locks" / "venvs" / name
    with pytest.raises(BadInput) as raised, home.exclusive(home.VENVS, name, create=create):
        pass
    # A dry run, which makes no lock file, asks whether it could (access()), as the real run finds out.
    why = os.strerror(errno.EROFS) if create or name == "old" else f"{path.parent} is not writable"
    assert raised.value.exit_code == 2 and raised.value.lines() == [f"{path}: gc cannot take its lock: {why}"]


def test_a_stored_result_is_marked_used_when_it_is_reused(tmp_path: Path) -> None:
    done = tmp_path / "done"
    done.mkdir()
    rundir.write_json(done / rundir.CELL_JSON, {"id": "c", "exit_code": 0, "ended": "2024-01-01T00:00:00"})
    rundir.write_json(done / rundir.ENV_JSON, {"ended": "2024-01-01T00:00:00"})
    reuse.save("k" * 32, done)
    stored = reuse.store() / ("k" * 32)
    assert rundir.is_complete(stored)
    os.utime(stored, (1, 1))
    assert reuse.restore("k" * 32, tmp_path / "into")
    assert stored.stat().st_mtime > 1
    assert home.last_held(home.RESULTS, "k" * 32) is not None


def test_the_baremetal_lane_holds_the_venvs_it_prepares_and_marks_them_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from convmatrix.matrix import load

    def make(cell: Cell, venv: Path, plan: list[list[str]], log: object) -> None:
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").write_text("")

    monkeypatch.setattr(baremetal, "make_venv", make)
    monkeypatch.setattr(reuse, "venv_lock", lambda venv, python: "")
    (tmp_path / "m.toml").write_text('name = "t"\n[axes]\nlane = ["baremetal"]\ntorch = ["2.5.1"]\ncuda = ["cu124"]\n'
                                     'cudnn = ["bundled"]\npython = ["3.11"]\n')
    matrix = load(tmp_path / "m.toml")
    (cell,) = matrix.cells
    baremetal.Baremetal().prepare(cell, matrix, print)
    venv = baremetal.venv_dir(cell)
    assert json.loads((venv / baremetal.STAMP).read_text())["python"] == "3.11"
    os.utime(venv, (1, 1))
    baremetal.Baremetal().prepare(cell, matrix, print)  # warm: nothing installed, but used now
    assert venv.stat().st_mtime > 1
    with home.exclusive(home.VENVS, venv.name) as free:
        assert not free  # held until the run (this process) ends
    for fd in home._KEPT.values():
        os.close(fd)


def bad_places(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Each a place no home can be, and what the one line says of it."""
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "file").write_text("")
    return {"loop": (tmp_path / "loop", "a symlink loop"), "file": (tmp_path / "file", "not a directory"),
            "under a file": (tmp_path / "file" / "home", f"{tmp_path / 'file'} is not a directory")}


@pytest.mark.parametrize("place", ["loop", "file", "under a file"])
@pytest.mark.parametrize(("variable", "where"), [("CONVMATRIX_HOME", home.home), ("CONVMATRIX_VENVS", home.venvs),
                                                 ("CONVMATRIX_RESULTS_STORE", home.results_store),
                                                 ("CONVMATRIX_IMAGE_LOCKS", home.image_locks)])
def test_a_place_that_cannot_be_a_folder_is_bad_input_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, place: str, variable: str, where: Any
) -> None:
    path, why = bad_places(tmp_path)[place]
    monkeypatch.setenv(variable, str(path))
    with pytest.raises(BadInput) as raised:
        where()
    assert raised.value.exit_code == 2 and raised.value.lines() == [f"{variable}={path}: {why}"]


@pytest.mark.parametrize("place", ["loop", "file"])
@pytest.mark.parametrize("command", ["gc", "run"])
def test_gc_and_run_stop_on_a_bad_home_with_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], place: str, command: str
) -> None:
    from convmatrix.cli.main import main

    def no_install(*args: Any) -> None:
        raise AssertionError("a venv was made")

    monkeypatch.setattr(baremetal, "make_venv", no_install)
    path, why = bad_places(tmp_path)[place]
    monkeypatch.setenv("CONVMATRIX_HOME", str(path))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")  # gc never reaches a real engine
    (tmp_path / "m.toml").write_text('name = "t"\n[axes]\nlane = ["baremetal"]\ntorch = ["2.5.1"]\n'
                                     'cuda = ["cu124"]\ncudnn = ["bundled"]\npython = ["3.11"]\n')
    argv = {"gc": ["gc", "--dry-run"],
            "run": ["run", "-m", str(tmp_path / "m.toml"), "--out", str(tmp_path / "out")]}[command]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [f"convmatrix: CONVMATRIX_HOME={path}: {why}"]


@pytest.mark.parametrize("dry_run", [False, True])
def test_gc_on_a_read_only_home_stops_at_one_line_and_exit_2_and_a_dry_run_agrees(
    read_only_home: Path, dry_run: bool
) -> None:
    def no_engine() -> Any:
        raise InfrastructureError("docker: not reachable")

    lines: list[str] = []
    with pytest.raises(BadInput) as raised:
        gc.collect(keep_days=0, dry_run=dry_run, say=lines.append, now=time.time() + 86400, engine=no_engine)
    (line,) = raised.value.lines()
    assert raised.value.exit_code == 2 and line.startswith(f"{read_only_home}/locks/venvs/")
    assert ": gc cannot take its lock: " in line and not [x for x in lines if "a running job holds it" in x]
    assert sorted(p.name for p in (read_only_home / "venvs").iterdir()) == ["new", "old"]


def test_a_home_under_a_home_that_is_a_file_falls_back_as_with_no_home(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen: HOME=/dev/null (a service account's) stopped every run with exit 2, lanes that use no
    venv among them; it is a machine without a home directory, whose default is ./.convmatrix."""
    monkeypatch.delenv("CONVMATRIX_HOME", raising=False)
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("HOME", str(tmp_path / "not-a-folder"))
    monkeypatch.chdir(tmp_path)
    assert home.home() == tmp_path / ".convmatrix"


def test_a_lock_file_gc_may_not_write_costs_that_thing_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen: one root-owned lock file (a sudo run's) in a user's home stopped the whole gc with
    exit 2. flock needs only a read-only descriptor; a symlinked lock file is kept, never followed."""
    monkeypatch.setenv("CONVMATRIX_HOME", str(tmp_path))
    locks = tmp_path / "locks" / "venvs"
    locks.mkdir(parents=True)
    (locks / "theirs").write_text("")
    (locks / "linked").symlink_to(tmp_path / "elsewhere")
    real_open = os.open

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path) == str(locks / "theirs") and flags & os.O_RDWR:  # root ignores modes: refused by hand
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    with home.exclusive(home.VENVS, "theirs") as free:
        assert free
        with home.exclusive(home.VENVS, "theirs") as again:  # flock across descriptors: now gc's own
            assert not again
    with home.held(home.VENVS, "theirs"), home.exclusive(home.VENVS, "theirs") as free:
        assert not free  # a job holds it, through a read-only descriptor too
    with home.exclusive(home.VENVS, "linked") as free:
        assert not free
    assert not (tmp_path / "elsewhere").exists()


def test_an_image_held_under_one_home_is_held_for_every_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen (a review): gc with its own CONVMATRIX_HOME removed two cell images that jobs of another
    home were using: image holds lived in each home, but images are the engine's. Two runners of
    one machine, each with its own work folder (the workflows' CONVMATRIX_HOME), are that case."""
    digest = "d" * 64
    monkeypatch.setenv("CONVMATRIX_HOME", str(tmp_path / "runner-a"))
    with home.held(home.IMAGES, digest):
        monkeypatch.setenv("CONVMATRIX_HOME", str(tmp_path / "runner-b"))
        with home.exclusive(home.IMAGES, digest) as free:
            assert not free
        assert home.last_held(home.IMAGES, digest) is not None  # and its use is seen from there too
    shared = home.SHARED_IMAGE_LOCKS
    assert home.lock_path(home.IMAGES, digest) == shared / digest
    assert os.stat(shared).st_mode & 0o7777 == 0o1777  # any user's jobs may add theirs, none remove another's
    assert home.lock_path(home.VENVS, "v").parent == tmp_path / "runner-b" / "locks" / "venvs"  # the rest stays


def test_convmatrix_image_locks_names_the_shared_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVMATRIX_IMAGE_LOCKS", str(tmp_path / "mounted"))
    assert home.lock_path(home.IMAGES, "a" * 64) == (tmp_path / "mounted").resolve() / ("a" * 64)
    monkeypatch.setenv("CONVMATRIX_IMAGE_LOCKS", "")  # set to nothing: as unset
    assert home.image_locks() == home.SHARED_IMAGE_LOCKS
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONVMATRIX_IMAGE_LOCKS", "rel/../locks\nx")  # relative, and a line break in a name
    assert home.image_locks() == (tmp_path / "locks\nx").resolve()


@pytest.mark.parametrize("planted", ["symlink", "file", "not writable", "another user's"])
def test_a_shared_folder_that_is_not_ours_to_use_leaves_the_images_holds_in_the_home(
    tmp_path: Path, planted: str
) -> None:
    """/tmp is every user's: a symlink, a file or a folder another user made there without write
    for others is never followed or relied on."""
    shared = home.SHARED_IMAGE_LOCKS
    if planted == "symlink":
        (tmp_path / "elsewhere").mkdir()
        shared.symlink_to(tmp_path / "elsewhere")
    elif planted == "file":
        shared.write_text("")
    elif planted == "not writable":
        shared.mkdir(mode=0o755)
        if os.getuid() == 0:
            pytest.skip("root may write any folder")
        shared.chmod(0o555)
    else:  # sticky and writable, but its owner may delete the lock files in it
        shared.mkdir()
        shared.chmod(0o1777)
        if os.getuid() != 0:
            pytest.skip("only root can give a folder to another user")
        os.chown(shared, 54321, 54321)
    assert home.lock_path(home.IMAGES, "a" * 64) == home.locks() / "images" / ("a" * 64)
    if planted == "symlink":
        with home.held(home.IMAGES, "a" * 64):
            pass
        assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_lock_another_user_keeps_on_an_image_stops_no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared lock files are every user's: one who keeps an exclusive lock on an image's makes
    a run wait at most IMAGE_HOLD_WAIT_S, then go on unheld (a venv's or a result's lock files are
    the user's own, and a gc's lock on them lasts as long as one removal)."""
    import fcntl

    monkeypatch.setattr(home, "IMAGE_HOLD_WAIT_S", 0.5)
    path = home.lock_path(home.IMAGES, "e" * 64)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        done = threading.Event()

        def take() -> None:
            home.hold(home.IMAGES, "e" * 64)
            done.set()

        thread = threading.Thread(target=take, daemon=True)
        thread.start()
        thread.join(timeout=30)
        assert done.is_set() and not home._KEPT  # it went on, holding nothing
    finally:
        os.close(fd)


def test_another_users_lock_file_that_gc_may_not_open_is_kept_not_a_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen (a review): a 0600 lock file another user left in the shared folder (their umask 077),
    or any file they put there, made every other user's gc stop with exit 2, half done. In the
    shared folder such a file is theirs: kept, as a held one is."""
    digest = "q" * 64
    path = home.lock_path(home.IMAGES, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    real_open = os.open

    def open_(target: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(target) == str(path):  # what a non-root user meets on another user's 0600 file
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))
        return real_open(target, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    with home.exclusive(home.IMAGES, digest) as free:
        assert not free
    with home.exclusive(home.IMAGES, digest, create=False) as free:  # a dry run agrees
        assert not free


def test_a_lock_file_made_in_the_shared_folder_is_every_users_to_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen (a review): lock files were made 0644 under the maker's umask, so another user's hold
    could not touch one (EPERM, ignored) and gc aged a daily-used image by its first user's last use.
    And an existing one is opened without O_CREAT, which fs.protected_regular refuses on another
    user's file in a sticky folder."""
    old = os.umask(0o077)
    try:
        with home.held(home.IMAGES, "m" * 64):
            pass
    finally:
        os.umask(old)
    path = home.lock_path(home.IMAGES, "m" * 64)
    assert path.stat().st_mode & 0o777 == 0o666
    seen: list[int] = []
    real_open = os.open

    def open_(target: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(target) == str(path):
            seen.append(flags)
        return real_open(target, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    with home.held(home.IMAGES, "m" * 64):
        pass
    assert seen and not any(flags & os.O_CREAT for flags in seen)
    umask = os.umask(0)
    os.umask(umask)
    with home.held(home.VENVS, "v"):  # the home's own lock files keep the umask's mode
        pass
    assert home.lock_path(home.VENVS, "v").stat().st_mode & 0o777 == 0o644 & ~umask


def test_a_hold_waiting_on_an_image_keeps_no_other_hold_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen (a review): hold() waited for an image's lock inside its guard, so every other hold of
    the run (the cells prepared beside it) waited up to IMAGE_HOLD_WAIT_S with it."""
    import fcntl

    monkeypatch.setattr(home, "IMAGE_HOLD_WAIT_S", 60.0)
    path = home.lock_path(home.IMAGES, "w" * 64)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another user's lock, kept
    waiting = threading.Thread(target=home.hold, args=(home.IMAGES, "w" * 64), daemon=True)
    try:
        waiting.start()
        time.sleep(0.3)  # it is polling now
        home.hold(home.VENVS, "other")  # returns while the image's hold still waits
        assert waiting.is_alive() and home.lock_path(home.VENVS, "other") in home._KEPT
    finally:
        os.close(fd)  # let it go: the waiting hold takes it
        waiting.join(timeout=30)
    assert not waiting.is_alive() and path in home._KEPT
    for kept in home._KEPT.values():
        os.close(kept)
