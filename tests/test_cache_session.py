"""Cache-aware sessions against the simulator over real HTTP: append-only below the trigger,
batched breaks above it, accounting from litellm's usage object, breakpoints, stable tool schemas."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from contextkit import Limits, Session, backend
from contextkit.archive import Archive
from contextkit.events import CompactionEvent, NoticeEvent, RecoveryEvent, RequestEvent
from contextkit.limits.state import SessionStats
from contextkit.policy.oversize import EXCERPT_TAG
from contextkit.sim import GatewaySimulator, Workspace
from contextkit.sim.wire import prompt_blocks

PRICE = "anthropic/claude-sonnet-4-5"


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewaySimulator]:
    with GatewaySimulator(record_bodies=True) as sim:
        yield sim


def agent(gw: GatewaySimulator, route: str = "openai", **kw: Any) -> Session:
    kwargs = gw.litellm_kwargs(route)
    ws = Workspace(seed=3, target_bytes=kw.pop("file_bytes", 4_000))
    return Session(
        kwargs.pop("model"), system="You are a coding agent. " * 80, archive=Archive.in_memory(),
        tools=list(ws.tools.values()), status=False, on_flush=None, **kwargs, **kw,
    )  # fmt: skip


def read_turns(session: Session, turns: int, start: int = 0) -> None:
    for t in range(start, start + turns):
        session.send(f'turn {t} [[tool:read_file {{"path": "src/mod/file_{t:02d}.py"}}]]')


def requests(session: Session) -> list[RequestEvent]:
    return [e for e in session.events if isinstance(e, RequestEvent)]


def wire_append_only(gw: GatewaySimulator) -> list[bool]:
    """From the simulator's own log: is each accepted turn request an extension of the previous one?"""
    digests = [
        [b.digest for b in prompt_blocks(r.route, json.loads(gw.body(r.seq)))]
        for r in gw.requests
        if r.accepted and r.kind == "turn"
    ]
    return [len(a) <= len(b) and b[len(a) - 1] == a[-1] for a, b in itertools.pairwise(digests)]


def test_below_the_trigger_every_request_is_append_only(gw: GatewaySimulator):
    gw.reset()
    session = agent(gw, limits=Limits(context_window=1_000_000))
    read_turns(session, 15)
    flags = [e.append_only for e in requests(session)]
    assert flags[0] is None and all(flags[1:]) and len(flags) == 30
    assert wire_append_only(gw) == flags[1:]  # the event agrees with the bytes the provider received
    assert session.stats.cache_breaks == 0 and session.stats.cached_share > 0.8


def test_the_append_only_metric_can_fail(gw: GatewaySimulator):
    """The same conversation with the behaviour before pressure gating (rewrite on every request) breaks the
    prefix again and again; the metric, the events and the provider's cache all see it."""
    gw.reset()
    session = agent(gw, limits=Limits(context_window=1_000_000, pressure_trigger=0))
    read_turns(session, 15)
    events = requests(session)
    flags = [e.append_only for e in events]
    assert flags.count(False) >= 8 and wire_append_only(gw) == flags[1:]
    assert session.stats.cache_breaks == flags.count(False)
    broken = [e for e in events if e.append_only is False]
    kept = [e for e in events if e.append_only]
    share = lambda es: sum(e.cached_prompt_tokens for e in es) / sum(e.prompt_tokens for e in es)  # noqa: E731
    assert share(broken) < share(kept)  # a break costs cached tokens


def test_under_pressure_the_history_is_rewritten_in_few_large_steps(gw: GatewaySimulator):
    gw.reset()
    session = agent(gw, limits=Limits(context_window=12_000, max_payload="64KB"), file_bytes=3_000)
    read_turns(session, 30)
    events = requests(session)
    assert all(e.outcome == "ok" for e in events) and len(events) == 60
    breaks = [e for e in events if e.append_only is False]
    passes = [e for e in session.events if isinstance(e, NoticeEvent) and e.code == "pressure"]
    assert 1 <= len(breaks) <= 8 and len(passes) == len(breaks)  # every break is a pressure pass, explained
    assert all("the prompt cache restarts" in p.text for p in passes)
    always_on = agent(
        gw, limits=Limits(context_window=12_000, max_payload="64KB", pressure_trigger=0), file_bytes=3_000
    )
    read_turns(always_on, 30)
    assert sum(e.append_only is False for e in requests(always_on)) > 2 * len(breaks)


