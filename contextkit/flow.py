"""The turn and recovery loop, written once, with no IO (sans-IO, like httpx's auth flow).

``turn_flow`` is a generator. It yields *effects* and receives their results:

* ``CallModel``      → the driver sends ``ModelReply`` or ``ModelFailure``
* ``SummaryRequest`` → (from the compactor) the driver sends ``SummaryResponse`` or an exception
* ``RunTools``       → the driver sends a list of ``(ToolCall, ToolResult)``
* ``Sleep``          → the driver sleeps and sends ``None``

``Session`` drives it synchronously, asynchronously and while streaming, so recovery behaves the
same in every loop (S6.5). Order per request (research §9.10): turn-boundary rewrites
(microcompact, read dedup) → the oversize rule, pre-flight / auto compaction → pairing repair →
outgoing copy with tool-result budgets → the known-limit check (a request at or above a size the
endpoint rejected, or above the cap, is never sent: the ladder climbs instead) → request → on
failure: classify → judge it on the evidence (``contextkit.evidence``): retry, recover (learn the
limit, floor diagnostic, ladder level, one-time payload notice) or fail; on ``length``: escalate
``max_tokens`` and continue.

A turn is a transaction: when anything escapes it (a failure, ``RecoveryFailedError``,
cancellation), the history is restored to what it was before the turn - the turn leaves a trace
in the events only. Archive writes stay (append-only).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contextkit.classify import Failure, FailureKind, classify_failure
from contextkit.effects import CallModel, ModelFailure, ModelReply, Reply, RunTools, Sleep
from contextkit.errors import AuthenticationFailed, ProviderError, RecoveryFailedError, UsageError
from contextkit.events import RequestEvent
from contextkit.evidence import Lesson, judge
from contextkit.learning import after_clean_turn, restore_budgets
from contextkit.messages import Message, ToolCall, to_wire_list
from contextkit.preflight import (
    Effect,
    Flow,
    FlowContext,
    _body,
    check_known_floor,
    compact_if_needed,
    emit_history,
    known_to_fail,
    measure,
    outgoing,
    summarizer_window,
    turn_boundary,
)
from contextkit.recovery import KNOWN_LIMIT, Episode, record_recovery, recover
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


@dataclass
class _Turn:
    """What one turn accumulates for its ``Reply``."""

    attempts: list[dict[str, Any]] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    partials: list[Message] = field(default_factory=list)  # cut answers + continuation prompts, folded at the end
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    tool_calls: int = 0
    tool_rounds: int = 0
    escalations: int = 0
    size_failures: int = 0
    once_retries: int = 0


def turn_flow(ctx: FlowContext, new_messages: Sequence[Message], *, stream: bool = False, max_rounds: int = 50) -> Flow:
    """One user turn: request, recover, escalate, run tools until the model answers in text."""
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
        raise UsageError(f"max_rounds must be a whole number >= 1 (tool rounds per turn), got {max_rounds!r}")
    st = ctx.state
    before = list(st.history)
    undo = _undo_snapshot(ctx)
    st.turns += 1
    this_turn = st.turns
    try:
        st.history = [*before, *new_messages]
        emit_history(ctx, "user")
        return (yield from _rounds(ctx, before, stream, max_rounds))
    except BaseException as exc:
        if st.turns == this_turn:  # not a flow abandoned long ago and closed by the garbage collector
            _roll_back(ctx, before, undo, exc)
        raise


def _rounds(ctx: FlowContext, before: list[Message], stream: bool, max_rounds: int) -> Flow:
    st = ctx.state
    turn = _Turn()
    episode = Episode()
    retries = 0
    while True:
        # Every request is a turn boundary in an agent loop: age tool results, then pre-flight.
        turn_boundary(ctx)
        yield from compact_if_needed(ctx)
        out, sent = outgoing(ctx)
        refusal = known_to_fail(ctx, sent)
        if refusal is not None:
            # Never send what is known to fail: climb the ladder without a request.
            check_known_floor(ctx)
            _give_up_if_exhausted(ctx, episode, turn, before, None, sent, refusal)
            ctx.notify("not_sent", f"not sending: {refusal}", "warning")
            record_recovery(ctx, "not_sent", level=episode.level, before=sent, kind=KNOWN_LIMIT, reason=refusal)
            turn.size_failures += 1
            yield from recover(ctx, None, sent, episode.level + 1, episode, refusal=refusal)
            episode.level += 1
            continue
        wire = to_wire_list(out)
        body = _body(wire, ctx.tools)
        digest = hashlib.sha256(body).hexdigest()
        params = dict(ctx.params)
        if st.max_tokens:
            params["max_tokens"] = st.max_tokens
        sample = ctx.probe.feed(body)
        outcome = yield CallModel(wire, ctx.tools or None, params, sent.bytes, sent.tokens, stream=stream)
        st.stats.requests += 1
        st.stats.bytes_sent += sent.bytes
        st.stats.tokens_sent += sent.tokens
        failure = (
            classify_failure(outcome.error, history_bytes=sent.bytes, request_bytes=sent.bytes)
            if isinstance(outcome, ModelFailure)
            else None
        )
        _record_request(ctx, outcome, failure, sent, episode.level, len(turn.attempts) + 1, sample)

        if isinstance(outcome, ModelFailure):
            assert failure is not None
            turn.attempts.append(
                {"outcome": "rejected", "failure_kind": failure.kind.value, "level": episode.level, "bytes": sent.bytes}
            )
            st.stats.count_failure(failure.kind.value)
            if failure.kind == FailureKind.AUTH:
                raise AuthenticationFailed(
                    f"the provider refused the credentials ({failure.reason}); check api_key / the provider's key "
                    "variable. No recovery was attempted.",
                    failure=failure,
                ) from outcome.error
            ev = ctx.evidence()
            verdict = judge(ev, failure, sent_bytes=sent.bytes, sent_tokens=sent.tokens, seen=ev.failed(digest))
            if verdict.lesson == Lesson.RETRY:
                # a request's one retry before its failure counts as evidence; bounded per turn all the same
                once = verdict.once and turn.once_retries <= 2 * st.limits.max_recovery_attempts
                turn.once_retries += once
                if not once and retries >= st.limits.max_retries:
                    raise ProviderError(
                        f"request failed after {retries + 1} tries: {verdict.why}. The provider or network kept "
                        "failing; try again later or raise Limits(max_retries=...). If a proxy in front of the "
                        "provider drops large bodies, set Limits(max_payload=...) to its limit.",
                        failure=verdict.failure,
                    ) from outcome.error
                retries += 0 if once else 1
                st.stats.retries += 1
                delay = (
                    failure.retry_after
                    if failure.retry_after is not None
                    else st.limits.retry_backoff * 2 ** max(retries - 1, 0)
                )
                ctx.notify("retry", f"{verdict.why} - retrying in {delay:.1f} s", "info")
                yield Sleep(delay)
                continue
            if verdict.lesson == Lesson.FAIL:
                raise ProviderError(
                    f"request failed: {failure.reason}. This is not a size problem, so nothing was compacted and no "
                    "limit was learned; the history is as it was before this turn.",
                    failure=failure,
                ) from outcome.error
            turn.size_failures += 1
            _give_up_if_exhausted(ctx, episode, turn, before, verdict.failure, sent, "", outcome.error)
            yield from recover(ctx, verdict, sent, episode.level + 1, episode)
            episode.level += 1
            continue

        assert isinstance(outcome, ModelReply)
        ctx.evidence().accepted(sent.bytes, sent.tokens)
        retries = 0
        turn.prompt_tokens += outcome.prompt_tokens
        turn.completion_tokens += outcome.completion_tokens
        turn.cost += outcome.cost
        st.stats.prompt_tokens += outcome.prompt_tokens
        st.stats.completion_tokens += outcome.completion_tokens
        st.stats.cost += outcome.cost
        turn.attempts.append(
            {"outcome": "ok", "level": episode.level, "bytes": sent.bytes, "finish_reason": outcome.finish_reason}
        )
        if episode.level:
            record_recovery(ctx, "recovered", level=episode.level, before=sent)
            restore_budgets(ctx, "the request of the recovery episode went through")
            episode = Episode()
        if outcome.tool_calls:
            if turn.tool_rounds >= max_rounds:
                raise ProviderError(
                    f"the model kept calling tools after {max_rounds} tool rounds without answering; raise "
                    "send(..., max_rounds=...) or check the tools"
                )
            turn.tool_rounds += 1
            yield from run_tool_round(ctx, outcome)
            turn.tool_calls += len(outcome.tool_calls)
            continue
        if outcome.finish_reason == "length" and turn.escalations < st.limits.max_token_escalations:
            current = st.max_tokens or int(ctx.params.get("max_tokens") or 4096)
            new = min(current * 2, _output_cap(ctx))
            if new > current:
                turn.escalations += 1
                st.stats.escalations += 1
                st.max_tokens = new
                turn.parts.append(outcome.content)
                ctx.notify(
                    "escalation", f"reply cut at the token limit - max_tokens raised to {new}, continuing", "info"
                )
                turn.partials += [
                    Message.assistant(outcome.content, turn=st.turn),
                    Message.user(CONTINUATION, synthetic=True),
                ]
                st.history = [*st.history, *turn.partials[-2:]]
                continue
        return _finish(ctx, turn, outcome, out)


def _finish(ctx: FlowContext, turn: _Turn, outcome: ModelReply, out: list[Message]) -> Reply:
    st = ctx.state
    turn.parts.append(outcome.content)
    text = "".join(turn.parts)
    if turn.partials:
        # Fold the partial answers and continuation prompts back into one assistant message. By
        # identity, not position: a recovery in between may have added a notice after them.
        folded = {id(m) for m in turn.partials}
        st.history = [m for m in st.history if id(m) not in folded]
    st.history = [*st.history, Message.assistant(text, reasoning=outcome.reasoning, turn=st.turn)]
    emit_history(ctx, "reply")
    st.max_tokens = None
    if turn.size_failures:
        st.clean_turns = 0
    else:
        after_clean_turn(ctx)
    ctx.meter.retain([*st.history, *out])  # bounded memory: drop sizes of replaced messages
    usage = {"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens}
    return Reply(
        text,
        outcome.finish_reason,
        usage | {"total_tokens": sum(usage.values())},
        turn.cost,
        turn.attempts,
        turn.tool_calls,
    )


def _give_up_if_exhausted(
    ctx: FlowContext,
    episode: Episode,
    turn: _Turn,
    before: list[Message],
    failure: Failure | None,
    sent: Measure,
    refusal: str,
    error: BaseException | None = None,
) -> None:
    if episode.level < ctx.state.limits.max_recovery_attempts:
        return
    record_recovery(ctx, "failed", level=episode.level, failure=failure, before=sent, kind=KNOWN_LIMIT, reason=refusal)
    why = failure.reason if failure else refusal
    raise RecoveryFailedError(
        f"still failing after {episode.level} recovery levels ({why}). The history is restored to what it was "
        "before this turn and attached to this error (err.history); lower Limits(max_payload=...), shorten the "
        "system prompt or the message, or start a new session from err.history.",
        history=before,
        attempts=turn.attempts,
        failure=failure,
    ) from error


def _undo_snapshot(ctx: FlowContext) -> tuple[list[Any], list[Any]] | None:
    compactor = ctx.compactor
    stack = getattr(compactor, "undo_stack", None)
    if stack is None:
        return None
    return list(stack), list(getattr(compactor, "undo_results", []))


def _roll_back(ctx: FlowContext, before: list[Message], undo: tuple[list[Any], list[Any]] | None,
               exc: BaseException) -> None:  # fmt: skip
    """The turn failed: nothing of it stays in the history (the events keep the record)."""
    st = ctx.state
    st.history = before
    st.max_tokens = None
    if undo is not None:  # compactions made inside the failed turn cannot be rewound to
        ctx.compactor.undo_stack[:] = undo[0]
        if hasattr(ctx.compactor, "undo_results"):
            ctx.compactor.undo_results[:] = undo[1]
    restore_budgets(ctx, "the recovery episode ended with the turn")
    cancelled = isinstance(exc, KeyboardInterrupt | GeneratorExit) or type(exc).__name__ == "CancelledError"
    what = "cancelled" if cancelled else "failed"
    ctx.notify(
        "turn_" + what,
        f"turn {st.turn} {what} ({type(exc).__name__}) - the history is restored to its state before the turn",
        "warning" if what == "failed" else "info",
    )
    emit_history(ctx, "rollback")


def _output_cap(ctx: FlowContext) -> int:
    from contextkit import backend

    info = backend.model_info(ctx.state.model)
    return int(info.get("max_output_tokens") or 128_000)


def _record_request(
    ctx: FlowContext, outcome: Any, failure: Failure | None, sent: Measure, level: int, attempt: int, sample: Any
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
            prefix_shared_bytes=sample.shared_bytes,
            prefix_share=sample.share,
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
