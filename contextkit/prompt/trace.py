"""Per-call trace of what the model received.

``trace_request(messages, tools=..., model=...)`` describes one request piece by piece: the size
(bytes on the wire, tokens) and the origin of every message — a system block, the user, an
assistant turn, a tool result with its path and line range, a summary, a stub with its
``<<ccr:KEY>>`` marker, recall output, a notice — and what each mechanism did to it (previewed,
one-lined, budget-capped, deduplicated, shrunk, truncated, summarized, archived, pruned).
Mechanisms are read from message metadata and from the stub texts the policies write, so a trace
also works on plain wire dicts loaded from a log.

Content-free by default: a piece carries a SHA-256 prefix and sizes, never text, so traces can be
stored and shared; ``include_content=True`` keeps the text too.

``trace_session(session)`` traces the request a session would send next (read-only: tool-result
budgets are applied to a copy with a throw-away archive sink; content addressing makes the stubs
identical to the real ones).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from contextkit.messages import Message, from_wire
from contextkit.sizing import dumps, message_bytes, request_bytes, text_tokens

__all__ = ["RequestTrace", "TracePiece", "trace_request", "trace_session"]

_MARKER_RE = re.compile(r"<<ccr:([0-9a-f]{16})>>")
# (mechanism, test on the content) - first match wins; texts written by contextkit.policy
_STUB_SIGNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("summarized", re.compile(r"^\[(?:STRUCTURED SUMMARY|COMPACTED CONTEXT)")),
    ("pruned", re.compile(r"^\[(?:CONTEXT TRUNCATED: \d+ messages removed|Context was automatically compacted)")),
    ("one-lined", re.compile(r"^\[Old tool result cleared - ")),
    ("deduplicated", re.compile(r"^\[Earlier read of ")),
    ("previewed", re.compile(r"\n\[\.\.\. \d+ chars omitted from old tool result \.\.\.\]\n")),
    ("budget-capped", re.compile(r"\.\.\. \[\d+ chars omitted - full output")),
    ("shrunk", re.compile(r"^\[\w+ message of \d+ chars archived")),
    ("reasoning-stripped", re.compile(r"\[reasoning removed - \d+ chars\]")),
    ("truncated", re.compile(r"\n\.\.\. \[truncated\] \.\.\.\n")),
)
_NOTICE_RE = re.compile(r"^\[SYSTEM NOTICE - PAYLOAD LIMIT HIT\]")
_RECOVERY_RE = re.compile(r"^\[Context was automatically compacted due to size limits")
_RECALL_RE = re.compile(r"^(?:--- @recall <<ccr:|recall: |\[recalled original)")
_DROPPED_RE = re.compile(r"^\[(?:CONTEXT TRUNCATED: (\d+) messages|STRUCTURED SUMMARY - covering (\d+) earlier)")


@dataclass(frozen=True)
class TracePiece:
    """One message of a request, without its text unless asked for.

    ``origin``: system | user | assistant | tool_result | summary | stub | recall | notice |
    synthetic. ``mechanism``: what compaction did to it (``None``: sent as written).
    ``blocks``: the assembly blocks it carries, when the request came from an ``Assembler``.
    """

    index: int
    role: str
    origin: str
    bytes: int
    tokens: int
    sha256: str
    mechanism: str | None = None
    markers: tuple[str, ...] = ()
    tool: str | None = None
    path: str | None = None
    lines: tuple[int | None, int | None] | None = None
    tool_calls: tuple[str, ...] = ()
    dropped_messages: int = 0
    preserve_verbatim: bool = False
    blocks: tuple[str, ...] = ()
    content: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.content is None:
            data.pop("content")
        return data


@dataclass(frozen=True)
class RequestTrace:
    """What the model received in one call: totals, one ``TracePiece`` per message, the tools."""

    model: str
    bytes: int
    tokens: int
    pieces: tuple[TracePiece, ...]
    tools: tuple[str, ...] = ()
    tools_bytes: int = 0
    tools_tokens: int = 0

    @property
    def mechanisms(self) -> dict[str, int]:
        """How many pieces each mechanism produced."""
        return dict(Counter(p.mechanism for p in self.pieces if p.mechanism))

    @property
    def origins(self) -> dict[str, int]:
        return dict(Counter(p.origin for p in self.pieces))

    @property
    def bytes_by_origin(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for p in self.pieces:
            out[p.origin] += p.bytes
        return dict(out)

    @property
    def archive_keys(self) -> tuple[str, ...]:
        """Every archive key the request points at (the model can recall any of them)."""
        return tuple(dict.fromkeys(k for p in self.pieces for k in p.markers))

    @property
    def dropped_messages(self) -> int:
        """Messages no longer in the request, replaced by a summary or a truncation notice."""
        return sum(p.dropped_messages for p in self.pieces)

    def to_dicts(self) -> list[dict[str, Any]]:
        return [p.to_dict() for p in self.pieces]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "bytes": self.bytes,
            "tokens": self.tokens,
            "tools": list(self.tools),
            "tools_bytes": self.tools_bytes,
            "tools_tokens": self.tools_tokens,
            "mechanisms": self.mechanisms,
            "dropped_messages": self.dropped_messages,
            "pieces": self.to_dicts(),
        }

    def __str__(self) -> str:
        head = (
            f"request to {self.model or '?'}: {len(self.pieces)} messages, {self.bytes:,} bytes, {self.tokens:,} tokens"
            + (f"; {len(self.tools)} tools ({self.tools_bytes:,} bytes)" if self.tools else "")
        )
        rows = []
        for p in self.pieces:
            where = " ".join(x for x in (p.tool or "", _where(p)) if x)
            extra = ", ".join(
                x
                for x in (
                    p.mechanism or "",
                    _markers(p.markers),
                    f"{p.dropped_messages} msgs dropped" if p.dropped_messages else "",
                    "+".join(p.blocks),
                )
                if x
            )
            rows.append(
                f"  [{p.index:>3}] {p.origin:<12} {p.bytes:>9,} B {p.tokens:>7,} tok  {where}  {extra}".rstrip()
            )
        mech = ", ".join(f"{k} {v}" for k, v in sorted(self.mechanisms.items())) or "none"
        return "\n".join([head, *rows, f"mechanisms: {mech}"])


def _where(p: TracePiece) -> str:
    if not p.path:
        return ""
    if p.lines and p.lines[0] is not None:
        return f"{p.path}:{p.lines[0]}-{p.lines[1] if p.lines[1] is not None else ''}"
    return p.path


def _mechanism(m: Message) -> str | None:
    for name, sign in _STUB_SIGNS:
        if sign.search(m.content):
            return name
    if _MARKER_RE.search(m.content) and not m.is_recall and not _RECALL_RE.search(m.content):
        return "archived"
    return None


def _origin(m: Message, mechanism: str | None) -> str:
    text = m.content
    if m.role == "system":
        return "system"
    if mechanism == "pruned" or (m.role == "user" and (_NOTICE_RE.search(text) or _RECOVERY_RE.search(text))):
        return "notice"
    if m.is_summary or mechanism == "summarized":
        return "summary"
    if m.is_recall or _RECALL_RE.search(text):
        return "recall"
    if m.synthetic or text.startswith("[result unavailable: removed during context recovery]"):
        return "synthetic"
    if mechanism is not None and mechanism not in ("reasoning-stripped",):
        return "stub"
    return "tool_result" if m.role == "tool" else m.role


def _dropped(m: Message) -> int:
    if m.summary_of:
        return m.summary_of
    hit = _DROPPED_RE.search(m.content)
    return int(hit.group(1) or hit.group(2)) if hit else 0


def _piece(index: int, m: Message, model: str, blocks: tuple[str, ...], include_content: bool) -> TracePiece:
    mechanism = _mechanism(m)
    origin = m.origin
    tokens = text_tokens(m.content, model) + sum(
        text_tokens(c.name, model) + text_tokens(c.arguments, model) for c in m.tool_calls
    )
    return TracePiece(
        index=index,
        role=m.role,
        origin=_origin(m, mechanism),
        bytes=message_bytes(m),
        tokens=tokens,
        sha256=hashlib.sha256(m.content.encode("utf-8", "surrogatepass")).hexdigest()[:16],
        mechanism=mechanism,
        markers=tuple(dict.fromkeys(_MARKER_RE.findall(m.content))),
        tool=(origin.tool if origin else None) or (m.name if m.role == "tool" else None),
        path=origin.path if origin else None,
        lines=(origin.line_start, origin.line_end) if origin and origin.line_start is not None else None,
        tool_calls=tuple(c.name for c in m.tool_calls),
        dropped_messages=_dropped(m),
        preserve_verbatim=m.preserve_verbatim,
        blocks=blocks,
        content=m.content if include_content else None,
    )


def trace_request(
    messages: Sequence[Message | Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    model: str = "",
    blocks: Any = None,
    include_content: bool = False,
) -> RequestTrace:
    """Trace one request: ``messages`` as ``Message`` values (metadata used) or wire dicts.

    ``blocks``: an ``AssemblyLog`` (or, per message, a sequence of block names) to name the
    assembly blocks each message carries. ``bytes`` is the exact JSON body size
    (``contextkit.sizing.request_bytes``); piece bytes are each message's own JSON size.
    """
    history = [from_wire(m, index=i) for i, m in enumerate(messages)]
    owners: Sequence[Sequence[str]] = getattr(blocks, "block_of_message", blocks) or ()
    pieces = tuple(
        _piece(i, m, model, tuple(owners[i]) if i < len(owners) else (), include_content) for i, m in enumerate(history)
    )
    tool_list = list(tools or ())
    names = tuple(str(t.get("function", {}).get("name", t.get("name", "?"))) for t in tool_list)
    tools_text = dumps(tool_list) if tool_list else ""
    return RequestTrace(
        model=model,
        bytes=request_bytes(history, tools=tool_list or None, model=model),
        tokens=sum(p.tokens for p in pieces) + text_tokens(tools_text, model),
        pieces=pieces,
        tools=names,
        tools_bytes=len(tools_text.encode("utf-8")),
        tools_tokens=text_tokens(tools_text, model),
    )


def trace_session(session: Any, *, include_content: bool = False) -> RequestTrace:
    """Trace the request ``session`` would send next (its history with tool-result budgets applied).

    Read-only: the budgets run against a throw-away archive sink, never the session's archive.
    """
    from contextkit.policy.budgets import enforce_tool_result_budgets
    from contextkit.policy.testing import MemorySink

    history = list(session.history)
    state = getattr(session, "_state", None)
    limits = session.limits
    turn_budget = getattr(state, "turn_budget", limits.tool_result_turn_budget)
    per_result = getattr(state, "per_result_budget", limits.tool_result_max_chars)
    outgoing, _ = enforce_tool_result_budgets(
        history, archive=MemorySink(), turn_budget=turn_budget, per_result=per_result
    )
    return trace_request(
        outgoing, tools=session.tool_schemas or None, model=session.model, include_content=include_content
    )


def _markers(keys: tuple[str, ...], shown: int = 2) -> str:
    """The archive keys of a piece, the first few by name: a summary may carry dozens, and the row
    must stay one readable line (``trace.archive_keys`` lists them all)."""
    if not keys:
        return ""
    more = f" +{len(keys) - shown} more" if len(keys) > shown else ""
    return f"markers {' '.join(keys[:shown])}{more}"
