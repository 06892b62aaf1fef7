"""The compaction pipeline with a scripted summarizer: stages and phases, gate, faults, cancellation,
back-off, hooks, undo, flush and counters."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextkit.archive import Archive
from contextkit.compaction.compactor import TRIGGERS, CompactionInfo, CompactionStats, Compactor, WorkbenchWriter
from contextkit.compaction.summarizer import ScriptedSummarizer, SummaryRequest, SummaryResponse, SummaryTimeout
from contextkit.events import CompactionEvent, EventLog, NoticeEvent
from contextkit.messages import Message, ToolCall
from contextkit.policy import summary as s2
from contextkit.policy.expand import expand_markers
from contextkit.policy.pairing import find_orphans
from contextkit.settings import Limits
from contextkit.sizing import request_bytes

GOOD = "## Summary\n- point " * 8
REFUSAL = "I'm sorry, I cannot summarize this conversation for you today."


def measure(history: Sequence[Message]) -> int:
    return request_bytes(history)


def fixture(recent: int = 2) -> list[Message]:
    out = [Message.system("charter")]
    for _ in range(3):
        out += [Message.user("question detail " * 50), Message.assistant("answer detail " * 50)]
    return out + [Message.user("recent") for _ in range(recent)]


def big_fixture() -> list[Message]:
    """The back-off history: fixture(2) + 4 x (filler, reply)."""
    h = fixture(2)
    for _ in range(4):
        h += [Message.user("filler " * 400), Message.assistant("reply " * 400)]
    return h


def make(limits: Limits | None = None, **kwargs: Any) -> tuple[Compactor, Archive, EventLog]:
    archive, log = Archive.in_memory(), EventLog()
    limits = limits or Limits(min_keep_recent=2, emergency_keep_messages=2)
    return Compactor(archive=archive, limits=limits, events=log, **kwargs), archive, log


def phases(result: Any) -> list[tuple[str, str]]:
    return [(e.phase, e.outcome) for e in result.events]


def assert_nothing_lost(original: Sequence[Message], result: Sequence[Message], archive: Archive) -> None:
    expanded = "\n".join(expand_markers(m.content, archive) for m in result)
    for m in original:
        assert m.content in expanded, m.content[:60]
    assert find_orphans(result) == ([], [])


# trim stage / no-op ---------------------------------------------------------------------------


def test_noop_pass_is_skipped_and_keeps_no_snapshot() -> None:
    compactor, _, log = make()
    h = fixture()
    summarizer = ScriptedSummarizer(GOOD)
    result = compactor.compact(h, summarizer=summarizer, trigger="auto", budget=10 * measure(h), measure=measure)
    assert result.outcome == "skipped" and not result.changed and result.stage == ""
    assert result.history == h and summarizer.calls == 0
    assert compactor.undo_stack == [] and compactor.pop_undo() is None
    assert compactor.stats.compactions == 0
    assert phases(result)[0] == ("start", "running") and phases(result)[-1] == ("done", "skipped")
    assert {p for p, _ in phases(result)} >= {"trim", "dedup", "microcompact", "budget"}
    assert all(isinstance(e, CompactionEvent) for e in log)


def test_the_trim_stage_dedups_whole_reads_and_leaves_one_liners_alone() -> None:
    """A read cleared to a one-liner and read again later stays as it is: its dedup stub would be a
    hundred characters shorter and break the prompt cache far back; a whole read is stubbed."""
    compactor, _, _ = make()
    one_liner = "[Old tool result cleared - 300 lines, 9000 chars, python; read_file a.py; names: " + ", ".join(
        f"compute_{i}_totals" for i in range(6)
    ) + "]\n[full content recoverable via @recall <<ccr:0123456789abcdef>>]"
    h = [Message.system("s"), Message.user("go")]
    reads = [("a.py", one_liner), ("b.py", "x = 1\n" * 400), ("a.py", "y = 2\n" * 400), ("b.py", "z = 3\n" * 400)]
    for i, (path, body) in enumerate(reads):
        h += [
            Message.assistant("", [ToolCall(f"c{i}", "read_file", f'{{"path": "{path}"}}')]),
            Message.tool(f"c{i}", body, name="read_file", path=path),
        ]
    h += [Message.assistant("done"), Message.user("next")]
    result = compactor.compact(h, summarizer=None, trigger="auto", budget=measure(h) - 100, measure=measure)
    assert result.changed
    assert result.history[3] == h[3]  # the one-liner of a.py, read again at c2
    assert result.history[5].content.startswith("[Earlier read of b.py superseded")  # b.py, read again at c3


def test_trim_is_enough_for_old_big_tool_results() -> None:
    compactor, archive, _ = make()
    statuses: list[str] = []
    compactor.status = statuses.append
    h = [Message.system("s"), Message.user("go")]
    for i in range(6):
        h += [Message.assistant("", [ToolCall(f"c{i}", "bash")]), Message.tool(f"c{i}", f"line {i}\n" * 3000)]
    h += [Message.assistant("done"), Message.user("next")]
    before = copy.deepcopy(h)
    summarizer = ScriptedSummarizer(GOOD)
    result = compactor.compact(h, summarizer=summarizer, trigger="auto", budget=measure(h) // 2, measure=measure)
    assert result.outcome == "applied" and result.stage == "trim" and result.within_budget
    assert summarizer.calls == 0
    assert ("microcompact", "applied") in phases(result)
    assert statuses[0].startswith("Compacting history (16 msgs, ") and " -> target " in statuses[0]
    assert "Trim: dropping reasoning/duplicates (no LLM)" in statuses
    assert any(s.startswith("Trim was enough (") for s in statuses)
    assert h == before  # the caller's list is untouched
    assert compactor.pop_undo() == before
    assert_nothing_lost(before, result.history, archive)


@pytest.mark.parametrize("summarizer", [True, False])
def test_a_trim_that_leaves_no_room_below_the_budget_is_not_enough(summarizer: bool) -> None:
    """Old results already one-liners, one more to age: the trim stage gets just under the budget
    (it frees 3 KB of 56). Stopping there, the next turn's pass would rewrite old results again for
    a few KB (each a prompt-cache break): the pass goes on - to the summary, or without a
    summarizer to truncation - and leaves room below the budget."""
    compactor, archive, _ = make()
    h = [Message.system("s")]
    for i in range(12):
        body = "line\n" * 700 if i == 2 else f"[Old tool result cleared - {i}]"  # the only result left to age
        h += [Message.user(f"step {i}"), Message.assistant("", [ToolCall(f"c{i}", "bash")]), Message.tool(f"c{i}", body)]
        h += [Message.assistant(f"noted {i} " + "detail " * 600)]
    budget = measure(h) - 100
    script = ScriptedSummarizer(GOOD)
    result = compactor.compact(h, summarizer=script if summarizer else None, trigger="auto", budget=budget,
                               measure=measure)  # fmt: skip
    assert ("microcompact", "applied") in phases(result)
    assert result.stage == ("summary" if summarizer else "truncation"), phases(result)
    assert script.calls == (1 if summarizer else 0)
    assert measure(result.history) <= budget - Limits().clear_at_least * budget
    assert_nothing_lost(h, result.history, archive)


# summary stage -------------------------------------------------------------------------------


def test_summary_applied_with_events_retention_and_counters() -> None:
    compactor, archive, log = make()
    h = fixture()
    seen: list[CompactionEvent] = []

    def answer(request: SummaryRequest) -> SummaryResponse:
        last = log[len(log) - 1]
        assert isinstance(last, CompactionEvent)
        seen.append(last)  # the "running" event is out before the call
        assert "CONVERSATION SEGMENT TO EXTRACT FROM:" in request.prompt
        return SummaryResponse(GOOD + "question detail", 1000, 200, 0.25, "m")

    summarizer = ScriptedSummarizer(answer)
    result = compactor.compact(h, summarizer=summarizer, trigger="auto", budget=measure(h) - 500, measure=measure)
    assert seen[0].phase == "summarize" and seen[0].outcome == "running"
    assert seen[0].status == "Summarizing old messages via LLM (may take 30-90 s)"
    assert result.stage == "summary" and result.outcome == "applied" and result.summary_calls == 1
    summary = result.history[1]
    assert summary.is_summary and summary.summary_of == 6
    assert summary.content.startswith("[STRUCTURED SUMMARY - covering 6 earlier messages]")
    assert "@recall <<ccr:" in summary.content
    applied = next(e for e in result.events if e.phase == "summarize" and e.outcome == "applied")
    assert applied.status.startswith("Summary applied (9 -> 4 msgs, ")
    assert applied.summarizer_prompt_tokens == 1000 and applied.summarizer_cost == 0.25
    assert applied.identifier_retention is None  # this segment has no identifiers
    stats = compactor.stats
    assert (stats.compactions, stats.truncation_falls, stats.summary_calls) == (1, 0, 1)
    assert (stats.summarizer_prompt_tokens, stats.summarizer_completion_tokens, stats.summarizer_cost) == (
        1000,
        200,
        0.25,
    )
    assert CompactionStats.from_dict(stats.to_dict()) == stats
    assert compactor.backoff == 0
    assert_nothing_lost(h, result.history, archive)


def test_identifier_retention_is_recorded() -> None:
    compactor, _, log = make()
    h = fixture()
    h[2] = Message.assistant("I read src/app/main.py and ran\n$ pytest -q tests/test_api.py\nfailed at 4711")
    summary = "## Files Read\n- src/app/main.py\n## Commands Executed\n- pytest -q tests/test_api.py -> failed\n" + GOOD
    result = compactor.compact(
        h, summarizer=ScriptedSummarizer(summary), trigger="manual", budget=10**6, measure=measure
    )
    # the prose keeps src/app/main.py, tests/test_api.py and the command; 4711 only the ledger keeps
    assert result.stage == "summary" and result.summary_source == "model"
    assert result.prose_retention == pytest.approx(3 / 4) and result.identifier_retention == 1.0
    text = result.history[1].content
    ledger = text[text.index(s2.ids.LEDGER_HEADER) :]
    assert "4711" in ledger and "src/app/main.py" not in ledger  # only what the prose does not quote
    applied = next(e for e in log if isinstance(e, CompactionEvent) and e.phase == "summarize" and e.outcome == "applied")
    assert (applied.identifier_retention, applied.prose_retention, applied.summary_source) == (1.0, 0.75, "model")


@pytest.mark.parametrize(
    "bad",
    [
        REFUSAL,
        "## ok",
        "Error: upstream summarizer exploded with status 500, please retry later " * 2,
        RuntimeError("provider down"),
        SummaryTimeout("summarizer did not answer within 600 s"),
        "",
        "<<ccr:0123456789abcdef>>",
        "## Files Read\n- src/app/invented.py on port 8443, build 9f8e7d6c5b\n## Key Decisions\n- moved to port 8444\n",
    ],
    ids=["refusal", "short", "error_text", "exception", "timeout", "empty", "marker_only", "invented"],
)
def test_bad_summaries_are_retried_once_then_extractive(bad: Any) -> None:
    """Two unusable answers in a row: an extractive summary (ledger + first/last lines), not truncation."""
    compactor, archive, _ = make()
    h = big_fixture()
    h[2] = Message.assistant("I read src/app/main.py and ran\n$ pytest -q tests/test_api.py\nfailed at 4711")
    before = copy.deepcopy(h)
    summarizer = ScriptedSummarizer(bad)
    result = compactor.compact(h, summarizer=summarizer, trigger="auto", budget=9000, measure=measure)
    assert summarizer.calls == 2
    assert result.stage == "summary" and result.outcome == "applied" and result.summary_source == "extractive"
    texts = "\n".join(m.content for m in result.history)
    assert "STRUCTURED SUMMARY" in texts and s2.EXTRACTIVE_HEADER in texts and "CONTEXT TRUNCATED" not in texts
    if isinstance(bad, str) and bad:
        assert bad not in texts
    for ident in ("src/app/main.py", "pytest -q tests/test_api.py", "4711"):
        assert ident in texts
    assert result.identifier_retention == 1.0 and result.prose_retention is None
    outcomes = [(e.phase, e.outcome) for e in result.events if e.phase == "summarize"]
    assert outcomes == [("summarize", o) for o in ("running", "rejected", "failed", "applied")]
    failed = next(e for e in result.events if e.outcome == "failed")
    assert failed.status.startswith("Summarization failed (") and "extractive summary instead" in failed.status
    stats = compactor.stats
    assert (stats.truncation_falls, stats.extractive_summaries, stats.model_pauses) == (0, 1, 1)
    assert stats.summary_rejections + stats.summary_failures == 2 and compactor.backoff == 0
    assert h == before
    assert_nothing_lost(before, result.history, archive)


def test_invented_clauses_are_dropped_and_the_rest_of_the_answer_kept() -> None:
    """A weak model's notes with one invented ticket: the clause goes, the notes stay, both are counted."""
    compactor, archive, _ = make()
    h = big_fixture()
    h[2] = Message.assistant("I read src/app/main.py and ran\n$ pytest -q tests/test_api.py\nfailed at 4711")
    answer = (
        "## Files Read\n- src/app/main.py was read, then ticket OPS-1038 opened.\n"
        "## Key Decisions\n- kept the retry loop because the failure was flaky\n"
        "## Current Task State\n- Pending: deploy build 9f8e7d6c5b\n"
    )
    summarizer = ScriptedSummarizer(answer)
    result = compactor.compact(h, summarizer=summarizer, trigger="auto", budget=9000, measure=measure)
    assert summarizer.calls == 1 and result.summary_source == "model"
    summary = result.history[1].content
    assert "OPS-1038" not in summary and "9f8e7d6c5b" not in summary and "Current Task State" not in summary
    assert "- src/app/main.py was read" in summary and "kept the retry loop" in summary
    applied = next(e for e in result.events if e.phase == "summarize" and e.outcome == "applied")
    assert "2 clauses with facts not in the segment dropped (" in applied.detail
    assert "OPS-1038" in applied.detail and "9f8e7d6c5b" in applied.detail
    stats = compactor.stats
    assert (stats.summary_rejections, stats.summaries_trimmed) == (0, 1)
    assert stats.prose_chars_received == len(answer.strip()) > stats.prose_chars_kept > 0
    assert_nothing_lost(h, result.history, archive)


