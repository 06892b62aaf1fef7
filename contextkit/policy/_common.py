"""Shared helpers for the policies: cutting text at line boundaries, type detection, archiving.

Archiving rule (nothing is ever dropped without being archived first, and markers survive every
later phase): before a policy shortens or removes content it calls
``archive_original``. Content that ends with a recall suffix is a stub *derived* from archived
originals: its suffix keys are carried forward and nothing is archived again. Any other content is
archived verbatim, with ``allow_markers=True`` when it quotes markers, so nothing is ever lost.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from contextkit.markers import MARKER_RE, ArchiveSink, has_marker, recall_suffix
from contextkit.messages import Message
from contextkit.sizing import format_size

TRUNCATED_SEP = "\n... [truncated] ...\n"
# our stubs always end with exactly this shape; it is how a derived stub is recognised
_SUFFIX_RE = re.compile(r"\n\[full content recoverable via @recall ((?:<<ccr:[0-9a-f]{16}>> ?)+)\]\Z")


_SUFFIX_HEAD = "\n[full content recoverable via @recall "


def _suffix(content: str) -> re.Match[str] | None:
    # Only the last occurrence of the suffix's head can start a suffix that runs to the end (what
    # follows it is markers and "]"), so it is tried alone: a regular-expression search would try
    # every line of every old output on every request.
    if not content.endswith("]"):
        return None
    at = content.rfind(_SUFFIX_HEAD)
    return _SUFFIX_RE.match(content, at) if at >= 0 else None


def split_suffix(content: str) -> tuple[str, tuple[str, ...]]:
    """``(body, keys)`` of content ending with a recall suffix; ``(content, ())`` otherwise."""
    match = _suffix(content)
    if not match:
        return content, ()
    return content[: match.start()], tuple(dict.fromkeys(MARKER_RE.findall(match.group(1))))


def is_derived(content: str) -> bool:
    return _suffix(content) is not None


def origin_of(message: Message, **extra: Any) -> dict[str, object]:
    """Archive origin record (role, tool, path, lines) without None values."""
    record: dict[str, object] = {"role": message.role}
    if message.origin is not None:
        o = message.origin
        for name, value in (("tool", o.tool), ("path", o.path), ("line_start", o.line_start), ("line_end", o.line_end)):
            if value is not None:
                record[name] = value
    if message.tool_call_id:
        record["tool_call_id"] = message.tool_call_id
    record.update({k: v for k, v in extra.items() if v is not None})
    return record


def archive_original(
    archive: ArchiveSink, content: str, *, kind: str, origin: Mapping[str, object] | None = None
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """Make ``content`` recoverable. Returns ``(keys to cite, keys newly archived)``.

    A stub whose suffix cites keys the archive does not hold (a pasted or foreign suffix) is not
    trusted as derived: it is archived like any other content.

    None means the archive refused: the caller must then leave the content untouched.
    """
    body, carried = split_suffix(content)
    if carried:
        originals = [archive.get(k) for k in carried]
        if all(o is not None for o in originals) and _derivable(body, [o for o in originals if o is not None]):
            return carried, ()
    key = archive.put(content, kind=kind, origin=dict(origin) if origin else None, allow_markers=has_marker(content))
    if key is None:
        return None
    return (key,), (key,)


# lines our stubs add around copied text: banners such as "[... 6540 chars omitted ...]",
# "... [123 chars omitted for context efficiency] ...", "[Old tool result cleared - ...]"
_TEMPLATE_LINE = re.compile(r"^(?:\.\.\. )?\[.*\](?: \.\.\.)?$")


def _derivable(body: str, originals: Sequence[str]) -> bool:
    """True when every non-template line of ``body`` was copied from one of ``originals``.

    A suffix alone does not make content a stub: text that merely ends with a copied recall suffix
    (an agent reading notes that quote a marker) carries new lines and must be archived itself.
    """
    for line in body.splitlines():
        text = line.strip()
        if text and not _TEMPLATE_LINE.match(text) and not any(text in original for original in originals):
            return False
    return True


DOWNGRADE_PREFIX = "[recalled original - tool result {id}, kept verbatim through compaction]\n"


def tool_result_as_user(message: Message) -> Message:
    """A verbatim tool result re-attached after its call was summarized or dropped becomes a user
    message, else pairing repair would delete it as an orphan. It is ``synthetic``: the user did not
    write it, so it never stands in for the task (``newest_request_index``) on a later pass."""
    if message.role != "tool" and not message.tool_call_id:
        return message
    prefix = DOWNGRADE_PREFIX.format(id=message.tool_call_id) if message.tool_call_id else ""
    return message.evolve(
        role="user",
        content=prefix + message.content,
        tool_call_id=None,
        name=None,
        preserve_verbatim=True,
        synthetic=True,
    )


def with_suffix(stub: str, keys: Sequence[str]) -> str:
    """``stub`` + the recall suffix for ``keys`` (keys already cited in the stub are not repeated)."""
    return stub + recall_suffix(k for k in keys if f"<<ccr:{k}>>" not in stub)


# text cutting ---------------------------------------------------------------------------------


def head_at_line(text: str, n: int) -> str:
    """First ``n`` chars, cut back to just after the last newline when that is past ``n/2``."""
    if n <= 0:
        return ""
    head = text[:n]
    nl = head.rfind("\n")
    if nl > n // 2:
        head = head[: nl + 1]
    return head


def tail_at_line(text: str, n: int) -> str:
    """Last ``n`` chars, dropping a partial first line when its newline is in the first half."""
    if n <= 0:
        return ""
    tail = text[-n:]
    nl = tail.find("\n")
    if 0 < nl < n // 2:
        tail = tail[nl + 1 :]
    return tail


def end_preserving(text: str, max_len: int) -> str:
    """Ladder truncation: head ``max_len*3/4`` + ``\\n... [truncated] ...\\n`` + tail ``max_len-head-50``."""
    if len(text) <= max_len:
        return text
    head = max_len * 3 // 4
    tail = max(0, max_len - head - 50)
    return text[:head] + TRUNCATED_SEP + (text[-tail:] if tail else "")


def structure_preserving(text: str, target: int) -> str:
    """Shrink cut: head 2/3 + ``... [N chars omitted for context efficiency] ...`` + tail 1/3, about ``target`` chars."""
    if len(text) <= target:
        return text
    keep = max(0, target - 56)
    head = keep * 2 // 3
    tail = keep - head
    omitted = len(text) - head - tail
    return (
        text[:head]
        + f"\n\n... [{omitted} chars omitted for context efficiency] ...\n\n"
        + (text[-tail:] if tail else "")
    )


def count_lines(text: str) -> int:
    return text.count("\n") + 1


def detect_type(text: str) -> str:
    """Content type for one-line stubs (first match wins): JSON, Go/Python/JS source, diff, git log, text."""
    t = text.strip()
    if t.startswith(("{", "[")):
        return "JSON"
    first = t[:200]
    if "package " in first:
        return "Go source"
    if "import " in first:
        return "source code"
    if "def " in first:
        return "Python source"
    if "function " in first:
        return "JavaScript source"
    if t.startswith(("diff ", "--- ")):
        return "diff"
    if t.startswith("commit "):
        return "git log"
    return "text"


def describe_origin(message: Message) -> str:
    """``read_file a.py:1-40`` style description of where a message came from ('' if unknown)."""
    if message.origin is not None:
        return message.origin.describe()
    return message.name or ""


def fmt_chars(n: int) -> str:
    return format_size(max(0, n))


def cap_end_preserving(
    message: Message, cap: int, archive: ArchiveSink, *, kind: str = "message"
) -> tuple[Message, tuple[str, ...]] | None:
    """Archive then cut ``message`` end-preserving so that content + recall suffix fit ``cap`` chars.

    None when the message already fits or the archive refused. Returns the new message and the keys
    newly archived.
    """
    if len(message.content) <= cap:
        return None
    got = archive_original(archive, message.content, kind=kind, origin=origin_of(message))
    if got is None:
        return None
    keys, new_keys = got
    body, _ = split_suffix(message.content)
    room = max(0, cap - len(recall_suffix(keys)))
    cut = end_preserving(body, room) if len(body) > room else body
    return message.with_content(with_suffix(cut, keys)), new_keys
