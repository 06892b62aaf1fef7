"""Message content as the frameworks' converters need it: one text, tool-call arguments as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["arguments_json", "text_of"]


def text_of(content: Any, *, text_parts_only: bool = False) -> str:
    """A chat message's content as one text: a string as is; of a list of parts, their texts joined by
    lines - every part with a ``text`` (the Responses API's ``input_text`` / ``output_text`` too), or
    with ``text_parts_only`` only the ``{"type": "text"}`` parts (LangChain's and Anthropic's content
    blocks, whose other kinds carry no text meant for this); anything else by ``str`` (None: "")."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, Mapping) and (p.get("type") == "text" if text_parts_only else p.get("text") is not None)
        )
    return str(content or "")


def arguments_json(arguments: Any) -> str:
    """A tool call's arguments as the JSON string frameworks expect (some chat messages carry a dict)."""
    arguments = arguments or "{}"
    return arguments if isinstance(arguments, str) else json.dumps(arguments)
