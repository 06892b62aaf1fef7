"""Which old content the agent is least likely to use again: the pressure pass's clearing order.

A pressure pass (``policy/pressure.py``) turns old tool results into one-line stubs until the
request is back at its target. Which ones go first decides what the agent still reads verbatim. On
real agent runs replayed (``contextkit.replay``) the agent's next move mostly names a path or a name
it saw in an output a few steps before and has not written yet; an output whose names it has all
written already (or that a later output shows again) it rarely needs whole. So the order is:

1. **superseded** results: the same call made again later (a re-run of a command, a re-read), or an
   older view whose lines a later output shows again (a file printed again after an edit);
   the agent's own bulky arguments to calls that ran (a file it wrote through a heredoc: the file is
   on disk and the arguments are archived) count as superseded too - they hold nothing it has not
   written itself;
2. then by **unused names per byte**, fewest first: the identifiers (paths, dotted, snake_case and
   CamelCase names) a result holds that the agent has not referred to yet (in its own messages and
   calls, or the task) and that no later output holds, divided by the result's size;
3. **oldest first** as the tie-break.

Pure: messages in, indices out (no archive, no measuring). ``names`` also picks the few names a
stub cites (``policy/microcompact.py``), so a cleared result says what it held.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from contextkit.messages import Message, ToolCall
from contextkit.policy.arguments import is_archived_arguments

__all__ = [
    "ARGUMENT_MIN_CHARS",
    "Candidate",
    "call_text",
    "clearing_order",
    "names",
    "rank",
    "referred_names",
    "stub_names",
]

ARGUMENT_MIN_CHARS = 1_000  # smaller call arguments are not worth an excerpt
SHOWN_AGAIN = 0.8  # share of an older output's lines a later output must show for it to be superseded
_LINE_MIN = 8  # shorter lines (braces, blank-ish) say nothing about which view it is
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z0-9_]+)*")
_CAMEL_RE = re.compile(r"[a-z][A-Z]|[A-Z][a-z]+[A-Z]")
_CALL_CHARS = 60
_MEMO_CHARS = 4_000_000  # texts each memo below holds at most, in characters (a few sessions' histories)

_T = TypeVar("_T")


class _Memo(Generic[_T]):
    """What a function of a text gave for that text, kept until ``_MEMO_CHARS`` characters of texts
    are held (the oldest go first). Every pass reads the same old outputs again - ``rank`` and
    ``referred_names`` walk the whole history each time - so without it each pass costs regular
    expressions over every byte of the history, not only over what is new. A text is found again by
    equality (its hash is computed once per string object), so equal texts share one entry."""

    def __init__(self, fn: Callable[[str], _T]) -> None:
        self._fn = fn
        self._known: dict[str, _T] = {}
        self._chars = 0
        self._lock = threading.Lock()

    def __call__(self, text: str) -> _T:
        known = self._known.get(text)
        if known is not None:
            return known
        value = self._fn(text)
        with self._lock:
            if text not in self._known:
                self._known[text] = value
                self._chars += len(text)
                while self._chars > _MEMO_CHARS and self._known:
                    oldest = next(iter(self._known))
                    self._chars -= len(oldest)
                    del self._known[oldest]
        return value


def _scan_names(text: str) -> tuple[str, ...]:
    out: dict[str, None] = {}
    for tok in _NAME_RE.findall(text):
        tok = tok.strip("./")
        if len(tok) < 4 or tok in out:
            continue
        if "_" in tok.strip("_") or "." in tok or "/" in tok or _CAMEL_RE.search(tok):
            out[tok] = None
    return tuple(out)


_names = _Memo(_scan_names)


def names(text: str) -> list[str]:
    """Code-like names in ``text``, in order of first appearance: at least 4 characters, with ``_``,
    ``.`` or ``/`` inside, or CamelCase (plain words are not names)."""
    return list(_names(text))


def _is_result(m: Message) -> bool:
    return m.role == "tool" or (m.role == "user" and m.origin is not None and bool(m.origin.tool))


def referred_names(history: Sequence[Message]) -> set[str]:
    """Names the agent or its user already wrote: the task and every message but tool output, and
    every call's arguments."""
    out: set[str] = set()
    for m in history:
        if _is_result(m):
            continue
        out.update(_names(m.content))
        for call in m.tool_calls:
            out.update(_names(call.arguments))
    return out


