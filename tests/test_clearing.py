"""Anthropic-style clearing baseline (policy/clearing.py) and cache breakpoints (policy/breakpoints.py)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from contextkit.markers import extract_keys
from contextkit.messages import Message, ToolCall, to_wire_list
from contextkit.policy.breakpoints import breakpoint_positions, needs_breakpoints, volatile_from, with_breakpoints
from contextkit.policy.clearing import CLEARED_PREFIX, ClearingConfig, clear_tool_uses
from contextkit.policy.microcompact import clear_to_one_liner
from contextkit.policy.testing import MemorySink
from contextkit.prompt.prefix import is_append_only
from contextkit.sizing import RequestMeter

METER = RequestMeter()


def tokens(history: Sequence[Message]) -> int:
    return METER.measure(history).tokens


def agent(turns: int, size: int = 3_000, tool: str = "read_file") -> list[Message]:
    h = [Message.system("You are a coding agent.")]
    for t in range(turns):
        h += [
            Message.user(f"turn {t}"),
            Message.assistant("", [ToolCall(f"c{t}", tool, "{}")]),
            Message.tool(f"c{t}", f"output {t}\n" + "x" * size, name=tool, path=f"f{t}.py"),
            Message.assistant(f"done {t}"),
        ]
    return h


def results(h: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(h) if m.role == "tool"]


def test_below_the_trigger_nothing_is_cleared():
    h = agent(5)
    out, report = clear_tool_uses(h, archive=MemorySink(), count_tokens=tokens, config=ClearingConfig(trigger=10**6))
    assert out == h and not report.applied and report.reason == "below trigger"


def test_above_the_trigger_every_result_but_the_last_keep_is_cleared_and_archived():
    h = agent(6)
    sink = MemorySink()
    out, report = clear_tool_uses(h, archive=sink, count_tokens=tokens, config=ClearingConfig(trigger=100, keep=2))
    idx = results(h)
    assert report.applied and report.cleared == 4 and report.tokens_after < report.tokens_before
    assert [out[i] == h[i] for i in idx] == [False] * 4 + [True] * 2
    for i in idx[:4]:
        assert out[i].content.startswith(CLEARED_PREFIX) and f"read_file f{idx.index(i)}.py" in out[i].content
        assert sink.get(extract_keys(out[i].content)[0]) == h[i].content  # archived, recallable
    assert "4 tool results cleared" in report.describe()


def test_clear_at_least_and_exclude_tools():
    h = agent(3)
    cfg = ClearingConfig(trigger=100, keep=2, clear_at_least=10**6)
    sink = MemorySink()
    out, report = clear_tool_uses(h, archive=sink, count_tokens=tokens, config=cfg)
    assert out == h and report.reason == "under clear_at_least" and len(sink) == 0  # nothing archived
    out, report = clear_tool_uses(
        agent(3, tool="notes"), archive=sink, count_tokens=tokens,
        config=ClearingConfig(trigger=100, keep=0, exclude_tools=("notes",)),
    )  # fmt: skip
    assert not report.applied and report.reason == "nothing to clear"
    with pytest.raises(ValueError):
        ClearingConfig(keep=-1)


def test_re_applied_to_a_growing_history_it_breaks_the_prefix_at_every_new_tool_result():
    """The server-side design: the client keeps the full history, so once over the trigger each new
    result pushes one more result out of `keep` and the edited prompt changes before its end."""
    cfg = ClearingConfig(trigger=100, keep=2)
    sink = MemorySink()
    bodies = []
    for turns in range(3, 8):
        out, _ = clear_tool_uses(agent(turns), archive=sink, count_tokens=tokens, config=cfg)
        bodies.append(str(to_wire_list(out)).encode())
    assert not any(is_append_only(a, b) for a, b in itertools.pairwise(bodies))


def test_breakpoints_on_system_anchor_and_last_message():
    h = agent(4)
    # turn the two oldest results into stubs: the volatile tail starts at the third result
    for i in results(h)[:2]:
        cleared = clear_to_one_liner(h[i], archive=MemorySink(), turn=0)
        assert cleared is not None
        h[i] = cleared[0]
    third = results(h)[2]
    assert volatile_from(h) == third
    positions = breakpoint_positions(h)
    assert positions == (0, third - 2, len(h) - 1)  # system; the user message before the call; last
    wire = with_breakpoints(to_wire_list(h), positions)
    assert [i for i, m in enumerate(wire) if "cache_control" in m] == list(positions)
    assert wire[0]["cache_control"] == {"type": "ephemeral"} and "cache_control" not in to_wire_list(h)[0]


def test_the_anchor_moves_only_when_a_rewrite_reaches_it():
    h = agent(3)
    before = breakpoint_positions(h)
    grown = [*h, Message.user("more"), Message.assistant("ok")]
    assert breakpoint_positions(grown)[:2] == before[:2]  # appending moves only the last breakpoint
    first = results(h)[0]
    cleared = clear_to_one_liner(h[first], archive=MemorySink(), turn=0)
    assert cleared is not None
    rewritten = [*h[:first], cleared[0], *h[first + 1 :]]
    assert breakpoint_positions(rewritten)[1] > before[1]


def test_an_assistant_message_made_only_of_tool_calls_carries_no_breakpoint():
    h = [Message.system("s"), Message.user("u"), Message.assistant("", [ToolCall("c", "t", "{}")])]
    assert breakpoint_positions(h) == (0, 1)
    assert breakpoint_positions([]) == ()


@pytest.mark.parametrize(
    ("provider", "model", "expected"),
    [
        ("anthropic", "anthropic/claude-sonnet-4-5", True),
        ("bedrock", "bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0", True),
        ("bedrock", "bedrock/meta.llama3-70b-instruct-v1:0", False),
        ("vertex_ai", "vertex_ai/claude-sonnet-4-5", True),
        ("openai", "openai/gpt-4o", False),
        ("", "mystery", False),
    ],
)
def test_only_providers_that_need_breakpoints_get_them(provider: str, model: str, expected: bool):
    assert needs_breakpoints(provider, model) is expected
