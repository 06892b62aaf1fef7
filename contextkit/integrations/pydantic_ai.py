"""pydantic-ai: ``ContextkitHistory``, a history processor (pydantic-ai 2: ``Agent(..., capabilities=[
ContextkitHistory(...).capability()])``, a ``ProcessHistory`` capability; it is a plain processor too).

pydantic-ai keeps what a processor returns as the run's history, so the agent's own messages are
the managed ones from then on; what compaction took out is in the archive, behind markers.

Before every model request the agent's message history (``ModelRequest`` / ``ModelResponse``) is
rewritten to the managed request of a ``contextkit.Session`` - compacted, within the limits in force
(``InputRewriter``): what the archive took out stays recoverable behind markers. Like every input
filter it does not see the call itself: a failure raises in pydantic-ai; put ``contextkit proxy`` in
front of the model's client to have contextkit classify and recover failures too.
"""

from __future__ import annotations

from typing import Any

from contextkit.errors import require_extra
from contextkit.integrations.content import arguments_json, text_of
from contextkit.integrations.rewriter import InputRewriter, adapter_session
from contextkit.session.core import Session

require_extra("the pydantic-ai adapter", "pydantic_ai", extra="integrations")

from pydantic_ai.messages import (  # noqa: E402 - after the extra's check
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

__all__ = ["ContextkitHistory", "from_chat", "to_chat"]


class ContextkitHistory:
    """``Agent(model, history_processors=[ContextkitHistory("openai/gpt-4o-mini", api_base=..., limits=...)])``;
    any keyword goes to ``contextkit.Session``; ``session=``: a session of your own."""

    def __init__(self, model: str | None = None, *, session: Session | None = None, **session_options: Any) -> None:
        self.session = adapter_session("ContextkitHistory", model, session, session_options)
        self.rewriter = InputRewriter(self.session)

    def __call__(self, messages: list[Any]) -> list[Any]:
        return from_chat(self.rewriter.rewrite(to_chat(messages)))

    def capability(self) -> Any:
        """This processor as pydantic-ai's ``ProcessHistory`` capability."""
        from pydantic_ai.capabilities import ProcessHistory

        return ProcessHistory(self)


def to_chat(messages: list[Any]) -> list[dict[str, Any]]:
    """pydantic-ai's messages in the chat-completions form."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelResponse):
            texts = [p.content for p in message.parts if isinstance(p, TextPart)]
            calls = [{"id": p.tool_call_id, "type": "function",
                      "function": {"name": p.tool_name, "arguments": p.args_as_json_str()}}
                     for p in message.parts if isinstance(p, ToolCallPart)]  # fmt: skip
            out.append({"role": "assistant", "content": "\n".join(texts), **({"tool_calls": calls} if calls else {})})
            continue
        for part in getattr(message, "parts", ()):
            if isinstance(part, SystemPromptPart):
                out.append({"role": "system", "content": part.content})
            elif isinstance(part, UserPromptPart):
                content = part.content if isinstance(part.content, str) else "\n".join(str(c) for c in part.content)
                out.append({"role": "user", "content": content})
            elif isinstance(part, ToolReturnPart):
                out.append({"role": "tool", "tool_call_id": part.tool_call_id, "name": part.tool_name,
                            "content": part.model_response_str()})  # fmt: skip
    return out


def from_chat(messages: list[dict[str, Any]]) -> list[Any]:
    """Chat-completions messages as pydantic-ai's messages."""
    names: dict[str, str] = {}
    out: list[Any] = []
    for m in messages:
        role, content = m.get("role"), text_of(m.get("content"))
        if role == "assistant":
            parts: list[Any] = [TextPart(content)] if content else []
            for call in m.get("tool_calls") or ():
                function = call["function"]
                names[call["id"]] = function["name"]
                parts.append(ToolCallPart(function["name"], arguments_json(function.get("arguments")), tool_call_id=call["id"]))
            out.append(ModelResponse(parts=parts or [TextPart("")]))
        elif role == "tool":
            name = m.get("name") or names.get(m["tool_call_id"], "tool")
            out.append(ModelRequest(parts=[ToolReturnPart(tool_name=name, content=content, tool_call_id=m["tool_call_id"])]))
        elif role == "system":
            out.append(ModelRequest(parts=[SystemPromptPart(content)]))
        else:
            out.append(ModelRequest(parts=[UserPromptPart(content)]))
    return out

