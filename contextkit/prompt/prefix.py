"""Prefix-cache probe: how much of each request body repeats the previous one byte for byte.

Provider prompt caches reuse the longest shared *prefix* of consecutive requests, so an
append-only history keeps 100% of the previous body (up to the closing ``]}``) while a compaction
that rewrites an early message throws the cache away. ``shared_prefix`` measures the shared
prefix of two bodies; ``PrefixProbe`` keeps the previous body and reports, per request, the shared
bytes and their share of the previous request (the figures of ``RequestEvent.prefix_shared_bytes``
and ``RequestEvent.prefix_share``).

Pure. Bodies of several MB are compared with ``bytes.startswith`` at offsets (``common_bytes`` of
``sizing/lastbuilt.py``, which also compares a body's pieces), never a Python loop over bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from contextkit.sizing.lastbuilt import common_bytes

__all__ = ["PrefixProbe", "PrefixSample", "is_append_only", "shared_prefix"]


def _as_bytes(body: bytes | bytearray | memoryview | str, what: str) -> bytes | bytearray | memoryview:
    if isinstance(body, str):
        # the wire form: litellm/httpx send the JSON body as UTF-8
        return body.encode("utf-8", "surrogatepass")
    if isinstance(body, bytes | bytearray | memoryview):
        return body
    raise TypeError(f"{what} must be bytes or str (the request body), got {type(body).__name__}")


def shared_prefix(prev_body: bytes | str, body: bytes | str) -> int:
    """Length in bytes of the longest common prefix of two request bodies.

    ``str`` bodies are measured as their UTF-8 encoding (the bytes actually sent), so the result
    may end inside a multi-byte character; that is what a byte-level cache sees too.
    """
    return common_bytes(bytes(_as_bytes(prev_body, "prev_body")), bytes(_as_bytes(body, "body")))


@dataclass(frozen=True, slots=True)
class PrefixSample:
    """One probe reading: ``share`` is ``shared_bytes / previous_bytes``, ``None`` when there is no
    previous request (or it was empty)."""

    shared_bytes: int
    share: float | None
    body_bytes: int
    previous_bytes: int | None
    append_only: bool | None = None  # the previous body, still open, is a prefix of this one

    @classmethod
    def of(cls, body_bytes: int, previous_bytes: int | None, shared_bytes: int, closing: int = 2) -> PrefixSample:
        """The reading for a body of ``body_bytes`` that shares ``shared_bytes`` with the previous
        body of ``previous_bytes`` (None: there was none), whose last ``closing`` bytes close its
        list (2 for a request body's ``]}``)."""
        if previous_bytes is None:
            return cls(shared_bytes=0, share=None, body_bytes=body_bytes, previous_bytes=None)
        return cls(
            shared_bytes=shared_bytes,
            share=shared_bytes / previous_bytes if previous_bytes else None,
            body_bytes=body_bytes,
            previous_bytes=previous_bytes,
            append_only=shared_bytes >= previous_bytes - closing,
        )

    @property
    def cache_break(self) -> bool:
        """This request does not extend the previous one: a provider's prompt cache is lost from
        the first differing byte on (False for the first request)."""
        return self.append_only is False


def _closing(body: bytes) -> int:
    """Bytes that close a JSON body's trailing list (``]}`` of ``{"tools": ..., "messages": [...]}``):
    a request that appends messages differs from the previous one only from there on."""
    return 2 if body.endswith(b"]}") else 0


def is_append_only(prev_body: bytes | str, body: bytes | str) -> bool:
    """Whether ``body`` extends ``prev_body`` (equal, or more list items appended before its close)."""
    prev = bytes(_as_bytes(prev_body, "prev_body"))
    return shared_prefix(prev, body) >= len(prev) - _closing(prev)


class PrefixProbe:
    """Feed every request body in order; each call returns the shared prefix with the previous one.

    Keeps only the previous body. Not thread-safe by design: one probe per session, fed from the
    session's request path. ``reset()`` forgets the previous body (e.g. after loading a session).
    """

    def __init__(self) -> None:
        self._previous: bytes | None = None

    def feed(self, body: bytes | str) -> PrefixSample:
        data = bytes(_as_bytes(body, "body"))
        previous = self._previous
        self._previous = data
        if previous is None:
            return PrefixSample.of(len(data), None, 0)
        return PrefixSample.of(len(data), len(previous), shared_prefix(previous, data), _closing(previous))

    __call__ = feed

    def reset(self) -> None:
        self._previous = None

    @property
    def previous_bytes(self) -> int | None:
        return None if self._previous is None else len(self._previous)
