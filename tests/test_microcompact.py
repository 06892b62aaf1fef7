"""Microcompact: reference cases, plus the deviations we chose (a preview is known by its banner, so it ages on)."""

from __future__ import annotations

from contextkit.markers import extract_keys
from contextkit.messages import Message, Origin, ToolCall
from contextkit.policy.expand import expand_markers
from contextkit.policy.microcompact import ONE_LINER_PREFIX, MicrocompactConfig, microcompact
from contextkit.policy.testing import MemorySink
from contextkit.settings import Limits


def fixture(content: str, age: int, **tool_meta) -> list[Message]:
    h = [
        Message.user("read the file"),
        Message.assistant("reading", [ToolCall("tc-1", "read_file")]),
        Message.tool("tc-1", content, name="read_file", **tool_meta),
    ]
    for _ in range(age):
        h += [Message.user("next"), Message.assistant("ok")]
    return h


CONTENT = "line of important tool output\n" * 300


def test_age_two_truncates_with_one_marker_and_exact_preview():
    sink = MemorySink()
    h = fixture(CONTENT, 2)
    out, r = microcompact(h, archive=sink)
    assert (r.truncated, r.summarized) == (1, 0)
    stub = out[2].content
    keys = extract_keys(stub)
    assert len(keys) == 1 and sink.get(keys[0]) == CONTENT
    body = stub.split("\n[full content recoverable")[0]
    assert len(body) == 2511  # 1980 head + banner + 480 tail, each cut at a line boundary
    assert "[... 6540 chars omitted from old tool result ...]" in stub
    assert r.chars_freed == len(CONTENT) - len(stub) and r.archived_keys == (keys[0],)
    assert r.describe().startswith("microcompact: 1 truncated, 0 summarized,")
    assert h[2].content == CONTENT  # input not mutated


def test_age_one_and_small_results_untouched():
    sink = MemorySink()
    _, r = microcompact(fixture(CONTENT, 1), archive=sink)
    assert not r.changed and len(sink) == 0
    _, r = microcompact(fixture("x" * 2999, 6), archive=sink)
    assert not r.changed


def test_preview_becomes_one_liner_with_same_marker_deviation():
    """Deviation from the source: a default-size preview (2.5 KB < 3000 min) still becomes a one-liner."""
    sink = MemorySink()
    h = fixture(CONTENT, 2)
    out, _r1 = microcompact(h, archive=sink)
    key = extract_keys(out[2].content)[0]
    out += [Message.user("more"), Message.assistant("ok")] * 2
    out2, r2 = microcompact(out, archive=sink)
    assert r2.summarized == 1 and r2.archived_keys == ()
    stub = out2[2].content
    assert stub.startswith(ONE_LINER_PREFIX + "301 lines, 9000 chars, text; read_file]")
    assert extract_keys(stub) == [key] and sink.get(key) == CONTENT
    # idempotent afterwards
    out3, r3 = microcompact(out2, archive=sink)
    assert not r3.changed and out3 == out2


def test_raised_head_tail_then_summarize_carries_earlier_marker():
    sink = MemorySink()
    cfg = MicrocompactConfig(head_chars=4000, tail_chars=1000)
    content = "payload row 12345\n" * 400
    out, _r = microcompact(fixture(content, 2), archive=sink, config=cfg)
    (key,) = extract_keys(out[2].content)
    out += [Message.user("n"), Message.assistant("ok")] * 4
    out2, r2 = microcompact(out, archive=sink, config=cfg)
    assert r2.summarized == 1 and extract_keys(out2[2].content) == [key]
    assert sink.get(key) == content


def test_first_seen_at_age_four_becomes_one_liner_with_ascii_hyphen():
    sink = MemorySink()
    content = '{"rows": [' + ", ".join(str(i) for i in range(2000)) + "]}"
    out, r = microcompact(fixture(content, 5, path="data.json"), archive=sink)
    assert r.summarized == 1
    first = out[2].content.splitlines()[0]
    assert first == f"[Old tool result cleared - 1 lines, {len(content)} chars, JSON; read_file data.json]"
    assert "—" not in first
    assert expand_markers(out[2].content, sink).count(content) == 1


def test_agent_feedback_user_message_is_a_candidate():
    sink = MemorySink()
    feedback = "--- Agent Results ---\n\n" + "[coder] finding line\n" * 400
    h = [Message.assistant("delegating"), Message.user(feedback, origin=Origin(tool="agents"))]
    h += [Message.user("n"), Message.assistant("ok")] * 2
    out, r = microcompact(h, archive=sink)
    assert r.truncated == 1 and sink.get(extract_keys(out[1].content)[0]) == feedback


def test_plain_user_verbatim_recall_summary_are_never_touched():
    sink = MemorySink()
    big = "user context the model must keep seeing\n" * 400
    h = [
        Message.user(big),
        Message.assistant("a", [ToolCall("r1", "recall"), ToolCall("r2", "read")]),
        Message.tool("r1", big, preserve_verbatim=True, is_recall=True),
        Message.tool("r2", big, is_summary=True),
    ]
    h += [Message.user("n"), Message.assistant("ok")] * 5
    out, r = microcompact(h, archive=sink)
    assert not r.changed and out == h and len(sink) == 0


def test_config_from_limits_and_real_archive():
    from contextkit.archive import Archive

    cfg = MicrocompactConfig.from_limits(Limits(microcompact_truncate_turns=1, microcompact_min_chars=1000))
    assert cfg.truncate_turns == 1 and cfg.min_chars == 1000
    with Archive.in_memory() as archive:
        out, r = microcompact(fixture(CONTENT, 1), archive=archive, config=cfg)
        assert r.truncated == 1
        assert archive.get(extract_keys(out[2].content)[0]) == CONTENT
        assert expand_markers(out[2].content, archive).count(CONTENT) == 1


def test_marked_assistant_quote_is_archived_not_carried():
    """A result that quotes a marker but is not a derived stub must still be archived (allow_markers)."""
    sink = MemorySink()
    quoted = "see <<ccr:0123456789abcdef>> and new text\n" * 200
    _out, r = microcompact(fixture(quoted, 3), archive=sink)
    assert r.truncated == 1 and len(r.archived_keys) == 1
    assert sink.get(r.archived_keys[0]) == quoted


def test_a_one_liner_says_its_call_once():
    """The origin (``read_file PATH:LINES``) already names the file the call read: the stub does not
    repeat it; a call the origin does not show is kept."""
    from contextkit.policy.microcompact import one_liner

    m = Message.tool("c", "x\n" * 40, origin=Origin(tool="read_file", path="src/a.py", line_start=1, line_end=40))
    assert one_liner(m.content, m, call="src/a.py").count("src/a.py") == 1
    assert "grep -n foo src/" in one_liner(m.content, m, call="grep -n foo src/")
