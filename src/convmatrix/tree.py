"""The one owner of a tree convmatrix writes: a run directory, a cell's result, the home (venvs,
the results store, locks). Every create, open, rename, walk and delete under it goes through a
`Tree`: a directory opened once as a file descriptor (O_DIRECTORY | O_NOFOLLOW), and every name
below it opened relative to that descriptor (dir_fd=), one component at a time, never through a
symlink.

Why descriptors and not path strings: what lies under a result was written by a cell, and a cell
runs third-party code (wheels, base images, a suite users extend). A path string joined from it
(`<cell>/explain/<name>/log.txt`) follows whatever symlink the cell planted on the way
(`explain -> /elsewhere`), and a check before the open (is_symlink, then open) races with it. A
descriptor opened with O_NOFOLLOW at each step cannot be led out of the tree.

The rules, in one place:
- a name is one path component: no '/', no NUL, not '.' or '..', not empty, at most NAME_MAX
  bytes (check_name); every method that takes a name checks it;
- files are read only when regular (a FIFO would hang, a device read forever), with a bound;
- new files are made O_EXCL | O_NOFOLLOW under a fresh name, then renamed over the old one (a
  rename replaces a symlink or a FIFO, never follows it): readers see the old file or the new;
- the harness's own directories (`explain/`, `blocking/`, `evidence/`) are opened with
  `sub(create=True)`, which replaces a symlink or a file the cell left under that name by a
  real directory, instead of following it;
- walks are iterative, bounded in depth (MAX_DEPTH) and in entries (MAX_ENTRIES): past either,
  Refused, one line; rmtree has no depth bound (a subtree at MAX_DEPTH is moved up to the top of
  what is being removed and emptied from there, so no more than MAX_DEPTH descriptors are ever
  open) and stops past MAX_ENTRIES.

Stdlib only, level 0 (docs/architecture.md): every level may use it, and nothing under a run or
the home is written any other way (tests/unit/test_architecture.py checks the writes).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

NAME_MAX = 255  # bytes of one name (Linux's NAME_MAX)
MAX_DEPTH = 32  # levels a walk or a copy descends (a result nests 4: explain/<name>/cudnn_off/<file>)
MAX_ENTRIES = 1_000_000  # entries one walk or one rmtree visits (a torch venv has ~20,000)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC


class Refused(OSError):
    """A name, a file or a tree that convmatrix does not follow, read or walk: one line saying
    which and why."""


def check_name(name: str) -> str:
    """name, when it is one path component convmatrix may make or open; else Refused."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\0" in name:
        raise Refused(f"{name!r}: not a file name (one component: no '/', no NUL, not '.' or '..')")
    try:
        size = len(os.fsencode(name))
    except UnicodeError:
        raise Refused(f"{name!r}: not a file name (not encodable)") from None
    if size > NAME_MAX:
        raise Refused(f"{name[:40]!r}...: not a file name (longer than {NAME_MAX} bytes)")
    return name


