"""The core for hosts that own the loop: the host makes the model calls, the session decides.

Every test drives ``Session.begin`` / ``begin_from`` by hand, the way an adapter does, against the
simulator over real HTTP: the host sends ``decision.request`` with litellm and feeds back what came.
The last tests drive a ``HostTurn`` over a scripted flow, to pin its own loop (sync and async alike).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Generator
from typing import Any

import pytest

from contextkit import AuthenticationFailed, InvalidMessageError, Limits, Message, UsageError
from contextkit.archive import Archive
from contextkit.backend import completion
from contextkit.engine.driver import parse_reply
from contextkit.engine.effects import CallModel, RunTools, Sleep
from contextkit.engine.host import Decision, HostTurn
from contextkit.events import LimitEvent, NoticeEvent
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator

READ_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}


def host_session(gw: GatewaySimulator, **kwargs: Any) -> Session:
    kwargs.setdefault("archive", Archive.in_memory(session_id="h"))
    kwargs.setdefault("status", None)
    return Session(gw.model, api_base=gw.api_base, api_key="sim-key", session_id="h", **kwargs)


def drive(session: Session, turn: HostTurn) -> tuple[Decision, list[Decision]]:
    """The host's loop: send what the turn says, feed back the reply or the exception."""
    decisions = [turn.start()]
    while not decisions[-1].finished:
        request = decisions[-1].request
        assert request is not None
        try:
            response = completion(session.model, request.messages, timeout=10, tools=request.tools,
                                  api_base=session._litellm_kwargs["api_base"], api_key="sim-key", **request.params)  # fmt: skip
            outcome: Any = parse_reply(response, session.model, 0.0)
        except Exception as exc:  # noqa: BLE001 - the turn classifies it
            outcome = exc
        decisions.append(turn.feed(outcome))
    return decisions[-1], decisions


def test_session_continues_an_existing_history(gw: GatewaySimulator) -> None:
    earlier = [{"role": "user", "content": "my build id is B-7731"}, {"role": "assistant", "content": "noted"}]
    session = host_session(gw, system="be brief", history=earlier)
    assert [m.content for m in session.history] == ["be brief", "my build id is B-7731", "noted"]
    reply = session.send("and again?")
    assert reply.text and "B-7731" in json.dumps([m.to_wire() for m in session.history])
    with pytest.raises(InvalidMessageError, match="history= takes a list"):
        Session(gw.model, history={"role": "user", "content": "x"}, status=None, archive=Archive.in_memory())
    with pytest.raises(InvalidMessageError, match="message 1: missing 'role'"):
        Session(gw.model, history=[{"role": "user", "content": "a"}, {"content": "b"}], status=None)


def test_a_host_turn_asks_for_a_request_and_ends_with_the_reply(gw: GatewaySimulator) -> None:
    session = host_session(gw)
    final, decisions = drive(session, session.begin([{"role": "user", "content": "hello"}]))
    assert [d.action for d in decisions] == ["send", "done"]
    assert final.reply is not None and final.reply.text
    assert [m.role for m in session.history] == ["user", "assistant"]
    assert len(gw.requests) == 1 and session.stats.requests == 1


def test_a_transient_failure_is_a_retry_of_the_same_request_after_a_delay(gw: GatewaySimulator) -> None:
    session = host_session(gw, limits=Limits(retry_backoff=0.2))
    gw.fail_next("500")
    final, decisions = drive(session, session.begin([{"role": "user", "content": "hi"}]))
    assert [d.action for d in decisions] == ["send", "retry", "done"]
    assert decisions[1].delay > 0 and decisions[1].request == decisions[0].request
    assert final.reply is not None and final.reply.recovered


def test_a_gateway_rejection_is_recovered_with_a_smaller_request_and_a_learned_cap() -> None:
    with GatewaySimulator(max_body="64KB", reject_with="waf403") as gw:
        session = host_session(gw, limits=Limits(context_window=1_000_000))
        history = []
        for i in range(12):
            history += [{"role": "user", "content": f"doc {i}: " + f"line {i} of the pasted document\n" * 260},
                        {"role": "assistant", "content": "ok"}]  # fmt: skip
        session = host_session(gw, limits=Limits(context_window=1_000_000), history=history)
        final, decisions = drive(session, session.begin([{"role": "user", "content": "what did doc 3 say?"}]))
        statuses = [r.status for r in gw.requests]
    assert [d.action for d in decisions][:2] == ["send", "recover"], decisions
    assert final.action == "done" and statuses[0] == 403 and statuses[-1] == 200
    assert decisions[1].request is not None and decisions[0].request is not None
    assert decisions[1].request.bytes < decisions[0].request.bytes <= 2 * 64 * 1024
    assert [e for e in session.events if isinstance(e, LimitEvent)], "the cap was learned from the rejection"


