"""Truncation (the compaction pipeline's last stage, recovery levels 2 and 3): the nuclear per-message
cap, the compactor's truncation cases, and the downgrade of a verbatim tool result whose call is gone."""

from __future__ import annotations

from contextkit.markers import extract_keys
from contextkit.messages import Message, ToolCall, newest_request_index
from contextkit.policy.expand import expand_markers
from contextkit.policy.pairing import find_orphans
from contextkit.policy.testing import MemorySink
from contextkit.policy.truncate import RECOVERY_NOTICE, emergency_truncate


def test_nuclear_caps_kept_message_content():
    sink = MemorySink()
    h = [
        Message.system("s" * 90_000),
        Message.user("question"),
        Message.assistant("x" * 50_000),
        Message.user("y" * 50_000),
        Message.assistant("z" * 50_000),
    ]
    out, r = emergency_truncate(h, keep=5, archive=sink, per_message_cap=4000)
    assert len(out) == 5 and out[0].content == "s" * 90_000
    assert out[1].content == "question"
    assert out[3].content == "y" * 50_000  # the newest user message is the task: only the oversize rule cuts it
    capped = [out[2], out[4]]
    assert all(len(m.content) <= 4000 for m in capped)  # source: <= 4100 (3971); ours includes the marker
    assert r.capped == 2 and r.dropped == 0
    assert sink.get(extract_keys(out[4].content)[0]) == "z" * 50_000


def test_truncation_cuts_inside_an_agent_chain_but_keeps_the_task_and_the_newest_round():
    """keep=4 on an agent chain of 9 messages since the user's request: the cut goes inside the chain
    at the start of a tool round (an agent run's whole trajectory is that chain, so protecting all of
    it let nothing go); the request is kept before the notice, the newest round is kept."""
    sink = MemorySink()
    chain: list[Message] = []
    for i in range(4):
        call = ToolCall(f"c{i}", "read_file", "{}")
        chain += [Message.assistant("", [call]), Message.tool(f"c{i}", f"result {i} " * 200)]
    h = [Message.system("s"), Message.user("old question"), Message.assistant("old answer"),
         Message.user("fix the bug in io.py"), *chain, Message.assistant("done")]  # fmt: skip
    out, r = emergency_truncate(h, keep=4, archive=sink)
    assert out[0].role == "system" and r.dropped == 8
    assert out[1].content == "fix the bug in io.py"  # the task text, whole, still the newest user message
    assert out[2].is_summary and out[2].synthetic and "8 messages removed" in out[2].content
    assert newest_request_index(out) == 1
    assert out[3:] == [*chain[-2:], h[-1]]  # the newest round, untouched
    assert find_orphans(out) == ([], [])
    transcript = expand_markers(out[2].content, sink)
    assert "old question" in transcript and "result 2" in transcript  # archived before it was dropped


def test_truncation_never_cuts_past_the_newest_tool_round():
    """keep=1: the tail would start at the final answer; it starts at the newest round instead."""
    sink = MemorySink()
    calls = [ToolCall(f"c{i}", "bash", "{}") for i in range(3)]
    h = [Message.system("s"), Message.user("task"),
         Message.assistant("", [calls[0]]), Message.tool("c0", "a" * 3000),
         Message.assistant("", calls[1:]), Message.tool("c1", "b" * 3000), Message.tool("c2", "c" * 3000)]  # fmt: skip
    out, r = emergency_truncate(h, keep=1, archive=sink)
    assert [m.content[:1] for m in out] == ["s", "t", "[", "", "b", "c"]
    assert r.dropped == 2 and find_orphans(out) == ([], [])


def test_a_chat_still_never_cuts_past_the_newest_user_message():
    sink = MemorySink()
    h = [Message.system("s"), Message.user("q1"), Message.assistant("a1"), Message.user("q2 " * 100)]
    out, r = emergency_truncate(h, keep=0, archive=sink)
    assert out[-1].content == h[-1].content and r.dropped == 2


