"""Runs the effects the sans-IO flow yields: model calls (litellm), summaries, tools, sleeps.

``EffectRunner.drive(flow)`` drives a flow synchronously, ``adrive`` asynchronously (``acompletion``,
async tools run concurrently). ``stream_model`` / ``astream_model`` are one streamed model call as
a generator: they yield each text delta the moment litellm yields it and end with the outcome
(``ModelReply`` or ``ModelFailure``); closing them closes the provider stream. The streaming
drivers (``contextkit.engine.streaming``) relay those deltas to the reader. The session owns one runner;
the flow never sees it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from typing import Any

from contextkit import backend
from contextkit.compaction.summarizer import Summarizer, SummaryRequest, SummaryResponse
from contextkit.engine.effects import CallModel, ModelFailure, ModelReply, RunTools, Sleep, StreamNote
from contextkit.errors import ProviderError
from contextkit.messages import ToolCall
from contextkit.tools import Tool, ToolResult, normalise_result


class EffectRunner:
    """Executes effects for one session: its model, litellm kwargs, tools and summarizer."""

    def __init__(
        self,
        model: str,
        litellm_kwargs: Mapping[str, Any],
        *,
        tools: Mapping[str, Tool],
        summarizer: Summarizer,
        request_timeout: float,
        price_as: str | None = None,
    ) -> None:
        self.model = model
        self.price_as = price_as  # price replies as this litellm model (e.g. the simulator as a real one)
        self._kwargs = dict(litellm_kwargs)
        self._tools = tools
        self.summarizer = summarizer
        self.request_timeout = request_timeout

    # drivers -------------------------------------------------------------------------------------------
    def drive(self, flow: Any) -> Any:
        value: Any = None
        try:
            while True:
                effect = flow.send(value)
                try:
                    value = self.call_model(effect) if isinstance(effect, CallModel) else self.run_one(effect)
                except (KeyboardInterrupt, asyncio.CancelledError) as exc:
                    cancel(flow, exc)
                    raise
        except StopIteration as stop:
            return stop.value

    def run_one(self, effect: Any) -> Any:
        """Run one non-model effect synchronously."""
        if isinstance(effect, SummaryRequest):
            return self.summarize(effect)
        if isinstance(effect, RunTools):
            return [(call, self.run_tool(call)) for call in effect.calls]
        if isinstance(effect, Sleep):
            time.sleep(effect.seconds)
            return None
        if isinstance(effect, StreamNote):
            return None  # only a streaming driver has a reader to tell
        raise TypeError(f"unknown effect {effect!r}")  # a new effect type without a driver is a bug

    async def adrive(self, flow: Any) -> Any:
        try:
            return await self._adrive(flow)
        except (KeyboardInterrupt, asyncio.CancelledError) as exc:
            cancel(flow, exc)
            raise

    async def _adrive(self, flow: Any) -> Any:
        value: Any = None
        try:
            while True:
                effect = flow.send(value)
                value = await (self.acall_model(effect) if isinstance(effect, CallModel) else self.arun_one(effect))
        except StopIteration as stop:
            return stop.value

    async def arun_one(self, effect: Any) -> Any:
        """Run one non-model effect asynchronously (tools of one round run concurrently)."""
        if isinstance(effect, SummaryRequest):
            return await self.asummarize(effect)
        if isinstance(effect, RunTools):
            results = await asyncio.gather(*(self.arun_tool(c) for c in effect.calls))
            return list(zip(effect.calls, results, strict=True))
        if isinstance(effect, Sleep):
            await asyncio.sleep(effect.seconds)
            return None
        if isinstance(effect, StreamNote):
            return None
        raise TypeError(f"unknown effect {effect!r}")  # a new effect type without a driver is a bug

    # model calls ---------------------------------------------------------------------------------------
    def _call_kwargs(self, effect: CallModel) -> dict[str, Any]:
        kwargs = dict(self._kwargs)
        kwargs.update(effect.overrides or {})
        kwargs.update(effect.params)
        if effect.tools:
            kwargs["tools"] = effect.tools
        return kwargs

    def call_model(self, effect: CallModel, on_delta: Callable[[str], None] | None = None) -> ModelReply | ModelFailure:
        """One model call; a streamed one is read to its end (``on_delta`` sees each text delta)."""
        if effect.stream:
            deltas = self.stream_model(effect, on_delta)
            while True:
                try:
                    next(deltas)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
        started = time.monotonic()
        try:
            response = backend.completion(
                effect.model or self.model, effect.messages, timeout=self.request_timeout, **self._call_kwargs(effect)
            )
        except Exception as exc:  # noqa: BLE001 - classified by the flow
            _annotate(exc, effect.bytes)
            return ModelFailure(exc, "", time.monotonic() - started)
        return parse_reply(response, effect.model or self.model, time.monotonic() - started, price_as=self.price_as)

    def stream_model(
        self, effect: CallModel, on_delta: Callable[[str], None] | None = None
    ) -> Generator[str, None, ModelReply | ModelFailure]:
        """Yield each text delta as litellm yields it; return the outcome. Closing it closes the stream."""
        started = time.monotonic()
        chunks: list[Any] = []
        partial: list[str] = []
        stream: Any = None
        try:
            stream = backend.completion(
                effect.model or self.model, effect.messages, timeout=self.request_timeout, stream=True, **self._call_kwargs(effect)
            )
            for chunk in stream:
                chunks.append(chunk)
                delta = _delta_text(chunk)
                if delta:
                    partial.append(delta)
                    if on_delta is not None:
                        on_delta(delta)
                    yield delta
            return self._streamed(stream, chunks, effect, started)
        except Exception as exc:  # noqa: BLE001 - classified by the flow
            _annotate(exc, effect.bytes)
            return ModelFailure(exc, "".join(partial), time.monotonic() - started)
        finally:  # also when the reader stops early (GeneratorExit): hang up on the provider
            if stream is not None:
                backend.close_stream(stream)

    async def acall_model(self, effect: CallModel) -> ModelReply | ModelFailure:
        if effect.stream:
            outcome: Any = None
            deltas = self.astream_model(effect)
            try:
                async for item in deltas:
                    outcome = item
            finally:
                await deltas.aclose()
            return outcome  # type: ignore[no-any-return]
        started = time.monotonic()
        try:
            response = await backend.acompletion(
                effect.model or self.model, effect.messages, timeout=self.request_timeout, **self._call_kwargs(effect)
            )
        except Exception as exc:  # noqa: BLE001 - classified by the flow
            _annotate(exc, effect.bytes)
            return ModelFailure(exc, "", time.monotonic() - started)
        return parse_reply(response, effect.model or self.model, time.monotonic() - started, price_as=self.price_as)

    async def astream_model(self, effect: CallModel) -> AsyncGenerator[str | ModelReply | ModelFailure, None]:
        """Async ``stream_model``: yields each text delta, then the outcome as the last item.

        Never blocks the event loop (``acompletion`` and ``async for``). Closing it (``aclose``) or
        cancelling the task that iterates it closes the provider stream.
        """
        started = time.monotonic()
        chunks: list[Any] = []
        partial: list[str] = []
        stream: Any = None
        outcome: ModelReply | ModelFailure
        try:
            stream = await backend.acompletion(
                effect.model or self.model, effect.messages, timeout=self.request_timeout, stream=True, **self._call_kwargs(effect)
            )
            async for chunk in stream:
                chunks.append(chunk)
                delta = _delta_text(chunk)
                if delta:
                    partial.append(delta)
                    yield delta
            outcome = self._streamed(stream, chunks, effect, started)
        except Exception as exc:  # noqa: BLE001 - classified by the flow
            _annotate(exc, effect.bytes)
            outcome = ModelFailure(exc, "".join(partial), time.monotonic() - started)
        finally:
            if stream is not None:
                await backend.aclose_stream(stream)
        yield outcome

    def _streamed(self, stream: Any, chunks: list[Any], effect: CallModel, started: float) -> ModelReply | ModelFailure:
        """The outcome of a stream read to its end; an empty stream is a failure, not an empty answer."""
        latency = time.monotonic() - started
        response = backend.stream_chunk_builder(chunks, messages=effect.messages) if chunks else None
        reply = parse_reply(response, effect.model or self.model, latency, price_as=self.price_as) if response is not None else None
        if reply is not None and not reply.context_edits and backend.stream_context_edits(stream):
            # litellm's stream builder does not carry them: read from the stream's final event
            reply = dataclasses.replace(reply, context_edits=backend.stream_context_edits(stream))
        if reply is not None and (reply.content or reply.tool_calls or backend.provider_finished(stream) is True):
            return reply
        error = ProviderError(
            "the provider ended the stream without content, tool call or finish reason (llama.cpp does this for a "
            "streamed request over its context window)"
        )
        _annotate(error, effect.bytes)
        return ModelFailure(error, "", latency, empty=True)

    # summaries and tools -------------------------------------------------------------------------------
    def summarize(self, request: SummaryRequest) -> SummaryResponse | Exception:
        try:
            return self.summarizer.summarize(request)
        except Exception as exc:  # noqa: BLE001 - the compactor decides what a failed summary means
            return exc

    async def asummarize(self, request: SummaryRequest) -> SummaryResponse | Exception:
        try:
            return await self.summarizer.asummarize(request)
        except Exception as exc:  # noqa: BLE001 - the compactor decides what a failed summary means
            return exc

    def run_tool(self, call: ToolCall) -> ToolResult:
        tool = self._tools.get(call.name)
        if tool is None:
            available = ", ".join(self._tools) or "none"
            return ToolResult(f"error: no tool named {call.name!r}; available: {available}", is_error=True)
        try:
            value = tool.func(**tool.parse_arguments(call.arguments))
        except Exception as exc:  # noqa: BLE001 - a failing tool becomes a tool result, not a crash
            return ToolResult(f"error: tool {call.name} raised {type(exc).__name__}: {exc}", is_error=True)
        return normalise_result(value)

    async def arun_tool(self, call: ToolCall) -> ToolResult:
        tool = self._tools.get(call.name)
        if tool is None or not tool.is_async:
            return await asyncio.to_thread(self.run_tool, call)
        try:
            value = await tool.func(**tool.parse_arguments(call.arguments))
        except Exception as exc:  # noqa: BLE001 - a failing tool becomes a tool result, not a crash
            return ToolResult(f"error: tool {call.name} raised {type(exc).__name__}: {exc}", is_error=True)
        return normalise_result(value)


def cancel(flow: Any, exc: BaseException) -> None:
    """Hand a cancellation (Ctrl-C, task cancellation) to a suspended flow, so the flow and a
    compaction inside it record it (a "cancelled" event) and restore the history; the caller re-raises."""
    try:
        flow.throw(exc)
    except BaseException:  # noqa: BLE001 - the flow re-raises the cancellation (or ended): nothing else to do
        pass
    finally:
        flow.close()


def _annotate(exc: BaseException, size: int) -> None:
    """Record the body size on the exception so ``classify_failure`` can report ``rejected_bytes``."""
    try:
        exc.request_bytes = size  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - some exception types forbid new attributes
        pass


def _delta_text(chunk: Any) -> str:
    try:
        return chunk.choices[0].delta.content or ""
    except (AttributeError, IndexError):
        return ""


def parse_reply(response: Any, model: str, latency: float, *, price_as: str | None = None) -> ModelReply:
    """A litellm response as the flow's ``ModelReply``: text, calls, usage with the prompt-cache split,
    and cost from litellm's cost map (as ``price_as`` when given, cache read/write prices included)."""
    choice = response.choices[0]
    message = choice.message
    calls = tuple(
        ToolCall(id=str(c.id), name=str(c.function.name), arguments=c.function.arguments or "{}")
        for c in (getattr(message, "tool_calls", None) or ())
    )
    usage = getattr(response, "usage", None)
    prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
    cached, written = backend.cache_usage(usage)
    if price_as:
        cost = backend.request_cost(
            price_as, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cached_tokens=cached, cache_write_tokens=written,
        )  # fmt: skip
    else:
        cost = backend.completion_cost(response, model)
    return ModelReply(
        content=message.content or "",
        tool_calls=calls,
        finish_reason=str(choice.finish_reason or "stop"),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost=cost,
        reasoning=getattr(message, "reasoning_content", None),
        latency_s=latency,
        cached_prompt_tokens=cached,
        cache_write_tokens=written,
        context_edits=applied_edits(message),
    )


def applied_edits(message: Any) -> tuple[dict[str, Any], ...]:
    """The server-side context edits an answer reports (Anthropic's ``context_management.applied_edits``,
    which litellm keeps in the message's ``provider_specific_fields``)."""
    fields = getattr(message, "provider_specific_fields", None) or {}
    management = fields.get("context_management") if isinstance(fields, dict) else None
    edits = management.get("applied_edits") if isinstance(management, dict) else None
    return tuple(e for e in edits if isinstance(e, dict)) if isinstance(edits, list) else ()
