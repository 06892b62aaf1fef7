"""Replay a recorded agent run through a strategy, as a real agent loop over HTTP.

The simulator plays the recorded model (``sim.replay.ReplayScript``: request n gets the n-th
recorded assistant message) behind its gateway (the window counted with tiktoken, the body cap on
the raw bytes, the prompt cache), and the agent's one tool, ``bash``, returns the recorded output of
each call. The strategy is the agent loop's context management:

* ``none`` - the whole history on every request;
* ``masking`` - observation masking: every tool output but the ``MASK_KEEP`` newest replaced by a
  placeholder (the baseline of Lindenbauer et al., "The Complexity Trap", 2025);
* ``contextkit`` - a ``Session`` told the window (and the cap), with its archive.

Plain loops (``none``, ``masking``) stop at the first failed request, as an agent without recovery
does; a ``Session`` recovers as it always does. Per step the harness records what the request held
(``StepRecord``), from which ``ReplayRun`` derives the metrics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contextkit.markers import extract_keys
from contextkit.replay.metrics import billed, first_uses
from contextkit.sim.model import Conversation
from contextkit.sim.replay import ReplayScript, Trajectory

__all__ = ["MASK_KEEP", "PRICE_AS", "STRATEGIES", "ReplayRun", "StepRecord", "replay"]

MASK_KEEP = 10
MASK_PLACEHOLDER = "[Old tool output omitted for brevity.]"
PRICE_AS = "deepseek/deepseek-chat"  # the recorded runs' own model, in litellm's cost map
STRATEGIES = ("none", "masking", "contextkit")
REQUEST_TIMEOUT = 60.0
NO_OUTPUT = "<returncode>0</returncode>\n<output>\n(no output was recorded: the run ended after this command)\n</output>"


@dataclass
class StepRecord:
    """What request k (the one answered with recorded step k) held of the agent's first-use names."""

    step: int
    needed: frozenset[str]
    verbatim: frozenset[str]
    keys: tuple[str, ...]  # markers in the request
    recalled: frozenset[str] = frozenset()  # needed, not verbatim, held by an archived original a marker names


@dataclass
class ReplayRun:
    strategy: str
    trajectory: str
    window: int
    max_body: int | None
    steps_total: int
    steps_served: int
    rejected: int
    error: str | None
    billed: float  # dollars of input and output at PRICE_AS, the prefix cache counted
    prompt_tokens: int
    cached_tokens: int
    own_s: float  # the loop's own time: wall time minus the time spent waiting for the provider
    requests: int
    records: list[StepRecord] = field(default_factory=list)

    @property
    def served_all(self) -> bool:
        return self.steps_served >= self.steps_total and self.error is None

    @property
    def needed(self) -> int:
        return sum(len(r.needed) for r in self.records)

    @property
    def verbatim_share(self) -> float | None:
        return sum(len(r.verbatim) for r in self.records) / self.needed if self.needed else None

    @property
    def reachable_share(self) -> float | None:
        """Share of first-use names present verbatim or one recall away."""
        got = sum(len(r.verbatim) + len(r.recalled) for r in self.records)
        return got / self.needed if self.needed else None

    @property
    def own_ms_per_step(self) -> float:
        return 1000 * self.own_s / max(1, self.requests)


def _request_text(conv: Conversation) -> str:
    parts = []
    for m in conv.messages:
        parts.append(m.text)
        parts.extend(c.arguments for c in m.tool_calls)
    return "\n".join(parts)


class _Observer:
    def __init__(self, traj: Trajectory) -> None:
        self.needs = first_uses(traj)
        self.records: dict[int, StepRecord] = {}

    def __call__(self, step: int, conv: Conversation) -> None:
        needed = self.needs.get(step)
        if not needed:
            return
        text = _request_text(conv)
        verbatim = frozenset(n for n in needed if n in text)
        self.records[step] = StepRecord(step, needed, verbatim, tuple(dict.fromkeys(extract_keys(text))))


class _Tool:
    """The agent's ``bash``: the recorded output of the call the replay just made."""

    def __init__(self, traj: Trajectory, script: ReplayScript) -> None:
        self.traj, self.script = traj, script
        self.used: set[str] = set()

    def output(self, command: str) -> str:
        served = next((s for s in reversed(self.script.served) if s.kind == "step"), None)
        calls = self.traj.messages[served.position].calls if served is not None else ()
        fresh = [c for c in calls if c.id not in self.used]
        match = next((c for c in fresh if _command(c.arguments) == command), fresh[0] if fresh else None)
        if match is None:
            return NO_OUTPUT
        self.used.add(match.id)
        return self.traj.output_for(match.id) or NO_OUTPUT


def _command(arguments: str) -> str:
    try:
        return str(json.loads(arguments).get("command", ""))
    except (ValueError, AttributeError):
        return ""


