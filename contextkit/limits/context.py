"""What every step of the turn flow shares: its collaborators (``FlowContext``), measuring, and the
history event. No IO of its own: the archive is reached through its protocol."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextkit.events import EventLog, HistoryEvent
from contextkit.limits.evidence import EndpointEvidence
from contextkit.limits.state import SessionState
from contextkit.markers import ArchiveSink
from contextkit.messages import Message
from contextkit.policy.pressure import PressureTally
from contextkit.sizing import Measure, RequestMeter

Effect = Any
Flow = Generator[Effect, Any, Any]


class SettledPrefix:
    """The history a per-request check last passed, per check and its parameters, so the next request
    checks only what was appended since (the flow's own work per request follows new content, not the
    history's length).

    ``start(name, history, key)`` is how many leading messages of ``history`` are, object for object,
    the history ``name`` last passed with the same ``key``; 0 when any of them changed (a rewrite, a
    compaction: the check then runs over everything, as it would without this). ``passed`` records a
    history the check left valid (a copy: the caller may change its list). Comparing is a list
    comparison in C: messages are immutable, so the same object is the same message and is equal at
    once, from the two lists' pointers alone (an equal copy is the same message too)."""

    def __init__(self) -> None:
        self._passed: dict[str, tuple[list[Message], Any]] = {}

    def start(self, name: str, history: Sequence[Message], key: Any = None) -> int:
        seen = self._passed.get(name)
        if seen is None or seen[1] != key or len(seen[0]) > len(history):
            return 0
        return len(seen[0]) if seen[0] == _head(history, len(seen[0])) else 0

    def passed(self, name: str, history: Sequence[Message], key: Any = None) -> None:
        self._passed[name] = (list(history), key)

    def shrunk(self, name: str, before: Sequence[Message], after: Sequence[Message]) -> None:
        """``after`` is ``before`` with messages replaced in place (a pressure pass's stubs): where
        ``name`` last passed ``before``, record it as passing ``after`` too when every replacement
        kept its place, kind, call ids and flags and got no longer - for a check only a longer or a
        new message can fail (the tool-result budgets, aging), so the request after a pass checks only
        what it appends. Anything else leaves the record as it was (the next check runs over all)."""
        seen = self._passed.get(name)
        if seen is None or not len(seen[0]) == len(before) == len(after) or seen[0] != _head(before, len(before)):
            return
        for i in itertools.compress(itertools.count(), map(operator.is_not, before, after)):  # the replaced, in C
            old, new = before[i], after[i]
            if (new.role, new.tool_call_id, new.tool_calls, new.preserve_verbatim, new.is_recall, new.age_out_after) != (
                old.role, old.tool_call_id, old.tool_calls, old.preserve_verbatim, old.is_recall, old.age_out_after,
            ) or len(new.content) > len(old.content):  # fmt: skip
                return
        self._passed[name] = (list(after), seen[1])


def _head(history: Sequence[Message], n: int) -> list[Message]:
    """The first ``n`` messages of ``history`` as a list, the list itself when that is all of it."""
    if type(history) is list:
        return history if len(history) == n else history[:n]
    return list(history[:n])


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
    breakpoints: bool = False  # place cache_control breakpoints (providers that need them)
    recall_tool: dict[str, Any] | None = None  # offered from the first request after the archive holds content
    archived: bool = False  # the archive received content since this context was created
    cache_anchor: tuple[Message, ...] = ()  # the prefix up to the last request's anchor breakpoint
    # a number in [0, 1] per call, the retry back-off's jitter: the session passes its own random
    # source; the default (1.0) keeps the full delay, so a context built by hand is deterministic
    jitter: Callable[[], float] = field(default=lambda: 1.0)
    # Session(fallbacks=...): (model, its own litellm arguments, its window or None), in order
    fallbacks: tuple[tuple[str, dict[str, Any], int | None], ...] = ()
    fallback_on_overflow: bool = False  # a fallback with a larger window may take an overflowing turn
    expect_rebuild: bool = False  # the provider edited the prompt: the next cache write is a rebuild it caused
    # seconds since the epoch: to turn a Retry-After HTTP-date into a wait (the session passes time.time)
    clock: Callable[[], float] = field(default=lambda: 0.0)
    settled: SettledPrefix = field(default_factory=SettledPrefix)  # what the per-request checks last passed
    # what the pressure pass asks of every message (its bound, the previews), kept request to request
    pressure_tally: PressureTally = field(default_factory=PressureTally)

    def evidence(self, endpoint: str | None = None) -> EndpointEvidence:
        """What the endpoint (the session's model unless named) showed this session."""
        return self.state.evidence.of(endpoint or self.state.model)


def measure(ctx: FlowContext, history: Sequence[Message], **params: Any) -> Measure:
    """Request bytes and tokens of ``history`` with the session's tools and request parameters
    (``params`` over the session's: an escalated ``max_tokens``, ``stream``)."""
    return ctx.meter.measure(history, tools=ctx.tools or None, **{**ctx.params, **params})


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
