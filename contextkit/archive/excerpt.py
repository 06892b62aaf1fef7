"""Excerpts around a query's hits: what of one archived original fits an item's share of a pack (pure).

Whole when it fits. Otherwise the lines that hold the query's phrases - the first hit of every
phrase (required phrases first), then further hits - each a line (or, for a line longer than
``LONG_LINE`` characters, a window around the hit), in the order they appear in the original,
joined by ``...`` lines; with no hit at all, the head. The result never exceeds its token budget.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from contextkit.sizing import text_tokens, truncate_to_tokens

CHARS_PER_TOKEN_BOUND = 32  # slicing guard before tokenizing MB-sized contents
LONG_LINE = 320
_AROUND = 120
_MAX_HITS = 40
GAP = "\n...\n"
_MAX_WIDEN = 400
_SAMPLE = 600
_MARGIN = 1.15


def chars_per_token(content: str, at: int = 0) -> float:
    """Characters per token of ``content``, from one sample (counting a whole MB-sized original
    costs more than the pack it goes into): estimates choose what to take, exact counts decide."""
    sample = content[max(0, at - _SAMPLE // 2) : max(0, at - _SAMPLE // 2) + _SAMPLE] or content[:_SAMPLE]
    return max(1.0, len(sample) / max(1, text_tokens(sample))) if sample else 4.0


def estimate(text: str, cpt: float) -> int:
    """Tokens of ``text`` from above (a margin over the sampled rate)."""
    return int(len(text) / cpt * _MARGIN) + 1


def fits(content: str, budget: int, count: Callable[[str], int] = text_tokens) -> int | None:
    """Tokens of ``content`` when it fits in ``budget`` tokens, else None. Counted exactly only when an
    estimate says it may fit, so a large original costs one sample, not a full count."""
    if budget < 1 or len(content) > budget * CHARS_PER_TOKEN_BOUND:
        return None
    if len(content) > budget * 2 and estimate(content, chars_per_token(content)) > budget * 1.5:
        return None
    tokens = count(content)
    return tokens if tokens <= budget else None


def _hits(content: str, patterns: Sequence[re.Pattern[str]]) -> list[tuple[int, int]]:
    """Match spans, round-robin over the patterns (the first of each, then the second of each...)."""
    per = [[m.span() for _, m in zip(range(_MAX_HITS), p.finditer(content), strict=False)] for p in patterns]
    out: list[tuple[int, int]] = []
    for rank in range(max((len(x) for x in per), default=0)):
        out.extend(spans[rank] for spans in per if rank < len(spans))
    return out


def _window(content: str, start: int, end: int) -> tuple[int, int]:
    line_start = content.rfind("\n", 0, start) + 1
    line_end = content.find("\n", end)
    line_end = len(content) if line_end < 0 else line_end
    if line_end - line_start <= LONG_LINE:
        return line_start, line_end
    return max(line_start, start - _AROUND), min(line_end, end + _AROUND)


def _render(content: str, spans: list[tuple[int, int]]) -> str:
    parts = []
    last = 0
    for i, (a, b) in enumerate(spans):
        if i == 0 and a > 0:
            parts.append("...\n")
        elif i > 0:
            parts.append(GAP if a > last + 1 else "\n")
        parts.append(content[a:b])
        last = b
    if spans and last < len(content):
        parts.append("\n...")
    return "".join(parts)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _widen(content: str, spans: list[tuple[int, int]], room: int, cpt: float) -> list[tuple[int, int]]:
    """Grow every window by whole lines, one above and one below in turn, while ``room`` tokens last:
    the hits come with their context instead of leaving the item's share unused."""
    spans = list(spans)
    for _ in range(_MAX_WIDEN):
        grown = False
        for i, (a, b) in enumerate(spans):
            for side in (0, 1):
                if side == 0 and a > 0:
                    start = content.rfind("\n", 0, a - 1) + 1
                    piece, new = content[start:a], (start, b)
                elif side == 1 and b < len(content):
                    stop = content.find("\n", b + 1)
                    stop = len(content) if stop < 0 else stop
                    piece, new = content[b:stop], (a, stop)
                else:
                    continue
                if len(piece) > LONG_LINE * 4:
                    continue
                cost = estimate(piece, cpt)
                if cost > room:
                    continue
                room -= cost
                spans[i] = new
                a, b = new
                grown = True
        spans = _merge(spans)
        if not grown or room <= 0:
            break
    return spans


def excerpt(content: str, patterns: Sequence[re.Pattern[str]], budget: int) -> tuple[str, bool]:
    """``(text, shortened)``: at most ``budget`` tokens of ``content``; see the module docstring."""
    budget = max(budget, 1)
    if fits(content, budget) is not None:
        return content, False
    hits = _hits(content, patterns)
    if not hits:
        head = content[: budget * CHARS_PER_TOKEN_BOUND]
        return truncate_to_tokens(head, budget), True
    cpt = chars_per_token(content, hits[0][0])
    taken: list[tuple[int, int]] = []
    used = 2  # the leading and trailing "..." lines
    for start, end in hits:
        a, b = _window(content, start, end)
        if any(a >= x and b <= y for x, y in taken):
            continue
        cost = estimate(content[a:b], cpt) + 2  # the window and its "..." separator (an estimate from above)
        if used + cost <= budget:
            taken, used = _merge([*taken, (a, b)]), used + cost
        elif not taken:  # even one line is too long: a window around the hit, cut to the budget
            room = max(budget * 3, 16)
            a, b = max(0, start - room // 2), min(len(content), end + room // 2)
            return truncate_to_tokens(_render(content, [(a, b)]), budget), True
    taken = _widen(content, taken, budget - used, cpt)
    text = _render(content, taken)
    if text_tokens(text) > budget:
        text = truncate_to_tokens(text, budget)
    return text, True