def test_extractive_summary_that_does_not_fit_still_falls_to_truncation() -> None:
    compactor, archive, _ = make()
    h = big_fixture()
    result = compactor.compact(h, summarizer=ScriptedSummarizer(REFUSAL), trigger="auto", budget=4200, measure=measure)
    phases_ = phases(result)
    assert ("summarize", "applied") in phases_ and ("truncate", "applied") in phases_
    assert result.stage == "truncation" and result.within_budget and compactor.stats.truncation_falls == 1
    assert_nothing_lost(h, result.history, archive)


def test_retry_changes_the_request() -> None:
    """A retry after a rejection names the rejection and changes the temperature: never the identical call."""
    compactor, _, _ = make()
    summarizer = ScriptedSummarizer(["## ok", GOOD])
    result = compactor.compact(big_fixture(), summarizer=summarizer, trigger="auto", budget=9000, measure=measure)
    first, second = summarizer.requests
    assert result.summary_source == "model" and result.summary_calls == 2
    assert (first.temperature, second.temperature) != (None, None) and first.temperature != second.temperature
    assert first.prompt != second.prompt and "too short" in second.prompt and "IMPORTANT" in second.prompt
    assert first.max_tokens == second.max_tokens and first.max_tokens is not None
    assert "IMPORTANT" not in first.prompt


