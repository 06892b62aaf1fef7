"""The trim phase: reasoning of old turns and superseded file reads.

``strip_reasoning`` drops ``Message.reasoning`` and inline ``<reasoning>``/``<thinking>`` blocks from
assistant messages older than ``keep_recent_turns`` (archived first). ``dedup_repeated_reads`` turns
an earlier read of a file into a one-line stub when a later read of the same path covers the same or
a wider line range. Reads are recognised by ``Message.origin`` (path + line range; no range = whole
file) and, as a fallback, by the read format of a Portuguese-language chat CLI (``<<< INÍCIO DO ARQUIVO: PATH >>>``
with ``   N | `` numbered lines). Recall output and preserve_verbatim messages are never touched.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from contextkit.markers import ArchiveSink, has_marker, recall_suffix
from contextkit.messages import Message, assistant_turns
from contextkit.policy._common import archive_original, fmt_chars, origin_of, with_suffix
from contextkit.policy.microcompact import ONE_LINER_PREFIX

_BLOCK_RE = re.compile(r"<(reasoning|thinking)>.*?</\1>\s*", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class ReasoningReport:
    stripped: int = 0
    chars_freed: int = 0
    archived_keys: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.stripped > 0

    def describe(self) -> str:
        return f"trim: reasoning dropped from {self.stripped} old turns, {fmt_chars(self.chars_freed)} freed"


def strip_reasoning(
    history: Sequence[Message], *, archive: ArchiveSink, keep_recent_turns: int = 1
) -> tuple[list[Message], ReasoningReport]:
    tags = assistant_turns(history)
    total = tags[-1] if tags else 0
    out = list(history)
    keys: list[str] = []
    stripped = freed = 0
    for i, m in enumerate(history):
        if m.role != "assistant" or m.preserve_verbatim or total - tags[i] < keep_recent_turns:
            continue
        new = m
        if m.reasoning:
            key = archive.put(m.reasoning, kind="reasoning", origin=origin_of(m), allow_markers=has_marker(m.reasoning))
            if key is not None:
                keys.append(key)
                freed += len(m.reasoning)
                new = new.evolve(reasoning=None)
        if _BLOCK_RE.search(m.content):
            got = archive_original(archive, m.content, kind="message", origin=origin_of(m))
            if got is not None:
                removed = sum(len(b.group(0)) for b in _BLOCK_RE.finditer(m.content))
                text = _BLOCK_RE.sub("", m.content).strip()
                note = f"[reasoning removed - {removed} chars]"
                body = f"{text}\n{note}" if text else note
                content = with_suffix(body, got[0])
                if len(content) < len(m.content):
                    keys.extend(got[1])
                    freed += len(m.content) - len(content)
                    new = new.with_content(content)
        if new is not m:
            out[i] = new
            stripped += 1
    report = ReasoningReport(stripped, freed, tuple(dict.fromkeys(keys)))
    return (out if stripped else list(history)), report


# repeated reads -----------------------------------------------------------------------------

_START_RE = re.compile(r"^<<< INÍCIO DO ARQUIVO(?: \(base64\))?: (.+?) >>>$", re.MULTILINE)
_END_RE = re.compile(r"^<<< FIM DO ARQUIVO: .+? >>>$", re.MULTILINE)
_NUMBERED_RE = re.compile(r"^\s*(\d+) \| ", re.MULTILINE)
STUB_PREFIX = "[Earlier read of "


@dataclass(frozen=True)
class ReadBlock:
    path: str
    first: int | None = None  # None: the whole file
    last: int | None = None

    @property
    def whole(self) -> bool:
        return self.first is None

    def covered_by(self, later: ReadBlock) -> bool:
        if later.path != self.path:
            return False
        if later.whole:
            return True
        if self.whole:
            return False
        assert self.first is not None and self.last is not None and later.first is not None and later.last is not None
        return later.first <= self.first and later.last >= self.last

    def describe(self) -> str:
        return self.path if self.whole else f"{self.path}:{self.first}-{self.last}"


def parse_read_blocks(content: str) -> list[ReadBlock]:
    """File blocks in that chat CLI's read format (empty list when there are none)."""
    starts = list(_START_RE.finditer(content))
    blocks = []
    for n, start in enumerate(starts):
        stop = starts[n + 1].start() if n + 1 < len(starts) else len(content)
        end = _END_RE.search(content, start.end(), stop)
        body = content[start.end() : end.start() if end else stop]
        numbers = [int(x) for x in _NUMBERED_RE.findall(body)]
        if numbers:
            blocks.append(ReadBlock(start.group(1), numbers[0], numbers[-1]))
        else:
            blocks.append(ReadBlock(start.group(1)))
    return blocks


