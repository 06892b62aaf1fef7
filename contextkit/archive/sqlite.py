"""The embedded archive backend: one SQLite file (WAL mode), one shared connection per file per process.

``SqliteStore.shared(path)`` hands every ``Archive`` of the same file in one process the same
connection (refcounted; closed with the last user), so a process with thousands of sessions holds
one file's descriptors once. A lock serializes its use (thread- and asyncio-safe); SQLite's file
locks plus ``busy_timeout`` make several processes writing at once safe. A process that forks gets
its own connection (the key includes the process id). The schema and its migrations are in
``sqlite_schema``; every SQL error is explained by ``diagnose``.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

from contextkit.archive import sqlite_schema as schema
from contextkit.archive.diagnose import explain, explain_os
from contextkit.archive.query import COMMON_AT, Query, scope_tag, split_common
from contextkit.archive.records import ScopeInfo, SearchHit, preview_of
from contextkit.archive.sharing import SharedStore
from contextkit.errors import ArchiveError

BUSY_TIMEOUT_MS = 30_000
RECLAIM_SHARE = 0.25  # free pages above this share of the file: reclaiming them pays
RECLAIM_MIN_BYTES = 1 << 20
DELETE_CHUNK = 500
ROW = "e.id, e.key, e.session_id, e.kind, e.origin_text, e.bytes, e.turn, e.created_at, e.preview"
Row = tuple[int, str, str, str, str, int, int | None, float, str]


class SqliteStore(SharedStore):
    """One SQLite database (a file or ``:memory:``) and its connection; see the module docstring."""

    _shared: ClassVar[dict[tuple[int, str], SqliteStore]] = {}
    # re-entrant: an Archive dropped without close() is released by a weakref finalizer, which the
    # garbage collector may run in this very thread while it holds the lock (inside shared(), say)
    _shared_lock: ClassVar[threading.RLock] = threading.RLock()
    kind = "sqlite"

    def __init__(self, target: str, label: str, path: Path | None) -> None:
        self.label = label
        self.path = path
        self.url: str | None = None
        self.lock = threading.RLock()
        self.users = 0
        self.live: dict[str, int] = {}  # scopes of the open Archive views (retention never removes them)
        self.found_version: int | None = None
        self._key: tuple[int, str] | None = None
        self.conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
            self.conn = conn
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._prepare(conn)
        except sqlite3.Error as exc:
            self.close()
            raise explain(exc, label, path, "open the archive") from None

    @classmethod
    def shared(cls, path: Path) -> SqliteStore:
        """The process's store for the file at ``path`` (opened now if none is open)."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise explain_os(exc, str(path), path, f"create the folder {path.parent}") from None
        return cls._share((os.getpid(), os.path.realpath(path)), lambda: cls(str(path), str(path), path))

    @classmethod
    def private(cls) -> SqliteStore:
        store = cls(":memory:", ":memory:", None)
        store.users = 1
        return store

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """WAL mode and the schema (created or migrated). Switching a new file to WAL does not wait on
        the busy handler, so processes opening the same new archive at once get "database is locked":
        retry until the busy timeout instead."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                if schema.version_of(conn) is None:
                    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # only takes effect before the first table
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                if schema.version_of(conn) == schema.SCHEMA_VERSION:
                    self.found_version = schema.SCHEMA_VERSION
                    return
                conn.execute("BEGIN IMMEDIATE")
                self.found_version = schema.migrate(conn, self.label)
                conn.execute("COMMIT")
                return
            except sqlite3.OperationalError as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.005, 0.05))
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

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
                    raise explain(exc, self.label, self.path, action) from None
                raise

    # writing --------------------------------------------------------------------------------------
    def put(self, scope: str, key: str, data: bytes, kind: str, origin_json: str | None, origin_text: str,
            turn: int | None, now: float) -> bool:  # fmt: skip
        """Store one entry; False when the scope already holds ``key``."""
        body = schema.index_body(scope, data)  # tokenized outside the write lock's critical part
        with self.cursor("store content", write=True) as conn:
            row = conn.execute("SELECT content = ? FROM blobs WHERE key = ?", (data, key)).fetchone()
            if row is None:
                conn.execute("INSERT INTO blobs(key, content, bytes) VALUES (?, ?, ?)", (key, data, len(data)))
            elif not row[0]:
                raise ArchiveError(
                    f"archive key {key} already holds different content (a SHA-256 prefix collision or a "
                    "corrupted archive); archive this content in a fresh archive file"
                )
            cur = conn.execute(
                "INSERT OR IGNORE INTO entries(session_id, key, kind, origin_json, origin_text, turn, bytes, created_at,"
                " preview) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (scope, key, kind, origin_json, origin_text, turn, len(data), now, preview_of(data)),
            )
            if not cur.rowcount:
                return False
            conn.execute("INSERT INTO terms(rowid, body) VALUES (?, ?)", (cur.lastrowid, body))
            conn.execute(
                "INSERT INTO scopes(session_id, entries, bytes, first_at, last_at) VALUES (?, 1, ?, ?, ?)"
                " ON CONFLICT(session_id) DO UPDATE SET entries = entries + 1, bytes = bytes + excluded.bytes,"
                " last_at = max(last_at, excluded.last_at)",
                (scope, len(data), now, now),
            )
        return True

    # reading --------------------------------------------------------------------------------------
    def get(self, key: str, scopes: Sequence[str]) -> bytes | None:
        marks = ",".join("?" * len(scopes))
        with self.cursor("read content") as conn:
            row = conn.execute(
                "SELECT b.content FROM blobs b WHERE b.key = ? AND EXISTS "
                f"(SELECT 1 FROM entries e WHERE e.key = b.key AND e.session_id IN ({marks}))",
                (key, *scopes),
            ).fetchone()
        return None if row is None else bytes(row[0])

    def rows_for(self, key: str, scopes: Sequence[str]) -> list[Row]:
        marks = ",".join("?" * len(scopes))
        with self.cursor("read an entry") as conn:
            return conn.execute(
                f"SELECT {ROW} FROM entries e WHERE e.key = ? AND e.session_id IN ({marks})", (key, *scopes)
            ).fetchall()

    def scope_page(self, scope: str, earlier: Sequence[str], limit: int, offset: int, newest_first: bool) -> list[Row]:
        """Rows of ``scope`` whose key no scope in ``earlier`` holds, in write order."""
        order = "DESC" if newest_first else "ASC"
        hide, params = "", [scope]
        if earlier:
            hide = (f" AND NOT EXISTS (SELECT 1 FROM entries f WHERE f.key = e.key AND f.session_id IN"
                    f" ({','.join('?' * len(earlier))}))")  # fmt: skip
            params += list(earlier)
        with self.cursor("list entries") as conn:
            return conn.execute(
                f"SELECT {ROW} FROM entries e WHERE e.session_id = ?{hide} ORDER BY e.id {order} LIMIT ? OFFSET ?",
                (*params, int(limit), int(offset)),
            ).fetchall()

    def scope_totals(self, scopes: Sequence[str]) -> dict[str, tuple[int, int]]:
        marks = ",".join("?" * len(scopes))
        with self.cursor("count entries") as conn:
            rows = conn.execute(
                f"SELECT session_id, entries, bytes FROM scopes WHERE session_id IN ({marks})", tuple(scopes)
            ).fetchall()
        return {s: (int(n), int(b)) for s, n, b in rows}

    def unique_totals(self, scope: str, earlier: Sequence[str]) -> tuple[int, int]:
        """(entries, bytes) of ``scope`` whose key no scope in ``earlier`` holds."""
        marks = ",".join("?" * len(earlier))
        with self.cursor("count entries") as conn:
            n, b = conn.execute(
                "SELECT count(*), coalesce(sum(e.bytes), 0) FROM entries e WHERE e.session_id = ? AND NOT EXISTS"
                f" (SELECT 1 FROM entries f WHERE f.key = e.key AND f.session_id IN ({marks}))",
                (scope, *earlier),
            ).fetchone()
        return int(n), int(b)

    def scope_infos(self) -> list[ScopeInfo]:
        with self.cursor("list sessions") as conn:
            rows = conn.execute("SELECT session_id, entries, bytes, first_at, last_at FROM scopes ORDER BY last_at").fetchall()
        return [ScopeInfo(s, int(n), int(b), float(f), float(la)) for s, n, b, f, la in rows]

    # search ---------------------------------------------------------------------------------------
    @staticmethod
    def _phrase(tags: Sequence[str], phrase: Sequence[str]) -> str:
        # tokens hold only letters and digits: nothing here is FTS5 syntax
        parts = ['"' + " ".join(tag + t for t in phrase) + '"' for tag in tags]
        return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"

    def _count(self, conn: sqlite3.Connection, match: str, cap: int) -> int:
        (n,) = conn.execute(f"SELECT count(*) FROM (SELECT rowid FROM terms WHERE terms MATCH ? LIMIT {cap + 1})", (match,)).fetchone()
        return int(n)

    def search(self, scopes: Sequence[str], query: Query, limit: int, readable_entries: int) -> list[SearchHit]:
        """Ranked hits in ``scopes``; see ``archive.search`` for the rules."""
        tags = [scope_tag(s) for s in scopes]
        marks = ",".join("?" * len(scopes))
        with self.cursor("search") as conn:
            recent = False
            if readable_entries > COMMON_AT and query.optional:
                query, common = split_common(query, lambda w: self._count(conn, self._phrase(tags, (w,)), COMMON_AT))
                recent = bool(common) and not query.required and set(common) == set(query.optional)
            phrases = [self._phrase(tags, p) for p in query.phrases()]
            if recent:  # every word is frequent: the newest entries holding all of them, else any
                matches = [" AND ".join(phrases), " OR ".join(phrases)]
                order, score = "e.id DESC", "0.0"
            else:
                required = [self._phrase(tags, p) for p in query.required]
                ranked = "(" + " OR ".join(phrases) + ")"
                matches = [" AND ".join([*required, ranked]) if required else ranked]
                order, score = "score, e.id", "bm25(terms)"
            rows: list[tuple[str, str, str, str, int, float]] = []
            for match in matches:
                rows = conn.execute(
                    f"SELECT e.key, e.session_id, e.kind, e.origin_text, e.bytes, {score} AS score FROM terms"
                    f" JOIN entries e ON e.id = terms.rowid WHERE terms MATCH ? AND e.session_id IN ({marks})"
                    f" ORDER BY {order} LIMIT ?",
                    (match, *scopes, int(limit) * len(scopes)),
                ).fetchall()
                if len(rows) >= limit:
                    break
        return [SearchHit(k, kind, origin, float(score), session, int(size)) for k, session, kind, origin, size, score in rows]

    # retention and upkeep -------------------------------------------------------------------------
    def delete_scope(self, scope: str) -> tuple[int, int, int]:
        """Remove every entry of ``scope`` (index rows first), then the contents no entry refers to;
        (entries, bytes, blobs). In chunks, so other writers wait for at most one chunk."""
        entries = size = blobs = 0
        while True:
            with self.cursor(f"prune the session {scope}", write=True) as conn:
                rows = conn.execute(
                    "SELECT e.id, e.key, e.bytes, b.content FROM entries e JOIN blobs b ON b.key = e.key"
                    " WHERE e.session_id = ? ORDER BY e.id LIMIT ?",
                    (scope, DELETE_CHUNK),
                ).fetchall()
                for entry_id, _key, _size, content in rows:
                    conn.execute(
                        "INSERT INTO terms(terms, rowid, body) VALUES ('delete', ?, ?)",
                        (entry_id, schema.index_body(scope, bytes(content))),
                    )
                conn.executemany("DELETE FROM entries WHERE id = ?", [(r[0],) for r in rows])
                keys = list({r[1] for r in rows})
                for key in keys:
                    if conn.execute("SELECT 1 FROM entries WHERE key = ? LIMIT 1", (key,)).fetchone() is None:
                        conn.execute("DELETE FROM blobs WHERE key = ?", (key,))
                        blobs += 1
                entries += len(rows)
                size += sum(int(r[2]) for r in rows)
                if len(rows) < DELETE_CHUNK:
                    conn.execute("DELETE FROM scopes WHERE session_id = ?", (scope,))
                    return entries, size, blobs
                conn.execute(
                    "UPDATE scopes SET entries = entries - ?, bytes = bytes - ? WHERE session_id = ?",
                    (len(rows), sum(int(r[2]) for r in rows), scope),
                )

    def file_bytes(self) -> int:
        with self.cursor("measure the file") as conn:
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            (size,) = conn.execute("PRAGMA page_size").fetchone()
        return int(pages) * int(size)

    def optimize(self, *, vacuum: bool | None = None) -> list[str]:
        """Index merges (bounded work), ``PRAGMA optimize`` and, when free pages are over a quarter of
        the file (or ``vacuum=True``), giving them back to the disk; the steps taken."""
        done = []
        with self.cursor("optimize the index", write=True) as conn:
            conn.execute("INSERT INTO terms(terms, rank) VALUES ('merge', 500)")
            done.append("index merge")
        with self.cursor("optimize") as conn:
            conn.execute("PRAGMA optimize")
            (free,) = conn.execute("PRAGMA freelist_count").fetchone()
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            (page,) = conn.execute("PRAGMA page_size").fetchone()
            (auto,) = conn.execute("PRAGMA auto_vacuum").fetchone()
            pays = free * page >= RECLAIM_MIN_BYTES and free >= RECLAIM_SHARE * max(pages, 1)
            if vacuum or (vacuum is None and pays):
                if auto == 2 and not vacuum:
                    conn.executescript("PRAGMA incremental_vacuum;")  # one page per step: sqlite3_exec runs them all
                    done.append("incremental vacuum")
                else:
                    conn.execute("VACUUM")
                    done.append("vacuum")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return done

    def get_meta(self, name: str) -> str | None:
        with self.cursor("read the archive's settings") as conn:
            row = conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, name: str, value: str) -> None:
        with self.cursor("write the archive's settings", write=True) as conn:
            conn.execute("INSERT OR REPLACE INTO meta(name, value) VALUES (?, ?)", (name, value))

    def schema_version(self) -> int:
        with self.cursor("read the schema version") as conn:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])

    def copy_to(self, target: Path) -> None:
        with self.cursor("copy the archive to a file") as conn:
            copy = sqlite3.connect(target)
            try:
                conn.backup(copy)
            finally:
                copy.close()
