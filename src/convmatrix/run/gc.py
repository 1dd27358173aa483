"""`convmatrix gc`: removing what is old or over budget among what convmatrix keeps between runs:
the baremetal venvs (and their install logs) in home.venvs(), the stored results in
home.results_store(), and the cell images (the engine's images labelled images.LABEL_HASH).

Each is aged by its last use: a venv's or a stored result's directory mtime (touched at each
use), an image's creation, and for all three the lock file a job holds it by (home.py), which a
hold touches. Those unused for more than --keep-days go first; then, with --max-gb, the oldest of
the rest until what is left weighs no more than that (on disk, each file once: Weight). What a
running job holds is never removed: gc takes each one's lock exclusively without waiting and
leaves it where another holds it, and the engine refuses to remove an image a container uses. A
directory is renamed out of the way (TRASH) before it is removed, so that an interrupted gc never
leaves a half venv that looks whole. Only what convmatrix made is removed: a venv or a stored
result carries home.MARKER (written by the baremetal lane and the results store), and every root
and item is opened through tree.Tree, never through a symlink; what has no marker is kept and
listed. An engine that is not reachable costs only the images: the
venvs and stored results are still cleaned.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convmatrix import home, tree
from convmatrix.errors import InfrastructureError
from convmatrix.run.lanes.images import DIGEST, LABEL_HASH

DAY = 86400.0
KEEP_DAYS = 14.0
WALK_LIMIT = 200_000  # entries one size walk reads (a torch venv has ~20 000); past it the size is a lower bound
TRASH = ".gc-"  # a directory gc is removing: renamed so first
INSTALL_LOG = ".install.log"  # baremetal.make_venv's log, beside the venvs
SAVING = ".saving"  # reuse.save's staging directory of a key

Say = Callable[[str], None]
Engine = Callable[[], AbstractContextManager[Any]]
Inode = tuple[int, int]  # (st_dev, st_ino): one file however many names link it


@dataclass(frozen=True, kw_only=True)
class Item:
    kind: str  # venv | install log | stored result | image | leftover
    name: str  # what a line shows: a path, an image's tag
    used: float  # last use, seconds since the epoch
    size: int  # bytes on disk: its own files each once (what it shares with others too)
    bounded: bool = False  # the size walk stopped at WALK_LIMIT: at least size
    hold: tuple[str, str] | None = None  # the (kind, name) of the lock a job holds it by
    path: Path | None = None
    image: Any = None  # containers.LabelledImage
    inodes: dict[Inode, int] = field(default_factory=dict, repr=False, compare=False)  # a local item's, and bytes


@dataclass(kw_only=True)
class Summary:
    found: list[Item] = field(default_factory=list)
    removed: list[Item] = field(default_factory=list)  # or, in a dry run, would be
    held: list[Item] = field(default_factory=list)
    failed: list[Item] = field(default_factory=list)
    images_skipped: str = ""  # why, when the images were not looked at
    unmarked: list[Item] = field(default_factory=list)  # without home.MARKER: not ours to remove, kept
    refused: list[str] = field(default_factory=list)  # a root that is a symlink or no folder: one line each


def disk_inodes(path: Path, limit: int = WALK_LIMIT) -> tuple[dict[Inode, int], bool]:
    """The bytes on disk of each inode under path (symlinks not followed), and whether the walk
    stopped at `limit` entries (then at least those)."""
    try:
        top = os.lstat(path)
    except OSError:
        return {}, False
    seen, count, stack = {(top.st_dev, top.st_ino): top.st_blocks * 512}, 0, [str(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    count += 1
                    if count > limit:
                        return seen, True
                    try:
                        st = entry.stat(follow_symlinks=False)
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                    except OSError:
                        continue
                    seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
        except OSError:
            continue
    return seen, False


class Weight:
    """What a set of items takes on disk together. uv hard-links the same torch files into every
    venv, so an inode counts once however many items link it, and dropping an item takes off only
    what no item left still links (a venv whose files another links frees next to nothing). An
    image is its own size (the engine already leaves out the layers it shares)."""

    def __init__(self, items: Iterable[Item] = ()) -> None:
        self.links: Counter[Inode] = Counter()
        self.total = 0
        for item in items:
            self.add(item)

    def add(self, item: Item) -> None:
        for inode, size in item.inodes.items():
            self.total += size if not self.links[inode] else 0
            self.links[inode] += 1
        self.total += 0 if item.inodes else item.size

    def drop(self, item: Item) -> None:
        for inode, size in item.inodes.items():
            self.links[inode] -= 1
            self.total -= size if not self.links[inode] else 0
        self.total -= 0 if item.inodes else item.size


def mtime(path: Path) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def local_item(kind: str, path: Path, hold: tuple[str, str] | None) -> Item:
    inodes, bounded = disk_inodes(path)
    used = max(mtime(path), (home.last_held(*hold) or 0.0) if hold else 0.0)
    return Item(kind=kind, name=str(path), used=used, size=sum(inodes.values()), bounded=bounded, hold=hold,
                path=path, inodes=inodes)


def entries(root: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(root) as found:
            return sorted(found, key=lambda e: e.name)
    except OSError:
        return []


def local_items(summary: Summary | None = None) -> list[Item]:
    """The venvs and their install logs, the stored results (and the staging of one being
    saved), and what an interrupted gc left: only what carries convmatrix's marker (home.MARKER;
    an install log, its first line), each root and item opened without following a link. What has
    no marker is added to summary.unmarked (kept), a root that is a symlink to summary.refused."""
    summary = summary if summary is not None else Summary()
    items: list[Item] = []
    for where, kind, held_as in ((home.venvs(), "venv", home.VENVS), (home.results_store(), "stored result",
                                                                       home.RESULTS)):
        try:
            root = tree.Tree.open(where)
        except FileNotFoundError:
            continue
        except OSError as exc:
            summary.refused.append(f"gc: {exc}; nothing under it is removed")
            continue
        with root:
            for name, info in root.entries():
                path, is_dir = where / name, stat.S_ISDIR(info.st_mode)
                if name.startswith(TRASH) and is_dir:
                    item = local_item("leftover", path, None)
                elif name.startswith("."):
                    continue
                elif is_dir:
                    held = name.removesuffix(SAVING) if held_as == home.RESULTS else name
                    item = local_item(kind, path, (held_as, held))
                elif held_as == home.VENVS and name.endswith(INSTALL_LOG) and stat.S_ISREG(info.st_mode):
                    log = local_item("install log", path, None)
                    (items if install_log_is_ours(root, name) else summary.unmarked).append(log)
                    continue
                else:
                    continue
                (items if home.is_marked(root, name) else summary.unmarked).append(item)
    return items


def install_log_is_ours(root: tree.Tree, name: str) -> bool:
    """Whether an install log starts with the line make_venv writes first."""
    try:
        with root.open_read(name) as handle:
            return handle.read(len(home.INSTALL_LOG_HEAD)) == home.INSTALL_LOG_HEAD
    except OSError:
        return False


def image_items(engine: Any) -> list[Item]:
    from convmatrix.run.lanes import containers  # the docker SDK: loaded only where gc looks at images

    items = []
    for image in containers.labelled_images(engine, LABEL_HASH):
        digest = image.labels.get(LABEL_HASH, "")
        # Any image may carry the label: only a digest of ours names a lock file (a "..", a NUL or
        # 5,000 characters stopped gc with a traceback or "File name too long").
        hold = (home.IMAGES, digest) if isinstance(digest, str) and DIGEST.fullmatch(digest) else None
        used = max(image.created, (home.last_held(*hold) or 0.0) if hold else 0.0)
        items.append(Item(kind="image", name=image.tags[0] if image.tags else image.id[:19], used=used,
                          size=image.size, hold=hold, image=image))
    return items


def default_engine(name: str = "docker") -> AbstractContextManager[Any]:
    from convmatrix.run.lanes import containers  # the docker SDK: loaded only where gc looks at images

    return containers.client(name)


def gb(size: int, bounded: bool = False) -> str:
    return f"{'≥' if bounded else ''}{size / 1e9:.1f} GB" if size >= 1e8 else \
        f"{'≥' if bounded else ''}{size / 1e6:.1f} MB"


def remove_local(path: Path) -> str | None:
    """Rename out of the way, then remove, under its root's descriptor (never through a link);
    None when gone, else why not. A folder is removed only while it carries the marker."""
    try:
        with tree.Tree.open(path.parent) as root:
            found = root.lstat(path.name)
            if found is None:
                return None
            if not stat.S_ISDIR(found.st_mode):
                root.unlink(path.name)
                return None
            if not home.is_marked(root, path.name):
                return "it no longer carries convmatrix's marker; kept"
            doomed = path.name if path.name.startswith(TRASH) else f"{TRASH}{path.name}-{os.getpid()}"
            if doomed != path.name:
                root.rename(path.name, doomed)
            root.rmtree(doomed)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


@contextlib.contextmanager
def unheld(item: Item, *, dry_run: bool) -> Iterator[bool]:
    """Whether no job holds the item (then none can until the block ends)."""
    if item.hold is None:
        yield True
        return
    with home.exclusive(*item.hold, create=not dry_run) as free:
        yield free


class Collector:
    def __init__(self, *, dry_run: bool, say: Say, engine: Any) -> None:
        self.dry_run, self.say, self.engine = dry_run, say, engine
        self.summary = Summary()
        self.tried: set[int] = set()

    def line(self, what: str, item: Item, reason: str) -> None:
        self.say(f"{what} {item.kind} {item.name} ({gb(item.size, item.bounded)}): {reason}")

    def act(self, item: Item, reason: str) -> bool:
        """Remove the item (or say it would be) unless a job holds it; whether it is (would be) gone."""
        self.tried.add(id(item))
        with unheld(item, dry_run=self.dry_run) as free:
            if not free:
                self.summary.held.append(item)
                self.line("kept", item, f"{reason}, but a running job holds it")
                return False
            if self.dry_run:
                self.summary.removed.append(item)
                self.line("would remove", item, reason)
                return True
            if item.image is not None:
                from convmatrix.run.lanes import containers  # the docker SDK: only where images are removed

                problem = containers.remove_image(self.engine, item.image)
                if problem and problem.startswith(containers.IN_USE):  # kept, as what a job holds is
                    self.summary.held.append(item)
                    self.line("kept", item, f"{reason}, but it is {problem}")
                    return False
            else:
                assert item.path is not None
                problem = remove_local(item.path)
            if problem:
                self.summary.failed.append(item)
                self.line("could not remove", item, f"{reason}; {problem}")
                return False
            if item.hold is not None:
                home.forget(*item.hold)  # still ours: a later hold makes a new one
            self.summary.removed.append(item)
            self.line("removed", item, reason)
            return True


def collect(*, keep_days: float = KEEP_DAYS, max_gb: float | None = None, dry_run: bool = False,
            say: Say = print, now: float | None = None, engine: Engine | None = None,
            engine_name: str = "docker") -> Summary:
    """Remove (with dry_run: list) what is unused for more than keep_days, then the oldest of the
    rest while they weigh more than max_gb; say a line for each, and one for the whole."""
    now = time.time() if now is None else now
    found = Summary()
    items = local_items(found)
    with contextlib.ExitStack() as stack:
        reached: Any = None
        try:
            reached = stack.enter_context(engine() if engine else default_engine(engine_name))
            items += image_items(reached)
        except ImportError:
            skipped = "no docker SDK here"
        except InfrastructureError as exc:  # containers.EngineError: not reachable, cannot list
            skipped = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        else:
            skipped = ""
        gc = Collector(dry_run=dry_run, say=say, engine=reached)
        gc.summary.found, gc.summary.images_skipped = items, skipped
        gc.summary.unmarked, gc.summary.refused = found.unmarked, found.refused
        for line in found.refused:
            say(line)
        for item in found.unmarked:
            gc.line("kept", item, "no convmatrix marker in it (not made by convmatrix, or before markers): "
                    "never removed by gc; remove it by hand if it is not needed")
        by_age = sorted(items, key=lambda i: i.used)
        gone: set[int] = set()
        for item in by_age:
            if item.kind == "leftover":
                reason = "left by an interrupted gc"
            elif now - item.used > keep_days * DAY:
                reason = f"unused for {(now - item.used) / DAY:.0f} days (--keep-days {keep_days:g})"
            else:
                continue
            if gc.act(item, reason):
                gone.add(id(item))
        if max_gb is not None:
            kept = Weight(i for i in items if id(i) not in gone)
            for item in by_age:
                if kept.total <= max_gb * 1e9:
                    break
                if id(item) in gc.tried:
                    continue
                if gc.act(item, f"over --max-gb {max_gb:g} ({kept.total / 1e9:.1f} GB kept)"):
                    gone.add(id(item))
                    kept.drop(item)
    if not dry_run:
        forget_stale_locks(items, images_seen=not skipped, gone=gone, used_before=now - keep_days * DAY)
    say(summary_line(gc.summary, dry_run=dry_run))
    if skipped:
        say(f"gc: images skipped: {skipped}")
    return gc.summary


def forget_stale_locks(items: list[Item], *, images_seen: bool, gone: set[int], used_before: float) -> None:
    """Remove the lock files of what is gone, where no job holds them (one that holds a lock for
    what it is about to make, a venv before it is made, keeps it). An image's only once it was
    last used before `used_before` (keep-days ago): the images' folder is every home's and every
    engine's, and an image this engine does not list may be another's (Podman's store, a rootless
    user's), whose last use its own gc still ages by; past keep-days that mark decides nothing."""
    kept = {i.hold for i in items if i.hold is not None and id(i) not in gone}
    for kind in (home.VENVS, home.RESULTS, *((home.IMAGES,) if images_seen else ())):
        for entry in entries(home.lock_folder(kind)):
            if (kind, entry.name) in kept or not entry.is_file(follow_symlinks=False):
                continue
            if kind == home.IMAGES and (home.last_held(kind, entry.name) or 0.0) >= used_before:
                continue
            with home.exclusive(kind, entry.name) as free:
                if free:
                    home.forget(kind, entry.name)


def summary_line(summary: Summary, *, dry_run: bool) -> str:
    # What is on disk, each file once: what was removed is what is no longer linked from what is left.
    total = Weight(summary.found).total
    removed_ids = {id(i) for i in summary.removed}
    removed = total - Weight(i for i in summary.found if id(i) not in removed_ids).total
    head = (f"gc (dry run): would remove {len(summary.removed)} ({gb(removed)})" if dry_run else
            f"gc: removed {len(summary.removed)} ({gb(removed)})")
    parts = [f"{head} of {len(summary.found)} ({gb(total)}) in {home.home()}"
             + (" and the engine's images" if not summary.images_skipped else "")]
    if summary.held:
        parts.append(f"{len(summary.held)} kept: held by a running job or used by a container")
    if summary.failed:
        parts.append(f"{len(summary.failed)} could not be removed")
    if summary.unmarked:
        parts.append(f"{len(summary.unmarked)} kept: not marked as convmatrix's")
    if dry_run:
        parts.append("nothing removed")
    return "; ".join(parts)
