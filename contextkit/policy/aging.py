"""Aging: messages and assembler blocks that become recallable stubs.

``Message(age_out_after=N)`` asks for a message to leave the request once N user turns began after
its own turn was answered; ``prompt/assembly.py`` ages its blocks the same way (``aged_stub``). The
original is archived first, and the stub carries its recall marker. Pure but for the archive.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import replace

from contextkit.markers import ArchiveSink, recall_suffix
from contextkit.messages import MARKER_RE, Message, archived_text

__all__ = ["age_messages", "aged_stub", "ages", "turns_after"]


def aged_stub(
    text: str, *, label: str, after: int, unit: str, archive: ArchiveSink, kind: str, origin: dict[str, object]
) -> str | None:
    """The one aging mechanism (messages here, the assembler's blocks in ``prompt/assembly.py``):
    ``text`` is archived first, then replaced by ``[LABEL: aged out after N UNIT]`` and its recall
    marker. None when the archive kept nothing: the text then stays whole rather than be lost."""
    key = archive.put(text, kind=kind, origin=origin, allow_markers=True)
    if key is None:
        return None
    return f"[{label}: aged out after {after} {unit}]" + recall_suffix([key])


def turns_after(history: Sequence[Message]) -> list[int]:
    """For each message, how many user turns began after its own turn was answered: later user
    messages (neither recall output nor injected by contextkit) with an assistant message between
    them and it. A message sent with a question, or a tool result of that turn, starts counting at
    the next question. A compaction that summarizes later turns can only delay an aging."""
    counts = [0] * len(history)
    users = 0  # qualifying user messages after the current position
    unanswered = 0  # of those, the ones before the first assistant message after it
    for i in range(len(history) - 1, -1, -1):
        counts[i] = users - unanswered
        m = history[i]
        if m.role == "assistant":
            unanswered = 0
        elif m.role == "user" and not m.is_recall and not m.synthetic:
            users += 1
            unanswered += 1
    return counts


_AGE_OUT_AFTER = operator.attrgetter("age_out_after")


def ages(history: Sequence[Message], start: int = 0) -> bool:
    """Whether a message of ``history[start:]`` ages out (``age_out_after`` set): one pass in C."""
    return any(map(_AGE_OUT_AFTER, history[start:] if start else history))


def age_messages(history: Sequence[Message], archive: ArchiveSink) -> tuple[list[Message], list[str]]:
    """(the history with every ``Message(age_out_after=N)`` that has N user turns after it replaced
    by its stub, the archive keys written). A stub keeps the message's role, tool calls and tool call
    id (the pairing holds); its images are in the archived original. Pure but for the archive."""
    out = list(history)
    keys: list[str] = []
    if not ages(history):  # in C: a positive number of turns, or None
        return out, keys  # the common case: no count needed
    for i, (m, later) in enumerate(zip(history, turns_after(history), strict=True)):
        if m.age_out_after is None or later < m.age_out_after:
            continue
        origin: dict[str, object] = {"role": m.role, "aged_after_turns": m.age_out_after}
        if m.origin is not None and m.origin.describe():
            origin["origin"] = m.origin.describe()
        stub = aged_stub(
            archived_text(m), label=f"{m.role} message", after=m.age_out_after, unit="turns" if m.age_out_after > 1 else "turn",
            archive=archive, kind="aged", origin=origin,
        )  # fmt: skip
        if stub is None:
            continue
        out[i] = replace(m, content=stub, images=(), image_details=(), age_out_after=None, preserve_verbatim=False)
        keys.extend(MARKER_RE.findall(stub))
    return out, keys
