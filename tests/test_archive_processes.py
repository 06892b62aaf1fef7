"""The archive across real processes: persistence after exit, concurrent writers, sessions sharing one database."""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers.archives import postgres_opener

from contextkit.archive import Archive
from contextkit.markers import key_for

ROOT = Path(__file__).resolve().parents[1]

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from contextkit.archive import Archive

    path, name, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    with Archive(path, session_id="shared") as arc:
        (go.parent / f"ready-{name}").touch()
        deadline = time.monotonic() + 20
        while not go.exists() and time.monotonic() < deadline:  # start together to overlap the writes
            time.sleep(0.005)
        for i in range(count):
            arc.put(f"{name} entry {i} " + "payload " * (i % 50), kind="tool_result", origin={"tool": name}, turn=i)
            if i % 7 == 0:
                arc.with_scope(name).put(f"private {name} {i}")
            time.sleep(0.002)  # a real writer does work between puts; keeps the two runs overlapping
    print("done", name)
    """
)


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_content_put_by_another_process_is_read_back_after_it_exits(tmp_path: Path) -> None:
    path = tmp_path / "arc.sqlite"
    content = "written by a child process \u00e9\u4e2d \udc80\x00 end"
    code = textwrap.dedent(
        """
        import sys
        from contextkit.archive import Archive
        with Archive(sys.argv[1], session_id="child") as arc:
            print(arc.put(sys.argv[2].encode("utf-8", "surrogateescape").decode("unicode_escape"), kind="segment"))
        """
    )
    escaped = content.encode("unicode_escape").decode("ascii")
    proc = run_python(code, str(path), escaped)
    assert proc.returncode == 0, proc.stderr
    key = proc.stdout.strip()
    assert key == key_for(content)
    with Archive(path, session_id="child") as arc:
        assert arc.get(key) == content
        assert arc.entries()[0].kind == "segment"
        assert arc.recall(key).text == content
    with Archive(path, session_id="someone-else") as other:
        assert other.get(key) is None  # scoping holds across processes too


def test_reader_open_before_a_writer_sees_its_puts(tmp_path: Path) -> None:
    path = tmp_path / "live.sqlite"
    with Archive(path, session_id="s") as reader:
        assert len(reader) == 0
        code = "import sys; from contextkit.archive import Archive; Archive(sys.argv[1], session_id='s').put('late')"
        proc = run_python(code, str(path))
        assert proc.returncode == 0, proc.stderr
        assert reader.get(key_for("late")) == "late"
        assert reader.recall_context_result("late").used_items == 1


def test_two_processes_writing_concurrently_lose_nothing(tmp_path: Path, open_archive) -> None:
    path = open_archive.url_for("busy")  # an SQLite file, or a PostgreSQL database
    go = tmp_path / "go"
    count = 200
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name, str(count), str(go)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("alpha", "beta")
    ]
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"ready-{n}").exists() for n in ("alpha", "beta")) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # both have the database open: release them together so their writes overlap
    outputs = [p.communicate(timeout=60) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert out.startswith("done")
    with open_archive("busy", session_id="shared") as arc:
        assert len(arc) == 2 * count
        for name in ("alpha", "beta"):
            for i in range(count):
                text = f"{name} entry {i} " + "payload " * (i % 50)
                assert arc.get(key_for(text)) == text
        writers = [e.origin.split()[0] for e in arc.entries() if e.session_id == "shared"]
        assert set(writers) == {"alpha", "beta"}
        assert sum(a != b for a, b in itertools.pairwise(writers)) > 1, "the writes did not interleave"
        assert arc.recall_context_result("alpha", max_items=50).used_items > 0
        private = arc.with_scope("alpha")
        assert len(private) == len(range(0, count, 7))


SESSION = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import contextkit
    contextkit.offline()
    from contextkit import Archive, Session

    location, api_base, me, other, folder = sys.argv[1:6]
    archive = Archive(location, session_id=me, read_scopes=[other])
    with Session("openai/sim-model", api_base=api_base, api_key="k", archive=archive, session_id=me, status=None) as s:
        key = s.archive.put(f"notes of {me}: the build uses port 84{me[-1]}3", kind="note")
        (Path(folder) / f"{me}.key").write_text(key)
        s.send("hello from " + me)
        deadline = time.monotonic() + 60
        while not (Path(folder) / f"{other}.key").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        theirs = (Path(folder) / f"{other}.key").read_text()
        reply = s.send(f"what did the other process note? @recall <<ccr:{theirs}>>")
        recalled = [m.content for m in s.history if m.is_recall]
        own = [e.session_id for e in s.archive.entries()]
        print(repr((recalled, sorted(set(own)), reply.text != "")))
    archive.close()
    """
)


@pytest.mark.real
def test_sessions_in_two_processes_share_one_database_each_in_its_own_scope(tmp_path: Path, postgres_server, gw) -> None:
    """PostgreSQL: the archive for many hosts (an SQLite file shared by processes is covered above)."""
    open_archive = postgres_opener(postgres_server)
    location = open_archive.url_for("fleet")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SESSION, location, gw.api_base, me, other, str(tmp_path)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for me, other in (("pa", "pb"), ("pb", "pa"))
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        results.append(ast.literal_eval(out.strip().splitlines()[-1]))
    for (recalled, listed_scopes, answered), other in zip(results, ("pb", "pa"), strict=True):
        assert any(f"notes of {other}: the build uses port" in text for text in recalled)  # a granted scope, across processes
        assert set(listed_scopes) <= {"pa", "pb"} and answered
    with open_archive("fleet", session_id="pa") as pa, open_archive("fleet", session_id="pb") as pb:
        assert [e.session_id for e in pa.entries()] == ["pa"] and [e.session_id for e in pb.entries()] == ["pb"]
        assert pa.get((tmp_path / "pb.key").read_text()) is None  # not granted here: its own scope only
