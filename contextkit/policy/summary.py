"""The summary stage as data: plan the segment, build the summarizer input and prompt, gate the answer, apply it.

Pure (no IO, no clock): the compactor does the network call between ``summary_prompt`` and
``apply_summary`` and archives the segment.

* ``plan_segment`` splits a history into leading systems | middle (compactable + verbatim) | recent tail,
  the tail cut snapped so no tool result is separated from its call, and never after the newest user
  message (the task and its tool chain stay whole).
* ``summarizer_input`` renders the compactable middle for the summarizer, budgeted against its window.
* ``summary_prompt`` asks for facts only, in fixed sections.
* ``screen_summary`` / ``passes_gate`` / ``retry_emphasis``: the quality gate (``contextkit.policy.gate``,
  re-exported here).
* ``with_ledger`` merges the model's prose with the identifier ledger (``contextkit.policy.ledger``);
  ``extractive_summary`` is the model-free fallback (first/last lines of each message + the ledger).
* ``identifier_retention`` measures which paths/commands/numbers/ids of the segment survive.
* ``apply_summary`` rebuilds the history around one summary message.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from contextkit.markers import ArchiveSink, extract_keys, marker
from contextkit.messages import Message, ToolCall, newest_request_index, render_transcript
from contextkit.policy import ledger as ids
from contextkit.policy._common import tool_result_as_user
from contextkit.policy.archive_index import index_block
from contextkit.policy.gate import MARKER_TEXT_RE
from contextkit.policy.gate import passes_gate as passes_gate  # re-exported: the gate of the summary stage
from contextkit.policy.gate import retry_emphasis as retry_emphasis
from contextkit.policy.gate import screen_summary as screen_summary
from contextkit.policy.pairing import snap_cut

CHARS_PER_TOKEN = 4
INPUT_FLOOR_CHARS = 20_000
MESSAGE_FLOOR_CHARS = 600
MIN_COMPACTABLE = 4
CALL_ARGS_CHARS = 300
INPUT_CUT = "\n... [truncated for summarization] ...\n"
SEGMENT_LINE = "CONVERSATION SEGMENT TO EXTRACT FROM:"
SUMMARY_HEADER = "[STRUCTURED SUMMARY - covering {n} earlier messages]\n\n"
GUIDED_HEADER = '[COMPACTED CONTEXT - {n} messages summarized per user instruction: "{instruction}"]\n\n'
RECALL_NOTE = "\n\n[full transcript of the summarized segment recoverable via @recall {marker}]"

SECTIONS = (
    "Files Read",
    "Files Modified",
    "Commands Executed",
    "Key Decisions",
    "Errors & Resolutions",
    "Current Task State",
)

PROMPT_TEMPLATE = """You are a precise technical note-taker. Extract ONLY factual information from the conversation segment below; it will replace that segment in an ongoing session, so the session must be able to continue from your notes alone.

Write these sections, in this order, as markdown headers (omit a section that would be empty):
## Files Read - path, line count or range, one-line purpose
## Files Modified - path:lines, what changed and why
## Commands Executed - exact command -> outcome
## Key Decisions - decision and its reason
## Errors & Resolutions - exact first line of the error -> how it was resolved (or "unresolved")
## Current Task State - Done: ... / Pending: ...

Rules:
- Use exact file paths, line numbers, commands, identifiers and numbers as they appear.
- Reference code by file:line; never paste code blocks or XML tags.
- List a file under both Files Read and Files Modified when both happened.
- One line per bullet. Add nothing that is not in the conversation. No preamble, no closing remarks."""


@dataclass(frozen=True)
class SegmentPlan:
    """Where the summary stage cuts: ``history[:system_end]`` | middle | ``history[recent_start:]``.

    ``segment`` is the compactable middle (summarized and archived), ``verbatim`` the
    preserve_verbatim messages of the middle (re-attached after the summary), in original order.
    """

    system_end: int
    recent_start: int
    head: tuple[Message, ...]
    segment: tuple[Message, ...]
    verbatim: tuple[Message, ...]
    tail: tuple[Message, ...]

    @property
    def count(self) -> int:
        return len(self.segment)


def plan_segment(
    history: Sequence[Message], *, min_keep_recent: int, min_compactable: int = MIN_COMPACTABLE
) -> SegmentPlan | None:
    """The summary plan, or None when there is nothing worth a summarizer call (< ``min_compactable``)."""
    system_end = 0
    while system_end < len(history) and history[system_end].role == "system":
        system_end += 1
    cut = max(len(history) - max(min_keep_recent, 0), system_end)
    recent_start = snap_cut(history, cut, system_end) if cut < len(history) else cut
    # the task survives: the newest user message and the tool chain since it are never summarized away
    newest = newest_request_index(history)
    if newest is not None and newest >= system_end:
        recent_start = min(recent_start, newest)
    if recent_start <= system_end:
        return None
    middle = history[system_end:recent_start]
    # a system message in the middle is an instruction, not conversation: keep it like a verbatim one
    verbatim = tuple(m for m in middle if m.preserve_verbatim or m.role == "system")
    segment = tuple(m for m in middle if not (m.preserve_verbatim or m.role == "system"))
    if len(segment) < max(1, min_compactable):
        return None
    return SegmentPlan(
        system_end=system_end,
        recent_start=recent_start,
        head=tuple(history[:system_end]),
        segment=segment,
        verbatim=verbatim,
        tail=tuple(history[recent_start:]),
    )


def input_budget(window_tokens: int | None) -> int:
    """Characters of segment the summarizer may see: half its window, less the prompt, floor 20,000."""
    if not window_tokens or window_tokens <= 0:
        return INPUT_FLOOR_CHARS
    budget = int(window_tokens * 0.5 * CHARS_PER_TOKEN) - len(PROMPT_TEMPLATE) - 2000
    return max(budget, INPUT_FLOOR_CHARS)


def _restored(content: str, archive: ArchiveSink | None, allowance: int) -> str:
    """A stub's archived original when it is longer than the stub and fits the allowance."""
    if archive is None:
        return content
    for key in extract_keys(content):
        original = archive.get(key)
        if original is not None and len(content) < len(original) <= allowance:
            return original
    return content


