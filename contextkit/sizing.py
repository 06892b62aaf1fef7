"""Honest request size: bytes of the JSON body actually sent, and tokens via litellm's counter.

* ``request_bytes`` is the length of the body litellm posts for the model's route. On the OpenAI
  route (and every OpenAI-compatible one) that is the chat-completions body (messages, tool-call
  arguments, tool schemas, image parts, model and parameters), serialised the way the OpenAI SDK /
  httpx send it (``ensure_ascii=False``, compact separators). On the Anthropic route litellm
  builds a different body itself (content blocks, the system prompt apart, tool calls as parsed
  ``input`` objects, ASCII-escaped JSON: a CJK character is 6 bytes there, 3 on the OpenAI route),
  so that body is measured as litellm's own transformation builds it (``backend.provider_body``).
* ``RequestMeter`` caches per-message byte and token sizes, so re-measuring a grown history costs
  only the new messages (a 10 MB, 2,000-message history is checked before each request in
  milliseconds, not recounted). On the Anthropic route it caches a small stand-in of each message
  instead (``_Skeleton``) and lets litellm transform the stand-ins: the bytes are litellm's, the
  cost does not grow with the size of the texts.
* ``parse_size`` / ``format_size`` read and print human sizes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import os
import re
import threading
import types
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from contextkit.errors import ConfigError, ContextkitRuntimeError
from contextkit.messages import Message, to_wire

_log = logging.getLogger("contextkit")

KB = 1024
MB = 1024 * 1024
GB = 1024 * 1024 * 1024

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(gb|mb|kb|g|m|k|b)?\s*$", re.IGNORECASE)
_UNITS = {"gb": GB, "g": GB, "mb": MB, "m": MB, "kb": KB, "k": KB, "b": 1, None: MB}
SIZE_FORMS = '"5MB", "512KB", "2.5MB", "1GB", "1024B" or a bare number of megabytes such as "5"'


def parse_size(value: str | int | float, *, what: str = "size") -> int:
    """``"5MB"`` → 5242880, ``"512KB"`` → 524288, ``"2.5MB"``, ``"5"`` (= 5 MB). Ints are bytes.

    Raises ``ConfigError`` naming the accepted forms for anything else, including zero and
    negative values.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a size such as {SIZE_FORMS}, got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ConfigError(f"{what}: must be a positive number of bytes, got {value}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or int(value) <= 0:
            raise ConfigError(f"{what}: must be a positive, finite number of bytes, got {value}")
        return int(value)
    if not isinstance(value, str):
        raise ConfigError(f"{what}: expected a size such as {SIZE_FORMS}, got {type(value).__name__}")
    match = _SIZE_RE.match(value)
    if not match:
        raise ConfigError(f"{what}: cannot read {value!r} as a size; use {SIZE_FORMS}")
    number = float(match.group(1))
    if not math.isfinite(number):
        raise ConfigError(f"{what}: {value!r} is too large; use {SIZE_FORMS}")
    unit = match.group(2).lower() if match.group(2) else None
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise ConfigError(f"{what}: must be greater than zero, got {value!r}; use {SIZE_FORMS}")
    return size


def format_size(n: int | float) -> str:
    """512 → "512 B", 2048 → "2.0 KB", 5242880 → "5.0 MB"."""
    n = int(n)
    if n >= GB:
        return f"{n / GB:.1f} GB"
    if n >= MB:
        return f"{n / MB:.1f} MB"
    if n >= KB:
        return f"{n / KB:.1f} KB"
    return f"{n} B"


def dumps(obj: Any) -> str:
    """JSON as the OpenAI SDK sends it."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def body_bytes(body: Mapping[str, Any]) -> int:
    return len(dumps(body).encode("utf-8", "surrogatepass"))


def sent_message(message: Message | Mapping[str, Any]) -> dict[str, Any]:
    """The message dict as litellm puts it on the wire: top-level ``None`` values are dropped
    (an assistant tool-call message with ``content: None`` is sent without ``content``)."""
    wire = to_wire(message) if isinstance(message, Message) else message
    return {k: v for k, v in wire.items() if v is not None}


def message_bytes(message: Message | Mapping[str, Any]) -> int:
    return len(dumps(sent_message(message)).encode("utf-8", "surrogatepass"))


def request_bytes(
    messages: Sequence[Message | Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    model: str = "",
    **params: Any,
) -> int:
    """Byte length of the body litellm sends for these messages and tools on ``model``'s route
    (see the module docstring); exact, and O(size of the texts): ``RequestMeter`` is the cheap way
    to measure a history again and again."""
    if wire_route(model) == ANTHROPIC_ROUTE:
        built = _provider_bytes(model, [_wire_of(m) for m in messages], tools, params)
        if built is not None:
            return built
    return openai_request_bytes(messages, tools=tools, model=model, **params)


def openai_request_bytes(
    messages: Sequence[Message | Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    model: str = "",
    **params: Any,
) -> int:
    """UTF-8 byte length of the chat-completions JSON body for these messages and tools."""
    body: dict[str, Any] = {
        "messages": [sent_message(m) for m in messages],
        "model": _wire_model(model),
    }
    if tools:
        body["tools"] = list(tools)
    body.update(sent_params(params, has_tools=bool(tools)))
    return body_bytes(body)


# Keyword arguments litellm consumes itself (measured on litellm 1.110.2, openai/ route): they
# never reach the body. ``user`` is dropped by litellm's OpenAI-compatible route as well.
_NOT_SENT = frozenset(
    {
        "metadata", "drop_params", "timeout", "max_retries", "num_retries", "api_key", "api_base",
        "base_url", "api_version", "custom_llm_provider", "mock_response", "caching", "user",
        "extra_headers", "litellm_logging_obj",
    }
)  # fmt: skip


def body_params(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of a litellm call that shape the request body (temperature, seed,
    response_format, tool_choice, extra_body ...): everything but litellm's own options and
    credentials. Give them to ``RequestMeter.measure`` so measured bytes equal the bytes sent."""
    return {k: v for k, v in kwargs.items() if k not in _NOT_SENT}


def sent_params(params: Mapping[str, Any], *, has_tools: bool) -> dict[str, Any]:
    """The completion parameters as they appear in the body: ``None`` values, ``stream=False``,
    litellm-only keys and ``tool_choice`` without tools are not sent; ``extra_body`` is merged."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None or key in _NOT_SENT or key == "extra_body":
            continue
        if (key == "stream" and value is False) or (key == "tool_choice" and not has_tools):
            continue
        out[key] = value
    extra = params.get("extra_body")
    if isinstance(extra, Mapping):
        out.update(extra)
    return out


def _wire_model(model: str) -> str:
    """litellm strips the provider prefix before sending."""
    return model.split("/", 1)[1] if "/" in model else model


# routes ---------------------------------------------------------------------------------------

OPENAI_ROUTE = "openai"
ANTHROPIC_ROUTE = "anthropic"


@lru_cache(maxsize=256)
def wire_route(model: str) -> str:
    """Which body litellm posts for ``model``: ``"anthropic"`` (litellm's own Anthropic messages
    body) or ``"openai"`` (the chat-completions body, for OpenAI and every other route; only those
    two are checked against what a server received). A model without a provider prefix is routed
    by litellm itself."""
    if not model:
        return OPENAI_ROUTE
    prefix = model.split("/", 1)[0] if "/" in model else ""
    if prefix in (OPENAI_ROUTE, ANTHROPIC_ROUTE):
        return prefix
    from contextkit import backend

    return ANTHROPIC_ROUTE if backend.provider_of(model) == ANTHROPIC_ROUTE else OPENAI_ROUTE


def _wire_of(message: Message | Mapping[str, Any]) -> dict[str, Any]:
    return to_wire(message) if isinstance(message, Message) else dict(message)


def _provider_bytes(
    model: str, wire: list[dict[str, Any]], tools: Sequence[Mapping[str, Any]] | None, params: Mapping[str, Any]
) -> int | None:
    """Length of the body litellm builds for ``wire``; None when litellm refuses to build one
    (a request without a non-system message: it never reaches the wire)."""
    from contextkit import backend

    sent = {k: v for k, v in params.items() if k not in _NOT_SENT and v is not None}
    try:
        return len(backend.provider_body(model, wire, tools=[dict(t) for t in tools] if tools else None, params=sent))
    except Exception as exc:  # noqa: BLE001 - litellm raises its own and plain errors for bodies it will not build
        _log.debug("litellm builds no %s body for this request (%s); measured as the chat-completions body", model, exc)
        return None


# tokens -------------------------------------------------------------------------------------

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
    if (
        isinstance(content, str)
        and not wire.get("tool_calls")
        and set(wire) <= {"role", "content", "name", "tool_call_id"}
    ):
        # Same formula as litellm's counter for plain text messages, without its per-call overhead
        # (3 per message + role + content, +1 + name); checked against litellm in tests.
        tokens = 3 + text_tokens(str(wire["role"]), model) + text_tokens(content, model)
        if wire.get("name"):
            tokens += 1 + text_tokens(str(wire["name"]), model)
        if wire.get("tool_call_id"):
            return max(0, backend.token_counter(model, [wire]) - _REPLY_PRIMING)
        return tokens
    return max(0, backend.token_counter(model, [wire]) - _REPLY_PRIMING)


def tools_tokens(tools: Sequence[Mapping[str, Any]] | None, model: str = "") -> int:
    if not tools:
        return 0
    return text_tokens(dumps(list(tools)), model)


# incremental meter ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Measure:
    bytes: int
    tokens: int
    messages: int


# The stand-in of a long text on the Anthropic route: letters and digits only (JSON and base64
# leave them as they are), a multiple of 4 long (a base64 image payload stays valid), a salt per
# process so a text cannot contain another message's stand-in by accident.
_SALT = os.urandom(3).hex()
_MARK = re.compile(rf"Ck{_SALT}(\d{{8}})".encode())
_KEEP = 8  # characters kept at each end of a replaced text: litellm strips, checks emptiness there
_LONG = 64  # texts shorter than this are sent to litellm as they are
_MEMO = 16  # whole-request results kept (the same history is measured several times per turn)


@dataclass(frozen=True, slots=True)
class _Skeleton:
    """A message as litellm sees it, with the middle of each long text replaced by a stand-in;
    ``marks`` maps each stand-in's number to the bytes the real middle adds beyond it."""

    wire: dict[str, Any]
    marks: tuple[tuple[int, int], ...]
    fetched: bool = False  # an http:// image, which litellm downloads into the body when it sends


def _ascii_len(text: str) -> int:
    """Bytes of ``text`` inside an ASCII-escaped JSON string (what ``json.dumps`` writes)."""
    return len(json.dumps(text)) - 2


def _fresh(obj: Any) -> Any:
    """A copy of the dicts and lists of ``obj`` (litellm's transformation may change them)."""
    if isinstance(obj, dict):
        return {k: _fresh(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fresh(v) for v in obj]
    return obj


RECENT_REQUESTS = 4  # histories a meter remembers whole (the request of a step and its rewrites)
CALIBRATION_BAND = (0.5, 2.0)  # provider / our token counts outside this band are not learned from
# below this many tokens the fixed framing of a request (which providers count differently) outweighs
# the tokenizer's difference, which is what the ratio is for
CALIBRATION_MIN_TOKENS = 1024
CALIBRATION_DEADBAND = 0.03


class RequestMeter:
    """Caches per-message sizes so re-measuring a grown history costs only the new messages.

    Keys are the immutable ``Message`` values themselves (their hash is cheap: Python caches
    string hashes), so a message that appears again after compaction is not re-counted.

    On the Anthropic route (``wire_route``) the request bytes come from the body litellm builds:
    each message is cached as a ``_Skeleton`` (long texts cut to their ends around a numbered
    stand-in), litellm transforms the skeletons, and each stand-in found in that body adds the
    escaped size of the text it replaced. Every decision litellm makes about the request (merged
    turns, the system prompt apart, parsed tool-call arguments, an added placeholder tool) is in
    the figure; only the long texts are not handed to it again. A stand-in litellm does not pass
    through (it never has) makes that request measured from the real messages instead.
    """

    def __init__(self, model: str = "", *, max_entries: int = 200_000) -> None:
        self.model = model
        self._cache: OrderedDict[Message, tuple[int, int]] = OrderedDict()
        self._skeletons: dict[Message, _Skeleton] = {}
        self._memo: OrderedDict[Any, int | None] = OrderedDict()
        self._next_mark = 0
        self._lock = threading.Lock()
        self._max = max_entries
        self.misses = 0
        self.hits = 0
        self.fallbacks = 0  # Anthropic-route requests measured from the real messages
        # the request framing (body skeleton bytes, tool tokens) per tools + parameters, and the last
        # few histories measured: the turn flow measures the same request several times per step,
        # and a history seen again (the same message objects) costs a comparison, not a sum
        self._framing: dict[str, tuple[int, int]] = {}
        self._recent: list[tuple[tuple[Message, ...], str, Measure]] = []
        self.measured = 0  # requests measured message by message (the rest came from the recent ones)
        self.calls = 0
        # calibration: the provider's prompt_tokens over our count, learned from the requests it
        # answered (``calibrate``); every token count this meter gives is scaled by it
        self.ratio = 1.0
        self._counted = 0  # our tokens (before scaling) over the requests learned from
        self._reported = 0  # the provider's prompt_tokens for them
        self.samples = 0
        self.skipped = 0

    def calibrate(self, measured: int, reported: int) -> float:
        """Learn from one answered request: ``measured`` is this meter's (scaled) count of what was sent,
        ``reported`` the provider's ``prompt_tokens``. A count far from ours (below half or above
        twice) is skipped, and so is a small request (below ``CALIBRATION_MIN_TOKENS``, where the
        framing dominates): the provider did not count what we sent (it edited the request, or a proxy
        added to it), so it says nothing about the tokenizer. Returns the ratio in force."""
        if measured <= 0 or reported < CALIBRATION_MIN_TOKENS:
            return self.ratio
        raw = measured / self.ratio
        if not CALIBRATION_BAND[0] <= reported / raw <= CALIBRATION_BAND[1]:
            with self._lock:
                self.skipped += 1
            return self.ratio
        with self._lock:
            self._counted += round(raw)
            self._reported += reported
            self.samples += 1
            ratio = self._reported / self._counted
            # within CALIBRATION_DEADBAND of ours the count is close enough: it stays exact, so a
            # session's decisions do not shift with every answered request for a percent or two
            ratio = 1.0 if abs(ratio - 1.0) < CALIBRATION_DEADBAND else ratio
            if ratio != self.ratio:
                self.ratio = ratio
                self._recent = []  # remembered measures hold counts at the old ratio
            return self.ratio

    @property
    def route(self) -> str:
        return wire_route(self.model)

    def _sizes(self, message: Message) -> tuple[int, int]:
        with self._lock:
            hit = self._cache.get(message)
            if hit is not None:
                self.hits += 1
                return hit
        # escaped as the route sends text: ASCII escapes on the Anthropic route, UTF-8 elsewhere
        anthropic = self.route == ANTHROPIC_ROUTE
        size = len(json.dumps(sent_message(message))) if anthropic else message_bytes(message)
        sizes = (size, message_tokens(message, self.model))
        with self._lock:
            self.misses += 1
            self._cache[message] = sizes
            if len(self._cache) > self._max:
                self._cache.popitem(last=False)
        return sizes

    def message_bytes(self, message: Message) -> int:
        """One message's bytes as this route escapes its texts (for budgets; the request total
        is ``measure``)."""
        return self._sizes(message)[0]

    def retain(self, messages: Iterable[Message]) -> None:
        """Forget every cached message not in ``messages``. The cache holds the messages themselves,
        so without this the originals that compaction replaced would stay in memory."""
        keep = set(messages)
        with self._lock:
            for message in [m for m in self._cache if m not in keep]:
                del self._cache[message]
            for message in [m for m in self._skeletons if m not in keep]:
                del self._skeletons[message]
            self._memo.clear()
            self._recent = [r for r in self._recent if all(m in keep for m in r[0])]

    @property
    def entries(self) -> int:
        return len(self._cache)

    def measure(
        self,
        history: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **params: Any,
    ) -> Measure:
        """Request bytes and tokens of ``history`` (+ tools), equal to ``request_bytes`` exactly."""
        key = json.dumps([list(tools or ()), sorted(params.items())], default=repr)
        self.calls += 1
        messages = tuple(history)
        with self._lock:
            for seen, seen_key, result in self._recent:
                if seen_key == key and len(seen) == len(messages) and all(a is b for a, b in zip(seen, messages, strict=True)):
                    self.hits += len(messages)  # every message's sizes came from memory
                    return result
            framing = self._framing.get(key)
        if framing is None:
            # the skeleton has "messages":[]; each message and the commas between them are added below
            framing = (openai_request_bytes([], tools=tools, model=self.model, **params), tools_tokens(tools, self.model))
            with self._lock:
                if len(self._framing) > 64:
                    self._framing.clear()
                self._framing[key] = framing
        total_bytes = 0
        total_tokens = 0
        for message in messages:
            b, t = self._sizes(message)
            total_bytes += b
            total_tokens += t
        total_tokens += _REPLY_PRIMING + framing[1]
        if self.route == ANTHROPIC_ROUTE:
            built = self._built_bytes(history, tools, params, None)
            if built is not None:
                total_bytes = built - framing[0] - max(0, len(messages) - 1)  # the whole body, framing included
            else:
                total_bytes = sum(message_bytes(m) for m in messages)
        total_bytes += framing[0] + max(0, len(messages) - 1)
        if self.ratio != 1.0:
            total_tokens = round(total_tokens * self.ratio)
        result = Measure(bytes=total_bytes, tokens=total_tokens, messages=len(messages))
        with self._lock:
            self.measured += 1
            self._recent = [(messages, key, result), *self._recent[:RECENT_REQUESTS - 1]]
        return result

    def breakpoint_bytes(
        self,
        history: Sequence[Message],
        positions: Sequence[int],
        cache_control: Mapping[str, Any],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **params: Any,
    ) -> int:
        """Bytes that ``cache_control`` on the messages at ``positions`` adds to the request.

        The OpenAI form carries it as one more key of each marked message; litellm's Anthropic
        body moves it onto the message's last content block, so there it is measured."""
        if not positions:
            return 0
        if self.route == ANTHROPIC_ROUTE:
            marked = self._built_bytes(history, tools, params, (tuple(positions), dumps(cache_control)))
            plain = self._built_bytes(history, tools, params, None)
            if marked is not None and plain is not None:
                return marked - plain
        return len(positions) * (len(dumps({"cache_control": cache_control})) - 1)  # braces out, a comma in

    # the Anthropic route ---------------------------------------------------------------------

    def _skeleton(self, message: Message) -> _Skeleton:
        with self._lock:
            hit = self._skeletons.get(message)
        if hit is not None:
            return hit
        wire = sent_message(message)
        marks: list[tuple[int, int]] = []

        def cut(text: Any, *, payload: bool = False) -> Any:
            if not isinstance(text, str) or len(text) < _LONG:
                return text
            head_end = text.index(",") + 1 + _KEEP if payload and "," in text else _KEEP
            middle = text[head_end:-_KEEP]
            if not middle or text[:head_end].isspace() or text[-_KEEP:].isspace():
                return text  # litellm strips or drops blank ends: give it the real text
            with self._lock:
                number, self._next_mark = self._next_mark, self._next_mark + 1
            mark = f"Ck{_SALT}{number % 10**8:08d}"
            marks.append((number % 10**8, _ascii_len(middle) - len(mark)))
            return text[:head_end] + mark + text[-_KEEP:]

        content = wire.get("content")
        fetched = any(str(url).startswith("http://") for url in message.images)
        if isinstance(content, str):
            wire["content"] = cut(content)
        elif isinstance(content, list):
            parts: list[Any] = []
            for part in content:
                if isinstance(part, Mapping) and part.get("type") == "text":
                    part = {**part, "text": cut(part.get("text"))}
                elif isinstance(part, Mapping) and part.get("type") == "image_url":
                    url = part.get("image_url")
                    if isinstance(url, Mapping) and str(url.get("url", "")).startswith("data:"):
                        part = {**part, "image_url": {**url, "url": cut(url["url"], payload=True)}}
                parts.append(part)
            wire["content"] = parts
        skeleton = _Skeleton(wire, tuple(marks), fetched)
        with self._lock:
            self._skeletons[message] = skeleton
        return skeleton

    def _built_bytes(
        self,
        history: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any],
        marked: tuple[tuple[int, ...], str] | None,
    ) -> int | None:
        """Bytes of the Anthropic body litellm builds for ``history`` (None: it builds none)."""
        key = (tuple(history), dumps(list(tools)) if tools else "", json.dumps(params, sort_keys=True, default=repr), marked)
        with self._lock:
            if key in self._memo:
                self._memo.move_to_end(key)
                return self._memo[key]
        skeletons = [self._skeleton(m) for m in history]
        if any(s.fetched for s in skeletons):
            # measuring must not download: the image's size is unknown until litellm fetches it
            return None
        positions = set(marked[0]) if marked else set()
        control = json.loads(marked[1]) if marked else None
        wire = [
            {**_fresh(s.wire), "cache_control": dict(control)} if i in positions and control else _fresh(s.wire)
            for i, s in enumerate(skeletons)
        ]
        size = None
        if history:
            size = self._from_skeletons(wire, skeletons, tools, params)
            if size is None:
                real = [_wire_of(m) for m in history]
                if control:
                    real = [{**w, "cache_control": dict(control)} if i in positions else w for i, w in enumerate(real)]
                size = _provider_bytes(self.model, real, tools, params)
        with self._lock:
            self._memo[key] = size
            if len(self._memo) > _MEMO:
                self._memo.popitem(last=False)
        return size

    def _from_skeletons(
        self,
        wire: list[dict[str, Any]],
        skeletons: Sequence[_Skeleton],
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any],
    ) -> int | None:
        from contextkit import backend

        sent = {k: v for k, v in params.items() if k not in _NOT_SENT and v is not None}
        try:
            body = backend.provider_body(
                self.model, wire, tools=[dict(t) for t in tools] if tools else None, params=sent, copy_messages=False
            )
        except Exception:  # noqa: BLE001 - measured from the real messages, which says why
            return None
        extra = {number: delta for s in skeletons for number, delta in s.marks}
        seen: set[int] = set()
        size = len(body)
        for found in _MARK.finditer(body):
            number = int(found.group(1))
            if number not in extra:
                return None
            seen.add(number)
            size += extra[number]
        if len(seen) != len(extra):
            with self._lock:
                self.fallbacks += 1
            return None
        return size


def total_chars(history: Iterable[Message]) -> int:
    """Sum of content lengths: a cheap raw measure of a history (not the bytes sent; see ``request_bytes``)."""
    return sum(len(m.content) for m in history)
