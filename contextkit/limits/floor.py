"""The floor: the smallest request a session can still send, and the error when even that is too big.

The floor is computed with the very policies recovery uses - the newest user message as its
smallest excerpt (``policy.oversize``), the nuclear truncation of recovery level 3, then content
shrink down to pointers - run against a dry archive that stores nothing. So the diagnostic agrees with what
truncation can actually keep: when the floor fits a limit, compaction can get under it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contextkit.limits.context import FlowContext, measure
from contextkit.messages import Message, newest_request_index
from contextkit.policy.arguments import excerpt_tool_arguments
from contextkit.policy.oversize import EXCERPT_MIN_CHARS, excerpt_message, original_of
from contextkit.policy.shrink import shrink_to_budget
from contextkit.policy.testing import StagedSink
from contextkit.policy.truncate import emergency_truncate
from contextkit.sizing import Measure, format_size, request_bytes

ARGUMENTS_WORTH_NAMING = 1_024  # tool-call arguments the floor diagnostic names when they are at least this big


def minimal_history(
    ctx: FlowContext, history: Sequence[Message], dry: StagedSink, *, excerpt_newest: bool = True
) -> list[Message]:
    """What recovery can reduce ``history`` to at most (``dry`` is never committed: nothing is archived);
    ``excerpt_newest=False``: with the newest user message whole."""
    lim = ctx.state.limits
    out = list(history)
    i = newest_request_index(out)
    if i is not None and excerpt_newest:
        original = original_of(out[i], ctx.archive)
        got = excerpt_message(
            original, max_chars=EXCERPT_MIN_CHARS, archive=dry, too_big_for="the 999.9 KB payload cap"
        )
        if got is not None and len(got[0].content) < len(out[i].content):
            out[i] = got[0]
    out, _ = excerpt_tool_arguments(out, archive=dry, max_chars=lim.assistant_cap_level1)
    out, _ = emergency_truncate(
        out, keep=lim.nuclear_keep_messages, archive=dry, per_message_cap=lim.nuclear_message_cap
    )
    out, _ = shrink_to_budget(out, budget=1, measure=lambda h: measure(ctx, h).bytes, archive=dry)
    return out


def floor_measure(
    ctx: FlowContext, history: Sequence[Message] | None = None, *, excerpt_newest: bool = True
) -> Measure:
    """The smallest request: the minimal history, with the recall schema when reaching it archives
    something (the recall tool is offered from the request after the first archive write)."""
    out, tools = _floor_request(ctx, ctx.state.history if history is None else history, excerpt_newest)
    return ctx.meter.measure(out, tools=tools or None, **ctx.params)


def _floor_request(
    ctx: FlowContext, history: Sequence[Message], excerpt_newest: bool = True
) -> tuple[list[Message], list[dict[str, Any]]]:
    dry = StagedSink(ctx.archive)
    out = minimal_history(ctx, history, dry, excerpt_newest=excerpt_newest)
    if ctx.recall_tool is not None and (dry.staged or ctx.archived):
        return out, [*ctx.tools, ctx.recall_tool]
    return out, ctx.tools


def floor_text(ctx: FlowContext, limit_text: str, floor: Measure, *, tokens: bool = False) -> str:
    """An actionable floor message naming the real sizes (and no system prompt when there is none)."""
    st = ctx.state
    model = st.model
    params = dict(ctx.params)  # the request parameters are part of every body, as in ``measure``
    empty = request_bytes([], model=model, **params)
    systems = [m for m in st.history if m.role == "system"]
    system = request_bytes(systems, model=model, **params) - empty if systems else 0
    floor_history, tools = _floor_request(ctx, st.history)  # the recall schema too, when reaching the floor archives
    schemas = request_bytes([], tools=tools, model=model, **params) - empty if tools else 0
    i = newest_request_index(st.history)
    newest = original_of(st.history[i], ctx.archive) if i is not None else None
    parts, fixes = [], []
    if system:
        parts.append(f"the system prompt is {format_size(system)}")
        fixes.append("shorten the system prompt (or drop skills/personas)")
    if schemas:
        user_tools = [t for t in tools if t.get("function", {}).get("name") != "recall"]
        parts.append(f"the tool schemas are {format_size(schemas)}" + ("" if user_tools else " (the recall tool)"))
        if user_tools:
            fixes.append("register fewer tools or shorter tool descriptions")
    if newest is not None:
        size = len(newest.content.encode("utf-8", "surrogatepass"))
        cut = " (it is sent as an excerpt when it does not fit)" if len(newest.content) > EXCERPT_MIN_CHARS else ""
        parts.append(f"your newest message is {format_size(size)} of text{cut}")
        if cut:
            fixes.append("send a shorter message")
    images = [img for m in floor_history for img in m.images]
    if images:  # images are sent whole: no excerpt can shrink them
        parts.append(f"{len(images)} image{'s' if len(images) > 1 else ''} of {format_size(sum(map(len, images)))}")
        fixes.append("send fewer or smaller images (downscale them, or detail='low')")
    calls = [(c.name, len(c.arguments.encode("utf-8", "surrogatepass"))) for m in floor_history for c in m.tool_calls]
    arguments = sum(n for _, n in calls)
    if calls and arguments >= ARGUMENTS_WORTH_NAMING:
        name, largest = max(calls, key=lambda c: c[1])
        parts.append(f"the tool-call arguments kept are {format_size(arguments)} (the largest: {name}, "
                     f"{format_size(largest)})")  # fmt: skip
        fixes.append(
            "let the tool calls finish (an answered call's arguments are archived and excerpted) or ask the model "
            "to pass large content in pieces"
        )
    fixes.append("raise the provider's limit" if tokens else "raise the gateway's body-size limit")
    smallest = f"{floor.tokens:,} tokens" if tokens else format_size(floor.bytes)
    return (
        f"{limit_text}, but the smallest request this session can send is {smallest} ({'; '.join(parts) or 'framing'}"
        f"), so no history compaction can make it fit. To fix: {'; '.join(fixes)}."
    )
