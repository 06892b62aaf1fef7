"""The SQLite archive's schema, its version (``PRAGMA user_version``) and the migrations to it.

Version 1 (this one)::

    blobs(id, key UNIQUE, content BLOB, bytes)          content stored once per key
    entries(id, session_id, key, kind, origin_json,       one row per (session, key); listings,
            origin_text, turn, bytes, created_at,         sizes and previews come from here and
            preview)                                      never read the content
    scopes(session_id, entries, bytes, first_at, last_at) per-session totals, kept with every write
    meta(name, value)                                     e.g. when retention last ran
    terms(body)                                           contentless FTS5 index, rowid = entries.id;
                                                          each token prefixed with its scope's tag

Version 0 (no ``user_version``, before the scope was part of the index) had ``entries`` without
an id or a preview and an FTS5 table ``fts`` keyed by blob. ``migrate`` rewrites such a file in
one transaction (a crash leaves it as it was; two processes opening it at once migrate it once).
A file with a newer version than this code knows is refused with a clear error, never touched.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from contextkit.archive.query import scope_tag, tagged
from contextkit.archive.records import preview_of, searchable_text
from contextkit.errors import ArchiveError

SCHEMA_VERSION = 1
_TABLES = """
CREATE TABLE IF NOT EXISTS blobs (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    content BLOB NOT NULL,
    bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    origin_json TEXT,
    origin_text TEXT NOT NULL,
    turn INTEGER,
    bytes INTEGER NOT NULL,
    created_at REAL NOT NULL,
    preview TEXT NOT NULL DEFAULT '',
    UNIQUE (session_id, key)
);
CREATE INDEX IF NOT EXISTS entries_key ON entries(key);
CREATE INDEX IF NOT EXISTS entries_scope ON entries(session_id, id, bytes);
CREATE TABLE IF NOT EXISTS scopes (
    session_id TEXT PRIMARY KEY,
    entries INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    first_at REAL NOT NULL,
    last_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS terms USING fts5(body, content='', tokenize='ascii');
"""


def index_body(session_id: str, data: bytes) -> str:
    """What the index holds for one entry: its searchable text's tokens, tagged with its scope."""
    return tagged(scope_tag(session_id), searchable_text(data))


def statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def version_of(conn: sqlite3.Connection) -> int | None:
    """The file's schema version; None for a file with no archive tables yet."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version:
        return int(version)
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'entries'").fetchone()
    return 0 if row else None


def create(conn: sqlite3.Connection) -> None:
    for statement in statements(_TABLES):
        conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def migrate(conn: sqlite3.Connection, label: str, *, progress: Callable[[int], None] | None = None) -> int:
    """Bring the file to ``SCHEMA_VERSION`` inside the caller's write transaction; returns the
    version it found (None → created)."""
    found = version_of(conn)
    if found is None:
        create(conn)
        return SCHEMA_VERSION
    if found > SCHEMA_VERSION:
        raise ArchiveError(
            f"the archive at {label} has schema version {found}, written by a newer contextkit (this one reads "
            f"up to {SCHEMA_VERSION}); upgrade contextkit, or pass Archive(path=...) another file"
        )
    if found == 0:
        _from_0(conn, progress)
    return found


def _from_0(conn: sqlite3.Connection, progress: Callable[[int], None] | None) -> None:
    """Version 0 → 1: entries get an id (in the order they were written) and a preview; the index is
    rebuilt per entry with scope-tagged tokens; per-session totals are computed."""
    conn.execute("DROP INDEX IF EXISTS entries_key")
    conn.execute("ALTER TABLE entries RENAME TO entries_v0")
    conn.execute("DROP TABLE IF EXISTS fts")
    create(conn)
    conn.execute(
        "INSERT INTO entries(session_id, key, kind, origin_json, origin_text, turn, bytes, created_at)"
        " SELECT session_id, key, kind, origin_json, origin_text, turn, bytes, created_at FROM entries_v0"
        " ORDER BY created_at, rowid"
    )
    rows = conn.execute(
        "SELECT e.id, e.session_id, b.content FROM entries e JOIN blobs b ON b.key = e.key ORDER BY e.id"
    )
    for done, (entry_id, session_id, content) in enumerate(rows.fetchall(), 1):
        data = bytes(content)
        conn.execute("UPDATE entries SET preview = ? WHERE id = ?", (preview_of(data), entry_id))
        conn.execute("INSERT INTO terms(rowid, body) VALUES (?, ?)", (entry_id, index_body(session_id, data)))
        if progress is not None and done % 1000 == 0:
            progress(done)
    conn.execute(
        "INSERT INTO scopes(session_id, entries, bytes, first_at, last_at) SELECT session_id, count(*), sum(bytes),"
        " min(created_at), max(created_at) FROM entries GROUP BY session_id"
    )
    conn.execute("DROP TABLE entries_v0")
