"""Values around a compaction pass: hook info, counters, results, and the default flush sink.

Kept apart from ``contextkit.compaction.compactor`` (which runs the phases) so both stay small; everything
here is re-exported from ``contextkit.compaction.compactor``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from contextkit.events import CompactionEvent, stage_rank
from contextkit.messages import Message

Measure = Callable[[Sequence[Message]], int]


@dataclass(frozen=True)
class CompactionInfo:
    """What the ``pre_compact`` / ``post_compact`` hooks and the flush sink are told about a pass."""

    trigger: str
    session_id: str
    budget: int
    messages_before: int
    bytes_before: int
    tokens_before: int | None = None
    messages_after: int | None = None
    bytes_after: int | None = None
    tokens_after: int | None = None
    stage: str = ""  # the last stage that changed the history: trim | summary | truncation ("" while none)
    outcome: str = "running"  # running | applied | skipped | cancelled
    phase: str = "start"
    instruction: str | None = None
    target: int = 0  # the size the truncation stage cuts down to, at most ``budget`` (0: the budget)


@dataclass
class CompactionStats:
    """The compactor's counters, persisted with the session (``to_dict`` / ``from_dict``)."""

    compactions: int = 0
    truncation_falls: int = 0  # applied compactions that needed the truncation stage (the last resort)
    summary_calls: int = 0
    summary_rejections: int = 0  # answers the quality gate discarded
    summary_failures: int = 0  # calls that raised (timeout, provider error)
    extractive_summaries: int = 0  # summaries made without the model (the summary stage's fallback)
    model_pauses: int = 0  # times the summarizer was paused after two unusable answers in a row
    summaries_trimmed: int = 0  # accepted answers the gate cut clauses naming invented facts from
    prose_chars_received: int = 0  # characters of every summarizer answer (kept or not)
    prose_chars_kept: int = 0  # ... of the prose the gate accepted (what summaries applied or could apply)
    summarizer_prompt_tokens: int = 0
    summarizer_completion_tokens: int = 0
    summarizer_cost: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompactionStats:
        """Counters from ``to_dict`` output; a session saved before the stages had names says ``level3_falls``."""
        names = {f.name for f in fields(cls)}
        data = renamed_stats(data)
        return cls(**{k: v for k, v in data.items() if k in names})


def renamed_stats(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with counter names of older saved sessions replaced by today's (``level3_falls`` -> ``truncation_falls``)."""
    if "level3_falls" in data and "truncation_falls" not in data:
        data = {k: v for k, v in data.items() if k != "level3_falls"} | {"truncation_falls": data["level3_falls"]}
    return data


@dataclass(frozen=True)
class CompactionResult:
    """The outcome of one pass. ``history`` is a new list; the caller's list is never touched."""

    history: list[Message]
    changed: bool
    stage: str  # the last stage that changed something: trim | summary | truncation ("" = nothing)
    outcome: str  # applied | skipped
    trigger: str
    messages_before: int
    messages_after: int
    bytes_before: int
    bytes_after: int
    tokens_before: int | None = None
    tokens_after: int | None = None
    within_budget: bool = False
    reports: tuple[str, ...] = ()
    archived_keys: tuple[str, ...] = ()
    summary_calls: int = 0
    identifier_retention: float | None = None
    prose_retention: float | None = None  # the model's prose alone, without the ledger
    summary_source: str = ""  # model | extractive | "" (no summary applied)
    detail: str = ""
    duration_s: float = 0.0
    events: tuple[CompactionEvent, ...] = field(default=(), repr=False)


class Pass:
    """Mutable state of one pass; nothing here reaches the compactor before the pass commits."""

    def __init__(self, history: list[Message], measure: Measure, token_measure: Measure | None) -> None:
        self.history = history
        self.measure = measure
        self.token_measure = token_measure
        self.bytes = measure(history)
        self.stage = ""  # the last stage that changed the history
        self.reports: list[str] = []
        self.keys: list[str] = []
        self.events: list[CompactionEvent] = []
        self.calls = 0
        self.retention: float | None = None
        self.prose_retention: float | None = None
        self.summary_source = ""
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cost = 0.0

    def tokens(self, history: Sequence[Message] | None = None) -> int:
        return self.token_measure(self.history if history is None else history) if self.token_measure else 0

    def take(self, new: list[Message], report: Any, stage: str) -> bool:
        """Adopt ``new`` when the report says something changed (made by a step of ``stage``)."""
        changed = bool(getattr(report, "changed", new != self.history))
        if changed:
            self.history = new
            self.bytes = self.measure(new)
            self.stage = max(self.stage, stage, key=stage_rank)
            self.reports.append(report.describe())
            self.keys.extend(getattr(report, "archived_keys", ()))
        return changed

    def usage(self) -> dict[str, Any]:
        return {
            "summarizer_prompt_tokens": self.prompt_tokens,
            "summarizer_completion_tokens": self.completion_tokens,
            "summarizer_cost": self.cost,
        }


@dataclass(frozen=True)
class Applied:
    """Report for a step done by the compactor itself (the summary)."""

    text: str
    archived_keys: tuple[str, ...]
    changed: bool = True

    def describe(self) -> str:
        return self.text


def dropped(before: Sequence[Message], after: Sequence[Message]) -> list[Message]:
    """Non-system messages of ``before`` with no equal message left in ``after`` (multiset difference)."""
    left: dict[Message, int] = {}
    for m in after:
        left[m] = left.get(m, 0) + 1
    out = []
    for m in before:
        if left.get(m, 0) > 0:
            left[m] -= 1
        elif m.role != "system":
            out.append(m)
    return out


class WorkbenchWriter:
    """Default ``on_flush`` sink: one markdown section per flush, appended to one file per session.

    Written by the harness, not the model: the messages about to be summarized or dropped, verbatim
    (a readable copy; the archive holds every removed byte too). ``Session`` puts it at
    ``workbench/<session>.md`` next to a file archive and says where at its first write (logger
    "contextkit"); it is removed with the session's entries when the archive prunes that session
    (``Archive.prune``, the default archive's retention).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._announced = False

    @classmethod
    def for_session(cls, directory: str | Path, session_id: str) -> WorkbenchWriter:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in session_id).strip(".") or "session"
        return cls(Path(directory) / f"{safe}.workbench.md")

    def __call__(self, messages: Sequence[Message], info: CompactionInfo) -> None:
        if not self._announced:
            self._announced = True
            logging.getLogger("contextkit").debug("workbench: messages set aside by compaction go to %s", self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        parts = [f"\n## {stamp} - {info.phase} ({info.trigger}): {len(messages)} messages set aside\n"]
        for m in messages:
            fence = "`" * max(3, _longest_run(m.content, "`") + 1)
            calls = " - calls " + ", ".join(f"{c.name}({c.arguments})" for c in m.tool_calls) if m.tool_calls else ""
            parts.append(f"\n### {m.role}{calls}\n\n{fence}\n{m.content}\n{fence}\n")
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write("".join(parts))


def _longest_run(text: str, ch: str) -> int:
    best = run = 0
    for c in text:
        run = run + 1 if c == ch else 0
        best = max(best, run)
    return best
