"""Request bytes on the Anthropic route: from the body litellm's own transformation builds.

Each message is cached as a ``_Skeleton`` (long texts cut to their ends around a numbered
stand-in), litellm transforms the skeletons, and each stand-in found in that body adds the escaped
size of the text it replaced. Every decision litellm makes about the request (merged turns, the
system prompt apart, parsed tool-call arguments, an added placeholder tool) is in the figure; only
the long texts are not handed to it again. A stand-in litellm does not pass through (it never has)
makes that request measured from the real messages instead.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextkit.messages import Message
from contextkit.sizing.lastbuilt import fresh
from contextkit.sizing.wire import _NOT_SENT, _provider_bytes, _wire_of, dumps, sent_message

__all__ = ["AnthropicBodies"]

# The stand-in of a long text on the Anthropic route: letters and digits only (JSON and base64
# leave them as they are), a multiple of 4 long (a base64 image payload stays valid), a salt per
# process so a text cannot contain another message's stand-in by accident.
_SALT = os.urandom(3).hex()
_MARK = re.compile(rf"Ck{_SALT}(\d{{8}})".encode())
_KEEP = 8  # characters kept at each end of a replaced text: litellm strips, checks emptiness there
_LONG = 64  # texts shorter than this are sent to litellm as they are
_MEMO = 16  # whole-request results kept (the same history is measured several times per turn)


@dataclass(frozen=True, slots=True)
class _Skeleton:
    """A message as litellm sees it, with the middle of each long text replaced by a stand-in;
    ``marks`` maps each stand-in's number to the bytes the real middle adds beyond it."""

    wire: dict[str, Any]
    marks: tuple[tuple[int, int], ...]
    fetched: bool = False  # an http:// image, which litellm downloads into the body when it sends


def _ascii_len(text: str) -> int:
    """Bytes of ``text`` inside an ASCII-escaped JSON string (what ``json.dumps`` writes)."""
    return len(json.dumps(text)) - 2


class AnthropicBodies:
    """The Anthropic route's request bytes for a ``RequestMeter`` (which shares its lock): skeletons
    per message, and the last few whole requests measured."""

    def __init__(self, model: str, lock: threading.Lock) -> None:
        self.model = model
        self._lock = lock
        self._skeletons: dict[Message, _Skeleton] = {}
        self._memo: OrderedDict[Any, int | None] = OrderedDict()
        self._next_mark = 0
        self.fallbacks = 0  # requests measured from the real messages

    @property
    def entries(self) -> int:
        return len(self._skeletons)

    def retain(self, keep: set[int]) -> None:
        """Forget the skeletons of messages not in ``keep`` (ids) and every whole request measured.
        The caller holds the lock."""
        for message in [m for m in self._skeletons if id(m) not in keep]:
            del self._skeletons[message]
        self._memo.clear()

    def _skeleton(self, message: Message) -> _Skeleton:
        with self._lock:
            hit = self._skeletons.get(message)
        if hit is not None:
            return hit
        wire = sent_message(message)
        marks: list[tuple[int, int]] = []

        def cut(text: Any, *, payload: bool = False) -> Any:
            if not isinstance(text, str) or len(text) < _LONG:
                return text
            head_end = text.index(",") + 1 + _KEEP if payload and "," in text else _KEEP
            middle = text[head_end:-_KEEP]
            if not middle or text[:head_end].isspace() or text[-_KEEP:].isspace():
                return text  # litellm strips or drops blank ends: give it the real text
            with self._lock:
                number, self._next_mark = self._next_mark, self._next_mark + 1
            mark = f"Ck{_SALT}{number % 10**8:08d}"
            marks.append((number % 10**8, _ascii_len(middle) - len(mark)))
            return text[:head_end] + mark + text[-_KEEP:]

        content = wire.get("content")
        fetched = any(str(url).startswith("http://") for url in message.images)
        if isinstance(content, str):
            wire["content"] = cut(content)
        elif isinstance(content, list):
            parts: list[Any] = []
            for part in content:
                if isinstance(part, Mapping) and part.get("type") == "text":
                    part = {**part, "text": cut(part.get("text"))}
                elif isinstance(part, Mapping) and part.get("type") == "image_url":
                    url = part.get("image_url")
                    if isinstance(url, Mapping) and str(url.get("url", "")).startswith("data:"):
                        part = {**part, "image_url": {**url, "url": cut(url["url"], payload=True)}}
                parts.append(part)
            wire["content"] = parts
        skeleton = _Skeleton(wire, tuple(marks), fetched)
        with self._lock:
            self._skeletons[message] = skeleton
        return skeleton

    def built_bytes(
        self,
        history: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any],
        marked: tuple[tuple[int, ...], str] | None,
    ) -> int | None:
        """Bytes of the Anthropic body litellm builds for ``history`` (None: it builds none)."""
        key = (
            tuple(history),
            dumps(list(tools)) if tools else "",
            json.dumps(params, sort_keys=True, default=repr),
            marked,
        )
        with self._lock:
            if key in self._memo:
                self._memo.move_to_end(key)
                return self._memo[key]
        skeletons = [self._skeleton(m) for m in history]
        if any(s.fetched for s in skeletons):
            # measuring must not download: the image's size is unknown until litellm fetches it
            return None
        positions = set(marked[0]) if marked else set()
        control = json.loads(marked[1]) if marked else None
        wire = [
            {**fresh(s.wire), "cache_control": dict(control)} if i in positions and control else fresh(s.wire)
            for i, s in enumerate(skeletons)
        ]
        size = None
        if history:
            size = self._from_skeletons(wire, skeletons, tools, params)
            if size is None:
                real = [_wire_of(m) for m in history]
                if control:
                    real = [{**w, "cache_control": dict(control)} if i in positions else w for i, w in enumerate(real)]
                size = _provider_bytes(self.model, real, tools, params)
        with self._lock:
            self._memo[key] = size
            if len(self._memo) > _MEMO:
                self._memo.popitem(last=False)
        return size

    def _from_skeletons(
        self,
        wire: list[dict[str, Any]],
        skeletons: Sequence[_Skeleton],
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any],
    ) -> int | None:
        from contextkit import backend

        sent = {k: v for k, v in params.items() if k not in _NOT_SENT and v is not None}
        try:
            body = backend.provider_body(
                self.model, wire, tools=[dict(t) for t in tools] if tools else None, params=sent, copy_messages=False
            )
        except Exception:  # noqa: BLE001 - measured from the real messages, which says why
            return None
        extra = {number: delta for s in skeletons for number, delta in s.marks}
        seen: set[int] = set()
        size = len(body)
        for found in _MARK.finditer(body):
            number = int(found.group(1))
            if number not in extra:
                return None
            seen.add(number)
            size += extra[number]
        if len(seen) != len(extra):
            with self._lock:
                self.fallbacks += 1
            return None
        return size
