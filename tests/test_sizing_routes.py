"""Measured bytes equal the bytes the server received on both routes litellm takes to the simulator.

On the OpenAI route litellm posts the chat-completions body as UTF-8; on the Anthropic route it builds
its own body (content blocks, the system prompt apart, tool calls as parsed objects) and posts it as
ASCII-escaped JSON, where a CJK character takes 6 bytes instead of 3. The simulator records the body
it received; every figure here is compared with that record.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from contextkit import Limits, Session, backend
from contextkit.archive import Archive
from contextkit.events import RequestEvent
from contextkit.messages import Message, ToolCall, to_wire
from contextkit.sim import TOOL_SCHEMAS, GatewaySimulator
from contextkit.sizing import ANTHROPIC_ROUTE, RequestMeter, openai_request_bytes, request_bytes, wire_route

PNG = "data:image/png;base64," + base64.b64encode(bytes(range(256)) * 12).decode()
CJK = "上下文工程的字节必须与线上一致。" * 60
EMOJI = "😀👍🏽🚀 " * 150

CASES: dict[str, list[Message]] = {
    "ascii": [Message.system("You are terse. " * 10), Message.user("hello world " * 40), Message.assistant("hi")],
    "cjk": [Message.system("系统提示" * 30), Message.user(CJK), Message.assistant("回答" * 80), Message.user(CJK[::-1])],
    "emoji": [Message.user(EMOJI), Message.assistant("ok 👍" * 30), Message.user("more " + EMOJI)],
    "lone_surrogates": [Message.user("broken \ud800 decode \udfff " * 20), Message.assistant("x \udc00" * 40)],
    "image": [Message("user", "what is in this image? " * 5, images=(PNG,)), Message.assistant("a grid")],
    "image_only": [Message("user", "", images=(PNG, PNG))],
    "tool_calls": [
        Message.user("read the file " * 8),
        Message.assistant("", [ToolCall("c1", "read_file", json.dumps({"path": "src/ü/中.py", "note": "y" * 300}))]),
        Message.tool("c1", "内容 line\n" * 200, name="read_file"),
        Message.assistant(
            "Two more.", [ToolCall("c2", "grep", '{"pattern": "émoji 😀"}'), ToolCall("c3", "grep", '{"pattern": "x"}')]
        ),
        Message.tool("c2", "b.py:2:émoji " * 30),
        Message.tool("c3", "a.py:1:x"),
        Message.assistant("done " * 30 + "   \n"),
        Message.user("thanks"),
    ],
    "blank_ends": [Message.user(" " * 80 + "middle" * 20 + "\n" * 70), Message.assistant("\t" * 90)],
}
PARAMS: dict[str, dict[str, Any]] = {
    "plain": {},
    "params": {"max_tokens": 77, "temperature": 0.3, "stop": ["END"]},
    "tools_stream": {"tools": TOOL_SCHEMAS, "tool_choice": "auto", "stream": True},
}


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewaySimulator]:
    with GatewaySimulator(record_bodies=True) as sim:
        yield sim


def received(gw: GatewaySimulator, route: str, messages: list[Message], params: dict[str, Any]) -> int:
    gw.clear_log()
    reply = backend.completion(
        messages=[to_wire(m) for m in messages], timeout=10, **gw.litellm_kwargs(route), **params
    )
    if params.get("stream"):
        list(reply)
    (record,) = gw.requests
    assert record.bytes == len(gw.body(record.seq))
    return record.bytes


@pytest.mark.parametrize("params", sorted(PARAMS))
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_measured_bytes_equal_received_bytes(gw, route, case, params):
    messages, kw = CASES[case], dict(PARAMS[params])
    wire = received(gw, route, messages, kw)
    tools = kw.pop("tools", None)
    model = gw.litellm_kwargs(route)["model"]
    meter = RequestMeter(model)
    assert meter.measure(messages, tools=tools, **kw).bytes == wire
    assert meter.measure(messages, tools=tools, **kw).bytes == wire  # from the memo
    assert RequestMeter(model).measure(messages, tools=tools, **kw).bytes == wire  # fresh stand-ins
    assert request_bytes(messages, tools=tools, model=model, **kw) == wire
    assert meter.fallbacks == 0  # litellm passed every stand-in through


def test_the_metric_can_fail_the_chat_completions_form_misses_the_anthropic_body(gw):
    """What was measured before: the OpenAI body. On the Anthropic route CJK is sent at twice its size."""
    model = gw.litellm_kwargs("anthropic")["model"]
    assert wire_route(model) == ANTHROPIC_ROUTE and wire_route(gw.model) == "openai"
    wire = received(gw, "anthropic", CASES["cjk"], {})
    old = openai_request_bytes(CASES["cjk"], model=model)
    assert wire > 1.8 * old
    assert RequestMeter(model).measure(CASES["cjk"]).bytes == wire


def test_a_grown_history_hands_litellm_only_the_stand_ins(gw, monkeypatch):
    """The cost of a measure does not grow with the texts: litellm transforms a few hundred bytes per
    message, and a message measured once is not cut again."""
    model = gw.litellm_kwargs("anthropic")["model"]
    history = [Message.system("s")]
    for i in range(30):
        history += [Message.user(f"paste {i} " + CJK), Message.assistant(f"noted {i} " + "a" * 4000)]
    seen: list[int] = []
    real = backend.provider_body

    def spy(*args: Any, **kwargs: Any) -> bytes:
        body = real(*args, **kwargs)
        seen.append(len(body))
        return body

    monkeypatch.setattr(backend, "provider_body", spy)
    meter = RequestMeter(model)
    measured = meter.measure(history).bytes
    assert measured == request_bytes(history, model=model) > 250_000
    assert seen[0] < 20_000  # the stand-ins' body, not the history's
    cut = meter._anthropic.entries
    meter.measure([*history, Message.user("one more " + CJK)])
    assert meter._anthropic.entries == cut + 1


def test_a_stand_in_litellm_drops_makes_that_request_measured_from_the_real_messages(gw, monkeypatch):
    model = gw.litellm_kwargs("anthropic")["model"]
    messages = CASES["cjk"]
    wire = received(gw, "anthropic", messages, {})
    real = backend.provider_body

    def dropping(model_: str, wire_: list[dict[str, Any]], **kwargs: Any) -> bytes:
        body = real(model_, wire_, **kwargs)
        return body if kwargs.get("copy_messages", True) else body.replace(b"Ck", b"cK", 1)

    monkeypatch.setattr(backend, "provider_body", dropping)
    meter = RequestMeter(model)
    assert meter.measure(messages).bytes == wire and meter.fallbacks == 1


def test_an_http_image_is_not_downloaded_to_be_measured(gw, monkeypatch):
    """litellm inlines an http:// image on the Anthropic route when it sends; measuring must not fetch it."""

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("measuring fetched an image")

    import litellm.litellm_core_utils.prompt_templates.factory as factory

    monkeypatch.setattr(factory, "convert_url_to_base64", no_network)
    model = gw.litellm_kwargs("anthropic")["model"]
    message = Message("user", "see", images=("http://example.invalid/cat.png",))
    assert RequestMeter(model).measure([message]).bytes == openai_request_bytes([message], model=model)


