"""Retention and pruning: whole sessions by age, size and name; never one in use; space given back when it pays."""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
from pathlib import Path

import pytest
from helpers.archives import age_scope

from contextkit.archive import DEFAULT_RETENTION, Archive, Retention
from contextkit.archive.records import ScopeInfo, workbench_file
from contextkit.archive.retention import plan
from contextkit.errors import UsageError

NOW = 1_000_000_000.0


def info(name: str, age_days: float, size: int) -> ScopeInfo:
    return ScopeInfo(name, 1, size, NOW - age_days * 86_400, NOW - age_days * 86_400)


def test_plan_by_age_size_and_name() -> None:
    scopes = [info("old", 40, 100), info("mid", 10, 300), info("new", 0.1, 300)]
    assert plan(scopes, NOW, older_than=30 * 86_400) == (["old"], [])
    assert plan(scopes, NOW, max_bytes=400) == (["old", "mid"], [])  # the longest idle go first
    assert plan(scopes, NOW, named=["new"]) == (["new"], [])
    # rule-chosen sessions in use or written recently stay; a named one in use stays too
    assert plan(scopes, NOW, max_bytes=100, protected={"mid"}, keep_recent_s=86_400) == (["old"], ["mid", "new"])
    assert plan(scopes, NOW, named=["mid"], protected={"mid"}) == ([], ["mid"])


def test_the_default_is_documented_and_checked() -> None:
    assert (DEFAULT_RETENTION.max_age_s, DEFAULT_RETENTION.max_bytes) == (30 * 86_400, 2 << 30)
    with pytest.raises(UsageError, match="max_bytes"):
        Retention(max_bytes=0)


def age(path: Path, scope: str, days: float) -> None:
    with Archive(path) as arc:
        age_scope(arc, scope, days)


def test_prune_removes_whole_sessions_their_index_rows_and_workbench_files(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite"
    with Archive(path, session_id="keep") as keep:
        old = keep.with_scope("old")
        shared = "the same content, archived by both sessions"
        keep.put(shared)
        old.put(shared)
        old.put("only the old session had this ERR_OLD_7")
        old.close()
        bench = workbench_file(path, "old")
        bench.parent.mkdir()
        bench.write_text("set aside")
        age(path, "old", 45)
        assert keep.prune(older_than=dt.timedelta(days=30), dry_run=True).scopes == ("old",)
        assert len(keep.with_scope("old")) == 2  # a dry run changes nothing
        report = keep.prune(older_than=dt.timedelta(days=30))
        assert (report.scopes, report.entries, report.blobs, report.workbench_files) == (("old",), 2, 1, 1)
        assert not bench.exists()
        assert keep.get(keep.put(shared) or "") == shared  # shared content stays for the session that keeps it
        assert [s.session_id for s in keep.sessions()] == ["keep"]
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT count(*) FROM entries WHERE session_id = 'old'").fetchone() == (0,)
        raw.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, terms, 'row')")
        from contextkit.archive.query import scope_tag

        assert raw.execute("SELECT count(*) FROM temp.v WHERE term LIKE ?", (scope_tag("old") + "%",)).fetchone() == (0,)
        assert raw.execute("INSERT INTO terms(terms) VALUES ('integrity-check')").rowcount == 1  # index still sound


def test_prune_never_removes_a_session_that_is_open(open_archive) -> None:
    with open_archive("live", session_id="admin") as admin, open_archive("live", session_id="busy") as busy:
        busy.put("still needed")
        age_scope(admin, "busy", 90)
        report = admin.prune(older_than=0, sessions=["busy"])
        assert report.scopes == () and report.kept_live == ("busy",)
        assert busy.get(busy.put("still needed") or "") == "still needed"


def test_prune_by_size_removes_the_longest_idle_sessions(open_archive, archive_backend: str) -> None:
    with open_archive("size", session_id="admin") as admin:
        for n in range(6):
            view = admin.with_scope(f"s{n}")
            view.put(os.urandom(400_000).hex(), kind="blob")
            view.close()
            age_scope(admin, f"s{n}", 10 - n)
        report = admin.prune(max_bytes="2.5MB")  # six sessions of 800 KB: three go
        assert report.scopes == ("s0", "s1", "s2") and report.entries == 3 and report.blobs == 3
        assert sum(s.bytes for s in admin.sessions()) <= 2.5 * 1024 * 1024
        if archive_backend == "sqlite":  # the file gives the space back (PostgreSQL: autovacuum does)
            assert report.reclaimed_bytes > 2_000_000


def test_the_default_archive_applies_retention_at_most_once_a_day(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "default.sqlite"
    monkeypatch.setenv("CONTEXTKIT_ARCHIVE", str(path))
    with Archive(path, session_id="stale") as arc:  # a named path: no retention
        arc.put("from long ago")
        assert arc.retention is None
    age(path, "stale", 31)
    with Archive(session_id="today") as arc:  # the default location: DEFAULT_RETENTION, first check
        assert arc.retention == DEFAULT_RETENTION and arc.location == str(path)
        assert [s.session_id for s in arc.sessions()] == []
    with Archive(path, session_id="stale2") as arc:
        arc.put("also old")
    age(path, "stale2", 31)
    with Archive(session_id="today"):  # checked less than a day ago: nothing runs
        pass
    with Archive(path) as arc:
        assert [s.session_id for s in arc.sessions()] == ["stale2"]


def test_optimize_reports_what_it_did(tmp_path: Path) -> None:
    with Archive(tmp_path / "o.sqlite", session_id="o") as arc:
        arc.put("x")
        assert arc.optimize() == ["index merge"]  # nothing to give back
        assert arc.optimize(vacuum=True)[-1] == "vacuum"
