"""The archive: verbatim storage behind ``<<ccr:KEY>>`` markers, recall and recall_context.

``store.Archive`` is the API; ``sqlite`` (the embedded default, schema in ``sqlite_schema``) and
``postgres`` are its backends; ``query`` says how text is indexed and searched, ``search`` and
``excerpt`` build recall packs, ``recall`` and ``paging`` answer recalls, ``retention`` plans what
a file lets go, ``diagnose`` names OS-level causes. Imports only the vocabulary and ``display``.
"""

from __future__ import annotations

from contextkit.archive.recall import (
    RecallResult,
    find_inline_recalls,
    handle_tool_call,
    is_recall_tool,
    recall_inline,
    recall_tool_schema,
)
from contextkit.archive.records import (
    ArchivedItem,
    ArchiveEntry,
    PruneReport,
    ScopeInfo,
    SearchHit,
    default_archive_path,
)
from contextkit.archive.retention import DEFAULT_RETENTION, Retention
from contextkit.archive.search import ContextItem, RecallContext, recall_context_tool_schema
from contextkit.archive.store import Archive

__all__ = [
    "DEFAULT_RETENTION",
    "Archive",
    "ArchiveEntry",
    "ArchivedItem",
    "ContextItem",
    "PruneReport",
    "RecallContext",
    "RecallResult",
    "Retention",
    "ScopeInfo",
    "SearchHit",
    "default_archive_path",
    "find_inline_recalls",
    "handle_tool_call",
    "is_recall_tool",
    "recall_context_tool_schema",
    "recall_inline",
    "recall_tool_schema",
]
