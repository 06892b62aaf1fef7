"""Replaying real agent runs: the trajectory format, the replay provider, the harness and its metrics.

The fixtures are two real mini-swe-agent runs, trimmed (tests/fixtures/traces/README.md).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from contextkit.errors import ConfigError
from contextkit.replay import (
    calibrated_errors,
    first_uses,
    identifiers,
    load_trajectory,
    median_abs,
    parse_trajectory,
    replay,
    token_errors,
)
from contextkit.sim.model import Conversation, SimCall, SimMessage
from contextkit.sim.replay import END_OF_RUN, UNRECORDED_REPLY, ReplayScript

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
FORMAT_ERROR = FIXTURES / "pvlib-1606-format-error.traj.json"
REASONER = FIXTURES / "pvlib-1072-reasoner-error.traj.json"


@pytest.fixture(scope="module")
def traj() -> Any:
    return load_trajectory(FORMAT_ERROR)


def test_a_real_trajectory_loads_with_its_format_error_turn_usage_and_exit(traj: Any) -> None:
    assert traj.name == "pvlib-1606-format-error" and traj.model
    assert len(traj.steps) == 29 and traj.exit_status == "Submitted" and traj.error is None
    users = [m for m in traj.messages if m.role == "user"]
    assert len(users) == 2 and users[1].text.startswith("Tool call error")
    assert all(traj.messages[i].prompt_tokens for i in traj.steps)
    assert traj.request_before(0)[-1] == {"role": "user", "content": traj.task}


def test_reasoning_content_and_a_run_that_ended_in_an_error_load() -> None:
    t = load_trajectory(REASONER)
    assert t.error and "InternalServerError" in t.error and t.exit_status == "InternalServerError"
    assert all(t.messages[i].reasoning for i in t.steps)


def test_extra_fields_and_calls_kept_as_a_json_string_are_read() -> None:
    data = {
        "messages": [
            {"role": "system", "content": "s", "whatever": 1},
            {"role": "user", "content": [{"type": "text", "text": "task"}]},
            {"role": "assistant", "content": "", "tool_calls": json.dumps(
                [{"id": "a", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
                 {"id": "b", "function": {"name": "bash", "arguments": '{"command": "pwd"}'}}])},
            {"role": "tool", "tool_call_id": "a", "content": "x"},
            {"role": "tool", "tool_call_id": "b", "content": "y"},
            {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}},
        ]
    }
    t = parse_trajectory(data, "parallel")
    assert t.task == "task" and [c.id for c in t.messages[2].calls] == ["a", "b"]
    assert t.output_for("b") == "y" and t.exit_status == "Submitted"


def test_a_file_that_is_not_a_trajectory_gets_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"trajectory": []}))
    with pytest.raises(ConfigError, match=r"no 'messages' list.*docs/howto/replay\.md"):
        load_trajectory(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_trajectory(tmp_path / "missing.json")


def _sim(m: dict[str, Any]) -> SimMessage:
    calls = tuple(SimCall(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls", []))
    return SimMessage(m["role"], m.get("content") or "", calls, m.get("tool_call_id"))


def test_the_replay_provider_places_a_request_from_its_content_alone(traj: Any) -> None:
    script = ReplayScript(traj)
    first = script.next_reply(Conversation(tuple(_sim(m) for m in traj.request_before(0))))
    assert first.tool_calls[0].id == traj.messages[traj.steps[0]].calls[0].id
    # a request that lost its old messages to compaction is still placed by its newest known message
    k = 10
    tail = traj.request_before(k)
    compacted = [tail[0], {"role": "user", "content": "[CONTEXT TRUNCATED ...]"}, *tail[-2:]]
    reply = script.next_reply(Conversation(tuple(_sim(m) for m in compacted)))
    assert reply.tool_calls[0].id == traj.messages[traj.steps[k]].calls[0].id
    # the format-error turn: the reply before it was not recorded; after the prompt, the next step
    fmt = next(i for i, m in enumerate(traj.messages) if m.role == "user" and i > 1)
    before = [m.wire() for m in traj.messages[:fmt]]
    assert script.next_reply(Conversation(tuple(_sim(m) for m in before))).text == UNRECORDED_REPLY
    after = [*before, {"role": "assistant", "content": UNRECORDED_REPLY}, traj.messages[fmt].wire()]
    reply = script.next_reply(Conversation(tuple(_sim(m) for m in after)))
    assert reply.tool_calls[0].id == traj.messages[fmt + 1].calls[0].id
    everything = [m.wire() for m in traj.messages]
    assert script.next_reply(Conversation(tuple(_sim(m) for m in everything))).text == END_OF_RUN


def test_identifiers_are_code_like_names() -> None:
    assert identifiers("see pvlib/tools.py and _build_args in ModelChain; the value is fine") == {
        "pvlib/tools.py",
        "_build_args",
        "ModelChain",
    }


def test_first_uses_come_from_outputs_at_least_three_steps_earlier(traj: Any) -> None:
    uses = first_uses(traj)
    assert uses and all(k >= 3 for k in uses)
    k, names = next(iter(uses.items()))
    name = next(iter(names))
    step = traj.messages[traj.steps[k]]
    assert name in identifiers(step.text + step.calls[0].arguments)
    assert name not in identifiers(traj.task)
    assert not any(name in identifiers(traj.messages[i].text + traj.messages[i].calls[0].arguments) for i in traj.steps[:k])
    first_output = next(j for j, i in enumerate(traj.steps) if name in identifiers(traj.output_for(traj.messages[i].calls[0].id) or ""))
    assert first_output <= k - 3


# the harness over HTTP -------------------------------------------------------------------------


def test_no_management_fails_where_the_window_ends_and_the_metric_shows_it(traj: Any) -> None:
    run = replay(traj, "none", window=8192)
    assert run.steps_served < run.steps_total and run.rejected == 1 and run.error
    assert not run.served_all


def test_contextkit_serves_every_step_of_an_agent_run_under_a_small_window(traj: Any) -> None:
    """The whole run is the chain of one user message; truncation cuts inside it (it used to protect
    all of it and fail with RecoveryFailedError once the chain alone was over the window)."""
    run = replay(traj, "contextkit", window=8192)
    assert run.served_all, run.error
    assert run.reachable_share == 1.0  # every first-use name verbatim or one recall away
    assert run.prompt_tokens and run.billed > 0


def test_first_use_metrics_fail_for_a_strategy_that_drops_the_evidence(traj: Any) -> None:
    def drop_outputs(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**m, "content": "[dropped]"} if m["role"] == "tool" else m for m in history]

    full = replay(traj, "none", window=100_000)
    dropped = replay(traj, drop_outputs, window=100_000)
    assert full.served_all and dropped.served_all and dropped.strategy == "drop_outputs"
    assert full.verbatim_share == 1.0 and full.reachable_share == 1.0
    assert dropped.verbatim_share is not None and dropped.verbatim_share < 0.5
    assert dropped.reachable_share == dropped.verbatim_share  # no archive, no marker: nothing one recall away
    assert dropped.billed < full.billed


def test_billed_input_fails_for_a_strategy_that_rewrites_the_prefix(traj: Any) -> None:
    def stamp(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        first = {**history[0], "content": f"{time.perf_counter_ns()} {history[0]['content']}"}
        return [first, *history[1:]]

    steady = replay(traj, "none", window=100_000)
    rewritten = replay(traj, stamp, window=100_000)
    assert rewritten.prompt_tokens >= steady.prompt_tokens
    assert rewritten.cached_tokens == 0 < steady.cached_tokens
    assert rewritten.billed > 1.5 * steady.billed


def test_own_overhead_fails_for_a_slow_strategy(traj: Any) -> None:
    def slow(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        time.sleep(0.02)
        return history

    assert replay(traj, slow, window=100_000).own_ms_per_step >= 15
    assert replay(traj, "none", window=100_000).own_ms_per_step < 15


def test_token_error_is_measured_against_the_recorded_counts_and_calibration_fixes_a_steady_bias(traj: Any) -> None:
    rows = token_errors(traj)
    assert len(rows) == 29 and all(ours > 0 and theirs > 0 for _, ours, theirs in rows)
    before, after = calibrated_errors(rows)
    assert median_abs(after) <= median_abs(before) and median_abs(after) < 0.03
    # a count that is off by a factor of two fails the metric; calibration learns the factor
    skewed = [(k, 2 * ours, theirs) for k, ours, theirs in rows]
    b2, a2 = calibrated_errors(skewed)
    assert median_abs(b2) > 0.5 and median_abs(a2) < 0.03


def test_each_request_is_measured_message_by_message_about_once(traj: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flow asks for the size of a request many times per step (pre-flight, pressure, the
    outgoing copy, the history event); a history seen again comes from the meter's recent requests,
    so the per-message sum runs about once per request, not once per question."""
    from contextkit import sizing

    meters: list[sizing.RequestMeter] = []
    init = sizing.RequestMeter.__init__

    def keep(self: sizing.RequestMeter, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        meters.append(self)

    monkeypatch.setattr(sizing.RequestMeter, "__init__", keep)
    run = replay(traj, "contextkit", window=100_000)
    assert run.served_all
    meter = max(meters, key=lambda m: m.calls)
    assert meter.calls / run.requests > 5  # what the flow asks
    assert meter.measured / run.requests <= 1.5  # what is summed


def test_a_remembered_measure_equals_a_fresh_one() -> None:
    from contextkit.messages import Message
    from contextkit.sizing import RequestMeter, request_bytes

    meter = RequestMeter()
    h = [Message.system("s"), Message.user("x" * 500)]
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    first = meter.measure(h, tools=tools, temperature=0.5)
    assert meter.measure(list(h), tools=tools, temperature=0.5) == first and meter.measured == 1
    assert first.bytes == request_bytes(h, tools=tools, temperature=0.5)
    other = meter.measure(h, tools=tools, temperature=0.7)  # other parameters: measured again
    assert meter.measured == 2 and other.bytes == request_bytes(h, tools=tools, temperature=0.7)
    h2 = [*h, Message.assistant("y")]
    assert meter.measure(h2).bytes == request_bytes(h2) and meter.measured == 3


def test_the_meter_learns_the_providers_ratio_and_skips_counts_of_an_edited_request() -> None:
    from contextkit.messages import Message
    from contextkit.sizing import RequestMeter

    meter = RequestMeter()
    h = [Message.user("hello world " * 800)]
    raw = meter.measure(h).tokens
    assert raw > 1024
    assert meter.calibrate(raw, int(raw * 1.10)) == pytest.approx(1.10, abs=0.01)
    assert meter.measure(h).tokens == pytest.approx(raw * 1.10, rel=0.01)  # every later count is scaled
    before = meter.ratio
    meter.calibrate(meter.measure(h).tokens, raw * 5)  # the provider counted something else: not learned
    assert meter.ratio == before and meter.skipped == 1
    exact = RequestMeter()
    assert exact.calibrate(raw, int(raw * 1.02)) == 1.0 and exact.measure(h).tokens == raw  # within 3%: exact
    assert exact.calibrate(100, 150) == 1.0 and exact.samples == 1  # a small request: not learned


def test_a_session_calibrates_from_the_providers_prompt_tokens() -> None:
    from contextkit.session.core import Session
    from contextkit.sim.server import GatewaySimulator

    with GatewaySimulator() as gw:
        kwargs = gw.litellm_kwargs()
        with Session(kwargs.pop("model"), status=False, on_flush=None, **kwargs) as s:
            s.send("hello")
            assert s._meter.samples == 0  # too small to say anything about the tokenizer
            s.send("a longer message about the tokenizer " * 200)
            assert s._meter.samples == 1 and s._meter.ratio == pytest.approx(1.0, abs=0.05)
