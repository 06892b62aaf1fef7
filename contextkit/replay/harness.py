"""Replay a recorded agent run through a strategy, as a real agent loop over HTTP.

The simulator plays the recorded model (``sim.replay.ReplayScript``: request n gets the n-th
recorded assistant message) behind its gateway (the window counted with tiktoken, the body cap on
the raw bytes, the prompt cache), and the agent's one tool, ``bash``, returns the recorded output of
each call. The strategy is the agent loop's context management:

* ``none`` - the whole history on every request;
* ``masking`` - observation masking: every tool output but the ``MASK_KEEP`` newest replaced by a
  placeholder (the baseline of Lindenbauer et al., "The Complexity Trap", 2025);
* ``contextkit`` - a ``Session`` told the window (and the cap), with its archive;
* the peers of ``replay.peers`` (``REPLAY_PEERS``): LangChain v1's summarization and
  context-editing middleware, Anthropic-style clearing, litellm's ``compress``, headroom.

Plain loops (``none``, ``masking``, the clearing and compress peers) stop at the first failed request, as an agent without recovery
does; a ``Session`` recovers as it always does. Per step the harness records what the request held
(``StepRecord``), from which ``ReplayRun`` derives the metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from contextkit.markers import extract_keys
from contextkit.replay.loop import Plain, Tool, plain_loop
from contextkit.replay.metrics import billed, first_uses
from contextkit.replay.peers import REPLAY_PEERS, peer_status, plain_peer, run_langchain
from contextkit.sim.model import Conversation
from contextkit.sim.replay import ReplayScript, Trajectory

__all__ = ["MASK_KEEP", "PRICE_AS", "REPLAY_PEERS", "STRATEGIES", "ReplayRun", "SentRequest", "StepRecord", "replay"]

MASK_KEEP = 10
MASK_PLACEHOLDER = "[Old tool output omitted for brevity.]"
PRICE_AS = "deepseek/deepseek-chat"  # the recorded runs' own model, in litellm's cost map
STRATEGIES = ("none", "masking", "contextkit", *REPLAY_PEERS)
PLAIN_PEERS = ("anthropic-clearing", "litellm-compress", "headroom")


@dataclass
class StepRecord:
    """What request k (the one answered with recorded step k) held of the agent's first-use names."""

    step: int
    needed: frozenset[str]
    verbatim: frozenset[str]
    keys: tuple[str, ...]  # markers in the request
    recalled: frozenset[str] = frozenset()  # needed, not verbatim, held by an archived original a marker names


@dataclass(frozen=True)
class SentRequest:
    """One request the simulator received, in order: ``step`` is the recorded step it was answered with
    (None: rejected, a summary request, or a placeholder reply)."""

    kind: str  # "turn" | "summary"
    tokens: int  # the simulator's count of the request
    bytes: int
    accepted: bool
    step: int | None


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
    sent: list[SentRequest] = field(default_factory=list)
    note: str = ""  # how the strategy was configured (peers: library versions, settings), or why it did not run
    available: bool = True  # False: the strategy could not run here (``error`` says why)

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


Shaper = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def _request_text(conv: Conversation) -> str:
    parts = []
    for m in conv.messages:
        parts.append(m.text)
        parts.extend(c.arguments for c in m.tool_calls)
    return "\n".join(parts)


class _Observer:
    def __init__(self, traj: Trajectory, keys: Callable[[str], Iterable[str]] = extract_keys) -> None:
        self.needs = first_uses(traj)
        self.keys = keys
        self.records: dict[int, StepRecord] = {}

    def __call__(self, step: int, conv: Conversation) -> None:
        needed = self.needs.get(step)
        if not needed:
            return
        text = _request_text(conv)
        verbatim = frozenset(n for n in needed if n in text)
        self.records[step] = StepRecord(step, needed, verbatim, tuple(dict.fromkeys(self.keys(text))))

    def resolve(self, original: Callable[[str], str | None]) -> None:
        """One recall away: a needed name an original named by a marker in the request holds."""
        for rec in self.records.values():
            missing = rec.needed - rec.verbatim
            originals = [original(k) or "" for k in rec.keys] if missing else []
            rec.recalled = frozenset(n for n in missing if any(n in o for o in originals))


def _builtin(strategy: str | Shaper) -> Plain:
    if callable(strategy):
        shape = strategy
        return Plain(getattr(strategy, "__name__", "custom"), lambda history: (shape(history), []))
    if strategy == "masking":
        return Plain("masking", lambda history: (_masking(history), []), note=f"keep the {MASK_KEEP} newest outputs")
    return Plain("none", lambda history: (list(history), []))


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
    plain agent loop sends (``name`` in the run: the function's ``__name__``). A peer that cannot
    run here (its library missing) gives a run that says why (``available`` false, ``error``).
    """
    from contextkit.sim.server import GatewaySimulator

    if not callable(strategy) and strategy not in STRATEGIES:
        raise ValueError(f"unknown replay strategy {strategy!r}; use one of {', '.join(STRATEGIES)} or a function")
    name = strategy if isinstance(strategy, str) else getattr(strategy, "__name__", "custom")
    if name in REPLAY_PEERS:
        why = peer_status(name)
        if why is not None:
            return ReplayRun(name, traj.name, window, None, len(traj.steps), 0, 0, f"not run: {why}", 0.0, 0, 0,
                             0.0, 0, note=why, available=False)  # fmt: skip
    plain: Plain | None = None
    if callable(strategy) or strategy in ("none", "masking"):
        plain = _builtin(strategy)
    elif strategy in PLAIN_PEERS:
        plain = plain_peer(strategy, traj, window, max_body)
    observer = _Observer(traj, plain.keys if plain is not None else extract_keys)
    script = ReplayScript(traj, observe=observer)
    tool = Tool(traj, script)
    from contextkit import backend

    backend.litellm()  # imported before the clock starts: a first import is not a step's work
    how = plain.note if plain is not None else ""
    with GatewaySimulator(context_window=window, max_body=max_body, agent=script) as sim:
        started = time.perf_counter()
        if strategy == "contextkit":
            error, waited = _session_loop(traj, script, tool, sim, window, max_body, session_options, observer)
        elif plain is not None:
            error, waited = plain_loop(traj, script, tool, sim, plain)
            observer.resolve(plain.original)
        else:
            error, waited, how = run_langchain(name, traj, script, tool, sim, window)
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
        sent=_sent(records, script),
        note=how,
    )


def _sent(records: list[Any], script: ReplayScript) -> list[SentRequest]:
    # requests are sequential: the accepted turn requests met the script in order, one reply each
    served = iter(script.served)
    out = []
    for r in records:
        reply = next(served, None) if r.accepted and r.kind == "turn" else None
        step = reply.step if reply is not None else None
        out.append(SentRequest(r.kind, r.tokens, r.bytes, r.accepted, step))
    return out


def _masking(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tools = [i for i, m in enumerate(history) if m["role"] == "tool"]
    old = set(tools[:-MASK_KEEP]) if MASK_KEEP else set(tools)
    return [{**m, "content": MASK_PLACEHOLDER} if i in old else m for i, m in enumerate(history)]


def _session_loop(
    traj: Trajectory,
    script: ReplayScript,
    tool: Tool,
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
        observer.resolve(archive.get)
        return error, waited
    finally:
        session.close()
        archive.close()
