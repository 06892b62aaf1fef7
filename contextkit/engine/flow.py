"""The turn and recovery loop, written once, with no IO (sans-IO, like httpx's auth flow).

``turn_flow`` is a generator. It yields *effects* and receives their results:

* ``CallModel``      → the driver sends ``ModelReply`` or ``ModelFailure``
* ``SummaryRequest`` → (from the compactor) the driver sends ``SummaryResponse`` or an exception
* ``RunTools``       → the driver sends a list of ``(ToolCall, ToolResult)``
* ``Sleep``          → the driver sleeps and sends ``None``
* ``StreamNote``     → (streamed turns only) a streaming driver tells its reader; sends ``None``

``Session`` drives it synchronously, asynchronously and while streaming, so recovery behaves the
same in every loop (one-shot, tool loop, streaming, async). Order per request, each step seeing the
result of the one before: turn-boundary rewrites (tool-result budgets on arrival, the oversize
rule, then microcompact and read dedup only under pressure, so the prompt cache survives below
it) → pre-flight / auto compaction → pairing repair → the outgoing copy (the history itself) with
its cache breakpoints → the known-limit check (a request at or above a size the
endpoint rejected, or above the cap, is never sent: the ladder climbs instead) → request → on
failure: classify → judge it on the evidence (``contextkit.limits.evidence``): retry, recover (learn the
limit, floor diagnostic, recovery level, one-time payload notice) or fail; on ``length``: escalate
``max_tokens`` and continue.

Its parts: ``answer`` (a round's text across continuations), ``request`` (one request:
counted, classified, recorded as a ``RequestEvent``), ``tool_round`` (the calls and their results).

A turn is a transaction: when anything escapes it (a failure, ``RecoveryFailedError``,
cancellation), the history is restored to what it was before the turn - the turn leaves a trace
in the events only. Archive writes stay (append-only).
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from contextkit.engine import fallback, provider_edits
from contextkit.engine.answer import Answer
from contextkit.engine.effects import CallModel, ModelFailure, ModelReply, Reply, RunTools, Sleep, StreamNote
from contextkit.engine.recall_round import model_recall_round
from contextkit.engine.request import attempt_record, body_sample, request_body, send_request
from contextkit.engine.tool_round import run_tool_round
from contextkit.errors import AuthenticationFailed, ProviderError, RecoveryFailedError, UsageError
from contextkit.failures.classify import Failure, FailureKind
from contextkit.limits.context import Effect, Flow, FlowContext, emit_history, measure
from contextkit.limits.evidence import Lesson, Verdict, judge
from contextkit.limits.learning import (
    after_clean_turn,
    note_accepted,
    restore_budgets,
    roll_back_limits,
    snapshot_limits,
)
from contextkit.limits.preflight import (
    check_known_floor,
    compact_if_needed,
    known_to_fail,
    outgoing,
    output_room,
    request_for,
    reserve_output,
    summarizer_window,
    turn_boundary,
)
from contextkit.limits.recovery import (
    KNOWN_LIMIT,
    Episode,
    end_episode,
    record_recovery,
    recover,
    weigh_size_reading,
)
from contextkit.limits.state import CONTINUATION, LimitsSnapshot
from contextkit.messages import Message
from contextkit.sizing import Measure

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
    "StreamNote",
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
class _TurnTally:
    """What one turn accumulates across its requests: the ``Reply``'s figures and the loop's state."""

    attempts: list[dict[str, Any]] = field(default_factory=list)
    answer: Answer = field(default_factory=Answer)  # the current round's text across continuations
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    tool_calls: int = 0
    tool_rounds: int = 0
    escalations: int = 0
    size_failures: int = 0
    once_retries: int = 0
    retries: int = 0  # transient retries since the last answered request
    episode: Episode = field(default_factory=Episode)  # the recovery episode in progress (level 0: none)
    probed: set[str] = field(default_factory=set)  # bodies re-sent without streaming after an empty stream
    recalled: set[str] = field(default_factory=set)  # keys the model asked for with @recall in its text
    model_index: int = 0  # 0: the session's model; i: Session(fallbacks=...)[i - 1] (engine/fallback.py)
    hand_back: bool = False  # the host runs its own tools: a reply with tool calls ends the turn


@dataclass(frozen=True)
class _Prepared:
    """One request, ready to go: the outgoing history, its measure and parameters."""

    out: list[Message]
    sent: Measure
    params: dict[str, Any]
    request: Any  # preflight.request_for's outgoing copy (wire messages, cache anchor)
    refusal: str | None  # why the request is known to fail (it is not sent), or None


CONTINUATION_TOKENS = 64  # the continuation prompt and its framing, in the window an escalation must leave room in

# What a step tells the loop: go round again, or the turn's reply.
_AGAIN = None


def turn_flow(
    ctx: FlowContext,
    new_messages: Sequence[Message],
    *,
    stream: bool = False,
    max_rounds: int = 50,
    hand_back_tools: bool = False,
) -> Flow:
    """One user turn: request, recover, escalate, run tools until the model answers in text.

    ``stream=True``: requests stream, and the flow tells the driver what it decides with
    ``StreamNote`` effects. A stream that fails after it delivered text is continued, not
    restarted: the text becomes the first part of the answer and, after whatever recovery the
    failure needs, the model is asked to resume from it (the mechanism ``max_tokens`` escalation
    uses). An empty stream (no content, no tool call, no finish reason) is a failure whose cause is
    read by asking once more without streaming.

    ``hand_back_tools=True`` is for hosts that run their own tools (``contextkit.engine.host``): a
    reply with tool calls ends the turn, the assistant message with its calls in the history and in
    ``Reply.tool_calls_made``; only ``recall`` calls are served here, since the host cannot run them.
    """
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
        raise UsageError(f"max_rounds must be a whole number >= 1 (tool rounds per turn), got {max_rounds!r}")
    st = ctx.state
    before = list(st.history)
    undo = _undo_snapshot(ctx)
    limits = snapshot_limits(ctx)
    st.turns += 1
    this_turn = st.turns
    try:
        st.history = [*before, *new_messages]
        emit_history(ctx, "user")
        reply = yield from _rounds(ctx, before, stream, max_rounds, hand_back_tools)
        if stream:  # inside the transaction: a Ctrl-C from a subscriber of "done" still rolls the turn back
            yield StreamNote("done", reason=getattr(reply, "finish_reason", "") or "")
        return reply
    except BaseException as exc:
        if st.turns == this_turn:  # not a flow abandoned long ago and closed by the garbage collector
            _roll_back(ctx, before, undo, exc, limits)
        raise


def _rounds(ctx: FlowContext, before: list[Message], stream: bool, max_rounds: int, hand_back: bool) -> Flow:
    """The loop of one turn: prepare a request, send it (or climb the ladder without sending what is
    known to fail), then act on the failure or the reply, until a step returns the turn's reply."""
    turn = _TurnTally(hand_back=hand_back)
    while True:
        prepared = yield from _prepare(ctx, stream)
        if prepared.refusal is not None:
            yield from _climb_unsent(ctx, turn, before, prepared)
            continue
        outcome, failure, digest = yield from _send(ctx, turn, prepared, stream)
        if isinstance(outcome, ModelFailure):
            assert failure is not None
            reply = yield from _after_failure(ctx, turn, before, prepared, digest, outcome, failure, stream)
        else:
            assert isinstance(outcome, ModelReply)
            reply = yield from _after_reply(ctx, turn, prepared, outcome, stream, max_rounds)
        if reply is not _AGAIN:
            return reply


