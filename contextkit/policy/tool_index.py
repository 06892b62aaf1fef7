"""The tool index: each tool's schema as one line, the full schema on demand (``describe_tools``).

Tool schemas lead every request and never shrink by compaction: with many tools, or tools with long
descriptions, they are a large part of the floor (the smallest request recovery can reach). With
``Session(tool_index=True)`` each tool is sent with the first line of its description (at most
``LINE_CHARS``) and its parameters without their descriptions - names, types, enums and required
stay, so the model can still call it - plus one ``describe_tools`` tool that returns the full
schemas of the tools it names. Pure: schemas in, schemas out.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DESCRIBE_TOOLS", "LINE_CHARS", "describe", "describe_tools_schema", "index_schema"]

DESCRIBE_TOOLS = "describe_tools"
LINE_CHARS = 100


def _one_line(text: str) -> str:
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 3].rstrip() + "..."


def _strip_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_descriptions(v) for k, v in node.items() if k not in ("description", "title", "examples")}
    if isinstance(node, list):
        return [_strip_descriptions(v) for v in node]
    return node


def index_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` (OpenAI function form) with a one-line description and undescribed parameters."""
    out = copy.deepcopy(dict(schema))
    function = dict(out.get("function") or {})
    function["description"] = _one_line(str(function.get("description", "")))
    function["description"] += f" ({DESCRIBE_TOOLS} gives the full schema)" if function["description"] else ""
    if "parameters" in function:
        function["parameters"] = _strip_descriptions(function["parameters"])
    out["function"] = function
    return out


def describe_tools_schema() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": DESCRIBE_TOOLS,
            "description": "Full schemas (descriptions of the tools and their parameters) of the tools named.",
            "parameters": {
                "type": "object",
                "properties": {"names": {"type": "string", "description": "Tool names, separated by spaces or commas"}},
                "required": ["names"],
            },
        },
    }


def describe(schemas: Sequence[Mapping[str, Any]], names: str) -> str:
    """The full schemas of the tools named in ``names`` (all of them for ``*`` or an empty string)."""
    by_name = {str(s.get("function", {}).get("name")): s for s in schemas}
    wanted = [n for n in names.replace(",", " ").split() if n] if isinstance(names, str) else []
    if not wanted or wanted == ["*"]:
        wanted = list(by_name)
    unknown = [n for n in wanted if n not in by_name]
    parts = [json.dumps(by_name[n]["function"], ensure_ascii=False, indent=1) for n in wanted if n in by_name]
    if unknown:
        parts.append(f"no tool named {', '.join(unknown)}; the tools are: {', '.join(by_name)}")
    return "\n\n".join(parts)
