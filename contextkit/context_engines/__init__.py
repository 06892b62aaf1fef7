"""Context engines: who writes the summary stage's summaries besides the built-in summarizer.

``mcp_engine.McpContextEngine`` hands each summary to an MCP server's ``context_compact(segment,
budget_chars, instruction)`` (``Session(context_engine="mcp:<command or URL>")``) and falls back
to the built-in summarizer for that compaction when the server errs, times out or answers empty.
An engine is a ``Summarizer``: the compactor's gate, ledger, archive and events are unchanged.

May import: the vocabulary, ``compaction``.
"""

from __future__ import annotations

from contextkit.context_engines.mcp_engine import McpContextEngine, parse_context_engine

__all__ = ["McpContextEngine", "parse_context_engine"]
