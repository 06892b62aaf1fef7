"""Truncation: the compaction pipeline's last resort, and recovery levels 2 and 3.

Keeps every system message (moved to the front), the last ``keep`` non-system messages (snapped so
the kept tail starts with a user message, which also keeps tool results with their calls) and every
preserve_verbatim message (re-attached after the notice, downgraded to a user message when it was a
tool result whose call is gone). The task always survives. In a chat the kept tail never starts
after the newest user message. In an agent run (tool rounds after the newest user message: its whole
trajectory is that message's chain) the tail may start inside the chain, at the start of a tool round,
but never after the newest round, and the task message is kept after the notice (still the newest user message), so a run of
hundreds of rounds fits a small window. The dropped messages are archived as one transcript before anything is removed; the
notice cites it. ``per_message_cap`` (nuclear: 4000) then cuts long non-system, non-verbatim messages
end-preserving, each original archived first - except the newest user message, which only the
oversize rule (``policy.oversize``) may shorten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from contextkit.markers import ArchiveSink, marker, recall_suffix
from contextkit.messages import Message, newest_request_index, newest_tool_round, render_transcript
from contextkit.policy._common import cap_end_preserving, tool_result_as_user
from contextkit.policy.archive_index import index_block
from contextkit.policy.pairing import PairingReport, repair_tool_pairing

RECOVERY_NOTICE = (
    "[Context was automatically compacted due to size limits. Previous conversation history has been "
    "summarized. Continue from where you left off.]"
)


def truncation_notice(dropped: int, key: str) -> str:
    return (
        f"[CONTEXT TRUNCATED: {dropped} messages removed due to context window limit. Recent context preserved "
        f"below. Full transcript recoverable via @recall {marker(key)}.]"
    )


@dataclass(frozen=True)
class TruncateReport:
    dropped: int = 0
    kept: int = 0
    verbatim_kept: int = 0
    capped: int = 0
    segment_key: str | None = None
    archived_keys: tuple[str, ...] = ()
    pairing: PairingReport = field(default_factory=PairingReport)
    moved_systems: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.dropped or self.capped or self.pairing.changed or self.moved_systems)

    def describe(self) -> str:
        where = f" (archived as {marker(self.segment_key)})" if self.segment_key else ""
        text = f"truncate: {self.dropped} messages dropped{where}, {self.kept} kept"
        if self.verbatim_kept:
            text += f", {self.verbatim_kept} verbatim re-attached"
        if self.capped:
            text += f", {self.capped} capped"
        return text


def emergency_truncate(
    history: Sequence[Message],
    *,
    keep: int,
    archive: ArchiveSink,
    per_message_cap: int | None = None,
) -> tuple[list[Message], TruncateReport]:
    systems = [m for m in history if m.role == "system"]
    rest = [m for m in history if m.role != "system"]
    newest = newest_request_index(rest)
    start = max(0, len(rest) - max(0, keep))
    last_round = newest_tool_round(rest, after=newest)
    task: Message | None = None
    if newest is not None and last_round is not None and start > newest:
        # an agent run: its whole trajectory is the chain of the newest user message, so the cut goes
        # inside the chain, at the start of a tool round, never past the newest round; the task
        # message itself is kept and re-attached after the notice
        while start < last_round and rest[start].role != "assistant":
            start += 1
        start = min(start, last_round)
        task = rest[newest]
    else:
        while start < len(rest) and rest[start].role != "user":
            start += 1
        if newest is not None:
            start = min(start, newest)  # the task survives: never cut past the newest user message
    dropped, kept = [m for m in rest[:start] if m is not task], rest[start:]
    removed = [m for m in dropped if not m.preserve_verbatim]
    verbatim = [m for m in dropped if m.preserve_verbatim]
    keys: list[str] = []
    segment_key: str | None = None
    if removed:
        segment_key = archive.put(
            render_transcript(removed), kind="segment", origin={"reason": "truncate"}, allow_markers=True
        )
        if segment_key is None:  # never drop what could not be archived
            return list(history), TruncateReport(kept=len(rest))
        keys.append(segment_key)
        # the originals the dropped stubs cite stay one recall away (no marker chains)
        index = index_block(removed)
        if kept:
            text = truncation_notice(len(removed), segment_key) + index
        else:
            text = RECOVERY_NOTICE + index + recall_suffix([segment_key])
        notice = Message.user(text, is_summary=True, summary_of=len(removed))
        # the task goes after the notice and the re-attached originals: it stays the newest user message
        out = [*systems, notice, *(tool_result_as_user(m) for m in verbatim), *([task] if task else []), *kept]
    else:
        out = [*systems, *rest]
    moved = not removed and list(history) != out
    out, pairing = repair_tool_pairing(out, archive=archive)
    keys.extend(pairing.archived_keys)
    capped = 0
    if per_message_cap is not None:
        task = rest[newest] if newest is not None else None
        for i, m in enumerate(out):
            if m.role == "system" or m.preserve_verbatim or m is task:
                continue
            done = cap_end_preserving(m, per_message_cap, archive)
            if done is not None:
                out[i] = done[0]
                keys.extend(done[1])
                capped += 1
    report = TruncateReport(
        dropped=len(removed),
        kept=len(kept),
        verbatim_kept=len(verbatim) if removed else 0,
        capped=capped,
        segment_key=segment_key,
        archived_keys=tuple(dict.fromkeys(keys)),
        pairing=pairing,
        moved_systems=moved,
    )
    return (out if report.changed else list(history)), report