def verbatim_fixture() -> list[Message]:
    h = [Message.system("charter")]
    for _ in range(3):
        h += [Message.user("question detail " * 50), Message.assistant("answer detail " * 50)]
    h += [
        Message.user("RECALLED ORIGINAL " + "x" * 300, preserve_verbatim=True),
        Message.assistant("more answer " * 50),
        Message.user("recent"),
        Message.user("recent"),
    ]
    return h


def test_emergency_keeps_verbatim_and_archives_segment():
    sink = MemorySink()
    h = verbatim_fixture()
    out, r = emergency_truncate(h, keep=2, archive=sink)
    assert out[0].content == "charter"
    notice = out[1]
    assert notice.is_summary and notice.summary_of == 7 and "@recall" in notice.content
    assert notice.content.startswith("[CONTEXT TRUNCATED: 7 messages removed due to context window limit.")
    assert out[2].preserve_verbatim and out[2].content.startswith("RECALLED ORIGINAL")
    assert [m.content for m in out[3:]] == ["recent", "recent"]
    transcript = sink.get(r.segment_key or "")
    assert transcript is not None and "[assistant]: more answer" in transcript
    expanded = expand_markers(notice.content, sink)
    for m in h[1:7]:
        assert m.content in expanded
    assert r.describe().startswith("truncate: 7 messages dropped (archived as <<ccr:")


def test_head_snapped_to_user_and_pairing_valid():
    sink = MemorySink()
    h = [Message.system("sys")]
    for n in range(6):
        h += [
            Message.user(f"u{n}"),
            Message.assistant("", [ToolCall(f"web_fetch:{n}", "web_fetch")]),
            Message.tool(f"web_fetch:{n}", f"r{n}"),
        ]
    for keep in range(1, 12):
        out, _ = emergency_truncate(h, keep=keep, archive=sink)
        assert out[0].role == "system" and out[1].role == "user"
        assert find_orphans(out) == ([], [])


def test_no_user_survives_uses_recovery_notice_with_marker():
    sink = MemorySink()
    h = [Message.assistant("a0"), Message.assistant("a1"), Message.assistant("a2")]  # no user message at all
    out, _r = emergency_truncate(h, keep=2, archive=sink)
    assert len(out) == 1 and out[0].content.startswith(RECOVERY_NOTICE)
    assert "a0" in expand_markers(out[0].content, sink)


def test_the_user_request_survives_a_tail_of_assistant_messages():
    sink = MemorySink()
    h = [Message.user("start"), Message.assistant("a1"), Message.assistant("a2")]
    out, r = emergency_truncate(h, keep=2, archive=sink)
    assert out == h and not r.changed  # the old snap walked past "start" and kept nothing


def test_mid_history_system_moved_front_and_short_history_unchanged():
    sink = MemorySink()
    h = [Message.user("u"), Message.system("late rule"), Message.assistant("a")]
    out, r = emergency_truncate(h, keep=10, archive=sink)
    assert [m.role for m in out] == ["system", "user", "assistant"] and r.changed and r.dropped == 0
    h2 = [Message.system("s"), Message.user("u"), Message.assistant("a")]
    out2, r2 = emergency_truncate(h2, keep=10, archive=sink)
    assert not r2.changed and out2 == h2


def test_verbatim_tool_result_downgraded_when_call_dropped():
    sink = MemorySink()
    h = [
        Message.user("old"),
        Message.assistant("", [ToolCall("r1", "recall")]),
        Message.tool("r1", "RECALLED ORIGINAL " + "x" * 300, preserve_verbatim=True, is_recall=True),
        Message.assistant("ok"),
        Message.user("recent 1"),
        Message.user("recent 2"),
    ]
    out, r = emergency_truncate(h, keep=2, archive=sink)
    assert out[0].is_summary
    down = out[1]
    assert down.role == "user" and down.tool_call_id is None and down.preserve_verbatim
    assert down.content.startswith("[recalled original - tool result r1, kept verbatim through compaction]\n")
    assert r.pairing.orphans_removed == 0 and find_orphans(out) == ([], [])


