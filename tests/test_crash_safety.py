"""Crash safety with real processes killed by SIGKILL (no cleanup, no atexit, no flush).

(a) in the middle of a compaction: blocked inside an ``on_flush`` sink, or waiting for the
    summarizer's answer;
(b) in the middle of a stream of archive writes;
(c) in the middle of ``Session.save``.

Afterwards the archive opens cleanly (SQLite integrity check), every entry written before the kill
is intact byte-exact (content addressing lets us verify *every* entry: its key is the SHA-256
prefix of its content), and the saved session reloads to its last consistent state and continues.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contextkit.archive import Archive
from contextkit.markers import key_for
from contextkit.policy.expand import expand_markers
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL semantics are POSIX")

# Shared by the parent and the children: deterministic content, so the parent can check bytes.
PRELUDE = textwrap.dedent(
    '''
    import json
    from contextkit.sim import Workspace

    def payload(i):
        """Entry i of the write stream: sizes from a few bytes to ~300 KB, some invalid Unicode."""
        body = Workspace(seed=i % 7, target_bytes=1 + (i * 7919) % 300_000).read_file(f"f{i}.py").content
        return f"entry {i}\\n" + body + ("\\udcff lone surrogate" if i % 5 == 0 else "")

    def workload(turns=4):
        ws = Workspace(seed=11, target_bytes=9_000)
        messages = []
        for t in range(turns):
            out = ws.read_file(f"src/t{t}.py")
            call = {"id": f"c{t}", "function": {"name": "read_file", "arguments": json.dumps({"path": out.path})}}
            messages += [
                {"role": "user", "content": f"step {t}: read src/t{t}.py"},
                {"role": "assistant", "content": f"Reading src/t{t}.py.", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{t}", "content": out.content},
                {"role": "assistant", "content": f"src/t{t}.py has {out.lines} lines; noted."},
            ]
        return messages
    '''
)
_shared: dict[str, Any] = {}
exec(PRELUDE, _shared)
payload: Callable[[int], str] = _shared["payload"]
workload: Callable[..., list[dict[str, Any]]] = _shared["workload"]

COMPACTION_CHILD = PRELUDE + textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from contextkit import Limits
    from contextkit.archive import Archive
    from contextkit.session.core import Session

    d, api_base, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]

    def blocking_flush(segment, info):
        (d / "in_compaction").write_text(info.phase)
        time.sleep(600)

    session = Session(
        "openai/sim-model", api_base=api_base, api_key="sim-key", session_id="crash",
        archive=Archive(d / "archive.sqlite", session_id="crash"),
        limits=Limits(context_window=1_000_000, summary_timeout=600, request_timeout=600, min_keep_recent=2),
        status=None, on_flush=blocking_flush if mode == "flush" else None,
    )
    session.add_messages(workload())
    session.send("first question")          # microcompact archives old reads (committed)
    session.save(d / "session.json")
    (d / "saved.json").write_text(json.dumps(len(session.history)))
    session.compact("keep every file name")  # blocks: in on_flush, or waiting for the summary
    (d / "finished").write_text("compaction returned - the test expected it to block")
    """
)

WRITER_CHILD = PRELUDE + textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from contextkit.archive import Archive

    d = Path(sys.argv[1])
    archive = Archive(d / "archive.sqlite", session_id="writer")
    with open(d / "manifest", "a") as manifest:
        i = 0
        while True:
            key = archive.put(payload(i), kind="stream", origin={"i": i})
            manifest.write(f"{i} {key}\\n")
            manifest.flush()
            os.fsync(manifest.fileno())
            i += 1
    """
)

SAVER_CHILD = PRELUDE + textwrap.dedent(
    """
    import os
    import sys
    from pathlib import Path
    from contextkit import Limits
    from contextkit.archive import Archive
    from contextkit.session.core import Session

    d = Path(sys.argv[1])
    session = Session("openai/sim-model", api_base="http://127.0.0.1:9/v1", api_key="x", session_id="saver",
                      archive=Archive(d / "archive.sqlite", session_id="saver"),
                      limits=Limits(context_window=1_000_000), status=None)
    big = Workspace(seed=3, target_bytes=400_000).read_file("big.py").content
    n = 0
    while True:
        session.add_messages([{"role": "user", "content": f"message {n}\\n" + big}])
        session.save(d / "session.json")
        (d / "saved_count.tmp").write_text(str(n + 1))
        os.replace(d / "saved_count.tmp", d / "saved_count")  # the parent never reads a half-written count
        n += 1
    """
)


def spawn(code: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def wait_for(check: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise AssertionError(f"child exited early ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("child never reached the point to kill it")
        time.sleep(0.02)


def kill9(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    if proc.stderr is not None:
        proc.stderr.close()


def check_archive(path: Path) -> dict[str, str]:
    """Integrity check, then every entry's content hashes to its key; returns key -> content."""
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = conn.execute("SELECT DISTINCT session_id FROM entries").fetchall()
    finally:
        conn.close()
    contents: dict[str, str] = {}
    for (scope,) in rows:
        with Archive(path, session_id=scope) as archive:
            for entry in archive.entries():
                content = archive.get(entry.key)
                assert content is not None and key_for(content) == entry.key, entry
                contents[entry.key] = content
    return contents


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewaySimulator]:
    with GatewaySimulator(summary_mode="timeout", timeout_sleep=20) as sim:
        yield sim


