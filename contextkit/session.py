"""``Session``: owns a history, an archive and an event log, and drives the turn flow.

The flow (``contextkit.flow``) is written once; this module runs it synchronously (``send``),
asynchronously (``asend``) and while streaming (``stream``, ``astream``: ``contextkit.streaming``),
executing the effects it yields: model calls through ``contextkit.backend`` (litellm), summaries,
tools, sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import sys
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from contextkit import backend
from contextkit.archive import Archive
from contextkit.compactor import Compactor, WorkbenchWriter
from contextkit.driver import EffectRunner, cancel
from contextkit.errors import ConfigError, InvalidMessageError, UsageError
from contextkit.events import ArchiveEvent, EventLog, NoticeEvent
from contextkit.flow import (
    FlowContext,
    Reply,
    emit_history,
    measure,
    turn_flow,
)
from contextkit.learning import reset_limits
from contextkit.messages import Message, from_wire
from contextkit.persist import load_session, save_session
from contextkit.policy.breakpoints import needs_breakpoints
from contextkit.preflight import run_compaction
from contextkit.settings import LIMIT_KWARGS, Limits
from contextkit.sizing import Measure, RequestMeter, body_params
from contextkit.state import SessionState, SessionStats
from contextkit.streaming import AsyncReplyStream, ReplyStream
from contextkit.summarizer import LiteLLMSummarizer
from contextkit.tools import Tool, as_tools

DEFAULT_WINDOW = 128_000
StatusSink = Callable[[str], None]
RESERVED_KWARGS = {
    "messages": "send the messages with session.send(...) or session.add_messages(...)",
    "stream": "call session.stream(...) for a streamed reply",
}


def _split_kwargs(kwargs: dict[str, Any], limits: Limits) -> tuple[dict[str, Any], Limits]:
    """litellm's keyword arguments, minus those that set a limit (folded into ``limits``); reserved
    names raise a ``ConfigError`` instead of failing deep inside a turn."""
    for name, advice in RESERVED_KWARGS.items():
        if name in kwargs:
            raise ConfigError(f"Session(..., {name}=...) is not a litellm option here: {advice}")
    passed = dict(kwargs)
    changes: dict[str, Any] = {}
    for name, field_name in LIMIT_KWARGS.items():
        if name not in passed:
            continue
        value = passed.pop(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(
                f"{name}={value!r}: pass a number ({'seconds' if 'timeout' in name else 'retries'}); "
                f"it sets Limits.{field_name}"
            )
        explicit = field_name in limits.explicit_fields or field_name in changes
        current = changes.get(field_name, getattr(limits, field_name))
        if explicit and current != value:
            raise ConfigError(
                f"{name}={value!r} conflicts with Limits({field_name}={current!r}); pass only one of them"
            )
        changes[field_name] = int(value) if field_name == "max_retries" else float(value)
    return passed, (limits.with_overrides(**changes) if changes else limits)


def _extends(current: Sequence[Message], after: Sequence[Message]) -> bool:
    """``current`` is ``after`` plus messages appended since, allowing in-place rewrites of the
    old ones that keep their shape (microcompact, budgets: archived, so nothing is lost by
    putting the pre-compaction originals back)."""
    if len(current) < len(after):
        return False
    return all(
        c is a or (c.role == a.role and c.tool_call_id == a.tool_call_id and len(c.tool_calls) == len(a.tool_calls))
        for c, a in zip(current, after, strict=False)
    )


def stderr_status(text: str) -> None:
    print(f"[contextkit] {text}", file=sys.stderr, flush=True)


def default_status() -> StatusSink:
    """stderr in a terminal; in a Jupyter kernel the dashboard's log or one collapsible output per cell."""
    from contextkit.widgets.status import NotebookStatus, in_jupyter_kernel

    return NotebookStatus() if in_jupyter_kernel() else stderr_status


