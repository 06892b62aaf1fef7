"""Pressure-gated, batched rewrites of old tool results: read dedup and microcompact, cache-aware.

Providers cache the longest prompt prefix they saw recently and bill it at a fraction of the input
price (Anthropic: reads 0.1x, writes 1.25x; OpenAI: 0.1x-0.5x). Rewriting an early message throws
that cache away from the rewritten message on. So read dedup and microcompact do not run on every
request: ``relieve_pressure`` acts only when the request crosses a **trigger**, and then it acts
in one large step, so that one cache break buys many append-only requests:

* **pressure** = the larger of request tokens / context window and request bytes / payload cap
  (the caller passes the limits in force: learned, configured, or a size the endpoint rejected).
* Below ``trigger`` (default 0.60) nothing changes (but see *excerpts* below): the history is
  append-only.
* At or above it: superseded reads become stubs (not one-liners: a dedup stub would free a hundred
  characters of one and move the cache break back to its place); then old content is cleared in the order of
  ``policy/reuse.py`` - what the agent is least likely to use again first (superseded results and
  the bulky arguments of calls that ran, then the results with the fewest names it has not referred
  to yet per byte, oldest first) - each result becoming a one-liner that names its call and a few
  names it held, until the request is at ``target`` (default 0.25) and at least ``clear_at_least``
  below where the pass began, and no further: what the agent may still need stays verbatim. (Aging
  by turns, ``microcompact``, clears by age alone; it runs in compaction's trim stage and with
  ``trigger=0``, not here.) The last ``keep`` tool results (default 1), and any result the model
  has not answered yet, are never touched.
* A pass that would free less than ``clear_at_least`` (default 0.10 of the limit) is not applied:
  a cache break must be worth it. The history then stays as it is until the next request (and when
  even rewriting everything a pass may rewrite could not free that much - ``most_freed``, from the
  messages' sizes alone - the pass is not built at all: once earlier passes' stubs fill most of the
  limit, that is every request until truncation makes room). Except
  when the request is at or above a hard limit (pressure >= 1): it cannot be sent as it is, the
  cache breaks anyway, and the cheapest rewrite is this one (no LLM) - whatever it frees.
* ``trigger=0`` is the behaviour before pressure gating (rewrite on every request, no keep, no
  minimum), kept so benchmarks can measure it next to the default.

**Excerpts go first, at a lower trigger** (``excerpt_trigger``, default 0.30). An output too big to
enter the history whole entered it as a head+tail preview (``policy/budgets.py``); its original is
archived and the model pages through it with ``recall``. From ``excerpt_trigger`` up to ``trigger``
a pass turns those previews (not the kept ones) into one-liners and touches nothing else; whole
results wait for ``trigger``. ``excerpt_trigger >= trigger`` turns this tier off.

Why, in money: a cached prompt is cheap, not free. Every request reads its whole cached prefix at
the cache-read price (0.1x the input price at best), so carrying F tokens costs 0.1·F per request,
while a pass that frees F costs one uncached re-read of the S tokens after its break point, about
0.9·S once: it pays for itself after ~9·S/F requests, a few turns when ``clear_at_least`` keeps F
large. When every turn brings a big output, waiting for 60% means every request reads ~35% of the
window on average; on the standard agent workload of ``benchmarks/cache.py`` (automatic caching)
that made the gated history cost more than the old rewrite-on-every-request. The break point of an
excerpt pass is the oldest preview still whole, which follows the previous pass's one-liners, so
the prefix cached up to there survives. Why only excerpts: the model never saw those outputs whole
and already reaches them through ``recall`` (the one-liner keeps the marker), while a whole result
may be a file it is editing - taking that away costs fidelity, so it waits for real pressure.

Every rewritten original is archived before it is replaced (through a staged sink, so a pass that
is not applied archives nothing). Hard limits are not this module's job: pre-flight, compaction
and recovery act whatever the trigger says.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextkit.markers import ArchiveSink, extract_keys
from contextkit.messages import Message, assistant_turns
from contextkit.policy.arguments import excerpt_call_arguments
from contextkit.policy.budgets import is_budget_preview
from contextkit.policy.microcompact import (
    ONE_LINER_PREFIX,
    MicrocompactConfig,
    MicrocompactReport,
    clear_to_one_liner,
    is_candidate,
    microcompact,
)
from contextkit.policy.reuse import ARGUMENT_MIN_CHARS, call_text, clearing_order, referred_names
from contextkit.policy.testing import StagedSink
from contextkit.policy.trim import (
    STUB_PREFIX,
    DedupReport,
    dedup_repeated_reads,
)
from contextkit.sizing import Measure, format_size
from contextkit.sizing.lastbuilt import prefix_copy

__all__ = ["PressureConfig", "PressureReport", "PressureTally", "most_freed", "pressure", "relieve_pressure"]

ARGUMENT_EXCERPT_CHARS = 160  # what an excerpt of a call's bulky arguments keeps (its head, mostly)
_CLEARED = (STUB_PREFIX, ONE_LINER_PREFIX)  # results a pass leaves as they are


@dataclass(frozen=True)
class PressureConfig:
    """When and how much the no-LLM rewrites act. Shares are of the tighter limit (window or cap)."""

    trigger: float = 0.60
    target: float = 0.25
    keep: int = 1
    clear_at_least: float = 0.10
    excerpt_trigger: float = 0.30

    @property
    def always_on(self) -> bool:
        """The behaviour before pressure gating: rewrite on every request (``trigger=0``)."""
        return self.trigger <= 0

    @classmethod
    def from_limits(cls, limits: Any) -> PressureConfig:
        """From a ``contextkit.settings.Limits`` (its ``pressure_*``, ``keep_tool_results`` and
        ``clear_at_least`` fields)."""
        return cls(
            trigger=limits.pressure_trigger,
            target=limits.pressure_target,
            keep=limits.keep_tool_results,
            clear_at_least=limits.clear_at_least,
            excerpt_trigger=limits.excerpt_trigger,
        )


def pressure(m: Measure, *, window: int, cap: int | None) -> float:
    """How full the request is: the larger of its share of the window (tokens) and of the cap (bytes)."""
    share = m.tokens / window if window else 0.0
    if cap:
        share = max(share, m.bytes / cap)
    return share


@dataclass(frozen=True)
class PressureReport:
    """What one pass did (``acted``) or why it did nothing (``reason``)."""

    acted: bool = False
    # below trigger | not worth a cache break | applied | excerpts | always on | nothing to rewrite
    reason: str = "below trigger"
    before: float = 0.0
    after: float = 0.0
    bytes_before: int = 0
    bytes_after: int = 0
    dedup: DedupReport = field(default_factory=DedupReport)
    microcompact: MicrocompactReport = field(default_factory=MicrocompactReport)
    cleared: int = 0  # results turned into one-liners beyond what aging asked for
    kept: int = 0
    archived_keys: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.acted

    def describe(self) -> str:
        if not self.acted:
            return f"pressure {self.before:.0%}: {self.reason}"
        parts = []
        if self.dedup.changed:
            parts.append(f"{self.dedup.superseded} superseded reads")
        if self.microcompact.changed:
            parts.append(f"{self.microcompact.truncated} previewed, {self.microcompact.summarized} summarized")
        if self.cleared:
            what = "previews of archived outputs " if self.reason == "excerpts" else ""
            parts.append(f"{self.cleared} {what}cleared")
        what = ", ".join(parts) or "nothing"
        return (
            f"pressure {self.before:.0%} -> {self.after:.0%}: {what} (last {self.kept} tool results kept; "
            f"{format_size(self.bytes_before - self.bytes_after)} freed)"
        )


def kept_indices(history: Sequence[Message], keep: int) -> frozenset[int]:
    """Indices of the tool results a pass must leave verbatim: the last ``keep`` ones, and every result
    the model has not answered yet (after the last assistant message: a parallel round's results
    arrive together and are all new to the model)."""
    # from the end, and only as far as both reach: this is asked on every request above the trigger,
    # and the history behind the newest rounds is long
    newest: list[int] = []
    unanswered: list[int] = []
    answered = False
    for i in range(len(history) - 1, -1, -1):
        if answered and len(newest) >= keep:
            break
        m = history[i]
        if m.role == "assistant":
            answered = True
        elif m.role == "tool" or (m.role == "user" and is_candidate(m)):
            if len(newest) < keep:
                newest.append(i)
            if not answered:
                unanswered.append(i)
    return frozenset(newest) | frozenset(unanswered)


def relieve_pressure(
    history: Sequence[Message],
    *,
    archive: ArchiveSink,
    measure: Callable[[Sequence[Message]], Measure],
    window: int,
    cap: int | None,
    config: PressureConfig | None = None,
    micro: MicrocompactConfig | None = None,
    sizes: Callable[[Message], tuple[int, int]] | None = None,
    ratio: float = 1.0,
    tally: PressureTally | None = None,
) -> tuple[list[Message], PressureReport]:
    """One gated pass over ``history`` (see the module docstring). ``measure`` sizes a candidate
    request exactly (tools and framing included). ``sizes`` (optional): one message's bytes and
    tokens as ``measure`` counts them before it scales its token sum by ``ratio``; with it, a pass
    that could not free ``clear_at_least`` even by rewriting everything it may rewrite is not
    attempted (``most_freed``). ``tally``: that bound and the previews' positions kept from one
    request to the next (a session asks on every request above a trigger)."""
    cfg = config or PressureConfig()
    micro = micro or MicrocompactConfig()
    m0 = measure(history)
    before = pressure(m0, window=window, cap=cap)
    if cfg.always_on:
        return _always_on(history, archive, micro, measure, window, cap, before, m0)
    unchanged = PressureReport(before=before, after=before, bytes_before=m0.bytes, bytes_after=m0.bytes)
    if before < min(cfg.trigger, cfg.excerpt_trigger):
        return list(history), unchanged
    previews: list[int] = []
    if before < cfg.trigger:  # the excerpt tier: previews of archived outputs only, all of them
        previews = tally.previews(history) if tally is not None else _previews(history)
        if not previews:  # whole results only: they wait for the trigger
            return list(history), unchanged
    protect = kept_indices(history, cfg.keep)
    if sizes is not None and cfg.trigger <= before < 1.0:
        bound = most_freed if tally is None else tally.bound
        most = bound(history, protect, sizes, window=window, cap=cap, ratio=ratio)
        if most < cfg.clear_at_least:
            # once the stubs of earlier passes fill most of the limit, every request lands here
            # until truncation: the pass would be built, measured and thrown away each time
            return list(history), _skipped(
                PressureReport(before=before, bytes_before=m0.bytes, kept=len(protect)),
                f"would free at most {most:.0%}, not worth a cache break",
            )
    sink = StagedSink(archive)
    dd, mc = DedupReport(), MicrocompactReport()
    if before < cfg.trigger:
        out, cleared = _clear(list(history), sink, protect, previews)
        if not cleared:
            return list(history), unchanged
        m = measure(out)
    else:
        out, dd = dedup_repeated_reads(history, archive=sink, protect=protect, one_liners=False)
        m = measure(out)
        cleared = 0
        # down to the target, and at least clear_at_least below where the pass started: a pass that
        # stops short of that would be followed by another cache break a few requests later
        goal = min(cfg.target, before - cfg.clear_at_least)
        if pressure(m, window=window, cap=cap) > goal:
            order = clearing_order(out, protect=protect, cleared=_stubs(out))
            share = lambda h: pressure(measure(h), window=window, cap=cap)  # noqa: E731
            out, cleared = _clear(out, sink, protect, order, share=share, goal=goal)
            m = measure(out)
    after = pressure(m, window=window, cap=cap)
    report = PressureReport(
        acted=True, reason="applied" if before >= cfg.trigger else "excerpts", before=before, after=after,
        bytes_before=m0.bytes, bytes_after=m.bytes, dedup=dd, microcompact=mc, cleared=cleared, kept=len(protect),
        archived_keys=tuple(k for k in sink.staged if k in _cited(out)),
    )  # fmt: skip
    if not (dd.changed or mc.changed or cleared):
        return list(history), _skipped(report, "nothing to rewrite outside the kept results")
    if before - after < cfg.clear_at_least and before < 1.0:
        return list(history), _skipped(report, f"would free only {before - after:.0%}, not worth a cache break")
    if not sink.commit(out):
        return list(history), _skipped(report, "the archive refused an original")
    return out, report


def most_freed(
    history: Sequence[Message],
    protect: Collection[int],
    sizes: Callable[[Message], tuple[int, int]],
    *,
    window: int,
    cap: int | None,
    ratio: float = 1.0,
) -> float:
    """An upper bound on the share of the limit a pass over ``history`` can free: every tool result
    it may clear freed whole (one-liners and stubs already are left as they are), every assistant
    message with bulky arguments freed whole. One walk of cheap tests over the messages and their
    sizes (``sizes``: bytes, and tokens before the measure's calibration ``ratio``), nothing built
    or measured."""
    return PressureTally().bound(history, protect, sizes, window=window, cap=cap, ratio=ratio)


def _previews(history: Sequence[Message]) -> list[int]:
    """Positions of the previews of archived outputs in ``history`` (what the excerpt tier clears)."""
    return [i for i, m in enumerate(history) if is_budget_preview(m)]


class PressureTally:
    """What a pressure pass asks of every message, kept from one request to the next: the next
    request holds the same history and a few more messages (or a rewrite near its end), so only the
    messages after the prefix the two share are looked at. ``bound`` is ``most_freed`` from running
    totals of what each message could free (the messages' own sizes, before calibration, so a new
    ratio keeps them); ``previews`` the positions of the previews of archived outputs."""

    def __init__(self) -> None:
        self._messages: list[Message] = []
        # running totals as arrays: a slice of one copies its memory, not an int object per message
        self._bytes = array("q", [0])
        self._tokens = array("q", [0])
        self._previewed: list[Message] = []  # the last history ``previews`` was asked about
        self._previews: list[int] = []

    def previews(self, history: Sequence[Message]) -> list[int]:
        """``[i for i, m in enumerate(history) if is_budget_preview(m)]``, from the positions kept for
        the prefix ``history`` shares with the last history asked about."""
        held, shared = prefix_copy(self._previewed, history)
        found = self._previews[: bisect.bisect_left(self._previews, shared)]
        found += [shared + i for i in _previews(held[shared:])]
        self._previewed, self._previews = held, found
        return list(found)

    def bound(
        self,
        history: Sequence[Message],
        protect: Collection[int],
        sizes: Callable[[Message], tuple[int, int]],
        *,
        window: int,
        cap: int | None,
        ratio: float = 1.0,
    ) -> float:
        """``most_freed(history, protect, sizes, window=window, cap=cap, ratio=ratio)``, from the
        totals kept for the prefix ``history`` shares with the last history asked about."""
        held, shared = prefix_copy(self._messages, history)
        # a history that only grew appends to the last totals (they are replaced by these)
        cum_bytes, cum_tokens = (
            (self._bytes, self._tokens)
            if shared + 1 == len(self._bytes)
            else (self._bytes[: shared + 1], self._tokens[: shared + 1])
        )
        b_total, t_total = cum_bytes[-1], cum_tokens[-1]
        for m in held[shared:]:
            b, t = _freeable(m, sizes)
            b_total += b
            t_total += t
            cum_bytes.append(b_total)
            cum_tokens.append(t_total)
        self._messages, self._bytes, self._tokens = held, cum_bytes, cum_tokens
        for i in protect:  # a few of the newest results: counted above, and a pass leaves them
            b, t = _freeable(held[i], sizes)
            b_total -= b
            t_total -= t
        return _share(b_total, t_total, window, cap, ratio)


def _freeable(m: Message, sizes: Callable[[Message], tuple[int, int]]) -> tuple[int, int]:
    """What a pass could free of ``m`` at most, unless it is protected: all of a tool result it may
    clear or of an assistant message with bulky arguments (their excerpt), else nothing."""
    if m.role == "assistant":
        calls = m.tool_calls
        if not calls:
            return 0, 0
        if len(calls) == 1:  # the usual call, without a generator per message
            if len(calls[0].arguments) <= ARGUMENT_MIN_CHARS:
                return 0, 0
        elif not any(len(c.arguments) > ARGUMENT_MIN_CHARS for c in calls):
            return 0, 0
    elif m.content.startswith(_CLEARED) or not is_candidate(m):
        return 0, 0
    return sizes(m)


def _share(freed_bytes: int, freed_tokens: int, window: int, cap: int | None, ratio: float) -> float:
    """The larger share of the limits. The measure rounds its scaled token sum once: rewriting
    messages of ``freed_tokens`` tokens lowers it by at most ``ratio * freed_tokens`` and a rounding."""
    tokens = ratio * freed_tokens + (1 if freed_tokens else 0)
    share = tokens / window if window else 0.0
    return max(share, freed_bytes / cap) if cap else share


def _cited(history: Sequence[Message]) -> set[str]:
    """Keys the messages of ``history`` cite, in their content and their calls' arguments."""
    return {k for m in history for text in (m.content, *(c.arguments for c in m.tool_calls)) for k in extract_keys(text)}


def _stubs(history: Sequence[Message]) -> list[int]:
    """Indices that are no tool result a pass may clear, or are stubs already."""
    return [
        i for i, m in enumerate(history)
        if m.role != "assistant" and (not is_candidate(m) or m.content.startswith((STUB_PREFIX, ONE_LINER_PREFIX)))
    ]  # fmt: skip


def _clear(
    out: list[Message],
    sink: StagedSink,
    protect: frozenset[int],
    order: Sequence[int],
    *,
    share: Callable[[Sequence[Message]], float] | None = None,
    goal: float = 0.0,
) -> tuple[list[Message], int]:
    """In ``order``, tool results not in ``protect`` become one-liners that name their call and a
    few names they hold, and assistant messages' bulky answered arguments become excerpts (each
    original archived through ``sink``); with ``share``, until the request is at ``goal``.

    The request is measured only when the characters freed so far suggest the goal is reached (its
    share scales with its size), so a pass measures a few times, not once per result."""
    tags = assistant_turns(out)
    calls = {c.id: c for m in out for c in m.tool_calls}
    answered = {m.tool_call_id for m in out if m.role == "tool" and m.tool_call_id}
    referred = referred_names(out)
    cleared = 0
    size = sum(len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in out)
    at, at_size = (share(out), size) if share is not None else (0.0, size)
    for i in order:
        msg = out[i]
        if i in protect:
            continue
        if msg.role == "assistant":
            got = excerpt_call_arguments(msg, archive=sink, max_chars=ARGUMENT_EXCERPT_CHARS, answered=answered)
        elif is_candidate(msg) and not msg.content.startswith(STUB_PREFIX):
            call = call_text(calls.get(msg.tool_call_id or ""))
            got = clear_to_one_liner(msg, archive=sink, turn=tags[i], call=call, referred=referred)
        else:
            continue
        if got is None:
            continue
        new = got[0]
        size -= len(msg.content) - len(new.content)
        size -= sum(len(c.arguments) for c in msg.tool_calls) - sum(len(c.arguments) for c in new.tool_calls)
        out[i] = new
        cleared += 1
        if share is not None and at * size / max(1, at_size) <= goal:
            at, at_size = share(out), size
            if at <= goal:
                break
    return out, cleared


def _skipped(report: PressureReport, reason: str) -> PressureReport:
    return PressureReport(
        acted=False, reason=reason, before=report.before, after=report.before,
        bytes_before=report.bytes_before, bytes_after=report.bytes_before, kept=report.kept,
    )  # fmt: skip


def _always_on(
    history: Sequence[Message],
    archive: ArchiveSink,
    micro: MicrocompactConfig,
    measure: Callable[[Sequence[Message]], Measure],
    window: int,
    cap: int | None,
    before: float,
    m0: Measure,
) -> tuple[list[Message], PressureReport]:
    """Microcompact then read dedup on every request, as before pressure gating (``trigger=0``)."""
    out, mc = microcompact(history, archive=archive, config=micro)
    out, dd = dedup_repeated_reads(out, archive=archive)
    if not (mc.changed or dd.changed):
        return list(history), PressureReport(reason="always on", before=before, after=before,
                                             bytes_before=m0.bytes, bytes_after=m0.bytes)  # fmt: skip
    m = measure(out)
    keys = tuple(dict.fromkeys([*mc.archived_keys, *dd.archived_keys]))
    return out, PressureReport(
        acted=True, reason="always on", before=before, after=pressure(m, window=window, cap=cap),
        bytes_before=m0.bytes, bytes_after=m.bytes, dedup=dd, microcompact=mc, archived_keys=keys,
    )  # fmt: skip