def test_model_pause_is_adaptive_and_resets_after_a_good_summary() -> None:
    """Two unusable answers pause the model; a failed probe doubles the pause; a good one resets it."""
    compactor, _, _ = make()
    calls_per_pass, sources = [], []

    def run(summarizer: ScriptedSummarizer) -> None:
        before = summarizer.calls
        result = compactor.compact(big_fixture(), summarizer=summarizer, trigger="auto", budget=9000, measure=measure)
        calls_per_pass.append(summarizer.calls - before)
        sources.append(result.summary_source)

    bad = ScriptedSummarizer(REFUSAL)
    for _ in range(9):
        run(bad)
    # pass 1: attempt + retry; 2 paused passes; pass 4: one probe (fails: pause doubles to 4); 4 paused; probe
    assert calls_per_pass == [2, 0, 0, 1, 0, 0, 0, 0, 1]
    assert sources == ["extractive"] * 9
    assert compactor.model_pause == 8 and compactor.stats.model_pauses == 3
    manual = compactor.compact(
        big_fixture(), summarizer=ScriptedSummarizer(GOOD), trigger="manual", budget=9000, measure=measure
    )
    assert manual.summary_source == "model"  # a manual pass asks the model even while it is paused
    assert (compactor.discarded_in_row, compactor.next_pause, compactor.model_pause) == (0, 2, 0)
    run(ScriptedSummarizer(GOOD))
    assert sources[-1] == "model" and calls_per_pass[-1] == 1


