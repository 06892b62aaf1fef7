"""Recall inside the turn flow: the ``recall`` tool, ``@recall`` in the user's text and in the model's reply.

Whatever the form, one recall result is at most a quarter of the session's current byte budget (the
share preserve-verbatim content may take): a longer original arrives as its first page with a
line telling the model how to get the next one, so it reaches the model instead of being stubbed
again by the verbatim cap (``contextkit.archive.paging``).

``@recall <<ccr:KEY>>`` written by the model in a reply without tool calls is honoured like the
tool: the flow keeps the reply, appends the recall result as a user message and asks again. A key
is honoured once per turn, so a model that repeats itself cannot loop.
"""

from __future__ import annotations

from collections.abc import Collection

from contextkit.archive.paging import MIN_PAGE_BYTES
from contextkit.archive.recall import RecallResult, find_inline_requests, recall_keys
from contextkit.limits.context import FlowContext, emit_history, measure
from contextkit.limits.preflight import byte_budget
from contextkit.markers import marker
from contextkit.messages import Message, ToolCall

RECALL_RESULT_HEADER = "[recall result for @recall {markers}]\n"


def page_bytes(ctx: FlowContext) -> int:
    """How many request bytes one recall result may take now: a quarter of the byte budget."""
    return max(MIN_PAGE_BYTES, byte_budget(ctx, measure(ctx, ctx.state.history)) // 4)


def recall_tool_result(ctx: FlowContext, call: ToolCall) -> Message:
    """The tool message answering the model's ``recall`` call, paged to fit the request."""
    return ctx.archive.recall_message(call.id, call.arguments, max_bytes=page_bytes(ctx))  # type: ignore[attr-defined]


def user_recall_messages(ctx: FlowContext, text: str) -> list[Message]:
    """The recall result for ``@recall`` forms in the user's own text (empty when there is none)."""
    result = _recall_in_text(ctx, text)
    if result is None:
        return []
    return [Message.user(result.text, is_recall=True, preserve_verbatim=result.complete)]


def model_recall_round(ctx: FlowContext, reply_text: str, honoured: set[str]) -> bool:
    """Honour ``@recall`` written by the model in a final reply: append the reply and the recall
    result to the history and return True (the flow asks the model again). Keys already in
    ``honoured`` (this turn) are not recalled twice; False when there is nothing (new) to recall."""
    result = _recall_in_text(ctx, reply_text, skip=honoured)
    if result is None:
        return False
    honoured.update(result.keys)
    st = ctx.state
    header = RECALL_RESULT_HEADER.format(markers=" ".join(marker(k) for k in result.keys))
    st.history = [
        *st.history,
        Message.assistant(reply_text, turn=st.turn),
        Message.user(header + result.text, is_recall=True, preserve_verbatim=result.complete),
    ]
    emit_history(ctx, "tool")
    return True


def _recall_in_text(ctx: FlowContext, text: str, skip: Collection[str] = ()) -> RecallResult | None:
    wanted = [(k, r) for k, r in find_inline_requests(text) if k not in skip]
    if not wanted or not callable(getattr(ctx.archive, "get", None)):
        return None
    return recall_keys(ctx.archive, wanted, max_bytes=page_bytes(ctx))
