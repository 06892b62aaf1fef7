"""The ``Message`` value type and its wire conversion.

A history is a list of immutable ``Message`` values. Changes make new values
(``dataclasses.replace``). Metadata (turn, preserve_verbatim, origin, summary flags) never goes
on the wire: ``to_wire`` emits exactly the OpenAI/litellm chat shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from contextkit.errors import InvalidMessageError

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")

MARKER_RE = re.compile(r"<<ccr:([0-9a-f]{16})>>")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def wire_safe(text: str) -> str:
    """``text`` as every JSON encoder and provider accepts it: lone surrogates (from bad decoding)
    become U+FFFD, which has the same UTF-8 size. The history and the archive keep the original."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE_RE.sub("\ufffd", text)
    return text


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call requested by the assistant. ``arguments`` is the JSON text sent on the wire."""

    id: str
    name: str
    arguments: str = "{}"

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a message's content came from: tool name, file path and 1-based inclusive line range."""

    tool: str | None = None
    path: str | None = None
    line_start: int | None = None
    line_end: int | None = None

    def describe(self) -> str:
        parts = []
        if self.tool:
            parts.append(self.tool)
        if self.path:
            where = self.path
            if self.line_start is not None:
                where += f":{self.line_start}-{self.line_end if self.line_end is not None else ''}"
            parts.append(where)
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message plus metadata that never goes on the wire.

    Wire fields: ``role``, ``content``, ``tool_calls``, ``tool_call_id``, ``name``, ``images``
    (image URLs or data URLs, sent as OpenAI content parts).
    Metadata: ``turn`` (assistant turns before it), ``preserve_verbatim`` (never reduced by
    compaction), ``origin`` (tool/path/lines), ``is_summary`` / ``summary_of`` (produced by
    compaction), ``is_recall`` (recall output: never re-archived), ``reasoning`` (provider
    reasoning text, stripped from old turns), ``synthetic`` (written by contextkit, not the user:
    pairing repair's results, notices, re-attached verbatim results),
    ``age_out_after`` (after this many later user turns the message becomes a one-line stub whose
    original is archived and recallable: ``age_messages``).
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    images: tuple[str, ...] = ()
    image_details: tuple[str | None, ...] = ()  # OpenAI's image_url "detail" per image ("low", "high"), if given
    # metadata, never on the wire
    turn: int | None = field(default=None, compare=False)
    preserve_verbatim: bool = False
    origin: Origin | None = None
    is_summary: bool = False
    summary_of: int = 0
    is_recall: bool = False
    reasoning: str | None = None
    synthetic: bool = False
    age_out_after: int | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidMessageError(
                f"message role {self.role!r} is not one of {', '.join(ROLES)}; "
                "use Message.user(...), Message.assistant(...), Message.tool(...) or Message.system(...)"
            )
        if not isinstance(self.content, str):
            raise InvalidMessageError(
                f"message content must be a str, got {type(self.content).__name__}; "
                "pass images through Message(images=...) and text as content"
            )
        if self.age_out_after is not None and (
            isinstance(self.age_out_after, bool) or not isinstance(self.age_out_after, int) or self.age_out_after < 1
        ):
            raise InvalidMessageError(
                f"age_out_after must be a positive number of turns or None, got {self.age_out_after!r}"
            )
        if self.role == "tool" and not self.tool_call_id:
            raise InvalidMessageError(
                "a tool message needs tool_call_id (the id of the assistant tool call it answers)"
            )

    # constructors -------------------------------------------------------------------------
    @classmethod
    def system(cls, content: str, **meta: Any) -> Message:
        return cls("system", content, **meta)

    @classmethod
    def user(cls, content: str, **meta: Any) -> Message:
        return cls("user", content, **meta)

    @classmethod
    def assistant(cls, content: str = "", tool_calls: Iterable[ToolCall] = (), **meta: Any) -> Message:
        return cls("assistant", content, tool_calls=tuple(tool_calls), **meta)

    @classmethod
    def tool(
        cls,
        tool_call_id: str,
        content: str,
        *,
        name: str | None = None,
        path: str | None = None,
        lines: tuple[int, int] | None = None,
        **meta: Any,
    ) -> Message:
        origin = meta.pop("origin", None)
        if origin is None and (name or path or lines):
            origin = Origin(
                tool=name,
                path=path,
                line_start=lines[0] if lines else None,
                line_end=lines[1] if lines else None,
            )
        return cls("tool", content, tool_call_id=tool_call_id, name=name, origin=origin, **meta)

    # helpers --------------------------------------------------------------------------------
    def with_content(self, content: str, **changes: Any) -> Message:
        return replace(self, content=content, **changes)

    def evolve(self, **changes: Any) -> Message:
        return replace(self, **changes)

    @property
    def archive_keys(self) -> tuple[str, ...]:
        """CCR keys referenced by markers in the content, first-seen order."""
        return tuple(dict.fromkeys(MARKER_RE.findall(self.content)))

    @property
    def chars(self) -> int:
        return len(self.content)

    def to_wire(self) -> dict[str, Any]:
        return to_wire(self)


# wire conversion -----------------------------------------------------------------------------


def to_wire(message: Message) -> dict[str, Any]:
    """The OpenAI/litellm dict for one message (metadata dropped)."""
    wire: dict[str, Any] = {"role": message.role}
    if message.images:
        parts: list[dict[str, Any]] = []
        if message.content:
            parts.append({"type": "text", "text": wire_safe(message.content)})
        parts.extend({"type": "image_url", "image_url": _image_url(message, i)} for i in range(len(message.images)))
        wire["content"] = parts
    elif message.role == "assistant" and message.tool_calls and not message.content:
        wire["content"] = None
    else:
        wire["content"] = wire_safe(message.content)
    if message.tool_calls:
        wire["tool_calls"] = [call.to_wire() for call in message.tool_calls]
        for call in wire["tool_calls"]:
            call["function"]["arguments"] = wire_safe(call["function"]["arguments"])
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    if message.name is not None and message.role != "tool":
        wire["name"] = message.name
    return wire


def _image_url(message: Message, i: int) -> dict[str, Any]:
    detail = message.image_details[i] if i < len(message.image_details) else None
    return {"url": message.images[i], **({"detail": detail} if detail is not None else {})}


def to_wire_list(history: Iterable[Message]) -> list[dict[str, Any]]:
    return [to_wire(m) for m in history]


def reply_to_wire(reply: Any) -> dict[str, Any]:
    """The assistant dict for a provider's reply message (an OpenAI/litellm response object), as a
    plain agent loop appends it to its history: its text (``None`` beside tool calls with no text)
    and its tool calls."""
    calls = list(getattr(reply, "tool_calls", None) or [])
    if not calls:
        return {"role": "assistant", "content": reply.content or ""}
    return {
        "role": "assistant",
        "content": reply.content or None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in calls
        ],
    }


