"""Managed conversations for callers that resend their whole history, and the litellm drop-in.

``Conversations`` keeps one ``Session`` per client conversation. A call names its conversation
(``conversation_id=``) or is recognised by its messages: the conversation whose messages seen so
far (their fingerprints, ``contextkit.engine.host.fingerprint``) the call's history starts with,
the longest such; none → a new conversation. Each call is one host-driven turn
(``Session.begin_from``): contextkit decides what to send (compacted, measured, within the limits in
force) and what a failure means; this module makes the calls through ``contextkit.backend``.

``completion`` / ``acompletion`` take litellm's arguments and return litellm's response (a
``stream=True`` call returns an iterator of litellm's chunks, replayed from the request that
answered: the turn is decided - retried, recovered - before the first chunk reaches the caller).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from contextkit import backend
from contextkit.engine.driver import parse_reply
from contextkit.engine.effects import CallModel, Reply
from contextkit.engine.host import Decision, HostTurn, fingerprint
from contextkit.errors import ConfigError, InvalidMessageError, UsageError
from contextkit.events import EventLog
from contextkit.integrations.host_loop import adrive, drive, reply_of
from contextkit.messages import from_wire
from contextkit.session.core import Session
from contextkit.settings import Limits

__all__ = ["Conversations", "acompletion", "completion", "default_conversations"]

# keywords of a litellm call that belong to one request, not to the conversation's session
_PER_CALL = ("tools", "tool_choice", "parallel_tool_calls", "stream", "stream_options", "functions", "function_call")
DEFAULT_MAX_CONVERSATIONS = 256


class Conversations:
    """One managed ``Session`` per client conversation (the least recently used beyond ``max_conversations``
    are closed). ``limits``, ``archive``, ``events`` and ``session_options`` apply to every session it opens:
    one ``EventLog`` (given or its own) receives every conversation's events, so one dashboard can watch them.
    """

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        archive: Any = None,
        events: EventLog | None = None,
        max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
        **session_options: Any,
    ) -> None:
        if isinstance(max_conversations, bool) or not isinstance(max_conversations, int) or max_conversations < 1:
            raise ConfigError(f"max_conversations must be a whole number >= 1, got {max_conversations!r}")
        self.limits = limits
        self.archive = archive
        self.events = events if events is not None else EventLog()
        self.max_conversations = max_conversations
        self.session_options = session_options
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()
        self._count = 0

    # lookup -----------------------------------------------------------------------------------------
    def session_for(self, model: str, messages: Sequence[Any], *, conversation_id: str | None = None,
                    **litellm_kwargs: Any) -> Session:  # fmt: skip
        """The conversation these messages continue (or the one named), else a new one."""
        prints = [fingerprint(from_wire(m, index=i)) for i, m in enumerate(messages)]
        with self._lock:
            if conversation_id is not None:
                session = self._sessions.get(conversation_id)
                if session is None:
                    session = self._open(model, conversation_id, litellm_kwargs)
            else:
                session = self._match(prints, model) or self._open(model, None, litellm_kwargs)
            self._sessions.move_to_end(session.session_id)
            return session

    def _match(self, prints: list[str], model: str) -> Session | None:
        best: Session | None = None
        best_len = 0
        for session in self._sessions.values():
            seen = session.host_seen
            extends = seen and len(seen) < len(prints) and prints[: len(seen)] == seen
            if extends and session.model == model and len(seen) > best_len and not session._busy:
                best, best_len = session, len(seen)
        return best

    def _open(self, model: str, name: str | None, litellm_kwargs: Mapping[str, Any]) -> Session:
        self._count += 1
        session_id = name or f"conv-{self._count:04d}-{time.strftime('%H%M%S')}"
        options = {"status": True, **self.session_options}
        kwargs = {k: v for k, v in litellm_kwargs.items() if k not in _PER_CALL}
        # one Archive object shared by many sessions gives each a scope of its own (session.config.own_archive)
        session = Session(model, limits=self.limits, archive=self.archive, events=self.events, session_id=session_id,
                          **options, **kwargs)  # fmt: skip
        self._sessions[session_id] = session
        while len(self._sessions) > self.max_conversations:
            _, oldest = self._sessions.popitem(last=False)
            if not oldest._busy:
                oldest.close()
        return session

    @property
    def sessions(self) -> list[Session]:
        """The conversations kept, oldest first."""
        with self._lock:
            return list(self._sessions.values())

    def close(self) -> None:
        """Close every conversation not in a turn (one still answering a client closes with it)."""
        with self._lock:
            for session in self._sessions.values():
                with contextlib.suppress(UsageError):  # a turn still running: its session stays open
                    session.close()
            self._sessions.clear()

    # calls ------------------------------------------------------------------------------------------
    def completion(self, model: str, messages: Sequence[Any], *, conversation_id: str | None = None,
                   **kwargs: Any) -> Any:  # fmt: skip
        """``litellm.completion`` through the conversation's session (see the module docstring)."""
        session, turn, stream, kw = self._begin(model, messages, conversation_id, kwargs)
        decision, last = drive(
            turn, lambda request: _call(session, request, kw, stream), lambda got, request: _reply(session, got, request, stream)
        )
        return _result(decision, last, stream)

    async def acompletion(self, model: str, messages: Sequence[Any], *, conversation_id: str | None = None,
                          **kwargs: Any) -> Any:  # fmt: skip
        """``litellm.acompletion`` through the conversation's session."""
        session, turn, stream, kw = self._begin(model, messages, conversation_id, kwargs)
        decision, last = await adrive(
            turn, lambda request: _acall(session, request, kw, stream), lambda got, request: _reply(session, got, request, stream)
        )
        result = _result(decision, last, stream)
        return _aiter(result) if stream else result

    def _begin(
        self, model: str, messages: Any, conversation_id: str | None, kwargs: dict[str, Any]
    ) -> tuple[Session, HostTurn, bool, dict[str, Any]]:
        if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
            raise InvalidMessageError(
                f"messages must be a list of chat messages (dicts with 'role' and 'content'), got {type(messages).__name__}"
            )
        if conversation_id is not None and (not isinstance(conversation_id, str) or not conversation_id):
            raise ConfigError(f"conversation_id must be a non-empty string, got {conversation_id!r}")
        stream = bool(kwargs.pop("stream", False))
        kwargs.pop("stream_options", None)
        tools = kwargs.pop("tools", None)
        session = self.session_for(model, messages, conversation_id=conversation_id, **kwargs)
        params = {k: v for k, v in kwargs.items() if k not in _PER_CALL or k == "tool_choice"}
        turn = session.begin_from(messages, tools=tools or [], params=params)
        return session, turn, stream, kwargs


