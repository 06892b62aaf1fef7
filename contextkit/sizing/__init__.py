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

Its modules: ``units`` (human sizes), ``wire`` (the body's bytes and the route), ``counting``
(tokens), ``meter`` (``RequestMeter``), ``lastbuilt`` (the last request's wire list and body, which the
meter reuses for the prefix the next one shares). Everything public is re-exported here.
"""

from __future__ import annotations

from contextkit.sizing.counting import (
    message_tokens,
    text_tokens,
    tools_tokens,
    truncate_to_tokens,
)
from contextkit.sizing.meter import (
    CALIBRATION_BAND,
    CALIBRATION_DEADBAND,
    CALIBRATION_MIN_TOKENS,
    RECENT_REQUESTS,
    Measure,
    RequestMeter,
    total_chars,
)
from contextkit.sizing.units import (
    GB,
    KB,
    MB,
    SIZE_FORMS,
    format_size,
    parse_size,
)
from contextkit.sizing.wire import (
    ANTHROPIC_ROUTE,
    OPENAI_ROUTE,
    body_bytes,
    body_params,
    dumps,
    message_bytes,
    openai_request_bytes,
    request_bytes,
    sent_message,
    sent_params,
    wire_route,
)

__all__ = [
    "ANTHROPIC_ROUTE",
    "CALIBRATION_BAND",
    "CALIBRATION_DEADBAND",
    "CALIBRATION_MIN_TOKENS",
    "GB",
    "KB",
    "MB",
    "OPENAI_ROUTE",
    "RECENT_REQUESTS",
    "SIZE_FORMS",
    "Measure",
    "RequestMeter",
    "body_bytes",
    "body_params",
    "dumps",
    "format_size",
    "message_bytes",
    "message_tokens",
    "openai_request_bytes",
    "parse_size",
    "request_bytes",
    "sent_message",
    "sent_params",
    "text_tokens",
    "tools_tokens",
    "total_chars",
    "truncate_to_tokens",
    "wire_route",
]
