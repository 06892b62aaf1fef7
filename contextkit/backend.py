"""The only module that imports litellm.

Everything else talks to the small functions here: ``token_counter``, ``model_info`` and the
completion calls used by the session. litellm is imported lazily, on first use, so
``import contextkit`` stays cheap and silent. Importing it changes nothing of the host process
beyond what litellm's own import does; ``offline()`` is the explicit opt-in for a process that
owns its environment and runs on a closed network.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_litellm: Any = None
_offline = False  # offline() was called: quiet litellm once it is imported

# What ``offline()`` sets when the process has not set it: each one keeps a library from reaching
# the network on its own.
OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm's import: the bundled cost map, no fetch
    "LITELLM_OFFLINE_MODE": "true",  # litellm: no catalog, check or tokenizer fetched later
    "HF_HUB_OFFLINE": "1",  # Hugging Face tokenizers and models: the local cache only
    "HEADROOM_OFFLINE": "1",  # the headroom peer of the experiments: no model or telemetry download
}


def litellm() -> Any:
    """The litellm module, imported once, as the host configured it.

    Nothing is set around the import: no environment variable, no warnings filter, no litellm
    global (unless ``offline()`` was called). What a bare ``import litellm`` does to the process,
    it does here too.
    """
    global _litellm
    if _litellm is None:
        with _lock:
            if _litellm is None:
                import litellm as module

                if _offline:
                    module.suppress_debug_info = True
                _litellm = module
    return _litellm


def litellm_tokenizers_dir() -> Path | None:
    """The folder of tokenizer files bundled inside the installed litellm wheel, if any.

    It holds tiktoken's encodings under the names tiktoken's cache gives them (the SHA-1 of the
    download URL). Found without importing litellm.
    """
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
    return folder if folder.is_dir() else None


def offline() -> None:
    """Keep litellm, tiktoken and the libraries the experiments drive off the network.

    For a process that owns its environment and runs where there is no internet (or should use
    none): the simulator, ``contextkit demo``, the notebooks, the tests. A library or service that
    merely uses contextkit should not call it: plain use of contextkit changes nothing of the host.
    Call it first, before litellm is imported, for the first item to take effect. Idempotent; a
    variable the process has already set is left as it is, whatever its value.

    What it changes:

    * ``os.environ``: ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (litellm's import reads its bundled
      cost map instead of fetching it from GitHub), ``LITELLM_OFFLINE_MODE=true`` (litellm fetches
      no catalog, check or tokenizer later), ``HF_HUB_OFFLINE=1`` (Hugging Face loads from its
      local cache only), ``HEADROOM_OFFLINE=1`` (the headroom peer downloads nothing), and
      ``TIKTOKEN_CACHE_DIR`` pointed at the encodings bundled in the litellm wheel (tiktoken
      used directly, e.g. by langchain-openai, finds them instead of downloading them).
    * ``litellm.suppress_debug_info = True`` now if litellm is imported, else when contextkit
      imports it: litellm otherwise prints "Give Feedback / Get Help" to stdout on every provider
      error, including the gateway refusals contextkit recovers from, and "Provider List" when
      it prices a reply whose model it cannot route (the simulator's).

    What litellm does without it (measured with litellm 1.110.2 on a machine with no internet
    access): ``import litellm`` tries to fetch the cost map; the name does not resolve, so the
    import does not wait (4.4-5.9 s either way on a busy 2-core machine, the same as with the
    local map) but LiteLLM logs four warnings to stderr over about 8 s, two from a background
    thread that retries the fetch, then uses its bundled map. Where the network drops packets
    instead, the first attempt can block the import for its 5 s timeout. A bare import writes
    no environment variable, but adds its own warnings filters (ignoring pydantic's ``ReadOnly``
    and protected-namespace warnings); litellm's first token count (its
    ``litellm_core_utils/default_encoding.py``) sets ``TIKTOKEN_CACHE_DIR`` to its bundled
    folder, replacing any value the host had set, unless ``CUSTOM_TIKTOKEN_CACHE_DIR`` is set.
    contextkit's own token counting reads the bundled files directly and needs none of this.
    """
    global _offline
    for name, value in OFFLINE_ENV.items():
        os.environ.setdefault(name, value)
    if "TIKTOKEN_CACHE_DIR" not in os.environ and (folder := litellm_tokenizers_dir()) is not None:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
    _offline = True
    module: Any = sys.modules.get("litellm")
    if module is not None:  # else litellm() quiets it once it has imported it
        module.suppress_debug_info = True


def offline_requested() -> bool:
    """Whether this process called ``offline()`` (workers it starts for a sweep call it too)."""
    return _offline


def token_counter(model: str, messages: list[dict[str, Any]]) -> int:
    """litellm's token counter (tiktoken, offline)."""
    return int(litellm().token_counter(model=model or "gpt-4o", messages=messages))


