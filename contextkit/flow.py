"""The turn and recovery loop, written once, with no IO (sans-IO, like httpx's auth flow).

``turn_flow`` is a generator. It yields *effects* and receives their results:

* ``CallModel``      → the driver sends ``ModelReply`` or ``ModelFailure``
* ``SummaryRequest`` → (from the compactor) the driver sends ``SummaryResponse`` or an exception
* ``RunTools``       → the driver sends a list of ``(ToolCall, ToolResult)``
* ``Sleep``          → the driver sleeps and sends ``None``

``Session`` drives it synchronously, asynchronously and while streaming, so recovery behaves the
same in every loop (S6.5). Order per request (research §9.10): turn-boundary rewrites
(microcompact, read dedup) → pre-flight / auto compaction → pairing repair → outgoing copy with
tool-result budgets → request → on failure: classify → learned cap → floor diagnostic → ladder
level → one-time payload notice → retry; on ``length``: escalate ``max_tokens`` and continue.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from contextkit.classify import Failure, FailureKind, classify_failure
from contextkit.effects import CallModel, ModelFailure, ModelReply, Reply, RunTools, Sleep
from contextkit.errors import AuthenticationFailed, ProviderError, RecoveryFailedError
from contextkit.events import RequestEvent
from contextkit.messages import Message, ToolCall, to_wire_list
from contextkit.preflight import (
    Effect,
    Flow,
    FlowContext,
    _body,
    compact_if_needed,
    emit_history,
    measure,
    outgoing,
    summarizer_window,
    turn_boundary,
)
from contextkit.recovery import record_recovery, recover
from contextkit.sizing import Measure
from contextkit.state import CONTINUATION
from contextkit.tools import ToolResult

__all__ = [
    "CallModel",
    "Effect",
    "Flow",
    "FlowContext",
    "ModelFailure",
    "ModelReply",
    "Reply",
    "RunTools",
    "Sleep",
    "compact_if_needed",
    "emit_history",
    "measure",
    "outgoing",
    "recover",
    "run_tool_round",
    "summarizer_window",
    "turn_boundary",
    "turn_flow",
]


def turn_flow(ctx: FlowContext, new_messages: Sequence[Message], *, stream: bool = False, max_rounds: int = 50) -> Flow:
    """One user turn: request, recover, escalate, run tools until the model answers in text."""
    st = ctx.state
    st.history = [*st.history, *new_messages]
    emit_history(ctx, "user")
    attempts: list[dict[str, Any]] = []
    parts: list[str] = []
    usage = {"prompt_tokens": 0, "completion_tokens": 0}
    cost = 0.0
    tool_calls = 0
    escalations = 0
    partials: list[Message] = []  # partial answers and continuation prompts, folded away at the end
    level = 0
    retries = 0
    rejected_bodies: set[str] = set()

    for _round in range(max_rounds * 4):
        # Every request is a turn boundary in an agent loop: age tool results, then pre-flight.
        turn_boundary(ctx)
        yield from compact_if_needed(ctx)
        out, sent = outgoing(ctx)
        wire = to_wire_list(out)
        body = _body(wire, ctx.tools)
        digest = hashlib.sha256(body).hexdigest()
        params = dict(ctx.params)
        if st.max_tokens:
            params["max_tokens"] = st.max_tokens
        if digest in rejected_bodies:
            # Never re-send a body the gateway already refused: climb instead.
            outcome: Any = ModelFailure(ProviderError("identical body already rejected"))
            failure = Failure(FailureKind.PAYLOAD_TOO_LARGE, "body identical to a rejected request", sent.bytes)
        else:
            sample = ctx.probe.feed(body)
            shared, share = sample.shared_bytes, sample.share
            outcome = yield CallModel(wire, ctx.tools or None, params, sent.bytes, sent.tokens, stream=stream)
            st.stats.requests += 1
            st.stats.bytes_sent += sent.bytes
            st.stats.tokens_sent += sent.tokens
            failure = None
            if isinstance(outcome, ModelFailure):
                failure = classify_failure(outcome.error, history_bytes=sent.bytes, request_bytes=sent.bytes)
            _record_request(ctx, outcome, failure, sent, level, len(attempts) + 1, shared, share)
        if isinstance(outcome, ModelFailure):
            assert failure is not None
            attempts.append(
                {"outcome": "rejected", "failure_kind": failure.kind.value, "level": level, "bytes": sent.bytes}
            )
            st.stats.count_failure(failure.kind.value)
            if failure.kind == FailureKind.AUTH:
                raise AuthenticationFailed(
                    f"the provider refused the credentials ({failure.reason}); check api_key / the provider's key "
                    "variable. No recovery was attempted.",
                    failure=failure,
                ) from outcome.error
            if failure.kind in (FailureKind.RATE_LIMIT, FailureKind.TRANSIENT):
                if retries >= st.limits.max_retries:
                    raise ProviderError(
                        f"request failed after {retries + 1} tries: {failure.reason}. The provider or network kept "
                        "failing; try again later or raise Limits(max_retries=...).",
                        failure=failure,
                    ) from outcome.error
                retries += 1
                st.stats.retries += 1
                delay = (
                    failure.retry_after
                    if failure.retry_after is not None
                    else st.limits.retry_backoff * 2 ** (retries - 1)
                )
                ctx.notify("retry", f"{failure.reason} - retrying in {delay:.1f} s", "info")
                yield Sleep(delay)
                continue
            if not failure.kind.recoverable:
                raise ProviderError(
                    f"request failed: {failure.reason}. This is not a size problem, so no recovery was attempted.",
                    failure=failure,
                ) from outcome.error
            rejected_bodies.add(digest)
            if level >= st.limits.max_recovery_attempts:
                record_recovery(ctx, "failed", level=level, failure=failure, before=sent)
                raise RecoveryFailedError(
                    f"still failing after {level} recovery levels ({failure.reason}). The history is attached to this "
                    "error (err.history); lower Limits(max_payload=...), shorten the system prompt, or start a new "
                    "session from err.history.",
                    history=list(st.history),
                    attempts=attempts,
                    failure=failure,
                ) from outcome.error
            yield from recover(ctx, failure, sent, level + 1)
            level += 1
            continue

        assert isinstance(outcome, ModelReply)
        usage["prompt_tokens"] += outcome.prompt_tokens
        usage["completion_tokens"] += outcome.completion_tokens
        cost += outcome.cost
        st.stats.prompt_tokens += outcome.prompt_tokens
        st.stats.completion_tokens += outcome.completion_tokens
        st.stats.cost += outcome.cost
        attempts.append({"outcome": "ok", "level": level, "bytes": sent.bytes, "finish_reason": outcome.finish_reason})
        if level:
            record_recovery(ctx, "recovered", level=level, before=sent)
            level = 0
        if outcome.tool_calls:
            yield from run_tool_round(ctx, outcome)
            tool_calls += len(outcome.tool_calls)
            continue
        if outcome.finish_reason == "length" and escalations < st.limits.max_token_escalations:
            current = st.max_tokens or int(ctx.params.get("max_tokens") or 4096)
            new = min(current * 2, _output_cap(ctx))
            if new > current:
                escalations += 1
                st.stats.escalations += 1
                st.max_tokens = new
                parts.append(outcome.content)
                ctx.notify(
                    "escalation", f"reply cut at the token limit - max_tokens raised to {new}, continuing", "info"
                )
                partials += [Message.assistant(outcome.content, turn=st.turn), Message.user(CONTINUATION)]
                st.history = [*st.history, *partials[-2:]]
                continue
        parts.append(outcome.content)
        text = "".join(parts)
        if partials:
            # Fold the partial answers and continuation prompts back into one assistant message. By
            # identity, not position: a recovery in between may have added a notice after them.
            folded = {id(m) for m in partials}
            st.history = [m for m in st.history if id(m) not in folded]
        st.history = [*st.history, Message.assistant(text, reasoning=outcome.reasoning, turn=st.turn)]
        emit_history(ctx, "reply")
        st.max_tokens = None
        ctx.meter.retain([*st.history, *out])  # bounded memory: drop sizes of replaced messages
        return Reply(
            text, outcome.finish_reason, usage | {"total_tokens": sum(usage.values())}, cost, attempts, tool_calls
        )
    raise ProviderError(
        f"the model kept calling tools for {max_rounds} rounds without answering; raise max_rounds or check the tools"
    )


def _output_cap(ctx: FlowContext) -> int:
    from contextkit import backend

    info = backend.model_info(ctx.state.model)
    return int(info.get("max_output_tokens") or 128_000)


def _record_request(
    ctx: FlowContext,
    outcome: Any,
    failure: Failure | None,
    sent: Measure,
    level: int,
    attempt: int,
    shared: int,
    share: float | None,
) -> None:
    st = ctx.state
    ok = isinstance(outcome, ModelReply)
    ctx.events.append(
        RequestEvent(
            session_id=st.session_id,
            turn=st.turn,
            attempt=attempt,
            level=level,
            model=st.model,
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
            prefix_shared_bytes=shared,
            prefix_share=share,
        )
    )


def run_tool_round(ctx: FlowContext, reply: ModelReply) -> Flow:
    """Append the assistant's calls, run them (recall in-process), append the results."""
    st = ctx.state
    st.stats.tool_calls += len(reply.tool_calls)
    st.history = [
        *st.history,
        Message.assistant(reply.content, reply.tool_calls, reasoning=reply.reasoning, turn=st.turn),
    ]
    recall_calls = [c for c in reply.tool_calls if c.name == "recall" and hasattr(ctx.archive, "recall_message")]
    other = tuple(c for c in reply.tool_calls if c not in recall_calls)
    results: dict[str, Message] = {}
    for call in recall_calls:
        results[call.id] = ctx.archive.recall_message(call.id, call.arguments)  # type: ignore[attr-defined]
    if other:
        ran: list[tuple[ToolCall, ToolResult]] = yield RunTools(other)
        for call, result in ran:
            results[call.id] = Message.tool(
                call.id, result.content, name=call.name, path=result.path, lines=result.lines
            )
    st.history = [*st.history, *(results[c.id] for c in reply.tool_calls if c.id in results)]
    emit_history(ctx, "tool")
