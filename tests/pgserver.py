"""A real PostgreSQL server for the history's tests: initdb into a temporary folder, postgres on a
unix socket there (no TCP port), torn down after. Run as the `postgres` user (`runuser -u
postgres`) when the tests run as root, as CI's do: initdb refuses root ("cannot be run as root").

Debian's `postgresql` package (what .ci/run installs) puts its programs under
/usr/lib/postgresql/<major>/bin, off PATH; a source or distribution build on PATH is found first."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

USER = "postgres"  # the database's superuser, and the OS user the server runs as under root


def binaries() -> Path | None:
    """The folder holding initdb and postgres: on PATH, else Debian's newest /usr/lib/postgresql/*/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(found).parent
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                    key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    return debian[-1].parent if debian else None


def as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", USER, "--", *command] if os.geteuid() == 0 else command


@contextlib.contextmanager
def server() -> Iterator[str]:
    """A fresh server; yields the SQLAlchemy URL of its `postgres` database over the socket."""
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("no PostgreSQL found (initdb): install Debian's postgresql (.ci/run does)")
    base = Path(tempfile.mkdtemp(prefix="cm-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        # The server user must own its folders, and reach them through the temporary one.
        os.chmod(base, 0o755)
        shutil.chown(sock, USER)
        data.mkdir(mode=0o700)
        shutil.chown(data, USER)
    process = None
    try:
        subprocess.run(as_server_user([str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "-A", "trust",
                                       "--no-sync", "-E", "UTF8", "--locale", "C"]),
                       check=True, capture_output=True, text=True)
        # fsync off: a test server whose data dies with it (start-up and commits a few times faster).
        process = subprocess.Popen(as_server_user([str(bin_dir / "postgres"), "-D", str(data), "-k", str(sock),
                                                   "-c", "listen_addresses=", "-c", "fsync=off",
                                                   "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not any(sock.glob(".s.PGSQL.*")):
            if process.poll() is not None or time.monotonic() > deadline:
                err = process.stderr.read().decode(errors="replace") if process.stderr else ""
                raise RuntimeError(f"postgres did not start: {err[-2000:]}")
            time.sleep(0.05)
        url = f"postgresql://{USER}@/postgres?host={sock}"
        wait_ready(url, deadline)
        yield url
    finally:
        if process is not None:
            stop(process, data)
        shutil.rmtree(base, ignore_errors=True)


def stop(process: subprocess.Popen[bytes], data: Path) -> None:
    """postgres's fast shutdown (SIGINT: clients cut, no wait for them), sent to postgres itself:
    runuser, its parent under root, passes no SIGINT on."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        os.kill(pid, signal.SIGINT)
    except (OSError, ValueError):
        process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stderr:
        process.stderr.close()


def wait_ready(url: str, deadline: float) -> None:
    import psycopg

    while True:
        try:
            psycopg.connect(url, connect_timeout=5).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def fresh_database(url: str, name: str) -> str:
    """A new empty database on the server at url (one per test), its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.replace("/postgres?", f"/{name}?", 1)
