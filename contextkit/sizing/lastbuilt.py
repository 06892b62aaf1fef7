"""What the meter built for the last request, reused for the prefix the next one shares.

The turn flow hands litellm a list of wire dicts and hashes the body's JSON for every request; a
request usually repeats the last one and adds a few messages. ``LastList`` keeps the last list's
cached wire dicts (not the copies handed out) and ``LastBody`` the last body's joined JSON, each with
the ids of its messages (the messages are held, so their ids stay theirs): the longest shared prefix
is found by comparing id lists in C, and only the messages after it are looked up.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from contextkit.messages import Message

__all__ = ["LastBody", "LastList", "common_prefix", "copy_wire"]


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two lists of ints, by slice comparisons (C loops):
    the whole of the shorter one first (a history appended to), else a binary search."""
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


def copy_wire(wire: dict[str, Any]) -> dict[str, Any]:
    """A copy of a wire message whose dicts and lists are new, cheap for the plain text message
    (a shallow copy: its values are strings and None)."""
    if isinstance(wire.get("content"), list):
        return fresh(wire)  # type: ignore[no-any-return]
    calls = wire.get("tool_calls")
    if isinstance(calls, list):  # the shape ``to_wire`` gives a call: {"id", "type", "function": {...}}
        return {**wire, "tool_calls": [{**c, "function": dict(c["function"])} for c in calls]}
    return dict(wire)


@dataclass(frozen=True, slots=True)
class _Seen:
    messages: tuple[Message, ...]
    ids: list[int]


def _shared(last: _Seen | None, messages: Sequence[Message]) -> tuple[tuple[Message, ...], list[int], int]:
    held = tuple(messages)
    ids = list(map(id, held))
    return held, ids, common_prefix(last.ids, ids) if last is not None else 0


@dataclass(frozen=True, slots=True)
class _List(_Seen):
    wires: list[dict[str, Any]]  # the cached wire dicts
    deep: list[int]  # positions of those copied one by one (nested lists: tool calls, content blocks)


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
        """Copies of ``wire_of(m)`` for every message (the receiver may change them), the copies of
        plain messages made in C (``dict.copy``)."""
        last = self._last
        held, ids, shared = _shared(last, messages)
        wires = last.wires[:shared] if last is not None else []
        deep = last.deep[: bisect.bisect_left(last.deep, shared)] if last is not None else []
        self.looked_up += len(held) - shared
        for i in range(shared, len(held)):
            wire = wire_of(held[i])
            wires.append(wire)
            if isinstance(wire.get("content"), list) or isinstance(wire.get("tool_calls"), list):
                deep.append(i)
        self._last = _List(held, ids, wires, deep)
        out = list(map(dict.copy, wires))
        for i in deep:
            out[i] = copy_wire(wires[i])
        return out

    def retain(self, keep: set[int]) -> None:
        """Forget the last list unless every message of it is in ``keep`` (ids)."""
        if self._last is not None and not keep.issuperset(self._last.ids):
            self._last = None


class LastBody:
    """The last body's joined message JSON; ``build`` the next one from it."""

    def __init__(self) -> None:
        self._last: _Body | None = None
        self.looked_up = 0  # messages whose JSON was joined (the rest: the last body's prefix)

    def build(self, messages: Sequence[Message], json_of: Callable[[Message], str]) -> str:
        """``",".join(json_of(m) for m in messages)``, the shared prefix's text reused."""
        last = self._last
        held, ids, shared = _shared(last, messages)
        head = last.text[: last.ends[shared]] if last is not None else ""
        ends = last.ends[: shared + 1] if last is not None else [0]
        pieces = [json_of(m) for m in held[shared:]]
        self.looked_up += len(pieces)
        for piece in pieces:
            ends.append(ends[-1] + len(piece) + (1 if len(ends) > 1 else 0))
        text = head + ("," if head and pieces else "") + ",".join(pieces)
        self._last = _Body(held, ids, text, ends)
        return text

    def retain(self, keep: set[int]) -> None:
        """Forget the last body unless every message of it is in ``keep`` (ids)."""
        if self._last is not None and not keep.issuperset(self._last.ids):
            self._last = None
