"""Read what an exception says about a failed request: every text of its cause chain (and
litellm's ``original_exception``), the HTTP status, the response headers, the class names and the
request size the session annotated. ``classify`` decides from this evidence; nothing here decides.

Exception types are recognised by name only, so this module imports neither litellm nor httpx.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from contextkit.failures.phrases import _STATUS_IN_TEXT


@dataclass
class ErrorEvidence:
    """What ``gather_evidence`` found over an exception chain (or an error text)."""

    text: str  # lower-cased, every text of the chain joined
    status: int | None
    classes: set[str]
    headers: dict[str, str]
    annotated_bytes: int | None
    message: str
    mid_stream_output: bool
    empty_body: bool = False  # a response came back with no body at all (Content-Length 0 or empty text)


def exception_chain(error: BaseException) -> Iterator[BaseException]:
    """The exception, its causes/contexts and litellm's ``original_exception``, each once."""
    seen: set[int] = set()
    todo: list[BaseException] = [error]
    while todo and len(seen) < 32:
        exc = todo.pop(0)
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        yield exc
        for nxt in (getattr(exc, "original_exception", None), exc.__cause__, exc.__context__):
            if isinstance(nxt, BaseException):
                todo.append(nxt)


def gather_evidence(error: BaseException | str | None, status: int | None) -> ErrorEvidence:
    if error is None or isinstance(error, str):
        raw = error or ""
        return ErrorEvidence(raw.lower(), status if status is not None else status_in_text(raw.lower()), set(), {}, None,
                         raw.strip()[:2000], False)  # fmt: skip
    texts: list[str] = []
    classes: set[str] = set()
    headers: dict[str, str] = {}
    real_status: int | None = None
    annotated: int | None = None
    body_text = ""
    responses = 0
    for exc in exception_chain(error):
        classes.update(c.__name__ for c in type(exc).__mro__)
        texts.append(safe_str(exc))
        for attr in ("message", "body"):
            value = getattr(exc, attr, None)
            if isinstance(value, dict | list):
                value = json.dumps(value, ensure_ascii=False)
            if isinstance(value, str) and value:
                texts.append(value)
        response = getattr(exc, "response", None)
        responses += response is not None and getattr(response, "status_code", None) is not None
        resp_text = _response_text(response)
        if resp_text:
            texts.append(resp_text)
            body_text = body_text or resp_text
        for key, value in _headers(exc, response).items():
            headers.setdefault(key, value)
        if real_status is None:
            real_status = _as_status(getattr(exc, "status_code", None)) or _as_status(
                getattr(response, "status_code", None)
            )
        if annotated is None:
            n = getattr(exc, "request_bytes", None)
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                annotated = n
    text = "\n".join(texts).lower()
    chosen = status if status is not None else real_status
    if chosen is None:
        chosen = status_in_text(text)
    generated = getattr(error, "generated_content", None)
    mid_stream = "MidStreamFallbackError" in classes and bool(generated)
    message = (body_text or safe_str(error)).strip()[:2000]
    empty = headers.get("content-length") == "0" or (responses > 0 and not body_text.strip())
    return ErrorEvidence(text, chosen, classes, headers, annotated, message, mid_stream, empty)


def safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not break classification
        return type(exc).__name__


def _response_text(response: Any) -> str:
    if response is None:
        return ""
    try:
        text = response.text
    except Exception:  # noqa: BLE001 - httpx raises ResponseNotRead for unread streaming bodies
        return ""
    return text if isinstance(text, str) else ""


def _headers(exc: BaseException, response: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for source in (getattr(response, "headers", None), getattr(exc, "headers", None)):
        if source is None:
            continue
        try:
            items = list(source.items())
        except Exception:  # noqa: BLE001 - anything header-like that is not a mapping
            continue
        for key, value in items:
            found.setdefault(str(key).lower(), str(value).lower())
    return found


def _as_status(value: Any) -> int | None:
    try:
        code = int(value)
    except (TypeError, ValueError):
        return None
    return code if 100 <= code <= 599 else None


def status_in_text(text: str) -> int | None:
    match = _STATUS_IN_TEXT.search(text)
    return int(match.group(1)) if match else None
