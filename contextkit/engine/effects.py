"""Effects the sans-IO turn flow yields, the results drivers send back, and ``Reply``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contextkit.messages import ToolCall


@dataclass(frozen=True)
class CallModel:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    params: dict[str, Any]
    bytes: int
    tokens: int
    stream: bool = False
    purpose: str = "turn"
    model: str | None = None  # a fallback model for this call (None: the session's model)
    overrides: dict[str, Any] | None = None  # that fallback's own litellm arguments (api_base, api_key, ...)


@dataclass(frozen=True)
class ModelReply:
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    reasoning: str | None = None
    latency_s: float = 0.0
    cached_prompt_tokens: int = 0  # part of prompt_tokens the provider read from its prompt cache
    cache_write_tokens: int = 0  # part of prompt_tokens the provider wrote to it (Anthropic bills them)
    context_edits: tuple[dict[str, Any], ...] = ()  # server-side context edits the provider applied


@dataclass(frozen=True)
class ModelFailure:
    """A failed model call. ``partial``: text a stream delivered before it failed. ``empty``: the
    stream ended with no content, no tool call and no finish reason from the provider (llama.cpp's
    answer to a streamed request over its window), a failure whose cause is still unknown."""

    error: BaseException
    partial: str = ""
    latency_s: float = 0.0
    empty: bool = False


@dataclass(frozen=True)
class RunTools:
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class StreamNote:
    """Tells a streaming driver what the flow decided (only yielded by a streamed turn; other
    drivers send back ``None``): ``kind`` is a ``StreamEvent`` kind (tool_round, retry,
    continuation, voided, done: the turn's reply is ready), ``text`` its text, ``show`` text the reader must see now (the marker
    line of a voided answer, the line break after a tool round's text)."""

    kind: str
    text: str = ""
    reason: str = ""
    level: int = 0
    show: str = ""


@dataclass
class Reply:
    """The answer to one ``send``: text, why it stopped, usage, cost and every attempt made."""

    text: str
    finish_reason: str
    usage: dict[str, int] = field(default_factory=dict)
    cost: float = 0.0
    attempts: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: int = 0
    model: str = ""  # the model that answered (a fallback's name when the turn moved to one)
    # the calls handed back to a host that runs its own tools (``turn_flow(hand_back_tools=True)``)
    tool_calls_made: tuple[ToolCall, ...] = ()

    @property
    def recovered(self) -> bool:
        return any(a.get("outcome") != "ok" for a in self.attempts)

    def __str__(self) -> str:
        return self.text
