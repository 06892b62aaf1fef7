"""A newest message too big to send whole: one rule whatever binds (a learned or
configured payload cap, or the context window).

The message is archived verbatim and replaced by a head + tail excerpt that opens with a notice: how
big the original was, what it was too big for, which lines are shown, and how the model reads the
rest with the ``recall`` tool (``key`` plus ``start_line`` / ``end_line``, or ``start_char`` /
``end_char`` for one huge line). The excerpt ends with the usual recall suffix, so later phases
treat it as a derived stub and never archive it again.
"""

from __future__ import annotations

from dataclasses import replace

from contextkit.markers import ArchiveSink, recall_suffix
from contextkit.messages import Message
from contextkit.policy._common import archive_original, head_at_line, origin_of, split_suffix, tail_at_line
from contextkit.sizing import format_size

EXCERPT_TAG = "[MESSAGE TOO LARGE TO SEND WHOLE"
EXCERPT_MIN_CHARS = 1_500  # the smallest excerpt worth sending: below this the task itself is lost
_PAGE_LINES = 200
_PAGE_CHARS = 8_000


def is_excerpt(message: Message) -> bool:
    return message.content.startswith(EXCERPT_TAG)


def original_of(message: Message, archive: ArchiveSink) -> Message:
    """The message an excerpt was cut from (itself when it is not an excerpt or the archive lost it)."""
    if not is_excerpt(message):
        return message
    keys = message.archive_keys
    original = archive.get(keys[0]) if keys else None
    return replace(message, content=original) if original is not None else message


def excerpt_message(
    message: Message, *, max_chars: int, archive: ArchiveSink, too_big_for: str
) -> tuple[Message, tuple[str, ...]] | None:
    """``(excerpt, keys newly archived)``, or None when the message already fits ``max_chars`` or
    the archive refused (then it must stay whole)."""
    if len(message.content) <= max_chars:
        return None
    got = archive_original(archive, message.content, kind="message", origin=origin_of(message, reason="too large"))
    if got is None:
        return None
    keys, new_keys = got
    key = keys[0]
    body, _ = split_suffix(message.content)
    lines = body.count("\n") + 1
    size = format_size(len(body.encode("utf-8", "surrogatepass")))
    suffix = recall_suffix(keys)
    # the header's length barely depends on the numbers in it: size the cut with a provisional one
    provisional = _header(size, lines, too_big_for, key, (lines, lines, lines))
    room = max(EXCERPT_MIN_CHARS, max_chars) - len(provisional) - len(suffix) - 64
    room = max(room, EXCERPT_MIN_CHARS // 2)
    head = head_at_line(body, room * 2 // 3)
    tail = tail_at_line(body, room - len(head))
    if len(head) + len(tail) >= len(body):
        return None
    head_last = head.count("\n") + (0 if head.endswith("\n") else 1)
    tail_first = lines - tail.count("\n")
    omitted = len(body) - len(head) - len(tail)
    if lines < 3:  # one huge line: line numbers would say nothing
        header = (
            f"{EXCERPT_TAG}: the original is {size} on {lines} line{'s' if lines > 1 else ''}, too large for "
            f"{too_big_for}. "
            f"It is archived as <<ccr:{key}>>. Shown below: its first {len(head):,} and last {len(tail):,} "
            f'characters. To read the omitted characters, call recall with key "{key}" and a character range, '
            f"e.g. start_char={len(head) + 1}, end_char={len(head) + _PAGE_CHARS}, and page on from there.]"
        )
        gap = f"... [{omitted:,} chars omitted] ..."
    else:
        header = _header(size, lines, too_big_for, key, (head_last, tail_first, lines))
        gap = f"... [lines {head_last + 1}-{max(head_last + 1, tail_first - 1)} omitted: {omitted:,} chars] ..."
    text = f"{header}\n{head.rstrip(chr(10))}\n{gap}\n{tail}{suffix}"
    return replace(message, content=text, preserve_verbatim=False), new_keys


def _header(size: str, lines: int, too_big_for: str, key: str, shown: tuple[int, int, int]) -> str:
    head_last, tail_first, total = shown
    first_missing = head_last + 1
    return (
        f"{EXCERPT_TAG}: the original is {size} ({total:,} lines), too large for {too_big_for}. It is archived as "
        f"<<ccr:{key}>>. Shown below: lines 1-{head_last} and {tail_first}-{total}. To read the omitted lines, "
        f'call recall with key "{key}" and a line range, e.g. start_line={first_missing}, '
        f"end_line={first_missing + _PAGE_LINES - 1}, and page on from there.]"
    )
