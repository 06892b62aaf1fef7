"""The archive: verbatim storage behind ``<<ccr:KEY>>`` markers, recall and recall_context."""

from __future__ import annotations

from contextkit.archive.recall import (
    RecallResult,
    find_inline_recalls,
    handle_tool_call,
    is_recall_tool,
    recall_inline,
    recall_tool_schema,
)
from contextkit.archive.search import ContextItem, RecallContext, recall_context_tool_schema
from contextkit.archive.store import Archive, ArchivedItem, ArchiveEntry, SearchHit, default_archive_path

__all__ = [
    "Archive",
    "ArchiveEntry",
    "ArchivedItem",
    "ContextItem",
    "RecallContext",
    "RecallResult",
    "SearchHit",
    "default_archive_path",
    "find_inline_recalls",
    "handle_tool_call",
    "is_recall_tool",
    "recall_context_tool_schema",
    "recall_inline",
    "recall_tool_schema",
]
