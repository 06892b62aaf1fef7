"""Session end to end: litellm over real HTTP to the simulator, every loop, every payload failure."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import pytest
from helpers.histories import pasted_history, read_history
from helpers.logcheck import assert_known_limits_respected

from contextkit import Limits, Message, ToolCall
from contextkit.archive import Archive
from contextkit.errors import AuthenticationFailed, PayloadFloorError
from contextkit.events import LimitEvent, RecoveryEvent, RequestEvent
from contextkit.policy.expand import expand_markers
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace, long_text
from contextkit.tools import ToolResult

BIG = 40_000


def make_session(gw: GatewaySimulator, route: str = "openai", **kwargs: Any) -> Session:
    kw = gw.litellm_kwargs(route) | {k: kwargs.pop(k) for k in ("api_key",) if k in kwargs}
    model = kw.pop("model")
    kwargs.setdefault("archive", Archive.in_memory(session_id=kwargs.get("session_id") or "t"))
    kwargs.setdefault("status", None)
    return Session(model, **kw, **kwargs)


def originals(history: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in history if m.get("content")]


def assert_nothing_lost(session: Session, contents: list[str]) -> None:
    expanded = expand_markers("\n\x00\n".join(m.content for m in session.history), session.archive)
    missing = [c[:60] for c in contents if c not in expanded]
    assert not missing, f"{len(missing)} original contents are not recoverable, e.g. {missing[:2]}"


def assert_no_rejected_body_resent(gw: GatewaySimulator) -> None:
    """No body at or above a size rejected as evidence of a limit; an overflowed body never again."""
    assert_known_limits_respected(gw.requests)
    overflowed = {r.body_sha256 for r in gw.requests if r.reason.startswith("context ")}
    resent = [r.seq for r in gw.requests if r.body_sha256 in overflowed and r.accepted]
    assert not resent, f"requests {resent} re-sent a body the provider had refused as too long"


# scenarios ----------------------------------------------------------------------------------------

GATEWAY_MODES = ["413", "413-html", "waf403", "bedrock403"]
SCENARIOS: list[tuple[str, str, dict[str, Any], str]] = [
    *[(f"gateway-{m}", "openai", {"max_body": "128KB", "reject_with": m}, "payload") for m in GATEWAY_MODES],
    ("gateway-413-anthropic", "anthropic", {"max_body": "128KB", "reject_with": "413"}, "payload"),
    ("waf403-anthropic", "anthropic", {"max_body": "128KB", "reject_with": "waf403"}, "payload"),
    ("overflow-openai", "openai", {"context_window": 12_000, "overflow_style": "openai"}, "context_overflow"),
    ("overflow-anthropic", "anthropic", {"context_window": 12_000, "overflow_style": "anthropic"}, "context_overflow"),
    ("drop-large", "openai", {"max_body": "700KB", "reject_with": "drop"}, "likely_payload"),
]


def _history_for(name: str) -> list[dict[str, Any]]:
    if name == "drop-large":
        return pasted_history()
    return read_history()


def _run_loop(loop: str, session: Session, text: str) -> str:
    if loop == "send":
        return session.send(text).text
    if loop == "stream":
        stream = session.stream(text)
        deltas = "".join(stream)
        assert stream.reply is not None
        assert deltas == stream.reply.text  # continued, never restarted: each piece shown once
        return stream.reply.text
    if loop == "asend":
        return asyncio.run(session.asend(text)).text
    raise AssertionError(loop)


@pytest.mark.parametrize("loop", ["send", "stream", "asend", "tools"])
@pytest.mark.parametrize(("name", "route", "sim_config", "expected"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_recovers_in_every_loop(loop: str, name: str, route: str, sim_config: dict[str, Any], expected: str) -> None:
    ws = Workspace(seed=3, target_bytes=BIG)
    history = _history_for(name)
    contents = originals(history)
    tool_outputs: list[str] = []

    def read_file(path: str) -> ToolResult:
        """Read a whole file."""
        out = ws.read_file(path)
        tool_outputs.append(out.content)
        return ToolResult(out.content, path=out.path, lines=out.lines)

    with GatewaySimulator(**sim_config) as gw:
        session = make_session(gw, route, limits=Limits(context_window=1_000_000), tools=[read_file])
        session.add_messages(history)
        text = (
            '[[tool:read_file {"path": "src/extra.py"}]] check one more file'
            if loop == "tools"
            else "Summarize what you read."
        )
        answer = _run_loop("send" if loop == "tools" else loop, session, text)
        assert answer
        rejected = [r for r in gw.requests if not r.accepted]
        assert rejected, "the scenario must make the gateway/provider reject at least one request"
        assert_no_rejected_body_resent(gw)
    kinds = session.stats.failures_by_kind
    if expected == "payload":
        assert set(kinds) & {"payload_too_large", "waf_rejection"}, kinds
        assert session.cap_source == "learned"
        assert session.payload_cap is not None and session.payload_cap < rejected[0].bytes
    else:
        assert expected in kinds, kinds
    assert any(isinstance(e, RecoveryEvent) and e.outcome == "recovered" for e in session.events)
    if loop == "tools":
        assert tool_outputs and any(m.role == "tool" for m in session.history)
    assert_nothing_lost(session, contents + tool_outputs)


def test_send_reply_usage_and_honest_size() -> None:
    with GatewaySimulator() as gw:
        session = make_session(gw, system="Be brief.")
        expected = session.measure()
        reply = session.send("hello there")
        assert reply.text.startswith("Reply")
        assert reply.finish_reason == "stop"
        assert reply.usage["prompt_tokens"] > 0
        (record,) = gw.requests
    sent = [e for e in session.events if isinstance(e, RequestEvent)]
    assert sent[0].bytes == record.bytes  # the bytes we measure are the bytes the server received
    assert expected.messages == 1
    assert session.stats.requests == 1


def test_tool_loop_records_origin_and_offers_recall() -> None:
    ws = Workspace(seed=1, target_bytes=5_000)

    def read_file(path: str, start: int | None = None, end: int | None = None) -> ToolResult:
        """Read a file, optionally a line range."""
        out = ws.read_file(path, start, end)
        return ToolResult(out.content, path=out.path, lines=out.lines)

    with GatewaySimulator() as gw:
        session = make_session(gw, tools=[read_file])
        reply = session.send('[[tool:read_file {"path": "a.py", "start": 1, "end": 20}]] read it')
        names = [t["function"]["name"] for t in session.tool_schemas]
    assert "recall" in names and "read_file" in names
    tool_msgs = [m for m in session.history if m.role == "tool"]
    assert tool_msgs[0].origin is not None and tool_msgs[0].origin.path == "a.py"
    assert (tool_msgs[0].origin.line_start, tool_msgs[0].origin.line_end) == (1, 20)
    assert reply.tool_calls == 1


def test_model_recall_tool_returns_original_flagged_verbatim() -> None:
    archive = Archive.in_memory(session_id="r")
    key = archive.put("THE FULL ORIGINAL " * 20, kind="tool_result")
    with GatewaySimulator() as gw:
        session = make_session(gw, archive=archive, session_id="r")
        session.send(f'[[tool:recall {{"key": "<<ccr:{key}>>"}}]] please')
    recalled = next(m for m in session.history if m.role == "tool")
    assert recalled.content == "THE FULL ORIGINAL " * 20
    assert recalled.is_recall and recalled.preserve_verbatim


def test_inline_recall_in_user_text() -> None:
    archive = Archive.in_memory(session_id="i")
    key = archive.put("archived notes about build.sh line 42", kind="message")
    with GatewaySimulator() as gw:
        session = make_session(gw, archive=archive, session_id="i")
        session.send(f"what did we decide? @recall <<ccr:{key}>>")
    assert any(m.is_recall and "build.sh line 42" in m.content for m in session.history)


def test_floor_diagnostic_fails_fast_after_one_rejection() -> None:
    with GatewaySimulator(max_body="64KB", reject_with="waf403") as gw:
        session = make_session(gw, system="policy " * 12_000, limits=Limits(context_window=1_000_000))
        with pytest.raises(PayloadFloorError) as info:
            session.send("hi")
        assert len(gw.requests) == 1
    message = str(info.value)
    assert "system prompt" in message and "KB" in message
    assert info.value.base_bytes >= info.value.rejected_bytes


def test_plain_403_is_auth_with_no_recovery() -> None:
    with GatewaySimulator() as gw:
        session = make_session(gw)
        gw.fail_next("auth403")
        with pytest.raises(AuthenticationFailed):
            session.send("hi")
        assert len(gw.requests) == 1
    assert not [e for e in session.events if isinstance(e, RecoveryEvent)]


def test_transient_errors_are_retried_by_us_not_the_sdk() -> None:
    with GatewaySimulator() as gw:
        session = make_session(gw, limits=Limits(retry_backoff=0.01))
        gw.fail_next("500")
        gw.fail_next("429")
        reply = session.send("hi")
        assert reply.text
        assert len(gw.requests) == 3  # one failure each, then success: no hidden SDK retries
    assert session.stats.retries == 2


def test_output_escalation_joins_parts() -> None:
    with GatewaySimulator() as gw:
        session = make_session(gw, max_tokens=200)
        reply = session.send("[[long:1000]] write a lot")
        statuses = [r.accepted for r in gw.requests]
    assert reply.finish_reason == "stop"
    assert reply.text == long_text(1000)
    assert len(statuses) == 3 and session.stats.escalations == 2
    assistants = [m for m in session.history if m.role == "assistant"]
    assert len(assistants) == 1 and assistants[0].content == reply.text


def test_two_sessions_keep_their_own_caps_and_budgets() -> None:
    results: dict[str, Session] = {}

    def run(name: str, cap: str) -> None:
        with GatewaySimulator(max_body=cap, reject_with="413") as gw:
            session = make_session(gw, session_id=name, limits=Limits(context_window=1_000_000))
            session.add_messages(read_history(seed=len(name)))
            session.send("go on")
            results[name] = session

    env_before = dict(os.environ)
    threads = [threading.Thread(target=run, args=("a", "128KB")), threading.Thread(target=run, args=("bb", "256KB"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a, b = results["a"], results["bb"]
    assert a.cap_source == "learned" and a.payload_cap is not None
    assert b.payload_cap is None or b.payload_cap != a.payload_cap
    assert a.stats.failures_by_kind and a.stats.failures_by_kind != b.stats.failures_by_kind
    halved = [e for e in a.events if isinstance(e, LimitEvent) and e.limit == "per_result_budget"]
    assert [(e.source, e.value) for e in halved] == [("episode", 10_000), ("restored", 20_000)]  # a's episode only
    assert not [e for e in b.events if isinstance(e, LimitEvent) and e.limit == "per_result_budget"]
    assert a.limits.tool_result_max_chars == b.limits.tool_result_max_chars == 20_000  # limits never mutated
    assert dict(os.environ) == env_before


def test_measure_is_incremental() -> None:
    with GatewaySimulator() as gw:
        session = make_session(gw)
        session.add_messages(read_history(n=4, size=10_000))
        session.measure()
        misses = session._meter.misses
        session.add_messages([{"role": "user", "content": "one more"}])
        m = session.measure()
    assert session._meter.misses == misses + 1
    assert m.messages == len(session.history)


def test_save_and_load_round_trip_without_secrets(tmp_path: Any) -> None:
    archive_path = tmp_path / "a.sqlite"
    with GatewaySimulator(max_body="128KB", reject_with="413") as gw:
        session = make_session(
            gw,
            archive=Archive(archive_path, session_id="s"),
            session_id="s",
            limits=Limits(context_window=1_000_000),
            api_key="sk-canary-SECRET",
        )
        session.add_messages(read_history())
        session.send("go")
        saved = session.save(tmp_path / "s.json")
        text = saved.read_text()
        assert "sk-canary-SECRET" not in text
        loaded = Session.load(saved, api_base=gw.api_base, api_key="sim-key", status=None)
        assert loaded.history == session.history
        assert loaded.payload_cap == session.payload_cap and loaded.cap_source == "learned"
        assert loaded.stats.failures_by_kind == session.stats.failures_by_kind
        loaded.send("and again")


def test_compact_and_rewind() -> None:
    with GatewaySimulator() as gw:
        session = make_session(gw, limits=Limits(context_window=1_000_000, min_keep_recent=2))
        session.add_messages(read_history(n=6, size=8_000))
        before = session.history
        size_before = session.measure().bytes
        result = session.compact("keep the file names")
        assert result.changed
        assert session.measure().bytes < size_before
        assert session.history != before
        assert session.rewind() is True
        assert session.history == before
        assert session.rewind() is False


def test_events_are_subscribable_live() -> None:
    seen: list[str] = []
    with GatewaySimulator() as gw:
        session = make_session(gw)
        session.events.subscribe(lambda e: seen.append(e.type))
        session.send("hi")
    assert "request" in seen and "history" in seen


def test_bad_inputs_raise_clear_errors() -> None:
    with GatewaySimulator() as gw:
        session = make_session(gw)
        with pytest.raises(ValueError, match="role"):
            session.send([{"role": "wizard", "content": "x"}])
        with pytest.raises(ValueError, match="tool_call_id"):
            session.add_messages([{"role": "tool", "content": "x"}])
    with pytest.raises(ValueError, match="model"):
        Session("", status=None, archive=Archive.in_memory())


def test_tool_call_value_type() -> None:
    assert ToolCall("a", "b").to_wire()["function"]["name"] == "b"
    assert Message.user("x").to_wire() == {"role": "user", "content": "x"}
