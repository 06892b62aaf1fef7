"""One tool round of the turn flow: the assistant's calls go into the history, ``recall`` runs
in-process against the archive, every other tool through the ``RunTools`` effect, and the results
follow in the order of the calls."""

from __future__ import annotations

from contextkit.engine.effects import ModelReply, RunTools
from contextkit.engine.recall_round import recall_tool_result
from contextkit.limits.context import Flow, FlowContext, emit_history
from contextkit.messages import Message, ToolCall
from contextkit.tools import ToolResult


def run_tool_round(ctx: FlowContext, reply: ModelReply) -> Flow:
    """Append the assistant's calls, run them (recall in-process), append the results."""
    st = ctx.state
    st.stats.tool_calls += len(reply.tool_calls)
    st.history = [
        *st.history,
        Message.assistant(reply.content, reply.tool_calls, reasoning=reply.reasoning, turn=st.turn),
    ]
    recall_calls = [c for c in reply.tool_calls if c.name == "recall" and hasattr(ctx.archive, "recall_message")]
    other = tuple(c for c in reply.tool_calls if c not in recall_calls)
    results: dict[str, Message] = {}
    for call in recall_calls:
        results[call.id] = recall_tool_result(ctx, call)
    if other:
        ran: list[tuple[ToolCall, ToolResult]] = yield RunTools(other)
        for call, result in ran:
            results[call.id] = Message.tool(
                call.id, result.content, name=call.name, path=result.path, lines=result.lines
            )
    st.history = [*st.history, *(results[c.id] for c in reply.tool_calls if c.id in results)]
    emit_history(ctx, "tool")
