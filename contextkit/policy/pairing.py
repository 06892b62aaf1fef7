"""Tool-call / tool-result pairing: every call answered by exactly one result, every result answering a call.

Pairing is positional and block-scoped: an assistant message with tool calls claims, for each call
id, the first unclaimed tool message with that id before the next assistant message. That is what
makes parallel calls and providers that re-use ids per turn (``web_fetch:0``) safe.

Removed orphan results are never silently lost: they are listed in ``PairingReport.orphans`` and,
when an ``archive`` is passed, archived (their keys are in ``archived_keys``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contextkit.markers import ArchiveSink
from contextkit.messages import Message, ToolCall, archived_text
from contextkit.policy._common import archive_original, origin_of

SYNTHETIC_RESULT = "[result unavailable: removed during context recovery]"


@dataclass(frozen=True)
class PairingReport:
    synthetic_injected: int = 0
    orphans_removed: int = 0
    duplicates_pruned: int = 0
    relocated: int = 0
    missing_ids: tuple[str, ...] = ()
    orphan_ids: tuple[str, ...] = ()
    orphans: tuple[Message, ...] = ()  # the removed tool messages, for callers that archive them
    pruned_calls: tuple[ToolCall, ...] = ()
    archived_keys: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.synthetic_injected or self.orphans_removed or self.duplicates_pruned or self.relocated)

    def describe(self) -> str:
        if not self.changed:
            return "pairing: valid"
        return (
            f"pairing: {self.synthetic_injected} synthetic results, {self.orphans_removed} orphans removed, "
            f"{self.duplicates_pruned} duplicate calls pruned, {self.relocated} results relocated"
        )


def _has_valid_shape(history: Sequence[Message], start: int = 0) -> bool:
    n = len(history)
    i = start
    while i < n:
        m = history[i]
        if m.role == "tool":
            return False
        if m.role == "assistant" and m.tool_calls:
            ids = [c.id for c in m.tool_calls]
            if not all(ids) or len(set(ids)) != len(ids):
                return False
            run = history[i + 1 : i + 1 + len(ids)]
            if len(run) != len(ids) or any(r.role != "tool" for r in run):
                return False
            if sorted(r.tool_call_id or "" for r in run) != sorted(ids):
                return False
            i += 1 + len(ids)
            continue
        i += 1
    return True


def synthetic_result(call: ToolCall) -> Message:
    return Message.tool(call.id, SYNTHETIC_RESULT, name=call.name, synthetic=True)


def repair_tool_pairing(
    history: Sequence[Message], *, archive: ArchiveSink | None = None, valid_prefix: int = 0
) -> tuple[list[Message], PairingReport]:
    """Make every tool call answered exactly once, right after its assistant message.

    Returns the same list object (when given a list) if the history is already valid. Idempotent.
    ``valid_prefix``: the caller knows ``history[:valid_prefix]`` is a whole history this function
    found valid (the flow's ``SettledPrefix``), so the check starts after it: a history that only
    grew since costs the new messages, not all of them. A tool result appended to a round that was
    complete is still found: it is the first message the check looks at.
    """
    if _has_valid_shape(history, valid_prefix):
        return (history if isinstance(history, list) else list(history)), PairingReport()
    n = len(history)
    claimed: set[int] = set()
    out: list[Message] = []
    synthetic = orphans_removed = pruned = relocated = 0
    missing: list[str] = []
    pruned_calls: list[ToolCall] = []
    orphans: list[Message] = []
    for i, m in enumerate(history):
        if m.role == "tool":
            if i not in claimed:
                orphans.append(m)
                orphans_removed += 1
            continue
        if m.role != "assistant" or not m.tool_calls:
            out.append(m)
            continue
        calls: list[ToolCall] = []
        seen: set[str] = set()
        for call in m.tool_calls:
            if not call.id or call.id in seen:
                pruned += 1
                pruned_calls.append(call)
                continue
            seen.add(call.id)
            calls.append(call)
        end = next((j for j in range(i + 1, n) if history[j].role == "assistant"), n)
        results: list[Message] = []
        for call in calls:
            passed_other = False
            found = None
            for j in range(i + 1, end):
                r = history[j]
                if r.role != "tool":
                    passed_other = True
                    continue
                if j not in claimed and r.tool_call_id == call.id:
                    found = j
                    break
            if found is None:
                synthetic += 1
                missing.append(call.id)
                results.append(synthetic_result(call))
            else:
                claimed.add(found)
                relocated += passed_other
                results.append(history[found])
        out.append(m if len(calls) == len(m.tool_calls) else m.evolve(tool_calls=tuple(calls)))
        out.extend(results)
    keys: list[str] = []
    if archive is not None:
        for orphan in orphans:
            got = archive_original(
                archive, archived_text(orphan), kind="tool_result", origin=origin_of(orphan, reason="orphan")
            )
            if got:
                keys.extend(got[1])
    report = PairingReport(
        synthetic_injected=synthetic,
        orphans_removed=orphans_removed,
        duplicates_pruned=pruned,
        relocated=relocated,
        missing_ids=tuple(missing),
        orphan_ids=tuple(o.tool_call_id or "" for o in orphans),
        orphans=tuple(orphans),
        pruned_calls=tuple(pruned_calls),
        archived_keys=tuple(dict.fromkeys(keys)),
    )
    if not report.changed:
        return list(history), report
    return out, report


def find_orphans(history: Sequence[Message]) -> tuple[list[int], list[int]]:
    """``(orphan result indices, indices of assistant messages with an unanswered call)`` by the strict
    adjacency rule providers enforce (results form a run right after their assistant message)."""
    orphan_results: list[int] = []
    unanswered: list[int] = []
    i, n = 0, len(history)
    while i < n:
        m = history[i]
        if m.role == "assistant" and m.tool_calls:
            pending = [c.id for c in m.tool_calls]
            j = i + 1
            while j < n and history[j].role == "tool":
                tid = history[j].tool_call_id
                if tid in pending:
                    pending.remove(tid)
                else:
                    orphan_results.append(j)
                j += 1
            if pending:
                unanswered.append(i)
            i = j
            continue
        if m.role == "tool":
            orphan_results.append(i)
        i += 1
    return orphan_results, unanswered


def snap_cut(history: Sequence[Message], cut: int, floor: int) -> int:
    """Move a keep-recent cut that lands on a tool result back to the assistant that called it.

    Walks left (not past ``floor``); an assistant with tool calls becomes the cut, a plain assistant
    stops the walk and keeps the original cut. Cuts on other messages or outside ``(floor, len)`` stay.
    """
    if cut <= floor or cut >= len(history) or history[cut].role != "tool":
        return cut
    for j in range(cut - 1, floor - 1, -1):
        if history[j].role == "assistant":
            return j if history[j].tool_calls else cut
    return cut
