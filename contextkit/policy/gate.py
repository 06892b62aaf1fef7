"""The quality gate of a summary: what of a summarizer model's answer may replace the segment.

Pure: text in, a verdict out.

``screen_summary`` is the gate the compactor applies. It refuses an answer that is not notes at all
(empty, a refusal, error text, nothing but ``<<ccr:KEY>>`` markers, a marker the archive does not
hold). A small model that writes good notes and adds one invented ticket id, port or file name loses
the sentences or clauses that name it, not the whole answer: every identifier of the prose is checked
against the segment (``ledger.ungrounded``) and what names an invented one is dropped and counted.
What is left must still be notes - ``PROSE_FLOOR`` characters besides section headers (the identifier
ledger carries the facts; the prose only has to say what happened) - and smaller than what it
replaces; an answer reduced to nothing is refused like any other. ``passes_gate`` is the same gate
without the repair: any invented identifier refuses the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contextkit.markers import ArchiveSink, extract_keys, marker
from contextkit.policy import ledger as ids

PROSE_FLOOR = 24  # characters of prose besides headers (the first version asked for 80 and refused most)

_REFUSALS = ("i'm sorry", "i am sorry", "i cannot", "i can't", "as an ai", "sorry", "não posso", "desculpe")
_ERROR_STARTS = (
    "error:",
    "error ",
    "traceback (most recent call last)",
    "exception:",
    "an error occurred",
    "internal server error",
    '{"error"',
    "litellm.",
)
_ERROR_LINE_RE = re.compile(r"^[\w.]*(?:error|exception):", re.IGNORECASE)
MARKER_TEXT_RE = re.compile(r"<<ccr:[0-9a-f]{16}>>")
_PUNCTUATION = " \t\r\n.,:;-*#>[](){}\"'`"
# a sentence ends at . ! ? ; followed by space; a clause at ", " (not "0,32": a decimal comma has no space)
_CLAUSE_SPLIT_RE = re.compile(r"((?<=[.!?;])\s+|,\s+)")
_BULLET_RE = re.compile(r"^(\s*(?:[-*+]|\d+[.)])\s+)")


@dataclass(frozen=True)
class GateVerdict:
    """What the gate made of one answer.

    ``prose`` is what may be applied (the answer less ``dropped``; "" when refused). ``dropped`` are
    the sentences or clauses removed because they named ``invented`` identifiers (not in the segment).
    """

    ok: bool
    reason: str
    prose: str = ""
    dropped: tuple[str, ...] = ()
    invented: tuple[str, ...] = ()

    def note(self) -> str:
        """One line for the compaction event: what was dropped from an accepted answer ("" if nothing)."""
        if not self.ok or not self.dropped:
            return ""
        return f"{len(self.dropped)} clauses with facts not in the segment dropped ({_shown(self.invented)})"


def prose_floor(segment_chars: int) -> int:
    """Characters of prose an answer must keep: ``PROSE_FLOOR``, less for a tiny segment (1/40 of it)."""
    return min(max(segment_chars, 0) // 40, PROSE_FLOOR)


def passes_gate(
    text: str | None,
    segment_chars: int,
    *,
    source: str | None = None,
    max_chars: int | None = None,
    archive: ArchiveSink | None = None,
) -> tuple[bool, str]:
    """(ok, reason) for an answer taken as it is: ``screen_summary`` without the repair.

    With ``source`` (the segment's text) an identifier - file path, URL, command, port, id, number -
    that the segment does not contain refuses the answer (an invented fact).
    """
    body = (text or "").strip()
    reason = _not_notes(body, archive)
    if reason is None and source is not None:
        invented = ids.ungrounded(body, source)
        if invented:
            reason = f"facts not in the segment: {_shown(invented)}"
    reason = reason or _size_problem(body, segment_chars, max_chars)
    return (False, reason) if reason else (True, "ok")


def screen_summary(
    text: str | None,
    segment_chars: int,
    *,
    source: str | None = None,
    max_chars: int | None = None,
    archive: ArchiveSink | None = None,
) -> GateVerdict:
    """The gate with the repair: clauses naming identifiers not in ``source`` are dropped, the rest judged.

    ``max_chars``: the kept prose must be shorter (the summary must be smaller than what it replaces).
    """
    body = (text or "").strip()
    reason = _not_notes(body, archive)
    if reason:
        return GateVerdict(False, reason)
    dropped: tuple[str, ...] = ()
    invented: tuple[str, ...] = ()
    if source is not None:
        body, dropped, invented = ground_prose(body, source)
        if invented and len(substance(body)) < max(prose_floor(segment_chars), 1):
            reason = f"facts not in the segment: {_shown(invented)}; nothing usable left without them"
            return GateVerdict(False, reason, "", dropped, invented)
    reason = _size_problem(body, segment_chars, max_chars)
    if reason:
        return GateVerdict(False, reason, "", dropped, invented)
    return GateVerdict(True, "ok", body, dropped, invented)


def ground_prose(prose: str, source: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(kept, dropped, invented): ``prose`` without the sentences or clauses that name an identifier
    ``source`` does not contain; a section header left with nothing under it goes too.

    A line is cut into sentences and ", " clauses only when it names an invented identifier. When an
    invented identifier spans lines (a fenced command block), nothing is kept.
    """
    invented = tuple(ids.ungrounded(prose, source))
    if not invented:
        return prose, (), ()
    kept: list[str] = []
    dropped: list[str] = []
    for line in prose.splitlines():
        if not ids.ungrounded(line, source):
            kept.append(line)
            continue
        bullet = _BULLET_RE.match(line)
        head = bullet.group(1) if bullet else ""
        tokens = _CLAUSE_SPLIT_RE.split(line[len(head) :])
        rest = ""
        for i in range(0, len(tokens), 2):
            piece = tokens[i]
            if not piece.strip():
                continue
            if ids.ungrounded(piece, source):
                dropped.append(piece.strip())
            else:
                rest += (tokens[i - 1] if rest and i else "") + piece
        if rest.strip(_PUNCTUATION) and not ids.ungrounded(rest, source):
            kept.append(head + rest)
        elif rest.strip(_PUNCTUATION):
            dropped.append(rest.strip())
    kept = _without_broken_fences(kept)
    text = _without_empty_sections(kept).strip()
    if ids.ungrounded(text, source):
        return "", tuple(dropped) or (prose,), invented
    return text, tuple(dropped), invented


def substance(text: str) -> str:
    """The prose besides section headers, bullets and markers, whitespace collapsed."""
    lines = [ln for ln in MARKER_TEXT_RE.sub(" ", text).splitlines() if not ln.lstrip().startswith("#")]
    return " ".join(" ".join(ln.strip(_PUNCTUATION) for ln in lines).split())


def retry_emphasis(reason: str, *, max_chars: int | None = None, floor: int = PROSE_FLOOR) -> str:
    """What the second attempt must do differently, given why the first one was rejected."""
    rules = [f"IMPORTANT: your previous answer was rejected ({reason[:200]})."]
    if reason.startswith("facts not in the segment"):
        rules.append(
            "Write only names, paths, numbers and commands that appear in the segment, copied exactly; "
            "when unsure, leave the detail out."
        )
    elif reason.startswith(("too short", "empty", "only a marker")):
        rules.append(f"Write at least {floor} characters of notes about what happened in the segment.")
    elif reason.startswith("larger than"):
        rules.append(f"Be brief: at most {max(max_chars or 0, 200) // 2} characters, one short line per fact.")
    else:
        rules.append("Write the notes themselves: no apology, no error message, no markers.")
    return " ".join(rules)


def _not_notes(body: str, archive: ArchiveSink | None) -> str | None:
    """Why ``body`` is not a summary at all (None when it is notes of some kind)."""
    if not body:
        return "empty summary"
    start = body[:160].lower().replace("\u2019", "'")
    for prefix in _REFUSALS:
        if start.startswith(prefix):
            return f"refusal ({body[:40]!r})"
    if start.startswith(_ERROR_STARTS) or _ERROR_LINE_RE.match(start):
        return f"error text instead of a summary ({body.splitlines()[0][:60]!r})"
    if not MARKER_TEXT_RE.sub("", body).strip(_PUNCTUATION):
        return "only a marker, no summary"
    if archive is not None:
        unknown = [key for key in dict.fromkeys(extract_keys(body)) if archive.get(key) is None]
        if unknown:
            return f"marker not in the archive ({marker(unknown[0])})"
    return None


def _size_problem(body: str, segment_chars: int, max_chars: int | None) -> str | None:
    floor = prose_floor(segment_chars)
    size = len(substance(body))
    if size < floor:
        return f"too short ({size} chars of notes < {floor})"
    if max_chars is not None and len(body) >= max_chars:
        return f"larger than what it replaces ({len(body)} chars >= {max(max_chars, 0)})"
    return None


def _without_empty_sections(lines: list[str]) -> str:
    """The lines less every header (``#``) followed by no content before the next header or the end."""
    out: list[str] = []
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            following = next((ln for ln in lines[i + 1 :] if ln.strip()), "")
            if not following or following.lstrip().startswith("#"):
                continue
        out.append(line)
    return "\n".join(out)


def _without_broken_fences(lines: list[str]) -> list[str]:
    """The lines less code fences left empty (their content was dropped) or without their other half."""
    out: list[str] = []
    for line in lines:
        fence = line.lstrip().startswith("```")
        if fence and out and out[-1].lstrip().startswith("```") and sum(x.lstrip().startswith("```") for x in out) % 2:
            out.pop()  # an opening fence right before this closing one: an empty block
            continue
        out.append(line)
    if sum(ln.lstrip().startswith("```") for ln in out) % 2:
        out = [ln for ln in out if not ln.lstrip().startswith("```")]
    return out


def _shown(values: tuple[str, ...] | list[str]) -> str:
    return ", ".join(values[:4]) + (f" (+{len(values) - 4} more)" if len(values) > 4 else "")