def test_compaction_does_not_trim_turn_after_turn_once_stubs_fill_the_history(gw: GatewaySimulator):
    """Late in a long run the history is mostly stubs of earlier passes: a compaction's trim stage
    frees a few KB, just under its budget, and the next turn's read puts it over again. A trim that
    leaves no room is not the end of the pass (it goes on to the summary), so compaction does not
    rewrite the history - a prompt-cache break - on consecutive turns."""
    gw.reset(context_window=24_000)
    session = agent(gw, limits=Limits(context_window=24_000), file_bytes=4_000)
    read_turns(session, 90)
    assert all(e.outcome == "ok" for e in requests(session))
    done = [e for e in session.events if isinstance(e, CompactionEvent) and e.phase == "done" and e.outcome == "applied"]
    assert any(e.stage == "summary" for e in done), [e.stage for e in done]
    trims = sorted(e.turn for e in done if e.stage == "trim")
    assert not any(b - a <= 1 for a, b in itertools.pairwise(trims)), trims
    gw.reset()


@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_accounting_comes_from_the_providers_usage(gw: GatewaySimulator, route: str):
    gw.reset()
    session = agent(gw, route, limits=Limits(context_window=1_000_000), price_as=PRICE)
    read_turns(session, 6)
    events = requests(session)
    records = [r for r in gw.requests if r.kind == "turn"]
    assert len(events) == len(records) == 12
    for e, r in zip(events, records, strict=True):
        assert (e.prompt_tokens, e.cached_prompt_tokens, e.completion_tokens) == (
            r.tokens,
            r.cached_tokens,
            r.completion_tokens,
        )
        assert e.cache_write_tokens == (r.cache_write_tokens if route == "anthropic" else 0)  # OpenAI reports no writes
        assert e.cost == pytest.approx(
            backend.request_cost(PRICE, prompt_tokens=r.tokens, completion_tokens=r.completion_tokens,
                                 cached_tokens=r.cached_tokens, cache_write_tokens=e.cache_write_tokens)
        )  # fmt: skip
    stats = session.stats
    assert stats.cached_prompt_tokens == sum(r.cached_tokens for r in records) > 0
    assert stats.cached_share == pytest.approx(stats.cached_prompt_tokens / stats.prompt_tokens)
    assert stats.cost == pytest.approx(sum(e.cost for e in events)) and stats.cost > 0
    shown = stats.to_dict()  # what Session._repr_html_, the dashboard and save() see
    assert shown["cached_share"] == stats.cached_share and SessionStats.from_dict(shown) == stats
    unpriced = agent(gw, route, limits=Limits(context_window=1_000_000))
    read_turns(unpriced, 1)
    assert unpriced.stats.cost == 0.0  # the simulator's own model has no price


def test_price_as_must_be_a_priced_model(gw: GatewaySimulator):
    from contextkit.errors import ConfigError

    with pytest.raises(ConfigError, match="cost map"):
        agent(gw, price_as="nobody/knows-this-model")
    with pytest.raises(ConfigError, match="cache_breakpoints"):
        agent(gw, cache_breakpoints="yes")


