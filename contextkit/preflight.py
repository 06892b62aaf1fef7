"""Per-request steps of the turn flow: measuring, budgets, pre-flight, compaction, the outgoing copy.

No IO of its own: the archive is reached through its protocol and the compactor yields summary
requests for the driver to run.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextkit.events import EventLog, HistoryEvent
from contextkit.markers import ArchiveSink, marker
from contextkit.messages import Message
from contextkit.policy.budgets import enforce_tool_result_budgets
from contextkit.policy.microcompact import MicrocompactConfig, microcompact
from contextkit.policy.pairing import repair_tool_pairing
from contextkit.policy.trim import dedup_repeated_reads
from contextkit.prefix import PrefixProbe
from contextkit.sizing import MB, Measure, RequestMeter, dumps, format_size, request_bytes
from contextkit.state import SessionState

NO_CAP_WARNING_BYTES = int(2.5 * MB)


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
