"""Bytes of the request body litellm sends, and the route that decides its shape.

On the OpenAI route (and every OpenAI-compatible one) the body is the chat-completions JSON
(messages, tool-call arguments, tool schemas, image parts, model and parameters), serialised the way
the OpenAI SDK / httpx send it (``ensure_ascii=False``, compact separators). On the Anthropic route
litellm builds a different body itself (content blocks, the system prompt apart, tool calls as parsed
``input`` objects, ASCII-escaped JSON), measured as litellm's own transformation builds it
(``backend.provider_body``, imported lazily: ``import contextkit`` never imports litellm).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from contextkit.messages import Message, to_wire

_log = logging.getLogger("contextkit")


def dumps(obj: Any) -> str:
    """JSON as the OpenAI SDK sends it."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def body_bytes(body: Mapping[str, Any]) -> int:
    return len(dumps(body).encode("utf-8", "surrogatepass"))


def sent_message(message: Message | Mapping[str, Any]) -> dict[str, Any]:
    """The message dict as litellm puts it on the wire: top-level ``None`` values are dropped
    (an assistant tool-call message with ``content: None`` is sent without ``content``)."""
    wire = to_wire(message) if isinstance(message, Message) else message
    return {k: v for k, v in wire.items() if v is not None}


def message_bytes(message: Message | Mapping[str, Any]) -> int:
    return len(dumps(sent_message(message)).encode("utf-8", "surrogatepass"))


def request_bytes(
    messages: Sequence[Message | Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    model: str = "",
    **params: Any,
) -> int:
    """Byte length of the body litellm sends for these messages and tools on ``model``'s route
    (see the module docstring); exact, and O(size of the texts): ``RequestMeter`` is the cheap way
    to measure a history again and again."""
    if wire_route(model) == ANTHROPIC_ROUTE:
        built = _provider_bytes(model, [_wire_of(m) for m in messages], tools, params)
        if built is not None:
            return built
    return openai_request_bytes(messages, tools=tools, model=model, **params)


def openai_request_bytes(
    messages: Sequence[Message | Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    model: str = "",
    **params: Any,
) -> int:
    """UTF-8 byte length of the chat-completions JSON body for these messages and tools."""
    body: dict[str, Any] = {
        "messages": [sent_message(m) for m in messages],
        "model": _wire_model(model),
    }
    if tools:
        body["tools"] = list(tools)
    body.update(sent_params(params, has_tools=bool(tools)))
    return body_bytes(body)


# Keyword arguments litellm consumes itself (measured on litellm 1.110.2, openai/ route): they
# never reach the body. ``user`` is dropped by litellm's OpenAI-compatible route as well.
_NOT_SENT = frozenset(
    {
        "metadata", "drop_params", "timeout", "max_retries", "num_retries", "api_key", "api_base",
        "base_url", "api_version", "custom_llm_provider", "mock_response", "caching", "user",
        "extra_headers", "litellm_logging_obj",
    }
)  # fmt: skip


def body_params(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of a litellm call that shape the request body (temperature, seed,
    response_format, tool_choice, extra_body ...): everything but litellm's own options and
    credentials. Give them to ``RequestMeter.measure`` so measured bytes equal the bytes sent."""
    return {k: v for k, v in kwargs.items() if k not in _NOT_SENT}


def sent_params(params: Mapping[str, Any], *, has_tools: bool) -> dict[str, Any]:
    """The completion parameters as they appear in the body: ``None`` values, ``stream=False``,
    litellm-only keys and ``tool_choice`` without tools are not sent; ``extra_body`` is merged."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None or key in _NOT_SENT or key == "extra_body":
            continue
        if (key == "stream" and value is False) or (key == "tool_choice" and not has_tools):
            continue
        out[key] = value
    extra = params.get("extra_body")
    if isinstance(extra, Mapping):
        out.update(extra)
    return out


def _wire_model(model: str) -> str:
    """litellm strips the provider prefix before sending."""
    return model.split("/", 1)[1] if "/" in model else model


# routes ---------------------------------------------------------------------------------------

OPENAI_ROUTE = "openai"
ANTHROPIC_ROUTE = "anthropic"


@lru_cache(maxsize=256)
def wire_route(model: str) -> str:
    """Which body litellm posts for ``model``: ``"anthropic"`` (litellm's own Anthropic messages
    body) or ``"openai"`` (the chat-completions body, for OpenAI and every other route; only those
    two are checked against what a server received). A model without a provider prefix is routed
    by litellm itself."""
    if not model:
        return OPENAI_ROUTE
    prefix = model.split("/", 1)[0] if "/" in model else ""
    if prefix in (OPENAI_ROUTE, ANTHROPIC_ROUTE):
        return prefix
    from contextkit import backend

    return ANTHROPIC_ROUTE if backend.provider_of(model) == ANTHROPIC_ROUTE else OPENAI_ROUTE


def _wire_of(message: Message | Mapping[str, Any]) -> dict[str, Any]:
    return to_wire(message) if isinstance(message, Message) else dict(message)


def _provider_bytes(
    model: str, wire: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] | None, params: Mapping[str, Any]
) -> int | None:
    """Length of the body litellm builds for ``wire``; None when litellm refuses to build one
    (a request without a non-system message: it never reaches the wire)."""
    from contextkit import backend

    sent = {k: v for k, v in params.items() if k not in _NOT_SENT and v is not None}
    try:
        return len(backend.provider_body(model, wire, tools=[dict(t) for t in tools] if tools else None, params=sent))
    except Exception as exc:  # noqa: BLE001 - litellm raises its own and plain errors for bodies it will not build
        _log.debug("litellm builds no %s body for this request (%s); measured as the chat-completions body", model, exc)
        return None
