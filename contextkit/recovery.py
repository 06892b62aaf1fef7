"""Recovery after a classified failure (S5): learned cap or window, floor diagnostic, the 3-level
ladder, the one-time payload notice. Changes only the session's own state."""

from __future__ import annotations

import re
from typing import Any

from contextkit.classify import Failure, FailureKind
from contextkit.errors import PayloadFloorError
from contextkit.events import CapEvent, RecoveryEvent
from contextkit.messages import Message
from contextkit.policy.budgets import aggressive_level1
from contextkit.policy.truncate import emergency_truncate
from contextkit.preflight import Flow, FlowContext, base_bytes, compact_if_needed, emit_history, measure
from contextkit.sizing import MB, Measure, format_size
from contextkit.state import PAYLOAD_NOTICE

ASSUMED_CAP = 4 * MB
_WINDOW_RE = (
    re.compile(r"maximum context length is (\d+)"),
    re.compile(r"> ?(\d+) maximum"),
    re.compile(r"maximum number of tokens allowed \((\d+)\)"),
    re.compile(r"context window of (\d+)"),
    re.compile(r"maximum prompt length is (\d+)"),
)


def record_recovery(
    ctx: FlowContext,
    outcome: str,
    *,
    level: int = 0,
    failure: Failure | None = None,
    before: Measure | None = None,
    after: Measure | None = None,
    keys: tuple[str, ...] = (),
) -> None:
    """Append one ``RecoveryEvent`` (S5.7): kind, level, sizes before/after, outcome."""
    st = ctx.state
    ctx.events.append(
        RecoveryEvent(
            session_id=st.session_id,
            turn=st.turn,
            failure_kind=failure.kind.value if failure else "",
            reason=failure.reason if failure else "",
            level=level,
            attempt=level,
            outcome=outcome,
            bytes_before=before.bytes if before else 0,
            tokens_before=before.tokens if before else 0,
            messages_before=before.messages if before else 0,
            bytes_after=after.bytes if after else 0,
            tokens_after=after.tokens if after else 0,
            messages_after=after.messages if after else 0,
            archived_keys=keys,
        )
    )


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
        record_recovery(ctx, "floor", failure=failure, before=sent)
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
    record_recovery(ctx, "retrying", level=level, failure=failure, before=before, after=after, keys=keys)
