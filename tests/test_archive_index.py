"""Originals stay one recall away: summaries and truncation notices index the archived
originals of what they replace, flat, and a recall result the model has not read is cut last."""

from __future__ import annotations

from contextkit.markers import extract_keys, marker
from contextkit.messages import Message, ToolCall
from contextkit.policy.archive_index import INDEX_HEADER, MAX_ENTRIES, index_entries, split_index
from contextkit.policy.microcompact import clear_to_one_liner
from contextkit.policy.shrink import cap_verbatim, shrink_to_budget, unread_recalls
from contextkit.policy.summary import apply_summary, plan_segment
from contextkit.policy.testing import MemorySink
from contextkit.policy.truncate import emergency_truncate
from contextkit.sizing import request_bytes


def _turn(i: int, sink: MemorySink, *, cleared: bool = True) -> list[Message]:
    call = ToolCall(f"c{i}", "tail_log", f'{{"n": {300 + i}}}')
    result = Message.tool(f"c{i}", f"log {i}\n" + "x" * 3_000, name="tail_log")
    if cleared:
        got = clear_to_one_liner(result, archive=sink, turn=i)
        assert got is not None
        result = got[0]
    return [Message.user(f"turn {i}"), Message.assistant("", tool_calls=(call,)), result, Message.assistant("ok")]


def _original_keys(history: list[Message]) -> set[str]:
    return {k for m in history if m.role == "tool" for k in extract_keys(m.content)}


def test_repeated_truncation_keeps_every_original_one_recall_away() -> None:
    """Truncating a notice used to archive a transcript of the notice: a chain one level deeper per pass."""
    sink = MemorySink()
    history = [Message.system("agent")]
    wanted: set[str] = set()
    for i in range(6):
        fresh = _turn(i, sink)
        wanted |= _original_keys(fresh)
        history, _ = emergency_truncate([*history, *fresh], keep=4, archive=sink)
    notice = next(m for m in history if m.is_summary)
    assert INDEX_HEADER in notice.content
    cited = set(extract_keys(notice.content))
    dropped = wanted - _original_keys(history)
    assert dropped and dropped <= cited  # directly in the notice, not behind a transcript of a notice
    entry = next(e for e in index_entries([notice]) if next(iter(dropped)) in e)
    assert entry.startswith("- tail_log(") and " lines, " in entry  # the call, then what its stub says


def test_a_summary_carries_the_index_of_the_summary_it_replaces() -> None:
    sink = MemorySink()
    turns = [_turn(i, sink) for i in range(6)]
    first = [Message.system("agent"), *(m for t in turns[:3] for m in t)]
    plan = plan_segment(first, min_keep_recent=2)
    assert plan is not None
    once = apply_summary(first, plan, "notes", segment_key=None)
    later = [*once, *(m for t in turns[3:] for m in t)]
    plan = plan_segment(later, min_keep_recent=2)
    assert plan is not None
    twice = apply_summary(later, plan, "more notes", segment_key=sink.put("transcript", kind="segment"))
    summary = twice[1]
    assert _original_keys(first) - _original_keys(once) <= set(extract_keys(summary.content))
    # a summary's own transcript marker is a note, not an entry; each original is listed once
    keys = [k for e in index_entries([summary]) for k in extract_keys(e)]
    every = set().union(*(_original_keys(t) for t in turns))
    assert len(keys) == len(set(keys)) == len(every - _original_keys(twice))


def test_the_index_is_bounded_and_skips_recall_results() -> None:
    sink = MemorySink()
    history = [m for i in range(MAX_ENTRIES + 10) for m in _turn(i, sink)]
    recall = ToolCall("r1", "recall", f'{{"key": "{marker("0123456789abcdef")}"}}')
    history += [Message.assistant("", tool_calls=(recall,)), Message.tool("r1", "page", name="recall", is_recall=True)]
    entries = index_entries(history)
    assert len(entries) == MAX_ENTRIES and "tail_log" in entries[-1]  # the newest kept
    assert not any("0123456789abcdef" in e for e in entries)


def test_shrinking_a_summary_keeps_its_index() -> None:
    sink = MemorySink()
    history = [Message.system("agent"), *(m for i in range(4) for m in _turn(i, sink))]
    plan = plan_segment(history, min_keep_recent=2)
    assert plan is not None
    out = apply_summary(history, plan, "a long summary line\n" * 300, segment_key=None)
    _, block = split_index(out[1].content)
    assert block
    budget = request_bytes(out) - 4_000
    shrunk, report = shrink_to_budget(out, budget=budget, measure=request_bytes, archive=sink)
    assert report.changed and block in shrunk[1].content


def test_a_recall_result_the_model_has_not_read_is_cut_last() -> None:
    """Within the current turn the largest message used to be cut first: the page the model had just
    asked for, before it could read it. Read pages go first now."""
    sink = MemorySink()
    calls = [
        ToolCall(f"r{i}", "recall", f'{{"key": "<<ccr:0123456789abcdef>>", "start_line": {1 + 300 * i}}}')
        for i in range(2)
    ]
    read = Message.tool("r0", "read line\n" * 600, name="recall", is_recall=True)
    unread = Message.tool("r1", "unread line\n" * 700, name="recall", is_recall=True)
    history = [Message.system("agent"), Message.user("question"), Message.assistant("", tool_calls=calls[:1]), read,
               Message.assistant("", tool_calls=calls[1:]), unread]  # fmt: skip
    assert unread_recalls(history) == {5}
    budget = request_bytes(history) - 5_000  # cutting one page is enough
    out, _ = shrink_to_budget(history, budget=budget, measure=request_bytes, archive=sink)
    assert out[5] is unread and out[3] is not read
    # once the model has answered, the page is just another old message
    assert unread_recalls([*history, Message.assistant("Answer: unknown")]) == set()
    # cap_verbatim ages out a read pinned result before an unread one
    pinned = [m.evolve(preserve_verbatim=True) if m.is_recall else m for m in history]
    capped, report = cap_verbatim(pinned, budget=4 * 12_000, measure=request_bytes, archive=sink)
    assert report.downgraded == 1 and capped[5] is pinned[5] and capped[3] is not pinned[3]


def test_reachable_reads_each_entry_once_where_expansion_is_exponential() -> None:
    """Each level cites the previous one twice: expand_markers would copy 2**40 leaves."""
    from contextkit.policy.expand import reachable

    sink = MemorySink()
    key = sink.put("the leaf", kind="message")
    for level in range(40):
        key = sink.put(f"level {level}: {marker(key)} and again {marker(key)}", kind="segment", allow_markers=True)
    found = reachable(f"history citing {marker(key)}", sink)
    assert len(found) == 41 and "the leaf" in found.values()