class Session:
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
        **litellm_kwargs: Any,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("model must be a litellm model string such as 'openai/gpt-4o-mini'")
        if price_as is not None and (not isinstance(price_as, str) or not backend.is_priced(price_as)):
            raise ConfigError(
                f"price_as={price_as!r} is not a model litellm's cost map prices; use one such as "
                "'anthropic/claude-sonnet-4-5' or 'gpt-4.1', or leave it out to price the session's own model"
            )
        self.price_as = price_as
        if cache_breakpoints is not None and not isinstance(cache_breakpoints, bool):
            raise ConfigError(f"cache_breakpoints must be True, False or None (automatic), got {cache_breakpoints!r}")
        if cache_breakpoints is None:
            cache_breakpoints = needs_breakpoints(backend.provider_of(model), model)
        self.cache_breakpoints = cache_breakpoints
        self.model = model
        self.session_id = session_id or uuid.uuid4().hex[:12]
        if limits is not None and not isinstance(limits, Limits):
            raise ConfigError(f"limits must be a contextkit.Limits, got {type(limits).__name__}")
        self._litellm_kwargs, limits = _split_kwargs(litellm_kwargs, limits or Limits())
        # the fields set in Limits(...) win; every other field comes from CONTEXTKIT_* (S12)
        self.limits = limits.over_env()
        if archive is None:
            archive = Archive(session_id=self.session_id)
        elif not getattr(archive, "scope_chosen", True):
            archive.adopt(self.session_id)  # Archive(path): store under this session's id, not "default"
        self.archive = archive
        self.events = events if events is not None else EventLog()
        observe = getattr(self.archive, "observe", None)
        if callable(observe):
            observe(self._on_archived)
        self._tools = as_tools(tools)
        from contextkit.archive import is_recall_tool

        if shadowing := [name for name in self._tools if is_recall_tool(name)]:
            raise ConfigError(
                f"a tool named {shadowing[0]!r} would shadow the built-in recall tool (it expands <<ccr:KEY>> "
                "markers from the archive); rename your tool, e.g. to 'recall_notes'"
            )
        self._status: StatusSink | None = default_status() if status is True else (status or None)  # type: ignore[assignment]
        self._lock = threading.RLock()
        self._busy = False  # a turn or compaction is running (guards re-entry from tools or interleaved streams)
        self._async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        known = None if self.limits.context_window else backend.model_info(model).get("max_input_tokens")
        window = self.limits.context_window or int(known or DEFAULT_WINDOW)
        source = "configured" if self.limits.context_window else ("model" if known else "assumed")
        self._state = SessionState.create(model, self.session_id, self.limits, window, window_source=source)
        if system is not None:
            if not isinstance(system, str):
                raise ConfigError("system must be a string")
            self._state.history.append(Message.system(system))
        self._meter = RequestMeter(model)
        if on_flush == "workbench":
            workbench = self._workbench_path()
            flush = WorkbenchWriter(workbench) if workbench is not None else None
        else:
            flush = on_flush
        if flush is not None and not callable(flush):
            raise ConfigError("on_flush must be a callable(segment, info), 'workbench' or None")
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
        self._runner = EffectRunner(
            model,
            self._litellm_kwargs,
            tools=self._tools,
            summarizer=self.summarizer,
            request_timeout=self.limits.request_timeout,
            price_as=price_as,
        )

    # read-only views ------------------------------------------------------------------------------
    @property
    def history(self) -> list[Message]:
        return list(self._state.history)

    @property
    def stats(self) -> SessionStats:
        stats = SessionStats.from_dict(self._state.stats.to_dict())
        cstats = self.compactor.stats
        stats.compactions = cstats.compactions
        stats.level3_falls = cstats.level3_falls
        stats.summary_calls = cstats.summary_calls
        stats.summarizer_prompt_tokens = cstats.summarizer_prompt_tokens
        stats.summarizer_completion_tokens = cstats.summarizer_completion_tokens
        stats.summarizer_cost = cstats.summarizer_cost
        return stats

    @property
    def status_sink(self) -> StatusSink | None:
        """Where status lines go (``status=`` of the constructor; None when silenced)."""
        return self._status

    @property
    def context_window(self) -> int:
        return self._state.context_window

    @property
    def payload_cap(self) -> int | None:
        return self._state.cap

    @property
    def cap_source(self) -> str | None:
        return self._state.cap_source

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tool schemas sent with every request. Decided once (issue 14: tools lead the cached
        prompt prefix, so any change breaks the whole cache): the ``recall`` tool is offered from the
        first request when the session has tools or its archive already holds content, otherwise
        from the request after the first archive write; once offered it stays, byte-identical."""
        ctx = getattr(self, "_ctx", None)
        if ctx is not None:
            return list(ctx.tools)
        return self._initial_tools()[0]

    def _initial_tools(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """(schemas offered from the first request, the recall schema held back until content is archived)."""
        schemas = copy.deepcopy([t.schema() for t in self._tools.values()])
        if self.archive is None or "recall" in self._tools:
            return schemas, None
        from contextkit.archive import recall_tool_schema

        recall = recall_tool_schema()
        if schemas or len(self.archive):
            return [*schemas, recall], None
        return schemas, recall

    def measure(self) -> Measure:
        """Request bytes and tokens of the next request (incremental, S1.3)."""
        return self._meter.measure(
            self._state.history, tools=self.tool_schemas or None, **body_params(self._litellm_kwargs)
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
        closes the provider stream and undoes the turn. See ``contextkit.streaming``.
        """
        return ReplyStream(self, self._user_messages(text), max_rounds)

    def astream(self, text: str | Message | Sequence[Any], *, max_rounds: int = 50) -> AsyncReplyStream:
        """Async ``stream``: ``async for delta in session.astream("...")`` over ``acompletion(stream=True)``.

        Never blocks the event loop; many sessions can stream concurrently in one loop. Turns of
        one session run one at a time. ``await stream.aclose()`` or cancelling the task undoes the
        turn.
        """
        return AsyncReplyStream(self, self._user_messages(text), max_rounds)

    def compact(self, instruction: str | None = None) -> Any:
        """Manual compaction (trigger ``manual``), optionally guided by an instruction.

        The older messages are summarized (following ``instruction``) and the recent ones kept; on a
        short history the newest exchange is kept and everything before it summarized. Ctrl-C or task
        cancellation leaves the history untouched (a "cancelled" compaction event says so).
        """
        with self._lock, self._turn("compact"):
            ctx = self._context()
            current = measure(ctx, self._state.history).bytes
            flow = run_compaction(ctx, trigger="manual", budget=max(1, current // 2), instruction=instruction)
            with self._closing(flow):
                result = self._runner.drive(flow)
            if result.changed:
                self._state.history = list(result.history)
                emit_history(ctx, "compaction")
            return result

    def rewind(self) -> bool:
        """Undo the last applied compaction, keeping every turn made since.

        The pre-compaction history comes back with the messages added after that compaction on
        top. When the history was rewritten since in a way that cannot be lined up with it (a
        later recovery truncated it), nothing changes and ``UsageError`` says why - turns are
        never silently dropped. Returns False when there is no compaction to undo.
        """
        with self._lock, self._turn("rewind"):
            entry = self.compactor.peek_undo_entry()
            if entry is None:
                return False
            before, after = entry
            current = self._state.history
            if after is None:  # an entry from an older compactor: only exact states can be undone
                after = current
            if not _extends(current, after):
                raise UsageError(
                    f"cannot rewind: the history was rewritten after that compaction ({len(after)} messages then, "
                    f"{len(current)} now, and they no longer line up), so rewinding would lose turns made since. "
                    "Start a new session from session.history, or add_messages() the parts you need."
                )
            self.compactor.pop_undo_entry()
            self._state.history = [*before, *current[len(after) :]]
            emit_history(self._context(), "rewind")
            return True

    def reset_limits(self) -> None:
        """Forget what failures taught this session: the payload cap goes back to the configured one
        (or none), the window to the configured or model value, tool-result budgets to the configured
        ones, and the size evidence is cleared (a body once rejected may be sent again). Each change
        is a ``LimitEvent``."""
        with self._lock, self._turn("reset_limits"):
            reset_limits(self._context())

    def add_messages(self, messages: Sequence[Any]) -> None:
        """Append existing messages (dicts or Message) to the history without a request."""
        if isinstance(messages, str | bytes | dict | Message) or not isinstance(messages, Sequence):
            raise InvalidMessageError(
                f"add_messages() takes a list of messages (dicts or Message), got {type(messages).__name__}"
            )
        with self._lock:
            # validate every message before appending any: a bad one leaves the history untouched
            self._state.history.extend([from_wire(m, index=i) for i, m in enumerate(messages)])
            emit_history(self._context(), "user")

    # persistence ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write history, counters, limits and the archive reference to JSON (atomic replace).

        API keys and other litellm keyword arguments are never written. An in-memory archive is copied
        to ``<name>.archive.sqlite`` next to the file (with a warning), so loading finds every marker.
        """
        with self._lock:
            return save_session(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, archive: Archive | None = None, **kwargs: Any) -> Session:
        """Resume a saved session. Pass api_key/api_base again (they are never saved)."""
        session = load_session(cls, path, archive=archive, **kwargs)
        emit_history(session._context(), "load")
        return session

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

    def _workbench_path(self) -> Path | None:
        path = getattr(self.archive, "path", None)
        if not path:
            return None
        return Path(path).parent / "workbench" / f"{self.session_id}.md"

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

    def _notify_status(self, text: str) -> None:
        if self._status is not None:
            self._status(text)

    def _notify(self, code: str, text: str, level: str) -> None:
        self.events.append(
            NoticeEvent(session_id=self.session_id, turn=self._state.turn, code=code, text=text, level=level)
        )
        self._notify_status(text)

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
        from contextkit.recall_flow import user_recall_messages

        return user_recall_messages(self._context(), text)

    def _repr_html_(self) -> str:
        from contextkit.widgets.html import session_html

        return session_html(self)

    def __repr__(self) -> str:
        m = self.measure()
        return f"<Session {self.session_id} {self.model} messages={m.messages} bytes={m.bytes} cap={self.payload_cap}>"