def _arguments(session: Session, request: CallModel, kwargs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """litellm's keywords for ``request`` (the caller's, the turn's parameters, its tools) and the timeout."""
    call = {**kwargs, **request.params}
    if request.tools:
        call["tools"] = request.tools
    else:
        call.pop("tool_choice", None)
    return call, call.pop("timeout", session.limits.request_timeout)


def _call(session: Session, request: CallModel, kwargs: dict[str, Any], stream: bool) -> Any:
    call, timeout = _arguments(session, request, kwargs)
    if stream:
        chunks = list(backend.completion(session.model, request.messages, timeout=timeout, stream=True, **call))
        return chunks
    return backend.completion(session.model, request.messages, timeout=timeout, **call)


async def _acall(session: Session, request: CallModel, kwargs: dict[str, Any], stream: bool) -> Any:
    call, timeout = _arguments(session, request, kwargs)
    if stream:
        response = await backend.acompletion(session.model, request.messages, timeout=timeout, stream=True, **call)
        return [chunk async for chunk in response]
    return await backend.acompletion(session.model, request.messages, timeout=timeout, **call)


def _reply(session: Session, response: Any, request: CallModel, stream: bool) -> Any:
    if stream:
        built = backend.stream_chunk_builder(response, messages=request.messages) if response else None
        if built is None:
            raise backend_empty_stream()
        response = built
    return parse_reply(response, session.model, 0.0, price_as=session.price_as)


def backend_empty_stream() -> Exception:
    from contextkit.errors import ProviderError

    return ProviderError("the provider ended the stream without content, tool call or finish reason")


def _result(decision: Decision, last: Any, stream: bool) -> Any:
    reply = reply_of(decision)
    if stream:
        return iter(_replay(last, reply))
    _patch(last, reply)
    return last


def _patch(response: Any, reply: Reply) -> None:
    """The caller sees the turn's answer: parts joined across continuations, ``recall`` calls
    (served by contextkit) left out of the calls it must run."""
    try:
        message = response.choices[0].message
    except (AttributeError, IndexError):
        return
    if reply.text and message.content != reply.text:
        message.content = reply.text
    calls = getattr(message, "tool_calls", None)
    if calls:
        kept = {c.id for c in reply.tool_calls_made}
        message.tool_calls = [c for c in calls if c.id in kept] or None


def _replay(chunks: list[Any], reply: Reply) -> Iterator[Any]:
    kept = {c.id for c in reply.tool_calls_made}
    for chunk in chunks:
        try:
            delta = chunk.choices[0].delta
            calls = getattr(delta, "tool_calls", None)
            if calls and kept:
                delta.tool_calls = [c for c in calls if c.id is None or c.id in kept] or None
        except (AttributeError, IndexError):
            pass
        yield chunk


async def _aiter(chunks: Iterator[Any]) -> AsyncIterator[Any]:
    for chunk in chunks:
        yield chunk


_DEFAULT: Conversations | None = None
_DEFAULT_LOCK = threading.Lock()


def default_conversations() -> Conversations:
    """The conversations ``contextkit.completion`` keeps (created on first use, with the default limits
    and archive); build a ``Conversations`` of your own for other limits, an archive, or a dashboard."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = Conversations()
        return _DEFAULT


def completion(model: str, messages: Sequence[Any], *, conversation_id: str | None = None, **kwargs: Any) -> Any:
    """Drop-in for ``litellm.completion`` (see the module docstring)."""
    return default_conversations().completion(model, messages, conversation_id=conversation_id, **kwargs)


async def acompletion(model: str, messages: Sequence[Any], *, conversation_id: str | None = None,
                      **kwargs: Any) -> Any:  # fmt: skip
    """Drop-in for ``litellm.acompletion``."""
    return await default_conversations().acompletion(model, messages, conversation_id=conversation_id, **kwargs)
