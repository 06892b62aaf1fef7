"""Streaming under faults, concurrency and cancellation, combined (the main streaming tests take them one at a time).

Order and counts only: the simulator's ``StreamGate`` holds replies, faults are queued one-shot.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from helpers.faults import FAULTS, GATEWAYS, PROFILE, run_sequence, run_turn
from helpers.histories import read_history
from helpers.logcheck import assert_known_limits_respected
from hypothesis import given, settings
from hypothesis import strategies as st

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.errors import UsageError
from contextkit.events import NoticeEvent, StreamEvent
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace, long_text
from contextkit.sim.model import CONTINUATION_TRIGGER

SAFETY = 20.0  # seconds a held reply waits before the server lets it go (a failed test, never a pass)
SENTENCE = re.compile(r"Sentence (\d+) says")


def make_session(gw: GatewaySimulator, session_id: str = "s", **kwargs: Any) -> Session:
    kw = gw.litellm_kwargs()
    model = kw.pop("model")
    kwargs.setdefault("archive", Archive.in_memory(session_id=session_id))
    kwargs.setdefault("status", None)
    kwargs.setdefault("limits", Limits(context_window=1_000_000, retry_backoff=0.0))
    return Session(model, session_id=session_id, **kw, **kwargs)


def kinds(session: Session) -> list[str]:
    return [e.kind for e in session.events if isinstance(e, StreamEvent)]


def clean(session: Session) -> None:
    assert not any(CONTINUATION_TRIGGER in m.content for m in session.history)


def sentences_once(text: str) -> None:
    numbers = [int(n) for n in SENTENCE.findall(text)]
    assert numbers == list(range(1, len(numbers) + 1)), f"sentences repeated or missing: {numbers[:40]}"


# many astream sessions at once, with faults landing on whichever request comes next -------------------------


def test_concurrent_astreams_with_faults_continue_each_answer_in_its_own_session(gw: GatewaySimulator) -> None:
    n = 12
    sessions = [make_session(gw, f"c{i}") for i in range(n)]
    faults = ["stream_drop", "stream_error", "500", "429", "drop", "stream_drop", "stream_drop", "stream_error"]
    for fault in faults:
        gw.fail_next(fault)

    async def one(session: Session, i: int) -> tuple[list[str], Any]:
        stream = session.astream(f"[[long:{60 + i}]] session {i}")
        return [d async for d in stream], stream

    async def main() -> list[tuple[list[str], Any]]:
        return await asyncio.gather(*(one(s, i) for i, s in enumerate(sessions)))

    results = asyncio.run(main())
    assert sorted(r.reason for r in gw.requests if r.reason.startswith("fault:")) == sorted(
        f"fault:{f}" for f in faults
    )
    for i, (session, (deltas, stream)) in enumerate(zip(sessions, results, strict=True)):
        text = "".join(deltas)
        assert text == stream.reply.text == long_text(60 + i)  # its own answer, each sentence once
        sentences_once(text)
        assert [(m.role, m.content) for m in session.history] == [("user", f"[[long:{60 + i}]] session {i}"),
                                                                  ("assistant", text)]  # fmt: skip
        clean(session)
    assert sum(s.stats.retries for s in sessions) == len(faults)


# cancelled while recovering ----------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", ["stream", "astream"])
def test_cancelled_during_the_continuation_leaves_the_history_as_before(gw: GatewaySimulator, loop: str) -> None:
    """The stream drops, the flow continues the answer; the reader leaves while the continuation
    streams: the provider stream is closed, the partial and the continuation prompt are gone."""
    session = make_session(gw, system="Be brief.")
    session.send("first question")
    before = session.history
    gw.fail_next("stream_drop")
    question = "[[long:300]] a long answer"
    shown: list[str] = []
    if loop == "stream":
        stream = session.stream(question)
        for delta in stream:
            shown.append(delta)
            if "continuation" in kinds(session):
                break
        del stream
    else:

        async def run() -> None:
            stream = session.astream(question)
            async for delta in stream:
                shown.append(delta)
                if "continuation" in kinds(session):
                    break
            await stream.aclose()
            assert stream.cancelled and stream.reply is None

        asyncio.run(run())
    assert session.history == before
    assert kinds(session)[-2:] == ["continuation", "cancelled"]
    assert long_text(300).startswith("".join(shown))  # what the reader saw is in order, never repeated
    assert [r.reason for r in gw.requests][:2] == ["ok", "fault:stream_drop"]
    notices = [e.code for e in session.events if isinstance(e, NoticeEvent)]
    assert notices.count("turn_cancelled") == 1 and "turn_failed" not in notices
    assert session.send("and now?").text
    assert [m.role for m in session.history] == ["system", "user", "assistant", "user", "assistant"]
    clean(session)


def test_cancelling_an_astream_task_during_the_retry_back_off_undoes_the_turn(gw: GatewaySimulator) -> None:
    """A 500 puts the turn to sleep before its retry; cancelling the task then rolls the turn back."""
    session = make_session(gw, limits=Limits(context_window=1_000_000, retry_backoff=30.0))
    session.send("first question")
    before = session.history
    gw.fail_next("500")  # retried after retry_backoff (30 s): the test cancels during the sleep

    async def main() -> None:
        loop = asyncio.get_running_loop()
        retrying = asyncio.Event()
        session.events.subscribe(
            lambda e: (
                loop.call_soon_threadsafe(retrying.set) if isinstance(e, NoticeEvent) and e.code == "retry" else None
            )
        )
        stream = session.astream("[[long:50]] please")

        async def read() -> None:
            async for _ in stream:
                pass

        task = asyncio.create_task(read())
        await retrying.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert session.history == before and len(gw.requests) == 2  # the retry was never sent
    assert kinds(session)[-1] == "cancelled"
    assert session.send("and now?").text


# ordinary mistakes with stream objects -------------------------------------------------------------------------


def test_a_stream_never_iterated_does_not_hold_the_session(gw: GatewaySimulator) -> None:
    session = make_session(gw)
    unused = session.stream("never read")
    assert session.send("hello").text
    assert [m.content for m in session.history] == ["hello", "Reply 1: hello"]
    assert list(unused)  # it still runs its own turn when read later
    assert len(session.history) == 4


def test_a_half_read_stream_blocks_other_turns_with_a_clear_error_until_closed(gw: GatewaySimulator) -> None:
    session = make_session(gw)
    session.send("first")
    before = session.history
    stream = session.stream("[[long:100]] long")
    next(stream)
    with pytest.raises(UsageError, match="stream not yet consumed"):
        session.send("meanwhile")
    with pytest.raises(UsageError, match="already running"):
        asyncio.run(session.asend("meanwhile"))
    assert session.history[: len(before)] == before
    stream.close()
    assert session.history == before and kinds(session)[-1] == "cancelled"
    assert session.send("now").text


@pytest.mark.parametrize("operation", ["add_messages", "save", "reset_limits", "rewind", "compact"])
def test_changing_the_session_while_a_stream_is_open_is_refused_and_nothing_is_lost(
    gw: GatewaySimulator, operation: str, tmp_path: Any
) -> None:
    """``add_messages`` used to append into the open turn: the messages were lost when the stream was
    closed (the turn's rollback) and landed between the question and its answer when it finished;
    ``save`` wrote the half-made turn to disk."""
    session = make_session(gw, archive=Archive(tmp_path / "a.sqlite", session_id="s"))
    session.send("first")
    before = session.history
    calls = {
        "add_messages": lambda: session.add_messages([{"role": "user", "content": "added mid-turn"}]),
        "save": lambda: session.save(tmp_path / "s.json"),
        "reset_limits": session.reset_limits,
        "rewind": session.rewind,
        "compact": lambda: session.compact("keep it"),
    }
    stream = session.stream("[[long:100]] long")
    next(stream)
    with pytest.raises(UsageError, match=f"{operation}\\(\\) called while this session is already running a turn"):
        calls[operation]()
    assert not (tmp_path / "s.json").exists()
    rest = "".join(stream)
    assert [m.role for m in session.history] == ["user", "assistant", "user", "assistant"]
    assert session.history[:2] == before and session.history[-1].content.endswith(rest)
    calls[operation]()  # fine once the turn is over


@pytest.mark.parametrize("text", [None, 42, b"bytes"])
def test_streaming_a_wrong_type_is_a_clear_error_before_anything_is_sent(gw: GatewaySimulator, text: Any) -> None:
    session = make_session(gw)
    with pytest.raises(Exception, match="takes a string, a Message or a list of messages") as info:
        list(session.stream(text))
    assert type(info.value).__module__.startswith("contextkit")  # our error, not a deep one
    assert not gw.requests and session.history == []


# never re-send a refused size, whichever loop sends ------------------------------------------------------------


def test_send_stream_and_astream_in_turn_never_resend_a_refused_size(gw: GatewaySimulator) -> None:
    """A streamed body is 14 bytes bigger than the same body sent: the known-limit check must see
    the body as each loop sends it, whichever loop met the refusal."""
    gw.configure(max_body="40KB", reject_with="413")
    session = make_session(gw)
    logs = Workspace(seed=4, target_bytes=9_000)
    loops = ["send", "stream", "astream"] * 3
    for i, loop in enumerate(loops):
        text = f"turn {i}: log\n" + logs.tail_log(150).content
        if loop == "send":
            session.send(text)
        elif loop == "stream":
            stream = session.stream(text)
            assert "".join(stream) == stream.reply.text
        else:

            async def run(text: str = text) -> None:
                stream = session.astream(text)
                assert "".join([d async for d in stream]) == stream.reply.text

            asyncio.run(run())
    refused = [r for r in gw.requests if not r.accepted]
    assert refused and {r.stream for r in gw.requests} == {True, False}
    assert_known_limits_respected(gw.requests)
    assert all(r.bytes < refused[0].bytes for r in gw.requests if r.seq > refused[0].seq)


def test_an_empty_stream_on_a_big_history_is_recovered_in_astream_with_the_history_whole(gw: GatewaySimulator) -> None:
    """llama.cpp's empty 200 on overflow, in the async loop, with a history that must be compacted:
    the window is learned from the unstreamed probe, and everything compacted is in the archive."""
    from contextkit.policy.expand import expand_markers

    gw.configure(context_window=4_000, empty_stream_on_overflow=True)
    session = make_session(gw)
    history = read_history(n=6, size=6_000)
    session.add_messages(history)

    async def run() -> tuple[list[str], Any]:
        stream = session.astream("Summarize what you read.")
        return [d async for d in stream], stream

    deltas, stream = asyncio.run(run())
    assert "".join(deltas) == stream.reply.text and stream.reply.text.startswith("Reply")
    assert session.context_window == 4_000
    assert [r.stream for r in gw.requests][:2] == [True, False]  # the empty stream, then the probe
    expanded = expand_markers("\n".join(m.content for m in session.history), session.archive)
    assert all(m["content"] in expanded for m in history)


# the random-fault property, streamed: random faults (stream faults too) at random turns of stream / astream turns ---

STREAM_FAULTS = (*FAULTS, "stream_drop", "stream_error")
streamed_turns = st.lists(
    st.tuples(
        st.sampled_from([None, "read_file", "grep", "tail_log", "get_json"]),
        st.sampled_from([0, 0, 2_000, 30_000]),
        st.sampled_from([None, *STREAM_FAULTS]),
        st.integers(1, 2),
    ),
    min_size=3,
    max_size=6,
)


@settings(max_examples=8, derandomize=True, **PROFILE)  # type: ignore[arg-type]
@given(
    gateway=st.sampled_from(GATEWAYS),
    plan=streamed_turns,
    seed=st.integers(0, 3),
    loops=st.lists(st.sampled_from(["send", "stream", "astream"]), min_size=1, max_size=3),
)
def test_random_fault_sequences_streamed(
    sim: GatewaySimulator, gateway: dict[str, Any], plan: list[Any], seed: int, loops: list[str]
) -> None:
    """(a) no refused size re-sent, (b) nothing lost, (c) the task kept or no trace, (d) non-size
    failures teach nothing - after every turn, whichever loop ran it; streamed deltas add up to the reply."""
    run_sequence(sim, gateway, plan, seed, loops=["stream", *loops])


@pytest.mark.parametrize("loop", ["stream", "astream"])
def test_a_one_off_empty_stream_is_read_by_the_unstreamed_probe_and_shown_once(gw: GatewaySimulator, loop: str) -> None:
    """An empty stream that hides no error (the probe succeeds): the probe's answer reaches the reader
    exactly once, nothing is learned, and the history holds the answer."""
    session = make_session(gw)
    session.send("first")
    gw.fail_next("empty_stream")
    question = "[[long:40]] tell me"
    assert run_turn(session, loop, question).text == long_text(40)  # the deltas are exactly the reply
    assert [(r.stream, r.status, r.reason) for r in gw.requests[1:]] == [
        (True, 200, "fault:empty_stream"),
        (False, 200, "ok"),
    ]
    assert session.payload_cap is None and session.context_window == 1_000_000
    assert [m.content for m in session.history][-2:] == [question, long_text(40)]
    assert kinds(session)[-1] == "done"


@pytest.mark.parametrize("loop", ["send", "stream", "astream"])
def test_a_refused_continuation_after_a_length_cut_keeps_the_answer_so_far(gw: GatewaySimulator, loop: str) -> None:
    """The answer is cut at max_tokens and the provider refuses the continuation: the turn used to fail
    (the reader had seen the text, the history lost it). Now the reply is the answer so far, as a turn
    without escalation would return it."""
    gw.configure(refuse_continuation=True)
    session = make_session(gw, max_tokens=200)
    question = "[[long:1000]] write a lot"
    reply = run_turn(session, loop, question)  # a streamed turn's deltas are exactly its reply
    if loop != "send":
        assert kinds(session) == ["continuation", "done"]
    assert [r.reason for r in gw.requests] == ["ok", "continuation refused"]
    assert reply.finish_reason == "length" and long_text(1000).startswith(reply.text) and reply.text
    sentences_once(reply.text)
    assert [(m.role, m.content) for m in session.history] == [("user", question), ("assistant", reply.text)]
    assert [e.code for e in session.events if isinstance(e, NoticeEvent)].count("continuation_refused") == 1
    clean(session)
