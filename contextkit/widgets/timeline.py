"""``PhaseTimeline``: compactions and recoveries as they happen, one expandable row each.

A compaction runs several phases (trim, microcompact, summarize, truncate, …) between its
``start`` and ``done`` events; a recovery climbs several levels between a refused request and
``recovered``/``failed``. Each becomes **one row** saying in plain words what happened and what it
freed; the row expands (``<details>``) to its phases or steps. A phase first arrives as
``running`` (a long summary can take minutes): the row shows it live, and its result replaces it.

``timeline_rows(rows, event)`` is the pure reducer; the widget only renders its output.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W
import traitlets as T

from contextkit.display.html import esc
from contextkit.events import CompactionEvent, Event, RecoveryEvent
from contextkit.sizing import format_size
from contextkit.widgets._view import EventFeed, FeedView, events_of
from contextkit.widgets.labels import TRIGGERS, failure_label, level_label, phase_help, phase_label, stage_label

Row = dict[str, Any]
FINAL_RECOVERY = ("recovered", "failed", "floor")
_AGGREGATE = ("start", "done")
_STYLE = (
    "<style>.ck-episode{border-bottom:1px solid #e0e0e0;padding:3px 4px;font-size:12px}"
    ".ck-episode summary{cursor:pointer}.ck-episode.ck-running{background:#fff8e1;font-weight:600}"
    ".ck-episode.ck-applied,.ck-episode.ck-recovered{background:#f1f8e9}"
    ".ck-episode.ck-failed,.ck-episode.ck-floor,.ck-episode.ck-rejected{background:#ffebee}"
    ".ck-episode.ck-skipped,.ck-episode.ck-cancelled{color:#757575}"
    ".ck-steps td{padding:1px 8px;border-bottom:1px solid #eee;font-size:11px;vertical-align:top}"
    ".ck-step.ck-skipped td{color:#9e9e9e}.ck-step.ck-running td{background:#fff8e1}</style>"
)
_DOT = "<span style='display:inline-block;width:9px;height:9px;border-radius:50%;background:#f9a825'></span>"


def _sizes(before: int, after: int, running: bool) -> str:
    if running:
        return f"{format_size(before)} → …"
    if not after or after == before:
        return f"{format_size(before)}, unchanged" if before else ""
    return f"{format_size(before)} → {format_size(after)}"


def counts(rows: list[Row]) -> dict[str, int]:
    """What the idle line says, counted as ``session.stats`` counts it: compactions that changed the
    history (``compactions``), recovery steps (the sum of ``recoveries_by_level``), and the passes
    that found nothing to remove."""
    return {
        "compactions": sum(r["kind"] == "compaction" and r["outcome"] == "applied" for r in rows),
        "recovery_steps": sum(s["outcome"] == "retrying" for r in rows if r["kind"] == "recovery" for s in r["steps"]),
        "recoveries": sum(r["kind"] == "recovery" for r in rows),
        "no_change": sum(r["kind"] == "compaction" and r["outcome"] == "skipped" for r in rows),
    }


def idle_line(rows: list[Row]) -> str:
    """``1 compaction, 2 recovery steps (1 recovery) · 3 passes found nothing to remove``."""
    n = counts(rows)
    text = f"{n['compactions']} compaction{'' if n['compactions'] == 1 else 's'}, {n['recovery_steps']} recovery step"
    text += "" if n["recovery_steps"] == 1 else "s"
    if n["recoveries"]:
        text += f" ({n['recoveries']} recover{'y' if n['recoveries'] == 1 else 'ies'})"
    if n["no_change"]:
        text += f" · {n['no_change']} pass{'' if n['no_change'] == 1 else 'es'} found nothing to remove"
    return text


def _phase_step(event: CompactionEvent) -> Row:
    cost = ""
    if event.summarizer_prompt_tokens or event.summarizer_completion_tokens or event.summarizer_cost:
        cost = (
            f"summary call: {event.summarizer_prompt_tokens:,} tokens read, {event.summarizer_completion_tokens:,} "
            f"written, ${event.summarizer_cost:.4f}"
        )
    if event.identifier_retention is not None:
        cost = f"{cost} · kept {event.identifier_retention:.0%} of paths/ids".strip(" ·")
    return {
        "seq": event.seq,
        "phase": event.phase,
        "what": phase_label(event.phase) + (f" ({stage_label(event.stage)} stage)" if event.stage else ""),
        "help": phase_help(event.phase),
        "outcome": event.outcome,
        "stage": event.stage,
        "size": _sizes(event.bytes_before, event.bytes_after, event.outcome == "running"),
        "bytes_before": event.bytes_before,
        "bytes_after": event.bytes_after,
        "status": event.status,
        "extra": cost,
    }


def _recovery_step(event: RecoveryEvent) -> Row:
    return {
        "seq": event.seq,
        "phase": f"level {event.level}",
        "what": level_label(event.level) + f" (attempt {event.attempt})",
        "help": "",
        "outcome": event.outcome,
        "level": event.level,
        "size": _sizes(event.bytes_before, event.bytes_after, False),
        "bytes_before": event.bytes_before,
        "bytes_after": event.bytes_after,
        "status": failure_label(event.failure_kind) if event.failure_kind else "",
        "extra": f"{len(event.archived_keys)} pieces archived" if event.archived_keys else "",
    }


def _open(rows: list[Row], kind: str) -> int | None:
    for index in range(len(rows) - 1, -1, -1):
        if rows[index]["kind"] == kind and rows[index]["open"]:
            return index
    return None


def _summary(row: Row) -> str:
    """The one-line, plain-language description of an episode."""
    if row["kind"] == "compaction":
        applied = [s for s in row["steps"] if s["outcome"] == "applied" and s["phase"] not in _AGGREGATE]
        done = ", ".join(dict.fromkeys(phase_label(s["phase"]) for s in applied)) or "nothing to remove"
        before, after = row["bytes_before"], row["bytes_after"]
        freed = f" (freed {format_size(before - after)})" if after and before > after else ""
        if row["outcome"] == "running":
            live = next((s for s in reversed(row["steps"]) if s["outcome"] == "running"), None)
            doing = f" · now: {live['what']}" if live else ""
            return f"Compaction {TRIGGERS.get(row['trigger'], row['trigger'])} · {format_size(before)} → …{doing}"
        return f"Compaction {TRIGGERS.get(row['trigger'], row['trigger'])} · {_sizes(before, after, False)}{freed} · {done}"
    last = row["steps"][-1] if row["steps"] else None
    tried = sum(1 for s in row["steps"] if s["outcome"] == "retrying")
    how = {
        "recovered": f"recovered at {level_label(last['level']) if last else '?'}",
        "failed": "every level tried, the request still failed",
        "floor": "cannot fit: the newest message alone is too big",
    }.get(row["outcome"], f"trying {level_label(last['level']) if last else ''}")
    return f"Recovery after {failure_label(row['failure_kind'])} · {how} · {tried} step{'s' if tried != 1 else ''}"


def timeline_rows(rows: list[Row], event: Event, *, max_rows: int = 200) -> list[Row]:
    """Rows after ``event``: a new list (the input is not changed); unrelated events return ``rows``."""
    if isinstance(event, CompactionEvent):
        kind, step = "compaction", _phase_step(event)
    elif isinstance(event, RecoveryEvent):
        kind, step = "recovery", _recovery_step(event)
    else:
        return rows
    phase = event.phase if isinstance(event, CompactionEvent) else ""
    failure = event.failure_kind if isinstance(event, RecoveryEvent) else ""
    new = list(rows)
    index = _open(new, kind)
    if index is None or (kind == "compaction" and phase == "start"):
        if index is not None:  # a start without the previous done: close the old one
            new[index] = dict(new[index], open=False, outcome="ended")
        new.append(
            {
                "n": (rows[-1]["n"] + 1) if rows else 1,
                "kind": kind,
                "open": True,
                "trigger": getattr(event, "trigger", "recovery"),
                "failure_kind": getattr(event, "failure_kind", ""),
                "outcome": "running" if kind == "compaction" else "retrying",
                "bytes_before": event.bytes_before,
                "bytes_after": 0,
                "steps": [],
                "seq": event.seq,
            }
        )
        index = len(new) - 1
    row = dict(new[index])
    steps = list(row["steps"])
    # a phase's result (or a retried level's final outcome) replaces its running row
    same = next(
        (
            i
            for i in range(len(steps) - 1, -1, -1)
            if steps[i]["phase"] == step["phase"] and steps[i]["outcome"] in ("running", "retrying")
            and (kind == "compaction" or step["outcome"] in FINAL_RECOVERY)
        ),
        None,
    )  # fmt: skip
    if same is not None and kind == "compaction":
        steps[same] = step
    elif kind == "compaction" and phase == "done":
        steps = [dict(s, outcome="ended") if s["outcome"] == "running" else s for s in steps]
    elif not (kind == "compaction" and phase == "start"):
        steps.append(step)
    row["steps"] = steps
    row["status"] = step["status"]
    if kind == "compaction":
        if phase == "done":
            row.update(open=False, outcome=event.outcome, bytes_after=event.bytes_after)
        elif event.outcome != "running" and event.bytes_after:
            row["bytes_after"] = event.bytes_after
    else:
        if failure and not row["failure_kind"]:
            row["failure_kind"] = failure
        row["outcome"] = event.outcome
        if event.outcome in FINAL_RECOVERY:
            row["open"] = False
        if event.bytes_after:
            row["bytes_after"] = event.bytes_after
    row["summary"] = _summary(row)
    new[index] = row
    return new[-max_rows:]


def _steps_table(row: Row) -> str:
    body = []
    for s in row["steps"]:
        detail = " · ".join(p for p in (s["status"], s["extra"]) if p)
        body.append(
            f"<tr class='ck-step ck-{esc(s['outcome'])}' title='{esc(s['help'])}'><td>{esc(s['what'])}</td>"
            f"<td>{esc(s['outcome'])}</td><td style='white-space:nowrap'>{esc(s['size'])}</td><td>{esc(detail)}</td></tr>"
        )
    return f"<table class='ck-steps'>{''.join(body)}</table>"


def episode_html(row: Row, *, expanded: bool = False) -> str:
    is_open = " open" if expanded or row["outcome"] == "running" else ""
    return (
        f"<details class='ck-episode ck-{esc(row['kind'])} ck-{esc(row['outcome'])}'{is_open}>"
        f"<summary><b>#{row['n']}</b> {esc(row.get('summary', ''))}</summary>{_steps_table(row)}</details>"
    )


class PhaseTimeline(FeedView, W.VBox):
    """Live list of compactions and recoveries, one expandable row each; ``rows`` and ``running`` for tests."""

    rows: T.List[Row] = T.List(help="one dict per compaction or recovery (with its steps), oldest first")
    running = T.Unicode("", help="the phase running right now, empty when idle")

    def __init__(self, session: Any, *, max_rows: int = 200, **kwargs: Any) -> None:
        events = events_of(session, panel="PhaseTimeline")
        self.max_rows = max_rows
        self.status = W.HTML()
        self.table = W.HTML()
        super().__init__(children=[self.status, self.table], **kwargs)
        self.add_class("ck-timeline")
        self._feed = EventFeed(events, self._apply)
        with self._feed.lock:
            self._feed.start()
            self._render()

    def _apply(self, event: Event) -> None:
        new = timeline_rows(self.rows, event, max_rows=self.max_rows)
        if new is not self.rows:
            self.rows = new
            if not self._feed.replaying:
                self._render()

    def _render(self) -> None:
        live = [r for r in self.rows if r["outcome"] == "running"]
        if live:
            steps = [s for s in live[-1]["steps"] if s["outcome"] == "running"]
            what, status = (steps[-1]["what"], steps[-1]["status"]) if steps else ("compaction", live[-1]["status"])
            self.running = f"{what}: {status}".rstrip(": ")
            self.status.value = (
                f"<div class='ck-running-line' style='color:#8d6e00;font-weight:600'>{_DOT} running "
                f"{esc(self.running)}</div>"
            )
        else:
            self.running = ""
            self.status.value = (
                f"<div class='ck-idle-line' style='font-size:12px'>idle · {esc(idle_line(self.rows))} · click a row "
                "for its steps</div>"
            )
        # newest first in a scroll box: the live end stays in view during a long run
        items = "".join(episode_html(r) for r in self.rows[::-1]) or (
            "<div class='ck-empty' style='font-size:12px;color:#777'>no compaction or recovery yet</div>"
        )
        self.table.value = (
            f"{_STYLE}<div class='ck-scroll ck-timeline-list' style='max-height:320px;overflow-y:auto'>{items}</div>"
        )
