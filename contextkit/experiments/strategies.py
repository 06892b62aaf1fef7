"""Context-management strategies compared by the experiment runner.

* ``contextkit`` — the full pipeline: a ``Session`` told the gateway cap and the window.
* ``contextkit-no-microcompact`` — the same with microcompact effectively disabled.
* ``contextkit-learned-cap`` — the full pipeline with no cap configured: it learns the cap from
  the first rejection.
* ``contextkit-always-on`` — the full pipeline as it was before pressure gating: microcompact and read
  dedup rewrite old tool results on every request (``Limits(pressure_trigger=0)``), whatever the
  pressure, so the provider's prompt cache breaks at nearly every request; no cache breakpoints;
  an output over the per-result budget enters as the fixed 5,000-char preview
  (``tool_result_preview_share=0``).
* ``none`` — no management: the whole history on every request (``contextkit.backend.completion``).
* ``sliding-window`` — the system messages plus the last ``SLIDING_WINDOW_MESSAGES`` messages,
  cut so no tool result loses its call.
* ``trim_messages`` — litellm's ``trim_messages`` to 75% of the window (tokens), as litellm users do.
* ``anthropic-clearing`` — Anthropic-style context editing (``contextkit.policy.clearing``) applied
  to the full history before every request, as the server does: above ``CLEARING_TRIGGER`` of the
  window or the cap it clears every tool result but the last ``CLEARING_KEEP`` if that frees at
  least ``CLEARING_AT_LEAST`` of the window (cleared results are archived in memory; no recall
  tool is offered, as with Anthropic's server-side clearing).
* ``forget-all`` — the system messages plus the current turn only: the floor of the needle metric
  (it completes every turn and can answer no needle question).

Peers — other libraries driven as their users drive them — live in ``experiments.peers``; every
strategy the sweeps know is in ``experiments.registry``.

Baselines make one attempt per request (no retries) and stop at the first failed request: an
agent that got no answer cannot take its next step. Each runner returns a ``StrategyRun``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contextkit.events import Event, EventLog, RequestEvent
from contextkit.experiments.workload import SYSTEM_PROMPT, GatewaySpec, RunTimeout, Workload
from contextkit.messages import reply_to_wire

__all__ = [
    "BASELINES",
    "CONTEXTKIT_STRATEGIES",
    "SLIDING_WINDOW_MESSAGES",
    "StrategyRun",
    "clearing_shaper",
    "forget_all",
    "run_builtin",
    "sliding_window",
]

PRICE_AS = "gpt-4.1"  # a real model with automatic prompt caching; litellm's local cost map prices it
SLIDING_WINDOW_MESSAGES = 8
TRIM_RATIO = 0.75
REQUEST_TIMEOUT = 30.0
MAX_TOOL_ROUNDS = 8
CONTEXTKIT_STRATEGIES = ("contextkit", "contextkit-no-microcompact", "contextkit-learned-cap", "contextkit-always-on")
BASELINES = ("none", "sliding-window", "trim_messages", "anthropic-clearing", "forget-all")
# Anthropic's defaults are 100,000 tokens / keep 3 / no minimum for 200k-token windows; scaled here
# to the experiment's window and cap. One result kept: three raw 20-60 KB outputs exceed 128 KB.
CLEARING_TRIGGER = 0.60
CLEARING_KEEP = 1
CLEARING_AT_LEAST = 0.10


@dataclass
class StrategyRun:
    """What one strategy did with one workload (metrics are derived by the runner)."""

    turns_completed: int
    error: str | None
    events: list[Event]
    retries: int = 0
    summarizer_cost: float = 0.0
    archived_items: int | None = None  # None: the strategy has no archive
    recoverable: float = 0.0  # share of tool outputs in the final context or recallable from it
    stats: dict[str, Any] = field(default_factory=dict)
    replies: dict[int, str] = field(default_factory=dict)  # turn -> final reply text (needle grading)
    note: str | None = None  # how the strategy was configured (peers: library versions, settings)


def sliding_window(history: list[dict[str, Any]], keep: int = SLIDING_WINDOW_MESSAGES) -> list[dict[str, Any]]:
    """System messages plus the last ``keep`` others; leading tool results (whose call was cut) go too."""
    system = [m for m in history if m["role"] == "system"]
    rest = [m for m in history if m["role"] != "system"]
    tail = rest[-keep:] if keep > 0 else []
    while tail and tail[0]["role"] == "tool":
        tail = tail[1:]
    return system + tail


def forget_all(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """System messages plus everything from the last user message on (the current turn only)."""
    last_user = max((i for i, m in enumerate(history) if m["role"] == "user"), default=len(history))
    return [m for m in history[:last_user] if m["role"] == "system"] + history[last_user:]


def clearing_shaper(
    gw: GatewaySpec, tools: list[dict[str, Any]] | None = None, model: str = ""
) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """``anthropic-clearing``: a function from the full wire history to the edited request."""
    from contextkit.messages import from_wire, to_wire_list
    from contextkit.policy.clearing import ClearingConfig, clear_tool_uses
    from contextkit.policy.testing import MemorySink
    from contextkit.sizing import RequestMeter, parse_size

    meter, sink = RequestMeter(model), MemorySink()
    cap = None if gw.max_body is None else parse_size(gw.max_body, what="max_body")

    def tokens(history: Any) -> int:
        m = meter.measure(history, tools=tools)
        # the gateway counts bytes: express its cap as the equivalent share of the window
        return max(m.tokens, int(m.bytes / cap * gw.context_window)) if cap else m.tokens

    config = ClearingConfig(
        trigger=int(gw.context_window * CLEARING_TRIGGER),
        keep=CLEARING_KEEP,
        clear_at_least=int(gw.context_window * CLEARING_AT_LEAST),
    )

    def shape(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        messages = [from_wire(m, index=i) for i, m in enumerate(history)]
        out, _ = clear_tool_uses(messages, archive=sink, count_tokens=tokens, config=config)
        return to_wire_list(out)

    return shape


def _shaper(
    strategy: str, gw: GatewaySpec, tools: list[dict[str, Any]] | None = None
) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    if strategy == "anthropic-clearing":
        return clearing_shaper(gw, tools)
    if strategy == "none":
        return list
    if strategy == "sliding-window":
        return sliding_window
    if strategy == "forget-all":
        return forget_all
    if strategy == "trim_messages":
        from contextkit import backend

        backend.litellm()  # through the one module that imports litellm, so offline() applies first
        budget = int(gw.context_window * TRIM_RATIO)
        return lambda history: backend.trim_messages(history, model="", max_tokens=budget)
    raise ValueError(f"unknown baseline {strategy!r}; use one of {', '.join(BASELINES)}")


def _share_in(outputs: list[str], text: str) -> float:
    return sum(1 for o in outputs if o in text) / len(outputs) if outputs else 1.0


def _baseline(strategy: str, workload: Workload, gw: GatewaySpec, sim: Any, run_id: str) -> StrategyRun:
    from contextkit import backend
    from contextkit.failures.classify import classify_failure
    from contextkit.sizing import request_bytes

    tools = workload.tool_schemas
    shape = _shaper(strategy, gw, tools)
    kwargs = sim.litellm_kwargs()
    model = kwargs.pop("model")
    log = EventLog()
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    sent: list[dict[str, Any]] = history

    def record(turn: int, size: int, count: int, started: float, **fields: Any) -> None:
        log.append(
            RequestEvent(
                session_id=run_id, turn=turn, model=model, bytes=size, messages=count,
                latency_s=time.perf_counter() - started, **fields,
            )
        )  # fmt: skip

    replies: dict[int, str] = {}

    def stopped(turn: int, error: str) -> StrategyRun:
        return StrategyRun(turn, error, list(log), recoverable=_share_in(workload.outputs, _text(sent)), replies=replies)

    for turn in range(workload.turns):
        try:
            history.append({"role": "user", "content": workload.user_message(turn)})
        except RunTimeout as exc:
            return stopped(turn, str(exc))
        for _ in range(MAX_TOOL_ROUNDS):
            try:
                sent = shape(history)
            except Exception as exc:  # noqa: BLE001 - a baseline that crashes is a result, not a bug here
                return stopped(turn, f"{strategy} failed: {type(exc).__name__}: {exc}")
            size = request_bytes(sent, tools=tools, model=model)
            started = time.perf_counter()
            try:
                response = backend.completion(model, sent, timeout=REQUEST_TIMEOUT, tools=tools, **kwargs)
            except Exception as exc:  # noqa: BLE001 - every provider/gateway error ends a baseline run
                failure = classify_failure(exc, request_bytes=size)
                kind = failure.kind.value
                record(turn, size, len(sent), started, outcome="rejected", failure_kind=kind, status=failure.status)
                return stopped(turn, f"{kind}: {failure.reason}")
            usage = getattr(response, "usage", None)
            record(
                turn, size, len(sent), started, outcome="ok",
                prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            )  # fmt: skip
            message = response.choices[0].message
            calls = list(getattr(message, "tool_calls", None) or [])
            history.append(reply_to_wire(message))
            if not calls:
                replies[turn] = message.content or ""
                break
            for c in calls:
                result = workload.call(c.function.name, c.function.arguments or "{}")
                history.append({"role": "tool", "tool_call_id": c.id, "content": result})
        else:
            return stopped(turn, f"turn {turn + 1} needed more than {MAX_TOOL_ROUNDS} tool rounds")
    return StrategyRun(
        workload.turns, None, list(log), recoverable=_share_in(workload.outputs, _text(sent)), replies=replies
    )


def _text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


def _contextkit(strategy: str, workload: Workload, gw: GatewaySpec, sim: Any, run_id: str) -> StrategyRun:
    from contextkit.archive import Archive
    from contextkit.errors import ContextkitError
    from contextkit.policy.expand import reachable
    from contextkit.session.core import Session
    from contextkit.settings import Limits

    limits: dict[str, Any] = {"context_window": gw.context_window}
    if strategy != "contextkit-learned-cap" and gw.max_body is not None:
        limits["max_payload"] = gw.max_body
    if strategy == "contextkit-no-microcompact":
        limits.update(microcompact_truncate_turns=10**6, microcompact_summarize_turns=10**6)
    if strategy == "contextkit-always-on":
        limits.update(pressure_trigger=0.0, tool_result_preview_share=0.0)
    archive = Archive.in_memory(session_id=run_id)
    kwargs = sim.litellm_kwargs()
    session = Session(
        kwargs.pop("model"), system=SYSTEM_PROMPT, limits=Limits(**limits), archive=archive,
        tools=workload.session_tools(), session_id=run_id, status=False, on_flush=None,
        cache_breakpoints=False if strategy == "contextkit-always-on" else None, price_as=PRICE_AS, **kwargs,
    )  # fmt: skip
    error: str | None = None
    done = 0
    replies: dict[int, str] = {}
    try:
        for turn in range(workload.turns):
            try:
                replies[turn] = session.send(workload.user_message(turn)).text
            except RunTimeout as exc:
                error = str(exc)
                break
            except ContextkitError as exc:
                error = f"{type(exc).__name__}: {exc}"
                break
            done = turn + 1
        events = list(session.events)
        entries = archive.entries()
        context = "\n".join(m.content for m in session.history)
        expanded = "\n".join([context, *reachable(context, archive).values()])
        stats = session.stats.to_dict()
        return StrategyRun(
            turns_completed=done,
            error=error,
            events=events,
            retries=_retries(events),
            summarizer_cost=float(stats.get("summarizer_cost") or 0.0),
            archived_items=len(entries),
            recoverable=_share_in(workload.outputs, expanded),
            stats=stats,
            replies=replies,
        )
    finally:
        archive.close()


def _retries(events: list[Event]) -> int:
    """Requests sent right after a failed request (a retry or a recovery attempt)."""
    outcomes = [e.outcome for e in events if isinstance(e, RequestEvent) and e.purpose != "summary"]
    return sum(1 for prev in outcomes[:-1] if prev not in ("ok", "length"))


def run_builtin(strategy: str, workload: Workload, gw: GatewaySpec, sim: Any, run_id: str) -> StrategyRun:
    """Run ``workload`` under a contextkit strategy or a baseline against the running simulator."""
    if strategy in CONTEXTKIT_STRATEGIES:
        return _contextkit(strategy, workload, gw, sim, run_id)
    return _baseline(strategy, workload, gw, sim, run_id)
