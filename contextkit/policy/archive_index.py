"""A flat index of the archived originals a summary or a truncation notice stands for.

A summary or a truncation notice replaces messages that are often stubs already:
a tool result cleared to a one-liner, capped at arrival, or a recall result aged out, each citing
its original by marker. Archiving the segment as one transcript and citing only the transcript
nests those markers one level deeper at every pass (a notice of a notice of a summary of stubs...),
so after a long session the model needs a recall per level before it reaches an original - more
hops than a model spends on a question. The index keeps every original one hop away: the new
message lists, flat, each stub of the segment with what it was (the call that produced it, its
first line) and its marker, and carries over the entries of the summaries and notices it replaces
instead of citing them. The full transcript stays recoverable through its own marker.

Pure: messages in, text out.
"""

from __future__ import annotations

from collections.abc import Sequence

from contextkit.markers import MARKER_RE, extract_keys, marker
from contextkit.messages import Message, ToolCall
from contextkit.policy._common import describe_origin, split_suffix
from contextkit.policy.microcompact import ONE_LINER_PREFIX

__all__ = ["INDEX_HEADER", "MAX_ENTRIES", "carried_entries", "index_block", "index_entries", "split_index"]

INDEX_HEADER = "[archived originals, oldest first - recall any of them by its marker:"
INDEX_END = "]"
MAX_ENTRIES = 64  # the oldest entries age out first; they stay reachable through the transcripts
ENTRY_CHARS = 200
_CALL_ARGS_CHARS = 80


def carried_entries(content: str) -> list[str]:
    """The index entries an earlier summary or notice carries (``- ...`` lines after the header)."""
    at = content.find(INDEX_HEADER)
    if at < 0:
        return []
    out = []
    for line in content[at + len(INDEX_HEADER) :].split("\n")[1:]:
        if not line.startswith("- "):
            break
        out.append(line)
    return out


def split_index(content: str) -> tuple[str, str]:
    """``(content without its index block, the block)``; ``(content, "")`` when it has none. Policies
    that cut a summary or a notice keep the block (a few lines) and cut the rest."""
    at = content.find(INDEX_HEADER)
    if at < 0:
        return content, ""
    start = at - 2 if content[max(at - 2, 0) : at] == "\n\n" else at
    entries = carried_entries(content)
    end = at + len(INDEX_HEADER) + sum(len(e) + 1 for e in entries) + 1
    if content[end : end + len(INDEX_END)] == INDEX_END:
        end += len(INDEX_END)
    return content[:start] + content[end:], content[start:end]


def _without_index(content: str) -> str:
    return split_index(content)[0]


def _call_text(call: ToolCall | None) -> str:
    if call is None:
        return ""
    args = call.arguments if len(call.arguments) <= _CALL_ARGS_CHARS else call.arguments[:_CALL_ARGS_CHARS] + "..."
    args = MARKER_RE.sub(r"ccr:\1", args)  # an entry cites only its own markers
    return f"{call.name}({args})"


def _entry(message: Message, keys: Sequence[str], call: ToolCall | None) -> str:
    body, _ = split_suffix(message.content)
    first = body.strip().split("\n", 1)[0] if body.strip().startswith("[") else ""
    said = False
    if first.startswith(ONE_LINER_PREFIX):
        # a one-liner already says what the output was (size, type, the call, names it holds): the
        # entry is that line, without the call written out a second time in front of it
        first = "[" + first[len(ONE_LINER_PREFIX) :]
        said = call is not None and f"{call.name}:" in first
    if said:
        what = first
    else:
        lead = _call_text(call)
        what = " ".join(x for x in (lead or message.role, describe_origin(message) if not lead else "", first) if x)
    cites = " ".join(marker(k) for k in keys)
    room = ENTRY_CHARS - len(cites) - 4
    if len(what) > room:
        what = what[: max(room - 3, 10)] + "..."
    return f"- {what}: {cites}"


def index_entries(messages: Sequence[Message]) -> list[str]:
    """Entries for ``messages``, oldest first: carried entries of earlier summaries and notices, then
    one per message that cites archived content (its recall suffix, or the markers it quotes), each
    naming the tool call that produced it. A summary's or notice's own transcript marker is not an
    entry (its index already lists what it stands for). Distinct by markers; at most ``MAX_ENTRIES``."""
    calls = {c.id: c for m in messages for c in m.tool_calls}
    out: list[str] = []
    seen: set[tuple[str, ...]] = set()

    def add(entry: str, keys: Sequence[str]) -> None:
        key = tuple(keys)
        if key and key not in seen:
            seen.add(key)
            out.append(entry)

    for m in messages:
        for entry in carried_entries(m.content):
            add(entry, extract_keys(entry))
        if m.is_summary:
            continue
        call = calls.get(m.tool_call_id or "")
        if m.is_recall or (call is not None and call.name.strip().lstrip("@").lower().startswith("recall")):
            continue  # a recall result is a copy of an original the index already lists
        _, keys = split_suffix(m.content)
        keys = keys or tuple(extract_keys(_without_index(m.content)))
        if keys:
            add(_entry(m, keys, call), keys)
    return out[-MAX_ENTRIES:]


def index_block(messages: Sequence[Message]) -> str:
    """``\\n\\n[archived originals ...:\\n- ...\\n]`` for ``messages``; empty when none cites an original."""
    entries = index_entries(messages)
    if not entries:
        return ""
    return "\n\n" + INDEX_HEADER + "\n" + "\n".join(entries) + "\n" + INDEX_END
