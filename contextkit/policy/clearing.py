"""Anthropic-style tool-result clearing (``clear_tool_uses_20250919``), as a pure baseline policy.

Anthropic's server-side context editing receives the client's full, unedited history with every
request and, when the prompt exceeds ``trigger`` input tokens, replaces the oldest tool results
with a placeholder, keeping the last ``keep`` tool uses; if that would clear fewer than
``clear_at_least`` tokens the edit is not applied (so a cache break is always worth it). Its
defaults are trigger 100,000 input tokens, keep 3, no minimum; ``exclude_tools`` are never cleared.

``clear_tool_uses`` does the same to a history (stateless: call it on the full history before
every request, as the server does), except that nothing is lost: each cleared result is archived
and its placeholder carries the recall marker. Because it is re-applied to a growing history, once
the trigger is crossed every new tool result pushes one more result out of ``keep``: the prompt
cache breaks there at every tool round. contextkit's own pressure pass (``policy/pressure.py``)
edits the stored history once per batch instead; the experiments compare the two
(``contextkit.experiments.strategies``: ``anthropic-clearing``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contextkit.markers import ArchiveSink
from contextkit.messages import Message
from contextkit.policy._common import archive_original, describe_origin, origin_of, with_suffix
from contextkit.policy.testing import StagedSink

__all__ = ["CLEARED_PREFIX", "ClearingConfig", "ClearingReport", "clear_tool_uses"]

CLEARED_PREFIX = "[tool result cleared"


@dataclass(frozen=True)
class ClearingConfig:
    """Anthropic's knobs, in tokens (its defaults; scale ``trigger`` to small windows)."""

    trigger: int = 100_000
    keep: int = 3
    clear_at_least: int = 0
    exclude_tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.trigger < 0 or self.keep < 0 or self.clear_at_least < 0:
            raise ValueError("trigger, keep and clear_at_least must be >= 0")


@dataclass(frozen=True)
class ClearingReport:
    applied: bool = False
    cleared: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    archived_keys: tuple[str, ...] = ()
    reason: str = "below trigger"  # below trigger | nothing to clear | under clear_at_least | applied

    @property
    def changed(self) -> bool:
        return self.applied

    def describe(self) -> str:
        if not self.applied:
            return f"clearing: not applied ({self.reason})"
        return f"clearing: {self.cleared} tool results cleared, {self.tokens_before - self.tokens_after} tokens freed"


def _placeholder(message: Message) -> str:
    where = describe_origin(message)
    return f"{CLEARED_PREFIX}{' - ' + where if where else ''}]"


def clear_tool_uses(
    history: Sequence[Message],
    *,
    archive: ArchiveSink,
    count_tokens: Callable[[Sequence[Message]], int],
    config: ClearingConfig | None = None,
) -> tuple[list[Message], ClearingReport]:
    """Clear every tool result but the last ``keep`` once the prompt exceeds ``trigger`` tokens.

    ``count_tokens`` sizes a whole request (tools and framing included), like the provider's count.
    Results already cleared, excluded tools, recall output and preserve_verbatim messages stay.
    """
    cfg = config or ClearingConfig()
    before = count_tokens(history)
    if before <= cfg.trigger:
        return list(history), ClearingReport(tokens_before=before, tokens_after=before)
    results = [i for i, m in enumerate(history) if m.role == "tool"]
    candidates = results[: max(0, len(results) - cfg.keep)]
    out = list(history)
    cleared = 0
    keys: list[str] = []
    sink = StagedSink(archive)  # an edit that is not applied archives nothing
    for i in candidates:
        m = history[i]
        if m.content.startswith(CLEARED_PREFIX) or m.is_recall or m.preserve_verbatim or m.name in cfg.exclude_tools:
            continue
        got = archive_original(sink, m.content, kind="tool_result", origin=origin_of(m, reason="clearing"))
        if got is None:
            continue
        out[i] = m.with_content(with_suffix(_placeholder(m), got[0]))
        keys.extend(got[1])
        cleared += 1
    if not cleared:
        return list(history), ClearingReport(tokens_before=before, tokens_after=before, reason="nothing to clear")
    after = count_tokens(out)
    if before - after < cfg.clear_at_least:
        return list(history), ClearingReport(tokens_before=before, tokens_after=before, reason="under clear_at_least")
    if not sink.commit(out):
        return list(history), ClearingReport(tokens_before=before, tokens_after=before, reason="archive refused")
    return out, ClearingReport(True, cleared, before, after, tuple(dict.fromkeys(keys)), "applied")