def _text_and_images(content: Any, where: str) -> tuple[str, tuple[str, ...], tuple[str | None, ...]]:
    """Text (parts joined by newlines), image URLs and their ``detail`` (``()`` when none is given)."""
    if content is None:
        return "", (), ()
    if isinstance(content, str):
        return content, (), ()
    if isinstance(content, list):
        texts: list[str] = []
        images: list[str] = []
        details: list[str | None] = []
        for part in content:
            if not isinstance(part, Mapping):
                raise InvalidMessageError(f"{where}: content parts must be dicts, got {type(part).__name__}")
            kind = part.get("type")
            if kind == "text":
                text = part.get("text")
                texts.append(text if isinstance(text, str) else "" if text is None else str(text))
            elif kind == "image_url":
                url = part.get("image_url")
                images.append(str(url.get("url", "")) if isinstance(url, Mapping) else str(url))
                detail = url.get("detail") if isinstance(url, Mapping) else None
                details.append(str(detail) if detail is not None else None)
            else:
                raise InvalidMessageError(
                    f"{where}: unsupported content part type {kind!r} (use 'text' or 'image_url')"
                )
        return "\n".join(texts), tuple(images), (tuple(details) if any(d is not None for d in details) else ())
    raise InvalidMessageError(
        f"{where}: content must be a string, a list of parts or null, got {type(content).__name__}"
    )


def _tool_call_from_wire(raw: Any, where: str) -> ToolCall:
    if isinstance(raw, ToolCall):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidMessageError(f"{where}: each tool call must be a dict with id and function")
    fn = raw.get("function") or {}
    if not isinstance(fn, Mapping) or not fn.get("name"):
        raise InvalidMessageError(f"{where}: tool call {raw.get('id')!r} has no function name")
    args = fn.get("arguments", "{}")
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    return ToolCall(id=str(raw.get("id") or ""), name=str(fn["name"]), arguments=args)


def from_wire(raw: Mapping[str, Any] | Message, *, index: int | None = None) -> Message:
    """Build a ``Message`` from an OpenAI/litellm dict (or an object with the same attributes)."""
    if isinstance(raw, Message):
        return raw
    where = f"message {index}" if index is not None else "message"
    if not isinstance(raw, Mapping):
        dump = getattr(raw, "model_dump", None)
        if callable(dump):
            raw = dump()
        else:
            raise InvalidMessageError(
                f"{where}: expected a dict like {{'role': 'user', 'content': '...'}}, got {type(raw).__name__}"
            )
    assert isinstance(raw, Mapping)
    if "role" not in raw:
        raise InvalidMessageError(f"{where}: missing 'role' (one of {', '.join(ROLES)})")
    role = raw["role"]
    if role not in ROLES:
        raise InvalidMessageError(f"{where}: role {role!r} is not one of {', '.join(ROLES)}")
    if role != "assistant" and "content" not in raw:
        raise InvalidMessageError(f"{where}: a {role} message needs 'content'")
    text, images, details = _text_and_images(raw.get("content"), where)
    raw_calls = raw.get("tool_calls") or ()
    if not isinstance(raw_calls, list | tuple):
        raise InvalidMessageError(f"{where}: tool_calls must be a list of tool calls, got {type(raw_calls).__name__}")
    calls = tuple(_tool_call_from_wire(c, where) for c in raw_calls)
    if role != "assistant" and calls:
        raise InvalidMessageError(f"{where}: only assistant messages may carry tool_calls (got role {role!r})")
    tool_call_id = raw.get("tool_call_id")
    if role == "tool" and not tool_call_id:
        raise InvalidMessageError(f"{where}: a tool message needs 'tool_call_id' naming the call it answers")
    reasoning = raw.get("reasoning_content")
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidMessageError(f"{where}: 'name' must be a string, got {type(name).__name__}")
    return Message(
        role=role,
        content=text,
        tool_calls=calls,
        tool_call_id=str(tool_call_id) if tool_call_id is not None else None,
        name=name,
        images=images,
        image_details=details,
        reasoning=reasoning if isinstance(reasoning, str) else None,
    )


