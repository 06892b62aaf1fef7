"""What the meter built for the last request, reused for the prefix the next one shares.

The turn flow hands litellm a list of wire dicts and hashes the body's JSON for every request; a
request usually repeats the last one and adds a few messages. ``LastList`` keeps the last list's
cached wire dicts and the copies it handed out, and ``LastBody`` the last body's joined JSON, each
with the tuple of its messages: the longest shared prefix is found by comparing tuples in C (object
by object, the same object equal at once; an equal copy has the same wire form), and only the
messages after it are looked up. The copies handed out for that prefix are handed out again when the
receiver left them as they were (one comparison in C), so a request copies only its new messages.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from contextkit.messages import Message

__all__ = ["LastBody", "LastList", "common_prefix", "fresh"]


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Length of the longest common prefix of two tuples, by slice comparisons (C loops; a message is
    equal to itself without a look at its fields): the whole of the shorter one first (a history
    appended to), else a binary search. Tuples of messages rather than lists of their ids: an id
    list costs an int object per message, several times the comparison itself."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def fresh(obj: Any) -> Any:
    """A copy of the dicts and lists of ``obj`` (litellm's transformation may change them)."""
    if isinstance(obj, dict):
        return {k: fresh(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [fresh(v) for v in obj]
    return obj


def _own_nested(copy: dict[str, Any]) -> None:
    """Give a shallow copy of a wire message (``dict.copy``) its own nested lists and dicts: content
    blocks copied whole, a call's dict and its ``function`` (the shape ``to_wire`` gives a call)."""
    if isinstance(copy.get("content"), list):
        copy.update(fresh(copy))
        return
    calls = copy.get("tool_calls")
    if isinstance(calls, list):
        copy["tool_calls"] = [{**c, "function": dict(c["function"])} for c in calls]


@dataclass(frozen=True, slots=True)
class _Seen:
    messages: tuple[Message, ...]


def _shared(last: _Seen | None, messages: Sequence[Message]) -> tuple[tuple[Message, ...], int]:
    held = tuple(messages)
    return held, common_prefix(last.messages, held) if last is not None else 0


@dataclass(frozen=True, slots=True)
class _List(_Seen):
    wires: list[dict[str, Any]]  # the cached wire dicts
    deep: list[int]  # positions of those copied one by one (nested lists: tool calls, content blocks)
    handed: list[dict[str, Any]]  # the copies handed out (the receiver may have changed them since)


@dataclass(frozen=True, slots=True)
class _Body(_Seen):
    text: str  # the messages' JSON joined with commas
    ends: list[int]  # where each prefix of it ends (``ends[i]``: the first ``i`` messages)


class LastList:
    """The last wire list handed out; ``build`` the next one from it."""

    def __init__(self) -> None:
        self._last: _List | None = None
        self.looked_up = 0  # messages whose wire dict was looked up (the rest: the last list's prefix)

    def build(self, messages: Sequence[Message], wire_of: Callable[[Message], dict[str, Any]]) -> list[dict[str, Any]]:
        """Copies of ``wire_of(m)`` for every message (the receiver may change them), in a new list.
        For the prefix shared with the last list, the copies handed out then are handed out again if
        they still equal the wire dicts (the receiver changed none of them), else copied anew; the
        copies of plain messages are made in C (``dict.copy``)."""
        last = self._last
        held, shared = _shared(last, messages)
        wires = last.wires[:shared] if last is not None else []
        deep = last.deep[: bisect.bisect_left(last.deep, shared)] if last is not None else []
        out = last.handed[:shared] if last is not None else []
        if out != wires:  # in C, value by value; the copies share every string with the wire dicts
            out = list(map(dict.copy, wires))
            for i in deep:
                _own_nested(out[i])
        self.looked_up += len(held) - shared
        for i in range(shared, len(held)):
            wire = wire_of(held[i])
            wires.append(wire)
            copy = wire.copy()
            if isinstance(wire.get("content"), list) or isinstance(wire.get("tool_calls"), list):
                deep.append(i)
                _own_nested(copy)
            out.append(copy)
        self._last = _List(held, wires, deep, out)
        return list(out)

    def retain(self, keep: set[int]) -> None:
        """Forget the last list unless every message of it is in ``keep`` (ids)."""
        if self._last is not None and not keep.issuperset(map(id, self._last.messages)):
            self._last = None


class LastBody:
    """The last body's joined message JSON; ``build`` the next one from it."""

    def __init__(self) -> None:
        self._last: _Body | None = None
        self.looked_up = 0  # messages whose JSON was joined (the rest: the last body's prefix)

    def build(self, messages: Sequence[Message], json_of: Callable[[Message], str]) -> str:
        """``",".join(json_of(m) for m in messages)``, the shared prefix's text reused."""
        last = self._last
        held, shared = _shared(last, messages)
        head = last.text[: last.ends[shared]] if last is not None else ""
        ends = last.ends[: shared + 1] if last is not None else [0]
        pieces = [json_of(m) for m in held[shared:]]
        self.looked_up += len(pieces)
        for piece in pieces:
            ends.append(ends[-1] + len(piece) + (1 if len(ends) > 1 else 0))
        text = head + ("," if head and pieces else "") + ",".join(pieces)
        self._last = _Body(held, text, ends)
        return text

    def retain(self, keep: set[int]) -> None:
        """Forget the last body unless every message of it is in ``keep`` (ids)."""
        if self._last is not None and not keep.issuperset(map(id, self._last.messages)):
            self._last = None
