"""The SQLite archive: keys, round trips, dedup, persistence, scoping, hostile input."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextkit.archive import Archive, ArchiveEntry, default_archive_path
from contextkit.errors import ArchiveError, UsageError
from contextkit.markers import ArchiveSink, extract_keys, key_for, marker
from contextkit.messages import Origin

ANY_CHAR = st.characters(codec=None, exclude_categories=())  # includes lone surrogates and NUL
HOSTILE_KEYS = [
    "'; DROP TABLE entries; --",
    "0123456789abcde' OR '1'='1",
    "../../etc/passwd",
    "..\\..\\windows\\system32",
    "0123456789ABCDEF",  # upper case is not a stored key form
    "0123456789abcdef0",
    "0123456789abcde",
    "",
    "x" * 10_000,
    "a" * 1_000_000,
    "0123456789abcdef\x00",
    "%",
    "*",
]


def db_state(path: Path) -> tuple[bytes, bytes, tuple[int, ...]]:
    """Main file bytes, WAL bytes and row counts (read through a separate connection)."""
    wal = Path(str(path) + "-wal")
    conn = sqlite3.connect(path)
    try:
        counts = tuple(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("blobs", "entries"))
    finally:
        conn.close()
    return path.read_bytes(), wal.read_bytes() if wal.exists() else b"", counts


@pytest.fixture
def archive(open_archive):
    """Every test that takes it runs on both backends (SQLite file, PostgreSQL)."""
    with open_archive("a", session_id="s1") as arc:
        yield arc


# keys and dedup -----------------------------------------------------------------------------
def test_key_is_deterministic_sha256_prefix_and_distinct() -> None:
    assert key_for("hello") == hashlib.sha256(b"hello").hexdigest()[:16]
    assert key_for("hello") == key_for("hello")
    assert len(key_for("x")) == 16
    assert len({key_for(f"content {i}") for i in range(500)}) == 500


def test_put_returns_key_and_dedups(archive: Archive) -> None:
    key = archive.put("the original content", kind="tool_result")
    assert key == key_for("the original content")
    assert archive.put("the original content", kind="message") == key
    assert len(archive) == 1
    assert archive.entries()[0].kind == "tool_result"  # first put wins, re-put is a no-op
    assert archive.get(key) == "the original content"


def test_extract_keys_dedups_first_seen_order() -> None:
    a, b = "a" * 16, "b" * 16
    assert extract_keys(f"x {marker(b)} y {marker(a)} {marker(b)}") == [b, a]
    assert extract_keys("no markers here") == []


def test_content_with_marker_is_not_archived_unless_allowed(archive: Archive) -> None:
    stub = f"preview... [full content recoverable via @recall {marker('a' * 16)}]"
    assert archive.put(stub) is None
    assert len(archive) == 0
    key = archive.put(stub, kind="transcript", allow_markers=True)
    assert key == key_for(stub)
    assert archive.get(key) == stub


# round trip ------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=ANY_CHAR, max_size=300))
def test_round_trip_any_text(open_archive, text: str) -> None:
    with open_archive("roundtrip") as arc:
        key = arc.put(text, allow_markers=True)
        assert key is not None
        got = arc.get(key)
    assert got == text
    assert got is not None and got.encode("utf-8", "surrogatepass") == text.encode("utf-8", "surrogatepass")


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                           HealthCheck.function_scoped_fixture],
)
@given(unit=st.text(alphabet=ANY_CHAR, min_size=1, max_size=40), size=st.integers(200_000, 3_000_000))
def test_round_trip_huge_text(open_archive, unit: str, size: int) -> None:
    text = (unit * (size // len(unit) + 1))[:size]
    with open_archive("huge") as arc:
        key = arc.put(text, allow_markers=True)
        assert key is not None
        assert arc.get(key) == text
        assert arc.entry(key) is not None


def test_entries_record_metadata(archive: Archive) -> None:
    content = "línea 1\nline 2 \udc80"
    origin = {"role": "tool", "tool": "read_file", "path": "src/app.py", "line_start": 10, "line_end": 40}
    key = archive.put(content, kind="read", origin=origin, turn=3)
    assert key is not None
    entry = archive.entry(key)
    assert isinstance(entry, ArchiveEntry)
    assert (entry.key, entry.session_id, entry.kind, entry.turn) == (key, "s1", "read", 3)
    assert entry.bytes == len(content.encode("utf-8", "surrogatepass"))
    assert entry.origin == "tool read_file src/app.py:10-40 turn 3"
    assert entry.created_at > 1.6e9
    assert entry.preview.startswith("línea 1 line 2")
    assert archive.total_bytes == entry.bytes
    assert key in archive and "0" * 16 not in archive
    with pytest.raises(AttributeError):
        entry.kind = "x"  # type: ignore[misc]


def test_origin_from_message_origin_and_protocol(archive: Archive) -> None:
    sink: ArchiveSink = archive  # the policies' protocol is satisfied (checked by mypy too)
    key = archive.put(
        "read output", kind="read", origin=Origin(tool="read_file", path="a.py", line_start=3, line_end=9)
    )
    assert sink.put("read output", kind="read", origin={"tool": "x"}) == key
    entry = archive.entry(key or "")
    assert entry is not None and entry.origin == "read_file a.py:3-9"
    assert sink.get(key or "") == "read output"


def test_turn_taken_from_origin_mapping(archive: Archive) -> None:
    key = archive.put("turned", origin={"role": "assistant", "turn": 7})
    entry = archive.entry(key or "")
    assert entry is not None and entry.turn == 7 and entry.origin == "assistant turn 7"


def test_origin_string_and_separator_safety(archive: Archive) -> None:
    key = archive.put("x", origin="weird | origin\nwith newline")
    assert key is not None
    entry = archive.entry(key)
    assert entry is not None and entry.origin == "weird / origin with newline"


def test_persists_across_reopen(open_archive, archive_backend: str) -> None:
    with open_archive("reopen", session_id="s") as arc:
        key = arc.put("survives a restart", kind="segment")
        where = arc.location
    with open_archive("reopen", session_id="s") as again:
        assert again.get(key or "") == "survives a restart"
        assert len(again) == 1
        assert again.entries()[0].kind == "segment"
    if archive_backend == "sqlite":
        with sqlite3.connect(where) as raw:
            assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_nested_folder_is_created(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "archive.sqlite"
    with Archive(path, session_id="s") as arc:
        arc.put("x")
    assert path.exists()


def test_in_memory_archive_works_and_is_private() -> None:
    with Archive.in_memory(session_id="t") as one, Archive.in_memory(session_id="t") as two:
        key = one.put("only in one")
        assert one.get(key or "") == "only in one"
        assert two.get(key or "") is None
        assert one.path is None


# scoping ----------------------------------------------------------------------------------------
def test_sessions_read_only_their_scope_unless_granted(open_archive) -> None:
    with open_archive("shared", session_id="A") as a, open_archive("shared", session_id="B") as b:
        key_a = a.put("secret of A")
        key_b = b.put("note of B")
        assert key_a and key_b
        assert b.get(key_a) is None and key_a not in b
        assert a.get(key_b) is None
        assert len(a) == 1 and len(b) == 1
        assert b.recall(key_a).is_error
        b.grant("A")
        assert b.get(key_a) == "secret of A"
        assert len(b) == 2 and b.scopes == ("B", "A")
    with open_archive("shared", session_id="C", read_scopes=["A"]) as c:
        assert c.get(key_a) == "secret of A" and c.get(key_b) is None
    with open_archive("shared", session_id="D", read_scopes="B") as d:  # a lone string is one scope, not letters
        assert d.scopes == ("D", "B") and d.get(key_b) == "note of B"


def test_same_content_in_two_sessions_has_rows_per_session(archive: Archive) -> None:
    other = archive.with_scope("s2")
    assert archive.put("shared text", kind="message") == other.put("shared text", kind="read")
    assert [e.session_id for e in archive.entries()] == ["s1"]
    assert [(e.session_id, e.kind) for e in other.entries()] == [("s2", "read")]
    other.grant("s1")
    assert len(other) == 1  # one distinct content, own row preferred
    assert other.entries()[0].session_id == "s2"
    other.close()
    assert archive.get(key_for("shared text")) == "shared text"  # closing a view keeps the root open


# hostile keys ----------------------------------------------------------------------------------
def test_hostile_keys_are_misses_and_never_alter_the_db(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    with Archive(path) as arc:
        key = arc.put("precious")
        before = db_state(path)
        for bad in HOSTILE_KEYS:
            assert arc.get(bad) is None
            assert arc.entry(bad) is None
            assert bad not in arc
        assert arc.get(None) is None  # type: ignore[arg-type]
        assert arc.get(key.upper() if key else "") is None
        assert db_state(path) == before
        assert arc.get(key or "") == "precious"


# errors ----------------------------------------------------------------------------------------
def test_unopenable_path_raises_clear_archive_error(tmp_path: Path) -> None:
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("this is not a database, just some text " * 100)
    with pytest.raises(ArchiveError) as info:
        Archive(not_a_db)
    assert str(not_a_db) in str(info.value) and "Archive.in_memory()" in str(info.value)
    with pytest.raises(ArchiveError, match="cannot open the contextkit archive"):
        Archive(tmp_path)  # a directory
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ArchiveError, match="cannot create the folder"):
        Archive(blocker / "sub" / "a.sqlite")


def test_closed_archive_and_bad_arguments(tmp_path: Path) -> None:
    arc = Archive(tmp_path / "c.sqlite")
    arc.close()
    arc.close()  # idempotent
    with pytest.raises(ArchiveError, match="closed"):
        arc.get("0" * 16)
    with pytest.raises(UsageError, match="must be a str"):
        Archive.in_memory().put(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="session_id"):
        Archive.in_memory(session_id="  ")
    with pytest.raises(UsageError, match="scope"):
        Archive.in_memory().grant("")


def test_key_collision_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "col.sqlite"
    with Archive(path) as arc:
        arc.put("seed")
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO blobs(key, content, bytes) VALUES (?, ?, 3)", (key_for("victim"), b"xyz"))
    conn.commit()
    conn.close()
    with Archive(path) as arc, pytest.raises(ArchiveError, match="already holds different content"):
        arc.put("victim")


def test_default_path_from_env_and_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_archive_path({"CONTEXTKIT_ARCHIVE": str(tmp_path / "x.db")}) == tmp_path / "x.db"
    assert default_archive_path({"XDG_DATA_HOME": str(tmp_path)}) == tmp_path / "contextkit" / "archive.sqlite"
    assert default_archive_path({}).parts[-4:] == (".local", "share", "contextkit", "archive.sqlite")
    monkeypatch.setenv("CONTEXTKIT_ARCHIVE", str(tmp_path / "env" / "arc.sqlite"))
    with Archive() as arc:
        arc.put("from env")
        assert arc.path == tmp_path / "env" / "arc.sqlite"
    assert (tmp_path / "env" / "arc.sqlite").exists()


def test_threads_share_one_archive(archive: Archive) -> None:
    def work(n: int) -> int:
        for i in range(50):
            key = archive.put(f"thread {n} item {i}")
            assert archive.get(key or "") == f"thread {n} item {i}"
        return n

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert sorted(pool.map(work, range(4))) == [0, 1, 2, 3]  # map re-raises any worker failure
    assert len(archive) == 200


async def _async_puts(archive: Archive) -> list[str | None]:
    return list(await asyncio.gather(*(asyncio.to_thread(archive.put, f"async {i}") for i in range(20))))


def test_archive_is_usable_from_asyncio(archive: Archive) -> None:
    keys = asyncio.run(_async_puts(archive))
    assert [archive.get(k or "") for k in keys] == [f"async {i}" for i in range(20)]


def test_a_database_url_is_shown_and_saved_without_its_password() -> None:
    from contextkit.archive.postgres import safe_label
    from contextkit.archive.store import is_database_url

    url = "postgresql://ck:s3cret@db:5432/x?options=-csearch_path%3Dt1&password=zz&sslmode=require"
    assert safe_label(url) == "postgresql://ck@db:5432/x?options=-csearch_path%3Dt1&sslmode=require"
    assert is_database_url(url) and is_database_url("postgres://h/db") and not is_database_url("archive.sqlite")


def test_a_shared_store_closes_with_its_last_user_and_counts_live_scopes() -> None:
    """The lifecycle both backends inherit (``archive/sharing.py``), on a stand-in connection: the
    PostgreSQL backend runs it too, without a server here."""
    import threading

    from contextkit.archive.postgres import PostgresStore
    from contextkit.archive.sharing import SharedStore
    from contextkit.archive.sqlite import SqliteStore

    assert issubclass(SqliteStore, SharedStore) and issubclass(PostgresStore, SharedStore)
    assert SqliteStore._shared is not PostgresStore._shared  # each backend keeps its own registry

    class Conn:
        closed = 0

        def close(self) -> None:
            Conn.closed += 1

    class Store(SharedStore):
        _shared: dict = {}
        _shared_lock = threading.RLock()

        def __init__(self) -> None:
            self.conn, self.label, self.lock, self.users, self.live, self._key = Conn(), "x", threading.RLock(), 0, {}, None

    first = Store._share((1, "db"), Store)
    assert Store._share((1, "db"), Store) is first and first.users == 2
    first.acquire("a")
    first.acquire("a")
    first.release("a", user=False)
    assert first.live_scopes() == {"a"} and first.users == 2
    first.release("a")
    assert first.live_scopes() == set() and Conn.closed == 0
    first.release(None)
    assert Conn.closed == 1 and first.conn is None and (1, "db") not in Store._shared
    with pytest.raises(ArchiveError, match="is closed"):
        first.add_user()
    assert Store._share((1, "db"), Store) is not first  # a closed store is replaced, not reused
