"""The compaction pipeline (SPEC S4): phases in order, events, hooks, undo, back-off, counters.

Compaction as data: every phase is a pure policy (``contextkit.policy``); the only network step, the
Level 2 summary, is a ``SummaryRequest`` yielded by the sans-IO ``Compactor.flow`` generator. The
drivers ``compact`` (sync) and ``acompact`` (async) answer it with a ``Summarizer``.

Order: Level 1 trim (reasoning, repeated reads, microcompact, tool-result budgets) -> verbatim cap ->
Level 2 summary (quality gate, one changed retry, identifier ledger; after two unusable answers in a
row an extractive summary and a pause of the model; back-off) -> Level 3 truncation -> content shrink, stopping
as soon as the history fits ``budget`` bytes (``manual`` always tries the summary). The caller's list
is never mutated; the result is all-or-nothing, and a cancelled pass changes nothing (S4.13).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from typing import Any

from contextkit.classify import classify_failure
from contextkit.compaction import (
    Applied,
    CompactionInfo,
    CompactionResult,
    CompactionStats,
    Measure,
    Pass,
    WorkbenchWriter,
    dropped,
)
from contextkit.events import CompactionEvent, EventLog, NoticeEvent
from contextkit.markers import ArchiveSink
from contextkit.messages import Message, newest_request_index, wire_safe
from contextkit.policy import budgets, shrink, trim, truncate
from contextkit.policy import ledger as ids
from contextkit.policy import microcompact as micro
from contextkit.policy import summary as s2
from contextkit.settings import Limits
from contextkit.sizing import format_size
from contextkit.summarizer import Summarizer, SummaryRequest, SummaryResponse, SummaryTimeout

__all__ = ["CompactionInfo", "CompactionResult", "CompactionStats", "Compactor", "WorkbenchWriter"]

TRIGGERS = ("auto", "manual", "recovery")
BACKOFF_RUNS = 2
MODEL_PAUSE_START = 2  # Level-2 passes without model calls after two unusable summaries in a row
MODEL_PAUSE_MAX = 16  # the pause doubles while the model keeps failing, up to this
SUMMARY_TEMPERATURES = (0.0, 0.4)  # first attempt, retry: a retry is never the identical request
SUMMARY_OVERHEAD = 400  # header and recall note around the summary text
UNDO_DEPTH = 10
Flow = Generator[SummaryRequest, SummaryResponse | BaseException, CompactionResult]
_Steps = Generator[SummaryRequest, SummaryResponse | BaseException, None]


class Compactor:
    """Runs the S4 pipeline over a history; keeps undo snapshots, back-off state and counters."""

    def __init__(
        self,
        *,
        archive: ArchiveSink,
        limits: Limits,
        events: EventLog | None = None,
        status: Callable[[str], None] | None = None,
        pre_compact: Callable[[CompactionInfo], Any] | None = None,
        post_compact: Callable[[CompactionInfo], Any] | None = None,
        on_flush: Callable[[Sequence[Message], CompactionInfo], Any] | None = None,
        session_id: str = "",
        clock: Callable[[], float] = time.monotonic,
        turn: Callable[[], int] | None = None,
    ) -> None:
        self.archive = archive
        self.limits = limits
        self.events = events
        self.status = status
        self.pre_compact = pre_compact
        self.post_compact = post_compact
        self.on_flush = on_flush
        self.session_id = session_id
        self.clock = clock
        self.turn = turn  # the session's user-turn count, stamped on every event
        self.stats = CompactionStats()
        self.undo_stack: list[list[Message]] = []
        self.undo_results: list[list[Message]] = []  # what each undo entry's compaction produced
        self.backoff = 0  # S4.6: passes left that skip Level 2
        self.discarded_in_row = 0  # summarizer answers discarded in a row (rejected or failed), across passes
        self.model_pause = 0  # Level-2 passes left that use the extractive summary without calling the model
        self.next_pause = MODEL_PAUSE_START
        self._flushed: set[int] = set()

    def pop_undo(self) -> list[Message] | None:
        """The history before the last applied compaction (None when there is none)."""
        entry = self.pop_undo_entry()
        return entry[0] if entry else None

    def pop_undo_entry(self) -> tuple[list[Message], list[Message] | None] | None:
        """``(history before, history the compaction produced)`` of the last applied compaction."""
        if not self.undo_stack:
            return None
        after = self.undo_results.pop() if len(self.undo_results) == len(self.undo_stack) else None
        return self.undo_stack.pop(), after

    def peek_undo_entry(self) -> tuple[list[Message], list[Message] | None] | None:
        if not self.undo_stack:
            return None
        after = self.undo_results[-1] if len(self.undo_results) == len(self.undo_stack) else None
        return self.undo_stack[-1], after

    def _turn(self) -> int:
        return self.turn() if self.turn is not None else 0

    # reporting ----------------------------------------------------------------------------------
    def _emit(self, run: Pass, info: CompactionInfo, phase: str, status: str, outcome: str, level: int = 0,
              since: tuple[int, int, int] | None = None, **extra: Any) -> None:  # fmt: skip
        """One CompactionEvent; ``since`` = (messages, bytes, tokens) before the phase (default: the pass)."""
        m0, b0, t0 = since or (info.messages_before, info.bytes_before, info.tokens_before or 0)
        event = CompactionEvent(
            session_id=self.session_id, turn=self._turn(), trigger=info.trigger, phase=phase, level=level, status=status,
            outcome=outcome, messages_before=m0, bytes_before=b0, tokens_before=t0,
            messages_after=len(run.history), bytes_after=run.bytes, tokens_after=run.tokens(), **extra,
        )  # fmt: skip
        run.events.append(event)
        if self.events is not None:
            self.events.append(event)
        # Level-1 steps that changed nothing stay in the event log but not on the status line.
        if self.status is not None and status and not (outcome == "skipped" and level == 1):
            self.status(status)

    def _notice(self, code: str, text: str) -> None:
        if self.events is not None:
            self.events.append(
                NoticeEvent(session_id=self.session_id, turn=self._turn(), code=code, text=text, level="warning")
            )

    def _flush(self, messages: Sequence[Message], info: CompactionInfo, phase: str) -> None:
        """Hand the messages about to be rewritten to ``on_flush`` once each (S4.14); best effort."""
        fresh = [m for m in messages if hash(m) not in self._flushed]
        if self.on_flush is None or not fresh:
            return
        try:
            self.on_flush(fresh, replace(info, phase=phase))
        except Exception as exc:  # noqa: BLE001 - notes are best effort; compaction must go on
            self._notice("flush_error", f"on_flush failed ({type(exc).__name__}: {exc}); compaction continued")
            return
        self._flushed.update(hash(m) for m in fresh)

    def _post(self, info: CompactionInfo) -> None:
        if self.post_compact is None:
            return
        try:
            self.post_compact(info)
        except Exception as exc:  # noqa: BLE001 - the history is already decided; report, don't lose it
            self._notice("hook_error", f"post_compact hook failed ({type(exc).__name__}: {exc})")

    # the flow -----------------------------------------------------------------------------------
    def flow(self, history: Sequence[Message], *, trigger: str, budget: int, measure: Measure,
             instruction: str | None = None, summarizer_window: int | None = None,
             token_measure: Measure | None = None, use_summary: bool = True) -> Flow:  # fmt: skip
        """One pass. Yields summary requests; send back a ``SummaryResponse`` or the exception the call raised.

        Throw ``KeyboardInterrupt`` / ``asyncio.CancelledError`` into it to cancel: it reports the
        cancellation and re-raises, and nothing of the pass is kept.
        """
        if trigger not in TRIGGERS:
            raise ValueError(f"trigger must be one of {', '.join(TRIGGERS)}, got {trigger!r}")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
            raise ValueError(f"budget must be a positive number of request bytes, got {budget!r}")
        started = self.clock()
        before = list(history)
        run = Pass(list(before), measure, token_measure)
        tokens = run.tokens() if token_measure else None
        info = CompactionInfo(trigger, self.session_id, budget, len(before), run.bytes, tokens, instruction=instruction)
        if self.pre_compact is not None and self.pre_compact(info) is False and trigger == "auto":
            self._emit(run, info, "start", "Compaction vetoed by the pre_compact hook", "skipped", detail="vetoed")
            return self._finish(run, before, info, started, vetoed=True)
        try:
            yield from self._phases(run, info, instruction, summarizer_window, use_summary)
        except (KeyboardInterrupt, asyncio.CancelledError):
            run.history, run.bytes = before, info.bytes_before
            self._emit(run, info, "done", "Compaction cancelled - history unchanged", "cancelled", **run.usage())
            self._post(
                replace(info, outcome="cancelled", phase="done", messages_after=len(before), bytes_after=run.bytes)
            )
            raise
        return self._finish(run, before, info, started)

    def _phases(
        self, run: Pass, info: CompactionInfo, instruction: str | None, window: int | None, use_summary: bool
    ) -> _Steps:
        budget, size0 = info.budget, format_size(info.bytes_before)
        force_summary = info.trigger == "manual" and use_summary
        self._emit(
            run,
            info,
            "start",
            f"Compacting history ({info.messages_before} msgs, {size0} -> target {format_size(budget)})",
            "running",
        )
        self._level1(run, info)
        if run.bytes <= budget and not force_summary:
            if run.level:
                self._emit(run, info, "trim", f"Trim was enough ({size0} -> {format_size(run.bytes)})", "applied", 1)
            else:
                self._emit(run, info, "trim", f"Already within budget ({size0} <= {format_size(budget)})", "skipped", 1)
            return
        since = (len(run.history), run.bytes, run.tokens())
        new, report = shrink.cap_verbatim(run.history, budget=budget, measure=run.measure, archive=self.archive)
        if run.take(new, report, 1):
            self._emit(
                run, info, "verbatim", report.describe(), "applied", 1, since, archived_keys=tuple(report.archived_keys)
            )
        if run.bytes <= budget and not force_summary:
            return
        if use_summary:
            yield from self._level2(run, info, instruction, window)
        # A manual summary follows the user's instruction; truncating on top of it to reach an
        # arbitrary target would cut what the instruction asked to keep.
        if run.bytes > budget and not (force_summary and run.level >= 2):
            self._level3(run, info)

    def _level1(self, run: Pass, info: CompactionInfo) -> None:
        self._emit(run, info, "trim", "Trim: dropping reasoning/duplicates (no LLM)", "running", 1)
        archive, limits = self.archive, self.limits
        steps: list[tuple[str, Callable[[list[Message]], tuple[list[Message], Any]]]] = [
            ("trim", lambda h: trim.strip_reasoning(h, archive=archive)),
            ("dedup", lambda h: trim.dedup_repeated_reads(h, archive=archive)),
            ("microcompact", lambda h: micro.microcompact(h, archive=archive, config=micro.MicrocompactConfig.from_limits(limits))),
            ("budget", lambda h: budgets.enforce_tool_result_budgets(
                h, archive=archive, turn_budget=limits.tool_result_turn_budget, per_result=limits.tool_result_max_chars)),
        ]  # fmt: skip
        for phase, step in steps:
            since = (len(run.history), run.bytes, run.tokens())
            new, report = step(run.history)
            outcome = "applied" if run.take(new, report, 1) else "skipped"
            self._emit(
                run, info, phase, report.describe(), outcome, 1, since, archived_keys=tuple(report.archived_keys)
            )

    def _level2(self, run: Pass, info: CompactionInfo, instruction: str | None, window: int | None) -> _Steps:
        if self.backoff > 0 and info.trigger != "manual":
            self.backoff -= 1
            text = f"Summary skipped: the last summary did not fit the budget (back-off, {self.backoff} more)"
            self._emit(run, info, "summarize", text, "skipped", 2, detail="backoff")
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
                2,
                detail="too_small",
            )
            return
        since = (len(run.history), run.bytes, run.tokens())
        transcript = s2.segment_transcript(plan)
        ledger = ids.extract(s2.ledger_source(plan, self.archive))
        self._flush(plan.segment, info, "summarize")
        prose: str | None = None
        if self.model_pause > 0 and info.trigger != "manual":
            self.model_pause -= 1
            self._emit(run, info, "summarize", f"Summarizer paused after {self.discarded_in_row} unusable summaries "
                       f"in a row ({self.model_pause} more passes) - extractive summary", "running", 2,
                       detail="model_paused")  # fmt: skip
        else:
            self._emit(run, info, "summarize", "Summarizing old messages via LLM (may take 30-90 s)", "running", 2)
            prose = yield from self._ask_model(run, info, plan, transcript, ledger, instruction, window)
        if prose is None and run.bytes <= info.budget:
            return  # a manual pass under budget: nothing to replace truncation with, so nothing changes
        if prose is None:
            text, source = s2.extractive_summary(plan, ledger, len(transcript)), "extractive"
        else:
            text, source = s2.with_ledger(prose, ledger, len(transcript)), "model"
        if len(text) >= len(transcript):  # only a tiny segment: a summary would not be smaller
            self._emit(run, info, "summarize", "Summary skipped: it would not be smaller than the messages it replaces",
                       "skipped", 2, detail="not_smaller", **run.usage())  # fmt: skip
            return
        key = self.archive.put(
            transcript, kind="segment", origin={"phase": "summary", "messages": plan.count}, allow_markers=True
        )
        new = s2.apply_summary(run.history, plan, text, segment_key=key, instruction=instruction)
        wanted = ledger.all()
        run.retention = ids.retention(wanted, text)
        run.prose_retention = ids.retention(wanted, prose) if prose is not None else None
        run.summary_source = source
        run.take(new, Applied(f"summary ({source}): {plan.count} messages -> 1", (key,) if key else ()), 2)
        if source == "extractive":
            self.stats.extractive_summaries += 1
        fits = run.bytes <= info.budget
        if source == "model":
            self.backoff = 0 if fits else BACKOFF_RUNS  # S4.6: a paid summary that did not fit
        label = "Summary applied" if source == "model" else "Extractive summary applied"
        text = (f"{label} ({since[0]} -> {len(run.history)} msgs, "
                f"{format_size(since[1])} -> {format_size(run.bytes)})")  # fmt: skip
        detail = source if fits or source != "model" else f"{source}; did not fit: back-off"
        self._emit(run, info, "summarize", text, "applied", 2, since, identifier_retention=run.retention,
                   prose_retention=run.prose_retention, summary_source=source,
                   archived_keys=(key,) if key else (), detail=detail, **run.usage())  # fmt: skip

    def _ask_model(self, run: Pass, info: CompactionInfo, plan: s2.SegmentPlan, transcript: str, ledger: ids.Ledger,
                   instruction: str | None, window: int | None) -> Generator[SummaryRequest, Any, str | None]:  # fmt: skip
        """The model's prose, or None after it was discarded (then the caller applies the extractive summary).

        Two discarded answers in a row (across passes) pause the model for ``next_pause`` passes;
        the pause doubles while the model keeps failing and resets after an accepted summary.
        """
        segment_text = s2.summarizer_input(plan, archive=self.archive, window_tokens=window)
        source = s2.ledger_source(plan, self.archive) + "\n" + segment_text  # restored stubs are facts too
        room = len(transcript) - len(s2.with_ledger("", ledger, len(transcript))) - SUMMARY_OVERHEAD
        max_tokens = s2.summary_max_tokens(len(segment_text), window)
        reason, emphasis = "", None
        for attempt in (1, 2):
            request = SummaryRequest(
                wire_safe(s2.summary_prompt(segment_text, instruction, emphasis)),  # the request must encode
                model=self.limits.compact_model, timeout=self.limits.summary_timeout, attempt=attempt,
                temperature=SUMMARY_TEMPERATURES[attempt - 1], max_tokens=max_tokens,
            )  # fmt: skip
            reply = yield request
            run.calls += 1
            self.stats.summary_calls += 1
            size_rejected = False
            if isinstance(reply, SummaryResponse):
                self._count(run, reply)
                ok, reason = s2.passes_gate(
                    reply.text, len(segment_text), source=source, max_chars=room, archive=self.archive
                )
                if ok:
                    self.discarded_in_row, self.next_pause, self.model_pause = 0, MODEL_PAUSE_START, 0
                    return reply.text
                self.stats.summary_rejections += 1
            else:  # the call raised: a failed attempt, never a summary
                reason = f"{type(reply).__name__}: {str(reply)[:160]}"
                self.stats.summary_failures += 1
                # the identical prompt would be refused again: never re-send a rejected body
                size_rejected = _size_rejection(reply)
            self.discarded_in_row += 1
            if size_rejected or self.discarded_in_row >= 2:
                break
            emphasis = s2.retry_emphasis(reason, max_chars=room, floor=min(len(segment_text) // 40, 80))
            text = f"Summary rejected ({reason}) - retrying once with new emphasis and temperature {SUMMARY_TEMPERATURES[1]}"
            self._emit(run, info, "summarize", text, "rejected", 2, detail=reason, **run.usage())
        pause = ""
        if self.discarded_in_row >= 2:
            self.model_pause, self.next_pause = self.next_pause, min(self.next_pause * 2, MODEL_PAUSE_MAX)
            self.stats.model_pauses += 1
            pause = f"; summarizer paused for {self.model_pause} passes"
        text = f"Summarization failed ({reason}) - extractive summary instead{pause}"
        self._emit(run, info, "summarize", text, "failed", 2, detail=reason, **run.usage())
        return None

    def _level3(self, run: Pass, info: CompactionInfo) -> None:
        since = (len(run.history), run.bytes, run.tokens())
        self._emit(run, info, "truncate", "Emergency truncation - old messages dropped", "running", 3)
        new, report = truncate.emergency_truncate(
            run.history, keep=self.limits.emergency_keep_messages, archive=self.archive
        )
        if report.changed:
            self._flush(dropped(run.history, new), info, "truncate")
        changed = run.take(new, report, 3)
        text = (f"Truncated ({since[0]} -> {len(run.history)} msgs, {format_size(since[1])} -> {format_size(run.bytes)})"
                if changed else report.describe())  # fmt: skip
        self._emit(
            run,
            info,
            "truncate",
            text,
            "applied" if changed else "skipped",
            3,
            since,
            archived_keys=tuple(report.archived_keys),
        )
        if run.bytes <= info.budget:
            return
        since = (len(run.history), run.bytes, run.tokens())
        new, shrunk = shrink.shrink_to_budget(
            run.history, budget=info.budget, measure=run.measure, archive=self.archive
        )
        outcome = "applied" if run.take(new, shrunk, 3) else "skipped"
        self._emit(run, info, "shrink", shrunk.describe(), outcome, 3, since, archived_keys=tuple(shrunk.archived_keys))

    def _count(self, run: Pass, reply: SummaryResponse) -> None:
        run.prompt_tokens += reply.prompt_tokens
        run.completion_tokens += reply.completion_tokens
        run.cost += reply.cost
        self.stats.summarizer_prompt_tokens += reply.prompt_tokens
        self.stats.summarizer_completion_tokens += reply.completion_tokens
        self.stats.summarizer_cost += reply.cost

    def _finish(
        self, run: Pass, before: list[Message], info: CompactionInfo, started: float, vetoed: bool = False
    ) -> CompactionResult:
        # S4.10: a no-op is not a compaction - nor is an automatic pass that freed nothing (rewriting
        # for nothing only deepens the marker chains and breaks the prompt cache)
        freed = run.bytes < info.bytes_before or info.trigger == "manual"
        changed = run.level > 0 and run.history != before and freed
        if not changed:
            run.history, run.bytes, run.level = list(before), info.bytes_before, 0
        else:
            self.undo_stack.append(before)
            self.undo_results.append(list(run.history))
            del self.undo_stack[:-UNDO_DEPTH]
            del self.undo_results[:-UNDO_DEPTH]
            self.stats.compactions += 1
            self.stats.level3_falls += run.level >= 3
        outcome = "applied" if changed else "skipped"
        fits = run.bytes <= info.budget
        keys = tuple(dict.fromkeys(run.keys))
        detail = "vetoed by pre_compact" if vetoed else ("" if fits else "still over budget")
        if not vetoed:
            size = f"{len(before)} -> {len(run.history)} msgs, {format_size(info.bytes_before)} -> {format_size(run.bytes)}"
            text = f"Compaction done (level {run.level}, {size})" if changed else f"Nothing compacted ({size})"
            self._emit(run, info, "done", text, outcome, run.level, identifier_retention=run.retention,
                       prose_retention=run.prose_retention, summary_source=run.summary_source,
                       archived_keys=keys, detail=detail, **run.usage())  # fmt: skip
        tokens_after = run.tokens() if run.token_measure else None
        self._post(replace(info, outcome=outcome, level=run.level, phase="done", messages_after=len(run.history),
                           bytes_after=run.bytes, tokens_after=tokens_after))  # fmt: skip
        return CompactionResult(
            history=list(run.history), changed=changed, level=run.level, outcome=outcome, trigger=info.trigger,
            messages_before=len(before), messages_after=len(run.history), bytes_before=info.bytes_before,
            bytes_after=run.bytes, tokens_before=info.tokens_before, tokens_after=tokens_after, within_budget=fits,
            reports=tuple(run.reports), archived_keys=keys, summary_calls=run.calls,
            identifier_retention=run.retention, prose_retention=run.prose_retention,
            summary_source=run.summary_source, detail=detail, duration_s=max(self.clock() - started, 0.0),
            events=tuple(run.events),
        )  # fmt: skip

    # drivers ------------------------------------------------------------------------------------
    def _start(
        self, history: Sequence[Message], summarizer: Summarizer | None, window: int | None, **kwargs: Any
    ) -> Flow:
        if window is None and summarizer is not None:
            window_for = getattr(summarizer, "window_for", None)
            window = (
                window_for(self.limits.compact_model)
                if callable(window_for)
                else getattr(summarizer, "window_tokens", None)
            )
        return self.flow(history, summarizer_window=window, use_summary=summarizer is not None, **kwargs)

    def compact(self, history: Sequence[Message], *, summarizer: Summarizer | None, trigger: str = "auto", budget: int,
                measure: Measure, instruction: str | None = None, summarizer_window: int | None = None,
                token_measure: Measure | None = None) -> CompactionResult:  # fmt: skip
        """Run one pass, answering summary requests with ``summarizer`` (None: no Level 2)."""
        gen = self._start(history, summarizer, summarizer_window, trigger=trigger, budget=budget, measure=measure,
                          instruction=instruction, token_measure=token_measure)  # fmt: skip
        try:
            request = next(gen)
            while True:
                assert summarizer is not None
                reply: SummaryResponse | BaseException
                try:
                    reply = summarizer.summarize(request)
                except (KeyboardInterrupt, asyncio.CancelledError) as exc:
                    request = gen.throw(exc)
                    continue
                except Exception as exc:  # noqa: BLE001 - a failed call is a failed attempt, never a summary
                    reply = exc
                request = gen.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def acompact(self, history: Sequence[Message], *, summarizer: Summarizer | None, trigger: str = "auto",
                       budget: int, measure: Measure, instruction: str | None = None,
                       summarizer_window: int | None = None, token_measure: Measure | None = None) -> CompactionResult:  # fmt: skip
        """Async twin of ``compact``; cancelling the task leaves the history untouched."""
        gen = self._start(history, summarizer, summarizer_window, trigger=trigger, budget=budget, measure=measure,
                          instruction=instruction, token_measure=token_measure)  # fmt: skip
        try:
            request = next(gen)
            while True:
                assert summarizer is not None
                reply: SummaryResponse | BaseException
                try:
                    call = getattr(summarizer, "asummarize", None)  # a sync-only summarizer runs in a thread
                    pending = call(request) if callable(call) else asyncio.to_thread(summarizer.summarize, request)
                    reply = await asyncio.wait_for(pending, request.timeout)
                except (KeyboardInterrupt, asyncio.CancelledError) as exc:
                    request = gen.throw(exc)
                    continue
                except TimeoutError as exc:
                    reply = (
                        exc
                        if isinstance(exc, SummaryTimeout)
                        else SummaryTimeout(f"summarizer did not answer within {request.timeout:g} s")
                    )
                except Exception as exc:  # noqa: BLE001 - a failed call is a failed attempt, never a summary
                    reply = exc
                request = gen.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


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
