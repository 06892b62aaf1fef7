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
* At or above it, in order, until the request is down to ``target`` (default 0.40): superseded
  reads become stubs; tool results age as microcompact says (previews, then one-liners); then
  the oldest remaining results become one-liners. The last ``keep`` tool results (default 1), and
  any result the model has not answered yet, are never touched.
* A pass that would free less than ``clear_at_least`` (default 0.10 of the limit) is not applied:
  a cache break must be worth it. The history then stays as it is until the next request. Except
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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextkit.markers import ArchiveSink, extract_keys
from contextkit.messages import Message, assistant_turns
from contextkit.policy.budgets import is_budget_preview
from contextkit.policy.microcompact import (
    MicrocompactConfig,
    MicrocompactReport,
    clear_to_one_liner,
    is_candidate,
    microcompact,
)
from contextkit.policy.testing import StagedSink
from contextkit.policy.trim import STUB_PREFIX, DedupReport, dedup_repeated_reads
from contextkit.sizing import Measure, format_size

__all__ = ["PressureConfig", "PressureReport", "pressure", "relieve_pressure"]


@dataclass(frozen=True)
class PressureConfig:
    """When and how much the no-LLM rewrites act. Shares are of the tighter limit (window or cap)."""

    trigger: float = 0.60
    target: float = 0.40
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
    results = [i for i, m in enumerate(history) if m.role == "tool" or (m.role == "user" and is_candidate(m))]
    last_assistant = max((i for i, m in enumerate(history) if m.role == "assistant"), default=-1)
    unanswered = {i for i in results if i > last_assistant}
    return frozenset(results[-keep:] if keep > 0 else ()) | unanswered


def relieve_pressure(
    history: Sequence[Message],
    *,
    archive: ArchiveSink,
    measure: Callable[[Sequence[Message]], Measure],
    window: int,
    cap: int | None,
    config: PressureConfig | None = None,
    micro: MicrocompactConfig | None = None,
) -> tuple[list[Message], PressureReport]:
    """One gated pass over ``history`` (see the module docstring). ``measure`` sizes a candidate
    request exactly (tools and framing included)."""
    cfg = config or PressureConfig()
    micro = micro or MicrocompactConfig()
    m0 = measure(history)
    before = pressure(m0, window=window, cap=cap)
    if cfg.always_on:
        return _always_on(history, archive, micro, measure, window, cap, before, m0)
    if before < min(cfg.trigger, cfg.excerpt_trigger):
        return list(history), PressureReport(before=before, after=before, bytes_before=m0.bytes, bytes_after=m0.bytes)
    protect = kept_indices(history, cfg.keep)
    sink = StagedSink(archive)
    dd, mc = DedupReport(), MicrocompactReport()
    if before < cfg.trigger:  # the excerpt tier: previews of archived outputs only, all of them
        out, cleared = _clear(list(history), sink, protect, is_budget_preview)
        if not cleared:  # whole results only: they wait for the trigger
            return list(history), PressureReport(before=before, after=before, bytes_before=m0.bytes,
                                                 bytes_after=m0.bytes)  # fmt: skip
        m = measure(out)
    else:
        out, dd = dedup_repeated_reads(history, archive=sink, protect=protect)
        out, mc = microcompact(out, archive=sink, config=micro, protect=protect)
        m = measure(out)
        cleared = 0
        if pressure(m, window=window, cap=cap) > cfg.target:
            done = lambda h: pressure(measure(h), window=window, cap=cap) <= cfg.target  # noqa: E731
            out, cleared = _clear(out, sink, protect, lambda _: True, done=done)
            m = measure(out)
    after = pressure(m, window=window, cap=cap)
    report = PressureReport(
        acted=True, reason="applied" if before >= cfg.trigger else "excerpts", before=before, after=after,
        bytes_before=m0.bytes, bytes_after=m.bytes, dedup=dd, microcompact=mc, cleared=cleared, kept=len(protect),
        archived_keys=tuple(k for k in sink.staged if k in {c for msg in out for c in extract_keys(msg.content)}),
    )  # fmt: skip
    if not (dd.changed or mc.changed or cleared):
        return list(history), _skipped(report, "nothing to rewrite outside the kept results")
    if before - after < cfg.clear_at_least and before < 1.0:
        return list(history), _skipped(report, f"would free only {before - after:.0%}, not worth a cache break")
    if not sink.commit(out):
        return list(history), _skipped(report, "the archive refused an original")
    return out, report


def _clear(
    out: list[Message],
    sink: StagedSink,
    protect: frozenset[int],
    eligible: Callable[[Message], bool],
    *,
    done: Callable[[Sequence[Message]], bool] | None = None,
) -> tuple[list[Message], int]:
    """Oldest first, eligible tool results not in ``protect`` become one-liners (archived through
    ``sink``); with ``done``, until it holds for the history so far."""
    tags = assistant_turns(out)
    cleared = 0
    for i, msg in enumerate(out):
        if i in protect or not is_candidate(msg) or msg.content.startswith(STUB_PREFIX) or not eligible(msg):
            continue
        one = clear_to_one_liner(msg, archive=sink, turn=tags[i])
        if one is None:
            continue
        out[i] = one[0]
        cleared += 1
        if done is not None and done(out):
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
