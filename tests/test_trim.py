"""The trim phase: reasoning strip and repeated-read dedup, with their reference cases."""

from __future__ import annotations

from contextkit.markers import extract_keys
from contextkit.messages import Message, ToolCall
from contextkit.policy.expand import expand_markers
from contextkit.policy.testing import MemorySink
from contextkit.policy.trim import ReadBlock, dedup_repeated_reads, parse_read_blocks, strip_reasoning


def read_text(path: str, first: int, last: int) -> str:
    lines = "".join(f"{n:4d} | line {n} of {path}\n" for n in range(first, last + 1))
    return f"<<< INÍCIO DO ARQUIVO: {path} >>>\n{lines}<<< FIM DO ARQUIVO: {path} >>>\n\n"


def reads(*specs: tuple[str, str, bool]) -> list[Message]:
    h = [Message.user("look at the code")]
    for n, (call_id, content, verbatim) in enumerate(specs):
        h += [
            Message.assistant(f"step {n}", [ToolCall(call_id, "read_file")]),
            Message.tool(call_id, content, preserve_verbatim=verbatim),
        ]
    return [*h, Message.user("thanks")]


def test_parse_blocks():
    assert parse_read_blocks(read_text("a.go", 1, 40) + read_text("b.go", 10, 20)) == [
        ReadBlock("a.go", 1, 40),
        ReadBlock("b.go", 10, 20),
    ]
    assert parse_read_blocks("<<< INÍCIO DO ARQUIVO (base64): x.bin >>>\nAAAA\n<<< FIM DO ARQUIVO: x.bin >>>\n") == [
        ReadBlock("x.bin")
    ]
    assert parse_read_blocks("plain exec output") == []


def test_same_file_read_twice_first_superseded():
    sink = MemorySink()
    first = read_text("main.go", 1, 50)
    h = reads(("t1", first, False), ("t2", read_text("main.go", 1, 50), False))
    out, r = dedup_repeated_reads(h, archive=sink)
    assert r.superseded == 1
    assert "superseded" in out[2].content and "<<ccr:" in out[2].content
    assert out[2].content.startswith("[Earlier read of main.go:1-50 superseded by a later read of the same file - ")
    assert out[4] == h[4]
    assert sink.get(extract_keys(out[2].content)[0]) == first
    out2, r2 = dedup_repeated_reads(out, archive=sink)
    assert not r2.changed and out2 == out


def test_narrower_later_read_never_replaces_wider():
    wide, narrow = read_text("a.go", 1, 200), read_text("a.go", 10, 20)
    _, r = dedup_repeated_reads(reads(("t1", wide, False), ("t2", narrow, False)), archive=MemorySink())
    assert r.superseded == 0
    _, r = dedup_repeated_reads(reads(("t1", narrow, False), ("t2", wide, False)), archive=MemorySink())
    assert r.superseded == 1


def test_verbatim_read_is_never_superseded():
    h = reads(
        ("t1", read_text("a.go", 1, 30), True),
        ("t2", read_text("a.go", 1, 30), False),
        ("t3", read_text("b.go", 1, 5), False),
    )
    out, r = dedup_repeated_reads(h, archive=MemorySink())
    assert r.superseded == 0 and out == h


def test_origin_tags_decide_coverage():
    sink = MemorySink()
    body = "x = 1\n" * 400
    h = [
        Message.assistant("", [ToolCall("a", "read_file")]),
        Message.tool("a", body, name="read_file", path="src/m.py", lines=(100, 150)),
        Message.assistant("", [ToolCall("b", "read_file")]),
        Message.tool("b", body + "more\n", name="read_file", path="src/m.py"),  # whole file
        Message.assistant("", [ToolCall("c", "read_file")]),
        Message.tool("c", body, name="read_file", path="src/m.py", lines=(1, 10), is_recall=True),
    ]
    out, r = dedup_repeated_reads(h, archive=sink)
    assert r.superseded == 1 and "src/m.py:100-150" in out[1].content
    assert out[3] == h[3] and out[5] == h[5]
    assert expand_markers(out[1].content, sink).count(body) == 1


def test_strip_reasoning_old_turns_only():
    sink = MemorySink()
    old = "<thinking>long private chain of thought " + "z" * 500 + "</thinking>\nThe answer is 42."
    h = [
        Message.user("q"),
        Message.assistant(old, reasoning="provider reasoning " * 20),
        Message.user("q2"),
        Message.assistant("<reasoning>recent</reasoning> fresh", reasoning="keep me"),
    ]
    out, r = strip_reasoning(h, archive=sink)
    assert r.stripped == 1 and out[3] == h[3] and out[3].reasoning == "keep me"
    assert out[1].reasoning is None and out[1].content.startswith("The answer is 42.\n[reasoning removed - ")
    assert "provider reasoning " * 20 in [sink.get(k) for k in r.archived_keys]
    assert expand_markers(out[1].content, sink).count(old) == 1
    _out2, r2 = strip_reasoning(out, archive=sink)
    assert not r2.changed


def test_trim_with_real_archive():
    from contextkit.archive import Archive

    with Archive.in_memory() as archive:
        first = read_text("main.go", 1, 50)
        _out, r = dedup_repeated_reads(reads(("t1", first, False), ("t2", first, False)), archive=archive)
        assert r.superseded == 1 and archive.get(r.archived_keys[0]) == first
