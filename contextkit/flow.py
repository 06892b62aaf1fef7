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
import re
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextkit.classify import Failure, FailureKind, classify_failure
from contextkit.errors import AuthenticationFailed, PayloadFloorError, ProviderError, RecoveryFailedError
from contextkit.events import CapEvent, EventLog, HistoryEvent, RecoveryEvent, RequestEvent
from contextkit.markers import ArchiveSink, marker
from contextkit.messages import Message, ToolCall, to_wire_list
from contextkit.policy.budgets import aggressive_level1, enforce_tool_result_budgets
from contextkit.policy.microcompact import MicrocompactConfig, microcompact
from contextkit.policy.pairing import repair_tool_pairing
from contextkit.policy.trim import dedup_repeated_reads
from contextkit.policy.truncate import emergency_truncate
from contextkit.prefix import PrefixProbe
from contextkit.sizing import MB, Measure, RequestMeter, dumps, format_size, request_bytes
from contextkit.state import CONTINUATION, PAYLOAD_NOTICE, SessionState
from contextkit.tools import ToolResult

NO_CAP_WARNING_BYTES = int(2.5 * MB)
ASSUMED_CAP = 4 * MB
_WINDOW_RE = (
    re.compile(r"maximum context length is (\d+)"),
    re.compile(r"> ?(\d+) maximum"),
    re.compile(r"maximum number of tokens allowed \((\d+)\)"),
    re.compile(r"context window of (\d+)"),
    re.compile(r"maximum prompt length is (\d+)"),
)


# effects ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallModel:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    params: dict[str, Any]
    bytes: int
    tokens: int
    stream: bool = False
    purpose: str = "turn"


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


@dataclass(frozen=True)
class ModelFailure:
    error: BaseException
    partial: str = ""
    latency_s: float = 0.0


@dataclass(frozen=True)
class RunTools:
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass
class Reply:
    """The answer to one ``send``: text, why it stopped, usage, cost and every attempt made."""

    text: str
    finish_reason: str
    usage: dict[str, int] = field(default_factory=dict)
    cost: float = 0.0
    attempts: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: int = 0

    @property
    def recovered(self) -> bool:
        return any(a.get("outcome") != "ok" for a in self.attempts)

    def __str__(self) -> str:
        return self.text


@dataclass
class FlowContext:
    """Collaborators of the flow. Only the archive writes anywhere, through its protocol."""

    state: SessionState
    archive: ArchiveSink
    meter: RequestMeter
    events: EventLog
    compactor: Any
    tools: list[dict[str, Any]]
    params: Mapping[str, Any]
    notify: Callable[[str, str, str], None]
    summarizer_window: int | None = None
    summarizer_shares_window: bool = False  # the summarizer is the session's own model
    probe: PrefixProbe = field(default_factory=PrefixProbe)


Effect = Any
Flow = Generator[Effect, Any, Any]


# measurement and budgets --------------------------------------------------------------------------


def measure(ctx: FlowContext, history: Sequence[Message]) -> Measure:
    return ctx.meter.measure(history, tools=ctx.tools or None)


def byte_budget(ctx: FlowContext, m: Measure, ratio: float | None = None) -> int:
    """Budget in request bytes: a share of the window (converted with this history's own
    bytes-per-token) and at most 70% of the payload cap (headroom for schemas and framing)."""
    st = ctx.state
    bytes_per_token = m.bytes / m.tokens if m.tokens else 4.0
    budget = int(st.context_window * (ratio or st.limits.budget_ratio) * bytes_per_token)
    if st.cap:
        budget = min(budget, int(0.7 * st.cap))
    return max(budget, 1)


def base_bytes(ctx: FlowContext, *, with_last_user: bool = False) -> int:
    """The non-compactable base: system messages plus tool schemas (and the newest user message,
    which no compaction removes)."""
    history = ctx.state.history
    keep = [m for m in history if m.role == "system"]
    if with_last_user:
        last = next((m for m in reversed(history) if m.role == "user"), None)
        if last is not None:
            keep.append(last)
    return request_bytes(keep, tools=ctx.tools or None, model=ctx.state.model)


def emit_history(ctx: FlowContext, reason: str) -> Measure:
    st = ctx.state
    m = measure(ctx, st.history)
    ctx.events.append(
        HistoryEvent(
            session_id=st.session_id,
            turn=st.turn,
            messages=m.messages,
            bytes=m.bytes,
            tokens=m.tokens,
            cap_bytes=st.cap,
            context_window=st.context_window,
            reason=reason,
        )
    )
    return m


# the steps -----------------------------------------------------------------------------------------


def turn_boundary(ctx: FlowContext) -> None:
    """Microcompact and read dedup on the persistent history (no LLM)."""
    st = ctx.state
    history, mc = microcompact(st.history, archive=ctx.archive, config=MicrocompactConfig.from_limits(st.limits))
    if mc.changed:
        ctx.notify("microcompact", mc.describe(), "info")
    history, dd = dedup_repeated_reads(history, archive=ctx.archive)
    if dd.changed:
        ctx.notify("dedup", dd.describe(), "info")
    if mc.changed or dd.changed:
        st.history = history
        emit_history(ctx, "microcompact")


