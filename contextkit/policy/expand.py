"""Recursive marker expansion: what a history means once every ``<<ccr:KEY>>`` is replaced.

Used by tests and the "nothing lost" invariant: every original message content must appear verbatim
in the expansion of the compacted history. Markers nest by reference (a dropped-segment transcript
cites stubs that cite originals), so expansion recurses; unknown keys stay as markers.
"""

from __future__ import annotations

import re

from contextkit.markers import MARKER_RE, ArchiveSink, extract_keys


def expand_markers(text: str, archive: ArchiveSink, *, max_depth: int = 20) -> str:
    """Replace every marker with its archived content, recursively, up to ``max_depth`` levels."""
    cache: dict[str, str] = {}

    def expand(t: str, depth: int, stack: tuple[str, ...]) -> str:
        if depth >= max_depth or "<<ccr:" not in t:
            return t

        def sub(match: re.Match[str]) -> str:
            key = match.group(1)
            if key in stack:  # a cycle cannot come from content addressing, but never loop
                return match.group(0)
            if key not in cache:
                stored = archive.get(key)
                if stored is None:
                    return match.group(0)
                cache[key] = expand(stored, depth + 1, (*stack, key))
            return cache[key]

        return MARKER_RE.sub(sub, t)

    return expand(text, 0, ())


def reachable(text: str, archive: ArchiveSink) -> dict[str, str]:
    """Every archived entry reachable from ``text`` through markers (key -> stored content), each
    read once: linear in the archive, where ``expand_markers`` copies a shared entry into every
    place that cites it (chains of summaries citing summaries make that exponential)."""
    found: dict[str, str] = {}
    todo = extract_keys(text)
    while todo:
        key = todo.pop()
        if key in found:
            continue
        stored = archive.get(key)
        if stored is None:
            continue
        found[key] = stored
        todo.extend(k for k in extract_keys(stored) if k not in found)
    return found
