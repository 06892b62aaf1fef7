"""Per-request steps of the turn flow: byte budgets, turn-boundary rewrites, the oversize rule,
pre-flight and auto compaction, the outgoing copy and the known-limit check.

No IO of its own: the archive is reached through its protocol and the compactor yields summary
requests for the driver to run. Summary requests pass through ``run_compaction``, which feeds
their outcomes to the session's evidence and never sends one at or above a known limit
(``contextkit.limits.summary_guard``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from contextkit.errors import PayloadFloorError
from contextkit.events import CompactionEvent
from contextkit.limits.context import Effect, Flow, FlowContext, emit_history, measure
from contextkit.limits.floor import floor_measure, floor_text
from contextkit.limits.learning import announce_window
from contextkit.limits.summary_guard import watch_summaries
from contextkit.markers import marker
from contextkit.messages import Message, newest_request_index
from contextkit.policy.aging import age_messages, ages
from contextkit.policy.breakpoints import EPHEMERAL, anchor_position, breakpoint_positions, with_breakpoints
from contextkit.policy.budgets import enforce_tool_result_budgets, preview_chars
from contextkit.policy.microcompact import MicrocompactConfig
from contextkit.policy.oversize import EXCERPT_MIN_CHARS, excerpt_message, original_of
from contextkit.policy.pairing import repair_tool_pairing
from contextkit.policy.pressure import PressureConfig, relieve_pressure
from contextkit.sizing import MB, Measure, format_size, message_bytes

NO_CAP_WARNING_BYTES = int(2.5 * MB)
BYTES_PER_TOKEN = 4  # to size previews from the window: the usual ratio for English and code
MIN_OUTPUT = 256  # the fewest output tokens worth asking for when the window must hold them too

__all__ = [
    "Effect",
    "Flow",
    "FlowContext",
    "Request",
    "byte_budget",
    "compact_if_needed",
    "emit_history",
    "fit_newest_message",
    "known_to_fail",
    "measure",
    "outgoing",
    "output_room",
    "request_for",
    "run_compaction",
    "summarizer_window",
    "turn_boundary",
]


def byte_budget(ctx: FlowContext, m: Measure, ratio: float | None = None) -> int:
    """Budget in request bytes: a share of the window (converted with this history's own
    bytes-per-token) and at most 70% of the payload cap (headroom for schemas and framing)."""
    st = ctx.state
    bytes_per_token = m.bytes / m.tokens if m.tokens else 4.0
    budget = int(st.context_window * (ratio or st.limits.budget_ratio) * bytes_per_token)
    if st.cap:
        budget = min(budget, int(0.7 * st.cap))
    return max(budget, 1)


def turn_boundary(ctx: FlowContext) -> None:
    """No-LLM rewrites of the persistent history, cache-aware.

    Tool-result budgets cap a result when it arrives, before it is ever sent (the budgets are
    idempotent, so results already sent are not touched again). The oversize rule comes next, so
    the pressure pass sizes the request it will really send (with the excerpt of a paste too big to
    send whole, never the paste). Read dedup and microcompact act only under pressure against the
    limits in force (the cap, a size the endpoint rejected, the window, a token count that
    overflowed), in one batched step (``policy/pressure.py``): below the trigger the request is
    append-only and the provider's prompt cache survives.
    """
    st = ctx.state
    if not ages(st.history, ctx.settled.start("aging", st.history)):  # the usual history: none ever ages
        ctx.settled.passed("aging", st.history)
    else:
        history, aged = age_messages(st.history, ctx.archive)  # Message(age_out_after=N): stubs after N turns
        if aged:
            what = f"{len(aged)} message{'s' if len(aged) != 1 else ''} aged into recallable stubs (originals archived)"
            ctx.notify("aging", what, "info")
            _turn_rewrite(ctx, "aging", what, measure(ctx, st.history), history, aged)
            st.history = history
    limits = (st.turn_budget, st.per_result_budget, _preview_chars(ctx))
    history, budget = enforce_tool_result_budgets(
        st.history, archive=ctx.archive, turn_budget=limits[0], per_result=limits[1], preview=limits[2],
        settled=ctx.settled.start("budgets", st.history, limits),
    )  # fmt: skip
    ctx.settled.passed("budgets", history, limits)
    if budget.changed:
        ctx.notify("budget", budget.describe(), "info")
        _turn_rewrite(ctx, "budget", budget.describe(), measure(ctx, st.history), history, budget.archived_keys)
        st.history = history
    announce_window(ctx)
    fit_newest_message(ctx)  # first: the pass must size the excerpt that will be sent, not the paste
    before = measure(ctx, st.history)
    unrelieved = st.history
    history, report = relieve_pressure(
        unrelieved,
        archive=ctx.archive,
        measure=lambda h: measure(ctx, h),
        window=_token_limit(ctx),
        cap=_byte_limit(ctx),
        config=PressureConfig.from_limits(st.limits),
        micro=MicrocompactConfig.from_limits(st.limits),
        sizes=ctx.meter.message_sizes,
        ratio=ctx.meter.ratio,
        tally=ctx.pressure_tally,
    )
    if report.microcompact.changed:
        ctx.notify("microcompact", report.microcompact.describe(), "info")
    if report.dedup.changed:
        ctx.notify("dedup", report.dedup.describe(), "info")
    if report.acted and report.reason in ("applied", "excerpts"):
        ctx.notify("pressure", report.describe() + " - the prompt cache restarts at the first rewritten result", "info")
    if report.acted:
        _turn_rewrite(ctx, "microcompact", report.describe(), before, history, report.archived_keys, report.reason)
    if report.changed:
        st.history = history
        for check in ("budgets", "aging"):  # stubs and excerpts pass what the messages they replace passed
            ctx.settled.shrunk(check, unrelieved, history)
    if budget.changed or report.changed:
        emit_history(ctx, "microcompact")


def _turn_rewrite(
    ctx: FlowContext,
    phase: str,
    status: str,
    before: Measure,
    history: Sequence[Message],
    keys: Sequence[str],
    detail: str = "",
) -> Measure:
    """A trim-stage rewrite made at a turn boundary, as a ``CompactionEvent`` (trigger ``turn``), so the
    per-stage analyses and the timeline see it next to the compactions."""
    after = measure(ctx, history)
    event = CompactionEvent(
        session_id=ctx.state.session_id, turn=ctx.state.turn, trigger="turn", phase=phase, stage="trim",
        status=status, outcome="applied", messages_before=before.messages, messages_after=after.messages,
        bytes_before=before.bytes, bytes_after=after.bytes, tokens_before=before.tokens,
        tokens_after=after.tokens, archived_keys=tuple(keys), detail=detail,
    )  # fmt: skip
    ctx.events.append(event)
    return after


def _preview_chars(ctx: FlowContext) -> int | None:
    """How big an output over the per-result budget enters the history: a share of the tighter of
    the byte limit and the token limit (``Limits.tool_result_preview_share``)."""
    limits = [x for x in (_byte_limit(ctx), _token_limit(ctx) * BYTES_PER_TOKEN) if x]
    return preview_chars(ctx.state.limits.tool_result_preview_share, min(limits) if limits else None)


def token_limit(ctx: FlowContext) -> int:
    """Tokens a request must stay below: the window, and below what already overflowed."""
    return _token_limit(ctx)


def output_room(ctx: FlowContext, prompt_tokens: int) -> int:
    """Output tokens the window leaves beside a prompt of ``prompt_tokens`` (our count), less a
    margin of 5% of the window (at least 64): the provider's tokenizer counts a little differently."""
    limit = _token_limit(ctx)
    return limit - prompt_tokens - max(64, limit // 20)


def reserve_output(ctx: FlowContext, sent: Measure, params: dict[str, Any]) -> str | None:
    """When the provider counts ``max_tokens`` against the window, a request reserves it: the asked
    output is lowered to what the window leaves (``params`` changed in place), or - when less than
    ``MIN_OUTPUT`` tokens would be left - the reason the request is not sent (the ladder shrinks it)."""
    st = ctx.state
    asked = int(params.get("max_tokens") or 0)
    if not st.window_counts_output or not asked:
        return None
    room = output_room(ctx, sent.tokens)
    if asked <= room:
        return None
    if room >= min(asked, MIN_OUTPUT):
        params["max_tokens"] = room
        return None
    return (
        f"the request is {sent.tokens:,} tokens and asks for {asked:,} output tokens; the provider counts the output "
        f"against the {_token_limit(ctx):,}-token window"
    )


def _token_limit(ctx: FlowContext) -> int:
    """Tokens a request must stay below: the window, and below what already overflowed."""
    overflowed = ctx.evidence().smallest_overflow_tokens
    window = ctx.state.context_window
    return min(window, overflowed - 1) if overflowed else window


def _byte_limit(ctx: FlowContext) -> int | None:
    """Bytes a request may not exceed: the cap, and one byte below what the endpoint rejected."""
    limits = [x for x in (ctx.state.cap, ctx.evidence().ceiling) if x is not None]
    return min(limits) if limits else None


def fit_newest_message(ctx: FlowContext) -> None:
    """One rule for a newest user message that cannot fit, whatever binds (a learned or configured
    cap, or the window): when the smallest request holding it whole is above the pre-flight line,
    archive it and send a head + tail excerpt the model can page through with ``recall``.
    ``PayloadFloorError`` only when even the smallest excerpt cannot fit."""
    st = ctx.state
    i = newest_request_index(st.history)
    if i is None or st.keep_newest_whole:
        return  # (a size reading of a 403 page is being tested: only a whole message can confirm it)
    current = st.history[i]
    ratio = st.limits.preflight_ratio
    tokens_limit = _token_limit(ctx)
    # the cap, or one byte below a size the endpoint refused when no cap is in force (an excerpt test
    # leaves the refused size known to fail but no cap: a second paste as big is excerpted all the same)
    byte_limit = _byte_limit(ctx)
    full = measure(ctx, st.history)  # it holds the system prompt and the message: it measures at least as much
    if not ((byte_limit and full.bytes > ratio * byte_limit) or full.tokens > ratio * tokens_limit):
        return  # the usual request: the history needs no walk for its system messages
    systems = [m for m in st.history if m.role == "system"]
    whole = measure(ctx, [*systems, current])
    over_bytes = bool(byte_limit) and whole.bytes > ratio * byte_limit  # type: ignore[operator]
    over_tokens = whole.tokens > ratio * tokens_limit
    if not (over_bytes or over_tokens):
        return
    if over_bytes and st.cap and st.cap == byte_limit:
        what = f"the {st.cap_source or 'configured'} payload cap of {format_size(st.cap)}"
    elif over_bytes and byte_limit:
        what = f"the {format_size(byte_limit + 1)} this endpoint refused"
    else:
        what = f"the {st.context_window:,}-token context window"
    newest = original_of(current, ctx.archive)  # an excerpt that no longer fits is cut again from its original
    base = measure(ctx, systems)
    budget = byte_budget(ctx, whole)
    if byte_limit:
        budget = min(budget, int(0.7 * byte_limit))  # the headroom byte_budget keeps under a cap
    room = max(budget - base.bytes, 0) // 2
    chars = max(EXCERPT_MIN_CHARS, int(room * len(newest.content) / max(1, message_bytes(newest))))
    got = excerpt_message(newest, max_chars=chars, archive=ctx.archive, too_big_for=what)
    if got is None or len(got[0].content) >= len(current.content):
        return  # nothing smaller to offer: compaction and the known-limit check decide
    excerpt, _ = got
    fitted = measure(ctx, [*systems, excerpt])
    if (byte_limit and fitted.bytes > byte_limit) or fitted.tokens >= tokens_limit:
        tokens = not (byte_limit and fitted.bytes > byte_limit)
        limit = what[0].upper() + what[1:] if not tokens else f"The model's window is {tokens_limit:,} tokens"
        # report the smallest request this history can reach (the rest of it, the recall schema), not the excerpt alone
        floor = floor_measure(ctx, [*st.history[:i], excerpt, *st.history[i + 1 :]])
        fitted = floor if (floor.tokens if tokens else floor.bytes) > (fitted.tokens if tokens else fitted.bytes) else fitted
        raise PayloadFloorError(
            floor_text(ctx, limit, fitted, tokens=tokens),
            base_bytes=fitted.bytes,
            rejected_bytes=st.cap or 0,
        )
    st.history = [*st.history[:i], excerpt, *st.history[i + 1 :]]
    size = format_size(len(newest.content.encode("utf-8", "surrogatepass")))
    ctx.notify(
        "message_excerpted",
        f"your message ({size}) is too large to send whole under {what}: it is archived as "
        f"{' '.join(marker(k) for k in excerpt.archive_keys)} and the model gets a {format_size(len(excerpt.content))} "
        "head+tail excerpt it can page through with recall",
        "warning",
    )
    emit_history(ctx, "excerpt")


def compact_if_needed(ctx: FlowContext, *, trigger: str = "auto") -> Flow:
    """The oversize rule, pre-flight (with a payload cap, compact once the request passes
    ``Limits.preflight_ratio`` of it) and automatic compaction when over budget."""
    st = ctx.state
    announce_window(ctx)
    fit_newest_message(ctx)
    m = measure(ctx, st.history)
    ratio = None
    if st.cap and m.bytes > st.limits.preflight_ratio * st.cap:
        pct = int(m.bytes * 100 / st.cap)
        ctx.notify(
            "preflight",
            f"pre-flight: history {format_size(m.bytes)} = {pct}% of the {st.cap_source or 'configured'} cap ({format_size(st.cap)}) - compacting",
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
    result = yield from run_compaction(ctx, trigger=trigger, budget=budget, target=truncation_target(ctx, m))
    if result.changed:
        st.history = list(result.history)
        emit_history(ctx, "compaction")


def truncation_target(ctx: FlowContext, m: Measure) -> int:
    """The size an automatic compaction that comes to truncating cuts down to: ``Limits.pressure_target``
    of the window (in this history's bytes) or of the payload cap, whichever is smaller. Cutting only
    to the budget that triggered it would leave the request at the trigger, and the next few requests
    would rewrite the head of the history again, each a full prompt-cache miss."""
    st = ctx.state
    target = byte_budget(ctx, m, st.limits.pressure_target)
    return max(1, min(target, int(st.limits.pressure_target * st.cap))) if st.cap else target


def run_compaction(
    ctx: FlowContext, *, trigger: str, budget: int, instruction: str | None = None, target: int | None = None
) -> Flow:
    """One compactor pass over the session history; returns its ``CompactionResult``."""
    st = ctx.state
    pass_ = ctx.compactor.flow(
        st.history,
        trigger=trigger,
        budget=budget,
        measure=lambda h: measure(ctx, h).bytes,
        instruction=instruction,
        summarizer_window=summarizer_window(ctx),
        target=target,
    )
    return (yield from watch_summaries(ctx, pass_))


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
    """The request copy: pairing repaired. Tool-result budgets were applied when each result arrived
    (``turn_boundary``), so the copy is the history itself and never rewrites a message already sent."""
    st = ctx.state
    known = ctx.settled.start("pairing", st.history)
    repaired, report = repair_tool_pairing(st.history, archive=ctx.archive, valid_prefix=known)
    ctx.settled.passed("pairing", repaired)
    if report.changed:
        st.history = repaired
        archived = " ".join(marker(k) for k in report.archived_keys)
        ctx.notify(
            "pairing", report.describe() + (f"; removed results archived as {archived}" if archived else ""), "info"
        )
    if ctx.recall_tool is not None and ctx.archived:
        # Once, in the request that follows the first archive write: that request already rewrites
        # the history (the write came from a rewrite), so the cache break is shared. Never removed.
        ctx.tools = [*ctx.tools, ctx.recall_tool]
        ctx.recall_tool = None
        ctx.notify("recall_tool", "content was archived: the recall tool is offered from now on", "info")
    out = list(st.history)
    return out, measure(ctx, out)


def known_to_fail(ctx: FlowContext, sent: Measure) -> str | None:
    """Why this request must not be sent (the cap is a hard limit; a size the endpoint rejected,
    or a token count that overflowed, is never sent again), or None."""
    st = ctx.state
    ev = ctx.evidence()
    if st.cap and sent.bytes > st.cap:
        return f"the request is {format_size(sent.bytes)}, above the {st.cap_source or 'configured'} payload cap ({format_size(st.cap)})"
    if ev.ceiling is not None and sent.bytes > ev.ceiling:
        return f"the request is {format_size(sent.bytes)}; this endpoint rejected {format_size(ev.ceiling + 1)} before"
    overflowed = ev.smallest_overflow_tokens
    if overflowed and sent.tokens >= overflowed:
        return f"the request is {sent.tokens:,} tokens; a {overflowed:,}-token request already overflowed the window"
    return None


def check_known_floor(ctx: FlowContext) -> None:
    """Before climbing for a request we refused to send: fail fast when even the floor breaks the limit."""
    st = ctx.state
    floor = floor_measure(ctx)
    ev = ctx.evidence()
    limit_bytes = _byte_limit(ctx)
    overflowed = ev.smallest_overflow_tokens
    if limit_bytes is not None and floor.bytes > limit_bytes:
        if st.cap is not None and limit_bytes == st.cap:
            text = f"The {st.cap_source or 'configured'} payload cap is {format_size(limit_bytes)}"
        else:  # no cap, or the endpoint's own rejection binds: nothing was configured
            text = f"This endpoint rejected a {format_size(limit_bytes + 1)} request for its size ({ev.rejected_how})"
        raise PayloadFloorError(floor_text(ctx, text, floor), base_bytes=floor.bytes, rejected_bytes=limit_bytes + 1)
    if overflowed and floor.tokens >= overflowed:
        text = f"A {overflowed:,}-token request overflowed the model's window"
        raise PayloadFloorError(
            floor_text(ctx, text, floor, tokens=True), base_bytes=floor.bytes, rejected_bytes=limit_bytes or 0
        )


@dataclass(frozen=True)
class Request:
    """One request as it will be sent."""

    wire: list[dict[str, Any]]  # the messages without breakpoints: what the prefix probe compares
    messages: list[dict[str, Any]]  # as sent: with cache_control breakpoints for providers that need them
    sent: Measure  # bytes and tokens as sent, the breakpoints' bytes included (the hard limit sees them)
    anchor: tuple[Message, ...]  # the prefix up to this request's anchor, to remember once it is sent


def request_for(
    ctx: FlowContext, out: Sequence[Message], sent: Measure, params: Mapping[str, Any] | None = None
) -> Request:
    """``out`` as sent (``policy/breakpoints.py``), ``params`` the request's parameters as ``sent``
    was measured with. Pure: the flow stores ``anchor`` in ``ctx.cache_anchor`` only when the
    request really goes out (a refused one moves no anchor)."""
    wire = ctx.meter.wire_list(out)  # converted once per message object, copies handed out
    if not ctx.breakpoints:
        return Request(wire, wire, sent, ())
    previous = ctx.cache_anchor
    still_valid = bool(previous) and tuple(out[: len(previous)]) == previous
    positions = breakpoint_positions(out, previous_anchor=len(previous) - 1 if still_valid else None)
    anchor = anchor_position(out)
    # the route decides where litellm puts the marks (a key of the message, or of its last block)
    added = ctx.meter.breakpoint_bytes(
        out, positions, EPHEMERAL, tools=ctx.tools or None, **(ctx.params if params is None else params)
    )
    return Request(
        wire,
        with_breakpoints(wire, positions),
        replace(sent, bytes=sent.bytes + added),
        tuple(out[: anchor + 1]) if anchor is not None else (),
    )
