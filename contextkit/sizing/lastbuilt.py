"""What the meter built for the last request, reused for the prefix the next one shares.

The turn flow hands litellm a list of wire dicts and compares every request body with the one
before (the bytes a provider's prompt cache can reuse); a request usually repeats the last one and
adds a few messages. ``LastList`` keeps the last list's cached wire dicts and the copies it handed
out, and ``LastBody`` the last body's JSON pieces and their sizes, each with a copy of its messages:
the longest shared prefix is found by comparing lists in C (object by object, the same object equal
at once; an equal copy has the same wire form), and only the messages after it are looked up.

The copies handed out for that prefix are handed out again, so a request copies only its new
messages. A receiver may write to its copies (litellm's message validation sets an assistant
message's ``tool_calls`` to a copy of itself), so each copy, and each list and dict nested in it,
notes a write that changes its value: writing an equal value keeps the copy's own (compared there
and then, while the receiver holds the message), any other write notes the copy's position, and the
next list copies those positions anew. Checking every copy of the prefix instead (one comparison in
C per request) read every message of the history on every request: a few hundred microseconds per
request at 700 messages, the memory reads of objects the receiver's own work had pushed out of
the processor's caches.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, SupportsIndex, TypeVar

from contextkit.messages import Message

__all__ = ["LastBody", "LastList", "common_bytes", "common_prefix", "fresh", "prefix_copy"]


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Length of the longest common prefix of two tuples, by slice comparisons (C loops; a message is
    equal to itself without a look at its fields): the whole of the shorter one first (a history
    appended to), else a binary search. Tuples of messages rather than lists of their ids: an id
    list costs an int object per message, several times the comparison itself."""
    n = min(len(a), len(b))
    # no slice of the one that is already n long: a slice writes to every object it holds
    if (a if len(a) == n else a[:n]) == (b if len(b) == n else b[:n]):
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


def _kind(value: Any) -> type:
    return dict if isinstance(value, dict) else list if isinstance(value, list) else type(value)


