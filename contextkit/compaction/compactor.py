"""The compaction pipeline: its three stages in order, events, hooks, undo, back-off, counters.

Compaction as data: every phase is a pure policy (``contextkit.policy``); the only network step, the
summary, is a ``SummaryRequest`` yielded by the sans-IO ``Compactor.flow`` generator. The drivers
``compact`` (sync) and ``acompact`` (async) answer it with a ``Summarizer``.

Order: the trim stage (reasoning, repeated reads, microcompact, tool-result budgets, then the
verbatim cap) -> the summary stage (``summary_phase``: quality gate, one changed retry, identifier
ledger; after two unusable answers in a row an extractive summary and a pause of the model;
back-off) -> the truncation stage (drop old messages, then content shrink), stopping as soon as the
history fits ``budget`` bytes (``manual`` always tries the summary). The caller's list is never
mutated; the result is all-or-nothing, and a cancelled pass changes nothing: the caller keeps the
history it had, so an interrupted pass can never leave half a rewrite behind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from typing import Any

from contextkit.compaction.summarizer import Summarizer, SummaryRequest, SummaryResponse, SummaryTimeout
from contextkit.compaction.summary_phase import SummaryStage
from contextkit.compaction.types import (
    CompactionInfo,
    CompactionResult,
    CompactionStats,
    Measure,
    Pass,
    WorkbenchWriter,
    dropped,
)
from contextkit.events import CompactionEvent, EventLog, NoticeEvent, stage_rank
from contextkit.markers import ArchiveSink
from contextkit.messages import Message
from contextkit.policy import budgets, shrink, trim, truncate
from contextkit.policy import microcompact as micro
from contextkit.settings import Limits
from contextkit.sizing import format_size

__all__ = ["CompactionInfo", "CompactionResult", "CompactionStats", "Compactor", "WorkbenchWriter"]

TRIGGERS = ("auto", "manual", "recovery")
UNDO_DEPTH = 10
Flow = Generator[SummaryRequest, SummaryResponse | BaseException, CompactionResult]
_Steps = Generator[SummaryRequest, SummaryResponse | BaseException, None]


class Compactor(SummaryStage):
    """Runs the compaction pipeline over a history; keeps undo snapshots, back-off state and counters."""

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
        super().__init__()  # the summary stage's state: back-off and the summarizer pause
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
    def _emit(self, run: Pass, info: CompactionInfo, phase: str, status: str, outcome: str, stage: str = "",
              since: tuple[int, int, int] | None = None, **extra: Any) -> None:  # fmt: skip
        """One CompactionEvent; ``since`` = (messages, bytes, tokens) before the phase (default: the pass)."""
        m0, b0, t0 = since or (info.messages_before, info.bytes_before, info.tokens_before or 0)
        event = CompactionEvent(
            session_id=self.session_id, turn=self._turn(), trigger=info.trigger, phase=phase, stage=stage, status=status,
            outcome=outcome, messages_before=m0, bytes_before=b0, tokens_before=t0,
            messages_after=len(run.history), bytes_after=run.bytes, tokens_after=run.tokens(), **extra,
        )  # fmt: skip
        run.events.append(event)
        if self.events is not None:
            self.events.append(event)
        # Trim steps that changed nothing stay in the event log but not on the status line.
        if self.status is not None and status and not (outcome == "skipped" and stage == "trim"):
            self.status(status)

    def _notice(self, code: str, text: str) -> None:
        if self.events is not None:
            self.events.append(
                NoticeEvent(session_id=self.session_id, turn=self._turn(), code=code, text=text, level="warning")
            )

    def _flush(self, messages: Sequence[Message], info: CompactionInfo, phase: str) -> None:
        """Hand the messages about to be rewritten to ``on_flush`` once each; best effort (a failing sink is
        reported as a notice and the compaction goes on: the archive already holds every original)."""
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
             token_measure: Measure | None = None, use_summary: bool = True, target: int | None = None) -> Flow:  # fmt: skip
        """One pass. Yields summary requests; send back a ``SummaryResponse`` or the exception the call raised.

        ``budget`` is the size the pass must reach; ``target`` (at most ``budget``; default: the budget)
        the size its truncation stage cuts down to, when the pass comes to dropping messages.

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
        if target is not None and (isinstance(target, bool) or not isinstance(target, int) or target <= 0):
            raise ValueError(f"target must be a positive number of request bytes, got {target!r}")
        info = CompactionInfo(trigger, self.session_id, budget, len(before), run.bytes, tokens, instruction=instruction,
                              target=min(target, budget) if target else budget)  # fmt: skip
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
        self._trim_stage(run, info)
        # A no-LLM stage is enough only when it leaves room below the budget (``clear_at_least`` of
        # it): one that stops just under it is followed by another pass a turn or two later, each
        # rewriting old results (a prompt-cache break) for a few KB - once earlier passes' stubs fill
        # the history, that was every turn - so the pass goes on to the summary stage instead.
        settle = budget - int(self.limits.clear_at_least * budget)
        if run.bytes <= budget and not run.stage and not force_summary:
            text = f"Already within budget ({size0} <= {format_size(budget)})"
            self._emit(run, info, "trim", text, "skipped", "trim")
            return
        if run.bytes <= settle and not force_summary:
            text = f"Trim was enough ({size0} -> {format_size(run.bytes)})"
            self._emit(run, info, "trim", text, "applied", "trim")
            return
        since = (len(run.history), run.bytes, run.tokens())
        new, report = shrink.cap_verbatim(run.history, budget=budget, measure=run.measure, archive=self.archive)
        if run.take(new, report, "trim"):
            keys = tuple(report.archived_keys)
            self._emit(run, info, "verbatim", report.describe(), "applied", "trim", since, archived_keys=keys)
        if run.bytes <= settle and not force_summary:
            return
        if use_summary:
            yield from self._summary_stage(run, info, instruction, window)
        # A manual summary follows the user's instruction; truncating on top of it to reach an
        # arbitrary target would cut what the instruction asked to keep.
        if run.bytes > settle and not (force_summary and stage_rank(run.stage) >= stage_rank("summary")):
            self._truncation_stage(run, info)

    def _trim_stage(self, run: Pass, info: CompactionInfo) -> None:
        self._emit(run, info, "trim", "Trim: dropping reasoning/duplicates (no LLM)", "running", "trim")
        archive, limits = self.archive, self.limits
        steps: list[tuple[str, Callable[[list[Message]], tuple[list[Message], Any]]]] = [
            ("trim", lambda h: trim.strip_reasoning(h, archive=archive)),
            ("dedup", lambda h: trim.dedup_repeated_reads(h, archive=archive, one_liners=False)),
            ("microcompact", lambda h: micro.microcompact(h, archive=archive, config=micro.MicrocompactConfig.from_limits(limits))),
            ("budget", lambda h: budgets.enforce_tool_result_budgets(
                h, archive=archive, turn_budget=limits.tool_result_turn_budget, per_result=limits.tool_result_max_chars)),
        ]  # fmt: skip
        for phase, step in steps:
            since = (len(run.history), run.bytes, run.tokens())
            new, report = step(run.history)
            outcome = "applied" if run.take(new, report, "trim") else "skipped"
            keys = tuple(report.archived_keys)
            self._emit(run, info, phase, report.describe(), outcome, "trim", since, archived_keys=keys)

    def _truncation_stage(self, run: Pass, info: CompactionInfo) -> None:
        since = (len(run.history), run.bytes, run.tokens())
        text = "Last resort (truncation): drop old messages, else cut the biggest - all archived first"
        self._emit(run, info, "truncate", text, "running", "truncation")
        new, report = truncate.emergency_truncate(
            run.history, keep=self.limits.emergency_keep_messages, archive=self.archive,
            target=info.target if info.target < info.budget else None, measure=run.measure,
        )  # fmt: skip
        if report.changed:
            self._flush(dropped(run.history, new), info, "truncate")
        changed = run.take(new, report, "truncation")
        text = (f"Truncated ({since[0]} -> {len(run.history)} msgs, {format_size(since[1])} -> {format_size(run.bytes)})"
                if changed else report.describe())  # fmt: skip
        self._emit(
            run,
            info,
            "truncate",
            text,
            "applied" if changed else "skipped",
            "truncation",
            since,
            archived_keys=tuple(report.archived_keys),
        )
        if run.bytes <= info.budget:
            return
        since = (len(run.history), run.bytes, run.tokens())
        new, shrunk = shrink.shrink_to_budget(
            run.history, budget=info.budget, measure=run.measure, archive=self.archive
        )
        outcome = "applied" if run.take(new, shrunk, "truncation") else "skipped"
        keys = tuple(shrunk.archived_keys)
        self._emit(run, info, "shrink", shrunk.describe(), outcome, "truncation", since, archived_keys=keys)

    def _finish(
        self, run: Pass, before: list[Message], info: CompactionInfo, started: float, vetoed: bool = False
    ) -> CompactionResult:
        # A no-op is not a compaction - nor is an automatic pass that freed nothing (rewriting
        # for nothing only deepens the marker chains and breaks the prompt cache)
        freed = run.bytes < info.bytes_before or info.trigger == "manual"
        changed = bool(run.stage) and run.history != before and freed
        if not changed:
            run.history, run.bytes, run.stage = list(before), info.bytes_before, ""
        else:
            self.undo_stack.append(before)
            self.undo_results.append(list(run.history))
            del self.undo_stack[:-UNDO_DEPTH]
            del self.undo_results[:-UNDO_DEPTH]
            self.stats.compactions += 1
            self.stats.truncation_falls += run.stage == "truncation"
        outcome = "applied" if changed else "skipped"
        fits = run.bytes <= info.budget
        keys = tuple(dict.fromkeys(run.keys))
        detail = "vetoed by pre_compact" if vetoed else ("" if fits else "still over budget")
        if not vetoed:
            size = f"{len(before)} -> {len(run.history)} msgs, {format_size(info.bytes_before)} -> {format_size(run.bytes)}"
            text = f"Compaction done ({run.stage} stage, {size})" if changed else f"Nothing compacted ({size})"
            self._emit(run, info, "done", text, outcome, run.stage, identifier_retention=run.retention,
                       prose_retention=run.prose_retention, summary_source=run.summary_source,
                       archived_keys=keys, detail=detail, **run.usage())  # fmt: skip
        tokens_after = run.tokens() if run.token_measure else None
        self._post(replace(info, outcome=outcome, stage=run.stage, phase="done", messages_after=len(run.history),
                           bytes_after=run.bytes, tokens_after=tokens_after))  # fmt: skip
        return CompactionResult(
            history=list(run.history), changed=changed, stage=run.stage, outcome=outcome, trigger=info.trigger,
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
                token_measure: Measure | None = None, target: int | None = None) -> CompactionResult:  # fmt: skip
        """Run one pass, answering summary requests with ``summarizer`` (None: no summary stage)."""
        gen = self._start(history, summarizer, summarizer_window, trigger=trigger, budget=budget, measure=measure,
                          instruction=instruction, token_measure=token_measure, target=target)  # fmt: skip
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
                       summarizer_window: int | None = None, token_measure: Measure | None = None,
                       target: int | None = None) -> CompactionResult:  # fmt: skip
        """Async twin of ``compact``; cancelling the task leaves the history untouched."""
        gen = self._start(history, summarizer, summarizer_window, trigger=trigger, budget=budget, measure=measure,
                          instruction=instruction, token_measure=token_measure, target=target)  # fmt: skip
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
