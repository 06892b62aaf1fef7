"""The SQLite archive's schema version (``PRAGMA user_version``) and the migration from files written before it."""

from __future__ import annotations

import multiprocessing
import shutil
import sqlite3
from pathlib import Path

import pytest

from contextkit.archive import Archive
from contextkit.archive.query import scope_tag
from contextkit.archive.sqlite_schema import SCHEMA_VERSION
from contextkit.errors import ArchiveError
from contextkit.markers import key_for

FIXTURE = Path(__file__).parent / "fixtures" / "archive_schema0.sqlite"
HANDLER = "def handler(request):\n    return ERR_CONN_4471 in request.log\n"
ODD = "línea café \udc80 lone surrogate and NUL \x00 kept"
SEGMENT = "the deployment uses port 8443 and the staging cluster eu-west-3\n" * 40
BETA = "beta's own note: invoice INV-2026-0042 was paid"


def old_file(tmp_path: Path) -> Path:
    target = tmp_path / "old.sqlite"
    shutil.copyfile(FIXTURE, target)
    return target


def test_the_fixture_is_a_schema_0_file() -> None:
    with sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True) as raw:
        assert raw.execute("PRAGMA user_version").fetchone() == (0,)
        names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
        columns = [r[1] for r in raw.execute("PRAGMA table_info(entries)")]
    assert "fts" in names and "terms" not in names and "id" not in columns and "preview" not in columns


def test_a_file_written_by_schema_0_is_read_after_the_migration(tmp_path: Path) -> None:
    path = old_file(tmp_path)
    with Archive(path, session_id="alpha") as alpha:
        assert alpha.schema_version == SCHEMA_VERSION
        assert alpha.get(key_for(HANDLER)) == HANDLER
        assert alpha.get(key_for(ODD)) == ODD  # lone surrogate and NUL, byte-exact
        assert alpha.get(key_for(SEGMENT)) == SEGMENT
        assert alpha.get(key_for(BETA)) is None  # scopes survive the migration
        listed = alpha.entries()
        assert [e.key for e in listed] == [key_for(HANDLER), key_for(ODD), key_for(SEGMENT)]
        first = listed[0]
        assert (first.kind, first.origin, first.turn) == ("tool_result", "tool read_file src/app.py:1-2 turn 1", 1)
        assert first.preview.startswith("def handler(request): return ERR_CONN_4471")
        assert len(alpha) == 3 and alpha.total_bytes == sum(len(c.encode("utf-8", "surrogatepass")) for c in (HANDLER, ODD, SEGMENT))
        # the rebuilt index: identifiers match exactly, words rank, in this scope only
        pack = alpha.recall_context_result("ERR_CONN_4471")
        assert [i.key for i in pack.items] == [key_for(HANDLER)]
        assert alpha.recall_context_result("staging cluster").items[0].key == key_for(SEGMENT)
        assert alpha.recall_context("INV-2026-0042") == "No matching archived context was found."
        beta = alpha.with_scope("beta")
        assert beta.recall_context_result("INV-2026-0042").items[0].key == key_for(BETA)
        assert [e.kind for e in beta.entries()] == ["tool_result", "read"]
        beta.close()
        key = alpha.put("written after the migration", kind="note")
        assert key is not None and alpha.get(key) == "written after the migration"
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
        scopes = dict(raw.execute("SELECT session_id, entries FROM scopes"))
    assert "fts" not in names and "entries_v0" not in names and scopes == {"alpha": 4, "beta": 2}


def test_every_index_term_carries_its_scope(tmp_path: Path) -> None:
    """The scope is part of the index: a search in one session looks up terms no other session has."""
    with Archive(old_file(tmp_path), session_id="alpha"):
        pass
    raw = sqlite3.connect(tmp_path / "old.sqlite")
    raw.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, terms, 'row')")
    terms = [t for (t,) in raw.execute("SELECT term FROM temp.vocab")]
    raw.close()
    tags = {scope_tag("alpha"), scope_tag("beta")}
    assert terms and all(t[: len(scope_tag("x"))] in tags for t in terms)
    assert scope_tag("alpha") + "4471" in terms and scope_tag("beta") + "4471" in terms  # each scope's own copy


def test_a_newer_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    with Archive(path, session_id="x") as arc:
        arc.put("from today")
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = path.read_bytes()
    with pytest.raises(ArchiveError, match=rf"schema version {SCHEMA_VERSION + 1}.*newer contextkit.*upgrade"):
        Archive(path, session_id="x")
    assert path.read_bytes() == before


def test_a_new_file_starts_at_the_current_version(tmp_path: Path) -> None:
    with Archive(tmp_path / "new.sqlite", session_id="x") as arc:
        assert arc.schema_version == SCHEMA_VERSION
    with sqlite3.connect(tmp_path / "new.sqlite") as raw:
        assert raw.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # incremental: pruning can give space back


def _open_and_read(path: str, queue: multiprocessing.Queue) -> None:
    with Archive(path, session_id="alpha") as arc:
        queue.put((arc.schema_version, arc.get(key_for(HANDLER)) == HANDLER, len(arc)))


def test_processes_opening_an_old_file_at_once_migrate_it_once(tmp_path: Path) -> None:
    path = old_file(tmp_path)
    ctx = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue = ctx.Queue()
    procs = [ctx.Process(target=_open_and_read, args=(str(path), queue)) for _ in range(3)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert results == [(SCHEMA_VERSION, True, 3)] * 3
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT count(*) FROM entries").fetchone() == (5,)  # no entry copied twice
