"""Where convmatrix keeps what outlives a run, and the holds that keep `convmatrix gc` off it.

One root, $CONVMATRIX_HOME (default ~/.cache/convmatrix: outside any checkout, which
actions/checkout's clean would empty every night), holds the baremetal venvs (venvs/), the
results store (results/) and the lock files (locks/); $CONVMATRIX_VENVS and
$CONVMATRIX_RESULTS_STORE still move their parts elsewhere.

A job that uses a venv, a stored result or a cell image holds a shared flock on its lock file,
locks/<kind>/<name>, for as long as it uses it (held(), or hold() until the process ends); gc
takes an exclusive one without waiting (exclusive()) and leaves alone what another holds. Taking
a hold also touches the lock file: its mtime is when the thing was last used.

The images' lock files are not the home's: images are the engine's, and two jobs with two homes
on one engine (two runners of one machine, each with its own work folder) use and clean the same
images. Their holds live where every home of this machine sees them (image_locks()).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from convmatrix import tree
from convmatrix.errors import BadInput

VENVS = "venvs"  # the kinds of things held: a venv (by its directory's name) ...
RESULTS = "results"  # ... a stored result (by its key) ...
IMAGES = "images"  # ... a cell image (by its content hash, images.LABEL_HASH)
KINDS = (VENVS, RESULTS, IMAGES)


def home() -> Path:
    """$CONVMATRIX_HOME, else ~/.cache/convmatrix (./.convmatrix where there is no home directory)."""
    chosen = os.environ.get("CONVMATRIX_HOME")
    if chosen:
        return folder(Path(chosen).expanduser(), "CONVMATRIX_HOME")
    try:
        default = Path.home() / ".cache" / "convmatrix"
    except (RuntimeError, KeyError):  # no $HOME and no passwd entry (an arbitrary container uid)
        default = Path(".convmatrix")
    try:
        return folder(default, None)
    except BadInput:
        # $HOME is no folder (HOME=/dev/null, as some service accounts have): as with no home at
        # all. A run that needs no venv or stored result must not stop on it.
        return folder(Path(".convmatrix"), None)


def venvs() -> Path:
    """Where the baremetal lane's venvs live: $CONVMATRIX_VENVS, else <home>/venvs."""
    chosen = os.environ.get("CONVMATRIX_VENVS")
    return folder(Path(chosen).expanduser(), "CONVMATRIX_VENVS") if chosen else home() / "venvs"


def results_store() -> Path:
    """Where complete results are kept for --reuse-results: $CONVMATRIX_RESULTS_STORE, else <home>/results."""
    chosen = os.environ.get("CONVMATRIX_RESULTS_STORE")
    return folder(Path(chosen).expanduser(), "CONVMATRIX_RESULTS_STORE") if chosen else home() / "results"


def folder(path: Path, variable: str | None) -> Path:
    """path resolved, where it is a folder or one can be made there; else BadInput naming the
    variable that chose it. Checked here, where the place is chosen: otherwise a symlink loop is a
    traceback (Path.resolve's RuntimeError) and a file in the way a "Not a directory" deep in a run."""
    named = f"{variable}={path}" if variable else f"{path} (CONVMATRIX_HOME is not set)"
    try:
        resolved = path.resolve()
        nearest = existing(resolved)
    except RuntimeError:  # Python 3.11 and 3.12 name a symlink loop only so
        raise BadInput(f"{named}: a symlink loop") from None
    except OSError as exc:
        why = "a symlink loop" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise BadInput(f"{named}: {why}") from None
    if not nearest.is_dir():
        raise BadInput(f"{named}: not a directory" if nearest == resolved else f"{named}: {nearest} is not a directory")
    return resolved


def existing(path: Path) -> Path:
    """path, or the nearest of its parents that exists (a file in the way: that file); os.stat's
    other errors raised."""
    while True:
        try:
            os.stat(path)
            return path
        except (FileNotFoundError, NotADirectoryError):
            if path == path.parent:
                return path
            path = path.parent


def locks() -> Path:
    """The lock files of the holds: <home>/locks/<kind>/<name>."""
    return home() / "locks"


SHARED_IMAGE_LOCKS = Path("/tmp/convmatrix-image-locks")  # sticky and world-writable, like /tmp
# How long a hold on an image waits for an exclusive lock on it: a gc's removal of that image takes
# seconds; the lock files are shared with the machine's other users, one of whom may keep a lock.
IMAGE_HOLD_WAIT_S = 300.0


