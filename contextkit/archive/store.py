"""The SQLite archive: verbatim content behind ``<<ccr:KEY>>`` markers, scoped by session.

Layout (one file, WAL mode, shared by every process of the user)::

    blobs(id, key UNIQUE, content BLOB, bytes)       content stored once per key
    entries(session_id, key, kind, origin_json,       one row per (session, key): who archived what
            origin_text, turn, bytes, created_at)
    fts(body)                                         contentless FTS5 index, rowid = blobs.id

One connection per ``Archive`` root guarded by a lock (thread- and asyncio-safe); SQLite's file
locks plus ``busy_timeout`` make several processes writing at once safe. Views made by
``with_scope`` share that connection. Recalls and searches only read.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextkit.archive._db import (
    PREVIEW_CHARS,
    ArchiveEntry,
    SearchHit,
    Store,
    decode_content,
    default_archive_path,
    encode_content,
    origin_parts,
    searchable_text,
    single_line,
)
from contextkit.errors import ArchiveError, UsageError
from contextkit.markers import has_marker, is_valid_key, key_for
from contextkit.messages import wire_safe

if TYPE_CHECKING:
    from contextkit.archive.recall import RecallResult
    from contextkit.archive.search import RecallContext
    from contextkit.messages import Message, Origin

__all__ = ["Archive", "ArchiveEntry", "SearchHit", "default_archive_path"]

DEFAULT_SCOPE = "default"


@dataclass(frozen=True, slots=True)
class ArchivedItem:
    """What an observer hears about a newly stored entry (no content)."""

    key: str
    kind: str
    bytes: int
    origin: str
    turn: int | None


class Archive:
    """Verbatim store for everything compaction removes; see the module docstring for the layout.

    ``session_id`` is the scope this archive writes to and reads from; ``read_scopes`` (or
    ``grant``) add other scopes it may read. ``with_scope`` makes a view for another session
    over the same database. Without a ``session_id`` the scope is ``"default"`` until a
    ``Session`` adopts the archive: it then writes under that session's id (``adopt``), so
    reopening the file with the session's id finds what the session archived.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        session_id: str | None = None,
        read_scopes: Iterable[str] = (),
        _store: Store | None = None,
    ) -> None:
        self.scope_chosen = session_id is not None
        session_id = DEFAULT_SCOPE if session_id is None else session_id
        if not isinstance(session_id, str) or not session_id.strip():
            raise UsageError(f"session_id must be a non-empty string, got {session_id!r}")
        if wire_safe(session_id) != session_id:
            raise UsageError(f"session_id must be valid Unicode text (no lone surrogates), got {session_id!r}")
        if _store is None:
            target = Path(path).expanduser() if path is not None else default_archive_path()
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ArchiveError(
                    f"cannot create the folder {target.parent} for the contextkit archive: {exc.strerror or exc}. "
                    "Pass Archive(path=...) in a writable folder, set CONTEXTKIT_ARCHIVE, or use Archive.in_memory()"
                ) from None
            _store = Store(str(target), str(target))
            self.path: Path | None = target
        else:
            self.path = None if _store.label == ":memory:" else Path(_store.label)
        self._store = _store
        with _store.lock:
            _store.users += 1
        self._closed = False
        self._observers: list[Callable[[ArchivedItem], None]] = []
        self.session_id = session_id
        self._scopes: dict[str, None] = {session_id: None}
        self.grant(*((read_scopes,) if isinstance(read_scopes, str) else read_scopes))

    @classmethod
    def in_memory(cls, *, session_id: str | None = None, read_scopes: Iterable[str] = ()) -> Archive:
        """A private SQLite ``:memory:`` archive (tests, one-shot scripts); gone when closed."""
        return cls(session_id=session_id, read_scopes=read_scopes, _store=Store(":memory:", ":memory:"))

    def adopt(self, session_id: str) -> Archive:
        """Write to and read from ``session_id`` from now on (earlier scopes stay readable); returns
        ``self``. ``Session`` calls it for an archive created without a ``session_id``."""
        if not isinstance(session_id, str) or not session_id.strip() or wire_safe(session_id) != session_id:
            raise UsageError(f"session_id must be a non-empty string (valid Unicode), got {session_id!r}")
        self.session_id = session_id
        self._scopes = {session_id: None, **self._scopes}
        self.scope_chosen = True
        return self

    def copy_to(self, path: str | os.PathLike[str]) -> Path:
        """Write the whole database (every scope) to the SQLite file ``path``, replacing it atomically."""
        target = Path(path)
        tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            with self._store.cursor("copy the archive to a file") as conn:
                copy = sqlite3.connect(tmp)
                try:
                    conn.backup(copy)
                finally:
                    copy.close()
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return target

    # scopes ---------------------------------------------------------------------------------------
    @property
    def scopes(self) -> tuple[str, ...]:
        """Session ids this archive may read, its own first."""
        return tuple(self._scopes)

    def grant(self, *scopes: str) -> Archive:
        """Give this archive read access to other sessions' entries; returns ``self``."""
        for scope in scopes:
            if not isinstance(scope, str) or not scope.strip() or wire_safe(scope) != scope:
                raise UsageError(f"a scope is a non-empty session id string (valid Unicode), got {scope!r}")
        # copy-on-write: threads reading the old scope set never see it change under them
        self._scopes = {**self._scopes, **dict.fromkeys(scopes)}
        return self

    def with_scope(self, session_id: str, *, read_scopes: Iterable[str] = ()) -> Archive:
        """A view over the same database that writes to and reads from ``session_id``."""
        return Archive(session_id=session_id, read_scopes=read_scopes, _store=self._store)

    # lifecycle ------------------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._store.lock:
            self._store.users -= 1
            if self._store.users <= 0:
                self._store.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Archive({self._store.label!r}, session_id={self.session_id!r})"

    def _repr_html_(self) -> str:
        from contextkit.display.html import archive_html

        return archive_html(self)

    def _scope_sql(self) -> tuple[str, list[str]]:
        scopes = list(self._scopes)
        return ",".join("?" * len(scopes)), scopes

    # writing --------------------------------------------------------------------------------------
    def put(
        self,
        content: str,
        *,
        kind: str = "message",
        origin: str | Mapping[str, Any] | Origin | None = None,
        turn: int | None = None,
        allow_markers: bool = False,
    ) -> str | None:
        """Archive ``content`` verbatim and return its key (re-putting is a no-op, same key).

        Returns None without storing when ``content`` already carries a ``<<ccr:KEY>>`` marker
        and ``allow_markers`` is False: the original is archived already, carry the markers on.
        """
        if not isinstance(content, str):
            raise UsageError(f"archive content must be a str, got {type(content).__name__}")
        if not allow_markers and has_marker(content):
            return None
        kind = wire_safe(" ".join(str(kind).replace("|", "/").split())) or "message"  # one line: shown in listings
        key = key_for(content)
        data = encode_content(content)
        if turn is None and isinstance(origin, Mapping) and isinstance(origin.get("turn"), int):
            turn = origin["turn"]
        origin_json, origin_text = origin_parts(origin, turn)
        # Metadata must be storable text (a path from an undecodable file name); the content stays exact.
        origin_json, origin_text = (wire_safe(origin_json) if origin_json else None), wire_safe(origin_text)
        with self._store.cursor("store content", write=True) as conn:
            row = conn.execute("SELECT id, content = ? FROM blobs WHERE key = ?", (data, key)).fetchone()
            if row is None:
                blob_id = conn.execute(
                    "INSERT INTO blobs(key, content, bytes) VALUES (?, ?, ?)", (key, data, len(data))
                ).lastrowid
                conn.execute("INSERT INTO fts(rowid, body) VALUES (?, ?)", (blob_id, searchable_text(data)))
            elif not row[1]:
                raise ArchiveError(
                    f"archive key {key} already holds different content (a SHA-256 prefix collision or a "
                    "corrupted archive); archive this content in a fresh archive file"
                )
            added = conn.execute(
                "INSERT OR IGNORE INTO entries(session_id, key, kind, origin_json, origin_text, turn, bytes, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (self.session_id, key, kind, origin_json, origin_text, turn, len(data), time.time()),
            ).rowcount
        if added:
            for observer in list(self._observers):
                observer(ArchivedItem(key, kind, len(data), origin_text, turn))
        return key

    def observe(self, callback: Callable[[ArchivedItem], None]) -> Callable[[], None]:
        """Call ``callback(item)`` after each new entry this archive stores; returns an unsubscribe function."""
        self._observers = [*self._observers, callback]

        def unsubscribe() -> None:
            self._observers = [o for o in self._observers if o is not callback]

        return unsubscribe

    # reading --------------------------------------------------------------------------------------
    def get(self, key: str) -> str | None:
        """The original content for ``key`` in a readable scope, byte-exact; None otherwise.

        Anything that is not exactly 16 lowercase hex characters is None and never reaches SQL.
        """
        if not is_valid_key(key):
            return None
        marks, scopes = self._scope_sql()
        with self._store.cursor("read content") as conn:
            row = conn.execute(
                "SELECT b.content FROM blobs b WHERE b.key = ? AND EXISTS "
                f"(SELECT 1 FROM entries e WHERE e.key = b.key AND e.session_id IN ({marks}))",
                (key, *scopes),
            ).fetchone()
        return None if row is None else decode_content(row[0])

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.entry(key) is not None

    def _rows(self, key: str | None = None) -> list[ArchiveEntry]:
        marks, scopes = self._scope_sql()
        where = f"e.session_id IN ({marks})" + (" AND e.key = ?" if key is not None else "")
        with self._store.cursor("list entries") as conn:
            rows = conn.execute(
                "SELECT e.key, e.session_id, e.kind, e.origin_text, e.bytes, e.turn, e.created_at,"
                f" substr(b.content, 1, {PREVIEW_CHARS * 4}) FROM entries e JOIN blobs b ON b.key = e.key"
                f" WHERE {where} ORDER BY e.created_at, e.rowid",
                (*scopes, *([key] if key is not None else [])),
            ).fetchall()
        by_key: dict[str, ArchiveEntry] = {}
        for k, session, kind, origin, size, turn, created, head in rows:
            if k in by_key and by_key[k].session_id == self.session_id:
                continue  # our own row wins over a granted scope's row for the same content
            if k in by_key and session != self.session_id:
                continue
            preview = single_line(bytes(head).decode("utf-8", "replace"))
            by_key[k] = ArchiveEntry(k, session, kind, origin, size, turn, created, preview)
        return sorted(by_key.values(), key=lambda e: e.created_at)

    def entries(self) -> list[ArchiveEntry]:
        """One plain row per readable key, oldest first."""
        return self._rows()

    def entry(self, key: str) -> ArchiveEntry | None:
        if not is_valid_key(key):
            return None
        rows = self._rows(key)
        return rows[0] if rows else None

    def __len__(self) -> int:
        marks, scopes = self._scope_sql()
        with self._store.cursor("count entries") as conn:
            (count,) = conn.execute(
                f"SELECT count(DISTINCT key) FROM entries WHERE session_id IN ({marks})", scopes
            ).fetchone()
        return int(count)

    @property
    def total_bytes(self) -> int:
        """UTF-8 bytes of the distinct contents this archive can read."""
        marks, scopes = self._scope_sql()
        with self._store.cursor("sum entry sizes") as conn:
            (total,) = conn.execute(
                f"SELECT coalesce(sum(bytes), 0) FROM blobs WHERE key IN "
                f"(SELECT key FROM entries WHERE session_id IN ({marks}))",
                scopes,
            ).fetchone()
        return int(total)

    def search(self, fts_query: str, limit: int) -> list[SearchHit]:
        """Ranked FTS5 matches in readable scopes. ``fts_query`` must come from ``search.fts_query``."""
        marks, scopes = self._scope_sql()
        with self._store.cursor("search") as conn:
            rows = conn.execute(
                "SELECT b.key, bm25(fts) AS score FROM fts JOIN blobs b ON b.id = fts.rowid"
                f" WHERE fts MATCH ? AND EXISTS (SELECT 1 FROM entries e WHERE e.key = b.key"
                f" AND e.session_id IN ({marks})) ORDER BY score, b.id LIMIT ?",
                (fts_query, *scopes, int(limit)),
            ).fetchall()
        hits = []
        for key, score in rows:
            info = self.entry(key)
            if info is not None:
                hits.append(SearchHit(key, info.kind, info.origin, float(score)))
        return hits

    # recall (implemented in recall.py / search.py) -------------------------------------------------
    def recall(self, payload: str, *, max_bytes: int | None = None) -> RecallResult:
        """Expand one or several keys/markers pasted by a model; never raises for bad keys.
        Originals longer than ``max_bytes`` come in pages (``start_line``/``start_char`` in JSON args)."""
        from contextkit.archive.recall import recall

        return recall(self, payload, max_bytes=max_bytes)

    def recall_message(self, tool_call_id: str, payload: str, *, max_bytes: int | None = None) -> Message:
        """The tool-result message answering a ``recall`` call, flagged is_recall (+ preserve_verbatim
        when it is whole)."""
        from contextkit.archive.recall import recall_message

        return recall_message(self, tool_call_id, payload, max_bytes=max_bytes)

    def recall_inline(self, text: str, *, max_bytes: int | None = None) -> RecallResult | None:
        """Recall every key named by ``@recall KEY`` in ``text`` (e.g. a user message); None if none."""
        from contextkit.archive.recall import recall_inline

        return recall_inline(self, text, max_bytes=max_bytes)

    def handle_tool_call(self, tool_call_id: str, name: str, arguments: str) -> Message | None:
        """Answer a ``recall``/``recall_context`` tool call as a tool message; None for other tools."""
        from contextkit.archive.recall import handle_tool_call

        return handle_tool_call(self, tool_call_id, name, arguments)

    def recall_context(self, query: str, max_items: int = 8, max_tokens: int = 1500) -> str:
        """A bounded, read-only context pack for ``query`` (the text form of ``recall_context_result``)."""
        return self.recall_context_result(query, max_items, max_tokens).text

    def recall_context_result(self, query: str, max_items: int = 8, max_tokens: int = 1500) -> RecallContext:
        from contextkit.archive.search import recall_context

        return recall_context(self, query, max_items=max_items, max_tokens=max_tokens)
