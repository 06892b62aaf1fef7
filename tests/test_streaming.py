"""Streaming for real: ``Session.stream`` and ``Session.astream`` against the simulator.

Every check is by order and count, never by wall-clock time: the simulator's ``StreamGate`` holds
a streamed reply after its first text delta until the test releases it, so "the first delta
reached the caller while the provider was still sending" is a fact about ordering.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest
from helpers.histories import pasted_history, read_history

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.errors import ProviderError
from contextkit.events import CapEvent, Event, NoticeEvent, RequestEvent, StreamEvent
from contextkit.messages import Message
from contextkit.policy.expand import expand_markers
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace, long_text
from contextkit.sim.model import CONTINUATION_TRIGGER
from contextkit.sizing import request_bytes, text_tokens
from contextkit.tools import ToolResult

LOOPS = ("stream", "astream")
SAFETY = 20.0  # seconds a held reply waits before the server lets it go (a failed test, never a pass)
SENTENCE = re.compile(r"Sentence (\d+) says")


def make_session(gw: GatewaySimulator, route: str = "openai", **kwargs: Any) -> Session:
    kw = gw.litellm_kwargs(route)
    model = kw.pop("model")
    kwargs.setdefault("archive", Archive.in_memory(session_id=kwargs.get("session_id") or "s"))
    kwargs.setdefault("status", None)
    return Session(model, **kw, **kwargs)


def consume(loop: str, session: Session, text: str) -> tuple[list[str], Any]:
    """All deltas of one streamed turn and its stream object (``reply`` set)."""
    if loop == "stream":
        stream = session.stream(text)
        return list(stream), stream

    async def run() -> tuple[list[str], Any]:
        stream = session.astream(text)
        return [d async for d in stream], stream

    return asyncio.run(run())


def sentences_once(text: str) -> list[int]:
    """The sentence numbers of a ``long_text`` answer; fails when one is repeated or skipped."""
    numbers = [int(n) for n in SENTENCE.findall(text)]
    assert numbers == list(range(1, len(numbers) + 1)), f"sentences repeated or missing: {numbers[:40]}"
    return numbers


def stream_events(session: Session, kind: str | None = None) -> list[StreamEvent]:
    return [e for e in session.events if isinstance(e, StreamEvent) and (kind is None or e.kind == kind)]


def no_partials_left(session: Session) -> None:
    assert not any(CONTINUATION_TRIGGER in m.content for m in session.history)
    assert all(m.content for m in session.history if m.role == "assistant" and not m.tool_calls)


# the first delta arrives while the provider is still sending --------------------------------------


@pytest.mark.parametrize("route", ["openai", "anthropic"])
@pytest.mark.parametrize("loop", LOOPS)
def test_first_delta_arrives_before_the_server_sends_the_rest(loop: str, route: str) -> None:
    with GatewaySimulator() as gw:
        session = make_session(gw, route)
        seen: list[Event] = []
        session.events.subscribe(seen.append)
        gate = gw.hold_streams(timeout=SAFETY)
        at_first: dict[str, Any] = {}

        def observe(first: str) -> None:
            # The server holds everything after this delta until the release below.
            at_first["released"] = gate.released
            at_first["waiting"] = gate.waiting
            at_first["events"] = [e for e in seen if isinstance(e, StreamEvent)]
            gate.release()

        if loop == "stream":
            stream = session.stream("[[long:120]] tell me a story")
            first = next(stream)
            observe(first)
            rest = "".join(stream)
        else:

            async def run() -> tuple[str, str, Any]:
                stream = session.astream("[[long:120]] tell me a story")
                first = await stream.__anext__()
                observe(first)
                return first, "".join([d async for d in stream]), stream

            first, rest, stream = asyncio.run(run())
    assert at_first["released"] is False and at_first["waiting"] == 1
    assert gate.timed_out == 0 and gate.held == 1  # the rest was sent only after the release
    # observers got the delta, with the answer's size so far, while the stream was still open
    (live,) = at_first["events"]
    assert (live.kind, live.text, live.chars_so_far) == ("delta", first, len(first))
    assert live.tokens_so_far == text_tokens(first)
    assert first + rest == stream.reply.text == long_text(120)
    kinds = [e.kind for e in seen if isinstance(e, StreamEvent)]
    assert kinds[-1] == "done" and set(kinds[:-1]) == {"delta"}
    done = stream_events(session, "done")[-1]
    assert done.chars_so_far == len(stream.reply.text) and done.tokens_so_far == text_tokens(stream.reply.text)
    assert not stream_events(session, "delta")  # deltas go to subscribers, the log keeps the summary


def test_twenty_concurrent_astream_sessions_in_one_loop() -> None:
    """All twenty streams are open at once (each has its first delta while every reply is held):
    the loop is never blocked, and every session ends with its own history."""
    n = 20
    questions = [f"session {i:02d} asks about the weather in city number {i:02d}" for i in range(n)]
    with GatewaySimulator() as gw:
        sessions = [make_session(gw, session_id=f"c{i}") for i in range(n)]
        gate = gw.hold_streams(timeout=SAFETY)

        async def main() -> list[tuple[list[str], Any]]:
            firsts = 0
            all_open = asyncio.Event()

            async def one(session: Session, question: str) -> tuple[list[str], Any]:
                nonlocal firsts
                stream = session.astream(question)
                deltas = []
                async for delta in stream:
                    if not deltas:
                        firsts += 1
                        if firsts == n:
                            all_open.set()
                    deltas.append(delta)
                return deltas, stream

            tasks = [asyncio.create_task(one(s, q)) for s, q in zip(sessions, questions, strict=True)]
            await all_open.wait()
            assert not gate.released and gate.waiting == n  # 20 replies held, 20 first deltas read
            gate.release()
            return await asyncio.gather(*tasks)

        results = asyncio.run(main())
        assert gate.timed_out == 0 and gate.held == n
        assert len(gw.requests) == n
    for session, question, (deltas, stream) in zip(sessions, questions, results, strict=True):
        assert "".join(deltas) == stream.reply.text == f"Reply 1: {question}"
        assert [(m.role, m.content) for m in session.history] == [("user", question), ("assistant", stream.reply.text)]
        assert session.stats.requests == 1


# interrupted streams are continued, never restarted -----------------------------------------------


@pytest.mark.parametrize("fault", ["stream_drop", "stream_error"])
@pytest.mark.parametrize("loop", LOOPS)
def test_mid_stream_failure_is_continued_not_restarted(loop: str, fault: str) -> None:
    with GatewaySimulator() as gw:
        session = make_session(gw)
        gw.fail_next(fault)
        deltas, stream = consume(loop, session, "[[long:300]] write it all")
        records = gw.requests
    text = "".join(deltas)
    assert text == stream.reply.text == long_text(300)
    sentences_once(text)
    assert [r.reason for r in records] == [f"fault:{fault}", "ok"]
    requests = [e for e in session.events if isinstance(e, RequestEvent)]
    assert [e.purpose for e in requests] == ["turn", "continuation"]
    (cont,) = stream_events(session, "continuation")
    assert cont.chars_so_far > 0 and cont.level == 0 and "stream" in cont.reason
    assert session.stats.retries == 1 and not session.stats.recoveries_by_level
    assert [m.role for m in session.history] == ["user", "assistant"]
    no_partials_left(session)


@pytest.mark.parametrize("loop", LOOPS)
def test_drop_on_a_large_history_recovers_then_continues(loop: str) -> None:
    """The stream drops mid-way; the continuation (history + partial) is one body too big for the
    gateway, which drops the connection: payload recovery (level 1, a learned cap), then the
    continuation from the partial text."""
    history = pasted_history(n=8, size=72_000, seed=1)  # ~580 KB: a dropped connection is suspect
    question = "[[long:300]] summarize the logs"
    limits = Limits(context_window=1_000_000)
    with GatewaySimulator() as gw:  # the exact size of the first request, for the cap below
        probe = make_session(gw, limits=limits)
        probe.add_messages(history)
        probe.send(question)
        first_bytes = gw.requests[0].bytes
    with GatewaySimulator(max_body=first_bytes + 120, reject_with="drop") as gw:
        session = make_session(gw, limits=limits)
        session.add_messages(history)
        gw.fail_next("stream_drop")
        deltas, stream = consume(loop, session, question)
        reasons = [r.reason for r in gw.requests]
    text = "".join(deltas)
    assert text == stream.reply.text == long_text(300)
    sentences_once(text)
    assert reasons[0] == "fault:stream_drop" and reasons[1].startswith("body ") and reasons[-1] == "ok"
    stats = session.stats
    # (the same body may be retried once before a drop counts as a size limit)
    assert stats.failures_by_kind.get("likely_payload", 0) >= 1 and stats.recoveries_by_level.get("1") == 1
    assert session.cap_source == "learned"
    kinds = [(e.kind, e.level) for e in stream_events(session) if e.kind != "done"]
    assert {kind for kind, _ in kinds} == {"continuation"}  # every request after the drop continued
    assert kinds[0] == ("continuation", 0) and kinds[-1] == ("continuation", 1)
    no_partials_left(session)
    expanded = expand_markers("\n".join(m.content for m in session.history), session.archive)
    assert all(m["content"] in expanded for m in history)  # nothing lost on the way


@pytest.mark.parametrize("loop", LOOPS)
def test_length_cut_is_continued_after_the_first_part(loop: str) -> None:
    with GatewaySimulator() as gw:
        session = make_session(gw, max_tokens=200)
        deltas, stream = consume(loop, session, "[[long:1000]] write a lot")
        assert [r.accepted for r in gw.requests] == [True, True, True]
    text = "".join(deltas)
    assert text == stream.reply.text == long_text(1000)
    sentences_once(text)
    assert stream.reply.finish_reason == "stop" and session.stats.escalations == 2
    conts = stream_events(session, "continuation")
    assert [e.reason for e in conts] == [
        "finish_reason=length - max_tokens raised to 400",
        "finish_reason=length - max_tokens raised to 800",
    ]
    assert conts[0].chars_so_far < conts[1].chars_so_far < len(text)
    assert [m.role for m in session.history] == ["user", "assistant"]


@pytest.mark.parametrize("loop", LOOPS)
def test_a_stream_that_keeps_failing_after_partial_text_leaves_no_trace(loop: str) -> None:
    """A turn is a transaction when it streams too: the partial answers and continuation prompts
    the failed turn added are gone, the history is as before the turn, and the next turn works."""
    with GatewaySimulator() as gw:
        session = make_session(gw)
        session.send("first question")
        before = session.history
        gw.fail_next("stream_drop", times=3)  # the request and both continuations drop mid-way
        shown: list[str] = []
        with pytest.raises(ProviderError):
            if loop == "stream":
                shown.extend(session.stream("[[long:300]] write it all"))
            else:

                async def run() -> None:
                    async for delta in session.astream("[[long:300]] write it all"):
                        shown.append(delta)

                asyncio.run(run())
        assert [r.reason for r in gw.requests][1:] == ["fault:stream_drop"] * 3
        assert session.history == before
        assert long_text(300).startswith("".join(shown)) and shown  # the reader saw the text once, in order
        notices = [e.code for e in session.events if isinstance(e, NoticeEvent)]
        assert notices.count("turn_failed") == 1 and "turn_cancelled" not in notices
        assert not stream_events(session, "cancelled") and len(stream_events(session, "continuation")) == 2
        assert session.send("and now?").text
    assert [m.role for m in session.history] == ["user", "assistant", "user", "assistant"]
    no_partials_left(session)


@pytest.mark.parametrize("loop", LOOPS)
def test_refused_continuation_voids_the_partial_with_a_marker(loop: str) -> None:
    with GatewaySimulator(refuse_continuation=True) as gw:
        session = make_session(gw)
        gw.fail_next("stream_drop")
        deltas, stream = consume(loop, session, "[[long:200]] write it")
        reasons = [r.reason for r in gw.requests]
    text = "".join(deltas)
    assert text == stream.reply.text  # the reader and reply.text say the same
    assert reasons == ["fault:stream_drop", "continuation refused", "ok"]
    (voided,) = stream_events(session, "voided")
    voided_part, _, after = text.partition("\n\n[contextkit: the answer above was interrupted")
    assert voided_part == voided.text and long_text(200).startswith(voided.text)
    line, _, answer = after.partition("]\n\n")
    assert "refused to continue it" in line and "it is void" in line
    assert answer == long_text(200)  # the answer again, in full, after the marker
    assert session.history[-1].content == long_text(200)  # the history keeps only the answer
    done = stream_events(session, "done")[-1]
    assert done.chars_so_far == len(answer)  # the answer's count started again after the marker
    assert [m.role for m in session.history] == ["user", "assistant"]


# empty streams (llama.cpp's answer to an overflow) ------------------------------------------------


@pytest.mark.parametrize("loop", [*LOOPS, "send"])
def test_empty_stream_on_overflow_is_classified_and_recovered_like_send(loop: str) -> None:
    with GatewaySimulator(context_window=4_000, empty_stream_on_overflow=True) as gw:
        session = make_session(gw, limits=Limits(context_window=1_000_000))
        session.add_messages(read_history(n=6, size=6_000))
        if loop == "send":
            text = session.send("Summarize what you read.").text
        else:
            deltas, stream = consume(loop, session, "Summarize what you read.")
            text = stream.reply.text
            assert "".join(deltas) == text
        log = [(r.stream, r.status, r.reason) for r in gw.requests]
    assert text.startswith("Reply") and session.history[-1].content == text
    assert session.context_window == 4_000  # learned from the provider's error, as send learns it
    assert session.stats.recoveries_by_level == {"1": 1}
    overflow = log[0][2].removesuffix(" (empty stream)")  # the tokens depend on the tool schemas sent
    assert re.fullmatch(r"context \d{5} > window 4000", overflow)
    if loop == "send":
        assert log[0] == (False, 400, overflow)
        return
    assert log[0] == (True, 200, overflow + " (empty stream)")
    assert log[1] == (False, 400, overflow)  # asked once unstreamed: the real error
    assert log[-1][0] is True and log[-1][2] == "ok"
    purposes = [(e.purpose, e.failure_kind) for e in session.events if isinstance(e, RequestEvent)]
    assert purposes[:2] == [("turn", "transient"), ("probe", "context_overflow")]


@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_litellm_reports_stop_for_an_empty_stream_but_not_that_the_provider_finished(route: str) -> None:
    """What the driver relies on: the empty body (llama.cpp) gets a synthetic finish "stop" from
    litellm, while the wrapper knows the provider itself never sent a finish reason."""
    from contextkit import backend

    with GatewaySimulator(context_window=50, empty_stream_on_overflow=True) as gw:
        kwargs = gw.litellm_kwargs(route)
        over = backend.completion(
            messages=[{"role": "user", "content": long_text(200)}], timeout=10, stream=True, **kwargs
        )
        chunks = list(over)
        fits = backend.completion(messages=[{"role": "user", "content": "hi"}], timeout=10, stream=True, **kwargs)
        list(fits)
        assert gw.requests[0].reason.endswith("(empty stream)")
    assert not any(c.choices and c.choices[0].delta.content for c in chunks)
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == ["stop"]
    assert backend.provider_finished(over) is False and backend.provider_finished(fits) is True


def test_empty_stream_over_the_known_window_is_an_overflow_without_asking_again() -> None:
    with GatewaySimulator(context_window=500, empty_stream_on_overflow=True) as gw:
        # the system prompt alone (never compacted) is over the window the session knows
        session = make_session(gw, system=long_text(1_200), limits=Limits(context_window=600, max_recovery_attempts=1))
        with pytest.raises(ProviderError):
            list(session.stream("hello"))
        log = list(gw.requests)
    assert log and all(r.stream for r in log)  # measured tokens > window: no unstreamed probe
    assert session.stats.failures_by_kind.get("context_overflow", 0) >= 1


# tool rounds --------------------------------------------------------------------------------------


def _reader() -> tuple[Callable[..., ToolResult], list[str]]:
    ws = Workspace(seed=2, target_bytes=2_000)
    reads: list[str] = []

    def read_file(path: str) -> ToolResult:
        """Read a whole file."""
        out = ws.read_file(path)
        reads.append(path)
        return ToolResult(out.content, path=out.path, lines=out.lines)

    return read_file, reads


@pytest.mark.parametrize("fault", [None, "stream_drop"])
@pytest.mark.parametrize("loop", LOOPS)
def test_tool_rounds_stream_their_text_then_the_answer(loop: str, fault: str | None) -> None:
    read_file, reads = _reader()
    with GatewaySimulator() as gw:
        session = make_session(gw, tools=[read_file])
        if fault:
            gw.fail_next(fault)
        deltas, stream = consume(loop, session, '[[tool:read_file {"path": "src/a.py"}]] read it')
    text = "".join(deltas)
    assert reads == ["src/a.py"]  # the tool ran once, even when its round was interrupted
    assert text == "Calling read_file.\n" + stream.reply.text
    assert stream.reply.text.startswith("Reply 2: read_file returned")
    (round_event,) = stream_events(session, "tool_round")
    assert round_event.text == "Calling read_file." and round_event.chars_so_far == len("Calling read_file.\n")
    roles = [m.role for m in session.history]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert session.history[1].content == "Calling read_file." and session.history[1].tool_calls
    assert stream_events(session, "done")[-1].chars_so_far == len(stream.reply.text)
    no_partials_left(session)


# cancellation -------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["break", "close", "abreak", "aclose", "cancel-task"])
def test_cancelling_closes_the_provider_stream_and_undoes_the_turn(how: str) -> None:
    with GatewaySimulator() as gw:
        session = make_session(gw, system="Be brief.")
        session.send("first question")
        before = session.history
        gate = gw.hold_streams(timeout=SAFETY)
        question = "[[long:200]] a long answer I will not wait for"
        if how == "break":
            for _delta in session.stream(question):
                break  # the loop drops the iterator: the turn is cancelled right here
        elif how == "close":
            stream = session.stream(question)
            next(stream)
            stream.close()
        else:
            asyncio.run(_acancel(session, question, how))
        assert session.history == before  # as before the turn, while the reply is still held
        gate.release()
        assert gate.wait_finished(1, SAFETY)
        assert gate.peer_closed == 1  # we hung up: the server could not send the rest
        assert gate.timed_out == 0
        cancelled = stream_events(session, "cancelled")
        assert len(cancelled) == 1 and cancelled[0].chars_so_far > 0
        notices = [e.code for e in session.events if isinstance(e, NoticeEvent)]
        assert notices.count("turn_cancelled") == 1 and "turn_failed" not in notices  # the flow rolled back
        assert session.send("and now?").text  # the session is free again
    assert [m.role for m in session.history] == ["system", "user", "assistant", "user", "assistant"]


async def _acancel(session: Session, question: str, how: str) -> None:
    loop = asyncio.get_running_loop()
    cancelled = asyncio.Event()
    session.events.subscribe(
        lambda e: loop.call_soon_threadsafe(cancelled.set) if getattr(e, "kind", "") == "cancelled" else None
    )
    stream = session.astream(question)
    if how == "abreak":
        async for _delta in stream:
            break  # the event loop finalizes the abandoned iterator, which cancels the turn
        await cancelled.wait()
    elif how == "aclose":
        await stream.__anext__()
        await stream.aclose()
    else:
        first = asyncio.Event()

        async def read() -> None:
            async for _delta in stream:
                first.set()

        task = asyncio.create_task(read())
        await first.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert stream.cancelled and stream.reply is None


# one flow, four loops (send, tool loop, stream, astream) ------------------------------------------


# a streamed body carries "stream": true (measured: request bytes are the bytes sent)
STREAM_FIELD_BYTES = request_bytes([], stream=True) - request_bytes([])


def _trace(session: Session, streamed: bool) -> dict[str, Any]:
    extra = STREAM_FIELD_BYTES if streamed else 0
    requests = [
        (e.purpose, e.outcome, e.failure_kind, e.level, e.bytes - extra)
        for e in session.events
        if isinstance(e, RequestEvent)
    ]
    stats = session.stats.to_dict()
    stats.pop("cost")
    stats["bytes_sent"] -= extra * stats["requests"]
    return {
        "requests": requests,
        "stats": stats,
        "history": [(m.role, m.content) for m in session.history],
        # the cap is 3/4 of the rejected body: compare the rejections it was learned from
        "caps": [(e.source, e.rejected_bytes - extra) for e in session.events if isinstance(e, CapEvent)],
    }


@pytest.mark.parametrize(
    ("sim", "kwargs", "history", "question"),
    [
        ({"max_body": "128KB", "reject_with": "413"}, {}, 14, "Summarize what you read."),
        ({}, {"max_tokens": 150}, 2, "[[long:500]] write"),
    ],
    ids=["gateway-413", "length"],
)
def test_stream_and_astream_behave_exactly_as_send(
    sim: dict[str, Any], kwargs: dict[str, Any], history: int, question: str
) -> None:
    traces = {}
    for loop in ("send", *LOOPS):
        with GatewaySimulator(**sim) as gw:
            session = make_session(gw, limits=Limits(context_window=1_000_000), **kwargs)
            session.add_messages(read_history(n=history, size=12_000))
            if loop == "send":
                session.send(question)
            else:
                deltas, stream = consume(loop, session, question)
                assert "".join(deltas) == stream.reply.text
            traces[loop] = _trace(session, streamed=loop != "send")
    assert traces["stream"] == traces["send"]
    assert traces["astream"] == traces["send"]
    assert len(traces["send"]["requests"]) > 1  # the scenario did make the flow work


def test_stream_objects_iterate_once_and_keep_what_they_yielded() -> None:
    with GatewaySimulator() as gw:
        session = make_session(gw)
        stream = session.stream("hello there")
        assert stream.reply is None and stream.text == ""
        head = next(stream)
        rest = "".join(stream)
        assert stream.text == head + rest == stream.reply.text
        assert list(stream) == []  # a finished stream yields nothing more
        assert [m.role for m in session.history] == ["user", "assistant"]
        assert isinstance(session.history[-1], Message)
