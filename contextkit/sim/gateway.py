"""What the simulated gateway and the provider behind it answer to one request (no sockets here).

In order: the gateway's body cap on the raw bytes (before any parsing), the body parsed, a queued
one-shot fault, the context window counted with tiktoken, a refused continuation, the summary modes,
then the scripted model's reply, cut to the output cap, with the prompt cache's use, rendered as JSON
or as an event stream (a stream fault cuts it short; a ``StreamGate`` may hold it open).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Protocol

from contextkit.sim import context_edit, faults, wire
from contextkit.sim.cache import CacheUse, PromptCache
from contextkit.sim.config import (
    BODY_FAULTS,
    ERROR_TEXT,
    REFUSAL,
    SHORT_SUMMARY,
    SIM_MODEL,
    STREAM_FAULTS,
    FaultBody,
    SimConfig,
)
from contextkit.sim.gate import StreamGate
from contextkit.sim.model import (
    CONTINUATION_TRIGGER,
    SUMMARY_TRIGGERS,
    AgentScript,
    Conversation,
    ScriptedModel,
    ScriptedReply,
)
from contextkit.sim.replay import ReplayScript
from contextkit.sizing import text_tokens, truncate_to_tokens


@dataclass
class Outcome:
    """The answer to one request, and what the request log records of it."""

    response: wire.Response
    reason: str = "ok"
    tokens: int = 0
    stream: bool = False
    model: str = ""
    kind: str = "turn"
    sleep_then_drop: float = 0.0
    gate: StreamGate | None = None
    cache: CacheUse | None = None
    completion_tokens: int = 0
    context_edit: dict[str, Any] | None = None  # the applied server-side edit (sim/context_edit.py)


class Upstream(Protocol):
    """What answering needs of the ``GatewaySimulator``: its fault queue, prompt cache and stream gate."""

    cache: PromptCache

    def _take_fault(self, stream: bool) -> tuple[str, FaultBody] | None: ...

    def _stream_gate(self) -> StreamGate | None: ...


def respond(sim: Upstream, route: str, body: bytes, cfg: SimConfig, seq: int, *, betas: str = "") -> Outcome:
    """``betas``: the request's ``anthropic-beta`` header (comma-separated beta names)."""
    # unparsed (rejected by the cap): guess the kind from the raw bytes
    kind = "summary" if any(t.encode() in body for t in SUMMARY_TRIGGERS) else "turn"
    if cfg.max_body is not None and len(body) > cfg.max_body:
        resp = faults.gateway_reject(route, cfg.reject_with, len(body), cfg.max_body)
        return Outcome(resp, f"body {len(body)} > cap {cfg.max_body}", kind=kind)
    try:
        data = json.loads(body)
        conv = wire.parse_anthropic(data) if route == wire.ANTHROPIC else wire.parse_openai(data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return Outcome(faults.bad_request(route, f"could not parse the request body: {exc}"), "bad request", kind=kind)
    stream = bool(data.get("stream"))
    edit = None
    if route == wire.ANTHROPIC and data.get("context_management"):
        if context_edit.BETA not in {b.strip() for b in betas.split(",")}:
            # outside the beta, Anthropic's schema has no such field
            message = f"context_management: Extra inputs are not permitted (beta header {context_edit.BETA} missing)"
            return Outcome(faults.bad_request(route, message), "context_management without its beta", kind=kind)

        def count(body: Any) -> int:
            return wire.PRIMING_TOKENS + sum(b.tokens for b in wire.prompt_blocks(route, body))

        data, edit = context_edit.clear_tool_uses(data, count)
        if edit is not None:
            conv = wire.parse_anthropic(data)
    blocks = wire.prompt_blocks(route, data)
    tokens = wire.PRIMING_TOKENS + sum(b.tokens for b in blocks)
    is_summary = conv.is_summary  # parsed: only the last user message decides
    kind = "summary" if is_summary else "turn"
    out = Outcome(wire.Response(), "ok", tokens, stream, str(data.get("model", "")), kind, context_edit=edit)
    taken = sim._take_fault(stream)
    fault, fault_body = taken if taken is not None else (None, None)
    if fault is not None:
        out.reason = f"fault:{fault}"
        window = cfg.context_window or max(1, tokens - 1)
        if fault == "overflow":
            out.response = faults.overflow(route, cfg.overflow_style, max(tokens, window + 1), window)
        elif fault in faults.REJECT_MODES:
            out.response = faults.gateway_reject(route, fault, len(body), cfg.max_body)
        elif fault in ("429", "500", "503", "model_gone", "auth401", "auth403"):
            out.response = faults.simple_fault(route, fault, cfg.retry_after)
        elif fault == "timeout":
            out.sleep_then_drop = cfg.timeout_sleep
        elif fault in BODY_FAULTS:
            out.response = faults.client_error(route, fault_body, int(fault))
        elif fault == "empty_stream":  # a one-off of what llama.cpp sends on overflow
            out.response = wire.Response(200, content_type="text/event-stream", chunks=())
        if fault not in ("stream_drop", "stream_error", "length"):
            return out
    if cfg.block_phrase and cfg.block_phrase.encode() in body and fault is None:
        out.reason = f"content block {cfg.block_phrase!r}"
        out.response = faults.content_block(route, cfg.block_style)
        return out
    asked = int(data.get("max_tokens") or data.get("max_completion_tokens") or 0) if cfg.window_counts_output else 0
    if cfg.context_window is not None and tokens + asked > cfg.context_window and fault is None:
        out.reason = f"context {tokens} > window {cfg.context_window}"
        if asked:
            out.reason = f"context {tokens} + max_tokens {asked} > window {cfg.context_window}"
            out.response = faults.overflow(route, "vllm", tokens, cfg.context_window, asked)
            return out
        out.response = faults.overflow(route, cfg.overflow_style, tokens, cfg.context_window)
        if stream and cfg.empty_stream_on_overflow:  # llama.cpp: 200, an event stream with no events
            out.reason += " (empty stream)"
            out.response = wire.Response(200, content_type="text/event-stream", chunks=())
        return out
    last = conv.last_user
    if cfg.refuse_continuation and last is not None and CONTINUATION_TRIGGER in last.text and fault is None:
        out.reason = "continuation refused"
        out.response = faults.bad_request(route, "This deployment does not accept continuation requests.")
        return out
    if is_summary and cfg.summary_mode != "extract" and fault is None:
        if cfg.summary_mode == "fail":
            out.reason = "summary_mode:fail"
            out.response = faults.server_error(route, "The summarizer model failed: internal error.")
            return out
        if cfg.summary_mode == "timeout":
            out.reason, out.sleep_then_drop = "summary_mode:timeout", cfg.timeout_sleep
            return out
    if cfg.latency:
        time.sleep(cfg.latency)
    reply = _reply(conv, cfg, is_summary)
    limits = [n for n in (cfg.max_output_tokens, data.get("max_tokens"), data.get("max_completion_tokens")) if n]
    if fault == "length":
        limits.append(5)
    reply = _cap_reply(reply, min(limits) if limits else None)
    if cfg.prompt_cache:  # the provider read the prompt: its prefix is cached from here on
        anthropic = route == wire.ANTHROPIC
        out.cache = sim.cache.use(
            blocks, namespace=f"{route}:{out.model}", breakpoints=anthropic,
            priming=wire.PRIMING_TOKENS, granularity=1 if anthropic else 128,
        )  # fmt: skip
    out.completion_tokens = text_tokens(reply.text)
    out.response = _render(route, reply, out, fault, seq)
    if stream and kind == "turn":
        gate = sim._stream_gate()
        out.gate = gate if gate is not None and not gate.released else None
    return out


def _reply(conv: Conversation, cfg: SimConfig, is_summary: bool) -> ScriptedReply:
    if is_summary and cfg.summary_mode != "extract":
        text = {"refuse": REFUSAL, "short": SHORT_SUMMARY, "error_text": ERROR_TEXT}[cfg.summary_mode]
        return ScriptedReply(text)
    if isinstance(cfg.agent, ReplayScript) and not is_summary:
        return cfg.agent.next_reply(conv)  # a recorded run: no directives, needles or scripted steps
    return ScriptedModel(agent=cfg.agent if isinstance(cfg.agent, AgentScript) else None).reply(conv)


def _render(route: str, reply: ScriptedReply, out: Outcome, fault: str | None, seq: int) -> wire.Response:
    model = out.model or SIM_MODEL
    if not out.stream:
        render = wire.anthropic_reply if route == wire.ANTHROPIC else wire.openai_reply
        answer = render(reply, model, out.tokens, seq, out.cache)
        if out.context_edit is not None:
            answer["context_management"] = {"applied_edits": [out.context_edit]}
        return wire.json_response(200, answer)
    if route == wire.ANTHROPIC:  # streamed, the applied edits come with the final message_delta event
        management = {"applied_edits": [out.context_edit]} if out.context_edit is not None else None
        chunks = list(wire.anthropic_stream(reply, model, out.tokens, seq, out.cache, context_management=management))
    else:
        chunks = list(wire.openai_stream(reply, model, out.tokens, seq, out.cache))
    if fault in STREAM_FAULTS:
        head = chunks[: max(2, min(5, len(chunks) - 3))]
        tail = [wire.stream_error_event(route)] if fault == "stream_error" else []
        return wire.Response(200, content_type="text/event-stream", chunks=tuple(head + tail), drop_after_chunks=True)
    return wire.Response(200, content_type="text/event-stream", chunks=tuple(chunks))


def _cap_reply(reply: ScriptedReply, limit: int | None) -> ScriptedReply:
    """Cut the reply to ``limit`` tokens; a cut reply loses its tool calls and ends with "length"."""
    if limit is None or text_tokens(reply.text) + sum(text_tokens(c.arguments) for c in reply.tool_calls) <= limit:
        return reply
    return ScriptedReply(truncate_to_tokens(reply.text, limit), (), "length")
