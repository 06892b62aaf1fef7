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
- what the session knows about the gateway's body limit: ``known_to_pass`` (the largest body the
  endpoint accepted), ``known_to_fail`` (the smallest it refused for its size), the send limit (the
  cap in force, in each request row) and, when the gateway is the simulator, ``real_cap``: the truth
  the session cannot see. ``limit_rows()`` turns them into the chart's lines.
"""

from __future__ import annotations

from typing import Any

from contextkit.events import CapEvent, CompactionEvent, Event, HistoryEvent, NoticeEvent, RecoveryEvent, RequestEvent
from contextkit.sizing import format_size
from contextkit.widgets.labels import TRIGGERS, failure_label, level_label, phase_help, phase_label

Row = dict[str, Any]
_AGGREGATE = ("start", "done")

# The lines of what the session knows about the gateway's body limit (the chart's legend entries).
KNOWN_TO_PASS = "known to pass: the largest body accepted"
SEND_LIMIT = "send limit: the cap the session keeps under"
KNOWN_TO_FAIL = "known to fail: the smallest body refused for its size"
REAL_CAP = "real cap: the simulator's, which the session cannot see"
LIMIT_LINES = (KNOWN_TO_PASS, SEND_LIMIT, KNOWN_TO_FAIL, REAL_CAP)


def evidence_of(session: Any) -> tuple[int | None, int | None]:
    """(known to pass, known to fail) in bytes: what the session's turn endpoint has shown it.

    The one place the panels read the session's evidence (``EndpointEvidence.largest_accepted`` and
    ``smallest_rejected``); None for what is not known yet. Reads only: an endpoint without evidence
    is not created.
    """
    state = getattr(session, "_state", None)
    endpoints = getattr(getattr(state, "evidence", None), "endpoints", None)
    evidence = endpoints.get(getattr(state, "model", None)) if isinstance(endpoints, dict) else None
    if evidence is None:
        return None, None
    passed = getattr(evidence, "largest_accepted", 0) or None
    failed = getattr(evidence, "smallest_rejected", None) or None
    return passed, failed


def real_cap_of(gateway: Any) -> int | None:
    """The body cap a gateway simulator enforces (None: no simulator, or no cap)."""
    config = getattr(gateway, "config", None)
    cap = getattr(config, "max_body", None)
    return cap if isinstance(cap, int) and cap > 0 else None


def knowledge_sentence(passed: int | None, failed: int | None, limit: int | None, real: int | None) -> str:
    """What the session knows about the gateway's body limit, in one sentence with its figures."""
    told = "known to pass " + (format_size(passed) if passed else "nothing yet")
    told += ", known to fail " + (format_size(failed) if failed else "nothing refused yet")
    told += f", send limit {format_size(limit)}" if limit else ", no send limit yet"
    truth = f"; the simulator's real cap is {format_size(real)}" if real else ""
    return (
        f"The gateway's limit lies somewhere between what is known to pass and what is known to fail, and the "
        f"session keeps every request under its send limit ({told}{truth})."
    )


class SessionSeries:
    """Chart rows for one session, built from its events in order."""

    def __init__(self) -> None:
        self.requests: list[Row] = []
        self.compactions: list[Row] = []
        self.recoveries: list[Row] = []
        self.cap: int | None = None
        self.window: int | None = None
        self.known_to_pass: int | None = None
        self.known_to_fail: int | None = None
        self.real_cap: int | None = None
        self._cap_note = ""

    # -- derived views -----------------------------------------------------------------------------
    @property
    def rejections(self) -> list[Row]:
        return [r for r in self.requests if r["outcome"] != "ok"]

    @property
    def cache_breaks(self) -> list[Row]:
        return [r for r in self.requests if r["append_only"] is False]

    @property
    def routine(self) -> list[Row]:
        """Trim-stage steps: tool output capped or aged, no model call, nothing of the talk lost."""
        return [r for r in self.compactions if r["stage"] == "trim"]

    @property
    def major(self) -> list[Row]:
        """Summary and truncation steps: the compactions a reader should notice."""
        return [r for r in self.compactions if r["stage"] != "trim"]

    def counts(self) -> dict[str, int]:
        return {
            "requests": len(self.requests),
            "rejections": len(self.rejections),
            "recoveries": len(self.recoveries),
            "compactions": len(self.compactions),
            "major_compactions": len(self.major),
            "routine": len(self.routine),
            "cache_breaks": len(self.cache_breaks),
        }

    def know(self, passed: int | None, failed: int | None, real: int | None = None) -> bool:
        """Take what the session knows now (``evidence_of``) and the simulator's cap; True when it changed."""
        new = (passed or None, failed or None, real or None)
        if new == (self.known_to_pass, self.known_to_fail, self.real_cap):
            return False
        self.known_to_pass, self.known_to_fail, self.real_cap = new
        return True

    @property
    def send_limit(self) -> int | None:
        """The cap in force now (the send limit the last request went under, or the newest one known)."""
        return self.cap

    def limit_rows(self) -> list[Row]:
        """Long rows (``x, line, kb, bytes``) for the chart's lines: known to pass, the send limit (a
        step per request), known to fail and the real cap, each only once it is known."""
        right = max(len(self.requests), 1) + 0.5
        rows: list[Row] = []

        def flat(line: str, value: int | None) -> None:
            if value:
                rows.extend({"x": x, "line": line, "kb": value / 1024, "bytes": value} for x in (0.5, right))

        flat(KNOWN_TO_PASS, self.known_to_pass)
        steps = [(r["n"] - 0.5, r["cap_kb"]) for r in self.requests if r["cap_kb"] is not None]
        if not self.requests and self.cap:
            steps = [(0.5, self.cap / 1024)]
        if steps:
            steps.append((right, steps[-1][1]))
            rows.extend({"x": x, "line": SEND_LIMIT, "kb": kb, "bytes": int(kb * 1024)} for x, kb in steps)
        flat(KNOWN_TO_FAIL, self.known_to_fail)
        flat(REAL_CAP, self.real_cap)
        for row in rows:
            row["explain"] = f"{row['line']}: {format_size(row['bytes'])}"
        return rows

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
        sizes = f" {format_size(before)} → {format_size(after)}." if before and after else ""
        self.compactions.append(
            {
                "x": len(self.requests) + 0.5,
                "phase": phase,
                "trigger": trigger,
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