def call_text(call: ToolCall | None) -> str:
    """A call in a few words for a stub: its one string argument when it has one (a bash command),
    else its arguments; one line, at most ~60 characters."""
    if call is None:
        return ""
    text = call.arguments
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and len(parsed) == 1 and isinstance(next(iter(parsed.values())), str):
        text = next(iter(parsed.values()))
    text = " ".join(text.split()).replace("<<ccr:", "ccr:").replace("[", "(").replace("]", ")")
    return text if len(text) <= _CALL_CHARS else text[: _CALL_CHARS - 3] + "..."


def stub_names(
    text: str, referred: Collection[str], *, said: str = "", limit: int = 6, chars: int = 140
) -> list[str]:
    """The few names a stub of ``text`` cites: the ones the agent has not referred to yet and the
    stub does not already show (``said``: its call and origin), paths first, in order of appearance;
    at most ``limit`` and ``chars`` characters together. (On the recorded runs replayed at a 16k
    window, 6 names in 140 characters kept more of the agent's next names in view than 4 in 100,
    for the same billed input; 8 in 180 kept fewer.)"""
    fresh = [n for n in _names(text) if n not in referred and "<<" not in n and n not in said]
    fresh.sort(key=lambda n: "/" not in n)  # stable: paths first, each group in order of appearance
    out: list[str] = []
    used = 0
    for n in fresh:
        if len(out) == limit:
            break
        if used + len(n) + 2 > chars:
            continue
        out.append(n)
        used += len(n) + 2
    return out


@dataclass(frozen=True)
class Candidate:
    """One piece of old content a pass may clear: a tool result, or an assistant message whose
    answered calls carry bulky arguments (``arguments``)."""

    index: int
    superseded: bool
    unused: int  # names only it holds that the agent has not referred to yet
    size: int  # characters
    arguments: bool = False

    @property
    def key(self) -> tuple[bool, float, int]:
        return (not self.superseded, self.unused / max(1, self.size), self.index)


def _scan_lines(text: str) -> frozenset[str]:
    return frozenset(s for line in text.splitlines() if len(s := line.strip()) >= _LINE_MIN)


_lines = _Memo(_scan_lines)


def rank(
    history: Sequence[Message], *, protect: Collection[int] = (), cleared: Iterable[int] = ()
) -> list[Candidate]:
    """The candidates of ``history`` in clearing order (see the module docstring). ``protect``:
    indices to leave alone (the kept results); ``cleared``: indices already stubs (skipped)."""
    skip = set(protect) | set(cleared)
    calls = {c.id: c for m in history for c in m.tool_calls}
    answered = {m.tool_call_id for m in history if m.role == "tool" and m.tool_call_id}
    protected_calls = {history[i].tool_call_id for i in protect if history[i].tool_call_id}
    referred = referred_names(history)
    results = [i for i, m in enumerate(history) if _is_result(m)]
    later_names: set[str] = set()
    later_lines: set[str] = set()
    later_calls: set[tuple[str, str]] = set()
    out: list[Candidate] = []
    for i in reversed(results):  # newest first, so "later" is what has been walked already
        m = history[i]
        call = calls.get(m.tool_call_id or "")
        signature = (call.name, call.arguments) if call is not None else None
        held = _names(m.content)
        lines = _lines(m.content)
        if i not in skip:
            again = signature is not None and signature in later_calls
            shown = bool(lines) and len(lines & later_lines) >= SHOWN_AGAIN * len(lines)
            unused = sum(1 for n in held if n not in referred and n not in later_names)
            out.append(Candidate(i, again or shown, unused, len(m.content)))
        later_names.update(held)
        later_lines |= lines
        if signature is not None:
            later_calls.add(signature)
    for i, m in enumerate(history):
        if i in skip or m.role != "assistant" or m.preserve_verbatim:
            continue
        bulky = [
            c for c in m.tool_calls
            if c.id in answered and c.id not in protected_calls and len(c.arguments) > ARGUMENT_MIN_CHARS
            and not is_archived_arguments(c.arguments)
        ]  # fmt: skip
        if bulky:
            out.append(Candidate(i, True, 0, sum(len(c.arguments) for c in bulky), arguments=True))
    return sorted(out, key=lambda c: c.key)


def clearing_order(
    history: Sequence[Message], *, protect: Collection[int] = (), cleared: Iterable[int] = ()
) -> list[int]:
    """Indices of ``rank``'s candidates, in order."""
    return [c.index for c in rank(history, protect=protect, cleared=cleared)]