def _prepare(ctx: FlowContext, stream: bool) -> Generator[Effect, Any, _Prepared]:
    """Every request is a turn boundary in an agent loop: age tool results, pre-flight, then the
    outgoing copy measured as it will be sent (streamed, with an escalated ``max_tokens``)."""
    st = ctx.state
    turn_boundary(ctx)
    yield from compact_if_needed(ctx)
    out, sent = outgoing(ctx)
    params = dict(ctx.params)
    if st.max_tokens:
        params["max_tokens"] = st.max_tokens
    if stream or st.max_tokens:
        sent = measure(ctx, out, **params, stream=stream)
    asked = params.get("max_tokens")
    refusal = reserve_output(ctx, sent, params)
    if params.get("max_tokens") != asked:
        sent = measure(ctx, out, **params, stream=stream)
    st.asked_output = int(params.get("max_tokens") or 0)
    request = request_for(ctx, out, sent, {**params, "stream": stream} if stream else params)
    return _Prepared(out, request.sent, params, request, known_to_fail(ctx, request.sent) or refusal)


def _climb_unsent(ctx: FlowContext, turn: _TurnTally, before: list[Message], prepared: _Prepared) -> Flow:
    """Never send what is known to fail: climb the ladder without a request."""
    episode, sent, refusal = turn.episode, prepared.sent, prepared.refusal or ""
    check_known_floor(ctx)
    _give_up_if_exhausted(ctx, episode, turn, before, None, sent, refusal)
    ctx.notify("not_sent", f"not sending: {refusal}", "warning")
    record_recovery(ctx, "not_sent", level=episode.level, before=sent, kind=KNOWN_LIMIT, reason=refusal)
    turn.size_failures += 1
    yield from recover(ctx, None, sent, episode.level + 1, episode, refusal=refusal)
    episode.level += 1


