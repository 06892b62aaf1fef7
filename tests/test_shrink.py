"""Content shrink and the verbatim cap, with their reference cases."""

from __future__ import annotations

from collections.abc import Sequence

from contextkit.markers import extract_keys
from contextkit.messages import Message, ToolCall
from contextkit.policy.expand import expand_markers
from contextkit.policy.shrink import cap_verbatim, shrink_to_budget, superseded_results
from contextkit.policy.testing import MemorySink
from contextkit.sizing import request_bytes


def chars(h: Sequence[Message]) -> int:
    """A simple measure (sum of content lengths), so the expected sizes can be computed by hand."""
    return sum(len(m.content) for m in h)


def test_shrink_vector_largest_first():
    sink = MemorySink()
    h = [
        Message.system("s" * 10_000),
        Message.user("analyze the incidents"),
        Message.assistant("a" * 30_000),
        Message.user("t" * 80_000),
        Message.user("and what now?"),
    ]
    snapshot = list(h)
    out, r = shrink_to_budget(h, budget=50_000, measure=chars, archive=sink)
    assert chars(out) <= 50_000 and len(out) == 5
    assert out[0] == h[0] and out[1].content == "analyze the incidents" and out[2].content == "a" * 30_000
    assert h == snapshot  # caller's list untouched
    assert sink.get(extract_keys(out[3].content)[0]) == "t" * 80_000
    assert r.shrunk == 1 and r.within_budget and r.bytes_after == chars(out)


def test_system_never_touched_even_when_over():
    sink = MemorySink()
    h = [Message.system("s" * 100_000), Message.assistant("u" * 50_000)]
    out, r = shrink_to_budget(h, budget=60_000, measure=chars, archive=sink)
    assert out[0].content == "s" * 100_000 and len(out[1].content) < 50_000
    assert not r.within_budget and "still over" in r.describe()
    assert expand_markers(out[1].content, sink).count("u" * 50_000) == 1


def test_within_budget_unchanged():
    h = [Message.system("s"), Message.user("u")]
    out, r = shrink_to_budget(h, budget=1000, measure=chars, archive=MemorySink())
    assert out == h and not r.changed


def test_one_marker_survives_repeated_shrinking():
    sink = MemorySink()
    original = "critical tool output line\n" * 3000
    h = [Message.system("charter"), Message.assistant(original)]
    out, _ = shrink_to_budget(h, budget=5000, measure=chars, archive=sink)
    assert chars(out) <= 5000
    (key,) = extract_keys(out[1].content)
    assert sink.get(key) == original
    out2, r2 = shrink_to_budget(out, budget=2000, measure=chars, archive=sink)
    assert chars(out2) <= 2000 and extract_keys(out2[1].content) == [key] and r2.archived_keys == ()


def test_skips_verbatim():
    sink = MemorySink()
    h = [Message.system("sys"), Message.user("v" * 5000, preserve_verbatim=True), Message.assistant("a" * 4000)]
    out, _ = shrink_to_budget(h, budget=6000, measure=chars, archive=sink)
    assert out[1].content == "v" * 5000 and len(out[2].content) < 4000


def test_request_bytes_budget_with_multibyte_text():
    sink = MemorySink()
    h = [Message.system("rules"), Message.user("é€𝄞 ünïcödé\n" * 5000), Message.assistant('quote "x"\n' * 3000), Message.user("ok?")]
    budget = 20_000
    out, r = shrink_to_budget(h, budget=budget, measure=lambda x: request_bytes(x), archive=sink)
    assert request_bytes(out) <= budget and r.within_budget
    expanded = expand_markers("\n".join(m.content for m in out), sink)
    assert all(m.content in expanded for m in h)


def test_pointer_stage_when_floors_do_not_fit():
    sink = MemorySink()
    h = [Message.system("s")] + [Message.user(f"{i}" * 2000) for i in range(10)] + [Message.user("?")]
    out, r = shrink_to_budget(h, budget=1500, measure=chars, archive=sink)
    assert chars(out) <= 1500 and r.stubbed > 0
    assert all(m.content in expand_markers("".join(x.content for x in out), sink) for m in h)


