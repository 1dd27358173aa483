"""`convmatrix gc` (issue 25, item 3): what is old or over budget goes, oldest first; what a
running job holds stays; a dry run removes nothing; the images against a fake engine, as
test_containers.py does; and --prepare-disk measures where the engine says its data is."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from docker.errors import APIError, ImageNotFound

from convmatrix import home, tree
from convmatrix.cli import gc as gc_cmd
from convmatrix.errors import InfrastructureError
from convmatrix.run import ahead, gc
from convmatrix.run.lanes import containers
from convmatrix.run.lanes.images import LABEL_CELL, LABEL_HASH

NOW = time.time()
DAY = 86400.0
MB = 1_000_000


@pytest.fixture(autouse=True)
def fake_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CONVMATRIX_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CONVMATRIX_VENVS", raising=False)
    monkeypatch.delenv("CONVMATRIX_RESULTS_STORE", raising=False)
    monkeypatch.delenv("CONVMATRIX_IMAGE_LOCKS", raising=False)
    (tmp_path / "machine").mkdir()
    monkeypatch.setattr(home, "SHARED_IMAGE_LOCKS", tmp_path / "machine" / "convmatrix-image-locks")
    return tmp_path / "home"


def made(path: Path, *, days_ago: float, size: int = 10_000, marked: bool = True) -> Path:
    """A directory with a file of `size` bytes (real blocks, not a hole), last used days_ago;
    marked as convmatrix's own (home.mark, as the baremetal lane and the results store do) unless
    told otherwise."""
    path.mkdir(parents=True)
    (path / "data").write_bytes(os.urandom(size))
    if marked:
        home.mark(path, "test")
    when = NOW - days_ago * DAY
    os.utime(path, (when, when))
    return path


def no_engine(name: str = "docker") -> contextlib.AbstractContextManager[Any]:
    raise containers.EngineError("docker: the engine is not reachable (/var/run/docker.sock: No such file "
                                 "or directory); start dockerd or set DOCKER_HOST")


def collect(**kwargs: Any) -> tuple[gc.Summary, list[str]]:
    lines: list[str] = []
    kwargs.setdefault("engine", no_engine)
    return gc.collect(say=lines.append, now=NOW, **kwargs), lines


def test_what_is_unused_for_longer_than_keep_days_goes_and_what_a_job_holds_stays() -> None:
    old_venv = made(home.venvs() / "old", days_ago=20)
    new_venv = made(home.venvs() / "new", days_ago=1)
    held_venv = made(home.venvs() / "held", days_ago=30)
    old_log = home.venvs() / "old-cell.install.log"
    old_log.write_bytes(home.INSTALL_LOG_HEAD + b" of old-cell\n")
    os.utime(old_log, (NOW - 20 * DAY, NOW - 20 * DAY))
    old_result = made(home.results_store() / ("a" * 32), days_ago=15)
    staging = made(home.results_store() / ("b" * 32 + ".saving"), days_ago=40)
    new_result = made(home.results_store() / ("c" * 32), days_ago=13)
    leftover = made(home.venvs() / ".gc-gone-123", days_ago=0)
    with home.held(home.VENVS, "held"), home.held(home.RESULTS, "b" * 32):
        os.utime(home.lock_path(home.VENVS, "held"), (NOW - 30 * DAY, NOW - 30 * DAY))  # held since long ago
        os.utime(home.lock_path(home.RESULTS, "b" * 32), (NOW - 40 * DAY, NOW - 40 * DAY))
        summary, lines = collect(keep_days=14)
    assert not old_venv.exists() and not old_log.exists() and not old_result.exists() and not leftover.exists()
    assert new_venv.exists() and new_result.exists()
    assert held_venv.exists() and staging.exists()  # a running job holds them
    assert len(summary.removed) == 4 and len(summary.held) == 2
    assert f"removed venv {old_venv} (" in "\n".join(lines) and "unused for 20 days (--keep-days 14)" in "\n".join(lines)
    assert any(line.startswith(f"kept venv {held_venv}") and "a running job holds it" in line for line in lines)
    assert lines[-2].startswith("gc: removed 4 (") and "2 kept: held by a running job" in lines[-2]
    # The engine was not reachable: the rest was cleaned, and one line says the images were not.
    assert lines[-1].startswith("gc: images skipped: docker: the engine is not reachable (")
    assert not list(home.locks().glob("venvs/old")) and home.lock_path(home.VENVS, "held").exists()
    assert not [p for p in home.venvs().iterdir() if p.name.startswith(gc.TRASH)]


def test_a_recent_hold_counts_as_a_use() -> None:
    venv = made(home.venvs() / "v", days_ago=30)
    with home.held(home.VENVS, "v"):
        pass  # a run used it an hour ago, whatever the directory's mtime says
    collect(keep_days=14)
    assert venv.exists()


def test_a_dry_run_lists_what_it_would_remove_and_removes_nothing(fake_home: Path) -> None:
    old = made(home.venvs() / "old", days_ago=20, size=2 * MB)
    made(home.results_store() / ("a" * 32), days_ago=20)
    before = sorted(str(p) for p in fake_home.rglob("*"))
    summary, lines = collect(keep_days=14, dry_run=True)
    assert sorted(str(p) for p in fake_home.rglob("*")) == before  # not even a lock file
    assert len(summary.removed) == 2
    assert any(line.startswith(f"would remove venv {old} (2.0 MB): unused for 20 days") for line in lines)
    assert lines[-2].startswith("gc (dry run): would remove 2 (") and lines[-2].endswith("nothing removed")


def test_max_gb_removes_the_oldest_first_until_the_rest_fits() -> None:
    oldest = made(home.venvs() / "oldest", days_ago=3, size=MB)
    middle = made(home.results_store() / ("m" * 32), days_ago=2, size=MB)
    newest = made(home.venvs() / "newest", days_ago=1, size=MB)
    summary, lines = collect(keep_days=14, max_gb=0.0025)
    assert not oldest.exists() and middle.exists() and newest.exists()
    assert [i.name for i in summary.removed] == [str(oldest)]
    assert "over --max-gb 0.0025 (" in lines[0]
    _, _ = collect(keep_days=14, max_gb=0.0005)
    assert not middle.exists() and not newest.exists()


def test_max_gb_passes_over_what_a_job_holds_to_the_next_oldest() -> None:
    oldest = made(home.venvs() / "oldest", days_ago=3, size=MB)
    middle = made(home.venvs() / "middle", days_ago=2, size=MB)
    newest = made(home.venvs() / "newest", days_ago=1, size=MB)
    with home.held(home.VENVS, "oldest"):
        os.utime(home.lock_path(home.VENVS, "oldest"), (NOW - 3 * DAY, NOW - 3 * DAY))
        summary, _ = collect(keep_days=14, max_gb=0.0025)
    assert oldest.exists() and not middle.exists() and newest.exists()
    assert [i.name for i in summary.held] == [str(oldest)]


def test_max_gb_counts_a_file_linked_into_several_venvs_once() -> None:
    """uv hard-links one torch into every venv: it takes its disk once, and removing one venv of
    two that link it frees nothing."""
    shared = made(home.venvs() / "shared", days_ago=3, size=2 * MB)
    linking = home.venvs() / "linking"
    linking.mkdir()
    home.mark(linking, "test")
    os.link(shared / "data", linking / "data")
    os.utime(linking, (NOW - DAY, NOW - DAY))
    own = made(home.venvs() / "own", days_ago=2, size=MB)
    summary, lines = collect(keep_days=14, max_gb=0.0035, dry_run=True)  # 3 MB on disk, not 5
    assert not summary.removed and lines[-2].startswith("gc (dry run): would remove 0 (0.0 MB) of 3 (3.0 MB) in ")
    summary, lines = collect(keep_days=14, max_gb=0.0025)
    # Removing the oldest freed nothing (the newest still links its file): the next oldest goes too.
    assert not shared.exists() and not own.exists() and linking.exists()
    assert lines[-2].startswith("gc: removed 2 (1.0 MB) of 3 (3.0 MB) in ")


def test_an_interrupted_removal_never_leaves_a_half_venv_under_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    venv = made(home.venvs() / "old", days_ago=20)

    def fail(path: Any, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(13, "Permission denied")

    with monkeypatch.context() as patched:
        patched.setattr(tree.Tree, "rmtree", fail)
        summary, lines = collect(keep_days=14)
    assert not venv.exists() and len(summary.failed) == 1
    assert any(line.startswith(f"could not remove venv {venv}") and "Permission denied" in line for line in lines)
    summary, lines = collect(keep_days=14)  # the next gc finishes it
    assert [i.kind for i in summary.removed] == ["leftover"] and not list(home.venvs().iterdir())


def test_gc_never_removes_through_a_symlinked_venvs_folder(tmp_path: Path) -> None:
    """Issue 32, item 3: with <home>/venvs a link to another folder, gc removed that folder's old
    subfolders and called them its venvs. The link is named and nothing behind it is touched."""
    elsewhere = tmp_path / "elsewhere"
    old = made(elsewhere / "old", days_ago=40)  # marked even: it is not under the home's own folder
    home.home().mkdir(parents=True, exist_ok=True)
    (home.home() / "venvs").symlink_to(elsewhere, target_is_directory=True)
    summary, lines = collect(keep_days=14)
    assert old.exists() and (old / "data").exists() and not summary.removed
    assert any(line.startswith(f"gc: {home.home() / 'venvs'} is a symlink") for line in lines), lines


def test_what_has_no_marker_is_kept_and_listed_as_such() -> None:
    """Issue 32, item 3: any folder under venvs/ or results/ was taken for one of convmatrix's.
    Only what carries the marker its makers write goes; the rest is kept, each named once."""
    ours = made(home.venvs() / "ours", days_ago=40)
    someone = made(home.venvs() / "someones", days_ago=40, marked=False)
    stored = made(home.results_store() / ("d" * 32), days_ago=40, marked=False)
    log = home.venvs() / "x.install.log"
    log.write_text("not ours\n")
    os.utime(log, (NOW - 40 * DAY, NOW - 40 * DAY))
    summary, lines = collect(keep_days=14)
    assert not ours.exists() and someone.exists() and stored.exists() and log.exists()
    assert sorted(i.name for i in summary.unmarked) == sorted(str(p) for p in (someone, stored, log))
    assert sum("no convmatrix marker in it" in line for line in lines) == 3
    assert "3 kept: not marked as convmatrix's" in lines[-2]


def test_the_makers_mark_what_they_make(tmp_path: Path) -> None:
    """The results store marks a stored result (and a reuse does not copy the mark back out)."""
    from convmatrix.run import reuse  # the store's writer

    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "cell.json").write_text("{}")
    reuse.save("e" * 32, cell)
    stored = home.results_store() / ("e" * 32)
    assert (stored / home.MARKER).is_file() and (stored / "cell.json").is_file()
    assert not list(home.results_store().glob("*.saving"))


def test_a_size_walk_is_bounded(tmp_path: Path) -> None:
    for n in range(5):
        (tmp_path / "d" / str(n)).mkdir(parents=True)
    inodes, bounded = gc.disk_inodes(tmp_path / "d", limit=3)
    assert bounded and sum(inodes.values()) > 0
    assert gc.disk_inodes(tmp_path / "d")[1] is False


# The engine's side: a fake engine, as test_containers.py uses.

class FakeImage:
    def __init__(self, ident: str, tags: list[str], labels: dict[str, str], created: str, size: int) -> None:
        self.id, self.tags, self.labels = ident, tags, labels
        self.attrs = {"Created": created, "Size": size}


class FakeImages:
    def __init__(self, images: list[FakeImage], in_use: set[str]) -> None:
        self.images, self.in_use = images, in_use
        self.removed: list[str] = []
        self.asked: list[dict[str, str]] = []

    def list(self, filters: dict[str, str]) -> list[FakeImage]:
        self.asked.append(filters)
        return [i for i in self.images if filters["label"] in i.labels]

    def remove(self, image: str, force: bool, noprune: bool) -> None:
        assert force is False
        found = [i for i in self.images if image in i.tags or image == i.id]
        if not found:
            raise ImageNotFound("no such image")
        if found[0].id in self.in_use:
            raise APIError("conflict", response=SimpleNamespace(status_code=409, reason="Conflict", url="http://docker/images"),
                           explanation=f"conflict: unable to remove repository reference \"{image}\" (must force) - "
                                       "container 6fbfa8687660 is using its referenced image 0605b8112f74")
        self.removed.append(image)
        self.images.remove(found[0])


class FakeEngine:
    def __init__(self, images: list[FakeImage], in_use: frozenset[str] = frozenset(),
                 shared: dict[str, int] | None = None, root: str | None = "/srv/docker") -> None:
        self.images = FakeImages(images, set(in_use))
        self.shared, self.root = shared or {}, root

    def df(self) -> dict[str, Any]:
        return {"Images": [{"Id": i.id, "Size": i.attrs["Size"], "SharedSize": self.shared.get(i.id, 0)}
                           for i in self.images.images]}

    def info(self) -> dict[str, Any]:
        return {"DockerRootDir": self.root} if self.root else {}


def iso(days_ago: float) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(NOW - days_ago * DAY))
    return f"{stamp}.123456789Z"  # the engine's nanoseconds


def cell_image(name: str, days_ago: float, size: int = 5 * MB) -> FakeImage:
    return FakeImage(f"sha256:{name * 64}"[:71], [f"convmatrix/cell:{name * 20}"],
                     {LABEL_CELL: f"cell-{name}", LABEL_HASH: name * 64}, iso(days_ago), size)


def test_images_are_listed_by_label_with_their_own_size_and_age() -> None:
    engine = FakeEngine([cell_image("a", 3, size=7 * MB)], shared={f"sha256:{'a' * 64}": 4 * MB})
    (image,) = containers.labelled_images(engine, LABEL_HASH)
    assert engine.images.asked == [{"label": LABEL_HASH}]
    assert image.size == 3 * MB  # the base's layers it shares are not its own
    assert abs(image.created - (int(NOW) - 3 * DAY + 0.123456)) < 2
    assert image.tags == ("convmatrix/cell:" + "a" * 20,) and image.labels[LABEL_CELL] == "cell-a"


def test_an_image_s_size_is_its_whole_size_where_the_engine_reports_no_sharing() -> None:
    class NoDf(FakeEngine):
        def df(self) -> dict[str, Any]:
            raise APIError("df is off")

    (image,) = containers.labelled_images(NoDf([cell_image("a", 3, size=7 * MB)]), LABEL_HASH)
    assert image.size == 7 * MB


def test_created_stamps() -> None:
    assert containers.created_seconds("1970-01-01T00:01:40.5Z") == 100.5
    assert containers.created_seconds("1970-01-01T00:01:40Z") == 100.0
    assert containers.created_seconds(1700000000) == 1700000000.0
    assert containers.created_seconds("garbage") == containers.created_seconds(None) == 0.0


def test_removing_an_image_a_container_uses_is_refused_by_the_engine() -> None:
    engine = FakeEngine([cell_image("a", 3), cell_image("b", 3)], in_use=frozenset({f"sha256:{'b' * 64}"[:71]}))
    a, b = containers.labelled_images(engine, LABEL_HASH)
    assert containers.remove_image(engine, a) is None and engine.images.removed == list(a.tags)
    problem = containers.remove_image(engine, b)
    assert problem == "in use by container 6fbfa8687660"


def test_an_image_with_child_images_is_not_said_to_be_in_use_by_a_container(monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker's other 409 (a review): an image others are built on cannot be removed either, but no
    container uses it, so it is a failure to remove, not a keep."""
    engine = FakeEngine([cell_image("a", 3)])
    (image,) = containers.labelled_images(engine, LABEL_HASH)

    def remove(image: str, force: bool, noprune: bool) -> None:
        raise APIError("conflict", response=SimpleNamespace(status_code=409, reason="Conflict", url="http://docker/i"),
                       explanation="conflict: unable to delete 0605b8112f74 (cannot be forced) - image has dependent "
                                   "child images")

    monkeypatch.setattr(engine.images, "remove", remove)
    problem = containers.remove_image(engine, image)
    assert problem is not None and not problem.startswith(containers.IN_USE) and "dependent child images" in problem


