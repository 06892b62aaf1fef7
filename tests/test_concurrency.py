"""Concurrency: 50 sessions in threads plus 10 async sessions in one event loop, one process, ONE
archive file (different session ids) and a few simulators with different caps.

Every session of a profile runs the same (deterministic) workload as a solo reference run made
first, so any cross-talk of limits, learned caps, budgets or counters shows up as a difference
from the reference. Archive scopes and writes are checked per session and again through fresh
connections after the run.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.errors import UsageError
from contextkit.events import CapEvent, CompactionEvent, RecoveryEvent, RequestEvent
from contextkit.markers import key_for
from contextkit.policy.expand import expand_markers
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace

THREADS = 50
ASYNC = 10


@dataclass(frozen=True)
class Profile:
    name: str
    sim: dict[str, Any]
    limits: Limits


PROFILES = [
    Profile("413-24KB", {"max_body": "24KB", "reject_with": "413"}, Limits(context_window=1_000_000)),
    Profile(
        "waf-40KB",
        {"max_body": "40KB", "reject_with": "waf403"},
        Limits(context_window=1_000_000, tool_result_max_chars=9_000, max_payload="200KB"),
    ),
    Profile("overflow-3k", {"context_window": 3_000}, Limits(context_window=1_000_000, tool_result_turn_budget=50_000)),
    Profile("plain", {}, Limits(context_window=1_000_000, max_payload="1MB")),
]


def workload(sid: str) -> list[dict[str, Any]]:
    """The same sizes for every session (fixed-width id), different content (the note)."""
    ws = Workspace(seed=7, target_bytes=6_000)
    outs = [ws.read_file(f"src/c{i}.py") for i in range(6)]
    calls = [
        {"id": f"c{i}", "function": {"name": "read_file", "arguments": json.dumps({"path": o.path})}}
        for i, o in enumerate(outs)
    ]
    return [
        {"role": "user", "content": f"private note of session {sid}: keep it"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"c{i}", "content": o.content} for i, o in enumerate(outs)),
    ]


def make(gw: GatewaySimulator, profile: Profile, sid: str, archive: Archive) -> Session:
    return Session(gw.model, api_base=gw.api_base, api_key="sim-key", limits=profile.limits, archive=archive,
                   session_id=sid, status=None, on_flush=None)  # fmt: skip


def fingerprint(session: Session) -> dict[str, Any]:
    """Everything that must not depend on other sessions (ids aside)."""
    st = session._state
    stats = session.stats.to_dict()
    return {
        "cap": session.payload_cap,
        "cap_source": session.cap_source,
        "window": session.context_window,
        "turn_budget": st.turn_budget,
        "per_result": st.per_result_budget,
        # token counts depend on the content (archive keys tokenize differently); bytes do not
        "stats": {k: v for k, v in stats.items() if "token" not in k and "cost" not in k},
        "tokens": stats["tokens_sent"],
        "sizes": [len(m.content) for m in session.history],
        "requests": [(e.bytes, e.outcome, e.level) for e in session.events if isinstance(e, RequestEvent)],
    }


def run_sync(session: Session) -> None:
    session.archive.put(f"private archive entry of {session.session_id}", kind="note")
    session.add_messages(workload(session.session_id))
    session.send("summarize the code")
    session.send("and the risks?")


async def run_async(session: Session) -> None:
    session.archive.put(f"private archive entry of {session.session_id}", kind="note")
    session.add_messages(workload(session.session_id))
    await session.asend("summarize the code")
    await session.asend("and the risks?")


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, GatewaySimulator]]:
    started = {p.name: GatewaySimulator(**p.sim).start() for p in PROFILES}
    yield started
    for gw in started.values():
        gw.stop()


def test_many_sessions_share_one_archive_without_cross_talk(tmp_path: Path, sims: dict[str, GatewaySimulator]) -> None:
    path = tmp_path / "shared.sqlite"
    defaults = Limits()
    # solo references, one per profile, sync and async (separate archive file: scopes must not matter)
    reference: dict[tuple[str, str], dict[str, Any]] = {}
    with Archive(tmp_path / "ref.sqlite", session_id="ref") as ref_root:
        for p in PROFILES:
            solo = make(sims[p.name], p, "t999", ref_root.with_scope("t999-" + p.name))
            run_sync(solo)
            reference[(p.name, "sync")] = fingerprint(solo)
            solo = make(sims[p.name], p, "a999", ref_root.with_scope("a999-" + p.name))
            asyncio.run(run_async(solo))
            reference[(p.name, "async")] = fingerprint(solo)
    for gw in sims.values():
        gw.clear_log()

    root = Archive(path, session_id="root")
    sessions: dict[str, tuple[Session, Profile, str]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def worker(i: int) -> None:
        profile = PROFILES[i % len(PROFILES)]
        sid = f"t{i:03d}"
        # half share the root connection, half open their own connection to the same file
        archive = root.with_scope(sid) if i % 2 else Archive(path, session_id=sid)
        session = make(sims[profile.name], profile, sid, archive)
        sessions[sid] = (session, profile, "sync")
        try:
            barrier.wait(timeout=30)
            run_sync(session)
        except BaseException as exc:  # noqa: BLE001 - reported below with the session id
            errors.append(exc)

    async def async_sessions() -> None:
        batch = []
        for i in range(ASYNC):
            profile = PROFILES[i % len(PROFILES)]
            sid = f"a{i:03d}"
            session = make(sims[profile.name], profile, sid, Archive(path, session_id=sid))
            sessions[sid] = (session, profile, "async")
            batch.append(run_async(session))
        await asyncio.gather(*batch)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    asyncio.run(async_sessions())  # concurrently with the threads, in this thread's event loop
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[:3]
    assert len(sessions) == THREADS + ASYNC

    total_requests = 0
    for sid, (session, profile, mode) in sessions.items():
        # no cross-talk: identical to the solo run of the same profile
        got, want = fingerprint(session), reference[(profile.name, mode)]
        assert abs(got.pop("tokens") - want["tokens"]) <= 0.01 * want["tokens"], sid
        want = {k: v for k, v in want.items() if k != "tokens"}
        diff = {k: (got["stats"][k], want["stats"][k]) for k in got["stats"] if got["stats"][k] != want["stats"][k]}
        assert got == want, (sid, diff)
        assert session.limits is profile.limits
        assert all(e.session_id == sid for e in session.events), sid
        caps = [e for e in session.events if isinstance(e, CapEvent) and e.rejected_bytes]
        assert all(e.cap_bytes == (e.rejected_bytes or 0) * 3 // 4 for e in caps)
        total_requests += session.stats.requests
        # archive scope: only its own entries, and every key it wrote is readable (no lost writes)
        archive = session.archive
        entries = archive.entries()
        assert entries and {e.session_id for e in entries} == {sid}
        keys = {k for e in session.events if isinstance(e, RecoveryEvent | CompactionEvent) for k in e.archived_keys}
        assert all(archive.get(k) is not None for k in keys), sid
        assert "private archive entry of" in archive.recall_context("private archive entry")
        assert sid in archive.recall_context("private archive entry")
        originals = [m["content"] for m in workload(sid) if m.get("content")]
        expanded = expand_markers("\n".join(m.content for m in session.history), archive)
        assert all(c in expanded for c in originals), sid
    assert total_requests == sum(len(gw.requests) for gw in sims.values())

    # other sessions' private entries are invisible; durable through fresh connections
    ids = sorted(sessions)
    for n, sid in enumerate(ids):
        other = ids[(n + 1) % len(ids)]
        with Archive(path, session_id=sid) as fresh:
            assert fresh.get(key_for(f"private archive entry of {sid}")) is not None
            assert fresh.get(key_for(f"private archive entry of {other}")) is None
            assert other not in fresh.recall_context("private archive entry")
            assert len(fresh) == len(sessions[sid][0].archive)
    assert Limits() == defaults  # process defaults never mutated
    for session, _, _ in sessions.values():
        session.archive.close()
    root.close()


# one session used concurrently: turns are serialized, never interleaved ----------------------------------


def one_session(gw: GatewaySimulator, **kwargs: Any) -> Session:
    return Session(gw.model, api_base=gw.api_base, api_key="sim-key", archive=Archive.in_memory(session_id="one"),
                   session_id="one", status=None, limits=Limits(context_window=1_000_000), **kwargs)  # fmt: skip


def assert_turns_in_order(session: Session, questions: list[str]) -> None:
    pairs = [(m.role, m.content) for m in session.history]
    assert len(pairs) == 2 * len(questions)
    for user, assistant in zip(pairs[::2], pairs[1::2], strict=True):
        assert user[0] == "user" and assistant[0] == "assistant"
        assert assistant[1].endswith(user[1])  # the simulator echoes the question it answered
    assert sorted(u for _, u in pairs[::2]) == sorted(questions)


def test_gathered_asends_on_one_session_are_serialized() -> None:
    with GatewaySimulator(latency=0.05) as gw:
        session = one_session(gw)
        questions = [f"question {i}" for i in range(5)]

        async def main() -> list[Any]:
            return await asyncio.gather(*(session.asend(q) for q in questions))

        replies = asyncio.run(main())
    assert [r.text.split(": ", 1)[1] for r in replies] == questions
    assert_turns_in_order(session, questions)
    assert [int(r.text.split()[1].rstrip(":")) for r in replies] == [1, 2, 3, 4, 5]  # each saw the previous turns


def test_threads_sending_on_one_session_are_serialized() -> None:
    with GatewaySimulator(latency=0.02) as gw:
        session = one_session(gw)
        questions = [f"thread question {i}" for i in range(8)]
        threads = [threading.Thread(target=session.send, args=(q,)) for q in questions]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert_turns_in_order(session, questions)
    assert session.stats.requests == len(questions)


def test_reentry_from_a_tool_or_a_second_stream_is_refused() -> None:
    holder: dict[str, Session] = {}

    def ask_myself(question: str) -> str:
        """A tool that (wrongly) calls back into its own session."""
        return holder["s"].send(question).text

    with GatewaySimulator() as gw:
        session = holder["s"] = one_session(gw, tools=[ask_myself])
        reply = session.send('[[tool:ask_myself {"question": "loop?"}]] go')
        result = next(m for m in session.history if m.role == "tool")
        assert "UsageError" in result.content and "already running a turn" in result.content
        assert reply.text and [m.role for m in session.history] == ["user", "assistant", "tool", "assistant"]

        first = iter(session.stream("first stream"))
        head = next(first)
        second = iter(session.stream("second stream"))
        with pytest.raises(UsageError, match="already running a turn"):
            next(second)
        rest = "".join(first)
        assert (head + rest).endswith("first stream")
        assert session.send("after the streams").text  # the session is usable again
    assert [m.role for m in session.history][-4:] == ["user", "assistant", "user", "assistant"]


OPENER = """
import os, sys, time
from contextkit.archive import Archive
folder, go, name = sys.argv[1], sys.argv[2], sys.argv[3]
while not os.path.exists(go):
    time.sleep(0.0005)
for k in range(150):  # every child opens the same 150 new files in the same order: 150 races
    with Archive(os.path.join(folder, f"new{k}.sqlite"), session_id=name) as archive:
        archive.put(f"opened by {name}")
print("ok")
"""


def test_processes_opening_one_new_archive_at_once(tmp_path: Path) -> None:
    """Switching a new file to WAL does not wait on SQLite's busy handler: without a retry, processes
    opening the same new archive at once failed with "database is locked"."""
    import os
    import subprocess
    import sys
    import time

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", OPENER, str(tmp_path), str(go), f"p{i}"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(4)
    ]  # fmt: skip
    time.sleep(1.5)  # every child imported contextkit and waits at the barrier
    go.touch()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.strip() == "ok", err[-800:]
    for k in range(150):
        with Archive(tmp_path / f"new{k}.sqlite", session_id="p0") as archive:
            assert [archive.with_scope(f"p{i}").get(key_for(f"opened by p{i}")) for i in range(4)] == [
                f"opened by p{i}" for i in range(4)
            ]