def test_refusal_under_budget_is_a_skipped_manual_compaction() -> None:
    """A rejected manual pass pops its snapshot and reports skipped."""
    posts: list[CompactionInfo] = []
    compactor, _, _ = make(post_compact=posts.append)
    h = fixture()
    summarizer = ScriptedSummarizer(REFUSAL)
    result = compactor.compact(h, summarizer=summarizer, trigger="manual", budget=10 * measure(h), measure=measure)
    assert summarizer.calls == 2
    assert result.outcome == "skipped" and result.history == h
    assert compactor.undo_stack == [] and compactor.stats.compactions == 0
    assert [(p.trigger, p.outcome) for p in posts] == [("manual", "skipped")]


def test_second_attempt_can_succeed() -> None:
    compactor, _, _ = make()
    summarizer = ScriptedSummarizer([REFUSAL, GOOD])
    result = compactor.compact(fixture(), summarizer=summarizer, trigger="manual", budget=10**6, measure=measure)
    assert summarizer.calls == 2 and result.stage == "summary"
    assert compactor.stats.summary_rejections == 1 and compactor.stats.summary_calls == 2


def test_backoff_over_four_runs() -> None:
    """A summary that never converges -> truncation; the next two runs skip the summary; run 4 pays again."""
    compactor, _, _ = make()
    summarizer = ScriptedSummarizer(SummaryResponse("## Never converges\n- detail " * 400, 1000, 200, 0.5, "m"))
    stages, calls, skipped = [], [], []
    for _ in range(4):
        result = compactor.compact(big_fixture(), summarizer=summarizer, trigger="auto", budget=4200, measure=measure)
        stages.append(result.stage)
        calls.append(summarizer.calls)
        skipped.append(any(e.detail == "backoff" for e in result.events))
    assert stages == ["truncation"] * 4
    assert calls == [1, 1, 1, 2]
    assert skipped == [False, True, True, False]
    assert compactor.stats.summarizer_prompt_tokens == 2000 and compactor.stats.summarizer_cost == 1.0


