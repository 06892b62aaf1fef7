"""The summary stage through an MCP server's ``context_compact(segment, budget_chars, instruction)``.

``Session(..., context_engine="mcp:<command or URL>")``: a command line (``mcp:python my_engine.py``)
is started once and spoken to over stdio; an ``http://`` or ``https://`` URL over streamable HTTP.
Each summary request of the summary stage becomes one tool call with the same rendered, budgeted
segment the built-in summarizer would read, the most characters the prose may take, and the
user's instruction (``/compact keep the ports``). The answer's text is the summary; it then passes
the same quality gate, gets the same identifier ledger and is archived like any other.

When the call fails - the server errs (a tool error, a crash, a refused connection), takes longer
than ``Limits.context_engine_timeout`` (180 s) or answers nothing - the built-in summarizer writes
that compaction's summary (its retry too), one status line says why, and the next compaction asks
the engine again. A call that timed out drops the connection: the next one starts the server anew,
so a server that hangs once does not hang every later compaction.

The connection lives on a background thread with its own event loop (the SDK is asynchronous; the
session's turns may be synchronous or run on the caller's loop).
"""

from __future__ import annotations

import asyncio
import shlex
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack
from typing import Any

from contextkit.compaction.summarizer import Summarizer, SummaryRequest, SummaryResponse
from contextkit.errors import ConfigError, ContextkitRuntimeError, require_extra

TOOL = "context_compact"
PREFIX = "mcp:"

Status = Callable[[str, str, str], None]


class ContextEngineError(ContextkitRuntimeError):
    """The context engine answered with an error or nothing usable (the built-in summarizer takes over)."""


def parse_context_engine(value: object) -> tuple[str, list[str]] | None:
    """``context_engine=``: None, ``("provider", [])``, or ``("url", [URL])`` / ``("command", argv)``
    for ``"mcp:..."``."""
    if value is None:
        return None
    if value == "provider":
        return "provider", []
    if not isinstance(value, str) or not value.startswith(PREFIX) or not value[len(PREFIX) :].strip():
        raise ConfigError(
            f"context_engine must be 'provider', 'mcp:<command>' (e.g. 'mcp:python my_engine.py') or "
            f"'mcp:<http(s) URL>', got {value!r}"
        )
    target = value[len(PREFIX) :].strip()
    if target.startswith(("http://", "https://")):
        return "url", [target]
    try:
        argv = shlex.split(target)
    except ValueError as exc:
        raise ConfigError(f"context_engine {value!r}: the command line does not parse ({exc}); quote it as a shell would") from None
    return "command", argv


class _Connection:
    """One MCP client session, owned by one worker task on a background event loop.

    The SDK's client holds task groups that must be entered and left by the same task, so a single
    worker connects, calls, and drops the connection after a failure (the next call reconnects).
    """

    def __init__(self, kind: str, target: list[str]) -> None:
        self.kind, self.target = kind, target
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="contextkit-context-engine", daemon=True)
        self._thread.start()
        self._queue: asyncio.Queue[tuple[dict[str, Any] | None, float, Future[Any]]] | None = None
        self._ready = threading.Event()
        self._worker = asyncio.run_coroutine_threadsafe(self._work(), self._loop)
        self._ready.wait(10)
        self._stack: AsyncExitStack | None = None
        self._client: Any = None
        self._closed = False

    def _server(self) -> Any:
        from mcp import StdioServerParameters

        if self.kind == "url":
            return self.target[0]
        return StdioServerParameters(command=self.target[0], args=self.target[1:])

    async def _drop(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            try:
                await stack.aclose()
            except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is gone either way
                pass

    async def _work(self) -> None:
        import anyio
        from mcp import Client

        self._queue = asyncio.Queue()
        self._ready.set()
        while True:
            arguments, timeout, future = await self._queue.get()
            if arguments is None:
                await self._drop()
                future.set_result(None)
                return
            try:
                if self._client is None:
                    stack = AsyncExitStack()
                    self._stack = stack
                    self._client = await stack.enter_async_context(Client(self._server(), read_timeout_seconds=timeout))
                with anyio.fail_after(timeout):
                    result = await self._client.call_tool(TOOL, arguments, read_timeout_seconds=timeout)
            except Exception as exc:  # noqa: BLE001 - handed to the caller, which falls back
                await self._drop()
                future.set_exception(exc)
            else:
                future.set_result(result)

    def _submit(self, arguments: dict[str, Any] | None, timeout: float) -> Future[Any]:
        future: Future[Any] = Future()
        queue = self._queue
        if queue is None or self._worker.done():
            raise ContextkitRuntimeError("the context engine's connection loop is not running")
        self._loop.call_soon_threadsafe(queue.put_nowait, (arguments, timeout, future))
        return future

    def call(self, arguments: dict[str, Any], timeout: float) -> Any:
        future = self._submit(arguments, timeout)
        try:
            # the worker enforces ``timeout`` on the call; the margin covers starting the server
            return future.result(timeout + 30)
        except FutureTimeout:
            raise TimeoutError(f"no answer within {timeout:g} s") from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._submit(None, 0).result(15)
        except Exception:  # noqa: BLE001 - closing is best effort; the server sees its stdin close anyway
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def _text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in getattr(result, "content", None) or [])


