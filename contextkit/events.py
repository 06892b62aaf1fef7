"""Typed events and the append-only ``EventLog``.

Every state change of a session is an event. Widgets and analyses only read events. Events are
frozen dataclasses; ``event.to_dict()`` gives a flat, JSON-safe dict (with ``type``) used by
save/load and by ``contextkit.analysis.frames``.

The log keeps every event by default, except streamed text deltas: ``EventLog.publish`` hands
those to subscribers without storing them (a long answer streams hundreds of them). ``EventLog(max_events=N)`` bounds memory for very long
runs (oldest events are dropped and counted in ``dropped``); subscribers still see every event.

A subscriber that raises never breaks the session, and is never silent either: every error is
counted in ``subscriber_errors`` (the last one kept in ``last_subscriber_error``), and the first
error of each subscriber is reported once, as a ``NoticeEvent`` (code ``subscriber_error``) and a
``logging`` warning on the ``contextkit`` logger.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar

Subscriber = Callable[["Event"], None]
logger = logging.getLogger("contextkit")


@dataclass(frozen=True, kw_only=True)
class Event:
    """Base event: ``seq`` and ``ts`` are set by the log when the event is appended."""

    type: ClassVar[str] = "event"
    session_id: str = ""
    turn: int = 0
    seq: int = -1
    ts: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["type"] = self.type
        return data


@dataclass(frozen=True, kw_only=True)
class RequestEvent(Event):
    """One request attempt sent to the provider (a row of the ``requests`` analysis frame)."""

    type: ClassVar[str] = "request"
    attempt: int = 1
    level: int = 0  # recovery level applied before this attempt (0 = none)
    model: str = ""
    bytes: int = 0
    tokens: int = 0
    messages: int = 0
    outcome: str = "ok"  # ok | rejected | error | length
    failure_kind: str | None = None
    status: int | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    prefix_shared_bytes: int = 0  # bytes shared as a prefix with the previous request body (the prompt cache's reuse)
    prefix_share: float | None = None  # shared / previous body length; None for the first request
    purpose: str = "turn"  # turn | summary | continuation | probe (re-sent unstreamed after an empty stream)
    # Prompt cache, as the provider reported it through litellm's usage object:
    cached_prompt_tokens: int = 0  # part of prompt_tokens read from the provider's prompt cache
    cache_write_tokens: int = 0  # part of prompt_tokens written to it (Anthropic bills writes 1.25x)
    append_only: bool | None = None  # the previous request body is a prefix of this one; None: first request


COMPACTION_STAGES = ("trim", "summary", "truncation")
"""The compaction pipeline's stages, in the order a pass runs them.

``trim`` rewrites without a model call (old reasoning, repeated reads, microcompact, tool-result
budgets, the verbatim cap); ``summary`` replaces older messages with one summary; ``truncation`` is
the last resort (drop old messages, else cut the biggest). Everything removed is archived first. The
recovery ladder's rungs are called *levels* (1-3) instead, so the two are never confused.
"""


def stage_of_number(number: Any) -> str:
    """The stage a compaction level number of older saved data stood for (1 trim, 2 summary, 3 truncation)."""
    if isinstance(number, int) and not isinstance(number, bool) and 1 <= number <= len(COMPACTION_STAGES):
        return COMPACTION_STAGES[number - 1]
    return ""


def stage_rank(stage: str) -> int:
    """1, 2, 3 for ``trim``, ``summary``, ``truncation`` (0 for "" or an unknown name): stages run in this order."""
    return COMPACTION_STAGES.index(stage) + 1 if stage in COMPACTION_STAGES else 0


@dataclass(frozen=True, kw_only=True)
class CompactionEvent(Event):
    """One compaction phase: a ``running`` event when it starts, then its result."""

    type: ClassVar[str] = "compaction"
    trigger: str = "auto"  # auto | manual | recovery | turn
    phase: str = (
        "start"  # start | trim | dedup | microcompact | aging | budget | verbatim | summarize | truncate | shrink | done
    )
    stage: str = ""  # trim | summary | truncation: the pipeline stage the phase belongs to ("" for start)
    status: str = ""  # the status line shown to the user ("Summarizing old messages via LLM ...")
    outcome: str = "running"  # running | applied | skipped | rejected | failed | cancelled
    messages_before: int = 0
    messages_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    summarizer_prompt_tokens: int = 0
    summarizer_completion_tokens: int = 0
    summarizer_cost: float = 0.0
    identifier_retention: float | None = None  # the applied summary (prose + identifier ledger)
    prose_retention: float | None = None  # the summarizer model's prose alone
    summary_source: str = ""  # model | extractive (the summary stage applied); "" otherwise
    archived_keys: tuple[str, ...] = ()
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class RecoveryEvent(Event):
    """One step of the recovery ladder (levels 1-3) after a classified failure about size."""

    type: ClassVar[str] = "recovery"
    failure_kind: str = ""
    reason: str = ""
    level: int = 0
    attempt: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    outcome: str = "retrying"  # retrying | recovered | failed | floor | not_sent | cancelled
    latency_s: float = 0.0
    archived_keys: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class NoticeEvent(Event):
    """A message for the user (pre-flight, learned cap, microcompact line, warnings)."""

    type: ClassVar[str] = "notice"
    code: str = ""  # preflight | learned_cap | assumed_cap | floor_warning | size_warning | payload_notice | microcompact | dedup | recovery | escalation | retry | empty_stream | voided
    text: str = ""
    level: str = "info"  # info | warning | error


@dataclass(frozen=True, kw_only=True)
class CapEvent(Event):
    """The session's payload cap changed (learned from a rejection, assumed, or configured)."""

    type: ClassVar[str] = "cap"
    cap_bytes: int = 0
    previous_bytes: int | None = None
    rejected_bytes: int | None = None
    source: str = "configured"  # configured | learned | assumed | probe | reset | rollback
    # the endpoint's interval when the cap changed: the cap sits between them (None: nothing known yet)
    known_to_pass: int | None = None
    known_to_fail: int | None = None


