"""The summary stage as pure data: plan, summarizer input, prompt, gate, retention, apply."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextkit.archive import Archive
from contextkit.markers import extract_keys, key_for, marker, recall_suffix
from contextkit.messages import Message, ToolCall
from contextkit.policy import summary as s2
from contextkit.policy.expand import expand_markers
from contextkit.policy.pairing import find_orphans, repair_tool_pairing

L = "## Files\n- a.go\n" * 10
GOOD = "## Summary\n- point " * 8


def fixture(recent: int = 2) -> list[Message]:
    """[system charter] + 3 x (question, answer) + recent users."""
    out = [Message.system("charter")]
    for _ in range(3):
        out += [Message.user("question detail " * 50), Message.assistant("answer detail " * 50)]
    return out + [Message.user("recent") for _ in range(recent)]


def verbatim_fixture() -> list[Message]:
    h = fixture(0)
    h += [
        Message.user("RECALLED ORIGINAL " + "x" * 300, preserve_verbatim=True),
        Message.assistant("more answer " * 50),
        Message.user("recent"),
        Message.user("recent"),
    ]
    return h


# quality gate --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "segment_chars", "ok"),
    [
        ("", 100, False),
        ("   ", 100, False),
        ("SUMMARY", 200, True),
        ("SUMMARY", 100_000, False),
        ("I'm sorry, I cannot help with that " + L, 100_000, False),
        ("Desculpe, não posso resumir " + L, 100_000, False),
        (L, 100_000, True),
        ("I am sorry, but " + L, 100_000, False),
        ("I cannot summarize this. " + L, 100_000, False),
        ("I can't do that. " + L, 100_000, False),
        ("I\u2019m sorry, no. " + L, 100_000, False),
        ("As an AI language model, " + L, 100_000, False),
        ("Sorry - " + L, 100_000, False),
        ("Error: upstream returned 500 " + L, 100_000, False),
        ("Traceback (most recent call last):\n  File x.py " + L, 100_000, False),
        ("litellm.exceptions.APIConnectionError: boom " + L, 100_000, False),
        ("RuntimeError: summarizer crashed " + L, 100_000, False),
        ("## Errors & Resolutions\n- ValueError: bad int in a.py:3 -> fixed\n" + L, 100_000, True),
    ],
)
def test_gate_vectors(text: str, segment_chars: int, ok: bool) -> None:
    passed, reason = s2.passes_gate(text, segment_chars)
    assert passed is ok, reason
    assert reason == "ok" if ok else reason != "ok"


def test_gate_reasons_name_the_problem() -> None:
    assert "empty" in s2.passes_gate(None, 10)[1]
    assert "too short" in s2.passes_gate("x" * 23, 100_000)[1]
    assert s2.passes_gate("x" * 24, 100_000)[0]  # the ledger carries the facts: short notes will do
    assert "too short" in s2.passes_gate("## Files Read\n## Commands Executed\n- x\n", 100_000)[1]  # headers only
    assert "refusal" in s2.passes_gate("I'm sorry " + L, 100)[1]
    assert "error" in s2.passes_gate("Error: x " + L, 100)[1]


# plan ----------------------------------------------------------------------------------------


def test_plan_splits_systems_middle_and_recent() -> None:
    h = fixture()
    plan = s2.plan_segment(h, min_keep_recent=2)
    assert plan is not None
    assert plan.head == (h[0],)
    assert plan.segment == tuple(h[1:7])
    assert plan.tail == tuple(h[7:])
    assert plan.verbatim == ()


def test_plan_none_when_too_few_or_nothing_old() -> None:
    sys_ = Message.system("s")
    assert (
        s2.plan_segment([sys_, Message.user("u"), Message.assistant("a"), Message.user("u2")], min_keep_recent=2)
        is None
    )
    assert s2.plan_segment([sys_, Message.user("u")], min_keep_recent=10) is None
    # the cut lands on a tool result, snaps to its assistant; the middle is then < 4
    h = [
        sys_,
        Message.user("u1"),
        Message.user("u2"),
        Message.assistant("", [ToolCall("web_fetch:0", "web_fetch")]),
        Message.tool("web_fetch:0", "page"),
    ]
    assert s2.plan_segment(h, min_keep_recent=1) is None


def test_plan_cut_never_separates_a_result_from_its_call() -> None:
    h = [*fixture(0), Message.assistant("", [ToolCall("c1", "read_file"), ToolCall("c2", "grep")])]
    h += [Message.tool("c1", "file body"), Message.tool("c2", "grep hits"), Message.assistant("done")]
    h += [Message.user("and next?")]
    plan = s2.plan_segment(h, min_keep_recent=3)  # cut would land on the second tool result
    assert plan is not None
    assert plan.tail[0].tool_calls and plan.tail[0].role == "assistant"
    assert all(m.role != "tool" for m in plan.segment)


def test_plan_never_summarizes_the_task() -> None:
    """The newest user message and its tool chain stay out of the segment, however long the chain."""
    h = [*fixture(0), Message.user("fix io.py")]
    for i in range(6):
        h += [Message.assistant("", [ToolCall(f"c{i}", "read_file")]), Message.tool(f"c{i}", "body " * 40)]
    plan = s2.plan_segment(h, min_keep_recent=2)
    assert plan is not None and plan.tail[0].content == "fix io.py" and len(plan.tail) == 13
    assert all(m.content != "fix io.py" for m in plan.segment)


def test_plan_keeps_verbatim_out_of_the_segment() -> None:
    plan = s2.plan_segment(verbatim_fixture(), min_keep_recent=2)
    assert plan is not None
    assert plan.count == 7
    assert [m.content[:17] for m in plan.verbatim] == ["RECALLED ORIGINAL"]


# summarizer input ----------------------------------------------------------------------------


def test_input_budget_half_window_with_floor() -> None:
    assert s2.input_budget(None) == 20_000
    assert s2.input_budget(1_000) == 20_000
    assert s2.input_budget(128_000) == 256_000 - len(s2.PROMPT_TEMPLATE) - 2000


def _plan_of(messages: list[Message]) -> s2.SegmentPlan:
    plan = s2.plan_segment([Message.system("s"), *messages, Message.user("recent")], min_keep_recent=1)
    assert plan is not None
    return plan


def test_fair_share_and_three_to_one_head_tail() -> None:
    bodies = [f"m{i}:" + "".join(chr(97 + (j % 26)) for j in range(10_000)) + f"END{i}" for i in range(10)]
    plan = _plan_of([Message.user(b) if i % 2 == 0 else Message.assistant(b) for i, b in enumerate(bodies)])
    text = s2.summarizer_input(plan, archive=None, window_tokens=None)  # 20,000 / 10 = 2,000 each
    blocks = [b for b in text.split("\n\n") if b]
    assert len(blocks) == 10
    for i, block in enumerate(blocks):
        role, content = block.split(": ", 1)
        assert role == ("[user]" if i % 2 == 0 else "[assistant]")
        assert len(content) == 2000
        head, tail = content.split(s2.INPUT_CUT)
        assert len(head) == 1500 and head.startswith(f"m{i}:")
        assert len(tail) == 2000 - 1500 - len(s2.INPUT_CUT) and tail.endswith(f"END{i}")


def test_share_floor_600_and_short_messages_untouched() -> None:
    plan = _plan_of([Message.user("y" * 1000) for _ in range(100)] + [Message.user("short one")])
    text = s2.summarizer_input(plan, archive=None, window_tokens=None)  # 20,000 / 101 -> floor 600
    assert text.count(s2.INPUT_CUT) == 100
    assert "[user]: short one\n\n" in text
    assert max(len(b) for b in text.split("\n\n")) == len("[user]: ") + 600


def test_native_tool_calls_are_named() -> None:
    call = Message.assistant("looking", [ToolCall("a", "read_file", '{"path":"x"}'), ToolCall("b", "grep")])
    plan = _plan_of([Message.user("q"), call, Message.tool("a", "x"), Message.tool("b", "y"), Message.assistant("ok")])
    text = s2.summarizer_input(plan, archive=None, window_tokens=None)
    assert '[assistant]: looking\n[tool_calls: read_file({"path":"x"}), grep]\n\n' in text
    long_call = Message.assistant("", [ToolCall("c", "bash", '{"cmd":"' + "z" * 1000 + '"}')])
    plan = _plan_of([Message.user("q"), long_call, Message.tool("c", "x"), Message.assistant("ok")])
    text = s2.summarizer_input(plan, archive=None, window_tokens=None)
    assert '[tool_calls: bash({"cmd":"' + "z" * (s2.CALL_ARGS_CHARS - 8) + "...)]" in text
    assert "[tool]: x\n\n" in text


def test_stub_restored_from_archive_only_when_original_fits() -> None:
    archive = Archive.in_memory()
    small = "SMALL ORIGINAL " + "s" * 1500
    big = "BIG ORIGINAL " + "b" * 30_000
    k_small, k_big = archive.put(small, kind="tool_result"), archive.put(big, kind="tool_result")
    assert k_small and k_big
    stubs = [Message.user(f"[cleared]{recall_suffix([k])}") for k in (k_small, k_big)]
    plan = _plan_of([*stubs, Message.assistant("a"), Message.user("b")])  # allowance 5,000
    text = s2.summarizer_input(plan, archive=archive, window_tokens=None)
    assert small in text
    assert "BIG ORIGINAL" not in text and marker(k_big) in text
    assert s2.summarizer_input(plan, archive=None, window_tokens=None).count("<<ccr:") == 2


# prompt --------------------------------------------------------------------------------------


def test_prompt_sections_segment_line_and_instruction() -> None:
    prompt = s2.summary_prompt("[user]: hi\n\n")
    for section in s2.SECTIONS:
        assert f"## {section}" in prompt
    assert "\nCONVERSATION SEGMENT TO EXTRACT FROM:\n\n[user]: hi" in prompt
    assert "USER INSTRUCTION" not in prompt
    guided = s2.summary_prompt("[user]: hi\n\n", "keep the database decisions")
    assert "USER INSTRUCTION" in guided and "keep the database decisions" in guided
    assert guided.index("keep the database") < guided.index(s2.SEGMENT_LINE)


# retention -----------------------------------------------------------------------------------


def test_identifier_retention() -> None:
    segment = (
        "[assistant]: I will read src/app/main.py and run\n$ pytest -q tests/test_api.py\n"
        "[tool]: failed at line 12345, commit 9f3a2bc1d\n[assistant]: ok\n[tool_calls: read_file, grep]\n"
        f"[user]: stub {marker(key_for('x'))}\n"
    )
    ids = s2.identifiers(segment)
    assert {"src/app/main.py", "pytest -q tests/test_api.py", "12345", "9f3a2bc1d", "read_file", "grep"} <= ids
    assert key_for("x") not in ids  # markers are plumbing
    full = " ".join(sorted(ids))
    assert s2.identifier_retention(segment, full) == 1.0
    half = s2.identifier_retention(segment, "Files Read: src/app/main.py; error at 12345")
    assert half is not None and 0 < half < 1
    assert s2.identifier_retention(segment, "nothing specific") == 0.0
    assert s2.identifier_retention("[user]: hello there\n", "anything") is None


# apply ---------------------------------------------------------------------------------------


def test_apply_summary_shape_and_nothing_lost() -> None:
    archive = Archive.in_memory()
    h = verbatim_fixture()
    plan = s2.plan_segment(h, min_keep_recent=2)
    assert plan is not None
    key = archive.put(s2.segment_transcript(plan), kind="segment", allow_markers=True)
    out = s2.apply_summary(h, plan, GOOD, segment_key=key)
    assert [m.role for m in out] == ["system", "user", "user", "user", "user"]
    summary = out[1]
    assert summary.is_summary and summary.summary_of == 7
    assert summary.content.startswith("[STRUCTURED SUMMARY - covering 7 earlier messages]\n\n## Summary")
    assert summary.content.endswith(
        f"[full transcript of the summarized segment recoverable via @recall {marker(key)}]"
    )
    assert out[2].content.startswith("RECALLED ORIGINAL") and out[2].preserve_verbatim
    assert out[3:] == h[-2:]
    expanded = expand_markers(summary.content, archive)
    assert "question detail" in expanded and "[assistant]:" in expanded
    for m in plan.segment:
        assert m.content in expanded
    assert h == verbatim_fixture()  # input untouched


def test_apply_without_key_has_no_marker_and_guided_header() -> None:
    h = fixture()
    plan = s2.plan_segment(h, min_keep_recent=2)
    assert plan is not None
    out = s2.apply_summary(h, plan, GOOD, segment_key=None, instruction='keep "db" notes')
    assert extract_keys(out[1].content) == []
    assert out[1].content.startswith(
        "[COMPACTED CONTEXT - 6 messages summarized per user instruction: \"keep 'db' notes\"]"
    )
    with pytest.raises(ValueError, match="plan_segment again"):
        s2.apply_summary(h[:-1], plan, GOOD, segment_key=None)


def test_native_recall_result_survives_as_user_message() -> None:
    """A verbatim tool result in the middle is downgraded, pairing stays valid."""
    h = fixture(0)
    h += [
        Message.assistant("", [ToolCall("r1", "recall", '{"key":"abc"}')]),
        Message.tool("r1", "RECALLED ORIGINAL " + "x" * 300, preserve_verbatim=True, is_recall=True),
        Message.assistant("thanks"),
        Message.user("recent 1"),
        Message.user("recent 2"),
    ]
    plan = s2.plan_segment(h, min_keep_recent=2)
    assert plan is not None
    out = s2.apply_summary(h, plan, GOOD, segment_key=None)
    assert find_orphans(out) == ([], [])
    fixed, report = repair_tool_pairing(out)
    assert report.orphans_removed == 0 and fixed == out
    kept = [m for m in out if "RECALLED ORIGINAL" in m.content]
    assert len(kept) == 1 and kept[0].role == "user" and kept[0].tool_call_id is None
    assert kept[0].content.startswith("[recalled original - tool result r1, kept verbatim through compaction]\n")


def test_verbatim_assistant_with_calls_keeps_calls_in_text() -> None:
    a = Message.assistant("pinned", [ToolCall("c9", "bash", '{"cmd":"make"}')], preserve_verbatim=True)
    h = [*fixture(0), a, Message.tool("c9", "built"), Message.assistant("next"), Message.user("recent")]
    plan = s2.plan_segment(h, min_keep_recent=1)
    assert plan is not None
    out = s2.apply_summary(h, plan, GOOD, segment_key=None)
    assert find_orphans(out) == ([], [])
    assert 'pinned\n[tool_calls: bash({"cmd":"make"})]' in [m.content for m in out]


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    out = [Message.system("sys")] * draw(st.integers(0, 2))
    for i in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "calls"]))
        pin = draw(st.booleans()) and draw(st.booleans())
        if kind == "user":
            out.append(Message.user(f"u{i} " + "q" * draw(st.integers(0, 50)), preserve_verbatim=pin))
        elif kind == "assistant":
            out.append(Message.assistant(f"a{i}", preserve_verbatim=pin))
        else:
            n = draw(st.integers(1, 3))
            ids = [draw(st.sampled_from(["x:0", "x:1", f"id{i}_{j}"])) for j in range(n)]
            ids = list(dict.fromkeys(ids))
            out.append(Message.assistant("", [ToolCall(c, "t") for c in ids], preserve_verbatim=pin))
            out.extend(Message.tool(c, f"r{i}{c}", preserve_verbatim=draw(st.booleans())) for c in ids)
    return out


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(0, 8))
def test_apply_keeps_pairing_valid_and_loses_nothing(h: list[Message], keep: int) -> None:
    archive = Archive.in_memory()
    plan = s2.plan_segment(h, min_keep_recent=keep)
    if plan is None:
        return
    key = archive.put(s2.segment_transcript(plan), kind="segment", allow_markers=True)
    out = s2.apply_summary(h, plan, GOOD, segment_key=key)
    assert find_orphans(out) == ([], [])
    assert [m for m in out if m.role == "system"][: plan.system_end] == list(plan.head)
    expanded = "\n".join(expand_markers(m.content, archive) for m in out)
    for m in h:
        assert m.content in expanded


# gate: what a real small model got through before ------------------------------------------------


def test_gate_refuses_a_bare_marker_and_markers_the_archive_does_not_hold() -> None:
    archive = Archive.in_memory()
    known = archive.put("an archived original " * 20, kind="tool_result")
    assert known
    invented = "0123456789abcdef"
    assert s2.passes_gate(f"<<ccr:{invented}>>", 10_000) == (False, "only a marker, no summary")
    assert s2.passes_gate(f"  - <<ccr:{known}>>.\n", 10_000)[1] == "only a marker, no summary"  # known or not
    ok, reason = s2.passes_gate(L + f"\nsee <<ccr:{invented}>>", 10_000, archive=archive)
    assert not ok and reason == f"marker not in the archive (<<ccr:{invented}>>)"
    assert s2.passes_gate(L + f"\nsee <<ccr:{known}>>", 10_000, archive=archive) == (True, "ok")


def test_gate_refuses_a_summary_not_smaller_than_what_it_replaces() -> None:
    body = L.strip()
    ok, reason = s2.passes_gate(body, 10_000, max_chars=len(body))
    assert not ok and reason.startswith("larger than what it replaces")
    assert s2.passes_gate(body, 10_000, max_chars=len(body) + 1) == (True, "ok")


SEGMENT = (
    "[user]: Fix src/app/api.py; the server listens on port 8081 (build 7f3a9c2e1b).\n\n"
    "[assistant]: Running `pytest -q tests/test_api.py`: 1 failed in 0.32s, p99 850 ms, error E1042.\n"
)


@pytest.mark.parametrize(
    ("prose", "invented"),
    [
        ("## Files Read\n- src/app/models.py (the handler)\n" + L, "src/app/models.py"),
        ("## Key Decisions\n- moved the server to port 8443\n" + L, "8443"),
        ("## Current Task State\n- build 9e8d7c6b5a deployed\n" + L, "9e8d7c6b5a"),
        ("## Commands Executed\n- `docker compose up -d` -> ok\n" + L, "docker compose up -d"),
        ("## Errors & Resolutions\n- E2077 -> unresolved\n" + L, "E2077"),
    ],
)
def test_gate_refuses_facts_not_in_the_segment(prose: str, invented: str) -> None:
    ok, reason = s2.passes_gate(prose, len(SEGMENT), source=SEGMENT)
    assert not ok and reason.startswith("facts not in the segment") and invented in reason
    assert s2.passes_gate(prose, len(SEGMENT))[0]  # without the segment the gate cannot know


def test_gate_accepts_faithful_shortenings() -> None:
    prose = (
        "## Files Read\n- api.py (src/app/api.py), port 8081, build 7f3a9c2e1b\n"
        "## Commands Executed\n- pytest -q tests/test_api.py -> 1 failed (0.32 s, p99 850ms, E1042)\n"
    )
    assert s2.passes_gate(prose, len(SEGMENT), source=SEGMENT) == (True, "ok")


def test_retry_emphasis_names_the_problem() -> None:
    assert "copied exactly" in s2.retry_emphasis("facts not in the segment: 8443")
    assert "at least 24 characters" in s2.retry_emphasis("too short (20 chars of notes < 24)")
    assert "at most 500 characters" in s2.retry_emphasis("larger than what it replaces (5 >= 1)", max_chars=1000)
    assert "no apology" in s2.retry_emphasis("refusal ('I'm sorry')")
    assert s2.retry_emphasis("x").startswith("IMPORTANT: your previous answer was rejected (x).")


def test_summary_prompt_carries_the_emphasis_before_the_segment() -> None:
    prompt = s2.summary_prompt("[user]: hi\n\n", emphasis="IMPORTANT: be exact")
    assert prompt.index("IMPORTANT: be exact") < prompt.index(s2.SEGMENT_LINE)
    assert "IMPORTANT" not in s2.summary_prompt("[user]: hi\n\n")


def test_summary_max_tokens_follows_segment_and_window() -> None:
    assert s2.summary_max_tokens(1_000, None) == 256
    assert s2.summary_max_tokens(24_000, None) == 2000
    assert s2.summary_max_tokens(10**7, None) == 2048
    assert s2.summary_max_tokens(24_000, 2048) == 512  # llama.cpp counts the output against n_ctx


# ledger and extractive summary -------------------------------------------------------------------


def test_with_ledger_lists_only_what_the_prose_lost() -> None:
    from contextkit.policy import ledger as ids

    led = ids.extract(SEGMENT)
    merged = s2.with_ledger("Fixed src/app/api.py.", led, len(SEGMENT) * 10)
    table = merged[merged.index(ids.LEDGER_HEADER) :]
    assert "src/app/api.py" not in table and "8081" in table and "pytest -q tests/test_api.py" in table
    assert ids.retention(led.all(), merged) == 1.0
    assert s2.with_ledger("all here", ids.Ledger(()), 1000) == "all here"


def test_extractive_summary_first_and_last_lines_and_ledger_within_half() -> None:
    from contextkit.policy import ledger as ids

    body = "\n".join(["FIRST line of the file"] + ["middle of the file"] * 200 + ["LAST line, exit code 3"])
    h = [Message.system("s"), Message.user("Look at src/app/api.py on port 8081")]
    h += [Message.assistant("reading", [ToolCall("c1", "read_file", '{"path": "src/app/api.py"}')])]
    h += [Message.tool("c1", body), Message.assistant("done: E1042 fixed"), Message.user("recent")]
    plan = s2.plan_segment(h, min_keep_recent=1)
    assert plan is not None
    transcript = s2.segment_transcript(plan)
    led = ids.extract(transcript)
    text = s2.extractive_summary(plan, led, len(transcript))
    assert text.startswith(s2.EXTRACTIVE_HEADER) and len(text) <= len(transcript) // 2
    assert "FIRST line of the file ... LAST line, exit code 3" in text and "middle of the file" not in text
    assert "- [assistant read_file] reading" in text
    assert ids.retention(led.all(), text) == 1.0


def test_extractive_summary_of_many_messages_counts_what_it_leaves_out() -> None:
    from contextkit.policy import ledger as ids

    h = [Message.system("s")] + [Message.user(f"message {i} " + "w" * 30) for i in range(300)] + [Message.user("r")]
    plan = s2.plan_segment(h, min_keep_recent=1)
    assert plan is not None
    transcript = s2.segment_transcript(plan)
    text = s2.extractive_summary(plan, ids.extract(transcript), len(transcript))
    assert len(text) <= len(transcript) // 2
    assert "older messages not listed)" in text and "message 299" in text  # the most recent are kept


def test_extractive_lines_never_cut_a_marker() -> None:
    from contextkit.policy import ledger as ids

    stub = "[Old tool result cleared - 402 lines] " + "x" * 300 + f" recall {marker(key_for('orig'))} for it"
    h = [Message.system("s"), *[Message.user(stub) for _ in range(6)], Message.user("r")]
    plan = s2.plan_segment(h, min_keep_recent=1)
    assert plan is not None
    transcript = s2.segment_transcript(plan)
    text = s2.extractive_summary(plan, ids.extract(transcript), len(transcript))
    assert text.count(marker(key_for("orig"))) == 6 and "<<ccr..." not in text