def compact_if_needed(ctx: FlowContext, *, trigger: str = "auto") -> Flow:
    """Pre-flight (S5.2) and automatic compaction when over budget."""
    st = ctx.state
    m = measure(ctx, st.history)
    ratio = None
    if st.cap and m.bytes > st.limits.preflight_ratio * st.cap:
        pct = int(m.bytes * 100 / st.cap)
        ctx.notify(
            "preflight",
            f"pre-flight: history {format_size(m.bytes)} = {pct}% of the configured cap ({format_size(st.cap)}) - compacting",
            "warning",
        )
        ratio = st.limits.preflight_budget_ratio
    elif not st.cap and m.bytes > NO_CAP_WARNING_BYTES and not st.size_warned:
        st.size_warned = True
        ctx.notify(
            "size_warning",
            f"history {format_size(m.bytes)} - if you are behind a proxy/gateway, set CONTEXTKIT_MAX_PAYLOAD "
            "(e.g. 5MB) or Limits(max_payload=...) to the proxy's body limit",
            "warning",
        )
    budget = byte_budget(ctx, m, ratio)
    if m.bytes <= budget:
        return
    result = yield from ctx.compactor.flow(
        st.history,
        trigger=trigger,
        budget=budget,
        measure=lambda h: measure(ctx, h).bytes,
        summarizer_window=summarizer_window(ctx),
    )
    if result.changed:
        st.history = list(result.history)
        emit_history(ctx, "compaction")


