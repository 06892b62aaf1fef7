"""Events → polars DataFrames with fixed, documented schemas.

``frames(events)`` accepts an ``EventLog``, a list of ``Event`` objects or a list of event dicts
(``Event.to_dict()`` output, e.g. loaded from JSON) and returns ``Frames(requests, compactions,
recoveries)``. Every frame always has exactly the columns and dtypes below, also for empty input.

requests — one row per request attempt (``RequestEvent``), in log order:
    session_id str, seq i64, ts f64, turn i64, attempt i64, level i64 (the recovery level applied
    before the attempt, 0 = none), model str, bytes i64,
    tokens i64, messages i64, outcome str (ok | rejected | error | length), failure_kind str?,
    status i64?, latency_s f64, prompt_tokens i64, completion_tokens i64, cost f64,
    prefix_shared_bytes i64, prefix_share f64? (null for the first request), purpose str
    (turn | summary | continuation | probe), cached_prompt_tokens i64 and cache_write_tokens i64
    (parts of prompt_tokens read from / written to the provider's prompt cache), append_only bool?
    (the previous request body is a prefix of this one; null for the first request), cap_bytes i64? and context_window i64? (the payload cap and
    window in force when the request was sent, from the latest ``CapEvent``/``HistoryEvent``
    before it), request_index i64 (0-based position among the session's requests).

compactions — one row per finished compaction phase (``CompactionEvent`` whose outcome is not
``running``; the ``running`` event only times the phase):
    session_id str, seq i64, ts f64, turn i64, trigger str, phase str, stage str (trim | summary |
    truncation; "" for a pass that changed nothing), status str,
    outcome str, messages_before/after i64, bytes_before/after i64, tokens_before/after i64,
    freed_bytes i64 (before - after), freed_tokens i64, summarizer_prompt_tokens i64,
    summarizer_completion_tokens i64, summarizer_cost f64, identifier_retention f64? (the applied
    summary: prose + identifier ledger), prose_retention f64? (the summarizer model's prose alone),
    summary_source str (model | extractive | ""), archived i64 (number of archived keys), latency_s
    f64? (since the phase's ``running`` event, null when there was none), detail str.

recoveries — one row per recovery-ladder step (``RecoveryEvent``):
    session_id str, seq i64, ts f64, turn i64, failure_kind str, reason str, level i64,
    attempt i64, outcome str (retrying | recovered | failed | floor), bytes_before/after i64,
    tokens_before/after i64, messages_before/after i64, freed_bytes i64, freed_tokens i64,
    latency_s f64, archived i64, next_outcome str? (outcome of the session's next turn/continuation
    request after a ``retrying`` step, null otherwise), succeeded bool (outcome ``recovered``, or a
    ``retrying`` step whose next request went through).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import polars as pl

from contextkit.events import (
    CapEvent,
    CompactionEvent,
    Event,
    EventLog,
    HistoryEvent,
    RecoveryEvent,
    RequestEvent,
    event_from_dict,
)

__all__ = ["COMPACTIONS_SCHEMA", "RECOVERIES_SCHEMA", "REQUESTS_SCHEMA", "Frames", "frames", "to_events"]

_STR, _I64, _F64, _BOOL = pl.String, pl.Int64, pl.Float64, pl.Boolean
_KEYS = {"session_id": _STR, "seq": _I64, "ts": _F64, "turn": _I64}

REQUESTS_SCHEMA = pl.Schema(
    {
        **_KEYS,
        "attempt": _I64,
        "level": _I64,
        "model": _STR,
        "bytes": _I64,
        "tokens": _I64,
        "messages": _I64,
        "outcome": _STR,
        "failure_kind": _STR,
        "status": _I64,
        "latency_s": _F64,
        "prompt_tokens": _I64,
        "completion_tokens": _I64,
        "cost": _F64,
        "prefix_shared_bytes": _I64,
        "prefix_share": _F64,
        "purpose": _STR,
        "cached_prompt_tokens": _I64,
        "cache_write_tokens": _I64,
        "append_only": _BOOL,
        "cap_bytes": _I64,
        "context_window": _I64,
        "request_index": _I64,
    }
)

COMPACTIONS_SCHEMA = pl.Schema(
    {
        **_KEYS,
        "trigger": _STR,
        "phase": _STR,
        "stage": _STR,
        "status": _STR,
        "outcome": _STR,
        "messages_before": _I64,
        "messages_after": _I64,
        "bytes_before": _I64,
        "bytes_after": _I64,
        "tokens_before": _I64,
        "tokens_after": _I64,
        "freed_bytes": _I64,
        "freed_tokens": _I64,
        "summarizer_prompt_tokens": _I64,
        "summarizer_completion_tokens": _I64,
        "summarizer_cost": _F64,
        "identifier_retention": _F64,
        "prose_retention": _F64,
        "summary_source": _STR,
        "archived": _I64,
        "latency_s": _F64,
        "detail": _STR,
    }
)

RECOVERIES_SCHEMA = pl.Schema(
    {
        **_KEYS,
        "failure_kind": _STR,
        "reason": _STR,
        "level": _I64,
        "attempt": _I64,
        "outcome": _STR,
        "bytes_before": _I64,
        "bytes_after": _I64,
        "tokens_before": _I64,
        "tokens_after": _I64,
        "messages_before": _I64,
        "messages_after": _I64,
        "freed_bytes": _I64,
        "freed_tokens": _I64,
        "latency_s": _F64,
        "archived": _I64,
        "next_outcome": _STR,
        "succeeded": _BOOL,
    }
)


class Frames(NamedTuple):
    """The three analysis frames of one or more sessions (schemas in the module docstring)."""

    requests: pl.DataFrame
    compactions: pl.DataFrame
    recoveries: pl.DataFrame


def to_events(events: EventLog | Iterable[Event | Mapping[str, Any]]) -> list[Event]:
    """Normalise an EventLog, Event objects or event dicts into a list of typed events."""
    out: list[Event] = []
    for i, item in enumerate(events):
        if isinstance(item, Event):
            out.append(item)
        elif isinstance(item, Mapping):
            if "type" not in item:
                raise ValueError(
                    f"event dict {i} has no 'type' key; pass Event.to_dict() output (or the Event objects themselves)"
                )
            out.append(event_from_dict(dict(item)))
        else:
            raise TypeError(
                f"event {i} is a {type(item).__name__}; frames() takes an EventLog, Event objects or event dicts"
            )
    return out


def _frame(rows: list[dict[str, Any]], schema: pl.Schema) -> pl.DataFrame:
    columns = {name: [row[name] for row in rows] for name in schema.names()}
    return pl.DataFrame(columns, schema=schema)


def _keys(e: Event) -> dict[str, Any]:
    return {"session_id": e.session_id, "seq": e.seq, "ts": e.ts, "turn": e.turn}


def frames(events: EventLog | Iterable[Event | Mapping[str, Any]]) -> Frames:
    """Build the requests, compactions and recoveries frames from a session's events.

    Events from several sessions may be mixed (``session_id`` tells them apart); per-session
    state (cap in force, request index, phase timing) is tracked per ``session_id``.
    """
    evs = to_events(events)
    requests: list[dict[str, Any]] = []
    compactions: list[dict[str, Any]] = []
    recoveries: list[dict[str, Any]] = []
    cap: dict[str, int | None] = {}
    window: dict[str, int | None] = {}
    index: dict[str, int] = {}
    running: dict[tuple[str, str], float] = {}
    pending: dict[str, list[dict[str, Any]]] = {}  # recoveries waiting for the next request's outcome
    for e in evs:
        sid = e.session_id
        if isinstance(e, CapEvent):
            cap[sid] = e.cap_bytes
        elif isinstance(e, HistoryEvent):
            if e.cap_bytes is not None:
                cap[sid] = e.cap_bytes
            if e.context_window is not None:
                window[sid] = e.context_window
        elif isinstance(e, RequestEvent):
            n = index.get(sid, 0)
            index[sid] = n + 1
            requests.append(
                {
                    **_keys(e),
                    "attempt": e.attempt,
                    "level": e.level,
                    "model": e.model,
                    "bytes": e.bytes,
                    "tokens": e.tokens,
                    "messages": e.messages,
                    "outcome": e.outcome,
                    "failure_kind": e.failure_kind,
                    "status": e.status,
                    "latency_s": e.latency_s,
                    "prompt_tokens": e.prompt_tokens,
                    "completion_tokens": e.completion_tokens,
                    "cost": e.cost,
                    "prefix_shared_bytes": e.prefix_shared_bytes,
                    "prefix_share": e.prefix_share,
                    "purpose": e.purpose,
                    "cached_prompt_tokens": e.cached_prompt_tokens,
                    "cache_write_tokens": e.cache_write_tokens,
                    "append_only": e.append_only,
                    "cap_bytes": cap.get(sid),
                    "context_window": window.get(sid),
                    "request_index": n,
                }
            )
            if e.purpose != "summary":
                for row in pending.pop(sid, []):
                    row["next_outcome"] = e.outcome
                    row["succeeded"] = e.outcome == "ok"
        elif isinstance(e, CompactionEvent):
            if e.outcome == "running":
                running[(sid, e.phase)] = e.ts
                continue
            started = running.pop((sid, e.phase), None)
            compactions.append(
                {
                    **_keys(e),
                    "trigger": e.trigger,
                    "phase": e.phase,
                    "stage": e.stage,
                    "status": e.status,
                    "outcome": e.outcome,
                    "messages_before": e.messages_before,
                    "messages_after": e.messages_after,
                    "bytes_before": e.bytes_before,
                    "bytes_after": e.bytes_after,
                    "tokens_before": e.tokens_before,
                    "tokens_after": e.tokens_after,
                    "freed_bytes": e.bytes_before - e.bytes_after,
                    "freed_tokens": e.tokens_before - e.tokens_after,
                    "summarizer_prompt_tokens": e.summarizer_prompt_tokens,
                    "summarizer_completion_tokens": e.summarizer_completion_tokens,
                    "summarizer_cost": e.summarizer_cost,
                    "identifier_retention": e.identifier_retention,
                    "prose_retention": getattr(e, "prose_retention", None),
                    "summary_source": getattr(e, "summary_source", ""),
                    "archived": len(e.archived_keys),
                    "latency_s": max(0.0, e.ts - started) if started is not None else None,
                    "detail": e.detail,
                }
            )
        elif isinstance(e, RecoveryEvent):
            row = {
                **_keys(e),
                "failure_kind": e.failure_kind,
                "reason": e.reason,
                "level": e.level,
                "attempt": e.attempt,
                "outcome": e.outcome,
                "bytes_before": e.bytes_before,
                "bytes_after": e.bytes_after,
                "tokens_before": e.tokens_before,
                "tokens_after": e.tokens_after,
                "messages_before": e.messages_before,
                "messages_after": e.messages_after,
                "freed_bytes": e.bytes_before - e.bytes_after,
                "freed_tokens": e.tokens_before - e.tokens_after,
                "latency_s": e.latency_s,
                "archived": len(e.archived_keys),
                "next_outcome": None,
                "succeeded": e.outcome == "recovered",
            }
            recoveries.append(row)
            if e.outcome == "retrying":
                pending.setdefault(sid, []).append(row)
    return Frames(
        requests=_frame(requests, REQUESTS_SCHEMA),
        compactions=_frame(compactions, COMPACTIONS_SCHEMA),
        recoveries=_frame(recoveries, RECOVERIES_SCHEMA),
    )
