"""The archive: verbatim content behind ``<<ccr:KEY>>`` markers, scoped by session.

``Archive(path)`` is an SQLite file (the embedded default, ``archive/sqlite.py``);
``Archive("postgresql://...")`` a PostgreSQL database shared by many processes or machines
(``archive/postgres.py``). Both have the same API and the same search semantics (``archive/query.py``).
Every ``Archive`` of one file in a process shares one connection; ``with_scope`` makes a view for
another session over it. Recalls and searches only read. Listings, counts and sizes come from
metadata, never from the content; retention works on whole sessions (``archive/retention.py``).
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextkit.archive.query import Query, parse_query
from contextkit.archive.records import (
    ArchivedItem,
    ArchiveEntry,
    SearchHit,
    decode_content,
    default_archive_path,
    encode_content,
    origin_parts,
)
from contextkit.archive.retention import DEFAULT_RETENTION, Retention
from contextkit.archive.sqlite import SqliteStore
from contextkit.archive.upkeep import Upkeep
from contextkit.errors import UsageError
from contextkit.markers import has_marker, is_valid_key, key_for
from contextkit.messages import wire_safe

if TYPE_CHECKING:
    from contextkit.archive.recall import RecallResult
    from contextkit.archive.search import RecallContext
    from contextkit.messages import Message, Origin

__all__ = ["Archive", "ArchiveEntry", "ArchivedItem", "SearchHit", "default_archive_path"]

DEFAULT_SCOPE = "default"
_DEFAULT: Any = object()  # the retention sentinel: DEFAULT_RETENTION for the default location, else none


def _check_scope(value: object, what: str = "session_id") -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{what} must be a non-empty string, got {value!r}")
    if wire_safe(value) != value or "\x00" in value:
        raise UsageError(f"{what} must be valid Unicode text (no lone surrogates, no NUL), got {value!r}")
    return value


def is_database_url(location: object) -> bool:
    return isinstance(location, str) and location.split("://", 1)[0].lower() in ("postgresql", "postgres")


def _open_store(location: str | os.PathLike[str] | None) -> tuple[Any, bool]:
    """(the store for ``location``, whether it is the default location)."""
    if is_database_url(location):
        from contextkit.archive.postgres import PostgresStore

        return PostgresStore.shared(str(location)), False
    target = Path(location).expanduser() if location is not None else default_archive_path()
    return SqliteStore.shared(target), location is None


def _release(store: Any, holder: list[str]) -> None:
    store.release(holder[0])


class Archive(Upkeep):
    """Verbatim store for everything compaction removes; see the module docstring.

    ``path``: an SQLite file (default: ``CONTEXTKIT_ARCHIVE``, else the per-user file
    ``~/.local/share/contextkit/archive.sqlite``; ``archive.location`` says which) or a
    ``postgresql://`` URL. ``session_id`` is the scope this archive writes to and reads from;
    ``read_scopes`` (or ``grant``) add other scopes it may read. Without a ``session_id`` the scope
    is ``"default"`` until a ``Session`` adopts the archive: it then writes under that session's
    id. ``retention``: the rules applied when the archive opens (at most once a day); the default
    location gets ``DEFAULT_RETENTION``, a path or URL you name gets none unless you pass one.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        session_id: str | None = None,
        read_scopes: Iterable[str] = (),
        retention: Retention | None = _DEFAULT,
        _store: Any = None,
    ) -> None:
        self.scope_chosen = session_id is not None
        session_id = _check_scope(DEFAULT_SCOPE if session_id is None else session_id)
        if retention is not _DEFAULT and retention is not None and not isinstance(retention, Retention):
            raise UsageError(f"retention must be a contextkit.archive.Retention or None, got {retention!r}")
        is_default = False
        if _store is None:
            _store, is_default = _open_store(path)
        self._store = _store
        self.path: Path | None = _store.path
        self.url: str | None = _store.url
        self.session_id = session_id
        self._holder = [session_id]
        _store.acquire(session_id)
        self._finalizer = weakref.finalize(self, _release, _store, self._holder)
        self._closed = False
        self._observers: list[Callable[[ArchivedItem], None]] = []
        self._claimed_by: str | None = None
        self._scopes: dict[str, None] = {session_id: None}
        self.grant(*((read_scopes,) if isinstance(read_scopes, str) else read_scopes))
        self.retention: Retention | None = (DEFAULT_RETENTION if is_default else None) if retention is _DEFAULT else retention
        if self.retention is not None and _store.users == 1:
            self._apply_retention(self.retention)

    @classmethod
    def in_memory(cls, *, session_id: str | None = None, read_scopes: Iterable[str] = ()) -> Archive:
        """A private SQLite ``:memory:`` archive (tests, one-shot scripts); gone when closed."""
        return cls(session_id=session_id, read_scopes=read_scopes, _store=SqliteStore.private(), retention=None)

    @property
    def location(self) -> str:
        """Where the archive lives: a file path, ``:memory:``, or a database URL without its password."""
        return str(self._store.label)

    @property
    def schema_version(self) -> int:
        return int(self._store.schema_version())

    def adopt(self, session_id: str) -> Archive:
        """Write to and read from ``session_id`` from now on (earlier scopes stay readable); returns
        ``self``. ``Session`` calls it for an archive created without a ``session_id``."""
        _check_scope(session_id)
        self._store.acquire(session_id)
        self._store.release(self._holder[0], user=False)
        self._holder[0] = session_id
        self.session_id = session_id
        self._scopes = {session_id: None, **self._scopes}
        self.scope_chosen = True
        return self

    def claim(self, owner: str) -> bool:
        """Mark this archive as used by the session ``owner``; False when another session holds it
        (``Session`` then works on a view of its own, ``with_scope``)."""
        if self._claimed_by not in (None, owner):
            return False
        self._claimed_by = owner
        return True

    def unclaim(self, owner: str) -> None:
        if self._claimed_by == owner:
            self._claimed_by = None

    def copy_to(self, path: str | os.PathLike[str]) -> Path:
        """Write the whole database (every scope) to the SQLite file ``path``, replacing it atomically."""
        target = Path(path)
        tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            self._store.copy_to(tmp)
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
            _check_scope(scope, "a scope")
        # copy-on-write: threads reading the old scope set never see it change under them
        self._scopes = {**self._scopes, **dict.fromkeys(scopes)}
        return self

    def with_scope(self, session_id: str, *, read_scopes: Iterable[str] = ()) -> Archive:
        """A view over the same database that writes to and reads from ``session_id``."""
        self._store.add_user()
        try:
            return Archive(session_id=session_id, read_scopes=read_scopes, _store=self._store, retention=None)
        except BaseException:
            self._store.release(None)
            raise

    # lifecycle ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Let go of the shared connection (closed with its last user). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Archive({self.location!r}, session_id={self.session_id!r})"

    def _repr_html_(self) -> str:
        from contextkit.display.html import archive_html

        return archive_html(self)

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
        added = self._store.put(self.session_id, key, data, kind, origin_json, origin_text, turn, time.time())
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
        data = self._store.get(key, self.scopes)
        return None if data is None else decode_content(data)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.entry(key) is not None

    @staticmethod
    def _entry(row: Sequence[Any]) -> ArchiveEntry:
        _id, key, session, kind, origin, size, turn, created, preview = row
        return ArchiveEntry(key, session, kind, origin, int(size), turn, float(created), preview)

    def entry(self, key: str) -> ArchiveEntry | None:
        """The entry for ``key`` (this archive's own row before a granted scope's), or None."""
        if not is_valid_key(key):
            return None
        rows = self._store.rows_for(key, self.scopes)
        if not rows:
            return None
        rank = {s: i for i, s in enumerate(self.scopes)}
        return self._entry(min(rows, key=lambda r: (rank.get(r[2], len(rank)), r[0])))

    def entries(self, limit: int | None = None, *, offset: int = 0, newest_first: bool = False) -> list[ArchiveEntry]:
        """One row per readable key in write order (oldest first; ``newest_first`` turns it round),
        from metadata only. ``limit``/``offset`` page through it; ``entries()`` is every row."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise UsageError(f"limit must be a whole number >= 0 or None, got {limit!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise UsageError(f"offset must be a whole number >= 0, got {offset!r}")
        scopes = self.scopes
        if limit is None:
            limit = sum(n for n, _ in self._store.scope_totals(scopes).values())
        if len(scopes) == 1:
            rows = self._store.scope_page(scopes[0], (), limit, offset, newest_first)
        else:  # each scope's rows without the keys an earlier scope holds, merged in write order
            merged = [r for i, s in enumerate(scopes) for r in self._store.scope_page(s, scopes[:i], offset + limit, 0, newest_first)]
            merged.sort(key=lambda r: r[0], reverse=newest_first)
            rows = merged[offset : offset + limit]
        return [self._entry(r) for r in rows]

    def _totals(self) -> tuple[int, int]:
        """(distinct keys, their content bytes) over the readable scopes: the largest scope's totals
        from metadata, then each other scope's entries no larger one holds."""
        scopes = self.scopes
        known = self._store.scope_totals(scopes)
        order = sorted(scopes, key=lambda s: -known.get(s, (0, 0))[0])
        order = [s for s in order if s in known]
        if not order:
            return 0, 0
        count, size = known[order[0]]
        for i, scope in enumerate(order[1:], 1):
            n, b = self._store.unique_totals(scope, order[:i])
            count, size = count + n, size + b
        return count, size

    def __len__(self) -> int:
        return self._totals()[0]

    @property
    def total_bytes(self) -> int:
        """UTF-8 bytes of the distinct contents this archive can read (from metadata)."""
        return self._totals()[1]

    def find(self, query: Query, limit: int) -> list[SearchHit]:
        """Ranked hits for a parsed query in the readable scopes, one per key (best first)."""
        if query.empty or limit < 1:
            return []
        readable = sum(n for n, _ in self._store.scope_totals(self.scopes).values())
        hits = self._store.search(self.scopes, query, limit, readable)
        best: dict[str, SearchHit] = {}
        for hit in hits:
            if hit.key not in best or hit.score < best[hit.key].score:
                best[hit.key] = hit
        return sorted(best.values(), key=lambda h: h.score)[:limit]

    def search(self, query: str, limit: int = 8) -> list[SearchHit]:
        """Ranked full-text matches for plain text in the readable scopes (no query syntax is read:
        identifiers must all match, other words rank; see ``archive/query.py``)."""
        if not isinstance(query, str):
            raise UsageError(f"query must be text, got {type(query).__name__}")
        return self.find(parse_query(query), int(limit))

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
        """A bounded, read-only context pack for ``query`` (text format in ``archive/search.py``)."""
        return self.recall_context_result(query, max_items, max_tokens).text

    def recall_context_result(self, query: str, max_items: int = 8, max_tokens: int = 1500) -> RecallContext:
        from contextkit.archive.search import recall_context

        return recall_context(self, query, max_items=max_items, max_tokens=max_tokens)
