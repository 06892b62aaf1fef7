"""Microcompact: age old tool results into previews, then one-liners.

Age is counted in assistant turns. A result of at least ``min_chars`` that is ``truncate_turns`` old
becomes a head+tail preview; ``summarize_turns`` old it becomes a one-line stub. The original is
archived first and every stub ends with its recall marker.

Chosen on purpose, against a design that recognises a preview by its size (a preview falls under the
minimum size and would never age further): a preview is recognised by its banner, so it does become
a one-liner once old enough, citing the original's key (no second archive)
and describing the original; preserve_verbatim, recall output, summaries and synthetic results are
never touched; the one-liner uses a bare ASCII hyphen.

When microcompact runs is decided by its caller: under pressure only (``policy/pressure.py``), so
that below the trigger the history stays append-only and the provider's prompt cache survives.
``protect`` names messages it must leave verbatim (the last K tool results); ``clear_to_one_liner``
is the escalation a pressure pass uses when aging alone does not reach its target.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from contextkit.markers import ArchiveSink
from contextkit.messages import Message, assistant_turns
from contextkit.policy._common import (
    archive_original,
    count_lines,
    describe_origin,
    detect_type,
    fmt_chars,
    head_at_line,
    origin_of,
    split_suffix,
    tail_at_line,
    with_suffix,
)
from contextkit.policy.reuse import stub_names

ONE_LINER_PREFIX = "[Old tool result cleared - "
_BANNER_RE = re.compile(r"\n\[\.\.\. \d+ chars omitted from old tool result \.\.\.\]\n")


@dataclass(frozen=True)
class MicrocompactConfig:
    truncate_turns: int = 2
    summarize_turns: int = 4
    head_chars: int = 2000
    tail_chars: int = 500
    min_chars: int = 3000

    @classmethod
    def from_limits(cls, limits: Any) -> MicrocompactConfig:
        """From a ``contextkit.settings.Limits`` (its ``microcompact_*`` fields)."""
        return cls(
            truncate_turns=limits.microcompact_truncate_turns,
            summarize_turns=limits.microcompact_summarize_turns,
            head_chars=limits.microcompact_head_chars,
            tail_chars=limits.microcompact_tail_chars,
            min_chars=limits.microcompact_min_chars,
        )


@dataclass(frozen=True)
class MicrocompactReport:
    truncated: int = 0
    summarized: int = 0
    chars_freed: int = 0
    archived_keys: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.truncated or self.summarized)

    def describe(self) -> str:
        return f"microcompact: {self.truncated} truncated, {self.summarized} summarized, {fmt_chars(self.chars_freed)} freed"


def preview(content: str, head_chars: int, tail_chars: int) -> str | None:
    """Head+tail preview with the omitted-chars banner; None when it would not be shorter."""
    if len(content) <= head_chars + tail_chars + 100:
        return None
    head = head_at_line(content, head_chars)
    tail = tail_at_line(content, tail_chars)
    omitted = len(content) - len(head) - len(tail)
    return f"{head}\n[... {omitted} chars omitted from old tool result ...]\n{tail}"


def one_liner(original: str, message: Message, *, call: str = "", names: Sequence[str] = ()) -> str:
    """``[Old tool result cleared - L lines, C chars, TYPE]`` (+ ``; tool path:lines`` when known,
    ``: CALL`` the call that produced it, ``; names: a, b`` a few names it holds - what the agent
    needs to tell which stub to recall)."""
    where = describe_origin(message)
    extra = f"; {where}" if where else ""
    if call and call not in where:  # the origin may already say it (read_file PATH:LINES)
        extra += f"{':' if where else ';'} {call}"
    if names:
        extra += "; names: " + ", ".join(names)
    return f"{ONE_LINER_PREFIX}{count_lines(original)} lines, {len(original)} chars, {detect_type(original)}{extra}]"


def is_candidate(message: Message) -> bool:
    """Tool results (and user-role tool feedback tagged with a tool origin) that may be aged."""
    if message.preserve_verbatim or message.is_recall or message.is_summary or message.synthetic:
        return False
    if message.role == "tool":
        return True
    return message.role == "user" and message.origin is not None and bool(message.origin.tool)


def clear_to_one_liner(
    message: Message, *, archive: ArchiveSink, turn: int, call: str = "", referred: Collection[str] | None = None
) -> tuple[Message, tuple[str, ...]] | None:
    """``message`` as its one-line stub citing the archived original (and the keys newly archived);
    None when it is one already, the archive refused, or the stub would not be shorter. ``call``
    (the call in a few words) and ``referred`` (the names the agent already wrote: the stub then
    cites a few it has not) make the stub say what it holds."""
    content = message.content
    if content.startswith(ONE_LINER_PREFIX):
        return None
    body, carried = split_suffix(content)
    got = archive_original(archive, content, kind="tool_result", origin=_origin(message, turn))
    if got is None:
        return None
    original = content
    if carried:  # describe the original, not the stub
        original = archive.get(carried[0]) or body
    said = f"{describe_origin(message)} {call}"
    cited = stub_names(original, referred, said=said) if referred is not None else []
    new = with_suffix(one_liner(original, message, call=call, names=cited), got[0])
    if len(new) >= len(content):
        return None
    return message.with_content(new), got[1]


def microcompact(
    history: Sequence[Message],
    *,
    archive: ArchiveSink,
    config: MicrocompactConfig | None = None,
    protect: Collection[int] = (),
) -> tuple[list[Message], MicrocompactReport]:
    """Age old tool results (previews, then one-liners); indices in ``protect`` are left verbatim."""
    cfg = config or MicrocompactConfig()
    tags = assistant_turns(history)
    total = tags[-1] if tags else 0
    out = list(history)
    truncated = summarized = freed = 0
    keys: list[str] = []
    for i, m in enumerate(history):
        age = total - tags[i]
        if age < cfg.truncate_turns or i in protect or not is_candidate(m):
            continue
        content = m.content
        if content.startswith(ONE_LINER_PREFIX):
            continue
        body, carried = split_suffix(content)
        is_preview = bool(carried) and _BANNER_RE.search(body) is not None
        if not is_preview and len(content) < cfg.min_chars:
            continue
        if age >= cfg.summarize_turns:
            cleared = clear_to_one_liner(m, archive=archive, turn=tags[i])
            if cleared is None:
                continue
            out[i], fresh = cleared
            summarized += 1
        else:
            shorter = None if is_preview else preview(body, cfg.head_chars, cfg.tail_chars)
            if shorter is None:
                continue
            got = archive_original(archive, content, kind="tool_result", origin=_origin(m, tags[i]))
            if got is None:
                continue
            out[i], fresh = m.with_content(with_suffix(shorter, got[0])), got[1]
            truncated += 1
        keys.extend(fresh)
        freed += len(content) - len(out[i].content)
    report = MicrocompactReport(truncated, summarized, freed, tuple(dict.fromkeys(keys)))
    return (out if report.changed else list(history)), report


def _origin(message: Message, turn: int) -> dict[str, object]:
    return origin_of(message, turn=turn)
