"""Recall pages: an archived original larger than what the request can hold is delivered in pages.

A page is a range of whole lines (1-based, inclusive), or a range of characters when one line alone
is larger than a page (minified JSON, a base64 image). Every page ends with one line that says which
range it is and how to get the next one, in both forms the model can use::

    [page of <<ccr:K>>: lines 1-180 of 5000. Next page: recall(key="<<ccr:K>>", start_line=181) or @recall <<ccr:K>> lines 181-360]

The footer is always preceded by one newline of its own: the page's text is everything before
``"\n[page of "`` on its last line. A ``query`` instead of a range returns only the numbered lines
that contain every word of it (a search inside the original), with a footer that counts them. Sizes are wire bytes of the page text inside a JSON string
(UTF-8, escapes included), so a page of ``max_bytes`` adds at most that much to the request.
Pure functions, no storage.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from contextkit.markers import marker

MIN_PAGE_BYTES = 1_000
_FOOTER_ROOM = 240  # bytes kept free for the footer line
# "@recall <<ccr:K>> lines 181-360", "lines 181-", "line 5", "chars 8001-16000", "chars=1..500"
RANGE_RE = re.compile(r"(lines?|chars?)\s*[:=]?\s*(\d+)(?:\s*(-|\u2013|to\b|\.\.)\s*(\d+)?)?", re.IGNORECASE)


@dataclass(frozen=True)
class PageRequest:
    """What the model asked for; ``None`` bounds mean "from the start" / "as far as fits"."""

    start_line: int | None = None
    end_line: int | None = None
    start_char: int | None = None
    end_char: int | None = None
    query: str | None = None  # only the lines that contain every word of it

    @property
    def ranged(self) -> bool:
        return any(v is not None for v in (self.start_line, self.end_line, self.start_char, self.end_char))

    def problem(self) -> str | None:
        """Why the request cannot be served, or None."""
        lines = self.start_line is not None or self.end_line is not None
        chars = self.start_char is not None or self.end_char is not None
        if lines and chars:
            return "pass either start_line/end_line or start_char/end_char, not both"
        if self.query is not None:
            if not isinstance(self.query, str) or not self.query.split():
                return f"query must be a non-empty string of words, got {self.query!r}"
            if lines or chars:
                return "pass either a query or a range, not both (a query returns numbered lines: read around one with a range)"
        for name in ("start_line", "end_line", "start_char", "end_char"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                return f"{name} must be a whole number >= 1 (1-based), got {value!r}"
        for lo, hi in (("start_line", "end_line"), ("start_char", "end_char")):
            a, b = getattr(self, lo), getattr(self, hi)
            if a is not None and b is not None and b < a:
                return f"{hi} ({b}) is before {lo} ({a}); ranges are 1-based and inclusive"
        return None


@dataclass(frozen=True)
class Page:
    text: str  # the page, footer included (or the whole original when ``complete``)
    complete: bool  # the whole original, byte-exact, no footer


def wire_cost(text: str) -> int:
    """Bytes ``text`` takes inside a JSON string as the OpenAI SDK sends it."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2


def page_of(content: str, key: str, request: PageRequest, max_bytes: int | None) -> Page:
    """The page of ``content`` (archived under ``key``) that ``request`` asks for, within ``max_bytes``."""
    if request.query is not None:
        room = None if max_bytes is None else max(MIN_PAGE_BYTES, max_bytes) - _FOOTER_ROOM
        return _query_page(content, key, request.query, room)
    if not request.ranged and (max_bytes is None or wire_cost(content) <= max_bytes):
        return Page(content, True)
    room = None if max_bytes is None else max(MIN_PAGE_BYTES, max_bytes) - _FOOTER_ROOM
    if request.start_char is not None or request.end_char is not None:
        start = (request.start_char or 1) - 1
        return _char_page(content, key, start, request.end_char, room)
    return _line_page(content, key, request.start_line or 1, request.end_line, room)


