"""Random fault sequences through a session, and one turn in any loop (shared by the fault tests)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, Phase

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.engine.effects import Reply
from contextkit.errors import ContextkitError
from contextkit.events import LimitEvent
from contextkit.policy.expand import expand_markers
from contextkit.policy.oversize import is_excerpt
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace
from contextkit.tools import ToolResult
from helpers.logcheck import assert_known_limits_respected

FAULTS = ("overflow", "413", "waf403", "drop", "400", "429", "500")
SIZE_REASONS = ("fault:overflow", "fault:413", "fault:waf403", "fault:drop")
GATEWAYS: list[dict[str, Any]] = [
    {},
    {"max_body": "64KB", "reject_with": "413"},
    {"max_body": "64KB", "reject_with": "waf403"},
    {"max_body": "80KB", "reject_with": "drop"},
    {"context_window": 14_000},
]
SCHEMA_400 = "Invalid 'tools[0].function.name': string does not match pattern '^[a-zA-Z0-9_-]+$'."


def run_sequence(
    gw: GatewaySimulator, gateway: dict[str, Any], plan: list[Any], seed: int, loops: Sequence[str] = ("send",)
) -> None:
    """``loops``: the loop of turn i is ``loops[i % len(loops)]`` (send, stream or astream)."""
    gw.reset(timeout_sleep=0.3, **gateway)
    ws = Workspace(seed=seed, target_bytes=14_000)
    produced: list[str] = []

    def wrap(name: str) -> Any:
        fn = ws.tools[name]

        def tool(**kwargs: Any) -> ToolResult:
            out = fn(**kwargs)
            produced.append(out.content)
            return ToolResult(out.content, path=out.path, lines=out.lines)

        tool.__name__ = name
        tool.__doc__ = f"{name} over the workspace."
        return tool

    def read_file(path: str) -> ToolResult:
        """Read a whole file."""
        return wrap("read_file")(path=path)  # type: ignore[no-any-return]

    def grep(pattern: str) -> ToolResult:
        """Search the repository."""
        return wrap("grep")(pattern=pattern)  # type: ignore[no-any-return]

    def tail_log(n: int) -> ToolResult:
        """The last n log lines."""
        return wrap("tail_log")(n=n)  # type: ignore[no-any-return]

    def get_json(n: int) -> ToolResult:
        """A JSON document with n records."""
        return wrap("get_json")(n=n)  # type: ignore[no-any-return]

    window = gateway.get("context_window", 1_000_000)
    limits = Limits(context_window=window, retry_backoff=0.0, request_timeout=5, summary_timeout=5, cap_probe_turns=3)
    kwargs = gw.litellm_kwargs()
    model = kwargs.pop("model")
    session = Session(model, archive=Archive.in_memory(session_id="p"), session_id="p", status=None,
                      tools=[read_file, grep, tail_log, get_json], limits=limits, **kwargs)  # fmt: skip
    args = {"read_file": {"path": "src/app/core.py"}, "grep": {"pattern": "cache"}, "tail_log": {"n": 400},
            "get_json": {"n": 150}}  # fmt: skip
    originals: list[str] = []
    for i, (tool, paste, fault, times) in enumerate(plan):
        text = f"turn {i}: " + (f"[[tool:{tool} {json.dumps(args[tool])}]] " if tool else "") + "what now?"
        if paste:
            text += "\n" + ws.tail_log(paste // 60).content
        before, limits_before = session.history, limit_state(session)
        seen = len(gw.requests)
        events_before = len(session.events)
        produced.clear()
        if fault:
            gw.fail_next(fault, times, body=SCHEMA_400 if fault == "400" else None)
        try:
            reply = run_turn(session, loops[i % len(loops)], text)
            ok = True
        except ContextkitError:
            ok = False
        gw.clear_faults()
        history = session.history
        records = gw.requests[seen:]
        # (a) nothing at or above a size rejected as evidence of a limit
        assert_known_limits_respected(gw.requests)
        # (c) the task is in the history, or the failed turn left no trace
        if ok:
            assert any(m.content == text or (is_excerpt(m) and text in expand_markers(m.content, session.archive))
                       for m in history), f"turn {i}: the user's message is not in the history"  # fmt: skip
            originals += [text, *produced, reply.text]
        else:
            assert history == before, f"turn {i} failed but changed the history"
        # (b) every byte that left the history is in the archive
        # (many compactions under a tiny learned cap nest stubs deeply: follow every hop)
        expanded = expand_markers("\n\x00\n".join(m.content for m in history), session.archive, max_depth=10_000)
        missing = [c[:60] for c in originals if c not in expanded]
        assert not missing, f"turn {i}: {len(missing)} contents lost, e.g. {missing[:2]}"
        # (d) non-size failures teach nothing
        size_hit = any(not r.accepted and (r.reason in SIZE_REASONS or r.reason.startswith(("body ", "context ")))
                       for r in records)  # fmt: skip
        if not size_hit:
            learned = [
                e for e in list(session.events)[events_before:]
                if isinstance(e, LimitEvent) and e.limit in ("cap", "window") and e.source not in ("probe", "assumed")
            ]  # fmt: skip
            assert not learned, f"turn {i}: a non-size failure changed limits: {learned}"
            assert limit_state(session)[1:] == limits_before[1:]  # the window; budgets back after any episode
            assert session.payload_cap == limits_before[0] or session.payload_cap > (limits_before[0] or 0)


def run_turn(session: Session, loop: str, text: str) -> Reply:
    """One turn in ``loop``; a streamed turn shows its tool rounds' text, then exactly its reply."""
    if loop == "send":
        return session.send(text)
    rounds: list[str] = []
    unsubscribe = session.events.subscribe(
        lambda e: rounds.append(e.text) if getattr(e, "kind", "") == "tool_round" else None
    )
    if loop == "stream":
        stream = session.stream(text)
        deltas = list(stream)
    else:

        async def consume() -> tuple[list[str], Any]:
            stream = session.astream(text)
            return [d async for d in stream], stream

        deltas, stream = asyncio.run(consume())
    unsubscribe()
    shown = "".join(deltas)
    assert stream.reply is not None and shown.endswith(stream.reply.text)
    assert shown[: len(shown) - len(stream.reply.text)] == "".join(
        t + ("" if t.endswith("\n") or not t else "\n") for t in rounds
    )
    return stream.reply


def limit_state(session: Session) -> tuple[Any, ...]:
    st_ = session._state
    return st_.cap, st_.context_window, st_.turn_budget, st_.per_result_budget


PROFILE: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    # no "explain" phase: its line tracer makes a failing litellm run take minutes
    "phases": [Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
}


