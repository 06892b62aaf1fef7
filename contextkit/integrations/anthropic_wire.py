"""The Anthropic messages API in the proxy: requests to the chat-completions form contextkit keeps,
and litellm's response back to an Anthropic message (JSON or its event stream). Pure functions."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from contextkit.errors import InvalidMessageError
from contextkit.integrations.content import text_of

__all__ = ["message_events", "message_json", "to_chat_request"]

_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "function_call": "tool_use"}
# parameters of a messages request that mean the same in chat completions
_PARAMS = ("max_tokens", "temperature", "top_p", "stop_sequences", "metadata", "top_k")


def to_chat_request(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(messages, tools, parameters) of a ``/v1/messages`` body in the chat-completions form."""
    raw = body.get("messages")
    if not isinstance(raw, list):
        raise InvalidMessageError("a /v1/messages body needs 'messages': a list of {'role', 'content'}")
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _text(system)})
    for i, message in enumerate(raw):
        if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
            raise InvalidMessageError(f"messages[{i}]: role must be 'user' or 'assistant' in the messages API")
        messages.extend(_chat_messages(message))
    tools = [
        {"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                          "parameters": t.get("input_schema") or {"type": "object"}}}
        for t in body.get("tools") or () if isinstance(t, Mapping) and "name" in t
    ]  # fmt: skip
    params = {k: body[k] for k in _PARAMS if k in body}
    if "stop_sequences" in params:
        params["stop"] = params.pop("stop_sequences")
    params.pop("metadata", None)
    return messages, tools, params


def _chat_messages(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    role, content = message["role"], message.get("content", "")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for block in content or ():
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            calls.append({"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": arguments}})
        elif kind == "tool_result":
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": _text(block.get("content", ""))})
    out: list[dict[str, Any]] = [*results]
    if role == "assistant":
        out.append({"role": "assistant", "content": "\n".join(texts), **({"tool_calls": calls} if calls else {})})
    elif texts or not results:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _text(content: Any) -> str:
    return text_of(content, text_parts_only=True)


def message_json(response: Any, model: str) -> dict[str, Any]:
    """litellm's (chat-completions) response as an Anthropic message."""
    choice = response.choices[0]
    message = choice.message
    content: list[dict[str, Any]] = []
    if message.content:
        content.append({"type": "text", "text": message.content})
    for call in getattr(message, "tool_calls", None) or ():
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except ValueError:
            arguments = {}
        content.append({"type": "tool_use", "id": call.id, "name": call.function.name, "input": arguments})
    usage = getattr(response, "usage", None)
    return {
        "id": str(getattr(response, "id", "msg_contextkit")),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP.get(str(choice.finish_reason or "stop"), "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
            "output_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
        },
    }


def message_events(message: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The event stream of a finished message, as the messages API streams one: (event name, data)."""
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 0}}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}  # fmt: skip
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "input": {}}}  # fmt: skip
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                            "usage": {"output_tokens": message["usage"]["output_tokens"]}}  # fmt: skip
    yield "message_stop", {"type": "message_stop"}
