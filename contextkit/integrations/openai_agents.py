"""The OpenAI Agents SDK: a ``call_model_input_filter`` and a session (``agents.memory.SessionABC``).

``ContextkitSession`` keeps a run's items across ``Runner.run`` calls (in memory, as the SDK gave them)
and owns the managed ``contextkit.Session``; ``session.input_filter`` is the filter for
``RunConfig(call_model_input_filter=...)``: every model call's input (and instructions) is rewritten
to the managed request - compacted, within the limits in force (``InputRewriter``).

The filter sees the input, not the call: a failed call raises inside the SDK, which retries or fails
on its own terms. To have contextkit classify and recover failures too, point the SDK's client at
``contextkit proxy``.
"""

from __future__ import annotations

from typing import Any

from contextkit.errors import require_extra
from contextkit.integrations.content import arguments_json, text_of
from contextkit.integrations.rewriter import InputRewriter, adapter_session
from contextkit.session.core import Session

require_extra("the OpenAI Agents SDK adapter", "agents", extra="integrations")

from agents.memory import SessionABC  # noqa: E402 - after the extra's check
from agents.models.chatcmpl_converter import Converter  # noqa: E402
from agents.run_config import CallModelData, ModelInputData  # noqa: E402

__all__ = ["ContextkitSession", "chat_to_items"]


class ContextkitSession(SessionABC):  # type: ignore[misc]
    """``ContextkitSession("openai/gpt-4o-mini", api_base=..., limits=...)`` (any keyword goes to
    ``contextkit.Session``), or ``ContextkitSession(session=Session(...))``."""

    session_id: str

    def __init__(self, model: str | None = None, *, session: Session | None = None, **session_options: Any) -> None:
        session = adapter_session("ContextkitSession", model, session, session_options)
        self.contextkit = session
        self.session_id = session.session_id
        self.rewriter = InputRewriter(session)
        self._items: list[Any] = []

    # the SDK's session protocol ---------------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(self._items if limit is None else self._items[-limit:])

    async def add_items(self, items: list[Any]) -> None:
        self._items.extend(items)

    async def pop_item(self) -> Any:
        return self._items.pop() if self._items else None

    async def clear_session(self) -> None:
        self._items.clear()

    # the filter -------------------------------------------------------------------------------------
    def input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """``RunConfig(call_model_input_filter=session.input_filter)``."""
        model_data = data.model_data
        messages: list[dict[str, Any]] = []
        if model_data.instructions:
            messages.append({"role": "system", "content": model_data.instructions})
        messages += [dict(m) for m in Converter.items_to_messages(model_data.input)]
        tools = [{"type": "function", "function": {"name": t.name, "description": getattr(t, "description", ""),
                                                   "parameters": getattr(t, "params_json_schema", {})}}
                 for t in getattr(data.agent, "tools", []) if hasattr(t, "name")]  # fmt: skip
        out = self.rewriter.rewrite(messages, tools=tools)
        instructions = None
        if out and out[0].get("role") == "system":
            instructions = text_of(out.pop(0).get("content"))
        return ModelInputData(input=chat_to_items(out), instructions=instructions)


def chat_to_items(messages: list[dict[str, Any]]) -> list[Any]:
    """Chat-completions messages as Responses input items (what the SDK's model input holds)."""
    items: list[Any] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": text_of(m.get("content"))})
        elif role == "assistant":
            text = text_of(m.get("content"))
            if text:
                items.append({"role": "assistant", "content": text})
            for call in m.get("tool_calls") or ():
                function = call["function"]
                items.append({"type": "function_call", "call_id": call["id"], "name": function["name"],
                              "arguments": arguments_json(function.get("arguments"))})  # fmt: skip
        else:
            items.append({"role": role, "content": text_of(m.get("content"))})
    return items