class McpContextEngine:
    """A ``Summarizer`` that asks an MCP server first and ``fallback`` when the server fails."""

    def __init__(
        self,
        spec: str,
        *,
        fallback: Summarizer,
        timeout: float = 180.0,
        status: Status | None = None,
    ) -> None:
        parsed = parse_context_engine(spec)
        if parsed is None or parsed[0] == "provider":
            raise ConfigError(f"McpContextEngine needs 'mcp:<command or URL>', got {spec!r}")
        require_extra('context_engine="mcp:..."', "mcp", extra="mcp")
        self.spec = spec
        self.label = spec if len(spec) <= 60 else spec[:57] + "..."
        self.fallback = fallback
        self.timeout = float(timeout)
        self._status = status
        self._connection = _Connection(*parsed)
        self._failed_attempt = False
        self.calls = 0  # context_compact calls made
        self.answers = 0  # calls whose answer became the summary request's answer
        self.fallbacks = 0  # summary requests the built-in summarizer answered instead
        self.last_failure = ""

    @property
    def model(self) -> str:
        return str(getattr(self.fallback, "model", self.spec))

    def _ask(self, request: SummaryRequest) -> str:
        arguments = {"segment": request.segment, "budget_chars": int(request.budget_chars),
                     "instruction": request.instruction or ""}  # fmt: skip
        self.calls += 1
        result = self._connection.call(arguments, self.timeout)
        text = _text(result).strip()
        if getattr(result, "is_error", False):
            raise ContextEngineError(f"the server answered with an error: {text[:200] or 'no text'}")
        if not text:
            raise ContextEngineError("the server answered with an empty summary")
        return text

    def _fall_back(self, request: SummaryRequest, exc: BaseException) -> None:
        self.fallbacks += 1
        reason = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ContextEngineError) else str(exc)
        if isinstance(exc, TimeoutError):
            reason = f"no answer within {self.timeout:g} s (Limits.context_engine_timeout)"
        self.last_failure = reason
        if self._status is not None:
            self._status(
                f"context engine {self.label} failed ({reason[:240]}) - the built-in summarizer writes this "
                "compaction's summary; the next compaction asks the engine again",
                "context_engine",
                "warning",
            )

    def _engine_turn(self, request: SummaryRequest) -> bool:
        """Whether this request goes to the engine: a segment to read, and the engine did not already
        fail this compaction (its retry, attempt 2, stays with the built-in summarizer)."""
        if request.attempt <= 1:
            self._failed_attempt = False
        return bool(request.segment) and not self._failed_attempt

    def summarize(self, request: SummaryRequest) -> SummaryResponse:
        if self._engine_turn(request):
            try:
                text = self._ask(request)
            except Exception as exc:  # noqa: BLE001 - any failure of the engine means: the built-in summarizer
                self._failed_attempt = True
                self._fall_back(request, exc)
            else:
                self.answers += 1
                return SummaryResponse(text=text, model=self.spec)
        return self.fallback.summarize(request)

    async def asummarize(self, request: SummaryRequest) -> SummaryResponse:
        if self._engine_turn(request):
            try:
                text = await asyncio.to_thread(self._ask, request)
            except Exception as exc:  # noqa: BLE001 - any failure of the engine means: the built-in summarizer
                self._failed_attempt = True
                self._fall_back(request, exc)
            else:
                self.answers += 1
                return SummaryResponse(text=text, model=self.spec)
        return await self.fallback.asummarize(request)

    def close(self) -> None:
        """Stop the server process (or drop the HTTP session) and the background loop. Idempotent."""
        self._connection.close()
