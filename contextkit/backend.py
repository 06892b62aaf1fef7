"""The only module that imports litellm.

Everything else talks to the small functions here: ``token_counter``, ``model_info`` and the
completion calls used by the session. litellm is imported lazily, after the offline environment
is set, so ``import contextkit`` stays cheap and silent.
"""

from __future__ import annotations

import asyncio
import threading
from functools import lru_cache
from typing import Any

from contextkit._offline import ensure_offline

_lock = threading.Lock()
_litellm: Any = None


def litellm() -> Any:
    """The litellm module, imported once with the offline settings applied."""
    global _litellm
    if _litellm is None:
        with _lock:
            if _litellm is None:
                ensure_offline()
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    import litellm as module

                # litellm's pydantic models warn about ReadOnly TypedDict items on first use; noise for users.
                warnings.filterwarnings("ignore", message=r".*ReadOnly.*", category=UserWarning)
                module.suppress_debug_info = True
                module.telemetry = False
                _litellm = module
    return _litellm


def token_counter(model: str, messages: list[dict[str, Any]]) -> int:
    """litellm's token counter (tiktoken, offline)."""
    return int(litellm().token_counter(model=model or "gpt-4o", messages=messages))


@lru_cache(maxsize=128)
def model_info(model: str) -> dict[str, Any]:
    """litellm's model info, or ``{}`` when the model is not in the local map."""
    try:
        info = litellm().get_model_info(model)
    except Exception:  # noqa: BLE001 - unmapped models raise a bare Exception subclass
        return {}
    return dict(info) if info else {}


def completion(model: str, messages: list[dict[str, Any]], *, timeout: float, **kwargs: Any) -> Any:
    """One chat completion through litellm. The SDK's own retries are off: we own retries."""
    kwargs.setdefault("max_retries", 0)
    return litellm().completion(model=model, messages=messages, timeout=timeout, **kwargs)


async def acompletion(model: str, messages: list[dict[str, Any]], *, timeout: float, **kwargs: Any) -> Any:
    kwargs.setdefault("max_retries", 0)
    return await litellm().acompletion(model=model, messages=messages, timeout=timeout, **kwargs)


def completion_cost(response: Any, model: str | None = None) -> float:
    """Cost from litellm's local cost map; 0.0 for models it does not price."""
    try:
        return float(litellm().completion_cost(completion_response=response, model=model) or 0.0)
    except Exception:  # noqa: BLE001 - unpriced models raise
        return 0.0


def close_stream(stream: Any) -> None:
    """Hang up on a provider stream read only part-way (litellm's wrapper closes the HTTP response)."""
    close = getattr(stream, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # noqa: BLE001 - closing is best effort; the reader already stopped
            pass


async def aclose_stream(stream: Any) -> None:
    aclose = getattr(stream, "aclose", None)
    try:
        if callable(aclose):
            await aclose()
        else:
            close_stream(stream)
    except Exception:  # noqa: BLE001 - closing is best effort; the reader already stopped
        pass
    # asyncio closes a transport's socket on the next loop iteration: let it run, so the
    # connection is gone when this returns.
    await asyncio.sleep(0)


def provider_finished(stream: Any) -> bool | None:
    """Whether the provider itself sent a finish reason on a stream read to its end; None if unknown.

    litellm reports ``finish_reason="stop"`` even for an event stream with no events at all (what
    llama.cpp's server sends for a streamed request over its window); its wrapper remembers whether
    the provider really sent one.
    """
    received = getattr(stream, "received_finish_reason", _MISSING)
    if received is _MISSING:
        return None
    return received is not None or bool(getattr(stream, "received_any_finish_reason", False))


_MISSING = object()


def cache_usage(usage: Any) -> tuple[int, int]:
    """(cached prompt tokens read, prompt tokens written to the cache) from litellm's usage object.

    litellm normalises providers into one shape: OpenAI's ``prompt_tokens_details.cached_tokens``;
    Anthropic's ``cache_read_input_tokens`` / ``cache_creation_input_tokens`` (also mirrored into
    ``prompt_tokens_details``). In both, ``prompt_tokens`` is the whole prompt, cached part included.
    """
    if usage is None:
        return 0, 0
    details = getattr(usage, "prompt_tokens_details", None)
    read = _int(getattr(details, "cached_tokens", None)) or _int(getattr(usage, "cache_read_input_tokens", None))
    written = _int(getattr(usage, "cache_creation_input_tokens", None)) or _int(
        getattr(details, "cache_creation_tokens", None)
    )
    return read, written


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def request_cost(
    model: str, *, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0, cache_write_tokens: int = 0
) -> float:
    """Dollars for one request priced as ``model`` by litellm's cost map, cache prices included
    (``cache_read_input_token_cost`` for cached tokens, ``cache_creation_input_token_cost`` for
    written ones; the plain input price where the map has none). 0.0 for models it does not price."""
    from litellm.types.utils import Usage

    usage = Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        prompt_tokens_details={"cached_tokens": cached_tokens, "cache_creation_tokens": cache_write_tokens},
        cache_read_input_tokens=cached_tokens,
        cache_creation_input_tokens=cache_write_tokens,
    )
    try:
        prompt_cost, completion_cost_ = litellm().cost_per_token(model=model, usage_object=usage)
    except Exception:  # noqa: BLE001 - unpriced models raise
        return 0.0
    return float(prompt_cost + completion_cost_)


def is_priced(model: str) -> bool:
    """Whether litellm's cost map has input prices for ``model`` (a ``price_as`` candidate)."""
    return bool(model_info(model).get("input_cost_per_token"))


def provider_of(model: str) -> str:
    """litellm's provider for a model string (``anthropic``, ``openai``, ``bedrock`` ...); '' if unknown."""
    try:
        return str(litellm().get_llm_provider(model)[1] or "")
    except Exception:  # noqa: BLE001 - unknown prefixes raise
        return ""


def stream_chunk_builder(chunks: list[Any], messages: list[dict[str, Any]] | None = None) -> Any:
    """Rebuild a full response from streamed chunks (litellm's builder)."""
    return litellm().stream_chunk_builder(chunks, messages=messages)


def trim_messages(messages: list[dict[str, Any]], model: str, max_tokens: int) -> list[dict[str, Any]]:
    """litellm's own ``trim_messages`` (a baseline strategy for experiments)."""
    return list(litellm().utils.trim_messages(messages, model=model, max_tokens=max_tokens))