Shaper = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def replay(
    traj: Trajectory,
    strategy: str | Shaper,
    *,
    window: int,
    max_body: int | str | None = None,
    price_as: str = PRICE_AS,
    session_options: dict[str, Any] | None = None,
) -> ReplayRun:
    """Replay ``traj`` under ``strategy`` against a fresh simulator; the run's metrics.

    ``strategy`` is one of ``STRATEGIES`` or a function from the full wire history to the request a
    plain agent loop sends (``name`` in the run: the function's ``__name__``).
    """
    from contextkit.sim.server import GatewaySimulator

    if callable(strategy):
        shape, name = strategy, getattr(strategy, "__name__", "custom")
    elif strategy in STRATEGIES:
        shape, name = (_masking if strategy == "masking" else list), strategy
    else:
        raise ValueError(f"unknown replay strategy {strategy!r}; use one of {', '.join(STRATEGIES)} or a function")
    observer = _Observer(traj)
    script = ReplayScript(traj, observe=observer)
    tool = _Tool(traj, script)
    from contextkit import backend

    backend.litellm()  # imported before the clock starts: a first import is not a step's work
    with GatewaySimulator(context_window=window, max_body=max_body, agent=script) as sim:
        started = time.perf_counter()
        if strategy == "contextkit":
            error, waited = _session_loop(traj, script, tool, sim, window, max_body, session_options, observer)
        else:
            error, waited = _plain_loop(traj, script, tool, sim, shape)
        own = time.perf_counter() - started - waited
        records = sim.requests
    turns = [r for r in records if r.kind == "turn"]
    accepted = [r for r in records if r.accepted]
    served = {s.step for s in script.served if s.kind == "step"}
    steps = list(observer.records.values())
    return ReplayRun(
        strategy=name,
        trajectory=traj.name,
        window=window,
        max_body=sim.config.max_body,
        steps_total=len(traj.steps),
        steps_served=len(served),
        rejected=sum(1 for r in turns if not r.accepted),
        error=error,
        billed=billed(accepted, price_as),
        prompt_tokens=sum(r.tokens for r in accepted),
        cached_tokens=sum(r.cached_tokens for r in accepted),
        own_s=max(0.0, own),
        requests=len(records),
        records=sorted(steps, key=lambda r: r.step),
    )


def _masking(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tools = [i for i, m in enumerate(history) if m["role"] == "tool"]
    old = set(tools[:-MASK_KEEP]) if MASK_KEEP else set(tools)
    return [{**m, "content": MASK_PLACEHOLDER} if i in old else m for i, m in enumerate(history)]


def _plain_loop(
    traj: Trajectory,
    script: ReplayScript,
    tool: _Tool,
    sim: Any,
    shape: Shaper,
) -> tuple[str | None, float]:
    """The loop an agent without context management runs; (error, seconds waiting for the provider)."""
    from contextkit import backend

    kwargs = sim.litellm_kwargs()
    model = kwargs.pop("model")
    tools = list(traj.tool_schemas)
    history: list[dict[str, Any]] = [{"role": "system", "content": traj.system}, {"role": "user", "content": traj.task}]
    waited = 0.0
    while True:
        sent = shape(history)
        t0 = time.perf_counter()
        try:
            response = backend.completion(model, sent, timeout=REQUEST_TIMEOUT, tools=tools, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a failed request ends a plain agent's run
            waited += time.perf_counter() - t0
            return f"{type(exc).__name__}: {str(exc)[:200]}", waited
        waited += time.perf_counter() - t0
        message = response.choices[0].message
        calls = list(getattr(message, "tool_calls", None) or [])
        last = script.served[-1]
        if not calls:
            history.append({"role": "assistant", "content": message.content or ""})
            follow = script.next_user(last.position) if last.kind == "unrecorded" else None
            if follow is None:
                return None, waited
            history.append({"role": "user", "content": follow})
            continue
        history.append(
            {
                "role": "assistant",
                "content": message.content or None,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
                    for c in calls
                ],
            }
        )
        for c in calls:
            out = tool.output(_command(c.function.arguments or "{}"))
            history.append({"role": "tool", "tool_call_id": c.id, "content": out})


def _session_loop(
    traj: Trajectory,
    script: ReplayScript,
    tool: _Tool,
    sim: Any,
    window: int,
    max_body: int | str | None,
    options: dict[str, Any] | None,
    observer: _Observer,
) -> tuple[str | None, float]:
    from contextkit.archive import Archive
    from contextkit.errors import ContextkitError
    from contextkit.events import RequestEvent
    from contextkit.session.core import Session
    from contextkit.settings import Limits

    def bash(command: str) -> str:
        """Execute a bash command."""
        return tool.output(command)

    limits: dict[str, Any] = {"context_window": window, **(options or {})}
    if max_body is not None:
        limits.setdefault("max_payload", max_body)
    archive = Archive.in_memory(session_id=traj.name or "replay")
    kwargs = sim.litellm_kwargs()
    session = Session(
        kwargs.pop("model"), system=traj.system, limits=Limits(**limits), archive=archive, tools=[bash],
        session_id=traj.name or "replay", status=False, on_flush=None, **kwargs,
    )  # fmt: skip
    error: str | None = None
    text: str | None = traj.task
    try:
        while text is not None:
            try:
                session.send(text, max_rounds=10**6)
            except ContextkitError as exc:
                error = f"{type(exc).__name__}: {str(exc)[:300]}"
                break
            last = script.served[-1]
            text = script.next_user(last.position) if last.kind == "unrecorded" else None
        waited = sum(e.latency_s for e in session.events if isinstance(e, RequestEvent))
        for rec in observer.records.values():  # one recall away: an original a marker in the request names
            missing = rec.needed - rec.verbatim
            originals = [archive.get(k) or "" for k in rec.keys] if missing else []
            rec.recalled = frozenset(n for n in missing if any(n in o for o in originals))
        return error, waited
    finally:
        session.close()
        archive.close()