@dataclass(frozen=True, kw_only=True)
class LimitEvent(Event):
    """A limit the session works under changed, with the evidence for the change.

    ``limit`` is ``cap`` (payload bytes), ``window`` (tokens), ``turn_budget`` or ``per_result_budget``
    (tool-result chars). ``source``: ``learned`` (from a size failure), ``probe`` (raised after clean
    turns), ``episode`` (halved for a recovery episode), ``restored`` (back after clean turns),
    ``reset`` (``Session.reset_limits()``), ``assumed`` (nothing known; said once), ``rollback`` (a
    failed turn's inferences undone), ``loaded`` (``Session.load``).

    ``known_to_pass`` / ``known_to_fail``: the endpoint's interval (bytes) when the limit changed -
    the largest body it accepted and the smallest it rejected for its size; the cap sits between.
    """

    type: ClassVar[str] = "limit"
    limit: str = ""
    value: int | None = None
    previous: int | None = None
    source: str = ""
    evidence: str = ""
    rejected_bytes: int | None = None
    accepted_bytes: int | None = None
    known_to_pass: int | None = None
    known_to_fail: int | None = None


@dataclass(frozen=True, kw_only=True)
class HistoryEvent(Event):
    """The history changed; sizes of the next request (the bytes of the body really sent, and its tokens)."""

    type: ClassVar[str] = "history"
    messages: int = 0
    bytes: int = 0
    tokens: int = 0
    cap_bytes: int | None = None
    context_window: int | None = None
    reason: str = ""  # user | reply | tool | compaction | recovery | rewind | load | rollback | excerpt | reset


@dataclass(frozen=True, kw_only=True)
class ArchiveEvent(Event):
    """Content was archived (or recalled) through the session's archive."""

    type: ClassVar[str] = "archive"
    action: str = "put"  # put | recall | miss
    key: str = ""
    kind: str = ""
    bytes: int = 0
    origin: str = ""


@dataclass(frozen=True, kw_only=True)
class StreamEvent(Event):
    """What a streamed turn showed its reader (``Session.stream`` / ``astream``).

    ``kind``: ``delta`` (a piece of text yielded to the reader; published to subscribers, not kept
    in the log), ``tool_round`` (the model called tools: ``text`` is that round's text, which the
    reader saw; the answer count starts again), ``retry`` (the request is re-sent from the start:
    nothing was shown yet), ``continuation`` (the model is asked to resume from the text shown so
    far: after a cut at ``max_tokens`` or an interrupted stream), ``voided`` (the interrupted text
    could not be continued: ``text`` is what was voided; a marker line follows it), ``done`` and
    ``cancelled`` (the reader stopped; the history is as before the turn). ``chars_so_far`` /
    ``tokens_so_far`` count the answer shown so far (a running count per delta, exact at ``done``);
    the count starts again after a tool round and after a voided answer's marker line.
    ``reason`` and ``level`` (the recovery level, 0 = none) say why a retry or continuation
    happened.
    """

    type: ClassVar[str] = "stream"
    kind: str = "delta"  # delta | tool_round | retry | continuation | voided | done | cancelled
    text: str = ""
    chars_so_far: int = 0
    tokens_so_far: int = 0
    reason: str = ""
    level: int = 0


