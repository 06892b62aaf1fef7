"""The archive for many hosts: a PostgreSQL database, chosen by URL (``Archive("postgresql://...")``).

Same API and search semantics as the SQLite file (``archive/query.py``): the index is a
``tsvector`` column built from the same scope-tagged tokens (positions kept, so identifiers match as
phrases), under a GIN index; ranking is ``ts_rank``. Tables are prefixed ``contextkit_`` so the
archive can share a database; the schema version is kept in ``contextkit_meta``. One connection per
URL per process (psycopg 3, the ``postgres`` extra), shared like SQLite's; the server's own locking
makes any number of processes and machines safe. PostgreSQL limits what one entry's index can hold
(a ``tsvector`` is at most 1 MB, a word keeps 256 positions, positions stop at 16,383): a very long
original is indexed up to those limits; ``recall`` by key always returns it whole.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from contextkit.archive.query import COMMON_AT, Query, scope_tag, split_common, tokens
from contextkit.archive.records import ScopeInfo, SearchHit, preview_of, searchable_text
from contextkit.archive.sharing import SharedStore
from contextkit.errors import ArchiveError, require_extra

SCHEMA_VERSION = 1
MAX_POSITION = 16_383
MAX_POSITIONS = 256
MAX_VECTOR_BYTES = 900_000
T = "contextkit_"
_TABLES = f"""
CREATE TABLE IF NOT EXISTS {T}meta (name text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS {T}blobs (id bigserial PRIMARY KEY, key text NOT NULL UNIQUE, content bytea NOT NULL,
    bytes bigint NOT NULL);
CREATE TABLE IF NOT EXISTS {T}entries (id bigserial PRIMARY KEY, session_id text NOT NULL, key text NOT NULL,
    kind text NOT NULL, origin_json text, origin_text text NOT NULL, turn integer, bytes bigint NOT NULL,
    created_at double precision NOT NULL, preview text NOT NULL DEFAULT '', terms tsvector NOT NULL,
    UNIQUE (session_id, key));
CREATE INDEX IF NOT EXISTS {T}entries_key ON {T}entries (key);
CREATE INDEX IF NOT EXISTS {T}entries_scope ON {T}entries (session_id, id) INCLUDE (bytes);
CREATE INDEX IF NOT EXISTS {T}entries_terms ON {T}entries USING gin (terms);
CREATE TABLE IF NOT EXISTS {T}scopes (session_id text PRIMARY KEY, entries bigint NOT NULL, bytes bigint NOT NULL,
    first_at double precision NOT NULL, last_at double precision NOT NULL)
"""
ROW = "e.id, e.key, e.session_id, e.kind, e.origin_text, e.bytes, e.turn, e.created_at, e.preview"
_LOCK_ID = 0x636B_6172  # the advisory lock that serializes creating the tables


def safe_label(url: str) -> str:
    """``url`` without its password (in the user part or a ``password=`` parameter), everything else
    kept (``options``, ``sslmode``...): what messages, ``archive.location`` and saved sessions show,
    and what ``Session.load`` reopens (libpq then finds the password in ``PGPASSWORD`` or ``~/.pgpass``)."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':', 1)[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k.lower() != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def tsvector_literal(session_id: str, data: bytes) -> str:
    """The entry's index as a ``tsvector`` literal: scope-tagged tokens with their positions, within
    PostgreSQL's limits (see the module docstring)."""
    tag = scope_tag(session_id)
    positions: dict[str, list[int]] = {}
    for n, token in enumerate(tokens(searchable_text(data)), 1):
        found = positions.setdefault(tag + token, [])
        if len(found) < MAX_POSITIONS:
            at = min(n, MAX_POSITION)
            if not found or found[-1] != at:
                found.append(at)
    parts, size = [], 0
    for lexeme, spots in positions.items():
        piece = f"{lexeme}:{','.join(map(str, spots))}"
        size += len(lexeme.encode()) + 2 * len(spots) + 8
        if size > MAX_VECTOR_BYTES:
            break
        parts.append(piece)
    return " ".join(parts)


def _phrase(tags: Sequence[str], phrase: Sequence[str]) -> str:
    # lexemes hold only letters and digits: nothing here is tsquery syntax
    parts = [" <-> ".join(tag + t for t in phrase) for tag in tags]
    return "(" + " | ".join(f"({p})" for p in parts) + ")"


class PostgresStore(SharedStore):
    """One PostgreSQL database and this process's connection to it; see the module docstring."""

    _shared: ClassVar[dict[tuple[int, str], PostgresStore]] = {}
    # re-entrant: an Archive dropped without close() is released by a weakref finalizer, which the
    # garbage collector may run in this very thread while it holds the lock (inside shared(), say)
    _shared_lock: ClassVar[threading.RLock] = threading.RLock()
    kind = "postgresql"
    path: Path | None = None

    def __init__(self, url: str) -> None:
        require_extra("Archive('postgresql://...')", "psycopg", extra="postgres")
        import psycopg

        self._psycopg = psycopg
        self.url = safe_label(url)
        self.label = self.url
        self.lock = threading.RLock()
        self.users = 0
        self.live: dict[str, int] = {}
        self._key: tuple[int, str] | None = None
        try:
            self.conn: Any = psycopg.connect(url, autocommit=True, connect_timeout=30)
        except psycopg.OperationalError as exc:
            raise ArchiveError(
                f"cannot open the contextkit archive at {self.label}: {str(exc).strip()}. Check that the server "
                "runs and the URL (host, port, user, database) is right; the database must exist (createdb NAME)"
            ) from None
        with self.cursor("create the archive's tables") as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
            for statement in (s.strip() for s in _TABLES.split(";")):
                if statement:
                    conn.execute(statement)
            row = conn.execute(f"SELECT value FROM {T}meta WHERE name = 'schema_version'").fetchone()
            if row is None:
                conn.execute(f"INSERT INTO {T}meta(name, value) VALUES ('schema_version', %s)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise ArchiveError(
                    f"the archive at {self.label} has schema version {row[0]}, written by a newer contextkit (this one "
                    f"reads up to {SCHEMA_VERSION}); upgrade contextkit, or use another database"
                )

    @classmethod
    def shared(cls, url: str) -> PostgresStore:
        return cls._share((os.getpid(), url), lambda: cls(url))

    @contextmanager
    def cursor(self, action: str, *, write: bool = False) -> Iterator[Any]:
        with self.lock:
            conn = self.conn
            if conn is None:
                raise ArchiveError(f"the archive at {self.label} is closed; open a new Archive to {action}")
            try:
                if write:
                    with conn.transaction():
                        yield conn
                else:
                    yield conn
            except self._psycopg.Error as exc:
                raise ArchiveError(
                    f"could not {action} in the archive at {self.label}: {str(exc).strip()}. Check that the server "
                    "runs and has disk space, and that the user may write these tables"
                ) from None

    # writing --------------------------------------------------------------------------------------
    def put(self, scope: str, key: str, data: bytes, kind: str, origin_json: str | None, origin_text: str,
            turn: int | None, now: float) -> bool:  # fmt: skip
        vector = tsvector_literal(scope, data)
        clean = (origin_json or "").replace("\x00", " ") or None
        with self.cursor("store content", write=True) as conn:
            conn.execute(f"INSERT INTO {T}blobs(key, content, bytes) VALUES (%s, %s, %s) ON CONFLICT (key) DO NOTHING",
                         (key, data, len(data)))  # fmt: skip
            row = conn.execute(f"SELECT content = %s FROM {T}blobs WHERE key = %s", (data, key)).fetchone()
            if not row[0]:
                raise ArchiveError(
                    f"archive key {key} already holds different content (a SHA-256 prefix collision or a "
                    "corrupted archive); archive this content in another database"
                )
            added = conn.execute(
                f"INSERT INTO {T}entries(session_id, key, kind, origin_json, origin_text, turn, bytes, created_at, preview,"
                " terms) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector) ON CONFLICT (session_id, key) DO NOTHING",
                (scope, key, kind.replace("\x00", " "), clean, origin_text.replace("\x00", " "), turn, len(data), now,
                 preview_of(data).replace("\x00", " "), vector),
            ).rowcount  # fmt: skip
            if not added:
                return False
            conn.execute(
                f"INSERT INTO {T}scopes(session_id, entries, bytes, first_at, last_at) VALUES (%s, 1, %s, %s, %s)"
                f" ON CONFLICT (session_id) DO UPDATE SET entries = {T}scopes.entries + 1,"
                f" bytes = {T}scopes.bytes + excluded.bytes, last_at = greatest({T}scopes.last_at, excluded.last_at)",
                (scope, len(data), now, now),
            )
        return True

    # reading --------------------------------------------------------------------------------------
    def get(self, key: str, scopes: Sequence[str]) -> bytes | None:
        with self.cursor("read content") as conn:
            row = conn.execute(
                f"SELECT b.content FROM {T}blobs b WHERE b.key = %s AND EXISTS (SELECT 1 FROM {T}entries e"
                " WHERE e.key = b.key AND e.session_id = ANY(%s))",
                (key, list(scopes)),
            ).fetchone()
        return None if row is None else bytes(row[0])

    def rows_for(self, key: str, scopes: Sequence[str]) -> list[Any]:
        with self.cursor("read an entry") as conn:
            return list(conn.execute(f"SELECT {ROW} FROM {T}entries e WHERE e.key = %s AND e.session_id = ANY(%s)",
                                     (key, list(scopes))).fetchall())  # fmt: skip

    def scope_page(self, scope: str, earlier: Sequence[str], limit: int, offset: int, newest_first: bool) -> list[Any]:
        order = "DESC" if newest_first else "ASC"
        hide = f" AND NOT EXISTS (SELECT 1 FROM {T}entries f WHERE f.key = e.key AND f.session_id = ANY(%s))" if earlier else ""
        params: list[Any] = [scope, *([list(earlier)] if earlier else []), int(limit), int(offset)]
        with self.cursor("list entries") as conn:
            return list(conn.execute(f"SELECT {ROW} FROM {T}entries e WHERE e.session_id = %s{hide}"
                                     f" ORDER BY e.id {order} LIMIT %s OFFSET %s", params).fetchall())  # fmt: skip

    def scope_totals(self, scopes: Sequence[str]) -> dict[str, tuple[int, int]]:
        with self.cursor("count entries") as conn:
            rows = conn.execute(f"SELECT session_id, entries, bytes FROM {T}scopes WHERE session_id = ANY(%s)",
                                (list(scopes),)).fetchall()  # fmt: skip
        return {s: (int(n), int(b)) for s, n, b in rows}

    def unique_totals(self, scope: str, earlier: Sequence[str]) -> tuple[int, int]:
        with self.cursor("count entries") as conn:
            n, b = conn.execute(
                f"SELECT count(*), coalesce(sum(e.bytes), 0) FROM {T}entries e WHERE e.session_id = %s AND NOT EXISTS"
                f" (SELECT 1 FROM {T}entries f WHERE f.key = e.key AND f.session_id = ANY(%s))",
                (scope, list(earlier)),
            ).fetchone()
        return int(n), int(b)

    def scope_infos(self) -> list[ScopeInfo]:
        with self.cursor("list sessions") as conn:
            rows = conn.execute(f"SELECT session_id, entries, bytes, first_at, last_at FROM {T}scopes ORDER BY last_at").fetchall()
        return [ScopeInfo(s, int(n), int(b), float(f), float(la)) for s, n, b, f, la in rows]

    # search ---------------------------------------------------------------------------------------
    def _count(self, conn: Any, match: str, cap: int) -> int:
        row = conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM {T}entries WHERE terms @@ %s::tsquery LIMIT %s) t",
                           (match, cap + 1)).fetchone()  # fmt: skip
        return int(row[0])

    def search(self, scopes: Sequence[str], query: Query, limit: int, readable_entries: int) -> list[SearchHit]:
        tags = [scope_tag(s) for s in scopes]
        with self.cursor("search") as conn:
            recent = False
            if readable_entries > COMMON_AT and query.optional:
                query, common = split_common(query, lambda w: self._count(conn, _phrase(tags, (w,)), COMMON_AT))
                recent = bool(common) and not query.required and set(common) == set(query.optional)
            phrases = [_phrase(tags, p) for p in query.phrases()]
            if recent:
                matches, order, score = [" & ".join(phrases), " | ".join(phrases)], "e.id DESC", "0.0"
            else:
                required = [_phrase(tags, p) for p in query.required]
                ranked = "(" + " | ".join(phrases) + ")"
                matches = [" & ".join([*required, ranked]) if required else ranked]
                order, score = "score, e.id", "-ts_rank(e.terms, q)"
            rows: list[Any] = []
            for match in matches:
                rows = conn.execute(
                    f"SELECT e.key, e.session_id, e.kind, e.origin_text, e.bytes, {score} AS score FROM {T}entries e,"
                    f" CAST(%s AS tsquery) q WHERE e.terms @@ q AND e.session_id = ANY(%s) ORDER BY {order} LIMIT %s",
                    (match, list(scopes), int(limit) * len(scopes)),
                ).fetchall()
                if len(rows) >= limit:
                    break
        return [SearchHit(k, kind, origin, float(score), session, int(size)) for k, session, kind, origin, size, score in rows]

    # retention and upkeep -------------------------------------------------------------------------
    def delete_scope(self, scope: str) -> tuple[int, int, int]:
        with self.cursor(f"prune the session {scope}", write=True) as conn:
            rows = conn.execute(f"DELETE FROM {T}entries WHERE session_id = %s RETURNING key, bytes", (scope,)).fetchall()
            keys = list({r[0] for r in rows})
            blobs = conn.execute(
                f"DELETE FROM {T}blobs b WHERE b.key = ANY(%s) AND NOT EXISTS (SELECT 1 FROM {T}entries e WHERE e.key = b.key)",
                (keys,),
            ).rowcount
            conn.execute(f"DELETE FROM {T}scopes WHERE session_id = %s", (scope,))
        return len(rows), sum(int(r[1]) for r in rows), int(blobs)

    def file_bytes(self) -> int:
        with self.cursor("measure the database") as conn:
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
                " WHERE c.relname = ANY(%s) AND c.relkind = 'r'",
                ([f"{T}blobs", f"{T}entries", f"{T}scopes", f"{T}meta"],),
            ).fetchone()
        return int(row[0])

    def optimize(self, *, vacuum: bool | None = None) -> list[str]:
        """``ANALYZE`` (autovacuum gives space back on its own); ``VACUUM`` when asked."""
        with self.cursor("optimize") as conn:
            for table in ("entries", "blobs"):
                conn.execute(f"{'VACUUM (ANALYZE)' if vacuum else 'ANALYZE'} {T}{table}")
        return ["vacuum" if vacuum else "analyze"]

    def get_meta(self, name: str) -> str | None:
        with self.cursor("read the archive's settings") as conn:
            row = conn.execute(f"SELECT value FROM {T}meta WHERE name = %s", (name,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, name: str, value: str) -> None:
        with self.cursor("write the archive's settings", write=True) as conn:
            conn.execute(f"INSERT INTO {T}meta(name, value) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                         (name, value))  # fmt: skip

    def schema_version(self) -> int:
        return int(self.get_meta("schema_version") or SCHEMA_VERSION)

    def copy_to(self, target: Path) -> None:
        """Every entry into a new SQLite archive file at ``target`` (e.g. to save a session offline)."""
        from contextkit.archive.sqlite import SqliteStore

        copy = SqliteStore(str(target), str(target), target)
        try:
            with self.cursor("copy the archive to a file") as conn:
                rows = conn.execute(
                    f"SELECT e.session_id, e.key, b.content, e.kind, e.origin_json, e.origin_text, e.turn, e.created_at"
                    f" FROM {T}entries e JOIN {T}blobs b ON b.key = e.key ORDER BY e.id"
                ).fetchall()
            for scope, key, content, kind, origin_json, origin_text, turn, created in rows:
                copy.put(scope, key, bytes(content), kind, origin_json, origin_text, turn, float(created))
        finally:
            copy.close()
