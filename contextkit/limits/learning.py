"""Changes of the limits a session works under, each an event carrying its evidence.

* payload cap - learned from a size rejection (3/4 of the refused size, weighed against what the
  endpoint accepted before), probed upwards after clean turns, reset by ``Session.reset_limits``;
* context window - learned from an overflow (the provider's number, or 3/4 of the measured tokens
  once per episode), announced once when the model is unknown;
* tool-result budgets - halved from the configured values for one recovery episode (so halving
  never compounds) and restored when the episode's request goes through.

Every change appends a ``LimitEvent`` (a cap change also a ``CapEvent``, which the widgets read) and
a notice. Only the session's own ``SessionState`` changes; process defaults are never touched.
"""

from __future__ import annotations

from contextkit.events import CapEvent, LimitEvent
from contextkit.limits.context import FlowContext, emit_history
from contextkit.limits.evidence import probe_cap
from contextkit.sizing import format_size


def _limit_event(ctx: FlowContext, limit: str, value: int | None, previous: int | None, source: str, evidence: str,
                 *, rejected: int | None = None) -> None:  # fmt: skip
    st = ctx.state
    ev = ctx.evidence()
    ctx.events.append(
        LimitEvent(
            session_id=st.session_id,
            turn=st.turn,
            limit=limit,
            value=value,
            previous=previous,
            source=source,
            evidence=evidence,
            rejected_bytes=rejected,
            accepted_bytes=ev.largest_accepted or None,
        )
    )


def set_cap(ctx: FlowContext, new: int | None, *, source: str, evidence: str, rejected: int | None = None) -> None:
    st = ctx.state
    previous = st.cap
    if new == previous:
        return
    st.cap = new
    if source == "learned":
        st.cap_source = "learned"
    elif source == "reset":
        st.cap_source = "configured" if new else None
    _limit_event(ctx, "cap", new, previous, source, evidence, rejected=rejected)
    cap_source = "learned" if source == "learned" else source
    ctx.events.append(
        CapEvent(
            session_id=st.session_id,
            turn=st.turn,
            cap_bytes=new or 0,
            previous_bytes=previous,
            rejected_bytes=rejected,
            source=cap_source,
        )
    )


def learn_cap(ctx: FlowContext, new: int, *, rejected: int, how: str) -> None:
    """Tighten the cap after a size rejection the evidence supports."""
    ev = ctx.evidence()
    evidence = f"gateway rejected a {format_size(rejected)} request ({how}); {ev.describe()}"
    set_cap(ctx, new, source="learned", evidence=evidence, rejected=rejected)
    ctx.notify(
        "learned_cap",
        f"gateway rejected a {format_size(rejected)} request ({how}) - payload cap set to {format_size(new)} for "
        "this session",
        "warning",
    )


def set_window(ctx: FlowContext, new: int, *, source: str, evidence: str) -> None:
    st = ctx.state
    previous = st.context_window
    if new == previous:
        return
    st.context_window = new
    if source == "learned":
        st.window_source = "learned"
    _limit_event(ctx, "window", new, previous, source, evidence)


def learn_window(ctx: FlowContext, new: int, evidence: str) -> None:
    set_window(ctx, new, source="learned", evidence=evidence)
    ctx.notify("learned_window", f"provider window is {new:,} tokens - budgets tightened for this session ({evidence})",
               "info")  # fmt: skip


def announce_window(ctx: FlowContext) -> None:
    """Say once that the window is assumed, not known (an unknown model)."""
    st = ctx.state
    if st.window_source != "assumed" or st.window_announced:
        return
    st.window_announced = True
    _limit_event(ctx, "window", st.context_window, None, "assumed", f"litellm does not know {st.model}'s window")
    ctx.notify(
        "window_assumed",
        f"the context window of {st.model} is unknown to litellm - assuming {st.context_window:,} tokens until the "
        "provider reports an overflow; set Limits(context_window=...) or CONTEXTKIT_CONTEXT_WINDOW if you know it",
        "warning",
    )


def halve_budgets(ctx: FlowContext, evidence: str) -> None:
    """Recovery level 1: half the *configured* tool-result budgets, for this episode only."""
    st = ctx.state
    lim = st.limits
    _set_budgets(ctx, max(1, lim.tool_result_turn_budget // 2), max(1, lim.tool_result_max_chars // 2), "episode",
                 evidence)  # fmt: skip


def restore_budgets(ctx: FlowContext, evidence: str) -> None:
    st = ctx.state
    if st.budgets_halved:
        _set_budgets(ctx, st.limits.tool_result_turn_budget, st.limits.tool_result_max_chars, "restored", evidence)


def _set_budgets(ctx: FlowContext, turn_budget: int, per_result: int, source: str, evidence: str) -> None:
    st = ctx.state
    for name, new in (("turn_budget", turn_budget), ("per_result_budget", per_result)):
        previous = getattr(st, name)
        if previous != new:
            setattr(st, name, new)
            _limit_event(ctx, name, new, previous, source, evidence)


def after_clean_turn(ctx: FlowContext) -> None:
    """A turn ended without a size failure: after ``Limits.cap_probe_turns`` such turns, a learned
    cap (a configured one only with ``probe_configured_cap``) is raised a quarter, never to a size
    the endpoint rejected."""
    st = ctx.state
    st.clean_turns += 1
    turns = st.limits.cap_probe_turns
    if not turns or st.clean_turns < turns or not st.cap:
        return
    if not (st.cap_source == "learned" or (st.cap_source == "configured" and st.limits.probe_configured_cap)):
        return
    ev = ctx.evidence()
    new = probe_cap(st.cap, ev.ceiling)
    st.clean_turns = 0
    if new is None:
        return
    evidence = f"{turns} turns without a size failure; {ev.describe()}"
    set_cap(ctx, new, source="probe", evidence=evidence)
    ctx.notify("cap_probe", f"no size failure for {turns} turns - payload cap raised to {format_size(new)} ({evidence})",
               "info")  # fmt: skip


def reset_limits(ctx: FlowContext) -> None:
    """Forget what failures taught: the configured cap, the configured or model window, the
    configured budgets, and no evidence (a size once rejected may be sent again)."""
    st = ctx.state
    evidence = "reset_limits() called"
    set_cap(ctx, st.limits.payload_cap, source="reset", evidence=evidence)
    st.cap_source = "configured" if st.cap else None
    set_window(ctx, st.base_window, source="reset", evidence=evidence)
    st.window_source = st.base_window_source
    _set_budgets(ctx, st.limits.tool_result_turn_budget, st.limits.tool_result_max_chars, "reset", evidence)
    st.evidence.clear()
    st.clean_turns = 0
    ctx.notify("limits_reset", "learned limits reset to the configured ones; size evidence forgotten", "info")
    emit_history(ctx, "reset")