def test_gc_removes_old_images_and_keeps_new_held_and_used_ones() -> None:
    in_use = f"sha256:{'c' * 64}"[:71]
    engine = FakeEngine([cell_image("a", 20), cell_image("b", 1), cell_image("c", 20), cell_image("d", 20)],
                        in_use=frozenset({in_use}))
    with home.held(home.IMAGES, "d" * 64):
        os.utime(home.lock_path(home.IMAGES, "d" * 64), (NOW - 20 * DAY, NOW - 20 * DAY))  # held since long ago
        summary, lines = collect(keep_days=14, engine=lambda: contextlib.nullcontext(engine))
    assert engine.images.removed == ["convmatrix/cell:" + "a" * 20]
    # Seen (a review): "could not remove image ... in use (409 Client Error ... (must force) - container ..."
    # with the SDK's text cut in its brackets; a container using it keeps it, as a job's hold does.
    assert [i.kind for i in summary.removed] == ["image"]
    assert sorted(i.name for i in summary.held) == ["convmatrix/cell:" + "c" * 20, "convmatrix/cell:" + "d" * 20]
    assert ("kept image convmatrix/cell:" + "c" * 20 + " (5.0 MB): unused for 20 days (--keep-days 14), but it is in use "
            "by container 6fbfa8687660") in lines, lines
    assert not any(line.startswith("could not remove") for line in lines)
    assert "images skipped" not in "\n".join(lines) and lines[-1].startswith("gc: removed 1 (")