def test_manual_instruction_and_compact_model_are_passed_through() -> None:
    limits = Limits.from_env({"CONTEXTKIT_COMPACT_MODEL": "openai/small-summarizer"}, min_keep_recent=2)
    compactor, _, _ = make(limits)
    summarizer = ScriptedSummarizer(GOOD)
    result = compactor.compact(
        fixture(),
        summarizer=summarizer,
        trigger="manual",
        budget=10**6,
        measure=measure,
        instruction="keep the DB notes",
    )
    request = summarizer.requests[0]
    assert request.model == "openai/small-summarizer" and request.timeout == limits.summary_timeout
    assert "keep the DB notes" in request.prompt
    assert result.history[1].content.startswith(
        '[COMPACTED CONTEXT - 6 messages summarized per user instruction: "keep'
    )


def test_no_summarizer_means_no_summary_stage() -> None:
    compactor, archive, _ = make()
    h = big_fixture()
    result = compactor.compact(h, summarizer=None, trigger="recovery", budget=4200, measure=measure)
    assert result.stage == "truncation" and result.summary_calls == 0
    assert_nothing_lost(h, result.history, archive)


# cancellation --------------------------------------------------------------------------------


def test_keyboard_interrupt_during_summary_changes_nothing() -> None:
    posts: list[CompactionInfo] = []
    compactor, _, log = make(post_compact=posts.append)
    h = big_fixture()
    before = copy.deepcopy(h)
    with pytest.raises(KeyboardInterrupt):
        compactor.compact(
            h, summarizer=ScriptedSummarizer(KeyboardInterrupt()), trigger="auto", budget=4200, measure=measure
        )
    assert h == before
    assert compactor.undo_stack == [] and compactor.stats.compactions == 0 and compactor.backoff == 0
    last = log[len(log) - 1]
    assert isinstance(last, CompactionEvent) and last.outcome == "cancelled"
    assert last.messages_after == len(before) and "history unchanged" in last.status
    assert [p.outcome for p in posts] == ["cancelled"]
    assert not any(e.phase == "truncate" for e in log.of_type(CompactionEvent))  # no blind fallback


