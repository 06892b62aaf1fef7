"""LangChain v1: ``ContextkitMiddleware``, an ``AgentMiddleware`` for ``create_agent(..., middleware=[...])``.

Around every model call (``wrap_model_call`` / ``awrap_model_call``) the agent's messages are one
host-driven turn of a managed ``Session`` (``Session.begin_from``): the request the model gets is
the session's - compacted, within the limits in force, ``recall`` offered once content is archived
(and served here: the agent never sees a ``recall`` call) - and a failure the model call raises is
classified and answered as a ``Session`` would: retried after a back-off, recovered with a smaller
request (a learned cap, a recovery level), or raised. The agent's own state keeps every message as
it was; the managed copy is the session's (``middleware.session``).

The pre-flight (compaction, the known-limit check) runs inside the same wrap, immediately before the
call, because that is where the request is built; there is no separate ``before_model`` step.

``model``: the litellm model string contextkit counts tokens with and summarizes through (with
``api_base`` / ``api_key`` and any litellm keyword), e.g. ``"openai/gpt-4o-mini"``. Give the chat
model ``max_retries=0``: contextkit does the retrying.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from contextkit.engine.effects import CallModel, ModelReply
from contextkit.engine.host import Decision, HostTurn
from contextkit.errors import require_extra
from contextkit.integrations.content import text_of
from contextkit.integrations.host_loop import adrive, drive, reply_of
from contextkit.messages import ToolCall
from contextkit.session.core import Session

require_extra("ContextkitMiddleware", "langchain", "langchain_core", extra="integrations")

from langchain.agents.middleware import AgentMiddleware, ModelResponse  # noqa: E402 - after the extra's check
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    SystemMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402

__all__ = ["ContextkitMiddleware"]


class ContextkitMiddleware(AgentMiddleware):  # type: ignore[misc]
    """Keep a LangChain agent's requests inside the window and the gateway's cap (see the module docstring).

    ``ContextkitMiddleware("openai/gpt-4o-mini", limits=Limits(max_payload="128KB"), archive=...)``; any
    other keyword goes to ``Session`` (and from there to litellm for summaries). ``session=``: a session
    of your own instead.
    """

    def __init__(self, model: str | None = None, *, session: Session | None = None, **session_options: Any) -> None:
        super().__init__()
        if session is None:
            if model is None:
                from contextkit.errors import ConfigError

                raise ConfigError(
                    "ContextkitMiddleware needs the litellm model string it counts tokens and summarizes with, "
                    "e.g. ContextkitMiddleware('openai/gpt-4o-mini', api_base=..., api_key=...), or session=Session(...)"
                )
            session_options.setdefault("status", True)
            session = Session(model, **session_options)
        self.session = session

    # the hooks ----------------------------------------------------------------------------------------
    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        decision, last = drive(self._begin(request), lambda call: handler(_request_for(request, call)), _read)
        return _result(decision, last)

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        decision, last = await adrive(self._begin(request), lambda call: handler(_request_for(request, call)), _read)
        return _result(decision, last)

    # internals ----------------------------------------------------------------------------------------
    def _begin(self, request: Any) -> HostTurn:
        messages = list(request.messages)
        if request.system_message is not None:
            messages = [request.system_message, *messages]
        history = convert_to_openai_messages(messages)
        tools = [t if isinstance(t, dict) and "function" in t else convert_to_openai_tool(t) for t in request.tools]
        return self.session.begin_from(history, tools=tools)


def _request_for(request: Any, call: CallModel) -> Any:
    """The agent's request with the session's messages and, when offered, the ``recall`` tool."""
    wire = [dict(m) for m in call.messages]
    system = None
    if wire and wire[0].get("role") == "system":
        system = SystemMessage(content=_text(wire.pop(0).get("content")))
    for m in wire:  # LangChain reads text, not content parts with cache_control
        if isinstance(m.get("content"), list):
            m["content"] = _text(m["content"])
    names = {_tool_name(t) for t in request.tools}
    extra = [t for t in call.tools or () if t["function"]["name"] not in names]
    overrides: dict[str, Any] = {"messages": convert_to_messages(wire), "system_message": system}
    if extra:
        overrides["tools"] = [*request.tools, *extra]
    return request.override(**overrides)


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        return str(tool.get("function", {}).get("name") or tool.get("name", ""))
    return str(getattr(tool, "name", ""))


def _text(content: Any) -> str:
    return text_of(content, text_parts_only=True)


def _ai_message(result: Any) -> Any:
    if isinstance(result, AIMessage):
        return result
    messages = getattr(result, "result", None) or getattr(getattr(result, "model_response", None), "result", None)
    return next((m for m in reversed(messages or []) if isinstance(m, AIMessage)), None)


def _read(result: Any, call: CallModel) -> ModelReply:
    return _reply(result)


def _reply(result: Any) -> ModelReply:
    message = _ai_message(result)
    if message is None:
        from contextkit.errors import ProviderError

        raise ProviderError("the model call returned no AIMessage")
    calls = tuple(
        ToolCall(id=str(c.get("id") or f"call_{i}"), name=str(c["name"]), arguments=json.dumps(c.get("args") or {}))
        for i, c in enumerate(message.tool_calls or ())
    )
    meta = message.response_metadata or {}
    usage = message.usage_metadata or {}
    finish = str(meta.get("finish_reason") or ("tool_calls" if calls else "stop"))
    return ModelReply(
        content=_text(message.content),
        tool_calls=calls,
        finish_reason=finish,
        prompt_tokens=int(usage.get("input_tokens", 0) or 0),
        completion_tokens=int(usage.get("output_tokens", 0) or 0),
    )


def _result(decision: Decision, last: Any) -> Any:
    reply = reply_of(decision)
    message = _ai_message(last)
    kept = {c.id for c in reply.tool_calls_made}
    calls = [c for c in (message.tool_calls or ()) if c.get("id") in kept]
    answer = message.model_copy(update={"content": reply.text if reply.text else message.content, "tool_calls": calls})
    if isinstance(last, ModelResponse):
        return ModelResponse(result=[answer], structured_response=last.structured_response)
    return answer