def _send(
    ctx: FlowContext, turn: _TurnTally, prepared: _Prepared, stream: bool
) -> Generator[Effect, Any, tuple[Any, Failure | None, str]]:
    """Send the request (counted, classified, recorded); returns the outcome, its failure and the
    digest of the body (the evidence counts failures per body; hashed only when the request failed,
    "" otherwise: a hash reads the whole body). An empty stream hid the provider's answer: the same
    body is asked once more without streaming, to read it."""
    st, sent, request = ctx.state, prepared.sent, prepared.request
    sample = body_sample(ctx, prepared.out)
    st.stats.cache_breaks += sample.cache_break
    purpose = "continuation" if turn.answer.parts else "turn"
    ctx.cache_anchor = request.anchor
    model, overrides = fallback.active(ctx, turn.model_index)
    call = CallModel(
        request.messages, ctx.tools or None, prepared.params, sent.bytes, sent.tokens, stream=stream, purpose=purpose,
        model=model, overrides=overrides,
    )  # fmt: skip
    level = turn.episode.level
    outcome, failure = yield from send_request(ctx, call, sent, level, len(turn.attempts) + 1, sample)
    if failure is None:
        return outcome, failure, ""
    digest = hashlib.sha256(request_body(ctx, prepared.out)).hexdigest()
    unread = failure.kind != FailureKind.CONTEXT_OVERFLOW and digest not in turn.probed
    if isinstance(outcome, ModelFailure) and outcome.empty and unread:
        turn.probed.add(digest)
        turn.attempts.append(attempt_record(failure, level, sent))
        st.stats.count_failure(failure.kind.value)
        ctx.notify(
            "empty_stream",
            "the provider ended the stream without any content - asking once more without streaming to "
            "read its answer or its error",
            "warning",
        )
        call = replace(call, stream=False, purpose="probe")
        outcome, failure = yield from send_request(ctx, call, sent, level, len(turn.attempts) + 1, sample)
    return outcome, failure, digest


