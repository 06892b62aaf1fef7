"""request_bytes / RequestMeter equal the bytes litellm really sends (measured at the simulator)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from contextkit import backend
from contextkit.messages import Message, ToolCall, to_wire
from contextkit.sim import TOOL_SCHEMAS, GatewaySimulator, Workspace
from contextkit.sizing import RequestMeter, request_bytes, sent_message, sent_params

PNG = "data:image/png;base64," + base64.b64encode(bytes(range(256)) * 8).decode()
BIG = Workspace(seed=2, target_bytes=30_000).read_file("src/app/big.py").content

CASES: dict[str, tuple[list[Message], dict[str, Any]]] = {
    "plain": ([Message.system("You are terse."), Message.user("hello"), Message.assistant("hi!")], {}),
    "unicode_emoji": (
        [
            Message.user('ünïcödé 😀 中文 — "quotes" \\ back </tag> \u2028 tab\t nl\n ctrl\x01'),
            Message.assistant("ok 👍"),
        ],
        {},
    ),
    "tool_calls": (
        [
            Message.user("read it"),
            Message.assistant("", [ToolCall("call_1", "read_file", '{"path": "src/ü.py", "start": 1}')]),
            Message.tool("call_1", BIG, name="read_file", path="src/ü.py", lines=(1, 500)),
            Message.assistant("It is long."),
        ],
        {},
    ),
    "parallel_calls_with_text": (
        [
            Message.user("search"),
            Message.assistant(
                "Searching twice.",
                [ToolCall("c1", "grep", '{"pattern":"retry"}'), ToolCall("c2", "grep", '{"pattern":"émoji 😀"}')],
            ),
            Message.tool("c1", "a.py:1:retry"),
            Message.tool("c2", "b.py:2:émoji"),
        ],
        {},
    ),
    "tool_schemas": ([Message.user("use tools")], {"tools": TOOL_SCHEMAS, "tool_choice": "auto"}),
    "image_data_url": ([Message("user", "what is in this image?", images=(PNG,))], {}),
    "image_only": ([Message("user", "", images=(PNG, PNG))], {}),
    "image_detail": ([Message("user", "see", images=(PNG, PNG), image_details=("low", None))], {}),
    "params": (
        [Message.user("short")],
        {"max_tokens": 50, "temperature": 0.5, "top_p": 1.0, "stop": ["END"], "seed": 7},
    ),
    "named_user": ([Message("user", "hi", name="alice")], {}),
    "stream": ([Message.user("stream please")], {"stream": True}),
    "stream_with_options": ([Message.user("s")], {"stream": True, "stream_options": {"include_usage": True}}),
    "litellm_only_params": (
        [Message.user("x")],
        {"metadata": {"run": 1}, "user": "u1", "stream": False, "max_tokens": None},
    ),
    "extra_body": ([Message.user("x")], {"extra_body": {"top_k": 5}}),
}


@pytest.fixture(scope="module")
def gw():
    with GatewaySimulator(record_bodies=True) as sim:
        yield sim


def send(gw: GatewaySimulator, messages: list[Message], params: dict[str, Any]) -> bytes:
    gw.clear_log()
    sent = dict(params)
    if "metadata" in sent:
        sent["metadata"] = dict(sent["metadata"])  # litellm mutates the metadata dict it is given
    result = backend.completion(messages=[to_wire(m) for m in messages], timeout=10, **gw.litellm_kwargs(), **sent)
    if params.get("stream"):
        list(result)
    (rec,) = gw.requests
    body = gw.body(rec.seq)
    assert rec.bytes == len(body)
    return body


@pytest.mark.parametrize("case", sorted(CASES))
def test_request_bytes_equals_sent_body(gw, case):
    messages, params = CASES[case]
    body = send(gw, messages, params)
    tools = params.get("tools")
    rest = {k: v for k, v in params.items() if k != "tools"}
    predicted = request_bytes(messages, tools=tools, model=gw.model, **rest)
    # same content, not just the same length
    expected = {"model": "sim-model", "messages": [sent_message(m) for m in messages]}
    if tools:
        expected["tools"] = tools
    expected.update(sent_params(rest, has_tools=bool(tools)))
    assert json.loads(body) == expected
    assert predicted == len(body), body.decode()[:400]
    meter = RequestMeter(gw.model)
    assert meter.measure(messages, tools=tools, **rest).bytes == len(body)
    # and again from the cache, as a grown history would be measured
    assert meter.measure(messages, tools=tools, **rest).bytes == len(body) and meter.hits >= len(messages)


def test_raw_dicts_measure_like_messages(gw):
    raw = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "done", "tool_call_id": "c"},
        {"role": "user", "content": "ok", "name": None},
    ]
    gw.clear_log()
    backend.completion(messages=raw, timeout=10, **gw.litellm_kwargs())
    assert request_bytes(raw, model=gw.model) == gw.requests[-1].bytes


def test_meter_grows_incrementally(gw):
    meter = RequestMeter(gw.model)
    history = [Message.user("start")]
    for i in range(4):
        history += [Message.assistant(f"answer {i} ✓"), Message.user(f"next {i} 😀 " + "x" * 100 * i)]
        body = send(gw, history, {"max_tokens": 64})
        assert (
            meter.measure(history, max_tokens=64).bytes
            == len(body)
            == request_bytes(history, model=gw.model, max_tokens=64)
        )
    assert meter.misses == len(history)  # every message measured once


def test_gateway_cap_decision_matches_prediction(gw):
    """A body predicted one byte over the cap is rejected; at the cap it passes."""
    messages = [Message.user("x" * 5000)]
    size = request_bytes(messages, model=gw.model)
    try:
        gw.configure(max_body=size)
        send(gw, messages, {})
        gw.configure(max_body=size - 1)
        with pytest.raises(Exception) as info:
            send(gw, messages, {})
        assert type(info.value).__name__ == "APIError" and info.value.status_code == 413
        assert gw.requests[-1].reason == f"body {size} > cap {size - 1}"
    finally:
        gw.configure(max_body=None)


SESSION_PARAMS: dict[str, dict[str, Any]] = {
    "sampling": {"temperature": 0.3, "top_p": 0.9, "seed": 7, "max_tokens": 300, "stop": ["END"]},
    "response_format": {"response_format": {"type": "json_object"}, "presence_penalty": 0.1},
    "tool_choice": {"tool_choice": "auto", "parallel_tool_calls": False},
    "extra_body": {"extra_body": {"top_k": 5}, "metadata": {"run": "x"}},
}


@pytest.mark.parametrize("streamed", [False, True], ids=["send", "stream"])
@pytest.mark.parametrize("case", sorted(SESSION_PARAMS))
def test_session_request_events_equal_the_bytes_received(gw, case: str, streamed: bool) -> None:
    """Every RequestEvent.bytes of a session equals the body the simulator received, whatever
    request parameters the session was given (they are part of the body)."""
    from contextkit import Session
    from contextkit.archive import Archive
    from contextkit.events import RequestEvent

    gw.clear_log()
    kw = gw.litellm_kwargs()
    model = kw.pop("model")
    params = {k: (dict(v) if isinstance(v, dict) else v) for k, v in SESSION_PARAMS[case].items()}
    session = Session(model, archive=Archive.in_memory(), status=None, system="Be brief.", **kw, **params)
    for text in ("first question", "second, longer question " * 20):
        if streamed:
            "".join(session.stream(text))
        else:
            session.send(text)
    sent = [e.bytes for e in session.events if isinstance(e, RequestEvent)]
    received = [r.bytes for r in gw.requests]
    assert sent == received and len(sent) == 2
    assert session.measure().bytes == request_bytes(session.history, tools=session.tool_schemas, model=model, **params)


def test_session_escalated_max_tokens_is_measured(gw) -> None:
    """The continuation request after ``finish_reason=length`` carries the doubled max_tokens."""
    from contextkit import Session
    from contextkit.archive import Archive
    from contextkit.events import RequestEvent

    gw.clear_log()
    kw = gw.litellm_kwargs()
    model = kw.pop("model")
    session = Session(model, archive=Archive.in_memory(), status=None, max_tokens=8, **kw)
    session.send("[[long:40]]")
    sent = [e.bytes for e in session.events if isinstance(e, RequestEvent)]
    assert len(sent) >= 2  # cut at 8 tokens, escalated
    assert sent == [r.bytes for r in gw.requests]
    bodies = [json.loads(gw.body(r.seq)) for r in gw.requests]
    assert [b["max_tokens"] for b in bodies][:2] == [8, 16]
