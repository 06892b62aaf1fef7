"""``recall_context``: a bounded, read-only context pack from the archive.

Full-text search is SQLite FTS5 ranked by BM25. User text never reaches FTS syntax: it is split
into words and each word becomes a quoted FTS term, OR-ed together (BM25 ranks documents matching
more and rarer terms first).

Text answer::

    ### contextkit Context
    Items: <n>
    Budget: <only when a ranked match (one of the top max_items) was dropped or shortened to fit max_tokens>
    Reference: <key> | Type: <kind> | Location: <origin>     (one per item)
    Context:
    [1] <<ccr:KEY>>
    <content, possibly shortened>

``used_tokens`` is the tiktoken count of the body after ``Context:`` (the part ``max_tokens`` bounds);
it is always ``<= max_tokens``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Protocol

from contextkit.archive._db import SearchHit
from contextkit.errors import RecallValidationError
from contextkit.markers import marker
from contextkit.sizing import text_tokens, truncate_to_tokens


class Searchable(Protocol):
    """What a recall pack needs of an archive (``Archive`` is one); keeps this module below ``store``."""

    def get(self, key: str) -> str | None: ...

    def search(self, fts_query: str, limit: int) -> list[SearchHit]: ...


HEADER = "### contextkit Context"
NO_MATCH = "No matching archived context was found."
MAX_ITEMS_RANGE = (1, 50)
MAX_TOKENS_RANGE = (1, 12_000)
MAX_TERMS = 32
MAX_TERM_CHARS = 64
_WORD_RE = re.compile(r"\w+", re.UNICODE)
_CHARS_PER_TOKEN_BOUND = 32  # slicing guard before tokenizing MB-sized contents
_LEAD_IN_CHARS = 200
_MIN_PARTIAL_TOKENS = 8


@dataclass(frozen=True)
class ContextItem:
    key: str
    kind: str
    origin: str
    score: float
    tokens: int
    shortened: bool


@dataclass(frozen=True)
class RecallContext:
    """The structured answer: ``text`` as sent to the model plus what went into it."""

    text: str
    used_items: int
    used_tokens: int
    items: tuple[ContextItem, ...]
    matched: int = 0
    dropped: int = 0
    shortened: int = 0


def recall_context_tool_schema() -> dict[str, Any]:
    """OpenAI function-calling schema of the ``recall_context`` tool."""
    return {
        "type": "function",
        "function": {
            "name": "recall_context",
            "description": (
                "Search everything archived from this conversation (removed or shortened earlier) and return a "
                "bounded, ranked context pack. Each item names a <<ccr:KEY>> you can pass to recall for the full text."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to search for (plain text, no operators)."},
                    "max_items": {"type": "integer", "minimum": 1, "maximum": 50, "default": 8},
                    "max_tokens": {"type": "integer", "minimum": 1, "maximum": 12000, "default": 1500},
                },
                "required": ["query"],
            },
        },
    }


def _check_int(name: str, value: object, bounds: tuple[int, int]) -> int:
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RecallValidationError(f"{name} must be a whole number from {low} to {high:,}, got {value!r}")
    return value


def validate(query: object, max_items: object, max_tokens: object) -> tuple[str, int, int]:
    if not isinstance(query, str) or not query.strip():
        raise RecallValidationError(
            f"query must be non-empty text (words to search for), got {query!r}; max_items is 1 to 50, "
            "max_tokens is 1 to 12,000"
        )
    return (
        query,
        _check_int("max_items", max_items, MAX_ITEMS_RANGE),
        _check_int("max_tokens", max_tokens, MAX_TOKENS_RANGE),
    )


def query_terms(query: str) -> list[str]:
    """Distinct lower-cased words of ``query`` (at most MAX_TERMS, each at most MAX_TERM_CHARS)."""
    words = (w.lower()[:MAX_TERM_CHARS] for w in _WORD_RE.findall(query.replace("_", " ")))
    return list(dict.fromkeys(w for w in words if w))[:MAX_TERMS]


def fts_query(terms: list[str]) -> str:
    """Quoted FTS5 terms OR-ed together; words contain no quotes, so nothing is FTS syntax."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _excerpt(content: str, terms: list[str], budget: int) -> tuple[str, bool]:
    """Up to ``budget`` tokens of ``content`` starting near the first match; (text, shortened)."""
    start = 0
    match = re.compile("|".join(re.escape(t) for t in terms), re.IGNORECASE).search(content) if terms else None
    first = match.start() if match else 0
    if first > _LEAD_IN_CHARS:
        line_start = content.rfind("\n", 0, first - _LEAD_IN_CHARS // 2) + 1
        start = line_start if first - line_start <= _LEAD_IN_CHARS * 4 else first - _LEAD_IN_CHARS // 2
    window = content[start : start + budget * _CHARS_PER_TOKEN_BOUND + 1]
    shortened = start > 0 or len(window) < len(content) - start
    prefix = "..." if start > 0 else ""
    text = prefix + window
    if text_tokens(text) > budget:
        text = truncate_to_tokens(text, budget)
        shortened = True
    return text, shortened


def _section(index: int, key: str, body: str) -> str:
    return f"[{index}] {marker(key)}\n{body}"


def _build(archive: Searchable, hits: list[SearchHit], terms: list[str], max_tokens: int) -> RecallContext:
    sections: list[str] = []
    items: list[ContextItem] = []
    remaining = max_tokens
    for hit in hits:
        original = archive.get(hit.key)
        if original is None:
            continue
        # the pack is for a model: valid text only (lone surrogates become U+FFFD)
        content = original.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        separator = 1 if sections else 0  # "\n\n" between sections is about one token
        room = remaining - separator - text_tokens(_section(len(sections) + 1, hit.key, ""))
        if sections and room < _MIN_PARTIAL_TOKENS:
            break
        body, shortened = _excerpt(content, terms, max(room, 1))
        section = _section(len(sections) + 1, hit.key, body)
        cost = text_tokens(section) + separator
        if cost > remaining:  # even the item header does not fit: cut the section itself
            section = truncate_to_tokens(section, max(remaining - separator, 0))
            shortened = True
            cost = text_tokens(section) + separator
        if not section.strip():
            break
        sections.append(section)
        items.append(ContextItem(hit.key, hit.kind, hit.origin, hit.score, cost, shortened))
        remaining -= cost
        if remaining <= 0:
            break
    body = "\n\n".join(sections)
    used = text_tokens(body)
    if used > max_tokens:  # token merges across section joins: cut the whole body to be exact
        body = truncate_to_tokens(body, max_tokens)
        used = text_tokens(body)
        if items:
            items[-1] = replace(items[-1], shortened=True)
    dropped = len(hits) - len(items)
    cut = sum(1 for item in items if item.shortened)
    lines = [HEADER, f"Items: {len(items)}"]
    if dropped or cut:
        notes = []
        if cut:
            notes.append(f"{cut} item{'s' if cut != 1 else ''} shortened")
        if dropped:
            notes.append(f"{dropped} matching item{'s' if dropped != 1 else ''} dropped")
        lines.append(
            f"Budget: {used}/{max_tokens} tokens used; {' and '.join(notes)} to fit max_tokens"
            " - recall a Reference for its full text"
        )
    lines.extend(f"Reference: {i.key} | Type: {i.kind} | Location: {i.origin}" for i in items)
    lines.append("Context:")
    text = "\n".join(lines) + "\n" + body
    return RecallContext(text, len(items), used, tuple(items), len(hits), dropped, cut)


def recall_context(archive: Searchable, query: str, *, max_items: int = 8, max_tokens: int = 1500) -> RecallContext:
    """Ranked FTS5 search of ``archive`` bounded by ``max_items`` and ``max_tokens``; read-only."""
    query, max_items, max_tokens = validate(query, max_items, max_tokens)
    terms = query_terms(query)
    hits = archive.search(fts_query(terms), max_items) if terms else []
    if not hits:
        return RecallContext(NO_MATCH, 0, 0, ())
    return _build(archive, hits, terms, max_tokens)
