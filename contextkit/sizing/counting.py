"""Tokens as litellm's counter counts them: tiktoken with litellm's encoding choice and chunking,
built offline from the tokenizer files bundled in the litellm wheel."""

from __future__ import annotations

import base64
import hashlib
import os
import types
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from contextkit.errors import ContextkitRuntimeError
from contextkit.messages import Message, to_wire
from contextkit.sizing.wire import dumps

_REPLY_PRIMING = 3  # tokens litellm/OpenAI add once per request for the assistant reply


@lru_cache(maxsize=64)
def _encoding_name(model: str) -> str:
    name = model.split("/")[-1].lower()
    if any(name.startswith(p) for p in ("gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")):
        return "o200k_base"
    return "cl100k_base"


@lru_cache(maxsize=4)
def _encoding(name: str) -> Any:
    """tiktoken's encoding ``name``, built from the copy bundled in the litellm wheel.

    ``tiktoken.get_encoding`` would download the file unless ``TIKTOKEN_CACHE_DIR`` points at a
    copy, and setting that variable would change the host's environment. Instead tiktoken's own
    constructor for the encoding (its split pattern and special tokens) runs with a loader that
    reads the bundled file: no download, no environment variable read or written, nothing
    written to tiktoken's cache, and litellm is not imported.
    """
    import tiktoken
    from tiktoken_ext import openai_public

    constructor = getattr(openai_public, name)
    scope = {**constructor.__globals__, "load_tiktoken_bpe": _bundled_bpe}
    spec = types.FunctionType(constructor.__code__, scope, constructor.__name__)()
    return tiktoken.Encoding(**spec)


def _bundled_bpe(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
    """The ranks tiktoken would download from ``url``, read from litellm's bundled copy instead
    (stored under tiktoken's cache name for the URL) and checked against tiktoken's hash."""
    from contextkit import backend

    folder = backend.litellm_tokenizers_dir()
    path = folder / hashlib.sha1(url.encode()).hexdigest() if folder is not None else None
    if path is None or not path.is_file():
        raise ContextkitRuntimeError(
            f"token counting needs the tiktoken encoding at {url}, which the installed litellm does not "
            f"bundle ({path or 'litellm not found'}); contextkit never downloads it. Reinstall litellm "
            "(pip install --force-reinstall litellm) to get its bundled tokenizers back"
        )
    data = path.read_bytes()
    if expected_hash is not None and hashlib.sha256(data).hexdigest() != expected_hash:
        raise ContextkitRuntimeError(
            f"litellm's bundled tokenizer file {path} does not match tiktoken's hash for {url}; "
            "reinstall litellm (pip install --force-reinstall litellm)"
        )
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _chunk_chars() -> int:
    # litellm encodes long text in chunks (linear cost, <= 1 token drift per boundary); we count the
    # same way so our numbers equal its counter's.
    try:
        return min(4096, max(1, int(os.environ.get("TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS", "1024"))))
    except ValueError:
        return 1024


def text_tokens(text: str, model: str = "") -> int:
    """tiktoken count of plain text with the encoding and chunking litellm uses for ``model`` (offline)."""
    if not text:
        return 0
    encode = _encoding(_encoding_name(model)).encode
    step = _chunk_chars()
    return sum(len(encode(text[i : i + step], disallowed_special=())) for i in range(0, len(text), step))


def truncate_to_tokens(text: str, max_tokens: int, model: str = "") -> str:
    """The longest prefix of ``text`` whose ``text_tokens`` count is at most ``max_tokens``.

    Walks the same chunks ``text_tokens`` counts, then binary-searches the chunk that overflows, so
    ``text_tokens(result) <= max_tokens`` holds exactly.
    """
    if max_tokens <= 0 or not text:
        return ""
    encode = _encoding(_encoding_name(model)).encode
    step = _chunk_chars()
    used = 0
    for start in range(0, len(text), step):
        chunk = text[start : start + step]
        cost = len(encode(chunk, disallowed_special=()))
        if used + cost <= max_tokens:
            used += cost
            continue
        lo, hi = 0, len(chunk)  # longest chunk prefix that still fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if used + len(encode(chunk[:mid], disallowed_special=())) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[: start + lo]
    return text


def message_tokens(message: Message | Mapping[str, Any], model: str = "") -> int:
    """Tokens of one message as litellm's ``token_counter`` counts it (without the reply priming)."""
    from contextkit import backend

    wire = to_wire(message) if isinstance(message, Message) else dict(message)
    content = wire.get("content")
    calls = wire.get("tool_calls")
    if (
        (content is None or isinstance(content, str))
        and set(wire) <= _COUNTED_HERE
        and (calls is None or (isinstance(calls, list) and all(_is_call(c) for c in calls)))
    ):
        # litellm's formula (``_count_messages``) without its per-call set-up (its tokenizer lookup,
        # model checks and message conversion cost more than counting a short message): 3 per message,
        # every string value (role, content, name, tool_call_id) counted, +1 for a name, and of each
        # tool call only its arguments; checked against litellm in tests.
        tokens = 3
        for key, value in wire.items():
            if value is None:
                continue
            if key == "tool_calls":
                tokens += sum(text_tokens(str(c["function"].get("arguments", "")), model) for c in value)
            elif isinstance(value, str):
                tokens += _short_tokens(value, model) if key == "role" else text_tokens(value, model)
                tokens += 1 if key == "name" else 0
        return tokens
    return max(0, backend.token_counter(model, [wire]) - _REPLY_PRIMING)


_COUNTED_HERE = frozenset({"role", "content", "name", "tool_call_id", "tool_calls"})


def _is_call(call: Any) -> bool:
    return isinstance(call, Mapping) and isinstance(call.get("function"), Mapping)


@lru_cache(maxsize=64)
def _short_tokens(text: str, model: str) -> int:
    """``text_tokens`` of a word said again and again (a role)."""
    return text_tokens(text, model)


def tools_tokens(tools: Sequence[Mapping[str, Any]] | None, model: str = "") -> int:
    if not tools:
        return 0
    return text_tokens(dumps(list(tools)), model)