def _after_failure(
    ctx: FlowContext,
    turn: _TurnTally,
    before: list[Message],
    prepared: _Prepared,
    digest: str,
    outcome: ModelFailure,
    failure: Failure,
    stream: bool,
) -> Generator[Effect, Any, Reply | None]:
    """Judge the failure on the session's evidence: fail, retry, or recover and go round again."""
    st, sent, answer, episode = ctx.state, prepared.sent, turn.answer, turn.episode
    turn.attempts.append(attempt_record(failure, episode.level, sent))
    st.stats.count_failure(failure.kind.value)
    model = fallback.active(ctx, turn.model_index)[0]
    if outcome.partial:  # the model had started answering: the body was accepted
        note_accepted(ctx, sent.bytes, sent.tokens, model)
    if failure.kind == FailureKind.AUTH:
        raise AuthenticationFailed(
            f"the provider refused the credentials ({failure.reason}); check api_key / the provider's key "
            "variable. No recovery was attempted.",
            failure=failure,
        ) from outcome.error
    ev = ctx.evidence(model)
    shrunk_from = episode.dropped if failure.connection_drop else None
    if failure.kind == FailureKind.WAF_REJECTION:
        shrunk_from = episode.waf_refused
    verdict = judge(ev, failure, sent_bytes=sent.bytes, sent_tokens=sent.tokens, seen=ev.failed(digest),
                    shrunk_from=shrunk_from)  # fmt: skip
    ev.failed_at(sent.bytes)
    verdict = weigh_size_reading(ctx, verdict, sent, episode)
    if verdict.lesson == Lesson.FAIL and answer.interrupted and not answer.voids:
        # The provider refuses to continue the interrupted answer: void it and ask again.
        yield from answer.void(ctx, failure, stream)
        return _AGAIN
    if verdict.lesson == Lesson.FAIL and answer.parts and not answer.interrupted:
        # The provider refuses to continue an answer cut at max_tokens: keep it as it is (what a
        # turn without escalation returns) rather than fail the turn and lose it.
        ctx.notify(
            "continuation_refused",
            f"the provider refused to continue the answer cut at max_tokens ({failure.reason}); "
            "the reply is the answer so far (finish_reason=length)",
            "warning",
        )
        return _finish(ctx, turn, ModelReply("", finish_reason="length"), prepared.out)
    if failure.kind == FailureKind.CONTEXT_OVERFLOW and answer.parts and not answer.interrupted and st.max_tokens:
        # The escalated continuation does not fit the window (the provider counts the output): end
        # the turn with the answer so far, as a turn without escalation would, not lose its parts.
        ctx.notify(
            "escalation_overflow",
            f"the continuation with max_tokens={st.max_tokens} does not fit the window ({failure.reason}); "
            "the reply is the answer so far (finish_reason=length)",
            "warning",
        )
        return _finish(ctx, turn, ModelReply("", finish_reason="length"), prepared.out)
    if verdict.lesson == Lesson.RETRY:
        yield from _retry(ctx, turn, verdict, outcome, failure, stream)
        return _AGAIN
    if verdict.lesson == Lesson.FAIL and fallback.model_gone(verdict.failure):
        to = fallback.next_index(ctx, turn.model_index)
        if to is not None and not outcome.partial:
            _move(ctx, turn, to, verdict.failure.reason)
            return _AGAIN
    if verdict.about_window and ctx.fallback_on_overflow and not outcome.partial:
        to = fallback.next_index(ctx, turn.model_index, tokens=sent.tokens)
        if to is not None:
            _move(ctx, turn, to, f"{verdict.failure.reason}; a fallback with a larger window takes the turn")
            return _AGAIN
    if verdict.lesson == Lesson.FAIL:
        raise ProviderError(
            f"request failed: {verdict.failure.reason}. This is not a size problem, so the turn taught no limit: "
            "the history and the limits are as they were before this turn.",
            failure=verdict.failure,
        ) from outcome.error
    turn.size_failures += 1
    _give_up_if_exhausted(ctx, episode, turn, before, verdict.failure, sent, "", outcome.error)
    yield from recover(ctx, verdict, sent, episode.level + 1, episode)
    episode.level += 1
    yield from answer.resume(ctx, outcome.partial, verdict.why, episode.level, stream)
    return _AGAIN


def _retry(
    ctx: FlowContext, turn: _TurnTally, verdict: Verdict, outcome: ModelFailure, failure: Failure, stream: bool
) -> Flow:
    """The same request again after a back-off (the provider's ``Retry-After`` when it gave one);
    a request's one retry before its failure counts as evidence is bounded per turn all the same."""
    st = ctx.state
    once = verdict.once and turn.once_retries <= 2 * st.limits.max_recovery_attempts
    turn.once_retries += once
    if not once and turn.retries >= st.limits.max_retries:
        to = fallback.next_index(ctx, turn.model_index)
        if to is not None and not outcome.partial:
            _move(ctx, turn, to, f"{verdict.why}, still failing after {turn.retries + 1} tries")
            return
        raise ProviderError(
            f"request failed after {turn.retries + 1} tries: {verdict.why}. The provider or network kept "
            "failing; try again later or raise Limits(max_retries=...). If a proxy in front of the "
            "provider drops large bodies, set Limits(max_payload=...) to its limit.",
            failure=verdict.failure,
        ) from outcome.error
    delay = retry_delay(ctx, failure, turn.retries + (0 if once else 1))
    if delay > st.limits.max_retry_wait:
        to = fallback.next_index(ctx, turn.model_index)
        if to is not None and not outcome.partial:
            _move(ctx, turn, to, f"{verdict.why}; the provider asks to wait {delay:,.0f} s")
            return
        raise ProviderError(
            f"request failed: {verdict.why}. The provider asks to wait {delay:,.0f} s before the next try, longer "
            f"than Limits(max_retry_wait={st.limits.max_retry_wait:g}); try again later, or raise max_retry_wait "
            "to wait that long. The history and the limits are as they were before this turn.",
            failure=verdict.failure,
        ) from outcome.error
    turn.retries += 0 if once else 1
    st.stats.retries += 1
    again = "continuing the answer from where it stopped" if outcome.partial else "retrying"
    ctx.notify("retry", f"{verdict.why} - {again} in {delay:.1f} s", "info")
    yield Sleep(delay)
    yield from turn.answer.resume(ctx, outcome.partial, verdict.why, turn.episode.level, stream)


