"""The data behind the dashboard's live chart: one row per request, plus markers (stdlib only).

``SessionSeries.apply(event)`` folds one event in and says whether the chart must be redrawn.
Rows carry a plain-language ``explain`` text used as the tooltip, so the chart is self-explaining.

- ``requests``: one row per ``RequestEvent`` (x = its 1-based number ``n``), with the payload cap
  and window in force when it was sent, the cached share of its prompt
  (``cached_prompt_tokens`` / ``append_only`` when the provider reports them), and its outcome.
- ``rejections``: the requests the gateway or provider refused.
- ``recoveries``: one per recovery step that retried, at the request it retried (by recovery level).
- ``compactions``: one per applied compaction phase (with its stage), between the last request sent
  and the next.
- ``cache_breaks``: requests whose body does not start with the previous body (``append_only``
  False): the provider's prompt cache cannot be reused for them.
"""

from __future__ import annotations

from typing import Any

from contextkit.events import CapEvent, CompactionEvent, Event, HistoryEvent, NoticeEvent, RecoveryEvent, RequestEvent
from contextkit.sizing import format_size
from contextkit.widgets.labels import TRIGGERS, failure_label, level_label, phase_help, phase_label

Row = dict[str, Any]
_AGGREGATE = ("start", "done")


class SessionSeries:
    """Chart rows for one session, built from its events in order."""

    def __init__(self) -> None:
        self.requests: list[Row] = []
        self.compactions: list[Row] = []
        self.recoveries: list[Row] = []
        self.cap: int | None = None
        self.window: int | None = None
        self._cap_note = ""

    # -- derived views -----------------------------------------------------------------------------
    @property
    def rejections(self) -> list[Row]:
        return [r for r in self.requests if r["outcome"] != "ok"]

    @property
    def cache_breaks(self) -> list[Row]:
        return [r for r in self.requests if r["append_only"] is False]

    def counts(self) -> dict[str, int]:
        return {
            "requests": len(self.requests),
            "rejections": len(self.rejections),
            "recoveries": len(self.recoveries),
            "compactions": len(self.compactions),
            "cache_breaks": len(self.cache_breaks),
        }

    # -- reducer -----------------------------------------------------------------------------------
    def apply(self, event: Event) -> bool:
        """Fold ``event`` in; True when something the chart shows changed."""
        if isinstance(event, HistoryEvent):
            changed = (event.cap_bytes or None) != self.cap or (
                event.context_window is not None and event.context_window != self.window
            )
            if event.cap_bytes is not None:
                self.cap = event.cap_bytes or None
            if event.context_window:
                self.window = event.context_window
            return changed and not self.requests  # later cap changes show up with the next request
        if isinstance(event, CapEvent):
            self.cap = event.cap_bytes or None
            seen = (
                f" after the gateway refused a {format_size(event.rejected_bytes)} request"
                if event.rejected_bytes
                else ""
            )
            self._cap_note = f"{event.source} cap{seen}"
            return False
        if isinstance(event, RequestEvent):
            self.requests.append(self._request_row(event))
            return True
        if isinstance(event, RecoveryEvent):
            if event.outcome != "retrying":
                return False
            n = len(self.requests) + 1  # the request it retries comes next
            self.recoveries.append(
                {
                    "n": n,
                    "level": event.level,
                    "level_name": level_label(event.level),
                    "bytes": event.bytes_after,
                    "kb": event.bytes_after / 1024,
                    "explain": (
                        f"Recovery {level_label(event.level)} after {failure_label(event.failure_kind)}: the history "
                        f"went from {format_size(event.bytes_before)} to {format_size(event.bytes_after)}, "
                        f"then request {n} retried it."
                    ),
                }
            )
            return True
        if isinstance(event, CompactionEvent):
            if event.outcome != "applied" or event.phase in _AGGREGATE:
                return False
            self._add_compaction(
                event.phase, event.stage, event.trigger, event.bytes_before, event.bytes_after, event.status
            )
            return True
        if isinstance(event, NoticeEvent) and event.code in ("microcompact", "dedup"):
            # turn-boundary ageing of tool output is reported as a notice, not as a compaction run
            self._add_compaction(event.code, "trim", "turn", 0, 0, event.text)
            return True
        return False

    def _add_compaction(self, phase: str, stage: str, trigger: str, before: int, after: int, status: str) -> None:
        sizes = f" {format_size(before)} → {format_size(after)}." if before else ""
        self.compactions.append(
            {
                "x": len(self.requests) + 0.5,
                "phase": phase,
                "phase_name": phase_label(phase),
                "stage": stage,
                "explain": f"Compaction {TRIGGERS.get(trigger, trigger)}: {phase_label(phase)}.{sizes} "
                f"{phase_help(phase)} ({status})",
            }
        )

    def _request_row(self, event: RequestEvent) -> Row:
        n = len(self.requests) + 1
        cached = event.cached_prompt_tokens
        append_only = event.append_only
        prompt = event.prompt_tokens or event.tokens
        share = cached / prompt if prompt and cached else 0.0
        if event.outcome == "ok":
            what = f"Request {n} went through"
        else:
            what = f"Request {n} was refused: {failure_label(event.failure_kind)}" + (
                f" (HTTP {event.status})" if event.status else ""
            )
        cap = (
            f"{format_size(self.cap)} payload cap ({self._cap_note or 'configured'})"
            if self.cap
            else "no payload cap known"
        )
        parts = [
            f"{what}. Body {format_size(event.bytes)} against {cap}; {event.tokens:,} tokens"
            + (f" of a {self.window:,}-token window." if self.window else "."),
        ]
        if event.level:
            parts.append(f"Sent after recovery {level_label(event.level)}.")
        if event.purpose != "turn":
            parts.append(f"Purpose: {event.purpose}.")
        if cached:
            parts.append(f"{share:.0%} of its prompt came from the provider's cache.")
        if append_only is False:
            parts.append("Cache break: the body no longer starts like the previous one, so the prompt cache is lost.")
        if event.cost:
            parts.append(f"Cost ${event.cost:.4f}.")
        return {
            "n": n,
            "turn": event.turn,
            "bytes": event.bytes,
            "kb": event.bytes / 1024,
            "tokens": event.tokens,
            "cached_tokens": cached,
            "cached_share": share,
            "append_only": append_only,
            "cap_kb": self.cap / 1024 if self.cap else None,
            "window": self.window,
            "outcome": event.outcome,
            "result": "went through" if event.outcome == "ok" else "refused",
            "failure": failure_label(event.failure_kind) if event.failure_kind else "",
            "level": event.level,
            "purpose": event.purpose,
            "cost": event.cost,
            "explain": " ".join(parts),
        }
