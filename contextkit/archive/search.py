"""``recall_context``: a bounded, read-only context pack from the archive.

The query is parsed by ``archive.query``: identifier-like chunks (``ERR_CONN_4471``,
``src/app.py``, ``port 8443``'s number) must all match, token for token; other words rank (BM25
in SQLite). User text never reaches a query syntax. The ``max_tokens`` budget is **shared** by
the items: each gets an equal share, an item that needs less gives the rest to the others, and
each item is excerpted around its hits (``archive.excerpt``). When the budget cannot give every
ranked match a useful share, the lowest-ranked are dropped and named.

Text answer::

    ### contextkit Context
    Items: <n>
    Budget: <only when a ranked match (one of the top max_items) was dropped or shortened to fit max_tokens>
    Dropped: <key> | Type: <kind> | Location: <origin>      (one per dropped match)
    Reference: <key> | Type: <kind> | Location: <origin>     (one per item)
    Context:
    [1] <<ccr:KEY>>
    <content, or excerpts of it joined by "..." lines>

``used_tokens`` is the tiktoken count of the body after ``Context:`` (the part ``max_tokens`` bounds);
it is always ``<= max_tokens``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Protocol

from contextkit.archive.excerpt import excerpt, fits
from contextkit.archive.query import MAX_TERM_CHARS, MAX_TERMS, Query, parse_query
from contextkit.archive.records import SearchHit
from contextkit.errors import RecallValidationError
from contextkit.markers import marker
from contextkit.sizing import text_tokens, truncate_to_tokens

__all__ = ["ContextItem", "RecallContext", "recall_context", "recall_context_tool_schema"]


class Searchable(Protocol):
    """What a recall pack needs of an archive (``Archive`` is one); keeps this module below ``store``."""

    def get(self, key: str) -> str | None: ...

    def find(self, query: Query, limit: int) -> list[SearchHit]: ...


HEADER = "### contextkit Context"
NO_MATCH = "No matching archived context was found."
MAX_ITEMS_RANGE = (1, 50)
MAX_TOKENS_RANGE = (1, 12_000)
MIN_ITEM_TOKENS = 24  # below this share an item says too little: drop the lowest-ranked instead
_WORD_RE = re.compile(r"\w+", re.UNICODE)


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
    dropped_keys: tuple[str, ...] = ()


def recall_context_tool_schema() -> dict[str, Any]:
    """OpenAI function-calling schema of the ``recall_context`` tool."""
    return {
        "type": "function",
        "function": {
            "name": "recall_context",
            "description": (
                "Search everything archived from this conversation (removed or shortened earlier) and return a "
                "bounded, ranked context pack. Identifiers (error codes, paths, ids, numbers) must all match "
                "exactly; other words rank. Each item names a <<ccr:KEY>> you can pass to recall for the full text."
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
    """Quoted terms OR-ed together. Kept for callers of ``Archive.search`` written when it took an
    FTS5 expression: ``search`` now reads plain text, and reads this text as the same words."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _section(index: int, key: str, body: str) -> str:
    return f"[{index}] {marker(key)}\n{body}"


def _shares(needs: list[int | None], available: int) -> list[int]:
    """Water-filling: each item an equal share of ``available``; one that needs less (``needs[i]``
    tokens, None = more than any share) leaves the rest to the others."""
    shares = [0] * len(needs)
    pending = sorted(range(len(needs)), key=lambda i: (needs[i] is None, needs[i] or 0))
    remaining = available
    for n, i in enumerate(pending):
        share = remaining // (len(pending) - n)
        need = needs[i]
        shares[i] = share if need is None else min(need, share)
        remaining -= shares[i]
    return shares


def _build(archive: Searchable, hits: list[SearchHit], query: Query, max_tokens: int) -> RecallContext:
    found = [(hit, content) for hit in hits if (content := archive.get(hit.key)) is not None]
    # the pack is for a model: valid text only (lone surrogates become U+FFFD)
    found = [(hit, c.encode("utf-8", "surrogatepass").decode("utf-8", "replace")) for hit, c in found]
    # every header is "[i] <<ccr:16 hex>>\n": count one per width of i, not one per item
    header_of: dict[int, int] = {}
    for i, (hit, _) in enumerate(found):
        width = len(str(i + 1))
        if width not in header_of:
            header_of[width] = text_tokens(_section(i + 1, hit.key, ""))
    headers = [header_of[len(str(i + 1))] + (1 if i else 0) for i in range(len(found))]
    keep = len(found)
    while keep > 1 and sum(headers[:keep]) + keep * MIN_ITEM_TOKENS > max_tokens:
        keep -= 1
    available = max_tokens - sum(headers[:keep])
    needs = [fits(content, max(available, 0)) for _, content in found[:keep]]
    shares = _shares(needs, max(available, 0))
    patterns = query.patterns()
    sections: list[str] = []
    items: list[ContextItem] = []
    for i, ((hit, content), share) in enumerate(zip(found[:keep], shares, strict=True)):
        body, shortened = excerpt(content, patterns, share) if share > 0 else ("", True)
        section = _section(i + 1, hit.key, body)
        cost = text_tokens(section) + (1 if i else 0)
        if i == 0 and cost > max_tokens:  # even the item header does not fit: cut the section itself
            section, shortened = truncate_to_tokens(section, max_tokens), True
            cost = text_tokens(section)
        if not section.strip():
            break
        sections.append(section)
        items.append(ContextItem(hit.key, hit.kind, hit.origin, hit.score, cost, shortened))
    body = "\n\n".join(sections)
    used = text_tokens(body)
    while used > max_tokens and len(sections) > 1:  # token merges across joins: cut the last section
        last = sections.pop()
        room = max_tokens - text_tokens("\n\n".join(sections)) - 1
        if room > text_tokens(_section(len(sections) + 1, items[-1].key, "")):
            sections.append(truncate_to_tokens(last, room))
            items[-1] = replace(items[-1], shortened=True)
        else:
            items.pop()
        body = "\n\n".join(sections)
        used = text_tokens(body)
    if used > max_tokens:
        body = truncate_to_tokens(body, max_tokens)
        used = text_tokens(body)
        if items:
            items[-1] = replace(items[-1], shortened=True)
    used_keys = {item.key for item in items}
    dropped_hits = [hit for hit, _ in found if hit.key not in used_keys]
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
            " - recall a Reference (or a Dropped key) for its full text"
        )
        lines.extend(f"Dropped: {h.key} | Type: {h.kind} | Location: {h.origin}" for h in dropped_hits)
    lines.extend(f"Reference: {i.key} | Type: {i.kind} | Location: {i.origin}" for i in items)
    lines.append("Context:")
    text = "\n".join(lines) + "\n" + body
    return RecallContext(text, len(items), used, tuple(items), len(hits), dropped, cut,
                         tuple(h.key for h in dropped_hits))  # fmt: skip


def recall_context(archive: Searchable, query: str, *, max_items: int = 8, max_tokens: int = 1500) -> RecallContext:
    """Ranked search of ``archive`` bounded by ``max_items`` and ``max_tokens``; read-only."""
    query, max_items, max_tokens = validate(query, max_items, max_tokens)
    parsed = parse_query(query)
    hits = archive.find(parsed, max_items) if not parsed.empty else []
    if not hits:
        return RecallContext(NO_MATCH, 0, 0, ())
    return _build(archive, hits, parsed, max_tokens)