def test_a_refused_credential_fails_the_turn_and_restores_the_history(gw: GatewaySimulator) -> None:
    session = host_session(gw)
    gw.fail_next("auth401")
    final, _ = drive(session, session.begin([{"role": "user", "content": "hi"}]))
    assert final.action == "fail" and isinstance(final.error, AuthenticationFailed)
    assert session.history == []
    session.begin([{"role": "user", "content": "again"}]).close()  # the session is free again


def test_the_hosts_tool_calls_end_the_turn_and_its_results_start_the_next(gw: GatewaySimulator) -> None:
    session = host_session(gw)
    ask = {"role": "user", "content": '[[tool:read_file {"path": "a.py"}]] read it'}
    final, _ = drive(session, session.begin([ask], tools=[READ_TOOL]))
    assert final.reply is not None and final.reply.finish_reason == "tool_calls"
    (call,) = final.reply.tool_calls_made
    assert call.name == "read_file" and json.loads(call.arguments) == {"path": "a.py"}
    assert session.history[-1].tool_calls == (call,)
    result = {"role": "tool", "tool_call_id": call.id, "content": "print('a')"}
    final, _ = drive(session, session.begin([result], tools=[READ_TOOL]))
    assert final.reply is not None and final.reply.finish_reason == "stop"
    assert [m.role for m in session.history] == ["user", "assistant", "tool", "assistant"]


def test_begin_from_takes_what_is_new_in_a_resent_history(gw: GatewaySimulator) -> None:
    session = host_session(gw)
    history: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "one"}]
    final, _ = drive(session, session.begin_from(history))
    assert final.reply is not None
    history += [{"role": "assistant", "content": final.reply.text}, {"role": "user", "content": "two"}]
    final, _ = drive(session, session.begin_from(history))
    assert [m.content for m in session.history][:4] == ["sys", "one", history[2]["content"], "two"]
    assert len(session.history) == 5 and len(session.host_seen) == 5
    # a host that rewrote its history (its own summary) starts the managed one over
    rewritten = [{"role": "system", "content": "sys"}, {"role": "user", "content": "summary of before; three"}]
    drive(session, session.begin_from(rewritten))
    assert [m.content for m in session.history][:2] == ["sys", "summary of before; three"]
    assert any(isinstance(e, NoticeEvent) and e.code == "history_replaced" for e in session.events)


def test_one_turn_at_a_time_and_feed_needs_a_request(gw: GatewaySimulator) -> None:
    session = host_session(gw)
    turn = session.begin([Message.user("hi")])
    with pytest.raises(UsageError, match="feed\\(\\) without a request"):
        turn.feed(RuntimeError("x"))
    turn.start()
    with pytest.raises(UsageError, match="running a turn"):
        session.begin([Message.user("again")])
    with pytest.raises(UsageError, match="takes a ModelReply"):
        turn.feed("a string")  # type: ignore[arg-type]
    turn.close()
    assert session.history == []
    with pytest.raises(InvalidMessageError, match="expected a list of messages"):
        session.begin("hi")  # type: ignore[arg-type]


def _scripted_flow(seen: list[Any]) -> Generator[Any, Any, str]:
    """A turn flow that waits, asks for a tool round, then for one model call, and ends."""
    seen.append((yield Sleep(0.5)))
    seen.append((yield RunTools(calls=())))
    seen.append(type((yield CallModel(messages=[], tools=None, params={}, bytes=1, tokens=1))).__name__)
    return "the reply"


def _fails(effect: Any) -> Any:
    raise ValueError("the tool runner broke")


async def _arun(effect: Any) -> str:
    return "ran async"


async def _afails(effect: Any) -> str:
    raise ValueError("the async tool runner broke")


def test_a_host_turn_runs_effects_then_asks_and_ends_the_same_way_sync_and_async() -> None:
    for arun in (None, _arun):
        seen: list[Any] = []
        turn = HostTurn(_scripted_flow(seen), run_effect=lambda effect: "ran", arun_effect=arun)
        first = asyncio.run(turn.astart()) if arun else turn.start()
        assert (first.action, first.delay, first.request is not None) == ("retry", 0.5, True)
        end = asyncio.run(turn.afeed(TimeoutError("slow"))) if arun else turn.feed(TimeoutError("slow"))
        assert (end.action, end.reply) == ("done", "the reply")
        assert seen == [None, "ran async" if arun else "ran", "ModelFailure"]
        assert turn.request is None


def test_an_effect_that_raises_fails_the_turn_sync_and_async() -> None:
    sync = HostTurn(_scripted_flow([]), run_effect=_fails)
    decision = sync.start()
    assert decision.action == "fail" and str(decision.error) == "the tool runner broke"
    async_turn = HostTurn(_scripted_flow([]), run_effect=_fails, arun_effect=_afails)
    decision = asyncio.run(async_turn.astart())
    assert decision.action == "fail" and str(decision.error) == "the async tool runner broke"
    assert async_turn.request is None