def image_locks() -> Path:
    """Where the images' lock files live: $CONVMATRIX_IMAGE_LOCKS, else /tmp/convmatrix-image-locks
    (made sticky and world-writable, so that every user's jobs and gc share it), else, where that
    is no folder of this machine's to use (a symlink, a file, not writable, another user's), the
    home's locks/images. A job in a container of its own, on the host's engine, is given the same folder
    by the variable."""
    chosen = os.environ.get("CONVMATRIX_IMAGE_LOCKS")
    if chosen:
        return folder(Path(chosen).expanduser(), "CONVMATRIX_IMAGE_LOCKS")
    shared = SHARED_IMAGE_LOCKS
    try:
        os.mkdir(shared, 0o1777)
        os.chmod(shared, 0o1777)  # the umask took bits from mkdir's
    except FileExistsError:
        pass
    except OSError:
        return locks() / IMAGES
    try:
        found = os.lstat(shared)
    except OSError:
        return locks() / IMAGES
    # Root's or ours only: whoever owns a sticky folder may delete the lock files in it, and a gc
    # would then lock a new file while a job still holds the old one.
    usable = (stat.S_ISDIR(found.st_mode) and found.st_uid in (0, os.getuid())
              and os.access(shared, os.W_OK | os.X_OK))
    return shared if usable else locks() / IMAGES


def lock_path(kind: str, name: str) -> Path:
    if kind not in KINDS or not name or "/" in name or name in (".", "..") or "\0" in name:
        raise ValueError(f"no lock for {kind}/{name!r}")
    return image_locks() / name if kind == IMAGES else locks() / kind / name


def in_shared_folder(path: Path) -> bool:
    """Whether path is a lock file in the images' folder that other users share (not the home's)."""
    folder = image_locks()
    return path.parent == folder and folder != locks() / IMAGES


def lock_folder(kind: str) -> Path:
    """The folder of kind's lock files."""
    return image_locks() if kind == IMAGES else locks() / kind


# What convmatrix writes into a venv or a stored result when it makes one: gc removes only what
# carries it (a folder under venvs/ or results/ that someone else put there is not taken for
# ours), and reads it only as a regular file inside a folder that is no symlink.
MARKER = ".convmatrix-made"
INSTALL_LOG_HEAD = b"# convmatrix: install log"  # the first line make_venv writes into an install log


def mark(path: Path, kind: str) -> None:
    """Mark path (a venv or a stored result convmatrix is making) as convmatrix's own."""
    with tree.Tree.open(path) as folder:
        folder.write(MARKER, f'{{"kind": "{kind}", "pid": {os.getpid()}}}\n'.encode())


def is_marked(root: tree.Tree, name: str) -> bool:
    """Whether root's name is a folder (never a symlink) holding convmatrix's marker, a regular file."""
    try:
        with root.sub(name) as folder:
            found = folder.lstat(MARKER)
    except OSError:  # gone, a symlink, not a folder, not a name
        return False
    return found is not None and stat.S_ISREG(found.st_mode)


def touch(path: Path) -> None:
    """Mark a venv or a stored result used now (its directory's mtime; gc ages by it); best effort."""
    with contextlib.suppress(OSError):
        os.utime(path)


def _locked(path: Path, how: int, *, create: bool = True) -> int | None:
    """An open descriptor of path flocked `how`, or None where a non-blocking lock is taken by
    another. gc removes a lock file it holds once the thing is gone: a lock taken on the file
    that was unlinked meanwhile is let go, and the one there now taken instead. Without `create`
    the file must be there (FileNotFoundError); any error but the lock being taken is raised."""
    while True:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            try:
                # An existing file is opened without O_CREAT: fs.protected_regular (systemd's
                # default) refuses O_CREAT of another user's file in a sticky folder, even a 0666 one.
                fd = os.open(path, flags)
            except FileNotFoundError:
                if not create:
                    raise
                fd = os.open(path, flags | os.O_CREAT, 0o644)
                if in_shared_folder(path):
                    # Every user's jobs mark their use on it (its mtime), whatever this umask.
                    with contextlib.suppress(OSError):
                        os.fchmod(fd, 0o666)
        except PermissionError:
            # A lock file there that this user may not write (another user's, left by a sudo run):
            # flock needs only a read-only descriptor. Anything else (EROFS, a folder not ours to
            # create in) is raised.
            if not os.path.isfile(path) or os.path.islink(path):
                raise
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        try:
            fcntl.flock(fd, how)
        except BlockingIOError:  # EWOULDBLOCK (EAGAIN): taken by another
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _shared(kind: str, name: str) -> int | None:
    """A shared hold (waiting while gc removes the thing), the lock file touched; None where no
    lock file can be made (a read-only home): the job goes on unheld, and gc, which cannot lock
    it either, stops there (exclusive)."""
    try:
        if kind != IMAGES:
            fd = _locked(lock_path(kind, name), fcntl.LOCK_SH)
            assert fd is not None  # a blocking lock is always taken
        else:
            # Shared with the machine's other users: a lock one of them keeps must not stop the run.
            deadline = time.monotonic() + IMAGE_HOLD_WAIT_S
            while (fd := _locked(lock_path(kind, name), fcntl.LOCK_SH | fcntl.LOCK_NB)) is None:
                if time.monotonic() >= deadline:
                    return None
                time.sleep(0.2)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        os.utime(fd)
    return fd


