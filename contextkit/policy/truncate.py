"""Truncation: the compaction pipeline's last resort, and recovery levels 2 and 3.

Keeps every system message (moved to the front), the last ``keep`` non-system messages (snapped so
the kept tail starts with a user message, which also keeps tool results with their calls) and every
preserve_verbatim message (re-attached after the notice, downgraded to a user message when it was a
tool result whose call is gone). The task always survives. In a chat the kept tail never starts
after the newest user message. In an agent run (tool rounds after the newest user message: its whole
trajectory is that message's chain) the tail may start inside the chain, at the start of a tool round,
but never after the newest round, and the task message is kept before the notice (still the newest
user message, the notice being synthetic), so a run of hundreds of rounds fits a small window and each
later truncation still finds the system prompt and the task in the provider's prompt cache. There,
with a ``target``, the tail is shortened further, cut by allowed cut, until the result fits it: the
compactor cuts to a size below the one that triggered it, so the head is not rewritten again a few
requests later. The dropped messages are archived as one transcript before anything is removed; the
notice cites it. ``per_message_cap`` (nuclear: 4000) then cuts long non-system, non-verbatim messages
end-preserving, each original archived first - except the newest user message, which only the
oversize rule (``policy.oversize``) may shorten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from contextkit.markers import KEY_LENGTH, ArchiveSink, marker, recall_suffix
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
    target: int | None = None,
    measure: Callable[[Sequence[Message]], int] | None = None,
) -> tuple[list[Message], TruncateReport]:
    """Keep the last ``keep`` messages (snapped to a cut the conversation allows); in an agent run,
    with ``target`` and ``measure``, fewer when the result would still measure above ``target`` - the
    tail then starts at the first allowed cut whose result fits, or at the latest cut when none does."""
    systems = [m for m in history if m.role == "system"]
    rest = [m for m in history if m.role != "system"]
    newest = newest_request_index(rest)
    start = max(0, len(rest) - max(0, keep))
    last_round = newest_tool_round(rest, after=newest)
    task: Message | None = None
    task_index: int | None = None  # where the task is in ``rest``, in an agent run
    if newest is not None and last_round is not None and start > newest:
        # an agent run: its whole trajectory is the chain of the newest user message, so the cut goes
        # inside the chain, at the start of a tool round, never past the newest round; the task
        # message itself is kept, before the notice
        task, task_index = rest[newest], newest
        cuts = [i for i in range(newest + 1, last_round + 1) if rest[i].role == "assistant"]
    else:
        cuts = [i for i in range(len(rest)) if rest[i].role == "user"]
        if newest is not None:
            cuts = [i for i in cuts if i <= newest]  # the task survives: never cut past the newest user message
        else:
            cuts.append(len(rest))
    later = [i for i in cuts if i >= start]
    start = later[0] if later else cuts[-1]
    if task is not None and task_index is not None and target is not None and measure is not None:
        # only in an agent run: there every cut drops a tool round the archive index names, while in
        # a chat a deeper cut would drop whole exchanges the user wrote, and an oversized message in
        # the kept tail is the shrink step's to cut, not a reason to drop everything before it
        start = _fitting_start(systems, rest, task, task_index, [i for i in cuts if i >= start], target, measure)
    removed, verbatim = _dropped(rest, start, task_index)
    kept = rest[start:]
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
        notice = Message.user(text, is_summary=True, summary_of=len(removed), synthetic=True)
        out = _assemble(systems, task, notice, verbatim, kept)
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


def _dropped(rest: list[Message], start: int, task_index: int | None) -> tuple[list[Message], list[Message]]:
    """(the messages before ``start`` that are removed, the preserve_verbatim ones re-attached), the
    task at ``task_index`` being neither."""
    dropped = [m for i, m in enumerate(rest[:start]) if i != task_index]
    return [m for m in dropped if not m.preserve_verbatim], [m for m in dropped if m.preserve_verbatim]


def _assemble(
    systems: list[Message], task: Message | None, notice: Message, verbatim: list[Message], kept: list[Message]
) -> list[Message]:
    # The task goes before the notice: it is the oldest message a run keeps, so a later truncation
    # (which rewrites the notice) still finds the system prompt and the task in the provider's prompt
    # cache. Verbatim messages the user wrote stay before it (the task stays the newest user message);
    # the notice and re-attached tool results are synthetic, so they never stand in for it.
    attached = [tool_result_as_user(m) for m in verbatim]
    if task is None:
        return [*systems, notice, *attached, *kept]
    own = [m.role == "user" and not m.synthetic for m in attached]
    before = [m for m, o in zip(attached, own, strict=True) if o]
    after = [m for m, o in zip(attached, own, strict=True) if not o]
    return [*systems, *before, task, notice, *after, *kept]


def _fitting_start(
    systems: list[Message],
    rest: list[Message],
    task: Message,
    task_index: int,
    starts: list[int],
    target: int,
    measure: Callable[[Sequence[Message]], int],
) -> int:
    """The first of ``starts`` whose truncated history measures at most ``target`` (the notice sized
    with a stand-in marker of the real one's length), else the last: the size the pass cuts down to,
    not merely the size that triggered it, so one rewrite of the head buys many append-only requests."""
    stand_in = "0" * KEY_LENGTH
    for start in starts:
        removed, verbatim = _dropped(rest, start, task_index)
        notice = Message.user(truncation_notice(len(removed), stand_in) + index_block(removed), synthetic=True)
        if measure(_assemble(systems, task, notice, verbatim, rest[start:])) <= target:
            return start
    return starts[-1] if starts else len(rest)
