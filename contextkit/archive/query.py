"""Search text as both backends index and query it: tokens, scope-tagged terms, parsed queries (pure).

**Tokens.** Lower-cased (case-folded, diacritics removed) runs of letters and digits, at most
``MAX_TOKEN_CHARS`` each: ``ERR_CONN_4471`` is ``err conn 4471``, ``src/app.py`` is ``src app py``.
Both backends index exactly these tokens, so a query means the same in SQLite and PostgreSQL.

**The scope is part of the index.** Every indexed token is prefixed with a tag of the session id
that wrote it (``scope_tag``): a search in one session looks up that session's own terms, so its
cost follows the session, not the file. Reading a granted scope adds that scope's tag.

**Queries.** ``parse_query`` splits the text at whitespace. A chunk that looks like an identifier
(letters and digits mixed, an internal ``_ . / : - # @ \\ =``, camelCase, a number of three or
more digits; not ALLCAPS alone, which is as often a shouted word or SQL as a constant) becomes a
*required phrase*: every one must match, token for token, in order. The other words are *optional*: they rank (BM25 in SQLite). English
stop words are left out unless nothing else is left. User text never reaches the backends'
query syntax: terms are built from tokens, which hold only letters and digits.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MAX_TOKEN_CHARS = 64
MAX_TERM_CHARS = MAX_TOKEN_CHARS
MAX_TERMS = 32
TAG_CHARS = 12
COMMON_AT = 2_000  # a word in more readable entries than this is "common" in a large scope (see search)

_ASCII_TOKEN_RE = re.compile(r"[a-z0-9]+")
_TOKEN_RE = re.compile(r"[^\W_]+")
_MARKS_RE = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_EDGE_RE = re.compile(r"^[^\w]+|[^\w]+$")
_INNER_SEPARATOR_RE = re.compile(r"[^\W_][_./:\-#@\\=]+[^\W_]|[^\W_]_|_[^\W_]")
_CAMEL_RE = re.compile(r"[a-z][A-Z]")
STOPWORDS = frozenset(
    ["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours"]
)


def fold(text: str) -> str:
    """Lower case without diacritics: what tokens are made of."""
    if text.isascii():
        return text.lower()
    return _MARKS_RE.sub("", unicodedata.normalize("NFKD", text.casefold()))


def tokens(text: str) -> list[str]:
    """The index tokens of ``text``, in order (see the module docstring)."""
    folded = fold(text)
    found = (_ASCII_TOKEN_RE if folded.isascii() else _TOKEN_RE).findall(folded)
    return [t if len(t) <= MAX_TOKEN_CHARS else t[:MAX_TOKEN_CHARS] for t in found]


def scope_tag(session_id: str) -> str:
    """A fixed-width tag of letters and digits for ``session_id`` (its index terms' prefix)."""
    return "s" + hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[: TAG_CHARS - 1]


def tagged(tag: str, text: str) -> str:
    """``text``'s tokens, each prefixed with ``tag``, space-separated: what the SQLite index stores."""
    return " ".join(tag + t for t in tokens(text))


@dataclass(frozen=True)
class Query:
    """A parsed search: phrases that must all match (identifiers) and words that rank."""

    text: str
    required: tuple[tuple[str, ...], ...] = ()
    optional: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.required and not self.optional

    @property
    def precise(self) -> bool:
        """Identifier-like: every required phrase must be in a hit."""
        return bool(self.required)

    def phrases(self) -> list[tuple[str, ...]]:
        return [*self.required, *((w,) for w in self.optional)]

    def words(self) -> list[str]:
        """Every token of the query, for excerpts (required first)."""
        return list(dict.fromkeys([t for p in self.required for t in p] + list(self.optional)))

    def patterns(self) -> list[re.Pattern[str]]:
        """Regular expressions that find the query's phrases in original text (case-insensitive),
        required phrases first: what an excerpt centres on."""
        out = []
        for phrase in self.phrases():
            body = r"[\W_]+".join(re.escape(t) for t in phrase)
            out.append(re.compile(rf"(?<![^\W_]){body}(?![^\W_])", re.IGNORECASE))
        return out

    def without(self, words: Iterable[str]) -> Query:
        gone = set(words)
        return Query(self.text, self.required, tuple(w for w in self.optional if w not in gone))


def looks_like_identifier(chunk: str) -> bool:
    core = _EDGE_RE.sub("", chunk)
    if not core:
        return False
    if _INNER_SEPARATOR_RE.search(core) or _CAMEL_RE.search(core):
        return True
    has_alpha = any(c.isalpha() for c in core)
    has_digit = any(c.isdigit() for c in core)
    if has_alpha and has_digit:
        return True
    return has_digit and not has_alpha and sum(c.isdigit() for c in core) >= 3


def parse_query(text: str) -> Query:
    """Required phrases (identifier-like chunks) and optional words (the rest, stop words left out
    unless nothing else is left); at most ``MAX_TERMS`` terms in all."""
    required: dict[tuple[str, ...], None] = {}
    optional: dict[str, None] = {}
    for chunk in text.split()[: MAX_TERMS * 8]:
        parts = tokens(chunk)
        if not parts:
            continue
        if looks_like_identifier(chunk):
            required.setdefault(tuple(parts[:MAX_TERMS]), None)
        else:
            optional.update(dict.fromkeys(parts))
    phrases = list(required)[:MAX_TERMS]
    words = [w for w in optional if w not in STOPWORDS] or ([] if phrases else list(optional))
    single = {p[0] for p in phrases if len(p) == 1}
    words = [w for w in words if w not in single][: max(0, MAX_TERMS - len(phrases))]
    return Query(text, tuple(phrases), tuple(words))


def split_common(query: Query, count: Callable[[str], int], limit: int = COMMON_AT) -> tuple[Query, tuple[str, ...]]:
    """``(query, common)``: the optional words that occur in more than ``limit`` readable entries
    (``count(word)`` counts up to ``limit + 1``) are taken out when the query still has other terms,
    so a search over a large scope never scores every entry that holds a frequent word."""
    counts = {w: count(w) for w in query.optional}
    common = tuple(w for w, n in counts.items() if n > limit)
    if not common:
        return query, ()
    rest = query.without(common)
    return (rest, common) if not rest.empty else (query, common)