def from_wire_list(raw: Iterable[Mapping[str, Any] | Message]) -> list[Message]:
    return [from_wire(m, index=i) for i, m in enumerate(raw)]


# turn helpers ---------------------------------------------------------------------------------


def newest_request_index(history: Sequence[Message]) -> int | None:
    """Index of the newest user message written by the user - the task that no compaction may
    remove (notices and continuation prompts contextkit adds are ``synthetic``). None when none."""
    return next(
        (i for i in range(len(history) - 1, -1, -1) if history[i].role == "user" and not history[i].synthetic), None
    )


def newest_tool_round(history: Sequence[Message], *, after: int | None = None) -> int | None:
    """Index of the newest assistant message with tool calls (the start of the newest tool round),
    when it comes after index ``after``; None when there is none."""
    floor = -1 if after is None else after
    for i in range(len(history) - 1, floor, -1):
        if history[i].role == "assistant" and history[i].tool_calls:
            return i
    return None


def assistant_turns(history: Sequence[Message]) -> list[int]:
    """For each message, how many assistant messages precede it (its turn tag)."""
    tags: list[int] = []
    count = 0
    for m in history:
        if m.role == "assistant":
            count += 1
        tags.append(count)
    return tags


IMAGE_LINE = "[image_url: {url}{detail}]"


def archived_text(message: Message) -> str:
    """Everything a message carries besides its role, as text to archive: the content, then one
    ``[image_url: URL]`` line per image (a data URL holds the image bytes; `` detail=low`` when set). Equals ``content`` for a
    text-only message, so text stubs keep their keys; an image is never dropped unarchived."""
    if not message.images:
        return message.content
    lines = []
    for i in range(len(message.images)):
        part = _image_url(message, i)
        lines.append(IMAGE_LINE.format(url=part["url"], detail=f" detail={part['detail']}" if "detail" in part else ""))
    return "\n".join([message.content, *lines] if message.content else lines)


def render_transcript(history: Iterable[Message]) -> str:
    """The archived form of a dropped segment: ``[role]: content`` blocks, images included."""
    out = []
    for m in history:
        body = archived_text(m)
        if m.tool_calls:
            body += "\n[tool_calls: " + ", ".join(f"{c.name}({c.arguments})" for c in m.tool_calls) + "]"
        out.append(f"[{m.role}]: {body}\n\n")
    return "".join(out)


# persistence (metadata included) ---------------------------------------------------------------


def message_to_dict(message: Message) -> dict[str, Any]:
    """Full dict including metadata, for save/load (not for the wire)."""
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        data["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls]
    for name in ("tool_call_id", "name", "turn", "reasoning", "age_out_after"):
        value = getattr(message, name)
        if value is not None:
            data[name] = value
    if message.images:
        data["images"] = list(message.images)
    if message.image_details:
        data["image_details"] = list(message.image_details)
    if message.origin is not None:
        data["origin"] = {
            k: v
            for k, v in (
                ("tool", message.origin.tool),
                ("path", message.origin.path),
                ("line_start", message.origin.line_start),
                ("line_end", message.origin.line_end),
            )
            if v is not None
        }
    for flag in ("preserve_verbatim", "is_summary", "is_recall", "synthetic"):
        if getattr(message, flag):
            data[flag] = True
    if message.summary_of:
        data["summary_of"] = message.summary_of
    return data


def message_from_dict(data: Mapping[str, Any]) -> Message:
    calls = tuple(
        ToolCall(str(c["id"]), str(c["name"]), str(c.get("arguments", "{}"))) for c in data.get("tool_calls", ())
    )
    origin = Origin(**data["origin"]) if data.get("origin") else None
    return Message(
        role=data["role"],
        content=data.get("content", ""),
        tool_calls=calls,
        tool_call_id=data.get("tool_call_id"),
        name=data.get("name"),
        images=tuple(data.get("images", ())),
        image_details=tuple(data.get("image_details", ())),
        turn=data.get("turn"),
        preserve_verbatim=bool(data.get("preserve_verbatim", False)),
        origin=origin,
        is_summary=bool(data.get("is_summary", False)),
        summary_of=int(data.get("summary_of", 0)),
        is_recall=bool(data.get("is_recall", False)),
        reasoning=data.get("reasoning"),
        synthetic=bool(data.get("synthetic", False)),
        age_out_after=data.get("age_out_after"),
    )
