"""Prompt-cache breakpoints for providers that cache only where told (Anthropic, Bedrock).

Anthropic caches a prompt prefix only up to a block marked ``cache_control`` and finds an earlier
cached prefix only at a breakpoint or up to about 20 blocks before one. Three breakpoints (of the
four allowed) cover what contextkit's history does:

1. the **last system message**: tools and system prompt, which no compaction ever touches, stay
   cached across every rewrite;
2. the **anchor**: the last message before the oldest tool result a later no-LLM pass may still
   rewrite (the "volatile tail"). Everything before it is final until a summary or a truncation. It
   moves only when a rewrite reaches the tail it guards (it is derived from the history itself);
   the request in which it moves also keeps a breakpoint on the *previous* anchor when that prefix
   is unchanged, so the rewrite still reads everything up to it, however far back it is (Anthropic
   looks for earlier cached prefixes only about 20 blocks before a breakpoint);
3. the **last message**: each request writes its new tail, the next request reads it.

Providers that cache automatically (OpenAI, DeepSeek, Gemini, most OpenAI-compatible servers) need
none of this and some reject unknown fields, so the session enables breakpoints only for the
providers that need them (``needs_breakpoints``). Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contextkit.messages import Message
from contextkit.policy.microcompact import ONE_LINER_PREFIX, is_candidate
from contextkit.policy.trim import STUB_PREFIX
from contextkit.sizing import dumps

__all__ = [
    "EPHEMERAL",
    "anchor_position",
    "breakpoint_bytes",
    "breakpoint_positions",
    "needs_breakpoints",
    "volatile_from",
    "with_breakpoints",
]

EPHEMERAL: Mapping[str, str] = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4  # Anthropic's limit per request


def needs_breakpoints(provider: str, model: str) -> bool:
    """Whether ``provider`` caches only at explicit ``cache_control`` breakpoints."""
    name = model.lower()
    if provider == "anthropic":
        return True
    if provider == "bedrock" or provider.startswith("vertex_ai"):
        return "claude" in name or "anthropic" in name
    return False


def volatile_from(history: Sequence[Message]) -> int | None:
    """Index of the oldest message a no-LLM pass may still rewrite (a tool result that is neither a
    one-line stub nor a superseded-read stub); None when there is none."""
    for i, m in enumerate(history):
        if is_candidate(m) and not m.content.startswith((ONE_LINER_PREFIX, STUB_PREFIX)):
            return i
    return None


def _carries(message: Message) -> bool:
    # litellm moves a message-level cache_control onto the message's text or tool_result block;
    # an assistant message that is only tool calls has no such block.
    return not (message.role == "assistant" and message.tool_calls and not message.content)


def _at_or_before(history: Sequence[Message], index: int, floor: int) -> int | None:
    for i in range(index, floor, -1):
        if _carries(history[i]):
            return i
    return None


def anchor_position(history: Sequence[Message]) -> int | None:
    """The anchor: the last message that can carry a breakpoint before the volatile tail (None when
    there is no volatile tail, or nothing but system messages before it)."""
    volatile = volatile_from(history)
    if volatile is None:
        return None
    systems = [i for i, m in enumerate(history) if m.role == "system"]
    return _at_or_before(history, volatile - 1, systems[-1] if systems else -1)


def breakpoint_positions(history: Sequence[Message], *, previous_anchor: int | None = None) -> tuple[int, ...]:
    """Indices of the messages that get ``cache_control``: last system message, anchor, last message,
    and ``previous_anchor`` (the caller vouches its prefix is unchanged) when the anchor moved."""
    if not history:
        return ()
    systems = [i for i, m in enumerate(history) if m.role == "system"]
    last_system = systems[-1] if systems else -1
    positions: list[int] = [last_system] if last_system >= 0 else []
    anchor = anchor_position(history)
    if anchor is not None:
        positions.append(anchor)
    if previous_anchor is not None and last_system < previous_anchor < len(history):
        positions.append(previous_anchor)
    last = _at_or_before(history, len(history) - 1, last_system)
    if last is not None:
        positions.append(last)
    return tuple(sorted(set(positions)))[-MAX_BREAKPOINTS:]


def with_breakpoints(wire: Sequence[Mapping[str, Any]], positions: Sequence[int]) -> list[dict[str, Any]]:
    """Copies of the wire messages with ``cache_control`` on ``positions`` (others unchanged)."""
    marked = set(positions)
    return [dict(m, cache_control=dict(EPHEMERAL)) if i in marked else dict(m) for i, m in enumerate(wire)]


def breakpoint_bytes(positions: Sequence[int]) -> int:
    """Bytes the breakpoints add to a request body: ``,"cache_control":{...}`` in each marked message."""
    return len(positions) * (len(dumps({"cache_control": EPHEMERAL})) - 1)  # the braces out, a comma in
