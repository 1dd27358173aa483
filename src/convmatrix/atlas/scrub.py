"""What export lets through of free text: one line of a failure's message, with whatever could
name the fleet taken out (docs/atlas.md, "What is kept and what is dropped").

A message comes from torch, cuDNN, the suite or a user's case file, and may quote a path (a
traceback's file, a cache folder under a home), a host name, a user name, an address, a URL of
an internal service or a device's UUID. Scrubbing replaces each with a placeholder: the run
folders first, then every shape of path, address and identifier, whoever's it is, then the words
the exporter knows are this fleet's own (its host and user names) wherever they are left; the
rest is cut to one bounded line. It is a second line of defence: the reason export builds is
structured first (family, cuDNN status and sub-code), and the rest of a bundle is allow-listed
fields only."""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from convmatrix.escape import one_line

MAX_REASON = 200  # characters of a scrubbed line (the bundle allows 300: room for a family prefix)
MIN_WORD = 2  # a shorter host or user name is not replaced: it would blank every "a" of a message

# What a path may hold, to the next space, quote, bracket or list separator; a POSIX one stops at a
# colon too (a PATH list's separator, or "file.py:42", whose line number stays).
_IN_PATH = r"""[^\s'"`<>|,;]"""
_IN_POSIX = r"""[^\s'"`<>|,;:()\[\]]"""
# The shapes, most specific first: a URL before the path inside it, an email before its host.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # A file: URL of any form: file:/x, file:///x, file://host/x (the last two are URLs below too).
    (re.compile(r"\bfile:[/\\]\S*", re.IGNORECASE), "<url>"),
    (re.compile(r"\b[a-z][a-z0-9+.-]{1,15}://\S+", re.IGNORECASE), "<url>"),
    # (from the start of a run only: the same matches, in linear time on a long run without "@")
    (re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)*", re.ASCII), "<user@host>"),
    # A device's UUID (GPU-…, MIG-…) or any UUID-shaped id
    # (MIG-GPU-<uuid>/<gi>/<ci> before driver R470).
    (re.compile(r"\b(?:(?:MIG-)?(?:GPU|MIG)-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
                r"(?:/[0-9]+)*", re.IGNORECASE), "<uuid>"),
    # Windows paths: a drive (C:\, C:/) or a UNC share (\\server\share\..., \\?\C:\..., \\.\pipe),
    # running on past a space while the next word goes on with a backslash (C:\Program Files\x).
    (re.compile(rf"(?:\b[A-Za-z]:[\\/]|\\\\(?=[\w.?$-])){_IN_PATH}*(?:[ ](?=[^\s'\"`<>|,;\\]+\\){_IN_PATH}*)*"),
     "<path>"),
    # A host before a path (nfs01:/export/x, gpu-7.lab:/data, an scp target): the host goes; its
    # path is the next shape's.
    (re.compile(r"(?<![\w.@<>/\\:~-])[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9])?(?=:/)"), "<host>"),
    # POSIX paths: from the root, a home (~, ~user) or a relative one going up (../), after a space,
    # a quote, "=" or a colon (host:/path, file:/path); a PATH list is one path, every entry that
    # holds a "/" or a ~ with it. A bare "/" or "a/b" inside a word stays.
    (re.compile(rf"(?<![\w./-])(?:~[\w.-]*|\.\.?)?/{_IN_POSIX}+"
                rf"(?::(?:{_IN_POSIX}*/{_IN_POSIX}*|~{_IN_POSIX}*))*"), "<path>"),
    # IPv4, with a port or not (a four-part version, 9.1.0.70, goes too: the safe side), and IPv6
    # in its full or compressed forms (MAC addresses go with them)
    (re.compile(r"\b(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?::[0-9]{1,5})?\b"), "<ip>"),
    # (and times of day, 12:30:45); C++ scopes (at::native, c10::Error) stay.
    (re.compile(r"(?<![\w:])[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}(?![\w:])", re.IGNORECASE), "<ip>"),
    # Long hex runs: pointers (0x7ffd...), container and image ids, hashes that could name a build.
    (re.compile(r"\b(?:0x)?[0-9a-f]{12,}\b", re.IGNORECASE), "<hex>"),
    # A host by its domain name, whoever's it is (a peer rank, a file server: not among the names
    # the runs recorded): a dotted name ending in a public or internal top-level domain. Module
    # paths (torch.nn.functional, at::native) end in none of these.
    (re.compile(r"(?<![\w.-])(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:com|net|org|edu|gov|mil|io|ai|dev|cloud|"
                r"local|localdomain|internal|intranet|lan|corp|home|cluster|svc)(?![\w.-])", re.IGNORECASE), "<host>"),
)
_REPEATED = re.compile(r"(<[a-z@]{2,9}>)\1+")


