"""Wire formats of the simulator: request parsing, replies, SSE events and error bodies.

Two routes: OpenAI chat completions (``/v1/chat/completions``) and Anthropic messages
(``/v1/messages``). Error texts copy what real providers and middleboxes send, because the point
of the simulator is that litellm maps them to the same exceptions it would raise in production.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from contextkit.sim.cache import CacheUse, PromptBlock
from contextkit.sim.model import Conversation, ScriptedReply, SimCall, SimMessage
from contextkit.sizing import text_tokens

OPENAI = "openai"
ANTHROPIC = "anthropic"
IMAGE_TOKENS = 85  # an image part counts like a low-detail image, not like its data-URL text


@dataclass(frozen=True, slots=True)
class Response:
    """What to send back: ``chunks`` are SSE frames for streaming replies; ``drop`` closes the socket."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    chunks: tuple[bytes, ...] | None = None
    drop_after_chunks: bool = False
    drop: bool = False


def json_response(status: int, obj: Any, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, json.dumps(obj).encode(), "application/json", headers)


# request parsing -----------------------------------------------------------------------------


def _text_of(content: Any) -> tuple[str, int]:
    """Text and image count of an OpenAI/Anthropic ``content`` (string or parts)."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    texts, images = [], 0
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(str(part.get("text", "")))
        elif kind in ("image_url", "image"):
            images += 1
        elif kind == "tool_result":
            texts.append(_text_of(part.get("content"))[0])
    return "\n".join(texts), images


def parse_openai(body: Mapping[str, Any]) -> Conversation:
    msgs = []
    for raw in body.get("messages") or []:
        text, images = _text_of(raw.get("content"))
        calls = tuple(
            SimCall(str(c.get("id", "")), str(c["function"]["name"]), str(c["function"].get("arguments") or "{}"))
            for c in raw.get("tool_calls") or []
        )
        msgs.append(SimMessage(str(raw.get("role", "user")), text, calls, raw.get("tool_call_id"), images))
    tools = tuple(str(t["function"]["name"]) for t in body.get("tools") or [] if "function" in t)
    return Conversation(tuple(msgs), tools)


def parse_anthropic(body: Mapping[str, Any]) -> Conversation:
    msgs: list[SimMessage] = []
    system = body.get("system")
    if system:
        msgs.append(SimMessage("system", _text_of(system)[0]))
    for raw in body.get("messages") or []:
        role, content = str(raw.get("role", "user")), raw.get("content")
        if isinstance(content, str):
            msgs.append(SimMessage(role, content))
            continue
        texts, images, calls = [], 0, []
        for part in content or []:
            kind = part.get("type")
            if kind == "tool_result":
                msgs.append(SimMessage("tool", _text_of(part.get("content"))[0], tool_call_id=part.get("tool_use_id")))
            elif kind == "tool_use":
                calls.append(SimCall(str(part.get("id")), str(part.get("name")), json.dumps(part.get("input") or {})))
            elif kind == "text":
                texts.append(str(part.get("text", "")))
            elif kind == "image":
                images += 1
        if texts or calls or images:
            msgs.append(SimMessage(role, "\n".join(texts), tuple(calls), images=images))
    tools = tuple(str(t.get("name")) for t in body.get("tools") or [])
    return Conversation(tuple(msgs), tools)


PRIMING_TOKENS = 3  # once per request, for the reply


def message_tokens(m: SimMessage) -> int:
    """3 per message + its text, images and tool calls (OpenAI's cookbook counting, like litellm)."""
    tokens = 3 + text_tokens(m.text) + m.images * IMAGE_TOKENS
    return tokens + sum(text_tokens(c.name) + text_tokens(c.arguments) for c in m.tool_calls)


def count_tokens(conv: Conversation, body: Mapping[str, Any]) -> int:
    """Prompt tokens the way OpenAI's cookbook (and litellm) count them: 3 per message + 3 priming."""
    total = PRIMING_TOKENS + sum(message_tokens(m) for m in conv.messages)
    if body.get("tools"):
        total += text_tokens(json.dumps(body["tools"]))
    return total


# prompt-cache blocks -------------------------------------------------------------------------

_TOKEN_MEMO: dict[str, int] = {}  # block digest -> tokens: a long history is tokenised once, not per request
_TOKEN_MEMO_MAX = 20_000
_memo_lock = threading.Lock()


def _without_cache_control(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {k: _without_cache_control(v) for k, v in obj.items() if k != "cache_control"}
    if isinstance(obj, list):
        return [_without_cache_control(v) for v in obj]
    return obj


def _has_cache_control(obj: Any) -> bool:
    if isinstance(obj, Mapping):
        return "cache_control" in obj or any(_has_cache_control(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_cache_control(v) for v in obj)
    return False


def _block_tokens(route: str, kind: str, obj: Any) -> int:
    if kind == "tools":
        return text_tokens(json.dumps(obj))
    if kind == "system":
        return message_tokens(SimMessage("system", _text_of(obj)[0]))
    parse = parse_anthropic if route == ANTHROPIC else parse_openai
    return sum(message_tokens(m) for m in parse({"messages": [obj]}).messages)


def prompt_blocks(route: str, body: Mapping[str, Any]) -> list[PromptBlock]:
    """The request as cacheable blocks in the provider's order: tools, (Anthropic) system, messages.

    Their tokens plus ``PRIMING_TOKENS`` equal ``count_tokens`` of the same body."""
    pieces: list[tuple[str, Any]] = []
    if body.get("tools"):
        pieces.append(("tools", body["tools"]))
    if route == ANTHROPIC and body.get("system"):
        pieces.append(("system", body["system"]))
    pieces += [("message", raw) for raw in body.get("messages") or []]
    blocks: list[PromptBlock] = []
    chain = hashlib.sha256(route.encode())
    for kind, obj in pieces:
        canonical = json.dumps([kind, _without_cache_control(obj)], sort_keys=True, ensure_ascii=False)
        own = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
        with _memo_lock:
            tokens = _TOKEN_MEMO.get(own)
        if tokens is None:
            tokens = _block_tokens(route, kind, obj)
            with _memo_lock:
                if len(_TOKEN_MEMO) >= _TOKEN_MEMO_MAX:
                    _TOKEN_MEMO.clear()
                _TOKEN_MEMO[own] = tokens
        chain.update(own.encode())
        blocks.append(PromptBlock(chain.hexdigest(), tokens, _has_cache_control(obj)))
    return blocks


# replies -----------------------------------------------------------------------------------


def openai_usage(prompt_tokens: int, completion_tokens: int, cache: CacheUse | None) -> dict[str, Any]:
    """OpenAI's usage object; with a prompt cache, ``prompt_tokens_details.cached_tokens`` (a part of
    ``prompt_tokens``, as OpenAI reports it)."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cache is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cache.read_tokens, "audio_tokens": 0}
    return usage


def anthropic_usage(prompt_tokens: int, cache: CacheUse | None) -> dict[str, int]:
    """Anthropic's input usage: ``input_tokens`` excludes what was read from or written to the cache."""
    if cache is None:
        return {"input_tokens": prompt_tokens}
    return {
        "input_tokens": prompt_tokens - cache.read_tokens - cache.write_tokens,
        "cache_creation_input_tokens": cache.write_tokens,
        "cache_read_input_tokens": cache.read_tokens,
    }


def openai_reply(
    reply: ScriptedReply, model: str, prompt_tokens: int, seq: int, cache: CacheUse | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    completion = text_tokens(reply.text)
    return {
        "id": f"chatcmpl-sim{seq}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish}],
        "usage": openai_usage(prompt_tokens, completion, cache),
    }


_STOP_REASON = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def anthropic_reply(
    reply: ScriptedReply, model: str, prompt_tokens: int, seq: int, cache: CacheUse | None = None
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for c in reply.tool_calls:
        content.append({"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments or "{}")})
    return {
        "id": f"msg_sim{seq}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP_REASON[reply.finish],
        "stop_sequence": None,
        "usage": anthropic_usage(prompt_tokens, cache) | {"output_tokens": text_tokens(reply.text)},
    }


def _pieces(text: str, size: int = 12) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def openai_stream(
    reply: ScriptedReply, model: str, prompt_tokens: int, seq: int, cache: CacheUse | None = None
) -> Iterator[bytes]:
    """Chat-completion chunks; the terminal ``[DONE]`` comes last (``stream_drop`` cuts before it)."""
    base = {"id": f"chatcmpl-sim{seq}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
    if reply.text:
        for piece in _pieces(reply.text):
            yield chunk({"content": piece})
    for i, c in enumerate(reply.tool_calls):
        head = {"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
        yield chunk({"tool_calls": [head]})
        for piece in _pieces(c.arguments, 20):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, reply.finish)
    usage = openai_usage(prompt_tokens, text_tokens(reply.text), cache)
    yield _sse({**base, "choices": [], "usage": usage})
    yield b"data: [DONE]\n\n"


def anthropic_stream(
    reply: ScriptedReply,
    model: str,
    prompt_tokens: int,
    seq: int,
    cache: CacheUse | None = None,
    *,
    context_management: dict[str, Any] | None = None,
) -> Iterator[bytes]:
    """Anthropic's event stream. ``context_management`` (the applied server-side edits) rides on the
    final ``message_delta`` event, beside ``delta`` and ``usage``, as Anthropic's API sends it."""
    message = anthropic_reply(ScriptedReply(), model, prompt_tokens, seq) | {"content": [], "stop_reason": None}
    message["usage"] = anthropic_usage(prompt_tokens, cache) | {"output_tokens": 1}
    yield _sse({"type": "message_start", "message": message}, "message_start")
    index = 0
    if reply.text:
        block: dict[str, Any] = {"type": "text", "text": ""}
        yield _sse({"type": "content_block_start", "index": index, "content_block": block}, "content_block_start")
        for piece in _pieces(reply.text):
            delta = {"type": "text_delta", "text": piece}
            yield _sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
        yield _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        index += 1
    for c in reply.tool_calls:
        block = {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}
        yield _sse({"type": "content_block_start", "index": index, "content_block": block}, "content_block_start")
        for piece in _pieces(c.arguments, 20):
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield _sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
        yield _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        index += 1
    final: dict[str, Any] = {"stop_reason": _STOP_REASON[reply.finish], "stop_sequence": None}
    usage = {"output_tokens": text_tokens(reply.text)}
    event: dict[str, Any] = {"type": "message_delta", "delta": final, "usage": usage}
    if context_management is not None:
        event["context_management"] = context_management
    yield _sse(event, "message_delta")
    yield _sse({"type": "message_stop"}, "message_stop")


def stream_error_event(route: str) -> bytes:
    if route == ANTHROPIC:
        err = {"type": "error", "error": {"type": "overloaded_error", "message": "upstream overloaded mid-stream"}}
        return _sse(err, "error")
    return _sse({"error": {"message": "upstream overloaded mid-stream", "type": "server_error", "code": None}})