def test_gc_in_one_home_keeps_an_image_a_job_of_another_home_holds(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    """Seen (a review): `CONVMATRIX_HOME=scratch convmatrix gc --keep-days 0` removed two cell images
    between the cells of a job that ran under another home."""
    engine = FakeEngine([cell_image("a", 20), cell_image("b", 20)])
    monkeypatch.setenv("CONVMATRIX_HOME", str(tmp_path / "other-runner"))
    with home.held(home.IMAGES, "a" * 64):
        os.utime(home.lock_path(home.IMAGES, "a" * 64), (NOW - 20 * DAY, NOW - 20 * DAY))  # held since long ago
        monkeypatch.setenv("CONVMATRIX_HOME", str(tmp_path / "scratch"))
        summary, _ = collect(keep_days=14, engine=lambda: contextlib.nullcontext(engine))
    assert engine.images.removed == ["convmatrix/cell:" + "b" * 20]
    assert [i.name for i in summary.held] == ["convmatrix/cell:" + "a" * 20]


def test_another_users_unreadable_lock_file_in_the_shared_folder_stops_no_gc(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen (a review): with a 0600 lock file of another user's in the shared folder, gc removed an
    old image, then stopped at that file with exit 2 and no summary line."""
    engine = FakeEngine([cell_image("a", 20)])
    foreign = home.lock_path(home.IMAGES, "q" * 64)
    foreign.parent.mkdir(parents=True, exist_ok=True)
    foreign.write_text("")
    os.utime(foreign, (NOW - 30 * DAY, NOW - 30 * DAY))  # old enough to be forgotten, were it ours
    real_open = os.open

    def open_(target: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(target) == str(foreign):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))
        return real_open(target, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    _, lines = collect(keep_days=14, engine=lambda: contextlib.nullcontext(engine))
    assert engine.images.removed == ["convmatrix/cell:" + "a" * 20] and lines[-1].startswith("gc: removed 1 (")
    assert foreign.exists()


def test_gc_of_one_engine_keeps_the_recent_lock_files_of_images_it_does_not_list() -> None:
    """Seen (a review): the images' folder is every engine's; a Docker gc deleted the lock file of a
    Podman image used yesterday (which Docker does not list), and the next Podman gc removed that
    image as unused since its build, 20 days ago. Lock files older than keep-days still go."""
    recent, old = home.lock_path(home.IMAGES, "p" * 64), home.lock_path(home.IMAGES, "o" * 64)
    for path, days in ((recent, 1), (old, 20)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        os.utime(path, (NOW - days * DAY, NOW - days * DAY))
    collect(keep_days=14, engine=lambda: contextlib.nullcontext(FakeEngine([])))
    assert recent.exists() and not old.exists()


@pytest.mark.parametrize("label", ["..", ".", "\0x", "a/b", "x" * 5000, "", "\n", "-rf", "A" * 64, "a" * 63])
def test_an_image_whose_hash_label_is_no_digest_of_ours_names_no_lock_file(label: str) -> None:
    """Any image on the engine may carry the convmatrix.hash label (a hostile value found here):
    "..", "." or a NUL stopped gc with a traceback, 5,000 characters with "File name too long" and
    exit 2. Such an image has no hold to look at; gc goes to its end and ages it by its build."""
    image = cell_image("a", 20)
    image.labels[LABEL_HASH] = label
    engine = FakeEngine([image])
    summary, lines = collect(keep_days=14, engine=lambda: contextlib.nullcontext(engine))
    assert [i.hold for i in summary.found] == [None] and lines[-1].startswith("gc: removed 1 (")
    assert not any(home.image_locks().iterdir())  # no lock file was made for it


def test_an_image_used_recently_is_kept_whatever_its_age() -> None:
    engine = FakeEngine([cell_image("a", 20)])
    with home.held(home.IMAGES, "a" * 64):
        pass  # the container lane used it just now
    collect(keep_days=14, engine=lambda: contextlib.nullcontext(engine))
    assert engine.images.removed == []


def test_a_dry_run_removes_no_image() -> None:
    engine = FakeEngine([cell_image("a", 20)])
    summary, lines = collect(keep_days=14, dry_run=True, engine=lambda: contextlib.nullcontext(engine))
    assert engine.images.removed == [] and len(summary.removed) == 1
    assert lines[0].startswith("would remove image convmatrix/cell:" + "a" * 20 + " (5.0 MB): unused for 20 days")


def test_max_gb_weighs_images_venvs_and_results_together() -> None:
    engine = FakeEngine([cell_image("a", 5, size=3 * MB)])
    venv = made(home.venvs() / "v", days_ago=1, size=MB)
    collect(keep_days=14, max_gb=0.0015, engine=lambda: contextlib.nullcontext(engine))
    assert engine.images.removed == ["convmatrix/cell:" + "a" * 20] and venv.exists()


# --prepare-disk: where the engine says its data is.

def test_the_disk_bound_measures_the_engine_s_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    root = tmp_path / "docker-root"
    root.mkdir()
    asked: list[str] = []

    def client(name: str = "docker") -> Any:
        asked.append(name)
        return contextlib.nullcontext(FakeEngine([], root=str(root)))
    monkeypatch.setattr(containers, "client", client)
    assert ahead.engine_root() == root
    budget = ahead.DiskBudget(ahead.build_paths())
    assert root in budget.paths
    # A run whose container cells go through Podman measures Podman's root (its graph root).
    assert ahead.DiskBudget(ahead.build_paths(), engine_name="podman").paths and asked == ["docker", "docker", "podman"]


def test_the_disk_bound_falls_back_to_var_lib_docker_only_when_the_engine_cannot_say(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(containers, "client", lambda name="docker": contextlib.nullcontext(FakeEngine([], root=None)))
    assert ahead.engine_root() == ahead.DOCKER_ROOT
    monkeypatch.setattr(containers, "client", no_engine)
    assert ahead.engine_root() == ahead.DOCKER_ROOT


def test_a_run_without_a_disk_bound_or_container_cells_never_asks_the_engine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def asked() -> Any:
        raise AssertionError("the engine was asked")

    monkeypatch.setattr(containers, "client", asked)
    monkeypatch.setenv("CONVMATRIX_VENVS", str(tmp_path / "venvs" / "not-yet"))
    (tmp_path / "venvs").mkdir()
    assert ahead.build_paths() == (tmp_path / "venvs",)  # the venvs' nearest existing folder
    assert ahead.DiskBudget(ahead.build_paths(), engine=False).paths == [tmp_path / "venvs"]
    preparer = ahead.Preparer(ahead.Limits(builds=1, disk_gb=None, disk_paths=ahead.build_paths()),
                              lambda: True, print)
    preparer.shutdown()


# The command.

def parse(argv: list[str]) -> argparse.Namespace:
    top = argparse.ArgumentParser(prog="convmatrix")
    gc_cmd.add_parser(top.add_subparsers(dest="command"))
    return top.parse_args(["gc", *argv])


@pytest.mark.parametrize(("argv", "why"), [
    (["--keep-days", "-1"], "argument --keep-days: must be 0 or more, not -1"),
    (["--keep-days", "x"], "argument --keep-days: not a number: 'x'"),
    (["--keep-days", "inf"], "argument --keep-days: not a finite number: inf"),
    (["--max-gb", "nan"], "argument --max-gb: not a finite number: nan"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_arguments_exit_2_saying_what_is_wrong_once(argv: list[str], why: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2 and capsys.readouterr().err.splitlines()[-1].endswith(f": error: {why}")


def test_the_command_cleans_and_exits_0(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(gc, "default_engine", no_engine)
    old = made(home.venvs() / "old", days_ago=3)
    args = parse(["--keep-days", "2", "--max-gb", "10", "--dry-run"])
    assert (args.keep_days, args.max_gb, args.dry_run) == (2.0, 10.0, True)
    assert gc_cmd.run(args) == 0 and old.exists()
    assert gc_cmd.run(parse(["--keep-days", "2"])) == 0 and not old.exists()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"would remove venv {old}") and out[-1].startswith("gc: images skipped: ")
    assert parse([]).keep_days == 14.0 and parse([]).max_gb is None


def test_an_unreachable_engine_is_one_line_and_no_failure() -> None:
    made(home.venvs() / "old", days_ago=20)

    def broken() -> contextlib.AbstractContextManager[Any]:
        raise InfrastructureError("docker: the engine is not reachable (refused)\nsecond line")

    _, lines = collect(keep_days=14, engine=broken)
    skipped = [line for line in lines if "images skipped" in line]
    assert len(skipped) == 1 and "\n" not in skipped[0] and not (home.venvs() / "old").exists()


def test_gc_asks_the_engine_it_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`convmatrix gc --engine podman` weighs Podman's images: Podman keeps a store of its own."""
    asked: list[str] = []

    def client(name: str = "docker") -> Any:
        asked.append(name)
        return contextlib.nullcontext(FakeEngine([]))
    monkeypatch.setattr(containers, "client", client)
    monkeypatch.setenv("CONVMATRIX_HOME", str(tmp_path / "home"))
    gc_cmd.run(argparse.Namespace(keep_days=14.0, max_gb=None, dry_run=True, engine="podman"))
    gc.collect(dry_run=True, say=lambda line: None)
    assert asked == ["podman", "docker"]
