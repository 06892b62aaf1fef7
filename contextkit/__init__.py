"""contextkit: keep long LLM sessions inside the context window and the gateway's body cap.

Public API only. Heavy modules (litellm, ipywidgets, polars, altair) load lazily.
"""

from __future__ import annotations

from contextkit._version import __version__
from contextkit.errors import (
    ArchiveError,
    AuthenticationFailed,
    ConfigError,
    ContextkitError,
    ContextkitRuntimeError,
    InvalidMessageError,
    PayloadFloorError,
    ProviderError,
    RecallValidationError,
    RecoveryFailedError,
    SummaryRejected,
    UsageError,
)
from contextkit.events import EventLog
from contextkit.messages import Message, Origin, ToolCall, from_wire, to_wire
from contextkit.settings import Limits
from contextkit.sizing import RequestMeter, format_size, parse_size, request_bytes

__all__ = [
    "ArchiveError",
    "AuthenticationFailed",
    "ConfigError",
    "ContextkitError",
    "ContextkitRuntimeError",
    "EventLog",
    "InvalidMessageError",
    "Limits",
    "Message",
    "Origin",
    "PayloadFloorError",
    "ProviderError",
    "RecallValidationError",
    "RecoveryFailedError",
    "RequestMeter",
    "SummaryRejected",
    "ToolCall",
    "UsageError",
    "__version__",
    "format_size",
    "from_wire",
    "parse_size",
    "request_bytes",
    "to_wire",
]