def _line_page(content: str, key: str, first: int, last: int | None, room: int | None) -> Page:
    lines = content.splitlines(keepends=True) or [""]
    total = len(lines)
    if first > total:
        return Page(f"[{marker(key)} has {total} lines; start_line={first} is past its end]", False)
    end = min(last or total, total)
    used = 0
    taken = first - 1
    while taken < end:
        cost = wire_cost(lines[taken])
        if room is not None and used + cost > room:
            break
        used += cost
        taken += 1
    if taken == first - 1:  # the first line alone is larger than a page: page it by characters
        offset = sum(len(line) for line in lines[: first - 1])
        return _char_page(content, key, offset, offset + len(lines[first - 1]), room, line=first)
    body = "".join(lines[first - 1 : taken])
    where = f"lines {first}-{taken} of {total}"
    if taken >= total:
        return Page(_with_footer(body, f"[page of {marker(key)}: {where} - end of the archived original]"), False)
    if last is not None and taken >= last:
        nxt = f'more: recall(key="{marker(key)}", start_line={taken + 1}) or @recall {marker(key)} lines {taken + 1}-'
        return Page(_with_footer(body, f"[page of {marker(key)}: {where} as asked. For {nxt}]"), False)
    size = taken - first + 1
    nxt = (
        f'Next page: recall(key="{marker(key)}", start_line={taken + 1}) or '
        f"@recall {marker(key)} lines {taken + 1}-{min(total, taken + size)}"
    )
    return Page(_with_footer(body, f"[page of {marker(key)}: {where}. {nxt}]"), False)


def _char_page(
    content: str, key: str, start: int, end_char: int | None, room: int | None, *, line: int | None = None
) -> Page:
    total = len(content)
    if start >= total:
        return Page(f"[{marker(key)} has {total} characters; start_char={start + 1} is past its end]", False)
    stop = min(end_char if end_char is not None else total, total)
    if room is not None:
        stop = start + _fitting_prefix(content[start:stop], room)
        stop = max(stop, start + 1)
    body = content[start:stop]
    where = f"chars {start + 1}-{stop} of {total}" + (f" (line {line} alone is longer than a page)" if line else "")
    if stop >= total:
        return Page(_with_footer(body, f"[page of {marker(key)}: {where} - end of the archived original]"), False)
    span = stop - start
    nxt = (
        f'Next page: recall(key="{marker(key)}", start_char={stop + 1}) or '
        f"@recall {marker(key)} chars {stop + 1}-{min(total, stop + span)}"
    )
    return Page(_with_footer(body, f"[page of {marker(key)}: {where}. {nxt}]"), False)


def _fitting_prefix(text: str, room: int) -> int:
    """Length of the longest prefix of ``text`` whose wire cost is at most ``room``."""
    if wire_cost(text) <= room:
        return len(text)
    lo, hi = 0, min(len(text), room)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if wire_cost(text[:mid]) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _query_page(content: str, key: str, query: str, room: int | None) -> Page:
    """The numbered lines of ``content`` that contain every word of ``query`` (case-insensitive), as
    many as fit ``room``: a search inside one original instead of reading it page by page."""
    words = query.lower().split()
    lines = content.splitlines()
    hits = [(n, line) for n, line in enumerate(lines, 1) if all(w in line.lower() for w in words)]
    if not hits:
        return Page(f"[no line of {marker(key)} contains {query!r} ({len(lines)} lines); recall it without a query to read it]", False)
    body: list[str] = []
    used = shown = 0
    for n, line in hits:
        text = f"{n:>5}| {line}\n"
        if room is not None and body and used + wire_cost(text) > room:
            break
        body.append(text)
        used += wire_cost(text)
        shown += 1
    more = f" (the first {shown})" if shown < len(hits) else ""
    footer = (f"[lines of {marker(key)} containing {query!r}: {len(hits)} of {len(lines)}{more}; "
              "recall a line range of it to read around one]")  # fmt: skip
    return Page(_with_footer("".join(body).rstrip("\n"), footer), False)


def _with_footer(body: str, footer: str) -> str:
    # always one newline of our own before the footer, so a reader can cut it off exactly
    return body + "\n" + footer


def request_from_text(text: str) -> PageRequest:
    """A range written after an in-text ``@recall <<ccr:K>>``: ``lines 181-360``, ``chars 8001-``."""
    match = RANGE_RE.match(text.strip())
    if not match:
        return PageRequest()
    lo = int(match.group(2))
    hi = int(match.group(4)) if match.group(4) else (None if match.group(3) else lo)  # "line 5" is 5-5
    if match.group(1).lower().startswith("line"):
        return PageRequest(start_line=lo, end_line=hi)
    return PageRequest(start_char=lo, end_char=hi)