def summarizer_window(ctx: FlowContext) -> int | None:
    """The summarizer's window, shrunk so its request also fits the payload cap: the summary input
    is budgeted at half the window at 4 chars per token, so cap // 4 keeps it near half the cap."""
    window = ctx.summarizer_window
    if ctx.summarizer_shares_window:
        # Same model: a window learned from a provider's overflow applies to the summary request too.
        window = min(window, ctx.state.context_window) if window else ctx.state.context_window
    cap = ctx.state.cap
    if cap:
        return min(window, cap // 4) if window else cap // 4
    return window


def outgoing(ctx: FlowContext) -> tuple[list[Message], Measure]:
    """The request copy: pairing repaired, tool-result budgets applied (persistent history keeps full results)."""
    st = ctx.state
    repaired, report = repair_tool_pairing(st.history, archive=ctx.archive)
    if report.changed:
        st.history = repaired
        archived = " ".join(marker(k) for k in report.archived_keys)
        ctx.notify(
            "pairing", report.describe() + (f"; removed results archived as {archived}" if archived else ""), "info"
        )
    out, _ = enforce_tool_result_budgets(
        st.history, archive=ctx.archive, turn_budget=st.turn_budget, per_result=st.per_result_budget
    )
    return out, measure(ctx, out)


def _body(messages: list[dict[str, Any]], tools: Any) -> bytes:
    """The request body's messages and tools as sent (for the prefix probe and the resend guard)."""
    # Tools first: providers put the tool schemas ahead of the messages in the cached prompt prefix.
    return dumps({"tools": tools, "messages": messages}).encode("utf-8", "surrogatepass")


def learn_limits(ctx: FlowContext, failure: Failure, sent: Measure) -> None:
    """S5.3: payload rejections tighten the session cap; overflows tighten the window."""
    st = ctx.state
    if failure.kind == FailureKind.CONTEXT_OVERFLOW:
        window = _window_from_message(failure.provider_message or failure.reason)
        new = window if window else int(sent.tokens * 0.75)
        if new and new < st.context_window:
            ctx.notify(
                "learned_window", f"provider window is {new} tokens - budgets tightened for this session", "info"
            )
            st.context_window = new
        return
    rejected = failure.rejected_bytes or sent.bytes
    previous = st.cap
    if rejected:
        learned = rejected * 3 // 4
        if previous is None or learned < previous:
            st.cap, st.cap_source = learned, "learned"
            ctx.notify(
                "learned_cap",
                f"gateway rejected a {format_size(rejected)} request - payload cap set to {format_size(learned)} for this session",
                "warning",
            )
            ctx.events.append(
                CapEvent(
                    session_id=st.session_id,
                    turn=st.turn,
                    cap_bytes=learned,
                    previous_bytes=previous,
                    rejected_bytes=rejected,
                    source="learned",
                )
            )
    elif previous is None:
        st.cap, st.cap_source = ASSUMED_CAP, "assumed"
        ctx.notify("assumed_cap", "assuming a 4 MB payload cap - set Limits(max_payload=...) to adjust", "warning")
        ctx.events.append(CapEvent(session_id=st.session_id, turn=st.turn, cap_bytes=ASSUMED_CAP, source="assumed"))


def _window_from_message(text: str) -> int | None:
    for pattern in _WINDOW_RE:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None


def check_floor(ctx: FlowContext, failure: Failure, sent: Measure) -> None:
    """S5.4: fail fast when the non-compactable base alone meets the rejected size."""
    rejected = failure.rejected_bytes or sent.bytes
    base = base_bytes(ctx)
    # Our sizes are exact, so the base alone is always below the rejected body; the request is
    # hopeless when the base plus the newest user message (the smallest request possible) is it.
    minimal = base_bytes(ctx, with_last_user=True)
    if minimal >= rejected:
        ctx.events.append(
            RecoveryEvent(
                session_id=ctx.state.session_id,
                turn=ctx.state.turn,
                failure_kind=failure.kind.value,
                reason=failure.reason,
                outcome="floor",
                bytes_before=sent.bytes,
                tokens_before=sent.tokens,
            )
        )
        if base * 2 >= minimal:
            text = (
                f"The gateway rejected a {format_size(rejected)} request, but the system prompt plus tool schemas alone "
                f"are {format_size(base)} ({format_size(minimal)} with your newest message), so no history compaction "
                "can make the request fit. Shorten the system prompt, register fewer tools (or shorter tool "
                "descriptions), drop skills/personas, or raise the gateway's body-size limit."
            )
        else:  # the user's own new message is what does not fit
            text = (
                f"The gateway rejected a {format_size(rejected)} request, but your newest message with the system "
                f"prompt and tool schemas ({format_size(base)}) is {format_size(minimal)}, so no history compaction can "
                "make the request fit. Send a shorter message (split it, or send an excerpt or a line range instead "
                "of the whole text), or raise the gateway's body-size limit."
            )
        raise PayloadFloorError(
            text,
            base_bytes=minimal,
            rejected_bytes=rejected,
            failure=failure,
        )
    if base >= rejected * 3 // 4:
        ctx.notify(
            "floor_warning",
            f"system prompt and tool schemas alone are {format_size(base)} - close to the gateway's rejection size "
            f"({format_size(rejected)}); consider fewer tools or a shorter system prompt",
            "warning",
        )


def apply_level(ctx: FlowContext, level: int) -> tuple[str, ...]:
    """S5.1: one rung of the ladder on the persistent history; returns the archive keys created."""
    st = ctx.state
    lim = st.limits
    report: Any
    if level == 1:
        st.turn_budget = max(1, st.turn_budget // 2)
        st.per_result_budget = max(1, st.per_result_budget // 2)
        history, report = aggressive_level1(
            st.history,
            archive=ctx.archive,
            turn_budget=st.turn_budget,
            per_result=st.per_result_budget,
            assistant_cap=lim.assistant_cap_level1,
        )
    elif level == 2:
        history, report = emergency_truncate(st.history, keep=lim.emergency_keep_messages, archive=ctx.archive)
    else:
        history, report = emergency_truncate(
            st.history, keep=lim.nuclear_keep_messages, archive=ctx.archive, per_message_cap=lim.nuclear_message_cap
        )
    st.history = list(history)
    return tuple(getattr(report, "archived_keys", ()))


def add_payload_notice(ctx: FlowContext) -> None:
    """S5.5: once per session, just before the latest user message."""
    st = ctx.state
    if st.has_payload_notice():
        return
    notice = Message.user(PAYLOAD_NOTICE)
    last_user = max((i for i, m in enumerate(st.history) if m.role == "user"), default=len(st.history))
    st.history = [*st.history[:last_user], notice, *st.history[last_user:]]
    ctx.notify("payload_notice", "added a one-time notice asking the model to prefer targeted reads", "info")


# the loop ----------------------------------------------------------------------------------------


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
                ctx.events.append(
                    RecoveryEvent(
                        session_id=st.session_id,
                        turn=st.turn,
                        failure_kind=failure.kind.value,
                        reason=failure.reason,
                        level=level,
                        attempt=level,
                        outcome="failed",
                        bytes_before=sent.bytes,
                        tokens_before=sent.tokens,
                    )
                )
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
            ctx.events.append(
                RecoveryEvent(
                    session_id=st.session_id,
                    turn=st.turn,
                    level=level,
                    attempt=level,
                    outcome="recovered",
                    bytes_before=sent.bytes,
                    tokens_before=sent.tokens,
                )
            )
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


def recover(ctx: FlowContext, failure: Failure, sent: Measure, level: int) -> Flow:
    st = ctx.state
    before = measure(ctx, st.history)
    ctx.notify(
        "recovery", f"recoverable failure ({failure.reason}) - compacting and retrying (level {level})", "warning"
    )
    payload = failure.kind != FailureKind.CONTEXT_OVERFLOW
    learn_limits(ctx, failure, sent)
    if payload:
        check_floor(ctx, failure, sent)
    keys = apply_level(ctx, level)
    st.stats.count_recovery(level)
    yield from compact_if_needed(ctx, trigger="recovery")
    if payload:
        add_payload_notice(ctx)
    after = emit_history(ctx, "recovery")
    ctx.events.append(
        RecoveryEvent(
            session_id=st.session_id,
            turn=st.turn,
            failure_kind=failure.kind.value,
            reason=failure.reason,
            level=level,
            attempt=level,
            outcome="retrying",
            bytes_before=before.bytes,
            bytes_after=after.bytes,
            tokens_before=before.tokens,
            tokens_after=after.tokens,
            messages_before=before.messages,
            messages_after=after.messages,
            archived_keys=keys,
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
