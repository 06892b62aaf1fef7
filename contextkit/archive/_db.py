"""SQLite plumbing for the archive: schema, the shared connection, row types and encodings.

Content is stored as UTF-8 bytes encoded with ``surrogatepass`` so *any* Python ``str`` (lone
surrogates, NUL, megabytes) round-trips byte-exact; the FTS index sees a valid-text copy.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextkit.errors import ArchiveError
from contextkit.settings import archive_path_from_env

if TYPE_CHECKING:
    from contextkit.messages import Origin

BUSY_TIMEOUT_MS = 30_000
PREVIEW_CHARS = 120
_SCHEMA = """
CREATE TABLE IF NOT EXISTS blobs (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    content BLOB NOT NULL,
    bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS entries (
    session_id TEXT NOT NULL,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    origin_json TEXT,
    origin_text TEXT NOT NULL,
    turn INTEGER,
    bytes INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (session_id, key)
);
CREATE INDEX IF NOT EXISTS entries_key ON entries(key);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(body, content='', tokenize='unicode61 remove_diacritics 2');
"""


@dataclass(frozen=True)
class ArchiveEntry:
    """One archived item as people see it (``archive.entries()``)."""

    key: str
    session_id: str
    kind: str
    origin: str
    bytes: int
    turn: int | None
    created_at: float
    preview: str


@dataclass(frozen=True)
class SearchHit:
    """A ranked full-text match (lower ``score`` is better, as BM25 in SQLite)."""

    key: str
    kind: str
    origin: str
    score: float


def default_archive_path(env: Mapping[str, str] | None = None) -> Path:
    """``CONTEXTKIT_ARCHIVE``, else ``$XDG_DATA_HOME/contextkit/archive.sqlite``, else ``~/.local/share/...``."""
    env = os.environ if env is None else env
    configured = archive_path_from_env(env)
    if configured:
        return Path(configured).expanduser()
    data_home = env.get("XDG_DATA_HOME", "").strip()
    base = Path(data_home).expanduser() if data_home else Path.home() / ".local" / "share"
    return base / "contextkit" / "archive.sqlite"


def encode_content(content: str) -> bytes:
    return content.encode("utf-8", "surrogatepass")


def decode_content(data: bytes) -> str:
    return bytes(data).decode("utf-8", "surrogatepass")


def searchable_text(data: bytes) -> str:
    """What the FTS index sees: valid text only (surrogates become U+FFFD, NUL a space)."""
    return bytes(data).decode("utf-8", "replace").replace("\x00", " ")


def origin_parts(origin: str | Mapping[str, Any] | Origin | None, turn: int | None) -> tuple[str | None, str]:
    """``(origin_json, human text)``; the text is one line so it fits ``Location:`` lines."""
    if origin is None:
        data: dict[str, Any] = {}
    elif isinstance(origin, str):
        data = {"text": origin}
    elif isinstance(origin, Mapping):
        data = dict(origin)
    elif is_dataclass(origin) and not isinstance(origin, type):  # messages.Origin
        data = {k: v for k, v in asdict(origin).items() if v is not None}
    else:
        data = {"text": str(origin)}
    if turn is not None and "turn" not in data:
        data["turn"] = turn
    if "text" in data:
        text = str(data["text"])
    else:
        parts = [str(data[name]) for name in ("role", "tool") if data.get(name)]
        if data.get("path"):
            where = str(data["path"])
            start, end = data.get("line_start", data.get("start")), data.get("line_end", data.get("end"))
            if start is not None:
                where += f":{start}-{end if end is not None else ''}"
            parts.append(where)
        if data.get("turn") is not None:
            parts.append(f"turn {data['turn']}")
        text = " ".join(parts)
    text = " ".join(text.replace("|", "/").split())[:200] or "-"
    return (json.dumps(data, ensure_ascii=False, default=str) if data else None), text


def single_line(text: str) -> str:
    printable = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(printable.split())[:PREVIEW_CHARS]


def _prepare(conn: sqlite3.Connection) -> None:
    """WAL mode and the schema. Switching a new file to WAL does not wait on the busy handler, so
    processes opening the same new archive at once get "database is locked": retry until the busy
    timeout instead."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("COMMIT")
            return
        except sqlite3.OperationalError as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.005, 0.05))


class Store:
    """The shared connection and its lock; refcounted by the Archive views that use it."""

    def __init__(self, target: str, label: str) -> None:
        self.label = label
        self.lock = threading.RLock()
        self.users = 0
        self.conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                target, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000
            )
            self.conn = conn
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            _prepare(conn)
        except sqlite3.Error as exc:
            self.close()
            raise ArchiveError(
                f"cannot open the contextkit archive at {label}: {exc}. Pass Archive(path=...) a writable "
                "SQLite file (or a new file name), set CONTEXTKIT_ARCHIVE, or use Archive.in_memory()"
            ) from None

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None

    @contextmanager
    def cursor(self, action: str, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        with self.lock:
            conn = self.conn
            if conn is None:
                raise ArchiveError(f"the archive at {self.label} is closed; open a new Archive to {action}")
            try:
                if write:
                    conn.execute("BEGIN IMMEDIATE")
                yield conn
                if write:
                    conn.execute("COMMIT")
            except BaseException as exc:
                if write and conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise ArchiveError(
                        f"could not {action} in the archive at {self.label}: {exc}. Check that the file is "
                        "writable and not on a network drive, or use another path"
                    ) from None
                raise
