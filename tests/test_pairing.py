"""Pairing repair: reference cases (parallel calls, re-used ids, orphans), cut snapping, orphan archiving."""

from __future__ import annotations

from contextkit.messages import Message, ToolCall
from contextkit.policy.pairing import SYNTHETIC_RESULT, find_orphans, repair_tool_pairing, snap_cut
from contextkit.policy.testing import MemorySink


def A(*ids: str, content: str = "") -> Message:
    return Message.assistant(content, [ToolCall(i, "web_fetch") for i in ids])


def T(call_id: str, content: str = "r") -> Message:
    return Message.tool(call_id, content)


def assert_valid(history: list[Message]) -> None:
    assert find_orphans(history) == ([], [])
    again, report = repair_tool_pairing(history)
    assert again is history and not report.changed


def test_valid_history_is_returned_unchanged_same_object():
    h = [Message.user("go"), A("c1", "c2"), T("c2", "b"), T("c1", "a"), Message.assistant("done")]
    out, report = repair_tool_pairing(h)
    assert out is h
    assert not report.changed and report.describe() == "pairing: valid"


def test_reused_ids_get_synthetics_in_second_block():
    h = [Message.user("u"), A(":0", ":1"), T(":0", "a"), T(":1", "b"), A(":0", ":1"), Message.user("[batch feedback]")]
    out, r = repair_tool_pairing(h)
    assert (r.synthetic_injected, r.orphans_removed, len(out)) == (2, 0, 8)
    assert [m.content for m in out[2:4]] == ["a", "b"]
    assert [m.tool_call_id for m in out[5:7]] == [":0", ":1"]
    assert all(m.synthetic and m.content == SYNTHETIC_RESULT for m in out[5:7])
    assert out[7].content == "[batch feedback]"
    assert_valid(out)


def test_dangling_first_block():
    h = [A(":0", ":1"), Message.user("[legacy batch feedback]"), A(":0", ":1"), T(":0", "fresh-a"), T(":1", "fresh-b")]
    out, r = repair_tool_pairing(h)
    assert r.synthetic_injected == 2
    assert [m.synthetic for m in out[1:3]] == [True, True]
    assert out[3].role == "user"
    assert [m.content for m in out[5:7]] == ["fresh-a", "fresh-b"]
    assert_valid(out)


def test_interposed_message_results_relocated():
    h = [A(":0", ":1"), Message.user("SECURITY BLOCK: something"), T(":0"), T(":1")]
    out, r = repair_tool_pairing(h)
    assert r.relocated == 2 and r.synthetic_injected == 0
    assert [m.role for m in out] == ["assistant", "tool", "tool", "user"]
    assert_valid(out)


def test_orphan_removed_and_reported_and_archived():
    h = [Message.user("u"), T("ghost:0", "ghost output that must not be lost"), Message.assistant("done")]
    sink = MemorySink()
    out, r = repair_tool_pairing(h, archive=sink)
    assert len(out) == 2 and r.orphans_removed == 1 and r.orphan_ids == ("ghost:0",)
    assert r.orphans[0].content == "ghost output that must not be lost"
    assert [sink.get(k) for k in r.archived_keys] == ["ghost output that must not be lost"]
    # without an archive the content is still in the report
    _out2, r2 = repair_tool_pairing(h)
    assert r2.orphans == r.orphans and r2.archived_keys == ()


def test_partial_results_synthetics_in_call_order():
    h = [
        Message.assistant("", [ToolCall(":0", "a"), ToolCall(":1", "b"), ToolCall("park:2", "c")]),
        T(":0", "only this ran"),
    ]
    out, r = repair_tool_pairing(h)
    assert r.synthetic_injected == 2 and r.missing_ids == (":1", "park:2")
    assert [(m.content == SYNTHETIC_RESULT, m.tool_call_id) for m in out[1:]] == [
        (False, ":0"),
        (True, ":1"),
        (True, "park:2"),
    ]
    assert out[3].name == "c"


def test_intra_message_duplicate_pruned():
    h = [A("dup:0", "dup:0"), T("dup:0", "once")]
    out, r = repair_tool_pairing(h)
    assert r.duplicates_pruned == 1 and len(out[0].tool_calls) == 1 and len(r.pruned_calls) == 1
    assert_valid(out)


def test_result_past_next_assistant_is_orphan():
    h = [A(":0"), Message.assistant("interleaved"), T(":0", "late")]
    out, r = repair_tool_pairing(h)
    assert (r.synthetic_injected, r.orphans_removed, len(out)) == (1, 1, 3)
    assert_valid(out)


def test_empty_id_pruned_then_idempotent():
    h = [
        Message.assistant("", [ToolCall("", "web_fetch"), ToolCall("web_fetch:1", "web_fetch")]),
        T("web_fetch:1", "ok"),
    ]
    out, r = repair_tool_pairing(h)
    assert r.duplicates_pruned == 1
    out2, r2 = repair_tool_pairing(out)
    assert not r2.changed and out2 is out


def test_find_orphans_reports_both_directions():
    h = [Message.user("u"), T("x"), A("c1"), Message.user("later")]
    assert find_orphans(h) == ([1], [2])


def test_tuple_input_valid_returns_list():
    h = (Message.user("u"), Message.assistant("a"))
    out, _ = repair_tool_pairing(h)
    assert out == list(h)


def test_snap_cut_vectors():
    h = [
        Message.system("sys"),
        Message.user("go"),
        A("web_fetch:0", "web_fetch:1"),
        T("web_fetch:0"),
        T("web_fetch:1"),
        Message.assistant("done"),
    ]
    assert [snap_cut(h, c, 1) for c in (3, 4, 5, 2)] == [2, 2, 5, 2]
    # a plain assistant stops the walk; out-of-range cuts stay
    h2 = [Message.user("u"), Message.assistant("plain"), T("x")]
    assert snap_cut(h2, 2, 0) == 2
    assert snap_cut(h, 0, 1) == 0 and snap_cut(h, 6, 1) == 6


def test_orphans_archived_in_real_archive():
    from contextkit.archive import Archive

    with Archive.in_memory() as archive:
        h = [Message.user("u"), T("ghost:0", "ghost output"), A("c1")]
        out, r = repair_tool_pairing(h, archive=archive)
        assert [m.role for m in out] == ["user", "assistant", "tool"]
        assert archive.get(r.archived_keys[0]) == "ghost output"