@lru_cache(maxsize=128)
def model_info(model: str) -> dict[str, Any]:
    """litellm's model info, or ``{}`` when the model is not in the local map.

    A model the cost map does not name is answered without asking litellm: for such a model its
    lookup prints a "Provider List" banner to the host's stdout on every call (no per-call switch),
    and every reply of a local server or the simulator would print one."""
    if not in_cost_map(model):
        return {}
    try:
        info = litellm().get_model_info(model)
    except Exception:  # noqa: BLE001 - unmapped models raise a bare Exception subclass
        return {}
    return dict(info) if info else {}


def completion(model: str, messages: list[dict[str, Any]], *, timeout: float, **kwargs: Any) -> Any:
    """One chat completion through litellm. The SDK's own retries are off: we own retries."""
    kwargs.setdefault("max_retries", 0)
    response = litellm().completion(model=model, messages=messages, timeout=timeout, **kwargs)
    if kwargs.get("stream"):
        _keep_context_management(response)
    return response


async def acompletion(model: str, messages: list[dict[str, Any]], *, timeout: float, **kwargs: Any) -> Any:
    kwargs.setdefault("max_retries", 0)
    response = await litellm().acompletion(model=model, messages=messages, timeout=timeout, **kwargs)
    if kwargs.get("stream"):
        _keep_context_management(response)
    return response


def _keep_context_management(stream: Any) -> None:
    """Keep what litellm's Anthropic stream parser drops: the ``context_management`` of the final
    ``message_delta`` event (the server-side edits applied to the prompt; a JSON answer keeps it in
    the message's ``provider_specific_fields``). The parser of this one stream is wrapped on the
    instance; nothing of litellm changes for anyone else. ``stream_context_edits`` reads it."""
    parser: Any = getattr(stream, "completion_stream", None)
    parse = getattr(parser, "chunk_parser", None)
    if not callable(parse):
        return  # another provider's stream, or a litellm without this parser: nothing to keep
    edits: list[dict[str, Any]] = []

    def chunk_parser(chunk: Any) -> Any:
        management = chunk.get("context_management") if isinstance(chunk, dict) else None
        applied = management.get("applied_edits") if isinstance(management, dict) else None
        if isinstance(applied, list):
            edits.extend(e for e in applied if isinstance(e, dict))
        return parse(chunk=chunk)

    try:
        parser.chunk_parser = chunk_parser
        stream.contextkit_context_edits = edits
    except (AttributeError, TypeError):  # a parser or wrapper that takes no attributes: nothing kept
        pass


def stream_context_edits(stream: Any) -> tuple[dict[str, Any], ...]:
    """The server-side context edits a stream read to its end reported (Anthropic's
    ``context_management.applied_edits`` on its final ``message_delta`` event); () if none."""
    return tuple(getattr(stream, "contextkit_context_edits", None) or ())


def provider_body(
    model: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    params: dict[str, Any] | None = None,
    copy_messages: bool = True,
) -> bytes:
    """The request body litellm posts for ``model`` on a route it builds itself (Anthropic's
    messages API), as bytes: litellm's own parameter mapping and request transformation for the
    provider, serialised the way its HTTP handler serialises it (``json.dumps`` defaults: ASCII
    escapes, ``", "`` separators). Nothing is sent. Raises what litellm raises for a request it
    would refuse to build (no non-system message, for one). ``copy_messages=False``: the caller's
    dicts are fresh copies that litellm's transformation may change."""
    import copy
    import json

    lm = litellm()
    bare, provider, _, _ = lm.get_llm_provider(model)
    config = lm.utils.ProviderConfigManager.get_provider_chat_config(model=bare, provider=lm.LlmProviders(provider))
    if config is None:
        raise ValueError(f"litellm has no request transformation for provider {provider!r}")
    optional = lm.utils.get_optional_params(
        model=bare, custom_llm_provider=provider, tools=tools or None, **(params or {})
    )
    # what the handler does before transforming: its own copies, the stream flag added afterwards
    optional = copy.deepcopy(optional)
    stream = optional.pop("stream", None)
    for internal in ("json_mode", "is_vertex_request", "vertex_count_tokens_location"):
        optional.pop(internal, None)
    data = config.transform_request(
        model=bare, messages=copy.deepcopy(messages) if copy_messages else messages, optional_params=optional, litellm_params={}, headers={}
    )
    if stream is True:
        data["stream"] = True
    return json.dumps(data).encode("utf-8")


def in_cost_map(model: str | None) -> bool:
    """Whether litellm's cost map names ``model`` (as given, or without its provider prefix).
    Only reads the map; litellm's own lookup of an unknown model prints to stdout."""
    if not model:
        return False
    known = litellm().model_cost
    bare = model.split("/", 1)[1] if "/" in model else model
    return model in known or bare in known


def completion_cost(response: Any, model: str | None = None) -> float:
    """Cost from litellm's local cost map; 0.0 for models it does not price (not asked: see ``model_info``)."""
    if not in_cost_map(model or getattr(response, "model", None)):
        return 0.0
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