@pytest.mark.parametrize("mode", ["flush", "summarizer"])
def test_kill_during_compaction(tmp_path: Path, gw: GatewaySimulator, mode: str) -> None:
    gw.reset(summary_mode="timeout", timeout_sleep=20)
    proc = spawn(COMPACTION_CHILD, str(tmp_path), gw.api_base, mode)
    if mode == "flush":
        wait_for(lambda: (tmp_path / "in_compaction").exists(), proc)
    else:
        wait_for(lambda: any(r.kind == "summary" for r in gw.requests), proc)
    time.sleep(0.05)
    kill9(proc)
    assert not (tmp_path / "finished").exists()

    contents = check_archive(tmp_path / "archive.sqlite")
    assert contents, "the turn and the compaction had archived content before the kill"
    saved_count = json.loads((tmp_path / "saved.json").read_text())
    resumed = Session.load(tmp_path / "session.json", api_base=gw.api_base, api_key="sim-key", status=None)
    assert len(resumed.history) == saved_count  # the last consistent state: as saved, before compacting
    expanded = expand_markers("\n".join(m.content for m in resumed.history), resumed.archive)
    assert all(m["content"] in expanded for m in workload() if m["content"])  # nothing lost
    gw.reset()
    assert resumed.send("are we back?").text  # and the session continues on the same archive
    resumed.archive.close()


@pytest.mark.parametrize("delay", [0.0, 0.13, 0.37])
def test_kill_during_archive_writes(tmp_path: Path, delay: float) -> None:
    proc = spawn(WRITER_CHILD, str(tmp_path))
    manifest = tmp_path / "manifest"
    wait_for(lambda: manifest.exists() and manifest.read_text().count("\n") >= 12, proc)
    time.sleep(delay)
    kill9(proc)

    lines = [line.split() for line in manifest.read_text().splitlines() if line.strip()]
    contents = check_archive(tmp_path / "archive.sqlite")
    for index, key in lines:  # every write that completed before the kill is intact, byte-exact
        assert contents.get(key) == payload(int(index)), index
    with Archive(tmp_path / "archive.sqlite", session_id="writer") as archive:
        assert len(archive) >= len(lines)
        assert archive.get(archive.put("written after the crash") or "") == "written after the crash"


def test_kill_during_save_keeps_the_previous_file(tmp_path: Path) -> None:
    rng = random.Random(5)
    torn = 0
    counter = tmp_path / "saved_count"
    for _ in range(3):
        proc = spawn(SAVER_CHILD, str(tmp_path))
        wait_for(lambda: counter.exists() and int(counter.read_text() or 0) >= 1, proc)
        time.sleep(rng.uniform(0.0, 0.2))
        kill9(proc)
        done = int(counter.read_text())
        torn += any(tmp_path.glob("session.json.*.tmp"))  # killed while writing the temporary file
        data = json.loads((tmp_path / "session.json").read_text())  # never a torn file
        assert done <= len(data["history"]) <= done + 1
        loaded = Session.load(tmp_path / "session.json", status=None)
        contents = [m.content for m in loaded.history]
        assert all(c.startswith(f"message {i}\n") for i, c in enumerate(contents))
        loaded.archive.close()
        counter.unlink()
        for stale in tmp_path.glob("session.json*"):
            stale.unlink()
    print(f"kills during a save write: {torn}/3")
    check_archive(tmp_path / "archive.sqlite")