def test_breakpoints_on_the_anthropic_route_keep_the_prefix_across_a_rewrite(gw: GatewaySimulator):
    gw.reset()
    session = agent(gw, "anthropic", limits=Limits(context_window=12_000, max_payload="64KB"), file_bytes=3_000)
    assert session.cache_breakpoints
    read_turns(session, 24)
    turn = [r for r in gw.requests if r.kind == "turn"]
    marked = [
        [i for i, m in enumerate(json.loads(gw.body(r.seq))["messages"]) if "cache_control" in json.dumps(m)]
        for r in turn
    ]
    assert all("cache_control" in json.dumps(json.loads(gw.body(r.seq))["system"]) for r in turn)
    assert all(1 <= len(m) <= 3 for m in marked)  # system + anchor + last message, at most
    events = requests(session)
    broken = [i for i, e in enumerate(events) if e.append_only is False]
    assert len(broken) >= 2, "the pressure pass rewrote the history more than once"
    for i in broken[1:]:  # the rewrite did not cost the whole prompt: the prefix up to the old anchor was read
        assert events[i].cached_prompt_tokens >= 1024
        # old anchor, new anchor, last - or the anchor stayed: the pass cleared only results after it
        # (it clears by what a result holds, not by age, so an older result may stay verbatim)
        assert len(marked[i]) == 3 or (len(marked[i]) == 2 and marked[i][0] == marked[i - 1][0])
    assert sum(e.cached_prompt_tokens for e in events) / sum(e.prompt_tokens for e in events) > 0.5
    plain = agent(gw, "anthropic", limits=Limits(context_window=1_000_000), cache_breakpoints=False)
    gw.clear_log()
    read_turns(plain, 3)
    assert all("cache_control" not in gw.body(r.seq).decode() for r in gw.requests)
    assert plain.stats.cached_prompt_tokens == 0  # Anthropic caches nothing without breakpoints


def test_tool_schemas_are_decided_once_and_stay_byte_identical(gw: GatewaySimulator):
    gw.reset(context_window=3_000)
    chat = Session(gw.model, api_base=gw.api_base, api_key="k", system="Be brief.", archive=Archive.in_memory(),
                   limits=Limits(context_window=3_000), status=False, on_flush=None)  # fmt: skip
    assert chat.tool_schemas == []  # a plain chat with an empty archive sends no tools at all
    for i in range(10):
        chat.send(f"message {i}: " + "lorem ipsum dolor sit amet " * 40)
    tools = [json.loads(gw.body(r.seq)).get("tools") for r in gw.requests if r.kind == "turn"]
    first = next(i for i, t in enumerate(tools) if t)
    assert not any(tools[:first]) and len(chat.archive) > 0
    assert {json.dumps(t) for t in tools[first:]} == {json.dumps(tools[first])}  # never removed, never changed
    assert [t["function"]["name"] for t in tools[first]] == ["recall"]
    assert chat.tool_schemas == tools[first]
    notices = [e for e in chat.events if isinstance(e, NoticeEvent) and e.code == "recall_tool"]
    assert len(notices) == 1
    requests_ = requests(chat)
    assert requests_[first].append_only is False  # it entered with a rewrite, not on its own
    gw.reset()
    session = agent(gw, limits=Limits(context_window=12_000, max_payload="64KB"), file_bytes=3_000)
    read_turns(session, 12)
    bodies = {json.dumps(json.loads(gw.body(r.seq))["tools"]) for r in gw.requests if r.kind == "turn"}
    assert len(bodies) == 1 and "recall" in bodies.pop()  # an agent gets recall from its first request


def test_a_big_result_is_capped_before_it_is_first_sent_and_never_changes_below_the_trigger(gw: GatewaySimulator):
    gw.reset()
    session = agent(gw, limits=Limits(context_window=1_000_000, tool_result_max_chars=5_000), file_bytes=20_000)
    read_turns(session, 4)
    bodies = [json.loads(gw.body(r.seq))["messages"] for r in gw.requests if r.kind == "turn"]
    first_result = next(m for m in bodies[1] if m["role"] == "tool")
    assert len(first_result["content"]) <= 5_000 and "archived" in first_result["content"]
    for later in bodies[2:]:
        assert next(m for m in later if m["role"] == "tool") == first_result
    assert all(e.append_only is not False for e in requests(session))


