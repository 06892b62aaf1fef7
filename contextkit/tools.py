"""Python callables as model tools: JSON schemas from type hints, results with origin metadata."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from contextkit.errors import ConfigError


@dataclass(frozen=True)
class ToolResult:
    """What a tool may return instead of a plain string: content plus where it came from.

    ``path`` and ``lines`` (1-based, inclusive) let read dedup (the trim stage) know which file range a
    result covers; ``tool`` overrides the tool name recorded in the origin.
    """

    content: str
    path: str | None = None
    lines: tuple[int, int] | None = None
    is_error: bool = False


@dataclass(frozen=True)
class Tool:
    """A registered tool: its OpenAI function schema and the callable that runs it."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    func: Callable[..., Any] = field(repr=False)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.func)

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
        }

    @classmethod
    def from_function(
        cls, func: Callable[..., Any], *, name: str | None = None, description: str | None = None
    ) -> Tool:
        """Schema from the signature's type hints (pydantic), description from the docstring."""
        from pydantic import TypeAdapter

        if isinstance(func, Tool):
            return func
        if not callable(func):
            raise ConfigError(f"tools must be callables or Tool objects, got {type(func).__name__}")
        tool_name = name or getattr(func, "__name__", None)
        if not tool_name or tool_name == "<lambda>":
            raise ConfigError("a tool needs a name: pass a named function or Tool.from_function(fn, name=...)")
        try:
            hints = get_type_hints(func)
        except Exception as exc:
            raise ConfigError(f"tool {tool_name!r}: cannot read its type hints ({exc})") from exc
        properties: dict[str, Any] = {}
        required: list[str] = []
        for pname, param in inspect.signature(func).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            annotation = hints.get(pname, str)
            schema = TypeAdapter(annotation).json_schema()
            schema.pop("title", None)
            properties[pname] = schema
            if param.default is inspect.Parameter.empty:
                required.append(pname)
        doc = inspect.getdoc(func) or f"Run {tool_name}."
        parameters = {"type": "object", "properties": properties, "required": required}
        return cls(name=tool_name, description=description or doc, parameters=parameters, func=func)

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        try:
            args = json.loads(arguments or "{}")
        except ValueError as exc:
            raise ValueError(f"arguments for {self.name} are not valid JSON: {exc}") from None
        if not isinstance(args, dict):
            raise ValueError(f"arguments for {self.name} must be a JSON object")
        allowed = set(self.parameters.get("properties", {}))
        return {k: v for k, v in args.items() if k in allowed}


def as_tools(tools: Sequence[Callable[..., Any] | Tool] | None) -> dict[str, Tool]:
    registry: dict[str, Tool] = {}
    for item in tools or ():
        tool = item if isinstance(item, Tool) else Tool.from_function(item)
        if tool.name in registry:
            raise ConfigError(f"two tools are named {tool.name!r}; tool names must be unique")
        registry[tool.name] = tool
    return registry


def normalise_result(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(value)
    content = getattr(value, "content", None)
    if isinstance(content, str):
        path = getattr(value, "path", None)
        lines = getattr(value, "lines", None)
        return ToolResult(content, path=path, lines=tuple(lines) if lines else None)  # type: ignore[arg-type]
    try:
        return ToolResult(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return ToolResult(str(value))
