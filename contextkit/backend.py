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


def stream_chunk_builder(chunks: list[Any], messages: list[dict[str, Any]] | None = None) -> Any:
    """Rebuild a full response from streamed chunks (litellm's builder)."""
    return litellm().stream_chunk_builder(chunks, messages=messages)


def trim_messages(messages: list[dict[str, Any]], model: str, max_tokens: int) -> list[dict[str, Any]]:
    """litellm's own ``trim_messages`` (a baseline strategy for experiments)."""
    return list(litellm().utils.trim_messages(messages, model=model, max_tokens=max_tokens))
