"""Tool-result budgets (per result and per turn) and recovery level 1.

Results are grouped by the assistant message that called them. Pass 1 caps each result at
``per_result`` chars; pass 2 brings every group under ``turn_budget``, largest first. A capped result
keeps head and tail around a banner and ends with the recall marker of the archived original (in
the archive, not in files on disk, so the model can recall it and nothing is left to clean up). Stub bytes depend only on the content, so the same history
always yields the same request bytes (prompt cache stays warm).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from contextkit.markers import ArchiveSink, recall_suffix
from contextkit.messages import Message
from contextkit.policy._common import (
    archive_original,
    cap_end_preserving,
    describe_origin,
    fmt_chars,
    head_at_line,
    origin_of,
    split_suffix,
    tail_at_line,
    with_suffix,
)
from contextkit.policy.arguments import excerpt_tool_arguments
from contextkit.policy.pairing import PairingReport, repair_tool_pairing

DEFAULT_TURN_BUDGET = 200_000
DEFAULT_PER_RESULT = 20_000
_PASS2_FLOOR = 5_200
PREVIEW_MAX_CHARS = 5_000  # budget_preview's head (4,000) + tail (1,000): the largest preview it makes
PREVIEW_MIN_CHARS = 1_000  # below this a preview shows too little to tell what to recall
_BANNER_RE = re.compile(r"\n\n\.\.\. \[\d+ chars omitted - full output \(")


@dataclass(frozen=True)
class BudgetReport:
    truncated: int = 0
    chars_freed: int = 0
    archived_keys: tuple[str, ...] = ()
    turn_budget: int = DEFAULT_TURN_BUDGET
    per_result: int = DEFAULT_PER_RESULT

    @property
    def changed(self) -> bool:
        return self.truncated > 0

    def describe(self) -> str:
        return (
            f"tool-result budget: {self.truncated} results capped, {fmt_chars(self.chars_freed)} freed "
            f"(per result {self.per_result:,} chars, per turn {self.turn_budget:,})"
        )


def budget_preview(original: str, target: int, message: Message, reserved: int = 0) -> str:
    """Head (4/5, max 4000) + banner + tail (1/5, max 1000) cut at line boundaries, within ``target``
    chars including the banner and ``reserved`` chars (the recall suffix), so a second run is a no-op."""
    where = describe_origin(message)
    what = f"{len(original)} chars" + (f" from {where}" if where else "")
    banner = f"\n\n... [{len(original)} chars omitted - full output ({what}) archived]\n\n"
    room = max(0, target - len(banner) - reserved)
    head = head_at_line(original, min(4000, room * 4 // 5))
    tail = tail_at_line(original, min(1000, room // 5))
    if len(original) - len(tail) < len(head):
        tail = ""
    omitted = len(original) - len(head) - len(tail)
    return f"{head}\n\n... [{omitted} chars omitted - full output ({what}) archived]\n\n{tail}"


def is_budget_preview(message: Message) -> bool:
    """A tool result that entered the history as a head+tail preview because its output was over
    the per-result budget: the model never saw it whole, and the original is in the archive."""
    body, carried = split_suffix(message.content)
    return bool(carried) and _BANNER_RE.search(body) is not None


def preview_chars(share: float, limit_bytes: int | None) -> int | None:
    """The size of the preview an over-budget output enters the history as: ``share`` of the request
    limit in bytes, at least ``PREVIEW_MIN_CHARS``. None - the usual preview (head 4,000 + tail 1,000
    chars) - when that share is at least ``PREVIEW_MAX_CHARS`` (a large window changes nothing), when
    ``share`` is 0 or when no limit is known. See ``enforce_tool_result_budgets``."""
    if share <= 0 or not limit_bytes or share * limit_bytes >= PREVIEW_MAX_CHARS:
        return None
    return max(PREVIEW_MIN_CHARS, int(share * limit_bytes))


def _eligible(m: Message) -> bool:
    return m.role == "tool" and not m.preserve_verbatim and not m.is_recall


def _groups(history: Sequence[Message], begin: int = 0) -> list[list[int]]:
    groups: list[list[int]] = []
    current: list[int] | None = None
    for i in range(begin, len(history)):
        m = history[i]
        if m.role == "assistant" and m.tool_calls:
            current = []
            groups.append(current)
        elif m.role == "tool" and current is not None:
            current.append(i)
        else:
            current = None
    return groups


def _open_round(history: Sequence[Message], settled: int) -> int:
    """Where the tool round that ``history[settled:]`` may still extend begins: the assistant message
    that opened the round ``history[settled - 1]`` belongs to, else ``settled`` itself."""
    i = min(settled, len(history))
    while i > 0 and history[i - 1].role == "tool":
        i -= 1
    if i > 0 and history[i - 1].role == "assistant" and history[i - 1].tool_calls:
        return i - 1
    return min(settled, len(history))


def enforce_tool_result_budgets(
    history: Sequence[Message],
    *,
    archive: ArchiveSink,
    turn_budget: int = DEFAULT_TURN_BUDGET,
    per_result: int = DEFAULT_PER_RESULT,
    preview: int | None = None,
    settled: int = 0,
) -> tuple[list[Message], BudgetReport]:
    """Cap grouped tool results per result and per turn. Zero/negative limits fall back to the defaults.

    ``settled``: the caller knows ``history[:settled]`` is a whole history this function returned (or
    left unchanged) with the same limits (the flow's ``SettledPrefix``). The budgets are idempotent,
    so only the tool rounds from the last one open at ``settled`` on are looked at: a history that
    only grew since costs its new messages.

    ``preview`` (chars): a result over ``per_result`` becomes a preview of at most this size instead
    of ``per_result`` (whose preview is at most ``PREVIEW_MAX_CHARS``). The session sizes it to its
    limits (``preview_chars``, ``Limits.tool_result_preview_share``): every token of a result that
    enters the history is billed in full once and then, cached, on every later request until a
    pressure pass clears it, so an output too big to enter whole should not enter as a fixed 5,000
    chars when the window is small. Results at or under ``per_result`` enter whole whatever ``preview``.
    """
    turn_budget = turn_budget if turn_budget > 0 else DEFAULT_TURN_BUDGET
    per_result = per_result if per_result > 0 else DEFAULT_PER_RESULT
    first_cut = min(per_result, preview) if preview and preview > 0 else per_result
    out = list(history)
    cut: dict[int, tuple[str, ...]] = {}  # index -> keys citing the original
    new_keys: list[str] = []

    def shorten(i: int, target: int) -> bool:
        m = history[i]
        body, _ = split_suffix(m.content)
        if i not in cut:
            got = archive_original(archive, m.content, kind="tool_result", origin=origin_of(m, reason="budget"))
            if got is None:
                return False
            cut[i] = got[0]
            new_keys.extend(got[1])
        stub = with_suffix(budget_preview(body, target, m, len(recall_suffix(cut[i]))), cut[i])
        if len(stub) >= len(out[i].content):
            return False
        out[i] = m.with_content(stub)
        return True

    groups = _groups(history, _open_round(history, settled))
    for group in groups:
        for i in group:
            if _eligible(history[i]) and len(history[i].content) > per_result:
                shorten(i, first_cut)
    for group in groups:
        excess = sum(len(out[i].content) for i in group) - turn_budget
        for i in sorted((i for i in group if _eligible(history[i])), key=lambda i: -len(out[i].content)):
            if excess <= 0:
                break
            before = len(out[i].content)
            target = max(before - excess, _PASS2_FLOOR)
            if target < before and shorten(i, target):
                excess -= before - len(out[i].content)
    changed = sorted(i for i in cut if out[i] is not history[i])
    if not changed:
        return list(history), BudgetReport(turn_budget=turn_budget, per_result=per_result)
    freed = sum(len(history[i].content) - len(out[i].content) for i in changed)
    return out, BudgetReport(len(changed), freed, tuple(dict.fromkeys(new_keys)), turn_budget, per_result)


@dataclass(frozen=True)
class Level1Report:
    pairing: PairingReport = field(default_factory=PairingReport)
    budgets: BudgetReport = field(default_factory=BudgetReport)
    assistants_truncated: int = 0
    archived_keys: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.pairing.changed or self.budgets.changed or self.assistants_truncated > 0

    def describe(self) -> str:
        return (
            f"level 1: {self.budgets.truncated} tool results capped, {self.assistants_truncated} assistant "
            f"messages truncated, {self.pairing.synthetic_injected + self.pairing.orphans_removed} pairing repairs"
        )


def aggressive_level1(
    history: Sequence[Message],
    *,
    archive: ArchiveSink,
    turn_budget: int,
    per_result: int,
    assistant_cap: int = 5000,
) -> tuple[list[Message], Level1Report]:
    """Recovery level 1: repair pairing, enforce the (already halved) budgets, cap long assistant text."""
    repaired, pairing = repair_tool_pairing(history, archive=archive)
    budgeted, budgets = enforce_tool_result_budgets(
        repaired, archive=archive, turn_budget=turn_budget, per_result=per_result
    )
    out = list(budgeted)
    keys = [*pairing.archived_keys, *budgets.archived_keys]
    truncated = 0
    for i, m in enumerate(out):
        if m.role != "assistant" or m.preserve_verbatim:
            continue
        capped = cap_end_preserving(m, assistant_cap, archive)
        if capped is not None:
            out[i] = capped[0]
            keys.extend(capped[1])
            truncated += 1
    out, argument_keys = excerpt_tool_arguments(out, archive=archive, max_chars=assistant_cap)
    keys.extend(argument_keys)
    truncated += len(argument_keys)
    report = Level1Report(pairing, budgets, truncated, tuple(dict.fromkeys(keys)))
    return (out if report.changed else list(history)), report
