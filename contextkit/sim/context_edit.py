"""Anthropic's server-side context editing on the simulator's Anthropic route.

A request whose body carries ``context_management: {"edits": [{"type": "clear_tool_uses_20250919",
...}]}`` (litellm adds the ``context-management-2025-06-27`` beta header for it) is edited before the
model reads it, as Anthropic's API does: when the prompt is above ``trigger`` input tokens
(default 100,000), the oldest ``tool_result`` blocks are replaced by a placeholder, keeping the
newest ``keep`` tool uses (default 3); if that frees fewer than ``clear_at_least`` tokens (default
0) nothing is edited. The answer then reports ``context_management.applied_edits`` with
``cleared_tool_uses`` and ``cleared_input_tokens`` (in a JSON answer at its top level; in an event
stream on the final ``message_delta`` event). The client's history is not changed: the
server receives it whole again with the next request, and edits it again.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

BETA = "context-management-2025-06-27"  # without it in ``anthropic-beta`` the field is refused (400)
EDIT_TYPE = "clear_tool_uses_20250919"
PLACEHOLDER = "[cleared by context management]"


def _value(edit: Mapping[str, Any], key: str, default: int) -> int:
    part = edit.get(key)
    if isinstance(part, Mapping) and isinstance(part.get("value"), int):
        return int(part["value"])
    return default


def clear_tool_uses(
    data: Mapping[str, Any], count: Callable[[Mapping[str, Any]], int]
) -> tuple[Mapping[str, Any], dict[str, Any] | None]:
    """(the body the model reads, the applied edit or None). ``count`` sizes a body in input tokens."""
    edits = (data.get("context_management") or {}).get("edits") or []
    edit = next((e for e in edits if isinstance(e, Mapping) and e.get("type") == EDIT_TYPE), None)
    if edit is None:
        return data, None
    trigger = _value(edit, "trigger", 100_000)
    keep = _value(edit, "keep", 3)
    at_least = _value(edit, "clear_at_least", 0)
    before = count(data)
    if before <= trigger:
        return data, None
    edited = copy.deepcopy(dict(data))
    results = [
        part
        for message in edited.get("messages") or []
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, dict) and part.get("type") == "tool_result" and part.get("content") != PLACEHOLDER
    ]
    cleared = results[: max(0, len(results) - keep)]
    if not cleared:
        return data, None
    for part in cleared:
        part["content"] = PLACEHOLDER
    freed = before - count(edited)
    if freed < at_least:
        return data, None
    return edited, {"type": EDIT_TYPE, "cleared_tool_uses": len(cleared), "cleared_input_tokens": freed}
