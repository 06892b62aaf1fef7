"""The loop of a host that makes the model calls itself (``Conversations``, the LangChain middleware):
send what the ``HostTurn`` decides, wait its delay first, feed back what came, until the turn ends.

``call(request)`` sends one request and returns the provider's response; ``read(response, request)``
turns it into a ``ModelReply``. What either raises is fed to the turn as the failure (it classifies
it). Both loops return the final ``Decision`` and the last response (the host builds its answer from it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from contextkit.engine.effects import CallModel, Reply
from contextkit.engine.host import Decision, HostTurn

__all__ = ["adrive", "drive", "reply_of"]


def drive(turn: HostTurn, call: Callable[[CallModel], Any], read: Callable[[Any, CallModel], Any]) -> tuple[Decision, Any]:
    decision = turn.start()
    last: Any = None
    while not decision.finished:
        assert decision.request is not None
        if decision.delay:
            time.sleep(decision.delay)
        try:
            last = call(decision.request)
            outcome: Any = read(last, decision.request)
        except Exception as exc:  # noqa: BLE001 - the turn classifies it
            outcome = exc
        decision = turn.feed(outcome)
    return decision, last


async def adrive(
    turn: HostTurn, call: Callable[[CallModel], Awaitable[Any]], read: Callable[[Any, CallModel], Any]
) -> tuple[Decision, Any]:
    decision = await turn.astart()
    last: Any = None
    while not decision.finished:
        assert decision.request is not None
        if decision.delay:
            await asyncio.sleep(decision.delay)
        try:
            last = await call(decision.request)
            outcome: Any = read(last, decision.request)
        except Exception as exc:  # noqa: BLE001 - the turn classifies it
            outcome = exc
        decision = await turn.afeed(outcome)
    return decision, last


def reply_of(decision: Decision) -> Reply:
    """The reply of a turn that ended ``done``; a failed turn's error is raised (the history is as before it)."""
    if decision.action == "fail":
        assert decision.error is not None
        raise decision.error
    assert decision.reply is not None
    return decision.reply
