"""Classify provider and gateway failures into one small set of kinds.

``classify_failure(error, *, status=None, history_bytes=None, request_bytes=None) -> Failure``
takes a litellm / openai / httpx / builtin exception, an error text (optionally with the HTTP
``status`` it came with) or a ``(status, body_text)`` pair. It never imports litellm: exception types are recognised by the class
names in their MRO, so the module stays pure, fast and importable without the network stack.

Evidence gathered first by ``failures.reading.gather_evidence`` (over the exception, its ``__cause__`` / ``__context__`` chain and
litellm's ``original_exception``): every text (``str(e)``, ``message``, ``body``,
``response.text``), the HTTP status (``status=`` wins, then ``status_code`` /
``response.status_code`` of the outermost exception that has one, then a status *written as a
status* in the text, such as ``HTTP 413`` or ``Error code: 403``), the response headers
(``cf-ray``, ``server``, ``retry-after``), the MRO class names and any ``request_bytes`` the
session annotated on an exception.

Precedence (first rule that matches wins):

1. ``PAYLOAD_TOO_LARGE`` - a byte-size phrase (``PAYLOAD_PHRASES``: "request entity too large",
   ``request_too_large`` ...). This comes first because litellm's Anthropic route turns a real
   413 into a ``BadRequestError`` with status 400; only the body still tells.
0. ``RATE_LIMIT`` - a 413 / 429 about tokens per minute (``TOKEN_RATE_PHRASES``: Groq answers a
   request above its tier's TPM with 413 "Request too large ... tokens per minute").
1b. The byte-size phrases include LiteLLM's proxy ("Request size is too large", a 400 with
   ``"param": "content-length"``) and IIS request filtering (HTTP Error 404.13).
2. Status 413 / 431 - ``PAYLOAD_TOO_LARGE``, except a 413 whose body speaks about tokens or
   context (Groq, the "prompt length above the limit" vector), which is ``CONTEXT_OVERFLOW``.
3. ``WAF_REJECTION`` - status 403 plus a firewall/proxy signal (``WAF_SIGNALS``, ``WAF_HEADERS``,
   a Cloudflare ``server`` header) or an HTML block page (an HTML document in the body, or
   ``HTML_AS_JSON_FINGERPRINTS`` such as "invalid character '<' looking for beginning of value"),
   also when a proxy re-wrapped it as JSON (LiteLLM's proxy: an ``llm_provider-content-type:
   text/html`` header, or the page JSON-escaped in the message).
4. ``AUTH`` - status 401 / 403 / 407 (a plain 403 never starts recovery).
5. ``RATE_LIMIT`` - status 429, a ``RateLimitError``, or ``RATE_LIMIT_PHRASES`` ("tokens per
   minute" is a rate limit, not an overflow).
6. ``TRANSIENT`` - timeouts: ``Timeout`` / ``APITimeoutError`` / httpx ``*Timeout`` /
   ``TimeoutError``, status 408, ``TIMEOUT_PHRASES`` ("context deadline exceeded" lands here).
6b. ``OTHER`` - a 400/422 about one field of the request (``FIELD_ERROR_PHRASES``): "Invalid
   'tools[0].function.description': string too long. Expected a string with maximum length 1024",
   a message ``name`` over 64 characters, an unknown or unsupported parameter. Checked before the
   class because litellm maps some of these to ``ContextWindowExceededError``: the message decides,
   not the class. Exception: a message's *content* over the provider's per-string limit is an
   overflow (shrinking it helps).
7. ``CONTEXT_OVERFLOW`` - litellm's ``ContextWindowExceededError``, ``OVERFLOW_PHRASES``,
   "max_tokens" + "exceed", or the status-aware rule: a 400/413 whose body has a subject word
   (``OVERFLOW_SUBJECTS``) and an excess word (``OVERFLOW_EXCESS``). A request whose *output*
   budget is too big ("max_tokens is too large ... completion tokens") is ``OTHER``: compaction
   cannot fix it.
8. ``TRANSIENT`` - the server was never reached (connection refused, DNS): nothing to learn.
8b. A 5xx with an empty body (Caddy's ``request_body max_size`` answers 502 and nothing else): no
   answer at all, like a drop (``Failure.connection_drop``); the evidence decides whether it is a size.
9. Connection loss (``CONNECTION_PHRASES``, ``CONNECTION_CLASSES``: reset, EOF, broken pipe,
   stream error, "Server disconnected", litellm's "Connection error.") - ``LIKELY_PAYLOAD`` when
   the history or request is larger than ``LIKELY_PAYLOAD_MIN_BYTES`` (500 KB), else
   ``TRANSIENT``. A stream that dropped *after* output began was accepted: ``TRANSIENT``.
10. ``AUTH`` by class (``AuthenticationError``, ``PermissionDeniedError``) or ``AUTH_PHRASES``.
11. ``TRANSIENT`` - 5xx / 529, server-error classes, ``SERVER_PHRASES``.
12. ``OTHER`` - everything else (unknown parameter, bad request, model not found).

For an overflow, ``Failure.window_tokens`` is the window the provider names, when it names one
(``window_from_message``: OpenAI, vLLM, llama.cpp, TGI, Anthropic, Gemini ... wordings).

Two quirks of earlier classifiers are fixed here: the generic "too long" phrase is gone
("file name too long" is not an overflow), and "413" / "431" / "403" count only as a real status
or a status written as one - never digits inside a request id or a token count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from enum import StrEnum

from contextkit.failures.phrases import (
    _RETRY_IN_TEXT,
    _STATUS_IN_TEXT,
    AUTH_PHRASES,
    BARE_EOF,
    CONNECTION_CLASSES,
    CONNECTION_PHRASES,
    CONTENT_FIELD,
    FIELD_ERROR_PHRASES,
    FIELD_NAME,
    HTML_AS_JSON_FINGERPRINTS,
    HTML_DOCUMENT,
    HTML_ESCAPED,
    LIKELY_PAYLOAD_MIN_BYTES,
    OUTPUT_LIMIT_PHRASES,
    OVERFLOW_EXCESS,
    OVERFLOW_PHRASES,
    OVERFLOW_SUBJECTS,
    PAYLOAD_PHRASES,
    RATE_LIMIT_PHRASES,
    SERVER_CLASSES,
    SERVER_PHRASES,
    TIMEOUT_CLASSES,
    TIMEOUT_PHRASES,
    TOKEN_RATE_PHRASES,
    UNREACHABLE_CLASSES,
    UNREACHABLE_PHRASES,
    UPSTREAM_CONTENT_TYPE,
    WAF_HEADERS,
    WAF_SERVERS,
    WAF_SIGNALS,
    WAF_WORD,
    WINDOW_PATTERNS,
)
from contextkit.failures.reading import ErrorEvidence, gather_evidence
from contextkit.sizing import format_size

# The reason of a connection closed before any answer (``Failure.connection_drop``) starts with this.
NETWORK_ERROR = "network error"


class FailureKind(StrEnum):
    CONTEXT_OVERFLOW = "context_overflow"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    WAF_REJECTION = "waf_rejection"
    LIKELY_PAYLOAD = "likely_payload"
    OUTPUT_TRUNCATED = "output_truncated"
    RATE_LIMIT = "rate_limit"
    AUTH = "auth"
    TRANSIENT = "transient"
    OTHER = "other"

    @property
    def recoverable(self) -> bool:
        """Shrinking the request (compaction, a lower byte cap) can make it succeed."""
        return self in _RECOVERABLE

    @property
    def retryable(self) -> bool:
        """The same request may succeed later, after a back-off."""
        return self in (FailureKind.RATE_LIMIT, FailureKind.TRANSIENT)


_RECOVERABLE = frozenset(
    {
        FailureKind.CONTEXT_OVERFLOW,
        FailureKind.PAYLOAD_TOO_LARGE,
        FailureKind.WAF_REJECTION,
        FailureKind.LIKELY_PAYLOAD,
    }
)


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    reason: str
    rejected_bytes: int | None = None
    status: int | None = None
    retry_after: float | None = None
    provider_message: str = ""
    window_tokens: int | None = None  # the window an overflow message names (e.g. 4096), else None
    # the output an overflow message says the provider counted against the window (vLLM: "... 1200 in
    # the completion"; TGI: "500 `max_new_tokens`"), else None
    output_tokens: int | None = None
    retry_at: float | None = None  # a Retry-After given as an HTTP-date (seconds since the epoch)
    connection_drop: bool = False  # the connection closed before any answer (nginx ``return 444``, a reset)

    @property
    def recoverable(self) -> bool:
        return self.kind.recoverable

    @property
    def retryable(self) -> bool:
        return self.kind.retryable


def classify_finish_reason(reason: str | None) -> Failure | None:
    """``"length"`` (OpenAI) / ``"max_tokens"`` (Anthropic) → ``OUTPUT_TRUNCATED``; anything else → None."""
    if reason is not None and str(reason).lower() in ("length", "max_tokens", "max_output_tokens"):
        return Failure(FailureKind.OUTPUT_TRUNCATED, f"output truncated (finish_reason {reason!r})")
    return None


def classify_failure(
    error: BaseException | str | tuple[int, str] | None,
    *,
    status: int | None = None,
    history_bytes: int | None = None,
    request_bytes: int | None = None,
) -> Failure:
    """Map an exception, an error text or a ``(status, body_text)`` pair to a ``Failure``.

    ``history_bytes`` / ``request_bytes`` decide whether a dropped connection is a suspected
    payload limit (above 500 KB); ``request_bytes`` (or a ``request_bytes`` attribute the session
    set on the exception) becomes ``rejected_bytes`` for the recoverable kinds. See the module
    docstring for the rules and their precedence.
    """
    if isinstance(error, tuple):
        code, body = error
        error, status = body, (status if status is not None else code)
    ev = gather_evidence(error, status)
    kind, reason = _decide(ev, history_bytes, request_bytes)
    sent = request_bytes if request_bytes is not None else ev.annotated_bytes
    waits = kind in (FailureKind.RATE_LIMIT, FailureKind.TRANSIENT)
    retry_at = _retry_at(ev) if waits else None  # a header date wins over a delay written in the text
    retry_after = _retry_after(ev) if waits and retry_at is None else None
    overflow = kind == FailureKind.CONTEXT_OVERFLOW
    return Failure(
        kind=kind,
        reason=reason,
        rejected_bytes=sent if kind.recoverable else None,
        status=ev.status,
        retry_after=retry_after,
        provider_message=ev.message,
        window_tokens=window_from_message(ev.text) if overflow else None,
        output_tokens=output_from_message(ev.text) if overflow else None,
        retry_at=retry_at,
        connection_drop=kind == FailureKind.LIKELY_PAYLOAD or reason.startswith(NETWORK_ERROR),
    )


def window_from_message(text: str) -> int | None:
    """The context window (tokens) an overflow message names, or None.

    "maximum context length is 4096" (OpenAI, vLLM, llama-cpp-python), ``"n_ctx": 2048`` (llama.cpp
    server JSON), "exceed context window of 2048" (llama.cpp), "`inputs` tokens + `max_new_tokens`
    must be <= 2048" (TGI), "maximum model length of 4096" (vLLM), "> 200000 maximum" (Anthropic),
    Gemini, xAI, Mistral, Azure Responses, Cerebras and Cohere wordings (``WINDOW_PATTERNS``).
    """
    lowered = text.lower()
    for pattern in WINDOW_PATTERNS:
        match = pattern.search(lowered)
        if match and int(match.group(1)) > 0:
            return int(match.group(1))
    return None


_OUTPUT_COUNTED = (
    re.compile(r"(\d+) in the completion"),  # vLLM, OpenAI, Azure, DeepSeek
    re.compile(r"(\d+) `max_new_tokens`"),  # Hugging Face TGI
)


def output_from_message(text: str) -> int | None:
    """The output tokens an overflow message says the provider counted against the window, or None
    (0 in the completion: it did not count any)."""
    for pattern in _OUTPUT_COUNTED:
        if (match := pattern.search(text.lower())) and int(match.group(1)) > 0:
            return int(match.group(1))
    return None


def _decide(ev: ErrorEvidence, history_bytes: int | None, request_bytes: int | None) -> tuple[FailureKind, str]:
    text, status, classes = ev.text, ev.status, ev.classes
    if status in (413, 429) and (rate := _first(text, TOKEN_RATE_PHRASES)):
        # Groq's 413 "Request too large ... on tokens per minute (TPM)": the tier's token rate, not bytes
        asked = re.search(r"limit (\d+), requested (\d+)", text)
        alone = (
            "; this one request is above the per-minute limit by itself: shorten it or raise the provider's tier"
            if asked and int(asked.group(2)) > int(asked.group(1))
            else ""
        )
        return (
            FailureKind.RATE_LIMIT,
            f"rate limited ({status}: {rate.strip('()')} - a token rate limit, not the body size{alone})",
        )
    if phrase := _first(text, PAYLOAD_PHRASES):
        label: object = status if status in (413, 431) else (_written_413(text) or phrase)
        limit = "header" if label == 431 else "payload"
        return FailureKind.PAYLOAD_TOO_LARGE, f"proxy/gateway {limit} limit ({label})"
    if status == 431:
        return FailureKind.PAYLOAD_TOO_LARGE, "proxy/gateway header limit (431)"
    if status == 413:
        if overflow := _overflow_reason(text, status, classes):
            return FailureKind.CONTEXT_OVERFLOW, overflow
        return FailureKind.PAYLOAD_TOO_LARGE, "proxy/gateway payload limit (413)"
    forbidden = status == 403 or (status is None and "forbidden" in text)
    if forbidden and (signal := _waf_signal(ev)):
        return FailureKind.WAF_REJECTION, f"proxy/WAF rejection (403 + {signal})"
    if status in (401, 403, 407):
        return FailureKind.AUTH, f"authentication or permission error ({status})"
    if status == 429 or "RateLimitError" in classes or _first(text, RATE_LIMIT_PHRASES):
        return (
            FailureKind.RATE_LIMIT,
            f"rate limited ({status or _first(text, RATE_LIMIT_PHRASES) or 'RateLimitError'})",
        )
    # "timeout" in a 400 body is a parameter name, not a timeout
    timeout_text = _first(text, TIMEOUT_PHRASES) and (status is None or status >= 500)
    if status == 408 or classes & TIMEOUT_CLASSES or timeout_text:
        return FailureKind.TRANSIENT, "timeout"
    if status in (None, 400, 422) and (field_error := _field_error(text)):
        return field_error
    if overflow := _overflow_reason(text, status, classes):
        return FailureKind.CONTEXT_OVERFLOW, overflow
    if _first(text, OUTPUT_LIMIT_PHRASES) and status in (None, 400):
        return FailureKind.OTHER, "requested output budget (max_tokens) is above the model's limit"
    if classes & UNREACHABLE_CLASSES or _first(text, UNREACHABLE_PHRASES):
        return FailureKind.TRANSIENT, "server unreachable (connection refused or DNS failure)"
    if net := _connection_signal(text, classes):
        if net == "eof" and "request" in text:
            # "error reading request body: EOF" is the server failing to read us, not a body cap.
            return FailureKind.TRANSIENT, f"{NETWORK_ERROR} (eof while reading the request)"
        sizes = [n for n in (history_bytes, request_bytes, ev.annotated_bytes) if n is not None]
        size = max(sizes) if sizes else None
        if ev.mid_stream_output:
            return FailureKind.TRANSIENT, f"stream dropped after output began ({net})"
        if size is not None and size > LIKELY_PAYLOAD_MIN_BYTES:
            return FailureKind.LIKELY_PAYLOAD, f"suspected payload limit (large history {format_size(size)} + {net})"
        where = f", {format_size(size)} is below the 500 KB payload threshold" if size is not None else ""
        return FailureKind.TRANSIENT, f"{NETWORK_ERROR} ({net}{where})"
    if status is not None and status >= 500 and ev.empty_body:
        # Caddy's request_body max_size, a load balancer giving up: no answer at all, like a drop
        return FailureKind.TRANSIENT, f"{NETWORK_ERROR} (empty {status} from the gateway: no answer)"
    if classes & {"AuthenticationError", "PermissionDeniedError"} or _first(text, AUTH_PHRASES):
        return FailureKind.AUTH, "authentication or permission error"
    if (status is not None and (status >= 500)) or _first(text, SERVER_PHRASES):
        return FailureKind.TRANSIENT, f"server error ({status or 'server message'})"
    if status is None and classes & SERVER_CLASSES:
        return FailureKind.TRANSIENT, "server error"
    return FailureKind.OTHER, f"unclassified error ({status})" if status else "unclassified error"


def _overflow_reason(text: str, status: int | None, classes: set[str]) -> str | None:
    if "ContextWindowExceededError" in classes:
        phrase = _first(text, OVERFLOW_PHRASES)
        return f"context window exceeded ({phrase or 'ContextWindowExceededError'})"
    # "context deadline exceeded" is a Go timeout; keep its words out of the subject/excess rule.
    text = text.replace("context deadline exceeded", "")
    if phrase := _first(text, OVERFLOW_PHRASES):
        return f"context window exceeded ({phrase})"
    if "max_tokens" in text and "exceed" in text:
        return "context window exceeded (max_tokens + exceed)"
    if "current length is" in text and "while limit is" in text:
        return "context window exceeded (current length is ... while limit is)"
    if status in (400, 413) and not _first(text, OUTPUT_LIMIT_PHRASES):
        subject = OVERFLOW_SUBJECTS.search(text)
        excess = _first(text, OVERFLOW_EXCESS)
        if subject and excess:
            return f"context window exceeded ({status}: {subject.group(0)} + {excess})"
    return None


def _field_error(text: str) -> tuple[FailureKind, str] | None:
    """A 400 about one field of the request or an unknown parameter (see ``FIELD_ERROR_PHRASES``).

    "string too long ... maximum length 1024" about a tool description or a message ``name`` is
    ``OTHER``: compaction cannot fix it and nothing may be learned from it. The one field whose length
    *is* the context is a message's content (OpenAI caps a string at 10 MB): that stays an overflow.
    """
    phrase = _first(text, FIELD_ERROR_PHRASES)
    if phrase is None:
        return None
    match = FIELD_NAME.search(text)
    field = next((g for g in match.groups() if g), "") if match else ""
    if field and CONTENT_FIELD.match(field) and ("long" in phrase or "at most" in phrase or "max" in phrase):
        return FailureKind.CONTEXT_OVERFLOW, f"context window exceeded ('{field}' {phrase})"
    # a field error names its field; without one, a provider's own overflow wording still wins
    if not field and _first(text.replace("contextwindowexceeded", ""), OVERFLOW_PHRASES):
        return None
    what = f"'{field}': {phrase}" if field else phrase
    return FailureKind.OTHER, f"invalid request field ({what}) - not about the context size, nothing to compact"


def _waf_signal(ev: ErrorEvidence) -> str | None:
    if any(h in ev.headers for h in WAF_HEADERS) or "cloudflare" in ev.headers.get("server", ""):
        return "Cloudflare signals" if "cf-ray" in ev.headers or "cloudflare" in ev.text else "WAF headers"
    server = ev.headers.get("server", "")
    if any(s in server for s in WAF_SERVERS):
        return f"{server} signals"
    if signal := _first(ev.text, WAF_SIGNALS):
        return "Cloudflare signals" if signal in ("cloudflare", "cf-ray") else f"security signal {signal!r}"
    if WAF_WORD.search(ev.text):
        return "security signal 'waf'"
    if HTML_DOCUMENT.search(ev.text) or _first(ev.text, HTML_AS_JSON_FINGERPRINTS):
        return "HTML block page"
    if any(ev.headers.get(h, "").startswith("text/html") for h in UPSTREAM_CONTENT_TYPE) or HTML_ESCAPED.search(ev.text):
        return "an HTML page re-wrapped by a proxy"  # a gateway's block page, not bad credentials
    return None


def _connection_signal(text: str, classes: set[str]) -> str | None:
    if phrase := _first(text, CONNECTION_PHRASES):
        return phrase.rstrip(".")
    if BARE_EOF.search(text):
        return "eof"
    named = classes & CONNECTION_CLASSES
    return sorted(named)[0] if named else None


def _retry_after(ev: ErrorEvidence) -> float | None:
    if (ms := ev.headers.get("retry-after-ms")) is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    if (value := ev.headers.get("retry-after")) is not None:
        try:
            return float(value)
        except ValueError:
            pass  # an HTTP-date: ``_retry_at`` reads it (the flow has the clock)
    if match := _RETRY_IN_TEXT.search(ev.text):
        seconds = float(match.group(1))
        return seconds / 1000 if match.group(2) == "ms" else seconds
    return None


def _retry_at(ev: ErrorEvidence) -> float | None:
    """A ``Retry-After`` given as an HTTP-date ("Wed, 21 Oct 2026 07:28:00 GMT"), as epoch seconds."""
    value = ev.headers.get("retry-after")
    if not value or value.strip().replace(".", "", 1).isdigit():
        return None  # absent, or seconds (``_retry_after``)
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _first(text: str, phrases: tuple[str, ...]) -> str | None:
    return next((p for p in phrases if p in text), None)


def _written_413(text: str) -> int | None:
    """A 413/431 the text names as a status (litellm's Anthropic route reports such replies as 400)."""
    found = {int(m.group(1)) for m in _STATUS_IN_TEXT.finditer(text)} | (
        {413} if re.search(r"'413 request entity too large'", text) else set()
    )
    return next((code for code in (413, 431) if code in found), None)
