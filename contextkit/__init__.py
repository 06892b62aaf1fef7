"""contextkit: keep long LLM sessions inside the context window and the gateway's body cap.

Public API only. Heavy modules (litellm, ipywidgets, polars, altair) load lazily.
"""

from __future__ import annotations

import logging
from typing import Any

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


def completion(model: str, messages: list[Any], *, conversation_id: str | None = None, **kwargs: Any) -> Any:
    """Drop-in for ``litellm.completion``: same arguments, litellm's response (``stream=True``: its chunks).

    The conversation is recognised from its messages (the history it continues) or named with
    ``conversation_id=``; contextkit compacts, measures and recovers each call as a ``Session`` turn
    does. Use ``contextkit.integrations.Conversations`` for your own limits, archive or event log.
    """
    from contextkit.integrations.conversations import completion as _completion

    return _completion(model, messages, conversation_id=conversation_id, **kwargs)


async def acompletion(model: str, messages: list[Any], *, conversation_id: str | None = None, **kwargs: Any) -> Any:
    """Drop-in for ``litellm.acompletion`` (see ``completion``)."""
    from contextkit.integrations.conversations import acompletion as _acompletion

    return await _acompletion(model, messages, conversation_id=conversation_id, **kwargs)


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
    "acompletion",
    "classify_failure",
    "completion",
    "format_size",
    "from_wire",
    "offline",
    "parse_size",
    "repair_tool_pairing",
]
