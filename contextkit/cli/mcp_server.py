"""``contextkit mcp --archive PATH``: an archive served to any MCP client (an IDE assistant, another agent).

Three read-only tools over a contextkit archive file, through the official ``mcp`` SDK (stdio by
default, streamable HTTP with ``--http PORT``):

- ``recall(key, ...)``: the original text behind a ``<<ccr:KEY>>`` marker (pages, as a session's
  own ``recall`` tool answers).
- ``recall_context(query, max_items=8, max_tokens=1500)``: a bounded context pack as text::

      ### contextkit Context
      Items: <n>
      Budget: ...                                   (only when items were dropped or shortened)
      Reference: <key> | Type: <kind> | Location: <origin>     (one per item)
      Context:
      <the bounded body>

  ``No matching archived memory was found.`` when nothing matches. ``max_items`` must be 1-50 and
  ``max_tokens`` 1-12,000: anything else is a tool error (``isError``) whose text starts with
  ``422`` (the validation status of the HTTP form of this tool) and names the range. The result's
  structured part reports ``used_items`` and ``used_tokens``, so a small answer can be told apart
  from a truncated one.
- ``search(query, limit=8)``: ranked matches, one ``key | kind | origin | score`` line each.

The server reads every session the file holds unless ``--session`` names some. It never writes:
a missing file is an error, not a new archive.
"""

# No "from __future__ import annotations": the SDK reads the tool functions' annotations, which
# name types imported inside build_server (the mcp extra is imported only when the server starts).

import argparse
import json
import sys
from pathlib import Path
from typing import Annotated, Any

from contextkit.errors import RecallValidationError, UsageError, require_extra

NO_MEMORY = "No matching archived memory was found."
RECALL_MAX_BYTES = 64_000  # one answer at most; longer originals come in pages


def open_archive(path: str | Path, sessions: list[str] | None = None) -> Any:
    """The archive at ``path``, reading the named sessions (default: every session in the file)."""
    from contextkit.archive import Archive

    location = Path(path)
    if not location.is_file():
        raise UsageError(
            f"no archive at {location}: pass the file a Session wrote (Archive(path) or the default "
            "~/.local/share/contextkit/archive.sqlite)"
        )
    archive = Archive(location, session_id="mcp-reader", retention=None)
    known = [info.session_id for info in archive.sessions()]
    wanted = sessions or known
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        archive.close()
        raise UsageError(f"{location} holds no session {', '.join(unknown)}; it holds: {', '.join(known) or 'none'}")
    return archive.grant(*wanted)


def profile_text(archive: Any, query: object, max_items: object, max_tokens: object) -> tuple[str, int, int]:
    """The public text profile of ``recall_context`` and its ``used_items`` / ``used_tokens``."""
    from contextkit.archive.search import recall_context, validate

    query, items, tokens = validate(query, max_items, max_tokens)
    pack = recall_context(archive, query, max_items=items, max_tokens=tokens)
    if not pack.used_items:
        return NO_MEMORY, 0, 0
    return pack.text, pack.used_items, pack.used_tokens


def build_server(archive: Any) -> Any:
    """An ``MCPServer`` exposing ``recall``, ``recall_context`` and ``search`` over ``archive``."""
    require_extra("contextkit mcp", "mcp", extra="mcp")
    from mcp.server.mcpserver import MCPServer
    from mcp.types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import Field

    server: Any = MCPServer(
        "contextkit-archive",
        instructions="Read what contextkit sessions archived: recall a <<ccr:KEY>> marker, or search.",
        log_level="WARNING",
    )
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)

    def recall(
        key: Annotated[str, Field(description="One or more <<ccr:KEY>> markers or 16-hex-char keys")],
        query: Annotated[str | None, Field(description="Only the lines holding all these words")] = None,
        start_line: int | None = None,
        end_line: int | None = None,
        start_char: int | None = None,
        end_char: int | None = None,
    ) -> CallToolResult:
        """Return the original text archived behind a <<ccr:KEY>> marker (long originals come in pages)."""
        args = {"key": key, "query": query, "start_line": start_line, "end_line": end_line,
                "start_char": start_char, "end_char": end_char}  # fmt: skip
        payload = json.dumps({k: v for k, v in args.items() if v is not None})
        result = archive.recall(payload, max_bytes=RECALL_MAX_BYTES)
        return CallToolResult(content=[TextContent(type="text", text=result.text)], is_error=result.is_error)

    # The ranges are advertised in the schema but checked here, so a client that ignores the schema
    # gets contextkit's own message (the range and the value it sent) rather than a validator's.
    def recall_context(
        query: Annotated[str, Field(description="Words to search for (plain text, no operators)")],
        max_items: Annotated[int, Field(json_schema_extra={"minimum": 1, "maximum": 50})] = 8,
        max_tokens: Annotated[int, Field(json_schema_extra={"minimum": 1, "maximum": 12_000})] = 1500,
    ) -> CallToolResult:
        """A bounded, ranked context pack from the archive: identifiers must all match, other words rank."""
        try:
            text, used_items, used_tokens = profile_text(archive, query, max_items, max_tokens)
        except RecallValidationError as exc:
            return CallToolResult(content=[TextContent(type="text", text=f"422 {exc}")], is_error=True)
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content={"used_items": used_items, "used_tokens": used_tokens},
        )

    def search(
        query: Annotated[str, Field(description="Words to search for (plain text, no operators)")],
        limit: Annotated[int, Field(json_schema_extra={"minimum": 1, "maximum": 50})] = 8,
    ) -> CallToolResult:
        """Ranked archive entries for a query: one 'key | kind | origin | score' line each."""
        if isinstance(limit, bool) or not 1 <= limit <= 50:
            text, error = f"422 limit must be a whole number from 1 to 50, got {limit!r}", True
        else:
            hits = archive.search(query, limit)
            lines = [f"{h.key} | {h.kind} | {h.origin} | {h.score:.3f}" for h in hits]
            text, error = "\n".join(lines) or NO_MEMORY, False
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error)

    for fn in (recall, recall_context, search):
        server.add_tool(fn, annotations=read_only, structured_output=False)
    return server


def run_mcp_cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contextkit mcp", description="Serve a contextkit archive over MCP.")
    parser.add_argument("--archive", required=True, help="the archive file (SQLite) a Session wrote")
    parser.add_argument("--session", action="append", help="read only this session id (repeatable)")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    args = parser.parse_args(argv)
    try:
        archive = open_archive(args.archive, args.session)
        server = build_server(archive)
    except (UsageError, ImportError) as exc:
        print(f"contextkit mcp: {exc}", file=sys.stderr)
        return 2
    try:
        if args.http is not None:
            server.run("streamable-http", host="127.0.0.1", port=args.http)
        else:
            server.run("stdio")
    except KeyboardInterrupt:
        pass
    finally:
        archive.close()
    return 0
