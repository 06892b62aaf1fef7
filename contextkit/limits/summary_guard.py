"""Summary requests under the same evidence as the turn's requests: a summary request at or above a
size its endpoint already rejected is not sent (the compactor gets ``NotSent`` and falls back), and a
summary request's payload rejection is evidence about that endpoint - and about the session's cap when
the summarizer is the session's own model."""

from __future__ import annotations

from typing import Any

from contextkit.compaction.summarizer import SummaryRequest, SummaryResponse
from contextkit.errors import ProviderError
from contextkit.failures.classify import FailureKind, classify_failure
from contextkit.limits.context import Flow, FlowContext
from contextkit.limits.evidence import Lesson, gateway_how, is_self_standing, judge, learned_cap
from contextkit.limits.learning import learn_cap, note_accepted, note_fact
from contextkit.limits.state import Fact
from contextkit.messages import Message
from contextkit.sizing import format_size, request_bytes


class NotSent(ProviderError):
    """A summary request was not sent: it is at or above a size its endpoint already rejected."""


def watch_summaries(ctx: FlowContext, sub: Flow) -> Flow:
    """``yield from sub``, but every summary request is checked against what its endpoint rejected
    and its outcome becomes evidence. Exceptions thrown in (cancellation) reach ``sub``."""
    try:
        effect = next(sub)
    except StopIteration as stop:
        return stop.value
    while True:
        value: Any
        if isinstance(effect, SummaryRequest) and (refusal := _summary_refusal(ctx, effect)):
            value = NotSent(refusal)
        else:
            try:
                value = yield effect
            except BaseException as exc:  # noqa: BLE001 - handed to the compactor, which re-raises
                try:
                    effect = sub.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            if isinstance(effect, SummaryRequest):
                _summary_evidence(ctx, effect, value)
        try:
            effect = sub.send(value)
        except StopIteration as stop:
            return stop.value


def _summary_bytes(ctx: FlowContext, request: SummaryRequest) -> int:
    # with the sampling parameters the summarizer sends (temperature, max_tokens): the bytes sent
    return request_bytes([Message.user(request.prompt)], model=request.model or ctx.state.model, **request.params())


def _summary_endpoint(ctx: FlowContext, request: SummaryRequest) -> str:
    return request.model or ctx.state.limits.compact_model or ctx.state.model


def _summary_refusal(ctx: FlowContext, request: SummaryRequest) -> str | None:
    ceiling = ctx.evidence(_summary_endpoint(ctx, request)).ceiling
    size = _summary_bytes(ctx, request)
    if ceiling is not None and size > ceiling:
        return (
            f"summary request not sent: {format_size(size)} is at or above {format_size(ceiling + 1)}, rejected before"
        )
    return None


def _summary_evidence(ctx: FlowContext, request: SummaryRequest, value: Any) -> None:
    endpoint = _summary_endpoint(ctx, request)
    ev = ctx.evidence(endpoint)
    size = _summary_bytes(ctx, request)
    if isinstance(value, SummaryResponse):
        note_accepted(ctx, size, endpoint=endpoint)
        return
    if not isinstance(value, BaseException):
        return
    failure = classify_failure(value, request_bytes=size)
    if failure.kind != FailureKind.PAYLOAD_TOO_LARGE or not is_self_standing(failure):
        # overflows and drops of a summary are the compactor's business (it falls back); a 403 page
        # states no size - a summary quoting a blocked line is refused for its content
        return
    if judge(ev, failure, sent_bytes=size, seen=0).lesson != Lesson.RECOVER:
        return  # a stray rejection, far below what this endpoint accepted: nothing to learn
    how = gateway_how(failure)
    ev.rejected(size, how)
    new = None
    if endpoint == ctx.state.model:
        new = learned_cap(size, floor=0, current=ctx.state.cap, accepted=ev.largest_accepted)
        if new is not None:
            learn_cap(ctx, new, rejected=size, how=f"summary request, {how}")
    note_fact(ctx, Fact("rejected", endpoint, size, how=how, value=new))
