"""Oversized tool-call arguments: archived and excerpted like a tool result.

A tool call the model made with a huge argument (a whole file passed to ``write_file``) stays in the
history after it ran, in the newest tool chain that truncation never touches, and can keep every
request above a limit. Once the call has been answered (its result is in the history) the model no
longer needs the argument whole: it is archived and replaced by a JSON object that carries the
recall marker and a head + tail excerpt (JSON, so every route can still parse the arguments).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import replace

from contextkit.markers import ArchiveSink, marker
from contextkit.messages import Message

ARCHIVED_FIELD = "archived_arguments"  # the key of an excerpted argument object
HEAD_SHARE = 0.8  # of the excerpt: most of it is the start, where the call's intent is


def is_archived_arguments(arguments: str) -> bool:
    return arguments.startswith('{"' + ARCHIVED_FIELD + '"')


def excerpt_tool_arguments(
    history: Sequence[Message], *, archive: ArchiveSink, max_chars: int
) -> tuple[list[Message], tuple[str, ...]]:
    """Every answered tool call whose arguments exceed ``max_chars`` gets them archived and excerpted
    (at most ``max_chars`` of excerpt); returns the history and the archive keys created."""
    answered = {m.tool_call_id for m in history if m.role == "tool" and m.tool_call_id}
    out, keys = list(history), list[str]()
    for i, m in enumerate(out):
        got = excerpt_call_arguments(m, archive=archive, max_chars=max_chars, answered=answered)
        if got is not None:
            out[i] = got[0]
            keys.extend(got[1])
    return out, tuple(keys)


def excerpt_call_arguments(
    message: Message, *, archive: ArchiveSink, max_chars: int, answered: Collection[str]
) -> tuple[Message, tuple[str, ...]] | None:
    """``message`` with the arguments of its calls in ``answered`` that exceed ``max_chars`` archived
    and excerpted, and the keys created; None when nothing changed."""
    if message.role != "assistant" or not message.tool_calls or message.preserve_verbatim:
        return None
    calls, keys = [], []
    for call in message.tool_calls:
        args = call.arguments
        if call.id not in answered or len(args) <= max_chars or is_archived_arguments(args):
            calls.append(call)
            continue
        key = archive.put(args, kind="tool_arguments", origin={"tool": call.name, "role": "assistant"})
        if key is None:  # the archive refused: leave it whole rather than lose it
            calls.append(call)
            continue
        head = max(0, int(max_chars * HEAD_SHARE))
        tail = max(0, max_chars - head)
        stub = {
            ARCHIVED_FIELD: marker(key),
            "note": f"{len(args):,} characters of arguments to {call.name}, archived after the call ran; "
            f"@recall {marker(key)} brings them back",
            "head": args[:head],
            "tail": args[-tail:] if tail else "",
        }
        calls.append(replace(call, arguments=json.dumps(stub, ensure_ascii=False)))
        keys.append(key)
    if not keys:
        return None
    return replace(message, tool_calls=tuple(calls)), tuple(keys)