def _fit(content: str, allowance: int) -> str:
    if len(content) <= allowance:
        return content
    head = int(allowance * 0.75)
    tail = max(allowance - head - len(INPUT_CUT), 0)
    return content[:head] + INPUT_CUT + (content[-tail:] if tail else "")


def _call_text(call: ToolCall) -> str:
    args = call.arguments if len(call.arguments) <= CALL_ARGS_CHARS else call.arguments[:CALL_ARGS_CHARS] + "..."
    return f"{call.name}({args})" if args and args != "{}" else call.name


def summarizer_input(plan: SegmentPlan, *, archive: ArchiveSink | None, window_tokens: int | None) -> str:
    """The segment rendered ``[role]: content`` with a fair share of the input budget per message."""
    allowance = max(input_budget(window_tokens) // max(plan.count, 1), MESSAGE_FLOOR_CHARS)
    parts = []
    for m in plan.segment:
        content = _fit(_restored(m.content, archive, allowance), allowance)
        if m.tool_calls:
            # name + (capped) arguments, so the summary can list the exact commands that were run
            content += "\n[tool_calls: " + ", ".join(_call_text(c) for c in m.tool_calls) + "]"
        parts.append(f"[{m.role}]: {content}\n\n")
    return "".join(parts)


def summary_prompt(segment: str, instruction: str | None = None, emphasis: str | None = None) -> str:
    """The prompt sent as one user message; ``instruction`` (manual compaction) is passed through,
    ``emphasis`` (a retry) says what the previous answer got wrong."""
    guided = ""
    if instruction and instruction.strip():
        guided = (
            "\n\nUSER INSTRUCTION (follow it when choosing what to keep): "
            + instruction.strip()
            + "\nKeep the sections above; put what the instruction asks for first."
        )
    if emphasis and emphasis.strip():
        guided += "\n\n" + emphasis.strip()
    return f"{PROMPT_TEMPLATE}{guided}\n\n{SEGMENT_LINE}\n\n{segment}"


def summary_max_tokens(segment_chars: int, window: int | None) -> int:
    """Output cap of a summary call: about a third of the segment's size, 256-2,048 tokens, and at most
    a quarter of the summarizer's window (servers such as llama.cpp count the output against it)."""
    cap = min(max(segment_chars // (CHARS_PER_TOKEN * 3), 256), 2048)
    return min(cap, max(window // 4, 128)) if window else cap


def identifiers(text: str) -> set[str]:
    """Paths, URLs, commands, error codes, ports, ids/hashes, function/table/tool names and numbers.

    CCR markers are plumbing, not conversation: their keys are not counted.
    """
    return ids.identifiers(text)


def identifier_retention(segment: str, summary: str) -> float | None:
    """Share of the segment's identifiers that appear verbatim in the summary; None when it has none."""
    return ids.retention(identifiers(segment), summary)


LEDGER_SHARE = 3  # the segment's own identifiers may take at most 1/3 of it in the ledger
OWN_LEDGER_CHARS = 8_000  # ... and that much whatever the pass's budget leaves for carried ledgers
EXTRACTIVE_SHARE = 2  # the extractive summary of the segment's own messages at most 1/2
EXTRACTIVE_HEADER = (
    "[extractive summary - the summarizer model's notes were not usable; first and last line of each "
    "summarized message]"
)
_LEDGER_BLOCK_RE = re.compile(re.escape(ids.LEDGER_HEADER) + r"(?:\n(?:- |  \$ )[^\n]*)*")


def carried_ledger_chars(plan: SegmentPlan) -> int:
    """Characters of the identifier ledgers that earlier summaries in the segment already carry."""
    return sum(len(block) for m in plan.segment for block in _LEDGER_BLOCK_RE.findall(m.content))


def carried_identifiers(plan: SegmentPlan) -> set[str]:
    """The identifiers listed by those ledgers: the oldest of the segment, the first to go when the
    ledger outgrows its ceiling (the archived segment still holds them, one recall away)."""
    blocks = [block for m in plan.segment for block in _LEDGER_BLOCK_RE.findall(m.content)]
    return ids.identifiers("\n".join(blocks)) if blocks else set()


def ledger_budget(segment_chars: int, *, carried: int = 0, restored: int = 0, ceiling: int | None = None) -> int:
    """Characters the identifier ledger may take in a summary of ``segment_chars``.

    The segment's own messages, plus the ``restored`` originals of stubs made by this pass, get a third
    (at least up to ``OWN_LEDGER_CHARS`` whatever the ceiling). The ledgers of earlier summaries inside
    the segment (``carried``) come on top at their own size: they already list one identifier per
    entry, and squeezing them into a share of a segment made mostly of them is how nested summaries
    lost identifiers. ``ceiling`` (what the pass's byte budget allows) bounds what they add, so the
    oldest identifiers are the ones that age out. Never more than three quarters of the segment.
    """
    carried = min(max(carried, 0), max(segment_chars, 0))
    own = (max(segment_chars - carried, 0) + max(restored, 0)) // LEDGER_SHARE
    budget = own + carried
    if ceiling is not None:
        budget = min(budget, max(ceiling, min(own, OWN_LEDGER_CHARS)))
    return max(min(budget, max(segment_chars, 0) * 3 // 4), 0)


def with_ledger(prose: str, ledger: ids.Ledger, ledger_chars: int, expendable: Collection[str] = ()) -> str:
    """The model's prose followed by the segment's identifiers that the prose does not already quote,
    within ``ledger_chars`` (see ``ledger_budget``; ``expendable`` go first when it is short)."""
    missing = tuple((cls, tuple(v for v in values if v not in prose)) for cls, values in ledger.items)
    rest = ids.Ledger(tuple((cls, values) for cls, values in missing if values))
    table = rest.render(ledger_chars, expendable)
    return prose.strip() + ("\n\n" + table if table else "")


def _line(text: str, cap: int) -> str:
    """One line within ``cap`` characters; markers are kept whole (a cut marker points nowhere)."""
    text = " ".join(text.split())
    if len(text) <= cap:
        return text
    keys = extract_keys(text)
    bare = " ".join(MARKER_TEXT_RE.sub(" ", text).split()) if keys else text
    cut = bare if len(bare) <= cap else bare[: max(cap - 3, 1)] + "..."
    return cut + "".join(f" {marker(k)}" for k in dict.fromkeys(keys))


def extractive_summary(
    plan: SegmentPlan,
    ledger: ids.Ledger,
    segment_chars: int,
    ledger_chars: int | None = None,
    expendable: Collection[str] = (),
) -> str:
    """A model-free summary: the identifier ledger within ``ledger_chars``, then the first and last line
    of each message.

    The lines take at most half the segment's own messages (earlier ledgers carried in it aside) less
    the ledger: the line cap shrinks with the number of messages, and when even short lines do not fit
    only the most recent messages are listed (the rest are counted).
    """
    carried = carried_ledger_chars(plan)
    if ledger_chars is None:
        ledger_chars = ledger_budget(segment_chars, carried=carried)
    table = ledger.render(ledger_chars, expendable)  # identifiers first, then lines
    budget = max(carried + (segment_chars - carried) // EXTRACTIVE_SHARE - len(EXTRACTIVE_HEADER), 0)
    room = budget - len(table) - 64  # the blank line before the ledger and the "not listed" line
    cap = max(min(room // max(2 * plan.count, 1) - 16, 160), 40)
    rows: list[str] = []
    for m in plan.segment:
        label = m.role + (f" {m.tool_calls[0].name}" if m.tool_calls else "")
        lines = [ln for ln in _LEDGER_BLOCK_RE.sub("", m.content).splitlines() if ln.strip()]
        if m.tool_calls and not lines:
            lines = [", ".join(_call_text(c) for c in m.tool_calls)]
        first = _line(lines[0], cap) if lines else ""
        last = _line(lines[-1], cap) if len(lines) > 1 else ""
        rows.append(f"- [{label}] {first}" + (f" ... {last}" if last else ""))
    while rows and sum(len(r) + 1 for r in rows) > room:
        rows.pop(0)
    skipped = plan.count - len(rows)
    head = [EXTRACTIVE_HEADER] + ([f"- ({skipped} older messages not listed)"] if skipped else [])
    return "\n".join(head + rows) + ("\n\n" + table if table else "")


def downgrade_verbatim(message: Message) -> Message:
    """A verbatim message re-attached after a summary loses its pairing partner: make it standalone.

    A tool result becomes a user message (prefixed with its call id); an assistant's own tool calls
    are written into its content, because their results were summarized (a call without its result
    would be an orphan that pairing repair removes, and the model would lose what it did).
    """
    if message.role == "tool" or message.tool_call_id:
        return tool_result_as_user(message)
    if message.tool_calls:
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        return message.evolve(content=message.content + f"\n[tool_calls: {calls}]", tool_calls=())
    return message


def summary_message(
    plan: SegmentPlan, summary_text: str, *, segment_key: str | None, instruction: str | None = None
) -> Message:
    if instruction and instruction.strip():
        header = GUIDED_HEADER.format(n=plan.count, instruction=instruction.strip().replace('"', "'")[:200])
    else:
        header = SUMMARY_HEADER.format(n=plan.count)
    note = RECALL_NOTE.format(marker=marker(segment_key)) if segment_key else ""
    # the originals the segment's stubs cite stay one recall away (no marker chains)
    index = index_block(plan.segment)
    return Message.user(header + summary_text.strip() + note + index, is_summary=True, summary_of=plan.count)


def apply_summary(
    history: Sequence[Message],
    plan: SegmentPlan,
    summary_text: str,
    *,
    segment_key: str | None,
    instruction: str | None = None,
) -> list[Message]:
    """Leading systems + the summary + verbatim messages (downgraded) + the recent tail."""
    if len(history) != plan.recent_start + len(plan.tail) or tuple(history[: plan.system_end]) != plan.head:
        raise ValueError("apply_summary: the plan was made for a different history; call plan_segment again")
    return [
        *plan.head,
        summary_message(plan, summary_text, segment_key=segment_key, instruction=instruction),
        *(downgrade_verbatim(m) for m in plan.verbatim),
        *plan.tail,
    ]


LEDGER_RESTORE_CHARS = 400_000


def restored_originals(plan: SegmentPlan, archive: ArchiveSink | None, keys: Collection[str]) -> str:
    """The archived originals of the segment's stubs whose keys are in ``keys`` (the stubs this pass
    made: the trim stage cleared those tool results moments ago, so the summary still accounts for them).

    Older stubs and the archived segment behind an earlier summary are not read: their identifiers
    left the context before this pass (an earlier summary's own ledger lists its segment's).
    """
    if archive is None or not keys:
        return ""
    parts, budget = [], LEDGER_RESTORE_CHARS
    for m in plan.segment:
        for key in extract_keys(m.content):
            original = archive.get(key) if key in keys else None
            if original and len(original) <= budget:
                parts.append(original)
                budget -= len(original)
    return "\n\n".join(parts)


@dataclass(frozen=True)
class SegmentLedger:
    """The identifier ledger of a segment, the characters it may take, and which identifiers go first."""

    ledger: ids.Ledger
    chars: int  # see ``ledger_budget``
    oldest: frozenset[str]  # carried by earlier summaries in the segment: the first to age out
    facts: str  # the text it was taken from: the segment and the originals of this pass's stubs

    def identifiers(self) -> set[str]:
        return self.ledger.all()

    def merged(self, prose: str) -> str:
        return with_ledger(prose, self.ledger, self.chars, self.oldest)

    def extractive(self, plan: SegmentPlan, segment_chars: int) -> str:
        return extractive_summary(plan, self.ledger, segment_chars, self.chars, self.oldest)

    def aged(self, summary: str) -> int:
        """How many of the oldest identifiers ``summary`` left out (the ledger reached its ceiling)."""
        return sum(1 for ident in self.ledger.all() & self.oldest if ident not in summary)


def segment_ledger(
    plan: SegmentPlan, archive: ArchiveSink | None, *, new_keys: Collection[str] = (), ceiling: int | None = None
) -> SegmentLedger:
    """The ledger of ``plan``'s segment (``new_keys``: the stubs this pass made, read back from the archive)."""
    transcript = segment_transcript(plan)
    restored = restored_originals(plan, archive, new_keys)
    facts = transcript + ("\n\n" + restored if restored else "")
    chars = ledger_budget(len(transcript), carried=carried_ledger_chars(plan), restored=len(restored), ceiling=ceiling)
    return SegmentLedger(ids.extract(facts), chars, frozenset(carried_identifiers(plan)), facts)


def segment_transcript(plan: SegmentPlan) -> str:
    """What gets archived: the full, untruncated compactable middle."""
    return render_transcript(plan.segment)
