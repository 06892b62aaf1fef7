"""``Session``: owns a history, an archive and an event log, and drives the turn flow.

The flow (``contextkit.flow``) is written once; this module runs it synchronously (``send``),
asynchronously (``asend``) and while streaming (``stream``), executing the effects it yields:
model calls through ``contextkit.backend`` (litellm), summaries, tools, sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from contextkit import backend
from contextkit.archive import Archive
from contextkit.compaction import CompactionStats
from contextkit.compactor import Compactor, WorkbenchWriter
from contextkit.errors import ConfigError, InvalidMessageError, UsageError
from contextkit.events import ArchiveEvent, EventLog, NoticeEvent
from contextkit.flow import (
    CallModel,
    FlowContext,
    ModelFailure,
    ModelReply,
    Reply,
    RunTools,
    Sleep,
    emit_history,
    measure,
    summarizer_window,
    turn_flow,
)
from contextkit.messages import Message, ToolCall, from_wire, message_from_dict, message_to_dict
from contextkit.settings import Limits
from contextkit.sizing import Measure, RequestMeter
from contextkit.state import SessionState, SessionStats
from contextkit.summarizer import LiteLLMSummarizer, SummaryRequest, SummaryResponse
from contextkit.tools import Tool, ToolResult, as_tools, normalise_result

DEFAULT_WINDOW = 128_000
SAVE_VERSION = 1
StatusSink = Callable[[str], None]


def stderr_status(text: str) -> None:
    print(f"[contextkit] {text}", file=sys.stderr, flush=True)


class Session:
    """A long chat or agent conversation kept inside the window and the gateway's body cap.

    ``Session(model, system=..., limits=Limits(max_payload="128KB"), archive=..., tools=[fn, ...],
    api_base=..., api_key=...)``. Any other keyword goes to litellm unchanged.
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
        **litellm_kwargs: Any,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("model must be a litellm model string such as 'openai/gpt-4o-mini'")
        self.model = model
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self.limits = limits if limits is not None else Limits.from_env()
        if not isinstance(self.limits, Limits):
            raise ConfigError(f"limits must be a contextkit.Limits, got {type(self.limits).__name__}")
        self._litellm_kwargs = dict(litellm_kwargs)
        self._litellm_kwargs.pop("timeout", None)
        self.archive = archive if archive is not None else Archive(session_id=self.session_id)
        self.events = events if events is not None else EventLog()
        observe = getattr(self.archive, "observe", None)
        if callable(observe):
            observe(self._on_archived)
        self._tools = as_tools(tools)
        self._status: StatusSink | None = stderr_status if status is True else (status or None)  # type: ignore[assignment]
        self._lock = threading.RLock()
        self._busy = False  # a turn or compaction is running (guards re-entry from tools or interleaved streams)
        self._async_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        window = self.limits.context_window or int(backend.model_info(model).get("max_input_tokens") or DEFAULT_WINDOW)
        self._state = SessionState.create(model, self.session_id, self.limits, window)
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
        )
        summary_model = self.limits.compact_model or model
        summary_kwargs = self._litellm_kwargs if summary_model == model else {}
        self.summarizer = LiteLLMSummarizer(summary_model, timeout=self.limits.summary_timeout, **summary_kwargs)

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
        schemas = [t.schema() for t in self._tools.values()]
        if self.archive is not None and "recall" not in self._tools:
            from contextkit.archive import recall_tool_schema

            schemas.append(recall_tool_schema())
        return schemas

    def measure(self) -> Measure:
        """Request bytes and tokens of the next request (incremental, S1.3)."""
        return self._meter.measure(self._state.history, tools=self.tool_schemas or None)

    # conversation ---------------------------------------------------------------------------------
    def send(self, text: str | Message | Sequence[Any], *, max_rounds: int = 50) -> Reply:
        """Send a user message; run tools until the model answers; recover from rejections."""
        with self._lock, self._turn("send"):
            flow = turn_flow(self._context(), self._user_messages(text), max_rounds=max_rounds)
            return self._drive(flow)

    async def asend(self, text: str | Message | Sequence[Any], *, max_rounds: int = 50) -> Reply:
        """Async ``send``; the same flow driven with ``acompletion`` and async tools."""
        # Turns of one session run one at a time: gather(s.asend(a), s.asend(b)) queues b behind a.
        async with self._async_lock():
            with self._lock, self._turn("asend"):
                flow = turn_flow(self._context(), self._user_messages(text), max_rounds=max_rounds)
                return await self._adrive(flow)

    def stream(self, text: str | Message | Sequence[Any], *, max_rounds: int = 50) -> ReplyStream:
        """Stream the reply as text deltas; recovery applies before and during the stream.

        If a failure interrupts a stream, the deltas already yielded stay yielded and the
        recovered answer streams from its start; ``ReplyStream.restarts`` counts such restarts.
        """
        return ReplyStream(self, self._user_messages(text), max_rounds)

    def compact(self, instruction: str | None = None) -> Any:
        """Manual compaction (trigger ``manual``), optionally guided by an instruction."""
        with self._lock, self._turn("compact"):
            ctx = self._context()
            current = measure(ctx, self._state.history).bytes
            flow = self.compactor.flow(
                self._state.history,
                trigger="manual",
                budget=max(1, current // 2),
                measure=lambda h: measure(ctx, h).bytes,
                instruction=instruction,
                summarizer_window=summarizer_window(ctx),
            )
            result = self._drive(flow)
            if result.changed:
                self._state.history = list(result.history)
                emit_history(ctx, "compaction")
            return result

    def rewind(self) -> bool:
        """Restore the history as it was before the last applied compaction."""
        with self._lock, self._turn("rewind"):
            snapshot = self.compactor.pop_undo()
            if snapshot is None:
                return False
            self._state.history = list(snapshot)
            emit_history(self._context(), "rewind")
            return True

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

        API keys and other litellm keyword arguments are never written.
        """
        st = self._state
        data = {
            "version": SAVE_VERSION,
            "model": self.model,
            "session_id": self.session_id,
            "limits": asdict(self.limits),
            "context_window": st.context_window,
            "cap": st.cap,
            "cap_source": st.cap_source,
            "turn_budget": st.turn_budget,
            "per_result_budget": st.per_result_budget,
            "size_warned": st.size_warned,
            "stats": st.stats.to_dict(),
            "compactor": self.compactor.stats.to_dict(),
            "archive": {"path": str(self.archive.path) if self.archive.path else None},
            "history": [message_to_dict(m) for m in st.history],
        }
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(data, ensure_ascii=False)
        try:
            blob = text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates in the history: \u escapes keep them exact
            blob = json.dumps(data).encode("ascii")
        tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(blob)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, archive: Archive | None = None, **kwargs: Any) -> Session:
        """Resume a saved session. Pass api_key/api_base again (they are never saved)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"no saved session at {path}") from None
        except OSError as exc:
            raise ConfigError(f"cannot read the saved session at {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ConfigError(f"{path} is not a saved contextkit session ({exc})") from None
        if not isinstance(data, dict) or data.get("version") != SAVE_VERSION:
            raise ConfigError(f"{path} is not a saved contextkit session (version {SAVE_VERSION})")
        try:  # a truncated or hand-edited file: say which file and what is wrong, not a KeyError
            limit_fields = {f.name for f in fields(Limits)}
            limits = Limits(**{k: v for k, v in data["limits"].items() if k in limit_fields})
            model, session_id = data["model"], data["session_id"]
            history = [message_from_dict(m) for m in data["history"]]
            window = int(data["context_window"])
            turn_budget, per_result_budget = int(data["turn_budget"]), int(data["per_result_budget"])
            stats = SessionStats.from_dict(data.get("stats") or {})
            compactor_stats = CompactionStats.from_dict(data.get("compactor") or {})
            archive_path = (data.get("archive") or {}).get("path")
        except KeyError as exc:
            raise ConfigError(f"{path} is not a complete saved contextkit session (missing {exc})") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{path} is not a valid saved contextkit session: {exc}") from None
        if archive is None:
            archive = (
                Archive(archive_path, session_id=session_id)
                if archive_path
                else Archive.in_memory(session_id=session_id)
            )
        session = cls(model, limits=limits, archive=archive, session_id=session_id, **kwargs)
        st = session._state
        st.history = history
        st.context_window = window
        st.cap, st.cap_source = data.get("cap"), data.get("cap_source")
        st.turn_budget, st.per_result_budget = turn_budget, per_result_budget
        st.size_warned = bool(data.get("size_warned"))
        st.stats = stats
        session.compactor.stats = compactor_stats
        emit_history(session._context(), "load")
        return session

    # internals ------------------------------------------------------------------------------------
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
            params = {k: v for k, v in self._litellm_kwargs.items() if k in ("temperature", "max_tokens", "top_p")}
            ctx = FlowContext(
                state=self._state,
                archive=self.archive,
                meter=self._meter,
                events=self.events,
                compactor=self.compactor,
                tools=self.tool_schemas,
                params=params,
                notify=self._notify,
                summarizer_window=self._summarizer_window(),
                summarizer_shares_window=self.summarizer.model == self.model,
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
        from contextkit.archive import find_inline_recalls

        keys = find_inline_recalls(text)
        if not keys:
            return []
        result = self.archive.recall(" ".join(f"<<ccr:{k}>>" for k in keys))
        return [Message.user(result.text, is_recall=True, preserve_verbatim=True)]

    def _call_kwargs(self, effect: CallModel) -> dict[str, Any]:
        kwargs = dict(self._litellm_kwargs)
        kwargs.update(effect.params)
        if effect.tools:
            kwargs["tools"] = effect.tools
        return kwargs

    def _run_tool(self, call: ToolCall) -> ToolResult:
        tool = self._tools.get(call.name)
        if tool is None:
            return ToolResult(
                f"error: no tool named {call.name!r}; available: {', '.join(self._tools) or 'none'}", is_error=True
            )
        try:
            value = tool.func(**tool.parse_arguments(call.arguments))
        except Exception as exc:  # noqa: BLE001 - a failing tool becomes a tool result, not a crash
            return ToolResult(f"error: tool {call.name} raised {type(exc).__name__}: {exc}", is_error=True)
        return normalise_result(value)

    async def _arun_tool(self, call: ToolCall) -> ToolResult:
        tool = self._tools.get(call.name)
        if tool is None or not tool.is_async:
            return await asyncio.to_thread(self._run_tool, call)
        try:
            value = await tool.func(**tool.parse_arguments(call.arguments))
        except Exception as exc:  # noqa: BLE001
            return ToolResult(f"error: tool {call.name} raised {type(exc).__name__}: {exc}", is_error=True)
        return normalise_result(value)

    def _call_model(
        self, effect: CallModel, on_delta: Callable[[str], None] | None = None
    ) -> ModelReply | ModelFailure:
        started = time.monotonic()
        kwargs = self._call_kwargs(effect)
        partial: list[str] = []
        try:
            if effect.stream:
                chunks = []
                for chunk in backend.completion(
                    self.model, effect.messages, timeout=self.limits.request_timeout, stream=True, **kwargs
                ):
                    chunks.append(chunk)
                    delta = _delta_text(chunk)
                    if delta:
                        partial.append(delta)
                        if on_delta is not None:
                            on_delta(delta)
                response = backend.stream_chunk_builder(chunks, messages=effect.messages)
            else:
                response = backend.completion(
                    self.model, effect.messages, timeout=self.limits.request_timeout, **kwargs
                )
        except Exception as exc:  # noqa: BLE001 - classified by the flow
            _annotate(exc, effect.bytes)
            return ModelFailure(exc, "".join(partial), time.monotonic() - started)
        return _parse_reply(response, self.model, time.monotonic() - started)

    async def _acall_model(self, effect: CallModel) -> ModelReply | ModelFailure:
        started = time.monotonic()
        kwargs = self._call_kwargs(effect)
        try:
            if effect.stream:
                chunks = [
                    c
                    async for c in await backend.acompletion(
                        self.model, effect.messages, timeout=self.limits.request_timeout, stream=True, **kwargs
                    )
                ]
                response = backend.stream_chunk_builder(chunks, messages=effect.messages)
            else:
                response = await backend.acompletion(
                    self.model, effect.messages, timeout=self.limits.request_timeout, **kwargs
                )
        except Exception as exc:  # noqa: BLE001
            _annotate(exc, effect.bytes)
            return ModelFailure(exc, "", time.monotonic() - started)
        return _parse_reply(response, self.model, time.monotonic() - started)

    def _drive(self, flow: Any) -> Any:
        value: Any = None
        try:
            while True:
                effect = flow.send(value)
                value = self._call_model(effect) if isinstance(effect, CallModel) else self._drive_one(effect)
        except StopIteration as stop:
            return stop.value

    def _drive_one(self, effect: Any) -> Any:
        """Run one non-model effect synchronously."""
        if isinstance(effect, SummaryRequest):
            return self._summarize(effect)
        if isinstance(effect, RunTools):
            return [(call, self._run_tool(call)) for call in effect.calls]
        if isinstance(effect, Sleep):
            time.sleep(effect.seconds)
            return None
        raise TypeError(f"unknown effect {effect!r}")  # a new effect type without a driver is a bug

    def _summarize(self, request: SummaryRequest) -> SummaryResponse | Exception:
        try:
            return self.summarizer.summarize(request)
        except Exception as exc:  # noqa: BLE001 - the compactor decides what a failed summary means
            return exc

    async def _adrive(self, flow: Any) -> Any:
        value: Any = None
        try:
            while True:
                effect = flow.send(value)
                if isinstance(effect, CallModel):
                    value = await self._acall_model(effect)
                elif isinstance(effect, SummaryRequest):
                    try:
                        value = await self.summarizer.asummarize(effect)
                    except Exception as exc:  # noqa: BLE001
                        value = exc
                elif isinstance(effect, RunTools):
                    value = list(
                        zip(
                            effect.calls, await asyncio.gather(*(self._arun_tool(c) for c in effect.calls)), strict=True
                        )
                    )
                elif isinstance(effect, Sleep):
                    await asyncio.sleep(effect.seconds)
                    value = None
                else:  # pragma: no cover
                    raise TypeError(f"unknown effect {effect!r}")
        except StopIteration as stop:
            return stop.value

    def _repr_html_(self) -> str:
        from contextkit.widgets.html import session_html

        return session_html(self)

    def __repr__(self) -> str:
        m = self.measure()
        return f"<Session {self.session_id} {self.model} messages={m.messages} bytes={m.bytes} cap={self.payload_cap}>"


class ReplyStream:
    """Iterator of text deltas for one streamed turn; ``reply`` is set when it ends."""

    def __init__(self, session: Session, messages: list[Message], max_rounds: int) -> None:
        self._session = session
        self._messages = messages
        self._max_rounds = max_rounds
        self.reply: Reply | None = None
        self.restarts = 0

    def __iter__(self) -> Iterator[str]:
        session = self._session
        queue: list[str] = []
        with session._lock, session._turn("stream"):
            flow = turn_flow(session._context(), self._messages, stream=True, max_rounds=self._max_rounds)
            value: Any = None
            try:
                while True:
                    effect = flow.send(value)
                    if isinstance(effect, CallModel):
                        value = session._call_model(effect, queue.append)
                        yield from queue
                        queue.clear()
                        if isinstance(value, ModelFailure) and value.partial:
                            self.restarts += 1
                    else:
                        value = session._drive_one(effect)
            except StopIteration as stop:
                self.reply = stop.value

    async def __aiter__(self) -> AsyncIterator[str]:  # pragma: no cover - thin async convenience
        for delta in self:
            yield delta


def _annotate(exc: BaseException, size: int) -> None:
    try:
        exc.request_bytes = size  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - some exception types forbid new attributes
        pass


def _delta_text(chunk: Any) -> str:
    try:
        return chunk.choices[0].delta.content or ""
    except (AttributeError, IndexError):
        return ""


def _parse_reply(response: Any, model: str, latency: float) -> ModelReply:
    choice = response.choices[0]
    message = choice.message
    calls = tuple(
        ToolCall(id=str(c.id), name=str(c.function.name), arguments=c.function.arguments or "{}")
        for c in (getattr(message, "tool_calls", None) or ())
    )
    usage = getattr(response, "usage", None)
    return ModelReply(
        content=message.content or "",
        tool_calls=calls,
        finish_reason=str(choice.finish_reason or "stop"),
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        cost=backend.completion_cost(response, model),
        reasoning=getattr(message, "reasoning_content", None),
        latency_s=latency,
    )