def read_blocks(message: Message) -> list[ReadBlock]:
    o = message.origin
    if o is not None and o.path:
        if o.line_start is None:
            return [ReadBlock(o.path)]
        return [ReadBlock(o.path, o.line_start, o.line_end if o.line_end is not None else o.line_start)]
    return parse_read_blocks(message.content) if "<<< INÍCIO DO ARQUIVO" in message.content else []


def _is_read_candidate(m: Message) -> bool:
    if m.preserve_verbatim or m.is_summary or m.is_recall or m.synthetic or m.content.startswith(STUB_PREFIX):
        return False
    return m.role == "tool" or (m.role == "user" and m.origin is not None and bool(m.origin.tool))


@dataclass(frozen=True)
class DedupReport:
    superseded: int = 0
    chars_freed: int = 0
    archived_keys: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.superseded > 0

    def describe(self) -> str:
        return f"trim: {self.superseded} superseded file reads cleared, {fmt_chars(self.chars_freed)} freed"


_SUFFIX_OF_ONE = len(recall_suffix(["0" * 16]))  # the recall suffix citing one key: the shortest there is


def superseded_stub(what: str, chars: int) -> str:
    """The stub of a read a later read covers (``what``: its blocks; ``chars``: its size), before its
    recall suffix."""
    return f"{STUB_PREFIX}{what} superseded by a later read of the same file - {chars} chars cleared]"


def dedup_repeated_reads(
    history: Sequence[Message], *, archive: ArchiveSink, protect: Collection[int] = (), one_liners: bool = True
) -> tuple[list[Message], DedupReport]:
    """Stub every read a later read covers; indices in ``protect`` stay verbatim (they still
    supersede earlier reads). ``one_liners=False``: a read already cleared to a one-liner stays as it
    is too - its dedup stub would be a hundred characters shorter, and the rewrite would break the
    prompt cache at its place, far back in the history (the pressure pass and compaction's trim
    stage, which leave the cache intact wherever they can)."""
    candidates = [
        (i, blocks) for i, m in enumerate(history) if _is_read_candidate(m) for blocks in [read_blocks(m)] if blocks
    ]
    if len(candidates) < 2:
        return list(history), DedupReport()
    later: dict[str, list[ReadBlock]] = {}
    out = list(history)
    keys: list[str] = []
    superseded = freed = 0
    for i, blocks in reversed(candidates):
        kept = i in protect or (not one_liners and history[i].content.startswith(ONE_LINER_PREFIX))
        if not kept and all(any(b.covered_by(x) for x in later.get(b.path, ())) for b in blocks):
            m = history[i]
            what = ", ".join(dict.fromkeys(b.describe() for b in blocks))
            stub = superseded_stub(what, len(m.content))
            # a stub with its recall suffix is at least _SUFFIX_OF_ONE longer: when that is not shorter
            # (an old read cleared to a one-liner already), the original is not looked up or staged again
            too_long = "<<ccr:" not in stub and len(stub) + _SUFFIX_OF_ONE >= len(m.content)
            got = (
                None
                if too_long
                else archive_original(archive, m.content, kind="read", origin=origin_of(m, reason="superseded read"))
            )
            if got is not None and len(with_suffix(stub, got[0])) < len(m.content):
                out[i] = m.with_content(with_suffix(stub, got[0]))
                keys.extend(got[1])
                freed += len(m.content) - len(out[i].content)
                superseded += 1
                continue
        for b in blocks:
            later.setdefault(b.path, []).append(b)
    report = DedupReport(superseded, freed, tuple(dict.fromkeys(keys)))
    return (out if superseded else list(history)), report
