"""Content shrink (the truncation stage's last pass) and the preserve-verbatim cap.

``shrink_to_budget`` is the last pass when dropping whole messages cannot fit the payload budget (a
short history of huge tool results): largest non-system, non-verbatim message first, original
archived before its first cut, every cut taken from the original (no nested banners), the recall
marker at the end. When the 400-char floors alone still do not fit, a second
stage replaces messages largest-first by a one-line pointer stub, so the result fits whenever the
system messages (plus a pointer per message) do. The task survives: the newest user message is never
cut here (``policy.oversize`` owns that case), the tool call/result chain since it is cut only
after every older message has been cut as far as it goes, and the chain's newest tool round last.

``cap_verbatim`` keeps preserve_verbatim messages to a quarter of the budget: beyond that the
oldest are stubbed with their marker and lose the flag, so compaction always converges. Both take
a recall result the model has not read yet (``unread_recalls``) last: the model asked for it for
its very next request (one page is at most a quarter of the byte budget, so it usually fits).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contextkit.markers import ArchiveSink, recall_suffix
from contextkit.messages import Message, newest_request_index, newest_tool_round
from contextkit.policy._common import (
    archive_original,
    describe_origin,
    fmt_chars,
    origin_of,
    split_suffix,
    structure_preserving,
    with_suffix,
)
from contextkit.policy.archive_index import split_index

Measure = Callable[[Sequence[Message]], int]

# A cut that frees less than this is not made: rewriting a message throws the provider's prompt cache
# away from it on, and re-cutting a message that is already at its floor or a pointer (a pointer
# made again from a pointer is a few characters shorter) would pay that for nothing.
MIN_CUT_CHARS = 64


def unread_recalls(history: Sequence[Message]) -> set[int]:
    """Recall results the model has not answered yet (after the last assistant message): they were
    fetched for the next request, so cutting or stubbing them before anything else would only make
    the model recall them again (or give up); once it has read them they age out like any other."""
    last = max((i for i, m in enumerate(history) if m.role == "assistant"), default=-1)
    return {i for i, m in enumerate(history) if i > last and m.is_recall}


def superseded_results(history: Sequence[Message]) -> set[int]:
    """Tool results whose call (name and arguments) the assistant made again later: the later result
    is the current view (of a file, a listing, a test run), the older one is what to cut first."""
    calls = {c.id: (c.name, c.arguments) for m in history if m.role == "assistant" for c in m.tool_calls}
    seen: set[tuple[str, str]] = set()
    out: set[int] = set()
    for i in range(len(history) - 1, -1, -1):
        m = history[i]
        call = calls.get(m.tool_call_id or "") if m.role == "tool" else None
        if call is None:
            continue
        if call in seen:
            out.add(i)
        seen.add(call)
    return out


@dataclass(frozen=True)
class ShrinkReport:
    shrunk: int = 0
    stubbed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    budget: int = 0
    archived_keys: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.shrunk or self.stubbed)

    @property
    def within_budget(self) -> bool:
        return self.bytes_after <= self.budget

    def describe(self) -> str:
        text = f"shrink: {self.shrunk} messages cut, {fmt_chars(self.bytes_before)} -> {fmt_chars(self.bytes_after)}"
        if self.stubbed:
            text += f", {self.stubbed} reduced to pointers"
        if not self.within_budget:
            text += f" (still over the {fmt_chars(self.budget)} budget)"
        return text


def pointer_stub(message: Message, original_len: int) -> str:
    where = describe_origin(message)
    return f"[{message.role} message of {original_len} chars archived" + (f"; {where}" if where else "") + "]"


def shrink_to_budget(
    history: Sequence[Message],
    *,
    budget: int,
    measure: Measure,
    archive: ArchiveSink,
    floor_chars: int = 400,
) -> tuple[list[Message], ShrinkReport]:
    out = list(history)
    before = total = measure(out)
    if total <= budget:
        return out, ShrinkReport(bytes_before=before, bytes_after=total, budget=budget)
    cited: dict[int, tuple[str, ...]] = {}
    new_keys: list[str] = []
    exhausted: set[int] = set()
    stubbed: set[int] = set()

    def cite(i: int) -> tuple[str, ...] | None:
        if i not in cited:
            got = archive_original(archive, history[i].content, kind="message", origin=origin_of(history[i]))
            if got is None:
                return None
            cited[i] = got[0]
            new_keys.extend(got[1])
        return cited[i]

    found = newest_request_index(history)
    newest = -1 if found is None else found
    last_round = newest_tool_round(history, after=found)
    round_at = len(history) if last_round is None else last_round
    unread = unread_recalls(history)
    stale = superseded_results(history)

    def tier(i: int) -> int:
        # older messages first, then the current chain, then its newest tool round
        return 0 if i < newest else (1 if i < round_at else 2)

    def shrinkable(i: int, m: Message) -> bool:
        return m.role != "system" and not m.preserve_verbatim and i not in exhausted and i != newest

    for stage in (1, 2):
        exhausted.clear()
        while total > budget:
            pool = [
                # by tier, recall results the model has not read last, superseded results (the same
                # call made again later: an older view of the same file) first, the largest first
                (tier(i), i in unread, i not in stale, len(m.content), i)
                for i, m in enumerate(out)
                if shrinkable(i, m) and (len(m.content) > floor_chars if stage == 1 else i not in stubbed)
            ]
            if not pool:
                break
            first = min(p[:3] for p in pool)
            i = max(p for p in pool if p[:3] == first)[-1]
            m = out[i]
            keys = cite(i)
            if keys is None:
                exhausted.add(i)
                continue
            body, _ = split_suffix(history[i].content)
            body, index = split_index(body)  # a summary's index of archived originals is kept whole
            if stage == 1:
                target = (
                    max(floor_chars, len(m.content) - (total - budget) - 96) - len(recall_suffix(keys)) - len(index)
                )
                new = with_suffix(structure_preserving(body, target) + index, keys)
            else:
                new = with_suffix(pointer_stub(m, len(body)) + index, keys)
            if len(m.content) - len(new) < MIN_CUT_CHARS:
                exhausted.add(i)
                continue
            out[i] = m.with_content(new)
            after = measure(out)
            if after >= total:  # shorter text, no smaller request (tokens or escaping): keep the message
                out[i] = m
                exhausted.add(i)
                continue
            total = after
            if stage == 2:
                stubbed.add(i)
        if total <= budget:
            break
    changed = [i for i in cited if out[i] is not history[i]]
    if not changed:
        return list(history), ShrinkReport(bytes_before=before, bytes_after=before, budget=budget)
    report = ShrinkReport(
        shrunk=len(changed),
        stubbed=len(stubbed),
        bytes_before=before,
        bytes_after=measure(out),
        budget=budget,
        archived_keys=tuple(dict.fromkeys(new_keys)),
    )
    return out, report


@dataclass(frozen=True)
class VerbatimReport:
    downgraded: int = 0
    verbatim_bytes: int = 0
    limit: int = 0
    archived_keys: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.downgraded > 0

    def describe(self) -> str:
        return (
            f"verbatim cap: {self.downgraded} pinned originals aged out "
            f"({fmt_chars(self.verbatim_bytes)} pinned, limit {fmt_chars(self.limit)})"
        )


def cap_verbatim(
    history: Sequence[Message], *, budget: int, measure: Measure, archive: ArchiveSink
) -> tuple[list[Message], VerbatimReport]:
    """Stub the oldest preserve_verbatim messages until they take at most a quarter of ``budget``."""
    limit = int(budget * 0.25)
    empty = measure([])
    shares = {i: measure([m]) - empty for i, m in enumerate(history) if m.preserve_verbatim}
    pinned = sum(shares.values())
    if pinned <= limit:
        return list(history), VerbatimReport(verbatim_bytes=pinned, limit=limit)
    out = list(history)
    keys: list[str] = []
    downgraded = 0
    unread = unread_recalls(history)
    for i, share in sorted(shares.items(), key=lambda item: item[0] in unread):  # unread recalls last
        if pinned <= limit:
            break
        m = history[i]
        if m.role == "system":
            continue
        got = archive_original(archive, m.content, kind="message", origin=origin_of(m, reason="verbatim cap"))
        if got is None:
            continue
        where = describe_origin(m)
        size = fmt_chars(len(m.content.encode("utf-8", "surrogatepass")))
        stub = f"[recalled original aged out of the window ({size}" + (f", {where}" if where else "") + ")]"
        out[i] = m.evolve(content=with_suffix(stub, got[0]), preserve_verbatim=False, is_recall=False)
        keys.extend(got[1])
        pinned -= share - (measure([out[i]]) - empty)
        downgraded += 1
    report = VerbatimReport(downgraded, pinned, limit, tuple(dict.fromkeys(keys)))
    return (out if downgraded else list(history)), report
