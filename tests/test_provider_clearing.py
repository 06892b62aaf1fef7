"""``context_engine="provider"``: Anthropic's server-side tool-result clearing, on the simulator, mirrored locally."""

from __future__ import annotations

import json

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.events import NoticeEvent, ProviderEditEvent
from contextkit.markers import extract_keys_tolerant
from contextkit.policy.clearing import CLEARED_PREFIX
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator
from contextkit.sim.context_edit import clear_tool_uses as sim_clear
from contextkit.tools import ToolResult
from contextkit.widgets.dashboard import StatsTable
from contextkit.widgets.gauge import HistoryGauge


def part(n: int) -> str:
    return "".join(f"part {n} line {i}: request id-{n}-{i} served in {i % 97} ms by worker-{i % 5}\n" for i in range(220))


def read_log(n: int) -> ToolResult:
    """Read part n of the service log."""
    return ToolResult(part(n), path=f"logs/part{n}.log")


def test_a_40_turn_agent_is_cleared_by_the_provider_and_mirrored_locally() -> None:
    with GatewaySimulator(record_bodies=True) as gw:
        kw = gw.litellm_kwargs("anthropic")
        model = kw.pop("model")
        session = Session(
            model, **kw, tools=[read_log], context_engine="provider", archive=Archive.in_memory(session_id="p"),
            # a large window: the local pressure rules stay quiet, so the provider's edit does the clearing
            limits=Limits(context_window=1_000_000, tool_result_max_chars=50_000), status=None,
        )  # fmt: skip
        for i in range(40):
            session.send(f'[[tool:read_log {{"n": {i}}}]] step {i}')
        bodies = [json.loads(gw.body(r.seq)) for r in gw.requests if r.kind == "turn"]
        betas = [gw.headers(r.seq).get("anthropic-beta", "") for r in gw.requests if r.kind == "turn"]
        peak = max(r.tokens for r in gw.requests)
    # every request carried the edit and the beta header litellm adds for it, as the simulator received them
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 100_000},
            "keep": {"type": "tool_uses", "value": 5}, "clear_at_least": {"type": "input_tokens", "value": 20_000}}  # fmt: skip
    assert all(b.get("context_management") == {"edits": [edit]} for b in bodies)
    assert len(betas) == 80 and all("context-management-2025-06-27" in [x.strip() for x in b.split(",")] for b in betas)
    stats = session.stats
    assert stats.provider_edits >= 1 and stats.provider_cleared_results >= 15
    assert stats.provider_cleared_tokens >= 20_000 * stats.provider_edits
    assert peak < 130_000  # the prompt fell back below the trigger after each edit, instead of growing to 200k
    # the local history mirrors it: every tool result but the 5 newest is a stub, each original recallable
    results = [m for m in session.history if m.role == "tool"]
    assert len(results) == 40
    stubs = [m for m in results if m.content.startswith(CLEARED_PREFIX)]
    assert len(stubs) >= 15 and all(not m.content.startswith(CLEARED_PREFIX) for m in results[-5:])
    for m in stubs:
        n = int(m.origin.path.removeprefix("logs/part").removesuffix(".log"))  # type: ignore[union-attr]
        (key,) = extract_keys_tolerant(m.content)
        assert session.archive.get(key) == part(n)
    # events and stats say what was cleared; the cache writes that followed were counted as rebuilds
    notices = [e for e in session.events if isinstance(e, NoticeEvent) and e.code == "provider_clearing"]
    assert len(notices) == stats.provider_edits
    assert "the provider cleared" in notices[0].text and "tokens" in notices[0].text
    assert stats.expected_cache_rebuilds == stats.provider_edits
    rebuilds = [e for e in session.events if isinstance(e, NoticeEvent) and e.code == "cache_rebuild"]
    assert len(rebuilds) == stats.expected_cache_rebuilds and "expected rebuild" in rebuilds[0].text
    edits = [e for e in session.events if isinstance(e, ProviderEditEvent)]
    assert sum(e.cleared_results for e in edits) == stats.provider_cleared_results and len(edits) == stats.provider_edits
    # the dashboard's gauge shows the totals
    gauge = HistoryGauge(session)
    assert gauge.provider_cleared_tokens == stats.provider_cleared_tokens
    assert f"provider cleared {stats.provider_cleared_results} tool results" in gauge.info.value
    table = StatsTable(session)  # the dashboard's numbers: the rebuilds and the cleared tokens
    assert table.stats["expected_cache_rebuilds"] == stats.expected_cache_rebuilds
    assert table.stats["provider_cleared_tokens"] == stats.provider_cleared_tokens
    assert "prompt cache rebuilds after a provider edit" in table.table.value


def test_a_provider_without_server_side_editing_ignores_the_option_and_says_so_once() -> None:
    with GatewaySimulator(record_bodies=True) as gw:
        kw = gw.litellm_kwargs("openai")
        model = kw.pop("model")
        session = Session(model, **kw, context_engine="provider", archive=Archive.in_memory(session_id="o"), status=None)
        session.send("hello")
        session.send("again")
        body = json.loads(gw.body(gw.requests[-1].seq))
    assert "context_management" not in body
    notices = [e for e in session.events if isinstance(e, NoticeEvent) and e.code == "provider_engine"]
    assert len(notices) == 1 and "ignored" in notices[0].text


def _body(results: int, chars: int) -> dict[str, object]:
    messages: list[dict[str, object]] = [{"role": "user", "content": "go"}]
    for i in range(results):
        messages.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "r", "input": {}}]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "x" * chars}]})
    return {"messages": messages, "context_management": {"edits": [{
        "type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 1_000},
        "keep": {"type": "tool_uses", "value": 2}, "clear_at_least": {"type": "input_tokens", "value": 500}}]}}  # fmt: skip


def _chars(body: object) -> int:
    return len(json.dumps(body)) // 4  # tokens, roughly: enough for the edit's arithmetic


def test_the_simulators_edit_follows_trigger_keep_and_clear_at_least() -> None:
    edited, applied = sim_clear(_body(6, 2_000), _chars)
    assert applied is not None and applied["cleared_tool_uses"] == 4 and applied["cleared_input_tokens"] > 500
    kept = [p["content"] for m in edited["messages"] if isinstance(m["content"], list)  # type: ignore[index]
            for p in m["content"] if p["type"] == "tool_result"]  # type: ignore[index]  # fmt: skip
    assert kept[-2:] == ["x" * 2_000] * 2 and all(c != "x" * 2_000 for c in kept[:4])
    assert sim_clear(_body(2, 200), _chars)[1] is None  # below the trigger
    assert _chars(_body(3, 1_500)) > 1_000  # above the trigger, but
    assert sim_clear(_body(3, 1_500), _chars)[1] is None  # would free fewer than clear_at_least tokens