def test_big_outputs_enter_as_small_previews_that_go_first_and_cost_less(gw: GatewaySimulator):
    """Outputs over the per-result budget enter as a preview sized to the limits and are cleared from
    the excerpt trigger, in few explained passes; the same session waiting for the main trigger
    (excerpt_trigger=0.6, fixed 5,000-char previews) reads more prompt tokens and costs more,
    priced with cache reads as a real model."""
    limits: dict[str, Any] = {"context_window": 12_000, "max_payload": "64KB"}
    gw.reset()
    session = agent(gw, limits=Limits(**limits), file_bytes=30_000, price_as=PRICE)
    read_turns(session, 16)
    events = requests(session)
    assert all(e.outcome == "ok" for e in events) and len(events) == 32
    first = next(m for m in json.loads(gw.body(gw.requests[1].seq))["messages"] if m["role"] == "tool")
    assert len(first["content"]) <= 1_000 and "archived" in first["content"]  # 2% of 48 KB, at the floor
    passes = [e for e in session.events if isinstance(e, NoticeEvent) and e.code == "pressure"]
    # the session counts tokens as the provider does once it has calibrated on its answers (the
    # simulator counts the tool schemas more dearly), so a compaction may come first
    compactions = [e for e in session.events if isinstance(e, CompactionEvent) and e.phase == "done" and e.outcome == "applied"]
    breaks = [e for e in events if e.append_only is False]
    assert len(passes) >= 1 and len(passes) + len(compactions) == len(breaks) <= 5  # every break explained
    excerpts = [p for p in passes if "previews of archived outputs cleared" in p.text]
    # (two excerpt passes before calibration; once the compaction has run, one is enough)
    assert len(excerpts) >= 1 and all(int(p.text.split("%")[0].split()[-1]) < 60 for p in excerpts)
    gw.reset()
    waiting = agent(gw, limits=Limits(**limits, excerpt_trigger=0.6, tool_result_preview_share=0), file_bytes=30_000,
                    price_as=PRICE)  # fmt: skip
    read_turns(waiting, 16)
    assert session.stats.prompt_tokens < waiting.stats.prompt_tokens
    assert session.stats.cost < waiting.stats.cost


def test_recovery_acts_whatever_the_trigger(gw: GatewaySimulator):
    gw.reset(max_body="40KB", reject_with="413")
    session = agent(gw, limits=Limits(context_window=1_000_000, pressure_trigger=0.99, pressure_target=0.5),
                    file_bytes=6_000)  # fmt: skip
    read_turns(session, 10)
    assert [e for e in session.events if isinstance(e, RecoveryEvent)], "the gateway rejected, recovery compacted"
    assert all(r.bytes <= 40 * 1024 for r in gw.requests if r.accepted)
    assert session.payload_cap is not None and len(session.history) > 0


# the pressure gate and the limits the session learned ----------------------------------------------------------


def test_a_paste_too_big_to_send_whole_is_cut_before_the_pressure_pass_sizes_the_request(gw: GatewaySimulator):
    """The oversize rule runs first: the pass sees the excerpt that will be sent (~45 KB), not the
    150 KB paste, so the old results stay verbatim and the request is still append-only."""
    gw.reset()
    session = agent(gw, limits=Limits(context_window=1_000_000, max_payload="128KB"), file_bytes=6_000)
    read_turns(session, 3)  # ~27 KB of results: with the excerpt the request is ~53% of the cap
    results = [m.content for m in session.history if m.role == "tool"]
    paste = "\n".join(f"line {i}: " + "payload data " * 8 for i in range(1_400))  # ~150 KB
    assert session.send("Please check this:\n" + paste).text
    assert session.history[-2].content.startswith(EXCERPT_TAG)
    assert [m.content for m in session.history if m.role == "tool"] == results
    assert not [e for e in session.events if isinstance(e, NoticeEvent) and e.code == "pressure"]
    assert all(e.append_only is not False for e in requests(session))
    assert max(r.bytes for r in gw.requests) <= 128 * 1024


def test_breakpoint_bytes_are_measured_so_the_hard_cap_holds_for_the_body_as_sent(gw: GatewaySimulator):
    """cache_control adds ~37 bytes per breakpoint: the request's measure counts them (the RequestEvent
    equals the simulator's log on the OpenAI route), so the configured cap is a hard limit for them too."""
    gw.reset()
    gw.clear_log()
    session = agent(gw, limits=Limits(context_window=1_000_000, max_payload="40KB"), file_bytes=3_000,
                    cache_breakpoints=True)  # fmt: skip
    read_turns(session, 16)
    records = [r for r in gw.requests if r.kind == "turn"]
    assert any("cache_control" in gw.body(r.seq).decode() for r in records)
    assert [e.bytes for e in requests(session)] == [r.bytes for r in records]
    assert all(r.accepted for r in records) and max(r.bytes for r in records) <= 40 * 1024
