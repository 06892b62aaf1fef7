"""The summarizer of the summary stage, behind a small protocol.

The compactor never calls a network library: its flow yields a ``SummaryRequest`` and receives a
``SummaryResponse`` (or the exception the call raised). ``LiteLLMSummarizer`` answers requests
through ``contextkit.backend``; tests use ``ScriptedSummarizer`` or the gateway simulator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from contextkit.errors import ContextkitRuntimeError


class SummaryTimeout(ContextkitRuntimeError, TimeoutError):
    """The summarizer call took longer than its timeout; the compactor treats it as a failed attempt."""


class SummaryCallError(ContextkitRuntimeError):
    """The summarizer answered with something that is not a chat completion."""


@dataclass(frozen=True)
class SummaryRequest:
    """One summarizer call: the full prompt (sent as a single user message), model override, timeout.

    ``temperature`` and ``max_tokens`` (None: the provider's default) are sent with the call; a
    retry changes the temperature and the prompt, so it is never the identical request.

    ``segment``, ``budget_chars`` and ``instruction`` are the parts the prompt was made from (the
    rendered, budgeted segment, the most characters the prose may take, the user's instruction):
    an external context engine takes them separately instead of the prompt.
    """

    prompt: str
    model: str | None = None
    timeout: float = 600.0
    attempt: int = 1
    temperature: float | None = None
    max_tokens: int | None = None
    segment: str = ""
    budget_chars: int = 0
    instruction: str | None = None

    def params(self) -> dict[str, Any]:
        """The sampling parameters this request sets (none when both are None)."""
        out: dict[str, Any] = {}
        if self.temperature is not None:
            out["temperature"] = self.temperature
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        return out

    def messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.prompt}]


@dataclass(frozen=True)
class SummaryResponse:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    model: str = ""


@runtime_checkable
class Summarizer(Protocol):
    def summarize(self, request: SummaryRequest) -> SummaryResponse: ...

    async def asummarize(self, request: SummaryRequest) -> SummaryResponse: ...


def _response_text(response: Any) -> str:
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, KeyError, TypeError):
        raise SummaryCallError(f"summarizer returned no choices ({type(response).__name__})") from None
    return content if isinstance(content, str) else ""


def _usage(response: Any) -> tuple[int, int]:
    usage = getattr(response, "usage", None)
    if usage is None:
        return 0, 0
    return int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError):
        return True
    name = type(exc).__name__.lower()
    return "timeout" in name


class LiteLLMSummarizer:
    """Summarize through litellm (``contextkit.backend``); ``model`` is used unless the request names one.

    ``litellm_kwargs`` go to every call (``api_base``, ``api_key``, ``temperature`` ...). The
    summarizer has its own generous timeout (600 s by default): a small local model can take
    minutes to read a long segment, and a summary abandoned half-way is paid for and lost.
    """

    def __init__(self, model: str, *, timeout: float = 600.0, **litellm_kwargs: Any) -> None:
        if not model or not isinstance(model, str):
            raise ValueError("LiteLLMSummarizer needs a model name such as 'openai/gpt-4o-mini'")
        self.model = model
        self.timeout = float(timeout)
        self.kwargs = dict(litellm_kwargs)
        self.price_as: str | None = None  # price summaries as this litellm model (see Session(price_as=))

    @property
    def window_tokens(self) -> int | None:
        """The summarizer model's input window from litellm's local map (None when unknown)."""
        return self.window_for(None)

    def window_for(self, model: str | None) -> int | None:
        """Input window of ``model`` (default: this summarizer's model), None when litellm does not know it."""
        from contextkit import backend

        info = backend.model_info(model or self.model)
        window = info.get("max_input_tokens") or info.get("max_tokens")
        return int(window) if window else None

    def _call_args(self, request: SummaryRequest) -> tuple[str, float, dict[str, Any]]:
        model = request.model or self.model
        timeout = min(request.timeout, self.timeout) if request.timeout else self.timeout
        kwargs = {**self.kwargs, **request.params()}
        if request.params():
            # a model that does not take a temperature (some reasoning models) drops it instead of failing
            kwargs.setdefault("drop_params", True)
        return model, timeout, kwargs

    def _cost(self, response: Any, model: str) -> float:
        from contextkit import backend

        if not self.price_as:
            return backend.completion_cost(response, model)
        usage = getattr(response, "usage", None)
        cached, written = backend.cache_usage(usage)
        prompt_tokens, completion_tokens = _usage(response)
        return backend.request_cost(
            self.price_as, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            cached_tokens=cached, cache_write_tokens=written,
        )  # fmt: skip

    def _response(self, response: Any, model: str) -> SummaryResponse:
        prompt_tokens, completion_tokens = _usage(response)
        return SummaryResponse(
            text=_response_text(response),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost=self._cost(response, model),
            model=str(getattr(response, "model", "") or model),
        )

    def summarize(self, request: SummaryRequest) -> SummaryResponse:
        from contextkit import backend

        model, timeout, kwargs = self._call_args(request)
        try:
            response = backend.completion(model, request.messages(), timeout=timeout, **kwargs)
        except Exception as exc:
            if _is_timeout(exc):
                raise SummaryTimeout(f"summarizer {model} did not answer within {timeout:g} s") from exc
            raise
        return self._response(response, model)

    async def asummarize(self, request: SummaryRequest) -> SummaryResponse:
        from contextkit import backend

        model, timeout, kwargs = self._call_args(request)
        try:
            response = await asyncio.wait_for(
                backend.acompletion(model, request.messages(), timeout=timeout, **kwargs), timeout + 5
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if _is_timeout(exc):
                raise SummaryTimeout(f"summarizer {model} did not answer within {timeout:g} s") from exc
            raise
        return self._response(response, model)


Reply = SummaryResponse | BaseException | str | Callable[[SummaryRequest], Any]


class ScriptedSummarizer:
    """A summarizer for tests and demos: answers from a script, one entry per call.

    Entries: a string (the summary text), a ``SummaryResponse``, an exception instance (raised),
    or a callable ``request -> any of these``. The last entry repeats. ``requests`` records calls.
    """

    def __init__(
        self,
        replies: Iterable[Reply] | Reply,
        *,
        prompt_tokens: int = 100,
        completion_tokens: int = 20,
        cost: float = 0.0,
    ) -> None:
        items = list(replies) if isinstance(replies, list | tuple) else [replies]
        if not items:
            raise ValueError("ScriptedSummarizer needs at least one reply")
        self.replies: list[Any] = items
        self.requests: list[SummaryRequest] = []
        self.usage = (prompt_tokens, completion_tokens, cost)

    @property
    def calls(self) -> int:
        return len(self.requests)

    def summarize(self, request: SummaryRequest) -> SummaryResponse:
        self.requests.append(request)
        reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
        if callable(reply) and not isinstance(reply, BaseException):
            reply = reply(request)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, SummaryResponse):
            return reply
        prompt_tokens, completion_tokens, cost = self.usage
        return SummaryResponse(str(reply), prompt_tokens, completion_tokens, cost, request.model or "scripted")

    async def asummarize(self, request: SummaryRequest) -> SummaryResponse:
        await asyncio.sleep(0)
        return self.summarize(request)