def test_with_real_archive():
    from contextkit.archive import Archive

    with Archive.in_memory() as archive:
        h = verbatim_fixture()
        out, _r = emergency_truncate(h, keep=2, archive=archive, per_message_cap=4000)
        expanded = expand_markers("\n".join(m.content for m in out), archive)
        assert all(m.content in expanded for m in h)


def test_the_task_is_the_newest_message_the_user_wrote():
    """A continuation prompt or a payload notice (synthetic) is not the task: the user's own newest
    message before them survives the nuclear rung."""
    from contextkit.limits.state import CONTINUATION

    sink = MemorySink()
    h = [
        Message.user("old"),
        Message.assistant("old answer"),
        Message.user("write the report"),
        Message.assistant("x" * 9_000),
        Message.user(CONTINUATION, synthetic=True),
    ]
    out, _ = emergency_truncate(h, keep=1, archive=sink, per_message_cap=4000)
    assert [m.content for m in out if m.role == "user" and not m.is_summary][:1] == ["write the report"]
    assert out[-1].content == CONTINUATION


def agent_run(rounds: int, size: int = 2_000) -> list[Message]:
    h = [Message.system("you fix bugs"), Message.user("the task: fix the bug in io.py " * 20)]
    for i in range(rounds):
        h += [Message.assistant(f"step {i}", [ToolCall(f"c{i}", "bash", "{}")]), Message.tool(f"c{i}", f"out {i} " * (size // 6))]
    return h


def chars(history: object) -> int:
    return sum(len(m.content) for m in history)  # type: ignore[attr-defined]


def test_a_second_truncation_keeps_the_system_prompt_and_the_task_as_they_were():
    """The provider caches a prompt's prefix: a truncation rewrites the notice, so what comes before it
    (the system prompt, then the task) is all a later truncation can leave cached. The notice is
    synthetic: the task stays the newest user message through any number of truncations (were the
    notice counted as one, the second truncation would take it for the task and drop the real one)."""
    sink = MemorySink()
    first, _ = emergency_truncate(agent_run(12), keep=4, archive=sink)
    grown = first + agent_run(8)[2:]
    second, r = emergency_truncate(grown, keep=4, archive=sink)
    assert r.dropped and second[:2] == first[:2] == agent_run(0)
    assert second[2].is_summary and second[2].content != first[2].content
    assert newest_request_index(second) == 1
    # the entries of the first notice are carried over: every original stays one recall away
    assert set(extract_keys(first[2].content)) - {first_key(first)} <= set(extract_keys(second[2].content)) | {
        first_key(first)
    }


def first_key(history: list[Message]) -> str:
    return extract_keys(history[2].content)[0]


def test_a_target_cuts_further_than_keep_at_the_start_of_a_round():
    """With a target the tail is cut, round by round, until the result fits; never past the newest
    round, and the task survives."""
    sink = MemorySink()
    h = agent_run(20)
    plain, _ = emergency_truncate(h, keep=12, archive=sink)
    target = chars(plain) // 2
    fitted, r = emergency_truncate(h, keep=12, archive=sink, target=target, measure=chars)
    assert chars(fitted) <= target < chars(plain)
    assert fitted[:2] == h[:2] and fitted[3].role == "assistant" and find_orphans(fitted) == ([], [])
    assert fitted[-2:] == h[-2:] and r.kept < 12
    # the first cut that fits: one round more would not fit
    bigger, _ = emergency_truncate(h, keep=r.kept + 2, archive=sink)
    assert chars(bigger) > target


def test_a_target_nothing_reaches_keeps_only_the_newest_round():
    sink = MemorySink()
    h = agent_run(6, size=9_000)
    out, r = emergency_truncate(h, keep=10, archive=sink, target=10, measure=chars)
    assert out[:2] == h[:2] and out[3:] == h[-2:] and r.kept == 2
