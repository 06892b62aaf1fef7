"""One model request of the turn flow: the ``CallModel`` effect, its counters, the classification of
a failure and the ``RequestEvent`` that records it, how its body follows the one before (the prefix
a prompt cache can reuse) and the body a failed request's digest reads (no IO: the driver answers
the effect)."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from contextkit.engine.effects import CallModel, ModelFailure, ModelReply
from contextkit.events import RequestEvent
from contextkit.failures.classify import Failure, FailureKind, classify_failure
from contextkit.limits.context import FlowContext
from contextkit.messages import Message
from contextkit.prompt.prefix import PrefixSample
from contextkit.sizing import Measure


def attempt_record(failure: Failure, level: int, sent: Measure) -> dict[str, Any]:
    """A rejected attempt as ``Reply.attempts`` lists it."""
    return {"outcome": "rejected", "failure_kind": failure.kind.value, "level": level, "bytes": sent.bytes}


def send_request(
    ctx: FlowContext, call: CallModel, sent: Measure, level: int, attempt: int, sample: Any
) -> Generator[Any, Any, tuple[Any, Failure | None]]:
    """Send one request; count it, classify a failure, record the attempt."""
    st = ctx.state
    outcome = yield call
    st.stats.requests += 1
    st.stats.bytes_sent += sent.bytes
    st.stats.tokens_sent += sent.tokens
    failure = None
    if isinstance(outcome, ModelFailure):
        failure = empty_stream_failure(ctx, sent) if outcome.empty else None
        failure = failure or classify_failure(outcome.error, history_bytes=sent.bytes, request_bytes=sent.bytes)
    record_request(ctx, outcome, failure, sent, level, attempt, sample, call.purpose, call.model)
    return outcome, failure


def empty_stream_failure(ctx: FlowContext, sent: Measure) -> Failure:
    """An empty stream over the window is an overflow; otherwise its cause is unknown yet (transient)."""
    window = ctx.state.context_window
    if sent.tokens > window:
        reason = f"empty stream: the request's {sent.tokens} tokens exceed the context window of {window} tokens"
        return Failure(FailureKind.CONTEXT_OVERFLOW, reason, sent.bytes)
    return Failure(FailureKind.TRANSIENT, "the provider ended the stream without content, tool call or finish reason")


def record_request(
    ctx: FlowContext,
    outcome: Any,
    failure: Failure | None,
    sent: Measure,
    level: int,
    attempt: int,
    sample: Any,
    purpose: str = "turn",
    model: str | None = None,
) -> None:
    st = ctx.state
    ok = isinstance(outcome, ModelReply)
    ctx.events.append(
        RequestEvent(
            session_id=st.session_id,
            turn=st.turn,
            attempt=attempt,
            level=level,
            model=model or st.model,
            bytes=sent.bytes,
            tokens=sent.tokens,
            messages=sent.messages,
            outcome=("length" if outcome.finish_reason == "length" else "ok") if ok else "rejected",
            failure_kind=failure.kind.value if failure else None,
            status=failure.status if failure else None,
            latency_s=outcome.latency_s,
            prompt_tokens=outcome.prompt_tokens if ok else 0,
            completion_tokens=outcome.completion_tokens if ok else 0,
            cost=outcome.cost if ok else 0.0,
            prefix_shared_bytes=sample.shared_bytes,
            prefix_share=sample.share,
            purpose=purpose,
            cached_prompt_tokens=outcome.cached_prompt_tokens if ok else 0,
            cache_write_tokens=outcome.cache_write_tokens if ok else 0,
            append_only=sample.append_only,
        )
    )


def request_body(ctx: FlowContext, messages: Sequence[Message]) -> bytes:
    """The request body's messages and tools as sent, without breakpoints (the digest of a failed
    request): ``{"tools": ..., "messages": [...]}`` joined from each message's cached wire JSON."""
    return ctx.meter.wire_body(messages, ctx.tools)


def body_sample(ctx: FlowContext, messages: Sequence[Message]) -> PrefixSample:
    """How the body of this request (``request_body``) follows the one before it: the bytes they
    share from the start, what a provider's prompt cache can reuse. From the sizes of each message's
    cached wire JSON, so a request looks up only the messages it adds and no body is joined."""
    return PrefixSample.of(*ctx.meter.body_step(messages, ctx.tools))
