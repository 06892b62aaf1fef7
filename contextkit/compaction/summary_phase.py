"""The summary stage of the compaction pipeline, mixed into ``Compactor``.

A summary is the summarizer model's prose merged with the identifier ledger of the segment
(``policy.ledger``), or, when the model's answers are unusable, an extractive summary made without it.
The state that outlives a pass lives here: the back-off after a paid summary that did not bring the
history under its budget (the next passes would pay for another summary that frees too little, so
they go straight to truncation) and the summarizer pause after two discarded answers in a row (2, 4,
8 .. 16 passes; an accepted summary resets it). A retry after a rejection changes the prompt's emphasis and the temperature: it
is never the identical request.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from contextkit.compaction.summarizer import SummaryRequest, SummaryResponse
from contextkit.compaction.types import Applied, CompactionInfo, CompactionStats, Pass
from contextkit.failures.classify import classify_failure
from contextkit.markers import ArchiveSink
from contextkit.messages import Message, newest_request_index, wire_safe
from contextkit.policy import gate
from contextkit.policy import ledger as ids
from contextkit.policy import summary as s2
from contextkit.settings import Limits
from contextkit.sizing import format_size

BACKOFF_RUNS = 2
MODEL_PAUSE_START = 2  # summary stages without model calls after two unusable summaries in a row
MODEL_PAUSE_MAX = 16  # the pause doubles while the model keeps failing, up to this
SUMMARY_TEMPERATURES = (0.0, 0.4)  # first attempt, retry: a retry is never the identical request
SUMMARY_OVERHEAD = 400  # header and recall note around the summary text
LEDGER_CEILING_SHARE = 4  # the ledger stays under a quarter of the pass's byte budget: every later request carries it
PROSE_RESERVE = 1_500  # room kept for the model's prose (or the extractive lines) beside the ledger
_Steps = Generator[SummaryRequest, SummaryResponse | BaseException, None]


class SummaryStage:
    """The summary stage's steps and state of a ``Compactor`` (its archive, limits, counters and event emitter)."""

    archive: ArchiveSink
    limits: Limits
    stats: CompactionStats

    def __init__(self) -> None:
        self.backoff = 0  # passes left that skip the summary stage (a paid summary did not fit the budget)
        self.discarded_in_row = 0  # summarizer answers discarded in a row (rejected or failed), across passes
        self.model_pause = 0  # summary stages left that use the extractive summary without calling the model
        self.next_pause = MODEL_PAUSE_START

    if TYPE_CHECKING:  # provided by Compactor

        def _emit(self, run: Pass, info: CompactionInfo, phase: str, status: str, outcome: str, stage: str = "",
                  since: tuple[int, int, int] | None = None, **extra: Any) -> None: ...  # fmt: skip

        def _flush(self, messages: Sequence[Message], info: CompactionInfo, phase: str) -> None: ...

    def _summary_stage(self, run: Pass, info: CompactionInfo, instruction: str | None, window: int | None) -> _Steps:
        if self.backoff > 0 and info.trigger != "manual":
            self.backoff -= 1
            text = f"Summary skipped: the last summary did not fit the budget (back-off, {self.backoff} more)"
            self._emit(run, info, "summarize", text, "skipped", "summary", detail="backoff")
            return
        plan = s2.plan_segment(run.history, min_keep_recent=self.limits.min_keep_recent)
        if plan is None and info.trigger == "manual" and run.bytes > info.budget:
            plan = _last_exchange_plan(run.history)
        if plan is None:
            self._emit(
                run,
                info,
                "summarize",
                "Summary skipped: fewer than 4 older messages to summarize",
                "skipped",
                "summary",
                detail="too_small",
            )
            return
        since = (len(run.history), run.bytes, run.tokens())
        transcript = s2.segment_transcript(plan)
        # run.keys: the stubs the trim stage of this pass just made; their originals still count as the segment's
        ledger = s2.segment_ledger(
            plan, self.archive, new_keys=set(run.keys), ceiling=self._ledger_ceiling(run, info, plan)
        )
        self._flush(plan.segment, info, "summarize")
        prose: str | None = None
        trimmed = ""  # what the gate dropped from the model's answer (clauses naming invented facts)
        if self.model_pause > 0 and info.trigger != "manual":
            self.model_pause -= 1
            self._emit(run, info, "summarize", f"Summarizer paused after {self.discarded_in_row} unusable summaries "
                       f"in a row ({self.model_pause} more passes) - extractive summary", "running", "summary",
                       detail="model_paused")  # fmt: skip
        else:
            text = "Summarizing old messages via LLM (may take 30-90 s)"
            self._emit(run, info, "summarize", text, "running", "summary")
            # the prose must fit beside the full ledger and keep the summary smaller than the segment
            room = len(transcript) - len(ledger.merged("")) - SUMMARY_OVERHEAD
            prose, trimmed = yield from self._ask_model(run, info, plan, ledger.facts, room, instruction, window)
        if prose is None and run.bytes <= info.budget:
            return  # under budget (a manual pass, or a trim stage that left no room): nothing to replace truncation with
        if prose is None:
            text, source = ledger.extractive(plan, len(transcript)), "extractive"
        else:
            text, source = ledger.merged(prose), "model"
        if len(text) >= len(transcript):  # only a tiny segment: a summary would not be smaller
            self._emit(run, info, "summarize", "Summary skipped: it would not be smaller than the messages it replaces",
                       "skipped", "summary", detail="not_smaller", **run.usage())  # fmt: skip
            return
        key = self.archive.put(
            transcript, kind="segment", origin={"phase": "summary", "messages": plan.count}, allow_markers=True
        )
        new = s2.apply_summary(run.history, plan, text, segment_key=key, instruction=instruction)
        wanted = ledger.identifiers()
        aged = ledger.aged(text)
        run.retention = ids.retention(wanted, text)
        run.prose_retention = ids.retention(wanted, prose) if prose is not None else None
        run.summary_source = source
        run.take(new, Applied(f"summary ({source}): {plan.count} messages -> 1", (key,) if key else ()), "summary")
        if source == "extractive":
            self.stats.extractive_summaries += 1
        fits = run.bytes <= info.budget
        if source == "model":
            self.backoff = 0 if fits else BACKOFF_RUNS  # a paid summary that did not fit: skip the next passes
        label = "Summary applied" if source == "model" else "Extractive summary applied"
        text = (f"{label} ({since[0]} -> {len(run.history)} msgs, "
                f"{format_size(since[1])} -> {format_size(run.bytes)})")  # fmt: skip
        detail = source if fits or source != "model" else f"{source}; did not fit: back-off"
        if trimmed:
            detail += f"; {trimmed}"
        if aged:  # the ledger reached its ceiling: the oldest identifiers stay in the archived segment
            detail += f"; {aged} older identifiers aged out (listed in the archived segment)"
        self._emit(run, info, "summarize", text, "applied", "summary", since, identifier_retention=run.retention,
                   prose_retention=run.prose_retention, summary_source=source,
                   archived_keys=(key,) if key else (), detail=detail, **run.usage())  # fmt: skip

    def _ledger_ceiling(self, run: Pass, info: CompactionInfo, plan: s2.SegmentPlan) -> int:
        """The most the ledger may take: a quarter of the pass's budget, and no more than the budget leaves
        beside the messages the summary keeps (a ledger that pushes the history over the budget would
        only send the pass on to truncation, which drops the summary with it)."""
        share = info.budget // LEDGER_CEILING_SHARE
        room = info.budget - run.measure([*plan.head, *plan.verbatim, *plan.tail]) - SUMMARY_OVERHEAD - PROSE_RESERVE
        return max(min(share, room), share // 4)  # when nothing fits anyway, the ledger still lists the most

    def _ask_model(self, run: Pass, info: CompactionInfo, plan: s2.SegmentPlan, facts: str, room: int,
                   instruction: str | None, window: int | None) -> Generator[SummaryRequest, Any, tuple[str | None, str]]:  # fmt: skip
        """(prose, note): the model's prose as the gate kept it, or None after it was discarded (then the
        caller applies the extractive summary); the note says what the gate dropped from it.

        ``facts`` is what the ledger was taken from (the segment and the originals of this pass's stubs),
        ``room`` the most characters the prose may take.

        Two discarded answers in a row (across passes) pause the model for ``next_pause`` passes;
        the pause doubles while the model keeps failing and resets after an accepted summary.
        """
        segment_text = s2.summarizer_input(plan, archive=self.archive, window_tokens=window)
        source = facts + "\n" + segment_text  # what the summarizer saw of restored stubs is a fact too
        max_tokens = s2.summary_max_tokens(len(segment_text), window)
        reason, emphasis = "", None
        for attempt in (1, 2):
            request = SummaryRequest(
                wire_safe(s2.summary_prompt(segment_text, instruction, emphasis)),  # the request must encode
                model=self.limits.compact_model, timeout=self.limits.summary_timeout, attempt=attempt,
                temperature=SUMMARY_TEMPERATURES[attempt - 1], max_tokens=max_tokens,
                segment=wire_safe(segment_text), budget_chars=room, instruction=instruction,
            )  # fmt: skip
            reply = yield request
            run.calls += 1
            self.stats.summary_calls += 1
            size_rejected = False
            if isinstance(reply, SummaryResponse):
                self._count(run, reply)
                verdict = s2.screen_summary(
                    reply.text, len(segment_text), source=source, max_chars=room, archive=self.archive
                )
                if verdict.ok:
                    self.discarded_in_row, self.next_pause, self.model_pause = 0, MODEL_PAUSE_START, 0
                    self.stats.prose_chars_kept += len(verdict.prose)
                    self.stats.summaries_trimmed += bool(verdict.dropped)
                    return verdict.prose, verdict.note()
                reason = verdict.reason
                self.stats.summary_rejections += 1
            else:  # the call raised: a failed attempt, never a summary
                reason = f"{type(reply).__name__}: {str(reply)[:160]}"
                self.stats.summary_failures += 1
                # the identical prompt would be refused again: never re-send a rejected body
                size_rejected = _size_rejection(reply)
            self.discarded_in_row += 1
            if size_rejected or self.discarded_in_row >= 2:
                break
            emphasis = s2.retry_emphasis(reason, max_chars=room, floor=gate.prose_floor(len(segment_text)))
            text = f"Summary rejected ({reason}) - retrying once with new emphasis and temperature {SUMMARY_TEMPERATURES[1]}"
            self._emit(run, info, "summarize", text, "rejected", "summary", detail=reason, **run.usage())
        pause = ""
        if self.discarded_in_row >= 2:
            self.model_pause, self.next_pause = self.next_pause, min(self.next_pause * 2, MODEL_PAUSE_MAX)
            self.stats.model_pauses += 1
            pause = f"; summarizer paused for {self.model_pause} passes"
        text = f"Summarization failed ({reason}) - extractive summary instead{pause}"
        self._emit(run, info, "summarize", text, "failed", "summary", detail=reason, **run.usage())
        return None, ""

    def _count(self, run: Pass, reply: SummaryResponse) -> None:
        self.stats.prose_chars_received += len((reply.text or "").strip())
        run.prompt_tokens += reply.prompt_tokens
        run.completion_tokens += reply.completion_tokens
        run.cost += reply.cost
        self.stats.summarizer_prompt_tokens += reply.prompt_tokens
        self.stats.summarizer_completion_tokens += reply.completion_tokens
        self.stats.summarizer_cost += reply.cost


def _last_exchange_plan(history: Sequence[Message]) -> s2.SegmentPlan | None:
    """Manual compaction of a short history: keep the newest exchange (the newest user message and
    everything after it), summarize everything older - even a few messages, since the user asked."""
    newest = newest_request_index(history)
    if newest is None:
        return None
    return s2.plan_segment(history, min_keep_recent=len(history) - newest, min_compactable=2)


def _size_rejection(error: BaseException) -> bool:
    """The summary request itself was too big for the window or the gateway (not a transient failure)."""
    return not isinstance(error, TimeoutError) and classify_failure(error).kind.recoverable
