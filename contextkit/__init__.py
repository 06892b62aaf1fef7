"""contextkit: keep long LLM sessions inside the context window and the gateway's body cap.

Public API only. Heavy modules (litellm, ipywidgets, polars, altair) load lazily.
"""

from __future__ import annotations

import logging

from contextkit._version import __version__
from contextkit.archive import Archive
from contextkit.backend import offline
from contextkit.engine.effects import Reply
from contextkit.engine.streaming import AsyncReplyStream, ReplyStream
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
    UsageError,
)
from contextkit.events import EventLog
from contextkit.failures.classify import Failure, FailureKind, classify_failure
from contextkit.messages import Message, Origin, ToolCall, from_wire
from contextkit.policy.pairing import repair_tool_pairing
from contextkit.session.core import Session
from contextkit.settings import Limits
from contextkit.sizing import format_size, parse_size
from contextkit.tools import Tool, ToolResult

# Status lines are records on this logger. With a handler of its own, a host that configured no
# logging gets nothing on stderr from logging's last-resort handler; the CLI and the notebooks
# attach theirs (contextkit.display.status).
logging.getLogger("contextkit").addHandler(logging.NullHandler())

__all__ = [
    "Archive",
    "ArchiveError",
    "AsyncReplyStream",
    "AuthenticationFailed",
    "ConfigError",
    "ContextkitError",
    "ContextkitRuntimeError",
    "EventLog",
    "Failure",
    "FailureKind",
    "InvalidMessageError",
    "Limits",
    "Message",
    "Origin",
    "PayloadFloorError",
    "ProviderError",
    "RecallValidationError",
    "RecoveryFailedError",
    "Reply",
    "ReplyStream",
    "Session",
    "Tool",
    "ToolCall",
    "ToolResult",
    "UsageError",
    "__version__",
    "classify_failure",
    "format_size",
    "from_wire",
    "offline",
    "parse_size",
    "repair_tool_pairing",
]