@dataclass(frozen=True, kw_only=True)
class Secrets:
    """What names this fleet, as export found it: replaced wherever it occurs."""

    hosts: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()


def secrets_here(hosts: Iterable[str] = (), paths: Iterable[str | Path] = ()) -> Secrets:
    """This machine's names and the exporter's, with the hosts and folders the runs recorded."""
    names = [*hosts, socket.gethostname(), socket.getfqdn()]
    users = [os.environ.get(k, "") for k in ("USER", "LOGNAME", "USERNAME")]
    with contextlib.suppress(KeyError, OSError):  # no passwd entry for the uid (a container): none
        users.append(getpass.getuser())
    folders = [str(p) for p in paths]
    for folder in [*folders, str(Path.home()), os.getcwd()]:
        folders.append(os.path.realpath(folder))
    # A host's short name too (gpu-7.lab.example.com -> gpu-7): messages quote either.
    names += [n.split(".")[0] for n in names]
    return Secrets(hosts=_words(names), users=_words(users), paths=_words(folders))


def _words(found: Iterable[str]) -> tuple[str, ...]:
    """Distinct, long enough, longest first (so that a longer name is replaced before its part)."""
    kept = {w for w in (f.strip() for f in found) if len(w) >= MIN_WORD and w not in ("/", ".", "..")}
    return tuple(sorted(kept, key=lambda w: (-len(w), w)))


def scrub(text: str, secrets: Secrets) -> str:
    """The first non-blank line of text, one line, with this fleet's names, every path, address,
    URL and long identifier replaced, and at most MAX_REASON characters."""
    line = next((one_line(part) for part in text.splitlines() if part.strip()), "")
    line = _REPEATED.sub(r"\1", _replaced(line, secrets))  # <path><path> (a run folder, then the rest of its path): one
    # one_line showed control characters as \xNN; whatever else is not printable goes.
    line = "".join(c if c.isprintable() else "?" for c in line)
    return line if len(line) <= MAX_REASON else line[:MAX_REASON - 3] + "..."


def names(text: str, secrets: Secrets, *, shapes: bool = True) -> bool:
    """Whether text holds what scrub would replace: this fleet's paths, host or user names, and
    (shapes) any path, address, URL, UUID, domain name or long hex run. For a field export keeps
    whole or not at all (a case id, a GPU model, a version's local part, a repro's word, a
    source's URL): one that names something is dropped, not scrubbed into another value."""
    return _replaced(text, secrets, shapes=shapes) != text


def _replaced(line: str, secrets: Secrets, *, shapes: bool = True) -> str:
    for path in secrets.paths:
        line = line.replace(path, "<path>")
    for pattern, placeholder in _PATTERNS if shapes else ():  # before the names: a path is one <path>
        line = pattern.sub(placeholder, line)
    for words, placeholder in ((secrets.hosts, "<host>"), (secrets.users, "<user>")):
        for word in words:
            line = re.sub(rf"(?<![A-Za-z0-9]){re.escape(word)}(?![A-Za-z0-9])", placeholder, line, flags=re.IGNORECASE)
    return line
