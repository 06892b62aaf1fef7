"""The fallback chain (``Session(model, fallbacks=[...])``): which model a turn's request goes to.

A turn starts with the session's model. It moves to the next model of the chain when the evidence
says the failure is not about size: a transient failure or an overload still failing after the
retries (5xx, 529, a dropped connection not judged a size limit), or a model that is gone (404,
410, "model ... does not exist"). Size failures are recovered on the same model, as without a chain,
except that with ``fallback_on_overflow=True`` an overflow first moves the turn to the next model
whose window holds the request. Each model keeps its own evidence (``ctx.evidence(model)``); every
request event names the model it went to, a ``fallback`` notice says why the turn moved, and
``Reply.model`` names the model that answered. The next turn starts with the session's model again.
"""

from __future__ import annotations

import re
from typing import Any

from contextkit.failures.classify import Failure, FailureKind
from contextkit.limits.context import FlowContext

_GONE = re.compile(r"model.{0,80}(not found|does not exist|not exist|decommissioned|deprecated|no longer)", re.I | re.S)


def model_gone(failure: Failure) -> bool:
    """A refusal that says the model itself is not there (a chain moves on; nothing to recover)."""
    if failure.kind != FailureKind.OTHER:
        return False
    if failure.status in (404, 410) or (failure.status or 0) >= 500:
        return True
    return bool(_GONE.search(f"{failure.reason} {failure.provider_message}"))


def active(ctx: FlowContext, index: int) -> tuple[str | None, dict[str, Any] | None]:
    """(model, litellm overrides) of the chain's ``index``-th entry; (None, None) for the session's model."""
    if index <= 0 or index > len(ctx.fallbacks):
        return None, None
    model, overrides, _ = ctx.fallbacks[index - 1]
    return model, dict(overrides)


def name(ctx: FlowContext, index: int) -> str:
    return active(ctx, index)[0] or ctx.state.model


def next_index(ctx: FlowContext, index: int, *, tokens: int | None = None) -> int | None:
    """The next entry after ``index`` (with ``tokens``: the next whose known window is larger), or None."""
    for i in range(index + 1, len(ctx.fallbacks) + 1):
        window = ctx.fallbacks[i - 1][2]
        if tokens is None or (window is not None and window > tokens):
            return i
    return None


def move(ctx: FlowContext, index: int, to: int, why: str) -> None:
    """Say that the turn moves from entry ``index`` to entry ``to``."""
    ctx.notify(
        "fallback",
        f"{name(ctx, index)} failed ({why}) - this turn moves to the fallback model {name(ctx, to)}",
        "warning",
    )
