"""A session's life: ``close()`` and ``with Session(...)``, many sessions in one process, one Archive shared by two."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from contextkit import Archive, Session, UsageError
from contextkit.events import ArchiveEvent
from contextkit.sim import GatewaySimulator

ROOT = Path(__file__).resolve().parents[1]


def make(gw: GatewaySimulator, **kw) -> Session:
    return Session(gw.model, api_base=gw.api_base, api_key="sim-key", status=None, **kw)


def test_close_releases_the_archive_the_session_opened(gw: GatewaySimulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTKIT_ARCHIVE", str(tmp_path / "default.sqlite"))
    with make(gw) as s:
        s.send("hello")
        archive = s.archive
        assert archive.location == str(tmp_path / "default.sqlite")
        assert s.workbench_path == tmp_path / "workbench" / f"{s.session_id}.md"
    assert s.closed and archive.closed
    assert [m.role for m in s.history] == ["user", "assistant"]  # still readable
    with pytest.raises(UsageError, match="closed session"):
        s.send("again")
    s.close()  # idempotent


def test_an_archive_passed_in_stays_open_for_its_owner(gw: GatewaySimulator) -> None:
    archive = Archive.in_memory(session_id="mine")
    with make(gw, archive=archive) as s:
        s.archive.put("kept after the session closes")
    assert not archive.closed and len(archive) == 1
    archive.close()


def test_one_archive_object_given_to_two_sessions_gives_each_its_own_scope(gw: GatewaySimulator) -> None:
    shared = Archive.in_memory()
    first, second = make(gw, archive=shared), make(gw, archive=shared)
    assert first.archive is shared and second.archive is not shared
    assert (first.archive.session_id, second.archive.session_id) == (first.session_id, second.session_id)
    k1 = first.archive.put("written by the first session")
    k2 = second.archive.put("written by the second session")
    assert first.archive.get(k2 or "") is None and second.archive.get(k1 or "") is None
    for session, key in ((first, k1), (second, k2)):
        puts = [e for e in session.events if isinstance(e, ArchiveEvent)]
        assert [e.key for e in puts] == [key] and all(e.session_id == session.session_id for e in puts)
    second.close()
    assert not shared.closed  # the view is closed, the object the caller passed is not
    third = make(gw, archive=shared)  # still claimed by the first session: a view again
    assert third.archive is not shared
    first.close()
    fourth = make(gw, archive=shared)  # released: the object itself
    assert fourth.archive is shared
    for s in (third, fourth):
        s.close()
    shared.close()


def test_thousands_of_sessions_in_one_process_under_ulimit_1024(tmp_path: Path) -> None:
    """2,000 sessions opened and closed (the first 100 each the file's only user, so its connection
    closes with it), and 1,100 open at once, with ``ulimit -n 1024``: one connection for all."""
    code = textwrap.dedent("""
        import resource
        import contextkit
        contextkit.offline()
        from contextkit import Archive, Session
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        kw = dict(api_base="http://127.0.0.1:9/v1", api_key="k", status=None)
        for i in range(2000):
            if i == 100:
                keeper = Archive()  # a long-lived user: later sessions reuse the open connection
            with Session("openai/gpt-4o-mini", **kw) as s:
                s.archive.put(f"note {i}")
        held = [Session("openai/gpt-4o-mini", **kw) for _ in range(1100)]
        for s in held:
            s.archive.put("held " + s.session_id)
        print(len({id(s.archive._store) for s in held}), sum(len(s.archive) for s in held))
        for s in held:
            s.close()
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CONTEXTKIT_ARCHIVE": str(tmp_path / "many.sqlite")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "1100"]
    with Archive(tmp_path / "many.sqlite") as arc:
        assert len(arc.sessions()) == 3100


@pytest.mark.real
def test_a_session_on_postgresql_is_saved_by_its_url_and_loaded_back(gw: GatewaySimulator, postgres_server, tmp_path: Path) -> None:
    from helpers.archives import postgres_opener

    url = postgres_opener(postgres_server).url_for("saved")
    with make(gw, archive=Archive(url), session_id="pg") as s:
        key = s.archive.put("kept in the database")
        s.send("hello")
        saved = s.save(tmp_path / "s.json")
    assert not (tmp_path / "s.archive.sqlite").exists()  # a database archive is never copied to a file
    data = __import__("json").loads(saved.read_text())
    assert data["archive"]["url"].startswith("postgresql://postgres@127.0.0.1:") and data["archive"]["path"] is None
    with Session.load(saved, api_base=gw.api_base, api_key="sim-key", status=None) as again:
        assert again.archive.get(key or "") == "kept in the database"


def test_an_archive_dropped_while_the_store_lock_is_held_does_not_deadlock(tmp_path: Path) -> None:
    """The garbage collector may run an unclosed Archive's finalizer in the thread that holds the
    store registry's lock (it did, inside ``SqliteStore.shared``, and the suite hung there)."""
    import threading

    from contextkit.archive.sqlite import SqliteStore

    dropped = Archive(tmp_path / "a.sqlite", session_id="dropped")
    finalizer = dropped._finalizer
    done = threading.Event()

    def collect_while_holding() -> None:
        with SqliteStore._shared_lock:
            finalizer()  # what the collector does when it frees the Archive here
            done.set()

    worker = threading.Thread(target=collect_while_holding, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert done.is_set(), "releasing an Archive while the registry lock is held deadlocked"
    with Archive(tmp_path / "a.sqlite", session_id="again") as again:  # the file opens again after it
        assert again.put("after the release", kind="note") is not None