def _move(ctx: FlowContext, turn: _TurnTally, to: int, why: str) -> None:
    """The turn's next request goes to the chain's entry ``to``, with a fresh retry count."""
    fallback.move(ctx, turn.model_index, to, why)
    turn.model_index, turn.retries = to, 0


def retry_delay(ctx: FlowContext, failure: Failure, retries: int) -> float:
    """Seconds to wait before the next try: the provider's ``Retry-After`` (seconds, or an HTTP-date
    read against the session's clock) when it gave one, else the back-off."""
    if failure.retry_after is not None:
        return max(0.0, failure.retry_after)
    if failure.retry_at is not None:
        return max(0.0, failure.retry_at - ctx.clock())
    return backoff(ctx, retries)


def backoff(ctx: FlowContext, retries: int) -> float:
    """Exponential back-off with jitter: ``retry_backoff * 2**(n-1)``, scaled into its upper half by
    the session's random source, so clients that failed together do not retry together."""
    base = ctx.state.limits.retry_backoff * 2 ** max(retries - 1, 0)
    return base * (0.5 + 0.5 * ctx.jitter())


def _after_reply(
    ctx: FlowContext, turn: _TurnTally, prepared: _Prepared, outcome: ModelReply, stream: bool, max_rounds: int
) -> Generator[Effect, Any, Reply | None]:
    """The request went through: count it, end a recovery episode, then run the model's tool calls,
    an ``@recall`` round, or a ``max_tokens`` escalation - or finish the turn."""
    st, sent, answer = ctx.state, prepared.sent, turn.answer
    note_accepted(ctx, sent.bytes, sent.tokens, fallback.active(ctx, turn.model_index)[0])
    st.keep_newest_whole = False  # a size reading under test is confirmed: the smaller request went through
    if outcome.prompt_tokens and not outcome.context_edits:
        # the provider's count of this request calibrates ours (every window decision); a request the
        # provider edited server-side counts fewer tokens than were sent, so it teaches nothing
        ctx.meter.calibrate(sent.tokens, outcome.prompt_tokens)
    turn.retries = 0
    _count_usage(st, turn, outcome)
    provider_edits.count_rebuild(ctx, outcome.cache_write_tokens)
    if outcome.context_edits:  # the provider edited its copy of the prompt: the local history follows
        provider_edits.mirror(ctx, outcome.context_edits)
    turn.attempts.append(
        {"outcome": "ok", "level": turn.episode.level, "bytes": sent.bytes, "finish_reason": outcome.finish_reason}
    )
    if turn.episode.level:
        record_recovery(ctx, "recovered", level=turn.episode.level, before=sent)
        end_episode(ctx, turn.episode, "the request of the recovery episode went through")
        turn.episode = Episode()
    if outcome.tool_calls and turn.hand_back and any(c.name != "recall" for c in outcome.tool_calls):
        return _hand_back(ctx, turn, outcome, prepared.out)
    if outcome.tool_calls:
        if turn.tool_rounds >= max_rounds:
            raise ProviderError(
                f"the model kept calling tools after {max_rounds} tool rounds without answering; raise "
                "send(..., max_rounds=...) or check the tools"
            )
        turn.tool_rounds += 1
        shown, kept = answer.finish(ctx, outcome.content)
        if stream:
            yield StreamNote("tool_round", shown, show="\n" if shown and not shown.endswith("\n") else "")
        yield from run_tool_round(ctx, replace(outcome, content=kept))
        turn.tool_calls += len(outcome.tool_calls)
        return _AGAIN
    if (
        not answer.parts
        and outcome.finish_reason != "length"
        and turn.tool_rounds < max_rounds
        and model_recall_round(ctx, outcome.content, turn.recalled)
    ):
        # the model wrote @recall <<ccr:KEY>>: a recall round (a round like a tool round), then ask again
        turn.tool_rounds += 1
        shown, _ = answer.finish(ctx, outcome.content)
        if stream:
            yield StreamNote("tool_round", shown, reason="@recall", show="" if shown.endswith("\n") else "\n")
        return _AGAIN
    if outcome.finish_reason == "length" and turn.escalations < st.limits.max_token_escalations:
        escalated = yield from _escalate(ctx, turn, outcome, stream, sent.tokens)
        if escalated:
            return _AGAIN
    return _finish(ctx, turn, outcome, prepared.out)