@dataclass(frozen=True, kw_only=True)
class ProviderEditEvent(Event):
    """The provider applied server-side context edits (``Session(context_engine="provider")``).

    ``edits``, ``cleared_results`` and ``cleared_tokens`` are what the provider reported; ``stubs`` how
    many tool results the local history turned into stubs to mirror it (originals archived).
    """

    type: ClassVar[str] = "provider_edit"
    edits: int = 0
    cleared_results: int = 0
    cleared_tokens: int = 0
    stubs: int = 0


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        RequestEvent,
        CompactionEvent,
        RecoveryEvent,
        NoticeEvent,
        CapEvent,
        LimitEvent,
        HistoryEvent,
        ArchiveEvent,
        StreamEvent,
        ProviderEditEvent,
    )
}


def event_from_dict(data: dict[str, Any]) -> Event:
    """Inverse of ``Event.to_dict`` (used by ``Session.load``).

    A compaction event saved before the stages had names carries ``level`` (1, 2, 3) instead of
    ``stage``; it is read as the stage of that number, so older saved sessions and event files load.
    """
    cls = EVENT_TYPES.get(str(data.get("type")), Event)
    if cls is CompactionEvent and "stage" not in data and "level" in data:
        data = {**data, "stage": stage_of_number(data["level"])}
    names = {f.name for f in fields(cls)}
    kwargs: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k in names}
    return cls(**kwargs)


@dataclass
class EventLog:
    """Append-only, thread-safe event log with synchronous subscribers."""

    max_events: int | None = None
    _events: deque[Event] = field(default_factory=deque, init=False, repr=False)
    _subscribers: list[Subscriber] = field(default_factory=list, init=False, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    _seq: int = field(default=0, init=False, repr=False)
    dropped: int = field(default=0, init=False)
    subscriber_errors: int = field(default=0, init=False)
    last_subscriber_error: BaseException | None = field(default=None, init=False, repr=False)
    _reported: list[Subscriber] = field(default_factory=list, init=False, repr=False)
    clock: Callable[[], float] = field(default=time.time, repr=False)

    def append(self, event: Event) -> Event:
        return self._deliver(event, keep=True)

    def publish(self, event: Event) -> Event:
        """Hand ``event`` to the subscribers without keeping it (high-rate events: text deltas)."""
        return self._deliver(event, keep=False)

    def _deliver(self, event: Event, *, keep: bool) -> Event:
        with self._lock:
            stamped = _stamp(event, self._seq, self.clock())
            self._seq += 1
            if keep:
                self._events.append(stamped)
                if self.max_events is not None and len(self._events) > self.max_events:
                    self._events.popleft()
                    self.dropped += 1
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(stamped)
            except Exception as exc:  # noqa: BLE001 - a broken view must never break the session
                self._subscriber_failed(callback, stamped, exc)
        return stamped

    def _subscriber_failed(self, callback: Subscriber, event: Event, exc: Exception) -> None:
        with self._lock:
            self.subscriber_errors += 1
            self.last_subscriber_error = exc
            first = not any(seen is callback for seen in self._reported)
            if first:
                self._reported.append(callback)
        if not first:
            return
        name = getattr(callback, "__qualname__", None) or type(callback).__name__
        text = (
            f"event subscriber {name} raised {type(exc).__name__}: {exc} (on a {event.type} event); the session "
            "goes on, later errors of this subscriber are only counted in events.subscriber_errors"
        )
        logger.warning(text, exc_info=exc)
        self.append(
            NoticeEvent(
                session_id=event.session_id, turn=event.turn, code="subscriber_error", text=text, level="warning"
            )
        )

    def subscribe(self, callback: Subscriber, *, replay: bool = False) -> Callable[[], None]:
        """Call ``callback(event)`` for every new event; returns an unsubscribe function."""
        with self._lock:
            self._subscribers.append(callback)
            past = list(self._events) if replay else []
        for event in past:
            callback(event)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def __iter__(self) -> Iterator[Event]:
        with self._lock:
            return iter(list(self._events))

    def __len__(self) -> int:
        return len(self._events)

    def __getitem__(self, index: int) -> Event:
        with self._lock:
            return list(self._events)[index]

    def of_type(self, cls: type[Event]) -> list[Event]:
        return [e for e in self if isinstance(e, cls)]

    def to_dicts(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self]


def _stamp(event: Event, seq: int, ts: float) -> Event:
    return replace(event, seq=seq, ts=event.ts or ts)