class _Noting:
    """What a noted dict and a noted list share: ``mark`` (the notes of the list the copy was handed
    out in, and its position there) and copies that are plain (a copy the receiver makes is its own,
    and copying or pickling one never drags the notes along)."""

    __slots__ = ()
    mark: tuple[list[int], int]
    _plain: type

    def _note(self) -> None:
        self.mark[0].append(self.mark[1])

    def __copy__(self) -> Any:
        return self._plain(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        import copy

        return copy.deepcopy(self._plain(self), memo)

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        return self._plain, (self._plain(self),)


def _noting(write: Callable[..., Any]) -> Callable[..., Any]:
    """``write`` (a method of dict or list that may change the object), noting the copy first."""

    def noting(self: _Noting, *args: Any, **kwargs: Any) -> Any:
        self._note()
        return write(self, *args, **kwargs)

    noting.__name__ = noting.__qualname__ = write.__name__
    return noting


class _Noted(_Noting, dict):  # type: ignore[type-arg]
    """A copy of a wire dict handed to a receiver: a write that changes its value notes the copy's
    position in the list it was handed out in, so the next list copies it anew; writing an equal
    value keeps this copy's own (see the module's words)."""

    __slots__ = ("mark",)
    _plain = dict

    def __setitem__(self, key: Any, value: Any) -> None:
        if key in self:
            held = dict.__getitem__(self, key)
            if _kind(held) is _kind(value) and held == value:  # (1 == True, yet their JSON differs)
                return  # the same value: this copy's own (still noted when written to) stays
        self._note()
        dict.__setitem__(self, key, value)

    __delitem__ = _noting(dict.__delitem__)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self._note()
        return dict.setdefault(self, key, default)

    pop = _noting(dict.pop)
    popitem = _noting(dict.popitem)
    clear = _noting(dict.clear)
    update = _noting(dict.update)
    __ior__ = _noting(dict.__ior__)


class _NotedList(_Noting, list):  # type: ignore[type-arg]
    """A list nested in a handed-out copy (tool calls, content blocks): any write notes the copy."""

    __slots__ = ("mark",)
    _plain = list

    __setitem__ = _noting(list.__setitem__)
    __delitem__ = _noting(list.__delitem__)
    __iadd__ = _noting(list.__iadd__)
    __imul__ = _noting(list.__imul__)
    append = _noting(list.append)
    extend = _noting(list.extend)
    insert = _noting(list.insert)
    pop = _noting(list.pop)
    remove = _noting(list.remove)
    clear = _noting(list.clear)
    sort = _noting(list.sort)
    reverse = _noting(list.reverse)


def _noted(obj: Any, mark: tuple[list[int], int]) -> Any:
    """``obj`` (a wire dict) copied as noted dicts and lists, all of them noting ``mark``."""
    if isinstance(obj, dict):
        copy: Any = _Noted({k: _noted(v, mark) for k, v in obj.items()})
    elif isinstance(obj, list):
        copy = _NotedList(_noted(v, mark) for v in obj)
    else:
        return obj
    copy.mark = mark
    return copy


def prefix_copy(last: list[Any], items: Sequence[Any]) -> tuple[list[Any], int]:
    """(a list copy of ``items``, the length of the prefix it shares with ``last``), with one copy
    when ``last`` is all of that prefix (a history that only grew since): the copy of its first
    ``len(last)`` items is compared with ``last`` (in C, the same object equal at once) and then
    extended. A copy writes to every object it holds (its reference count): at hundreds of messages
    that, not the comparison, is the cost, so it is made once."""
    n = len(last)
    if n <= len(items):
        held = items[:n] if type(items) is list else list(items[:n])
        if held == last:
            held.extend(items[n:])
            return held, n
    held = list(items)
    return held, common_prefix(last, held)


@dataclass(frozen=True, slots=True)
class _Seen:
    messages: list[Message]  # a copy, never changed


def _shared(last: _Seen | None, messages: Sequence[Message]) -> tuple[list[Message], int]:
    return prefix_copy(last.messages, messages) if last is not None else (list(messages), 0)


_Items = TypeVar("_Items", list[Any], "array[int]")


def _kept(items: _Items, n: int) -> _Items:
    """The first ``n`` of the last build's ``items``, to be appended to: the list itself when that is
    all of it (the build that made it is replaced), so a history that only grew copies nothing."""
    return items if n == len(items) else items[:n]


@dataclass(frozen=True, slots=True)
class _List(_Seen):
    wires: list[dict[str, Any]]  # the cached wire dicts
    handed: list[dict[str, Any]]  # the copies handed out (``_Noted``: a receiver's writes are noted)


@dataclass(frozen=True, slots=True)
class _Body(_Seen):
    head: str  # the body before its messages: ``{"tools":...,"messages":[``
    head_bytes: int
    pieces: list[str]  # each message's JSON
    ends: array[int]  # ``ends[i]``: the UTF-8 bytes of the first ``i`` pieces joined with commas

    @property
    def size(self) -> int:
        return self.head_bytes + self.ends[-1] + 2  # and the closing ``]}``


class LastList:
    """The last wire list handed out; ``build`` the next one from it."""

    def __init__(self) -> None:
        self._last: _List | None = None
        self._notes: list[int] = []  # positions of handed-out copies a receiver wrote to since the last build
        self.looked_up = 0  # messages whose wire dict was looked up (the rest: the last list's prefix)
        self.compared = 0  # copies of the shared prefix compared with their wire dicts (a receiver wrote to them)
        self.recopied = 0  # of those, copied anew (the write changed them)

    def build(self, messages: Sequence[Message], wire_of: Callable[[Message], dict[str, Any]]) -> list[dict[str, Any]]:
        """Copies of ``wire_of(m)`` for every message (the receiver may change them), in a new list.
        For the prefix shared with the last list the copies handed out then are handed out again,
        but those a receiver changed since are copied anew."""
        last = self._last
        held, shared = _shared(last, messages)
        wires = _kept(last.wires, shared) if last is not None else []
        out = _kept(last.handed, shared) if last is not None else []
        # the notes list itself stays: every copy handed out holds it
        changed, self._notes[:] = set(self._notes), []
        for i in changed:
            if i < shared:
                self.compared += 1
                if out[i] != wires[i]:
                    out[i] = _noted(wires[i], (self._notes, i))
                    self.recopied += 1
        self.looked_up += len(held) - shared
        for i in range(shared, len(held)):
            wire = wire_of(held[i])
            wires.append(wire)
            out.append(_noted(wire, (self._notes, i)))
        self._last = _List(held, wires, out)
        return list(out)

    def retain(self, keep: set[int]) -> None:
        """Forget the last list unless every message of it is in ``keep`` (ids)."""
        if self._last is not None and not keep.issuperset(map(id, self._last.messages)):
            self._last = None


class LastBody:
    """The last request body ``step`` went to: its messages' JSON pieces and where each prefix of
    them ends, in bytes. The next body is compared with it from those figures: the bytes the two
    share (what a provider's prompt cache can reuse) without joining either body, so a request
    serialises and reads only what it adds."""

    def __init__(self) -> None:
        self._last: _Body | None = None
        self.looked_up = 0  # messages whose JSON a step looked up (the rest: the last body's prefix)

    def build(self, messages: Sequence[Message], json_of: Callable[[Message], str]) -> str:
        """``",".join(json_of(m) for m in messages)``, the shared prefix's pieces reused. Leaves the
        last body as it was."""
        last = self._last
        held, shared = _shared(last, messages)
        return ",".join([*(last.pieces[:shared] if last is not None else ()), *map(json_of, held[shared:])])

    def step(
        self, messages: Sequence[Message], head: str, json_of: Callable[[Message], str]
    ) -> tuple[int, int | None, int]:
        """The body ``head`` + the JSON of ``messages`` + ``]}`` becomes the last one: its bytes, the
        last one's bytes (None for the first) and the bytes the two share from their start. Only the
        messages after the prefix shared with the last body are looked up."""
        last = self._last
        held, shared = _shared(last, messages)
        added = [json_of(m) for m in held[shared:]]
        self.looked_up += len(added)
        if last is None:
            head_bytes, pieces, ends, previous, common = _utf8_bytes(head), [], array("q", [0]), None, 0
        else:
            head_bytes = last.head_bytes if last.head == head else _utf8_bytes(head)
            previous = last.size
            # from the last body's figures, before its lists are reused for this one
            common = _shared_bytes(last, head, head_bytes, shared, len(held), added)
            pieces, ends = _kept(last.pieces, shared), _kept(last.ends, shared + 1)
        for piece in added:
            ends.append(ends[-1] + _utf8_bytes(piece) + (1 if len(ends) > 1 else 0))
        pieces += added
        self._last = _Body(held, head, head_bytes, pieces, ends)
        return self._last.size, previous, common


def _utf8_bytes(text: str) -> int:
    """The UTF-8 bytes of ``text``: its length when it is ASCII (known without a walk)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


_CHUNK = 1 << 16  # 64 KiB: big enough that the scan is memcmp-bound, small enough to bound the search


def common_bytes(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of two byte strings, by ``bytes.startswith`` at offsets
    (one memcmp each, without copying ``b``; a memoryview comparison goes item by item): the whole
    of the shorter one first (a body appended to), else chunk by chunk, then a binary search inside
    the first differing chunk."""
    limit = min(len(a), len(b))
    if b.startswith(a[:limit]) if len(a) <= len(b) else a.startswith(b):
        return limit
    start = 0
    while start < limit:
        end = min(start + _CHUNK, limit)
        if not b.startswith(a[start:end], start):
            break
        start = end
    else:
        return limit
    lo, hi = start, min(start + _CHUNK, limit)  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if b.startswith(a[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    return lo


def _common_start(a: str, b: str) -> int:
    """The bytes the UTF-8 forms of ``a`` and ``b`` share from their start (bytes, not characters:
    two different characters may share a leading byte, as a cache comparing bytes sees)."""
    return common_bytes(a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass"))


def _shared_bytes(last: _Body, head: str, head_bytes: int, shared: int, total: int, added: list[str]) -> int:
    """The bytes the body of ``total`` messages (the first ``shared`` those of ``last``, then the
    pieces ``added``) shares with ``last`` from their start. A piece is a whole JSON object, so two
    different pieces differ within the shorter one, and two bodies differ within the first pieces
    that differ."""
    if last.head != head:  # other tools: the bodies part within the heads (each ends its tools list)
        return _common_start(last.head, head)
    k, m = shared, len(last.pieces)
    # messages that differ only in what is not sent (an equal copy with other flags) send the same JSON
    while k < m and k < total and last.pieces[k] == added[k - shared]:
        k += 1
    if k == m:  # the last body's pieces all lead this one: equal, or this one goes on after them
        return last.size if k == total else last.size - 2
    if k == total:  # this one's pieces all lead the last one, which goes on after them
        return head_bytes + last.ends[k]
    return head_bytes + last.ends[k] + (1 if k else 0) + _common_start(last.pieces[k], added[k - shared])