def _count_usage(st: Any, turn: _TurnTally, outcome: ModelReply) -> None:
    turn.prompt_tokens += outcome.prompt_tokens
    turn.completion_tokens += outcome.completion_tokens
    turn.cost += outcome.cost
    st.stats.prompt_tokens += outcome.prompt_tokens
    st.stats.completion_tokens += outcome.completion_tokens
    st.stats.cost += outcome.cost
    st.stats.cached_prompt_tokens += outcome.cached_prompt_tokens
    st.stats.cache_write_tokens += outcome.cache_write_tokens


def _escalate(
    ctx: FlowContext, turn: _TurnTally, outcome: ModelReply, stream: bool, prompt_tokens: int = 0
) -> Generator[Effect, Any, bool]:
    """The reply was cut at ``max_tokens``: double it (up to the model's output cap, and never above
    what the window leaves once the answer so far is part of the prompt) and ask the model to
    continue; False when it cannot grow (the turn ends with the answer so far)."""
    st = ctx.state
    current = st.max_tokens or int(ctx.params.get("max_tokens") or 4096)
    answered = outcome.completion_tokens or len(outcome.content) // 4
    left = output_room(ctx, prompt_tokens + answered + CONTINUATION_TOKENS)
    new = min(current * 2, _output_cap(ctx), left)
    if new <= current:
        return False
    turn.escalations += 1
    st.stats.escalations += 1
    st.max_tokens = new
    ctx.notify("escalation", f"reply cut at the token limit - max_tokens raised to {new}, continuing", "info")
    turn.answer.keep(ctx, outcome.content, CONTINUATION)
    if stream:
        yield StreamNote("continuation", reason=f"finish_reason=length - max_tokens raised to {new}")
    return True


def _finish(ctx: FlowContext, turn: _TurnTally, outcome: ModelReply, out: list[Message]) -> Reply:
    st = ctx.state
    text, kept = turn.answer.finish(ctx, outcome.content)
    st.history = [*st.history, Message.assistant(kept, reasoning=outcome.reasoning, turn=st.turn)]
    emit_history(ctx, "reply")
    return _close_turn(ctx, turn, text, outcome.finish_reason, out)


def _close_turn(ctx: FlowContext, turn: _TurnTally, text: str, finish_reason: str, out: list[Message]) -> Reply:
    st = ctx.state
    st.max_tokens = None
    if turn.size_failures:
        st.clean_turns = 0
    else:
        after_clean_turn(ctx)
    ctx.meter.retain([*st.history, *out])  # bounded memory: drop sizes of replaced messages
    usage = {"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens}
    return Reply(
        text,
        finish_reason,
        usage | {"total_tokens": sum(usage.values())},
        turn.cost,
        turn.attempts,
        turn.tool_calls,
        fallback.name(ctx, turn.model_index),
    )


def _hand_back(ctx: FlowContext, turn: _TurnTally, outcome: ModelReply, out: list[Message]) -> Reply:
    """The host runs its own tools: the assistant message with its calls ends the turn. A ``recall``
    call mixed with the host's calls is dropped (the host cannot run it); the model can ask again."""
    calls = tuple(c for c in outcome.tool_calls if c.name != "recall")
    if len(calls) < len(outcome.tool_calls):
        ctx.notify("recall_dropped", "a recall call came with the host's own tool calls; only the host's were kept",
                   "info")  # fmt: skip
    st = ctx.state
    text, kept = turn.answer.finish(ctx, outcome.content)
    st.stats.tool_calls += len(calls)
    st.history = [*st.history, Message.assistant(kept, calls, reasoning=outcome.reasoning, turn=st.turn)]
    emit_history(ctx, "reply")
    reply = _close_turn(ctx, turn, text, "tool_calls", out)
    reply.tool_calls_made = calls
    return reply


def _give_up_if_exhausted(
    ctx: FlowContext,
    episode: Episode,
    turn: _TurnTally,
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
               exc: BaseException, limits: LimitsSnapshot) -> None:  # fmt: skip
    """The turn failed: nothing of it stays in the history, and nothing it inferred stays in the
    limits and evidence (the events keep the record; self-standing facts such as a 413 stay)."""
    st = ctx.state
    st.history = before
    st.max_tokens = None
    st.keep_newest_whole = False
    roll_back_limits(ctx, limits)
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