def test_task_cancellation_of_acompact_changes_nothing() -> None:
    compactor, _, log = make()
    h = big_fixture()
    before = copy.deepcopy(h)
    started = asyncio.Event()

    class Slow(ScriptedSummarizer):
        async def asummarize(self, request: SummaryRequest) -> SummaryResponse:
            started.set()
            await asyncio.sleep(30)
            return SummaryResponse(GOOD)

    async def main() -> None:
        task = asyncio.create_task(
            compactor.acompact(h, summarizer=Slow(GOOD), trigger="auto", budget=4200, measure=measure)
        )
        await asyncio.wait_for(started.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert h == before and compactor.undo_stack == []
    last = log[len(log) - 1]
    assert isinstance(last, CompactionEvent) and last.outcome == "cancelled"


def test_acompact_applies_and_times_out() -> None:
    compactor, archive, _ = make(Limits(min_keep_recent=2, emergency_keep_messages=2, summary_timeout=0.05))

    class Hanging(ScriptedSummarizer):
        async def asummarize(self, request: SummaryRequest) -> SummaryResponse:
            self.requests.append(request)
            await asyncio.sleep(5)
            return SummaryResponse(GOOD)

    hanging = Hanging(GOOD)
    h = big_fixture()
    result = asyncio.run(compactor.acompact(h, summarizer=hanging, trigger="auto", budget=4200, measure=measure))
    assert hanging.calls == 2 and result.stage == "truncation"
    assert "SummaryTimeout" in next(e for e in result.events if e.outcome == "failed").detail
    assert_nothing_lost(h, result.history, archive)
    ok = asyncio.run(
        compactor.acompact(
            fixture(), summarizer=ScriptedSummarizer(GOOD), trigger="manual", budget=10**6, measure=measure
        )
    )
    assert ok.stage == "summary"


# hooks, flush, undo --------------------------------------------------------------------------


def test_pre_compact_can_veto_auto_but_not_recovery() -> None:
    pre: list[CompactionInfo] = []

    def veto(info: CompactionInfo) -> bool:
        pre.append(info)
        return False

    compactor, _, _ = make(pre_compact=veto)
    h = big_fixture()
    summarizer = ScriptedSummarizer(GOOD)
    vetoed = compactor.compact(h, summarizer=summarizer, trigger="auto", budget=4200, measure=measure)
    assert vetoed.outcome == "skipped" and vetoed.history == h and summarizer.calls == 0
    assert vetoed.detail == "vetoed by pre_compact" and compactor.undo_stack == []
    assert pre[0].trigger == "auto" and pre[0].messages_before == len(h) and pre[0].bytes_before == measure(h)
    forced = compactor.compact(h, summarizer=summarizer, trigger="recovery", budget=4200, measure=measure)
    assert forced.outcome == "applied" and forced.stage == "truncation"


def test_post_compact_gets_sizes_stage_outcome_and_errors_do_not_break() -> None:
    posts: list[CompactionInfo] = []

    def post(info: CompactionInfo) -> None:
        posts.append(info)
        raise RuntimeError("hook bug")

    compactor, _, log = make(post_compact=post)
    h = fixture()
    result = compactor.compact(h, summarizer=ScriptedSummarizer(GOOD), trigger="manual", budget=10**6, measure=measure)
    assert result.stage == "summary"
    info = posts[0]
    assert (info.trigger, info.stage, info.outcome) == ("manual", "summary", "applied")
    assert info.messages_before == 9 and info.messages_after == 4 and info.bytes_after == measure(result.history)
    assert any(isinstance(e, NoticeEvent) and e.code == "hook_error" for e in log)


def test_undo_stack_only_for_applied_passes() -> None:
    compactor, _, _ = make()
    h = fixture()
    compactor.compact(h, summarizer=ScriptedSummarizer(GOOD), trigger="auto", budget=10**6, measure=measure)
    assert compactor.undo_stack == []
    compactor.compact(h, summarizer=ScriptedSummarizer(GOOD), trigger="manual", budget=10**6, measure=measure)
    assert compactor.pop_undo() == h and compactor.pop_undo() is None


def test_flush_goes_to_workbench_before_rewrite(tmp_path: Path) -> None:
    writer = WorkbenchWriter.for_session(tmp_path, "sess/1")
    flushed: list[tuple[int, str]] = []

    def sink(messages: Sequence[Message], info: CompactionInfo) -> None:
        flushed.append((len(messages), info.phase))
        writer(messages, info)

    compactor, _, _ = make(on_flush=sink, session_id="sess/1")
    h = big_fixture()
    summarizer = ScriptedSummarizer(SummaryResponse("## Never converges\n- detail " * 400))
    compactor.compact(h, summarizer=summarizer, trigger="auto", budget=4200, measure=measure)
    assert flushed[0] == (14, "summarize")  # the compactable middle, before the call
    assert all(phase in ("summarize", "truncate") for _, phase in flushed)
    text = writer.path.read_text(encoding="utf-8")
    assert writer.path.name == "sess_1.workbench.md"
    assert "question detail" in text and "### assistant" in text and "summarize (auto)" in text
    # 3 fillers were in the summarized middle; the 4th is in the kept tail; nothing is written twice
    assert text.count("### user\n\n```\nfiller") == 3
    assert flushed == [(14, "summarize"), (1, "truncate")]  # then only the new summary message is dropped


def test_broken_flush_sink_does_not_stop_compaction() -> None:
    def broken(messages: Sequence[Message], info: CompactionInfo) -> None:
        raise OSError("disk full")

    compactor, _, log = make(on_flush=broken)
    result = compactor.compact(
        fixture(), summarizer=ScriptedSummarizer(GOOD), trigger="manual", budget=10**6, measure=measure
    )
    assert result.stage == "summary"
    assert any(isinstance(e, NoticeEvent) and e.code == "flush_error" for e in log)


def test_verbatim_survives_summary_and_pairing_stays_valid() -> None:
    compactor, archive, _ = make()
    h = [
        *fixture(0),
        Message.assistant("", [ToolCall("r1", "recall", '{"key":"abc"}')]),
        Message.tool("r1", "RECALLED ORIGINAL " + "x" * 300, preserve_verbatim=True, is_recall=True),
        Message.assistant("thanks"),
        Message.user("recent 1"),
        Message.user("recent 2"),
    ]
    result = compactor.compact(h, summarizer=ScriptedSummarizer(GOOD), trigger="manual", budget=10**6, measure=measure)
    assert result.stage == "summary"
    assert find_orphans(result.history) == ([], [])
    kept = [m for m in result.history if "RECALLED ORIGINAL" in m.content]
    assert kept and kept[0].role == "user" and kept[0].tool_call_id is None
    assert_nothing_lost(h, result.history, archive)


def test_bad_arguments_are_clear() -> None:
    compactor, _, _ = make()
    with pytest.raises(ValueError, match="trigger must be one of"):
        compactor.compact(fixture(), summarizer=None, trigger="sometimes", budget=100, measure=measure)
    with pytest.raises(ValueError, match="budget must be a positive"):
        compactor.compact(fixture(), summarizer=None, trigger="auto", budget=0, measure=measure)


def test_token_measure_fills_event_tokens() -> None:
    compactor, _, _ = make()
    h = fixture()
    result = compactor.compact(
        h, summarizer=ScriptedSummarizer(GOOD), trigger="manual", budget=10**6, measure=measure,
        token_measure=lambda hist: sum(len(m.content) // 4 for m in hist),
    )  # fmt: skip
    done = result.events[-1]
    assert done.tokens_before == sum(len(m.content) // 4 for m in h) > done.tokens_after > 0
    assert result.tokens_before == done.tokens_before and result.tokens_after == done.tokens_after


# whole-pipeline invariants -------------------------------------------------------------------


@st.composite
def agent_histories(draw: st.DrawFn) -> list[Message]:
    size = st.sampled_from([0, 5, 50, 700, 4_000, 30_000])
    out = [Message.system("rules " * draw(st.integers(1, 40)))]
    out += [Message.user(f"task {'t' * draw(size)}")]
    for i in range(draw(st.integers(0, 16))):
        kind = draw(st.sampled_from(["user", "assistant", "calls", "calls"]))
        pin = draw(st.integers(0, 9)) == 0
        if kind == "user":
            out.append(Message.user(f"u{i} " + "q" * draw(size), preserve_verbatim=pin))
        elif kind == "assistant":
            out.append(Message.assistant(f"a{i} " + "w" * draw(size), reasoning="think " * draw(st.integers(0, 50))))
        else:
            ids = list(
                dict.fromkeys(
                    draw(st.sampled_from(["x:0", "x:1", f"id{i}_{j}"])) for j in range(draw(st.integers(1, 3)))
                )
            )
            out.append(Message.assistant("", [ToolCall(c, "read_file", '{"path":"a.py"}') for c in ids]))
            out += [
                Message.tool(c, f"r{i}{c} " + "line\n" * draw(size), name="read_file", preserve_verbatim=pin)
                for c in ids
            ]
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    agent_histories(),
    st.floats(0.05, 1.2),
    st.sampled_from(["good", "refusal", "exception", "never_fits"]),
    st.sampled_from(TRIGGERS),
)
def test_pipeline_invariants(h: list[Message], ratio: float, mode: str, trigger: str) -> None:
    replies: dict[str, Any] = {
        "good": GOOD,
        "refusal": REFUSAL,
        "exception": RuntimeError("down"),
        "never_fits": "## Never converges\n- detail " * 400,
    }
    compactor, archive, _ = make(Limits(min_keep_recent=4, emergency_keep_messages=4))
    before = copy.deepcopy(h)
    systems = [m for m in h if m.role == "system"]
    budget = max(int(measure(h) * ratio), 1)
    result = compactor.compact(
        h, summarizer=ScriptedSummarizer(replies[mode]), trigger=trigger, budget=budget, measure=measure
    )
    assert h == before
    assert [m for m in result.history if m.role == "system"] == systems
    assert find_orphans(result.history) == ([], [])
    assert_nothing_lost(before, result.history, archive)
    if result.changed:
        assert compactor.pop_undo() == before
    else:
        assert result.history == before and compactor.undo_stack == []
    # fixed overhead of a fully compacted history: notice, pointer stubs, 4 kept messages at their floors,
    # plus the newest user message, which no phase cuts (the task survives; the session's oversize rule
    # excerpts it before compaction when it alone is too big)
    task = next(m for m in reversed(h) if m.role == "user")
    assert task in result.history or task.preserve_verbatim
    # (a manual summary follows the instruction and is not truncated further to reach a target)
    if measure([*systems, task]) + 4_000 < budget and not (trigger == "manual" and result.stage == "summary"):
        assert result.within_budget, (result.bytes_after, budget, result.reports)


def test_flow_is_sans_io() -> None:
    """Drive the generator by hand: it yields requests and takes responses or exception objects."""
    compactor, _, _ = make()
    gen = compactor.flow(big_fixture(), trigger="auto", budget=4200, measure=measure)
    first = next(gen)
    assert isinstance(first, SummaryRequest) and first.attempt == 1
    second = gen.send(ConnectionError("network down"))  # a failed call, not a summary
    assert second.attempt == 2 and second.prompt != first.prompt and second.temperature != first.temperature
    with pytest.raises(StopIteration) as stop:
        gen.send(SummaryResponse("## Files Read\n- none\n" * 10, 10, 5, 0.0, "m"))
    result = stop.value.value
    assert result.stage == "truncation" and result.summary_calls == 2  # the summary did not fit: truncation ran too
    assert ("summarize", "applied") in phases(result) and compactor.backoff == 2
    assert result.history[1].content.startswith("[CONTEXT TRUNCATED: ")


def test_acompact_runs_a_sync_only_summarizer_in_a_thread() -> None:
    class SyncOnly:
        def __init__(self) -> None:
            self.calls = 0

        def summarize(self, request: SummaryRequest) -> SummaryResponse:
            self.calls += 1
            return SummaryResponse(GOOD)

    compactor, _, _ = make()
    sync_only = SyncOnly()
    result = asyncio.run(
        compactor.acompact(fixture(), summarizer=sync_only, trigger="manual", budget=10**6, measure=measure)  # type: ignore[arg-type]
    )
    assert result.stage == "summary" and sync_only.calls == 1


def test_short_history_never_calls_the_summarizer() -> None:
    """[sys, u, a, u2] with min_keep_recent 2 -> unchanged, summarizer never called."""
    compactor, _, _ = make()
    h = [Message.system("s"), Message.user("u"), Message.assistant("a"), Message.user("u2")]
    summarizer = ScriptedSummarizer(RuntimeError("must not be called"))
    result = compactor.compact(h, summarizer=summarizer, trigger="manual", budget=10**6, measure=measure)
    assert summarizer.calls == 0 and result.outcome == "skipped" and result.history == h
    assert any(e.detail == "too_small" for e in result.events)


def agent_run(rounds: int) -> list[Message]:
    """One task and its tool rounds: the whole run is the chain of one user message."""
    h = [Message.system("you fix bugs"), Message.user("the task: fix the bug in io.py")]
    for i in range(rounds):
        h += [Message.assistant(f"step {i}", [ToolCall(f"c{i}", "bash", "{}")]), Message.tool(f"c{i}", f"out {i} " * 300)]
    return h


def test_an_agent_run_is_truncated_down_to_the_target_not_just_below_the_budget() -> None:
    """Cutting only to the budget that triggered the pass would leave the next few requests over it
    again, each truncation a rewrite of everything after the task (a full prompt-cache miss)."""
    history = agent_run(30)
    budget = measure(history) // 2
    limits = Limits(min_keep_recent=2, emergency_keep_messages=40)  # keep alone would cut less than the budget asks
    plain, _, _ = make(limits)
    to_budget = plain.compact(history, summarizer=None, budget=budget, measure=measure)
    deeper, archive, _ = make(limits)
    to_target = deeper.compact(history, summarizer=None, budget=budget, measure=measure, target=budget // 3)
    assert to_budget.stage == to_target.stage == "truncation"
    assert measure(to_target.history) <= budget // 3 < measure(to_budget.history) <= budget
    assert to_target.history[:2] == history[:2]  # the system prompt and the task, still the cached prefix
    assert to_target.history[-2:] == history[-2:] and find_orphans(to_target.history) == ([], [])
    assert_nothing_lost(history, to_target.history, archive)


@pytest.mark.parametrize("target", [0, -5, 2.5, True])
def test_a_target_that_is_not_a_positive_size_is_refused(target: Any) -> None:
    compactor, _, _ = make()
    with pytest.raises(ValueError, match="target must be a positive number of request bytes"):
        compactor.compact(agent_run(3), summarizer=None, budget=1000, measure=measure, target=target)