def _lstat(name: str, fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def describe(mode: int) -> str:
    """What a file is, in a word or two: said where one is not what was wanted."""
    for test, word in ((stat.S_ISREG, "a regular file"), (stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device")):
        if test(mode):
            return word
    return "not a regular file"


class Tree:
    """A directory held open; every operation under it is relative to its descriptor. `path` is
    where it was opened, for messages and for handing to a subprocess (a suite's --results-dir)."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    # --- opening --------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path | str, *, create: bool = False) -> Tree:
        """The directory at path, its last component not followed (its parents are the user's
        or the harness's choice, above any cell's reach). create: made, with its parents, when
        missing."""
        path = Path(path)
        if create:
            with contextlib.suppress(FileExistsError):
                os.makedirs(path)
        try:
            fd = os.open(path, _DIR)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise Refused(f"{path} is a symlink or not a directory; not followed") from None
            raise
        return cls(fd, path)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def child(self, name: str) -> Path:
        return self.path / check_name(name)

    def lstat(self, name: str) -> os.stat_result | None:
        """name's own status (a symlink's, not its target's); None when there is none."""
        return _lstat(check_name(name), self.fd)

    def is_dir(self, name: str) -> bool:
        found = self.lstat(name)
        return found is not None and stat.S_ISDIR(found.st_mode)

    def sub(self, name: str, *, create: bool = False) -> Tree:
        """The directory name under this one, never through a symlink. Refused where name is a
        symlink or not a directory, unless create: then the harness's own name is made a real
        directory (whatever a cell left there, a link or a file, is removed, never followed)."""
        check_name(name)
        for _attempt in range(3):
            try:
                return Tree(os.open(name, _DIR, dir_fd=self.fd), self.path / name)
            except FileNotFoundError:
                if not create:
                    raise
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                found = _lstat(name, self.fd)
                if not create:
                    raise Refused(f"{self.path / name} is {describe(found.st_mode) if found else 'gone'}, "
                                  "not a directory; not followed") from None
                self.remove(name)
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=self.fd)
        raise Refused(f"{self.path / name}: kept changing while it was made a directory")

    def at(self, parts: Iterable[str], *, create: bool = False) -> Tree:
        """The directory parts[0]/parts[1]/... under this one, one component at a time (sub);
        a new Tree the caller closes (this one when parts is empty: a duplicate descriptor)."""
        here = Tree(os.dup(self.fd), self.path)
        for part in parts:
            try:
                nxt = here.sub(part, create=create)
            finally:
                here.close()
            here = nxt
        return here

    # --- files ----------------------------------------------------------------------------------

    def open_read(self, name: str) -> BinaryIO:
        """name for reading: a regular file, never a symlink, a FIFO or a device (Refused)."""
        return self._regular(name, _READ, "rb", {errno.ELOOP: "a symlink (not followed)"}, "read")

    def _regular(self, name: str, flags: int, how: str, refused: dict[int, str], verb: str) -> BinaryIO:
        """name opened with flags (O_NOFOLLOW among them) as a regular file only: an open that
        fails with an errno in refused, or anything but a regular file, is Refused, saying so."""
        check_name(name)
        try:
            fd = os.open(name, flags, 0o644, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in refused:
                raise Refused(f"{self.path / name}: {refused[exc.errno]}") from None
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise Refused(f"{self.path / name}: not a regular file ({describe(info.st_mode)}); not {verb}")
        os.set_blocking(fd, True)
        return cast(BinaryIO, os.fdopen(fd, how))  # a binary mode ("rb", "ab"): mypy sees only a str

    def read(self, name: str, limit: int) -> bytes:
        """A regular file's bytes, at most limit of them (Refused past it: nothing of it is used)."""
        with self.open_read(name) as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise Refused(f"{self.path / name}: larger than {limit:,} bytes; not read")
        return data

    def _fresh(self, name: str, mode: int) -> tuple[str, int]:
        """A new file beside name, made O_EXCL under a name nobody could plant beforehand."""
        for _attempt in range(8):
            # Cut by bytes, not characters: 127 'é' are 254 bytes, and the name must stay in NAME_MAX.
            tmp = f".{os.fsdecode(os.fsencode(name)[:200])}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
            try:
                return tmp, os.open(tmp, _NEW, mode, dir_fd=self.fd)
            except FileExistsError:
                continue
        raise Refused(f"{self.path / name}: no fresh temporary name beside it")

    def write(self, name: str, data: bytes | Iterable[bytes], *, mode: int = 0o644) -> None:
        """name's new content, written whole or not at all: a fresh file beside it (O_EXCL, a
        random name), renamed over whatever is there (a symlink or a FIFO is replaced, never
        followed); a write that fails leaves the old file and no temporary one."""
        check_name(name)
        tmp = ""
        try:
            tmp, fd = self._fresh(name, mode)
            with os.fdopen(fd, "wb") as handle:
                if isinstance(data, bytes | bytearray):
                    handle.write(data)
                else:
                    handle.writelines(data)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        finally:
            if tmp:
                with contextlib.suppress(OSError):  # renamed, or never made
                    os.unlink(tmp, dir_fd=self.fd)

    def write_text(self, name: str, text: str | Iterable[str]) -> None:
        self.write(name, text.encode("utf-8") if isinstance(text, str) else (t.encode("utf-8") for t in text))

    def append(self, name: str) -> BinaryIO:
        """name opened for appending (made when missing), a regular file only: never a symlink
        (O_NOFOLLOW) or a FIFO the cell left there (Refused)."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
        # a symlink; a FIFO with no reader
        refused = dict.fromkeys((errno.ELOOP, errno.ENXIO), "not a regular file; not written")
        return self._regular(name, flags, "ab", refused, "written")

    def open_lock(self, name: str, *, create: bool = True, mode: int = 0o644) -> int:
        """A descriptor of name for an flock (read and write), made when missing where create;
        never a symlink (OSError ELOOP)."""
        check_name(name)
        flags = os.O_RDWR | os.O_NOFOLLOW | _CLOEXEC | (os.O_CREAT if create else 0)
        return os.open(name, flags, mode, dir_fd=self.fd)

    # --- names ----------------------------------------------------------------------------------

    def mkdir(self, name: str, *, exist_ok: bool = True) -> None:
        check_name(name)
        try:
            os.mkdir(name, 0o755, dir_fd=self.fd)
        except FileExistsError:
            if not exist_ok or not self.is_dir(name):
                raise

    def unlink(self, name: str, *, missing_ok: bool = True) -> None:
        """name removed (a symlink itself, never its target); a directory is refused: rmtree."""
        check_name(name)
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def rename(self, old: str, new: str, *, into: Tree | None = None) -> None:
        """old (under this tree) renamed to new (under `into`, else this tree), replacing it."""
        os.replace(check_name(old), check_name(new), src_dir_fd=self.fd, dst_dir_fd=(into or self).fd)

    def remove(self, name: str) -> None:
        """name gone, whatever it is: a file or a link unlinked, a directory removed whole (rmtree)."""
        found = self.lstat(name)
        if found is None:
            return
        if stat.S_ISDIR(found.st_mode):
            self.rmtree(name)
        else:
            self.unlink(name)

    def entries(self) -> list[tuple[str, os.stat_result]]:
        """The names in this directory with their own status (symlinks not followed), sorted."""
        found = []
        for name in sorted(os.listdir(self.fd)):
            info = _lstat(name, self.fd)
            if info is not None:
                found.append((name, info))
        return found

    def rmtree(self, name: str, *, max_entries: int = MAX_ENTRIES) -> None:
        """The directory name and everything under it, never through a symlink, however deep: a
        subdirectory at MAX_DEPTH is moved up into the top directory being removed and emptied
        from there, so at most MAX_DEPTH descriptors are open. Refused past max_entries (what is
        removed by then stays removed)."""
        check_name(name)
        found = _lstat(name, self.fd)
        if found is None:
            return
        if not stat.S_ISDIR(found.st_mode):
            os.unlink(name, dir_fd=self.fd)
            return
        seen = 0
        moved = 0
        # Each level: its descriptor, its name in the level above, the names left to look at.
        stack: list[tuple[int, str, list[str]]] = [(os.open(name, _DIR, dir_fd=self.fd), name, [])]
        stack[0][2].extend(os.listdir(stack[0][0]))
        try:
            while stack:
                fd, here, left = stack[-1]
                if not left:
                    parent = stack[-2][0] if len(stack) > 1 else self.fd
                    try:
                        os.rmdir(here, dir_fd=parent)
                    except OSError as exc:
                        if exc.errno != errno.ENOTEMPTY:
                            raise
                        left.extend(os.listdir(fd))  # moved up into it meanwhile, or made by another
                        if not left:
                            raise
                        continue
                    os.close(fd)
                    stack.pop()
                    continue
                entry = left.pop()
                seen += 1
                if seen > max_entries:
                    raise Refused(f"{self.path / name}: more than {max_entries:,} entries; not removed whole")
                info = _lstat(entry, fd)
                if info is None:
                    continue
                if not stat.S_ISDIR(info.st_mode):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry, dir_fd=fd)
                    continue
                if len(stack) >= MAX_DEPTH:
                    moved += 1
                    flat = f".rm-{os.getpid()}-{moved}"
                    while _lstat(flat, stack[0][0]) is not None:
                        moved += 1
                        flat = f".rm-{os.getpid()}-{moved}"
                    os.rename(entry, flat, src_dir_fd=fd, dst_dir_fd=stack[0][0])
                    continue
                child = os.open(entry, _DIR, dir_fd=fd)
                stack.append((child, entry, os.listdir(child)))
        finally:
            for fd, _, _ in stack:
                os.close(fd)

    # --- walks ----------------------------------------------------------------------------------

    def walk(self, *, max_depth: int = MAX_DEPTH,
             max_entries: int = MAX_ENTRIES) -> Iterator[tuple[tuple[str, ...], str, os.stat_result]]:
        """(the directories down to it, name, its own status) for everything under this tree,
        iteratively, never through a symlink; Refused past max_depth levels or max_entries."""
        seen = 0
        stack: list[tuple[Tree, tuple[str, ...]]] = [(self.at(()), ())]
        try:
            while stack:
                here, parts = stack.pop()
                try:
                    for name, info in here.entries():
                        seen += 1
                        if seen > max_entries:
                            raise Refused(f"{self.path}: more than {max_entries:,} entries; not walked")
                        yield parts, name, info
                        if stat.S_ISDIR(info.st_mode):
                            if len(parts) + 1 >= max_depth:
                                raise Refused(f"{self.path}: deeper than {max_depth} levels "
                                              f"({'/'.join((*parts, name))[:120]}...); not walked")
                            with contextlib.suppress(Refused, FileNotFoundError):
                                stack.append((here.sub(name), (*parts, name)))
                finally:
                    here.close()
        finally:
            for tree, _ in stack:
                tree.close()

    def copy_into(self, target: Tree, *, only: Iterable[str] | None = None, limit: int,
                  max_depth: int = MAX_DEPTH, max_entries: int = MAX_ENTRIES) -> None:
        """The regular files and directories under this tree into target (of this tree's top
        level only the names in `only`, when given), none bigger than limit: symlinks, FIFOs,
        devices and sockets are dropped (never followed), and so are setuid/setgid bits (each
        file is made anew, 0644). Refused past max_depth or max_entries (what was copied stays)."""
        wanted = set(only) if only is not None else None
        open_targets: dict[tuple[str, ...], Tree] = {(): target.at(())}
        try:
            for parts, name, info in self.walk(max_depth=max_depth, max_entries=max_entries):
                if not parts and wanted is not None and name not in wanted:
                    continue
                into = open_targets.get(parts)
                if into is None:
                    continue  # under a directory that was not copied
                if stat.S_ISDIR(info.st_mode):
                    open_targets[(*parts, name)] = into.sub(name, create=True)
                elif stat.S_ISREG(info.st_mode) and info.st_size <= limit:
                    with self.at(parts) as source, contextlib.suppress(Refused):
                        into.write(name, source.read(name, limit))
        finally:
            for tree in open_targets.values():
                tree.close()


def append_to(path: Path, base: Path | None = None) -> BinaryIO:
    """path opened for appending (Tree.append) from base (default: its parent), every folder on
    the way opened without following a link: a log the harness keeps writing while a suite runs."""
    with parent_of(path, base) as (folder, name):
        return folder.append(name)


def under(base: Path, path: Path) -> tuple[str, ...]:
    """path's components below base (Refused when it is not below it, or climbs with '..')."""
    try:
        parts = path.relative_to(base).parts
    except ValueError:
        raise Refused(f"{path}: outside {base}") from None
    for part in parts:
        check_name(part)
    return parts


@contextlib.contextmanager
def parent_of(path: Path, base: Path | None = None, *, create: bool = False) -> Iterator[tuple[Tree, str]]:
    """The directory holding path, opened from base (trusted; default: path's own parent) one
    component at a time, never through a symlink; and path's name in it. With create, missing
    directories on the way (and a link or file a cell left in their place) are made real ones."""
    parts: tuple[str, ...]
    if base is None:
        # path's own name below its parent, as under() would give it, without its pathlib
        # arithmetic: a fleet's report reads 5,000 files this way (bench/run.py report_merge_s).
        base, parts = path.parent, ((check_name(path.name),) if path.name else ())
    else:
        parts = under(base, path)
    if not parts:
        raise Refused(f"{path}: no file name below {base}")
    with Tree.open(base, create=create) as root, root.at(parts[:-1], create=create) as folder:
        yield folder, parts[-1]
