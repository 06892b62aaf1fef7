"""``Session``: owns a history, an archive and an event log, and drives the turn flow.

The flow (``contextkit.engine.flow``) is written once; this module runs it synchronously (``send``),
asynchronously (``asend``) and while streaming (``stream``, ``astream``: ``contextkit.engine.streaming``),
executing the effects it yields: model calls through ``contextkit.backend`` (litellm), summaries,
tools, sleeps. Its constructor's checks are ``session.config``; the read-only views (stats, limits,
tool schemas, the next request's size) are mixed in from ``session.views``; manual compaction,
``rewind`` and ``reset_limits`` from ``session.controls``; saving and loading are ``session.persist``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from contextkit.archive import Archive
from contextkit.compaction.compactor import Compactor
from contextkit.compaction.summarizer import LiteLLMSummarizer
from contextkit.context_engines import parse_context_engine
from contextkit.engine.driver import EffectRunner, cancel
from contextkit.engine.effects import Reply
from contextkit.engine.flow import turn_flow
from contextkit.engine.host import fingerprint
from contextkit.engine.provider_edits import CONTEXT_MANAGEMENT, supports_provider_edits
from contextkit.engine.streaming import AsyncReplyStream, ReplyStream
from contextkit.errors import InvalidMessageError, UsageError
from contextkit.events import ArchiveEvent, EventLog, NoticeEvent
from contextkit.limits.context import FlowContext, emit_history
from contextkit.limits.state import SessionState
from contextkit.messages import Message, from_wire
from contextkit.session.config import (
    StatusSink,
    cache_breakpoints_for,
    check_model,
    check_price_as,
    context_engine_for,
    context_window,
    default_status,
    flush_sink,
    own_archive,
    send_status,
    session_fallbacks,
    session_limits,
    session_tools,
    status_sink,
    stderr_status,
    system_message,
    with_tool_index,
    workbench_path,
)
from contextkit.session.controls import SessionControls
from contextkit.session.hosting import HostingMixin
from contextkit.session.persist import load_session, save_session
from contextkit.session.views import SessionViews
from contextkit.settings import Limits
from contextkit.sizing import RequestMeter, body_params
from contextkit.tools import Tool

__all__ = ["Session", "default_status", "stderr_status"]


def initial_history(history: Sequence[Any] | None) -> list[Message]:
    """``Session(history=...)`` checked before anything is opened: a bad message names its index."""
    if history is None:
        return []
    if isinstance(history, str | bytes | dict | Message) or not isinstance(history, Sequence):
        raise InvalidMessageError(
            f"history= takes a list of messages (dicts or Message), got {type(history).__name__}; "
            "wrap a single message in a list"
        )
    return [from_wire(m, index=i) for i, m in enumerate(history)]


class Session(SessionViews, SessionControls, HostingMixin):
    """A long chat or agent conversation kept inside the window and the gateway's body cap.

    ``Session(model, system=..., limits=Limits(max_payload="128KB"), archive=..., tools=[fn, ...],
    api_base=..., api_key=...)``. Any other keyword goes to litellm unchanged, except ``timeout``
    (sets ``Limits.request_timeout``) and ``max_retries`` / ``num_retries`` (set ``Limits.max_retries``:
    contextkit does the retrying). ``limits`` fields you set win over ``CONTEXTKIT_*``; the others come
    from the environment. An ``Archive`` given without a ``session_id`` stores under this session's id.

    ``price_as="anthropic/claude-sonnet-4-5"`` prices every request as that model from litellm's cost
    map (cache reads and writes at their own prices), so runs against the simulator give real-money
    figures. ``cache_breakpoints``: place Anthropic-style ``cache_control`` breakpoints (None: only
    for providers that need them - Anthropic, Claude on Bedrock/Vertex; see ``policy/breakpoints.py``).
    ``context_engine="mcp:<command or URL>"``: the summary stage asks that MCP server's
    ``context_compact`` first (``context_engines/mcp_engine.py``; the built-in summarizer answers
    when it errs, times out after ``Limits.context_engine_timeout`` or answers empty).
    ``fallbacks=["openai/gpt-4.1-mini", {"model": ..., "api_base": ...}]``: a turn whose model fails
    for a reason that is not size (still failing after the retries, overloaded, gone) moves to the
    next; ``fallback_on_overflow=True`` lets one with a larger window take an overflowing turn
    before compaction (``engine/fallback.py``). ``tool_index=True``: tools are sent as one line each
    (parameters without descriptions) plus a ``describe_tools`` tool with the full schemas, a smaller
    floor (``policy/tool_index.py``).

    ``history=[...]``: an existing conversation (dicts or ``Message``) to continue, after ``system``.
    A host that owns the loop drives turns with ``begin`` / ``begin_from`` (``session.hosting``).
    """

    def __init__(
        self,
        model: str,
        *,
        system: str | None = None,
        limits: Limits | None = None,
        archive: Archive | None = None,
        tools: Sequence[Callable[..., Any] | Tool] | None = None,
        session_id: str | None = None,
        status: StatusSink | bool | None = True,
        on_flush: Any = "workbench",
        events: EventLog | None = None,
        price_as: str | None = None,
        cache_breakpoints: bool | None = None,
        context_engine: str | None = None,
        fallbacks: Sequence[str | dict[str, Any]] | None = None,
        fallback_on_overflow: bool = False,
        tool_index: bool = False,
        history: Sequence[Any] | None = None,
        **litellm_kwargs: Any,
    ) -> None:
        check_model(model)
        initial = initial_history(history)
        check_price_as(price_as)
        parse_context_engine(context_engine)
        self.fallbacks = session_fallbacks(fallbacks)
        self.fallback_on_overflow = bool(fallback_on_overflow)
        self.price_as = price_as
        self.cache_breakpoints = cache_breakpoints_for(model, cache_breakpoints)
        self.model = model
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self._litellm_kwargs, self.limits = session_limits(limits, litellm_kwargs)
        self._closed = False
        self.archive, self._owns_archive = own_archive(archive, self.session_id)
        self.workbench_path = workbench_path(self.archive, self.session_id) if on_flush == "workbench" else None
        self.events = events if events is not None else EventLog()
        observe = getattr(self.archive, "observe", None)
        self._unobserve = observe(self._on_archived) if callable(observe) else None
        self._tools = session_tools(tools)
        self.tool_index = bool(tool_index) and bool(self._tools)
        if self.tool_index:
            self._tools = with_tool_index(self._tools)
        self._status = status_sink(status, self.session_id)
        self._lock = threading.RLock()
        self._busy = False  # a turn or compaction is running (guards re-entry from tools or interleaved streams)
        self._async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        window, source = context_window(model, self.limits)
        self._state = SessionState.create(model, self.session_id, self.limits, window, window_source=source)
        if system is not None:
            self._state.history.append(system_message(system))
        self._state.history.extend(initial)
        self._host_seen = [fingerprint(m) for m in initial]
        self._meter = RequestMeter(model)
        flush = flush_sink(on_flush, self.archive, self.session_id)
        self.compactor = Compactor(
            archive=self.archive,
            limits=self.limits,
            events=self.events,
            status=self._notify_status,
            on_flush=flush,
            session_id=self.session_id,
            turn=lambda: self._state.turn,
        )
        summary_model = self.limits.compact_model or model
        summary_kwargs = self._litellm_kwargs if summary_model == model else {}
        self.summarizer = LiteLLMSummarizer(summary_model, timeout=self.limits.summary_timeout, **summary_kwargs)
        if summary_model == model:
            self.summarizer.price_as = price_as
        self.context_engine = context_engine_for(context_engine, self.summarizer, self.limits, self._notify_status)
        if context_engine == "provider":
            if supports_provider_edits(model):
                # sent with every request (and measured into its bytes): the summarizer's copy is made above
                self._litellm_kwargs["context_management"] = copy.deepcopy(CONTEXT_MANAGEMENT)
            else:
                self._notify(
                    "provider_engine",
                    f"context_engine='provider': {model}'s provider has no server-side context editing that "
                    "contextkit can use (Anthropic's API has); the option is ignored for this session",
                    "info",
                )
        self._runner = EffectRunner(
            model,
            self._litellm_kwargs,
            tools=self._tools,
            summarizer=self.context_engine or self.summarizer,
            request_timeout=self.limits.request_timeout,
            price_as=price_as,
        )

    # conversation ---------------------------------------------------------------------------------
    def send(self, text: str | Message | Sequence[Any], *, max_rounds: int = 50) -> Reply:
        """Send a user message; run tools until the model answers; recover from rejections.

        A turn is a transaction: if it raises (a provider error, ``RecoveryFailedError``,
        ``PayloadFloorError``, Ctrl-C), the history is exactly what it was before the call.
        ``max_rounds`` is the most tool rounds the model may run in this turn.
        """
        with self._lock, self._turn("send"):
            flow = turn_flow(self._context(), self._user_messages(text), max_rounds=max_rounds)
            with self._closing(flow):
                return self._runner.drive(flow)

    async def asend(self, text: str | Message | Sequence[Any], *, max_rounds: int = 50) -> Reply:
        """Async ``send``; the same flow driven with ``acompletion`` and async tools."""
        # Turns of one session run one at a time: gather(s.asend(a), s.asend(b)) queues b behind a.
        async with self._async_lock():
            with self._lock, self._turn("asend"):
                flow = turn_flow(self._context(), self._user_messages(text), max_rounds=max_rounds)
                with self._closing(flow):
                    return await self._runner.adrive(flow)

    def stream(self, text: str | Message | Sequence[Any], *, max_rounds: int = 50) -> ReplyStream:
        """Stream the reply: text deltas as the provider sends them; the turn runs as in ``send``.

        ``for delta in session.stream("..."): print(delta, end="")``, then ``stream.reply``. A
        stream cut by a failure or by ``max_tokens`` is continued after recovery, never restarted:
        the concatenated deltas equal ``reply.text`` (for a turn with tool rounds, they are the
        rounds' text, each followed by a line break, then ``reply.text``). Leaving the loop early
        closes the provider stream and undoes the turn. See ``contextkit.engine.streaming``.
        """
        return ReplyStream(self, self._user_messages(text), max_rounds)

    def astream(self, text: str | Message | Sequence[Any], *, max_rounds: int = 50) -> AsyncReplyStream:
        """Async ``stream``: ``async for delta in session.astream("...")`` over ``acompletion(stream=True)``.

        Never blocks the event loop; many sessions can stream concurrently in one loop. Turns of
        one session run one at a time. ``await stream.aclose()`` or cancelling the task undoes the
        turn.
        """
        return AsyncReplyStream(self, self._user_messages(text), max_rounds)

    def add_messages(self, messages: Sequence[Any]) -> None:
        """Append existing messages (dicts or Message) to the history without a request."""
        if isinstance(messages, str | bytes | dict | Message) or not isinstance(messages, Sequence):
            raise InvalidMessageError(
                f"add_messages() takes a list of messages (dicts or Message), got {type(messages).__name__}"
            )
        # refused mid-turn (a stream not yet consumed, a tool): the turn's rollback would drop them
        with self._lock, self._turn("add_messages"):
            # validate every message before appending any: a bad one leaves the history untouched
            self._state.history.extend([from_wire(m, index=i) for i, m in enumerate(messages)])
            emit_history(self._context(), "user")

    # persistence ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write history, counters, limits and the archive reference to JSON (atomic replace).

        API keys and other litellm keyword arguments are never written. An in-memory archive is copied
        to ``<name>.archive.sqlite`` next to the file (with a warning), so loading finds every marker.
        """
        with self._lock, self._turn("save"):  # never a half-made turn on disk
            return save_session(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, archive: Archive | None = None, **kwargs: Any) -> Session:
        """Resume a saved session. Pass api_key/api_base again (they are never saved)."""
        session = load_session(cls, path, archive=archive, **kwargs)
        emit_history(session._context(), "load")
        return session

    # lifecycle ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Let go of what the session holds: the archive it opened itself (the default one, or a
        view of its own; an archive you passed in stays open, yours to close) and its subscription
        to it. Idempotent; the history stays readable, a new turn raises ``UsageError``."""
        with self._lock:
            if self._closed:
                return
            if self._busy:
                raise UsageError("close() called while this session is running a turn; close it after the turn ends")
            self._closed = True
            if self._unobserve is not None:
                self._unobserve()
            unclaim = getattr(self.archive, "unclaim", None)
            if callable(unclaim):
                unclaim(self.session_id)
            if self._owns_archive:
                self.archive.close()
            if self.context_engine is not None:
                self.context_engine.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # internals ------------------------------------------------------------------------------------
    @staticmethod
    @contextlib.contextmanager
    def _closing(flow: Any) -> Iterator[None]:
        """Whatever ends the drive, the flow ends with it: an interruption the driver did not hand
        over still rolls the turn back now, not when the garbage collector closes the generator."""
        try:
            yield
        except BaseException as exc:
            cancel(flow, exc)
            raise
        finally:
            flow.close()

    @contextlib.contextmanager
    def _turn(self, what: str) -> Iterator[None]:
        """Refuse re-entry in the same thread (a tool calling back into its session, a second
        stream started before the first ended): the flows would interleave on one history."""
        if self._closed:
            raise UsageError(f"{what}() called on a closed session; open a new Session (or Session.load a saved one)")
        if self._busy:
            raise UsageError(
                f"{what}() called while this session is already running a turn or compaction (from a tool, or "
                "with a stream not yet consumed); finish that first, or use a separate Session"
            )
        self._busy = True
        try:
            yield
        finally:
            self._busy = False

    def _async_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._async_locks.get(loop)
        if lock is None:
            lock = self._async_locks[loop] = asyncio.Lock()
        return lock

    def _summarizer_window(self) -> int | None:
        window = getattr(self.summarizer, "window_tokens", None)
        if window:
            return int(window)
        # The session's own (possibly configured) window when it also summarizes.
        return self._state.context_window if self.summarizer.model == self.model else None

    def _on_archived(self, item: Any) -> None:
        ctx = getattr(self, "_ctx", None)
        if ctx is not None:
            ctx.archived = True
        turn = self._state.turn if hasattr(self, "_state") else 0
        self.events.append(
            ArchiveEvent(
                session_id=self.session_id,
                turn=turn,
                action="put",
                key=item.key,
                kind=item.kind,
                bytes=item.bytes,
                origin=item.origin,
            )
        )

    def _notify_status(self, text: str, code: str = "compaction", level: str = "info") -> None:
        if self._status is not None:
            send_status(self._status, text, code=code, level=level)

    def _notify(self, code: str, text: str, level: str) -> None:
        self.events.append(
            NoticeEvent(session_id=self.session_id, turn=self._state.turn, code=code, text=text, level=level)
        )
        self._notify_status(text, code, level)

    def _context(self) -> FlowContext:
        ctx = getattr(self, "_ctx", None)
        if ctx is None:
            params = body_params(self._litellm_kwargs)  # measured into every request's bytes
            tools, recall_tool = self._initial_tools()
            ctx = FlowContext(
                state=self._state,
                archive=self.archive,
                meter=self._meter,
                events=self.events,
                compactor=self.compactor,
                tools=tools,
                params=params,
                notify=self._notify,
                summarizer_window=self._summarizer_window(),
                summarizer_shares_window=self.summarizer.model == self.model,
                breakpoints=self.cache_breakpoints,
                recall_tool=recall_tool,
                jitter=random.Random().random,  # back-off jitter (not a secret)
                fallbacks=self.fallbacks,
                fallback_on_overflow=self.fallback_on_overflow,
                clock=time.time,
            )
            self._ctx = ctx
        return ctx

    def _user_messages(self, text: str | Message | Sequence[Any]) -> list[Message]:
        if isinstance(text, str):
            messages = [Message.user(text)]
        elif isinstance(text, Message):
            messages = [text]
        elif isinstance(text, Sequence) and not isinstance(text, bytes | bytearray):
            messages = [from_wire(m, index=i) for i, m in enumerate(text)]
        else:
            raise InvalidMessageError(
                f"send() takes a string, a Message or a list of messages, got {type(text).__name__}"
            )
        if isinstance(text, str):
            messages.extend(self._inline_recalls(text))
        return messages

    def _inline_recalls(self, text: str) -> list[Message]:
        from contextkit.engine.recall_round import user_recall_messages

        return user_recall_messages(self._context(), text)
