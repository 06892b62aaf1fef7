"""Debian's PostgreSQL server as a foreground process in a temporary folder (for the archive's tests).

``PostgresServer().start()`` runs ``initdb`` into its own folder (trust authentication, UTF-8, no
fsync: a test database) and ``postgres -D DIR -h 127.0.0.1 -p PORT -k DIR`` in the foreground, the
way ``nginx.py`` runs nginx; the server stops with its owner (``PR_SET_PDEATHSIG``) and ``stop``.
PostgreSQL refuses to run as root: when the tests run as root, the folder is given to the
``postgres`` user (Debian's package creates it) and both programs run as that user.

    with PostgresServer() as pg:
        url = pg.create_database("archive_tests")   # postgresql://postgres@127.0.0.1:PORT/archive_tests
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from contextkit.errors import ConfigError
from contextkit.sim.nginx import ServerProcess, free_port, wait_for_port

INSTALL_HINT = "`apt-get install postgresql` (scripts/_real_stack.sh does it), or set CONTEXTKIT_PG_BIN to its bin folder"


def _die_with_parent_fn() -> Callable[[], None] | None:
    """A ``preexec_fn`` like ``nginx.die_with_parent`` whose libc handle is loaded here, in the parent:
    the child may already run as the ``postgres`` user, who cannot read this Python's files to import
    ctypes."""
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return preexec


def postgres_bin() -> Path | None:
    """The folder holding ``initdb`` and ``postgres``: ``CONTEXTKIT_PG_BIN``, else the newest
    ``/usr/lib/postgresql/*/bin`` (Debian), else the one on ``PATH``; None when not installed."""
    candidates = [os.environ.get("CONTEXTKIT_PG_BIN")]
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name or 0)
                      if Path(p).parent.name.isdigit() else 0)  # fmt: skip
    candidates += list(reversed(versions))
    found = shutil.which("initdb")
    candidates.append(str(Path(found).parent) if found else None)
    for folder in candidates:
        if folder and (Path(folder) / "initdb").is_file() and (Path(folder) / "postgres").is_file():
            return Path(folder)
    return None


class PostgresServer(ServerProcess):
    """A throw-away PostgreSQL cluster listening on 127.0.0.1 (see the module docstring)."""

    stop_signal = signal.SIGINT  # PostgreSQL's fast shutdown
    stop_grace = 15

    def __init__(self, directory: str | Path | None = None) -> None:
        super().__init__(directory, prefix="ck-postgres-")
        self.user = "postgres"

    @property
    def data(self) -> Path:
        return self.dir / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def _as_postgres(self) -> tuple[dict[str, Any], int | None, int | None]:
        """Popen keyword arguments that run the server's programs as a non-root user."""
        if os.geteuid() != 0:
            return {}, None, None
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            raise ConfigError("PostgreSQL refuses to run as root and there is no 'postgres' user; "
                              "create one (Debian's postgresql package does) or run the tests as another user") from None  # fmt: skip
        return {"user": account.pw_uid, "group": account.pw_gid}, account.pw_uid, account.pw_gid

    def start(self, timeout: float = 60.0) -> Self:
        binaries = postgres_bin()
        if binaries is None:
            raise ConfigError(f"PostgreSQL's server is not installed: {INSTALL_HINT}")
        as_user, uid, gid = self._as_postgres()
        self.dir.mkdir(parents=True, exist_ok=True)
        if uid is not None and gid is not None:
            os.chown(self.dir, uid, gid)
        self.dir.chmod(0o700)
        log = (self.dir / "server.log").open("ab")
        if uid is not None and gid is not None:
            os.chown(self.dir / "server.log", uid, gid)
        init = subprocess.run(
            [str(binaries / "initdb"), "-D", str(self.data), "-U", self.user, "-A", "trust", "-E", "UTF8",
             "--no-locale", "--no-sync"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False, **as_user,
        )  # fmt: skip
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stdout.decode(errors='replace')[-1500:]}")
        self.port = free_port()
        self.process = subprocess.Popen(
            [str(binaries / "postgres"), "-D", str(self.data), "-h", "127.0.0.1", "-p", str(self.port),
             "-k", str(self.dir), "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=60", "-c", "shared_buffers=32MB"],
            stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent_fn(), **as_user,
        )  # fmt: skip
        try:
            wait_for_port(self.port, timeout=timeout, process=self.process)
            self._wait_ready(timeout)
        except (RuntimeError, TimeoutError, OSError):
            self.stop()
            raise RuntimeError(f"postgres did not start: {self.log()[-1500:]}") from None
        return self

    def _wait_ready(self, timeout: float) -> None:
        """Until the server accepts a session (it listens before it finishes starting up)."""
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url(), connect_timeout=5):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise TimeoutError("postgres did not accept connections") from None
                time.sleep(0.1)

    def create_database(self, name: str) -> str:
        """A new database ``name`` (dropped first if it exists); its URL."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def log(self) -> str:
        path = self.dir / "server.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
