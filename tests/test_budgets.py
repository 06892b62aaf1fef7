"""Tool-result budgets and recovery level 1, with their reference cases."""

from __future__ import annotations

from contextkit.markers import extract_keys
from contextkit.messages import Message, ToolCall
from contextkit.policy._common import TRUNCATED_SEP
from contextkit.policy.budgets import (
    PREVIEW_MIN_CHARS,
    aggressive_level1,
    enforce_tool_result_budgets,
    is_budget_preview,
    preview_chars,
)
from contextkit.policy.expand import expand_markers
from contextkit.policy.testing import MemorySink


def run_read(content: str, call_id: str = "c1") -> list[Message]:
    return [Message.assistant("run", [ToolCall(call_id, "read")]), Message.tool(call_id, content, name="read")]


def test_explicit_budgets_shorten_and_zero_falls_back_to_defaults():
    big = "x" * (20_000 + 100)
    sink = MemorySink()
    out, r = enforce_tool_result_budgets(run_read(big), archive=sink, turn_budget=1000, per_result=500)
    assert r.truncated == 1 and len(out[1].content) < 20_000 and len(out[1].content) < 700
    assert sink.get(extract_keys(out[1].content)[0]) == big
    out0, r0 = enforce_tool_result_budgets(run_read(big), archive=sink, turn_budget=0, per_result=0)
    assert (r0.turn_budget, r0.per_result) == (200_000, 20_000)
    assert r0.truncated == 1 and 4_000 < len(out0[1].content) < 6_000
    assert "chars omitted - full output (20100 chars from read) archived" in out0[1].content


def test_within_budget_unchanged_and_deterministic_bytes():
    sink = MemorySink()
    small = run_read("y" * 19_999)
    out, r = enforce_tool_result_budgets(small, archive=sink)
    assert not r.changed and out == small and len(sink) == 0
    big = run_read("line\n" * 10_000)
    a, _ = enforce_tool_result_budgets(big, archive=sink)
    b, _ = enforce_tool_result_budgets(big, archive=MemorySink())
    assert a[1].content == b[1].content  # same input, same stub bytes (prompt cache)


def test_turn_budget_pass_largest_first():
    sink = MemorySink()
    calls = [ToolCall(f"c{i}", "read") for i in range(3)]
    h = [Message.user("go"), Message.assistant("", calls)]
    h += [Message.tool(f"c{i}", str(i) * n) for i, n in enumerate((15_000, 19_000, 12_000))]
    out, r = enforce_tool_result_budgets(h, archive=sink, turn_budget=40_000, per_result=20_000)
    sizes = [len(m.content) for m in out[2:]]
    assert sum(sizes) <= 40_000
    assert sizes[0] == 15_000 and sizes[2] == 12_000 and sizes[1] < 19_000  # only the largest cut
    assert r.truncated == 1


def test_verbatim_recall_and_ungrouped_results_skipped():
    sink = MemorySink()
    h = [
        Message.assistant("", [ToolCall("r1", "recall")]),
        Message.tool("r1", "v" * 30_000, preserve_verbatim=True, is_recall=True),
        Message.user("u"),
        Message.tool("lonely", "z" * 30_000),
    ]
    out, r = enforce_tool_result_budgets(h, archive=sink)
    assert not r.changed and out == h


def test_level1_vector_and_assistant_cap():
    sink = MemorySink()
    long_answer = "A" * 3000 + "B" * 4000 + "C" * 3000
    h = [
        Message.user("go"),
        *run_read("x" * 20_100),
        Message.assistant(long_answer),
        Message.assistant("", [ToolCall("c9", "read")]),  # unanswered call
    ]
    out, r = aggressive_level1(h, archive=sink, turn_budget=100_000, per_result=10_000)
    assert r.changed and r.assistants_truncated == 1 and r.pairing.synthetic_injected == 1
    assert r.budgets.truncated == 1 and len(out[2].content) < 10_000
    capped = out[3].content
    assert len(capped) <= 5000 and TRUNCATED_SEP in capped
    assert capped.startswith("A" * 3000) and "C" * 1000 in capped
    assert sink.get(extract_keys(capped)[0]) == long_answer
    assert out[-1].synthetic
    assert h[3].content == long_answer  # caller's list untouched
    again, r2 = aggressive_level1(out, archive=sink, turn_budget=100_000, per_result=10_000)
    assert not r2.changed and again == out
    assert r.describe().startswith("level 1: 1 tool results capped, 1 assistant messages truncated")


def test_budgets_with_real_archive_expand_back():
    from contextkit.archive import Archive

    content = "".join(f"row {i}: value\n" for i in range(5000))
    with Archive.in_memory() as archive:
        out, r = enforce_tool_result_budgets(run_read(content), archive=archive)
        assert r.truncated == 1
        assert expand_markers(out[1].content, archive).count(content) == 1


def test_a_preview_sized_to_the_limits_replaces_the_fixed_one_once():
    """An output over the per-result budget enters as a preview of at most ``preview`` chars (the
    session sizes it to its limits); outputs within the budget enter whole; a second run is a no-op."""
    sink = MemorySink()
    big = "".join(f"{n:05d} some output line\n" for n in range(1_500))  # ~33 KB
    out, r = enforce_tool_result_budgets(run_read(big), archive=sink, preview=2_000)
    assert r.truncated == 1 and 1_000 < len(out[1].content) <= 2_000 and is_budget_preview(out[1])
    assert sink.get(extract_keys(out[1].content)[0]) == big
    again, r2 = enforce_tool_result_budgets(out, archive=sink, preview=1_000)
    assert again == out and not r2.changed  # cut once, when it arrived: never rewritten after
    whole = run_read("y" * 19_999)
    assert enforce_tool_result_budgets(whole, archive=sink, preview=2_000)[0] == whole
    assert not is_budget_preview(whole[1])
    old, _ = enforce_tool_result_budgets(run_read(big), archive=sink)
    assert 4_000 < len(old[1].content) < 6_000  # no preview size: the fixed head 4,000 + tail 1,000


def test_preview_chars_is_a_bounded_share_of_the_limit():
    assert preview_chars(0.02, 128_000) == 2_560
    assert preview_chars(0.02, 10_000) == PREVIEW_MIN_CHARS and preview_chars(0.02, 249_000) == 4_980
    assert preview_chars(0.02, 250_000) is None  # from a ~64k-token window up: the usual 4,000 + 1,000 preview
    assert preview_chars(0.0, 128_000) is None and preview_chars(0.02, None) is None