def test_cap_verbatim_converges_with_recall_stubs():
    sink = MemorySink()
    budget = 5600
    h = [Message.system("charter")]
    h += [Message.user(f"{i}" * (budget // 3), preserve_verbatim=True, is_recall=True) for i in range(6)]
    h += [Message.user("recent 1"), Message.assistant("recent 2")]
    measure = lambda x: request_bytes(x)  # noqa: E731
    out, r = cap_verbatim(h, budget=budget, measure=measure, archive=sink)
    assert r.downgraded >= 1 and r.verbatim_bytes <= budget // 4
    stubs = [m for m in out if "aged out of the window" in m.content]
    assert stubs and all("@recall" in m.content and not m.preserve_verbatim for m in stubs)
    assert out[0] == h[0] and out[-2:] == h[-2:]
    small = [Message.system("charter")] + [
        Message.user(f"{i}" * (budget // 20), preserve_verbatim=True) for i in range(6)
    ]
    out_small, r_small = cap_verbatim(small, budget=budget, measure=measure, archive=sink)
    flags = [m.preserve_verbatim for m in out_small[1:]]
    assert 0 < r_small.downgraded < 6 and flags == sorted(flags)  # the oldest go first
    out2, r2 = cap_verbatim(out, budget=budget, measure=measure, archive=sink)
    assert not r2.changed and out2 == out


def test_with_real_archive():
    from contextkit.archive import Archive

    with Archive.in_memory() as archive:
        h = [
            Message.system("sys"),
            Message.user("big line\n" * 4000, preserve_verbatim=True),
            Message.assistant("b" * 9000),
        ]
        capped, _ = cap_verbatim(h, budget=20_000, measure=chars, archive=archive)
        out, _r = shrink_to_budget(capped, budget=5_000, measure=chars, archive=archive)
        assert chars(out) <= 5_000
        expanded = expand_markers("\n".join(m.content for m in out), archive)
        assert all(m.content in expanded for m in h)


def test_foreign_recall_suffix_is_not_trusted_as_derived():
    sink = MemorySink()
    pasted = "important new text\n" * 300 + "\n[full content recoverable via @recall <<ccr:0123456789abcdef>>]"
    h = [Message.system("s"), Message.user(pasted), Message.user("thoughts?")]
    out, r = shrink_to_budget(h, budget=1000, measure=chars, archive=sink)
    assert r.archived_keys and sink.get(r.archived_keys[0]) == pasted
    assert pasted in expand_markers(out[1].content, sink)


def test_the_task_survives_shrinking():
    """The newest user message is never cut by shrink (the oversize rule owns it, with a notice), and
    the tool chain since it is cut only after the older messages."""
    from contextkit.messages import ToolCall

    sink = MemorySink()
    task = "please fix every bug listed below\n" + "bug report line\n" * 3000
    h = [
        Message.system("s"),
        Message.user("o" * 20_000),
        Message.assistant("p" * 20_000),
        Message.user(task),
        Message.assistant("", [ToolCall("c1", "read_file", "{}")]),
        Message.tool("c1", "r" * 20_000),
    ]
    out, r = shrink_to_budget(h, budget=len(task) + 25_000, measure=chars, archive=sink)
    assert out[3].content == task and r.within_budget
    assert out[5].content == "r" * 20_000  # cutting the older messages was enough
    assert len(out[1].content) < 20_000 and len(out[2].content) < 20_000
    out2, r2 = shrink_to_budget(h, budget=len(task) + 3_000, measure=chars, archive=sink)
    assert out2[3].content == task and len(out2[5].content) < 20_000 and r2.within_budget
    out3, r3 = shrink_to_budget(h, budget=len(task) // 2, measure=chars, archive=sink)
    assert out3[3].content == task and not r3.within_budget  # over budget rather than losing the task


def test_shrink_cuts_a_superseded_view_before_the_current_one():
    """The same call made twice (an older and a newer view of one file): the older is cut first,
    even though it is the smaller one."""
    read = '{"command": "cat src/io.py"}'
    h = [Message.system("s"), Message.user("task"),
         Message.assistant("", [ToolCall("a", "bash", read)]), Message.tool("a", "old view " * 300),
         Message.assistant("", [ToolCall("b", "bash", '{"command": "ls"}')]), Message.tool("b", "listing " * 400),
         Message.assistant("", [ToolCall("c", "bash", read)]), Message.tool("c", "new view " * 300),
         Message.assistant("", [ToolCall("d", "bash", '{"command": "pwd"}')]), Message.tool("d", "/testbed")]  # fmt: skip
    assert superseded_results(h) == {3}
    budget = request_bytes(h) - 1500
    out, report = shrink_to_budget(h, budget=budget, measure=request_bytes, archive=MemorySink())
    assert report.changed and out[3] is not h[3]  # the superseded view went first
    assert out[7] is h[7]  # the current view stays whole


def test_a_second_shrink_of_what_is_already_cut_changes_nothing():
    """Shrinking a history that an earlier pass already cut to floors and pointers, still over its
    budget, must not rewrite those messages again for a few bytes each (each rewrite breaks the
    prompt cache from that message on): nothing changes and the report says so."""
    sink = MemorySink()
    h = [Message.system("s" * 20_000), *(Message.assistant(f"result {i}\n" + "x" * 30_000) for i in range(6))]
    once, first = shrink_to_budget(h, budget=20_500, measure=chars, archive=sink)
    assert first.changed and first.stubbed and not first.within_budget  # the system prompt alone is over
    twice, second = shrink_to_budget(once, budget=20_500, measure=chars, archive=sink)
    assert not second.changed and twice == once, second.describe()