def paste_session(gw: GatewaySimulator, route: str, **limits: Any) -> Session:
    kwargs = gw.litellm_kwargs(route)
    return Session(
        kwargs.pop("model"), system="You read what the user pastes. " * 20, archive=Archive.in_memory(),
        status=False, on_flush=None, limits=Limits(context_window=1_000_000, **limits), **kwargs,
    )  # fmt: skip


def paste_turns(session: Session) -> None:
    for i in range(14):
        text = CJK[: 2_000 + 150 * i] if i % 3 == 0 else EMOJI[: 1_500 + 100 * i] if i % 3 == 1 else "plain " * 900
        assert session.send(f"document {i}:\n{text}").text


@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_a_configured_cap_is_never_crossed_on_either_route(gw, route):
    """Pastes of CJK, emoji and ASCII text under a 64 KB cap: every request the session measured is the
    request the server received, and none is above the cap (the Anthropic route's breakpoints included)."""
    gw.reset()
    session = paste_session(gw, route, max_payload="64KB")
    paste_turns(session)
    records = [r for r in gw.requests if r.kind == "turn"]
    events = [e for e in session.events if isinstance(e, RequestEvent) and e.purpose != "summary"]
    assert [e.bytes for e in events] == [r.bytes for r in records]
    assert max(r.bytes for r in gw.requests) <= 64 * 1024
    assert all(r.accepted for r in gw.requests)
    if route == "anthropic":
        assert any("cache_control" in gw.body(r.seq).decode() for r in records)


def test_the_cap_test_can_fail_measured_as_the_chat_completions_body_the_cap_is_crossed(gw, monkeypatch):
    """The same session measuring the Anthropic route as the OpenAI body (what was done before) sends
    bodies above its 64 KB cap: the test above would catch that."""
    from contextkit.sizing import meter

    monkeypatch.setattr(meter, "wire_route", lambda model: "openai")
    gw.reset()
    session = paste_session(gw, "anthropic", max_payload="64KB")
    paste_turns(session)
    assert max(r.bytes for r in gw.requests) > 64 * 1024
