"""``contextkit.completion`` / ``acompletion``: litellm's arguments in, litellm's response out, each call
a turn of the conversation it continues (recognised by its messages or named)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import contextkit
from contextkit import AuthenticationFailed, ConfigError, InvalidMessageError, Limits
from contextkit.archive import Archive
from contextkit.events import RequestEvent
from contextkit.integrations import Conversations
from contextkit.sim import GatewaySimulator


def conversations(**kwargs: Any) -> Conversations:
    kwargs.setdefault("status", None)
    return Conversations(archive=Archive.in_memory(session_id="c"), **kwargs)


def call(conv: Conversations, gw: GatewaySimulator, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    return conv.completion(gw.model, messages, api_base=gw.api_base, api_key="sim-key", **kwargs)


def test_the_response_is_litellms_and_the_conversation_is_recognised_by_its_prefix(gw: GatewaySimulator) -> None:
    conv = conversations()
    a: list[dict[str, Any]] = [{"role": "user", "content": "conversation A"}]
    b: list[dict[str, Any]] = [{"role": "user", "content": "conversation B"}]
    for _ in range(3):
        for history in (a, b):
            response = call(conv, gw, history)
            assert type(response).__name__ == "ModelResponse"
            history += [response.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "more"}]
    assert len(conv.sessions) == 2
    assert [len(s.history) for s in conv.sessions] == [6, 6]
    assert len({e.session_id for e in conv.events if isinstance(e, RequestEvent)}) == 2  # one event log for both


def test_a_named_conversation_and_a_new_one(gw: GatewaySimulator) -> None:
    conv = conversations()
    call(conv, gw, [{"role": "user", "content": "x"}], conversation_id="ticket-1")
    call(conv, gw, [{"role": "user", "content": "x"}])  # same text, not a continuation: a new conversation
    assert conv.sessions[0].session_id == "ticket-1" and len(conv.sessions) == 2
    with pytest.raises(ConfigError, match="conversation_id must be a non-empty string"):
        call(conv, gw, [{"role": "user", "content": "x"}], conversation_id="")
    with pytest.raises(InvalidMessageError, match="messages must be a list"):
        call(conv, gw, "hello")  # type: ignore[arg-type]


def test_stream_true_returns_litellms_chunks(gw: GatewaySimulator) -> None:
    conv = conversations()
    chunks = list(call(conv, gw, [{"role": "user", "content": "stream it"}], stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text and text == conv.sessions[0].history[-1].content
    assert type(chunks[0]).__name__ == "ModelResponseStream"


def test_acompletion_and_its_stream(gw: GatewaySimulator) -> None:
    conv = conversations()

    async def run() -> tuple[str, str]:
        response = await conv.acompletion(gw.model, [{"role": "user", "content": "a"}], api_base=gw.api_base,
                                          api_key="sim-key")  # fmt: skip
        stream = await conv.acompletion(gw.model, [{"role": "user", "content": "b"}], api_base=gw.api_base,
                                        api_key="sim-key", stream=True)  # fmt: skip
        text = "".join([c.choices[0].delta.content or "" async for c in stream])
        return str(response.choices[0].message.content), text

    first, second = asyncio.run(run())
    assert first and second


def test_failures_are_litellms_callers_see_contextkits_errors(gw: GatewaySimulator) -> None:
    conv = conversations(limits=Limits(retry_backoff=0.01))
    gw.fail_next("429")
    assert call(conv, gw, [{"role": "user", "content": "retried"}]).choices[0].message.content
    gw.fail_next("auth401")
    with pytest.raises(AuthenticationFailed, match="refused the credentials"):
        call(conv, gw, [{"role": "user", "content": "refused"}])


def test_the_module_functions_use_the_default_conversations(gw: GatewaySimulator, monkeypatch: Any) -> None:
    from contextkit.integrations import conversations as module

    mine = conversations()
    monkeypatch.setattr(module, "_DEFAULT", mine)
    response = contextkit.completion(gw.model, [{"role": "user", "content": "top level"}], api_base=gw.api_base,
                                     api_key="sim-key")  # fmt: skip
    assert response.choices[0].message.content and len(mine.sessions) == 1
    assert module.default_conversations() is mine
