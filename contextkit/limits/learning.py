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

import copy

from contextkit.events import CapEvent, LimitEvent
from contextkit.limits.context import FlowContext, emit_history
from contextkit.limits.evidence import probe_cap
from contextkit.limits.state import Fact, LimitsSnapshot
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
            known_to_pass=ev.known_to_pass or None,
            known_to_fail=ev.known_to_fail,
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
    ev = ctx.evidence()
    ctx.events.append(
        CapEvent(
            session_id=st.session_id,
            turn=st.turn,
            cap_bytes=new or 0,
            previous_bytes=previous,
            rejected_bytes=rejected,
            source=cap_source,
            known_to_pass=ev.known_to_pass or None,
            known_to_fail=ev.known_to_fail,
        )
    )


def learn_cap(ctx: FlowContext, new: int, *, rejected: int, how: str, lasting: str = "for this session") -> None:
    """Tighten the cap after a size rejection the evidence supports (``lasting``: how long, in words)."""
    ev = ctx.evidence()
    evidence = f"gateway rejected a {format_size(rejected)} request ({how}); {ev.describe()}"
    set_cap(ctx, new, source="learned", evidence=evidence, rejected=rejected)
    ctx.notify(
        "learned_cap",
        f"gateway rejected a {format_size(rejected)} request ({how}) - payload cap set to {format_size(new)} {lasting} "
        f"({ev.describe_interval()})",
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
    evidence = f"{turns} turns without a size failure; {ev.describe_interval()}"
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


def roll_back_limits(ctx: FlowContext, saved: LimitsSnapshot) -> None:
    """A failed turn is a transaction for limits and evidence too: whatever it inferred (a cap from a
    403 page or a drop, a window from a count) is undone; the self-standing facts it met are kept -
    a 413 (and the cap it teaches), a window the provider stated, a body the endpoint accepted, a
    firewall page that refused the request's content."""
    st = ctx.state
    facts = list(st.turn_facts)
    st.evidence = copy.deepcopy(saved.evidence)
    cap, cap_source, window, window_source = saved.cap, saved.cap_source, saved.context_window, saved.window_source
    kept: list[str] = []
    for fact in facts:
        ev = st.evidence.of(fact.endpoint)
        if fact.what == "accepted":
            ev.accepted(fact.nbytes, fact.tokens)
        elif fact.what == "rejected":
            ev.rejected(fact.nbytes, fact.how)
            kept.append(f"a {format_size(fact.nbytes)} request refused with {fact.how}")
            if fact.value is not None and (cap is None or fact.value < cap):
                cap, cap_source = fact.value, "learned"
        elif fact.what == "content":
            ev.content_refused = True
            kept.append("a refusal of the request's content")
        elif fact.what == "window" and fact.value is not None:
            if fact.tokens:
                ev.overflowed(fact.tokens)
            window, window_source = fact.value, "learned"
            kept.append(f"a {fact.value:,}-token window the provider stated")
    st.clean_turns = saved.clean_turns
    why = "the failed turn's inferences are rolled back" + (f"; kept: {', '.join(kept)}" if kept else "")
    changed = st.cap != cap or st.context_window != window
    if st.cap != cap:
        set_cap(ctx, cap, source="rollback", evidence=why)
    st.cap_source = cap_source
    if st.context_window != window:
        set_window(ctx, window, source="rollback", evidence=why)
    st.window_source = window_source
    if changed:
        ctx.notify("limits_rolled_back", f"limits back to what they were before the turn ({why})", "info")


def snapshot_limits(ctx: FlowContext) -> LimitsSnapshot:
    """What ``roll_back_limits`` restores; the turn's facts start empty."""
    st = ctx.state
    st.turn_facts = []
    return LimitsSnapshot(
        st.cap, st.cap_source, st.context_window, st.window_source, copy.deepcopy(st.evidence), st.clean_turns
    )


def note_accepted(ctx: FlowContext, nbytes: int, tokens: int = 0, endpoint: str | None = None) -> None:
    """A body went through: evidence, and a fact a failed turn keeps."""
    name = endpoint or ctx.state.model
    ctx.evidence(name).accepted(nbytes, tokens)
    ctx.state.turn_facts.append(Fact("accepted", name, nbytes, tokens))


def note_fact(ctx: FlowContext, fact: Fact) -> None:
    ctx.state.turn_facts.append(fact)