@contextlib.contextmanager
def held(kind: str, name: str) -> Iterator[None]:
    """A shared hold on kind/name for the block."""
    fd = _shared(kind, name)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


_KEPT: dict[Path, int] = {}
_KEPT_GUARD = threading.Lock()


def hold(kind: str, name: str) -> None:
    """A shared hold on kind/name until this process ends (taken once; a second call touches it
    again). For what a run uses from its preparing to its last suite run, which the one who
    prepares is not told of (a venv serves every GPU generation and the blocking re-run)."""
    path = lock_path(kind, name)
    with _KEPT_GUARD:
        if path in _KEPT:
            with contextlib.suppress(OSError):
                os.utime(_KEPT[path])
            return
    # Taken outside the guard: an image's hold may wait (IMAGE_HOLD_WAIT_S), and the other
    # threads preparing cells must not wait with it.
    fd = _shared(kind, name)
    if fd is None:
        return
    with _KEPT_GUARD:
        if path in _KEPT:  # another thread took it meanwhile: one descriptor is enough
            os.close(fd)
        else:
            _KEPT[path] = fd


@contextlib.contextmanager
def exclusive(kind: str, name: str, *, create: bool = True) -> Iterator[bool]:
    """gc's lock on kind/name: whether it was free (then nobody takes a hold until the block
    ends); never waits. A lock file made here is dated to the epoch, so that it never passes for
    a use; without `create` (a dry run, which makes nothing), a missing lock file is free.

    Where the lock cannot be taken at all (a read-only home), BadInput naming the lock file: the
    home is a place the user chose, like an unwritable -o (exit 2). Calling that "held" kept
    everything with exit 0, while a dry run, which makes no lock file, called it free."""
    path = lock_path(kind, name)
    existed = os.path.lexists(path)
    free, fd = _gc_lock(path, create=create)
    try:
        if fd is not None and not existed:
            with contextlib.suppress(OSError):
                os.utime(fd, (0, 0))
        yield free
    finally:
        if fd is not None:
            os.close(fd)


def _gc_lock(path: Path, *, create: bool) -> tuple[bool, int | None]:
    """Whether gc's lock on path is free, and the descriptor that holds it (None: none to hold)."""
    try:
        if not create and not os.path.lexists(path):
            _could_make(path)
            return True, None
        fd = _locked(path, fcntl.LOCK_EX | fcntl.LOCK_NB, create=create)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and not create:
            return True, None  # a dry run's lock file that a gc removed meanwhile: nobody holds it
        if exc.errno == errno.ELOOP:  # the lock file is a symlink (O_NOFOLLOW): never followed, kept
            return False, None
        if isinstance(exc, PermissionError) and in_shared_folder(path) and os.path.isfile(path):
            # Another user's lock file that this one may not even read (a umask of 077): theirs,
            # and kept, as a held one is. The folder is every user's, not a place this user chose.
            return False, None
        raise BadInput(f"{path}: gc cannot take its lock: {exc.strerror or exc}") from None
    return fd is not None, fd


def _could_make(path: Path) -> None:
    """BadInput where the real run could not make path's lock file: its nearest existing folder
    is not writable (a dry run makes nothing, so it asks)."""
    nearest = existing(path.parent)
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise BadInput(f"{path}: gc cannot take its lock: {nearest} is not writable")


def forget(kind: str, name: str) -> None:
    """Remove kind/name's lock file (gc, once the thing is gone); its folder opened without
    following a link from the home (or the images' folder) down; best effort."""
    with contextlib.suppress(OSError):
        if kind == IMAGES:
            with tree.Tree.open(image_locks()) as folder:
                folder.unlink(name)
        else:
            with tree.Tree.open(home()) as root, root.at(("locks", kind)) as folder:
                folder.unlink(name)


def last_held(kind: str, name: str) -> float | None:
    """When kind/name was last held (its lock file's mtime), None where it never was."""
    try:
        return os.stat(lock_path(kind, name), follow_symlinks=False).st_mtime
    except (OSError, ValueError):
        return None
