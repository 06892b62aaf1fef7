"""What a replay measures that can fail: the agent's first-use references and the token-count error.

*First-use references* come from the real agent's own behaviour: an identifier (a path, a dotted or
snake_case name, a CamelCase name) the agent writes for the first time at step k (in its text or
its tool-call arguments) that first appeared in a tool output at step j <= k - ``LAG``. The agent
needed it at step k, so request k must still hold it: verbatim, or behind a marker whose archived
original holds it (one recall away). A strategy that drops old outputs without a trace scores low
on both.

The *token-count error* compares our count of a recorded request (the messages the agent sent,
exactly, plus its tool schema) with the provider's reported ``prompt_tokens``; ``calibrated_errors``
applies the ratio learned from the steps before each step, as a session learns it.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contextkit.sim.replay import Trajectory

__all__ = ["LAG", "FirstUse", "billed", "calibrated_errors", "first_uses", "identifiers", "token_errors"]

LAG = 3  # steps between the output that brought an identifier and its first use by the agent
_TOKEN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z0-9_]+)*")
_CAMEL_RE = re.compile(r"[a-z][A-Z]|[A-Z][a-z]+[A-Z]")


def identifiers(text: str) -> set[str]:
    """Code-like names in ``text``: with ``_``, ``.`` or ``/`` inside, or CamelCase; at least 4 chars."""
    out = set()
    for tok in _TOKEN_RE.findall(text):
        tok = tok.strip("./")
        if len(tok) < 4 or tok.isdigit():
            continue
        if "_" in tok.strip("_") or "." in tok or "/" in tok or _CAMEL_RE.search(tok):
            out.add(tok)
    return out


def _written(m_text: str, args: Iterable[str]) -> set[str]:
    return identifiers(m_text + "\n" + "\n".join(args))


@dataclass(frozen=True)
class FirstUse:
    """``names`` the agent wrote first at ``step`` that came from the output of step ``source`` or before."""

    step: int
    names: frozenset[str]


def first_uses(traj: Trajectory, lag: int = LAG) -> dict[int, frozenset[str]]:
    """step k -> identifiers the agent writes first at step k that first appeared in a tool output at a
    step j <= k - ``lag`` (and not in the system prompt or any user message)."""
    given: set[str] = set()
    seen_out: dict[str, int] = {}  # identifier -> step whose output first held it
    written: set[str] = set()
    out: dict[int, frozenset[str]] = {}
    step = -1
    for m in traj.messages:
        if m.role in ("system", "user"):
            given |= identifiers(m.text)
        elif m.role == "assistant":
            step += 1
            names = _written(m.text, (c.arguments for c in m.calls)) - written
            hits = frozenset(n for n in names if n not in given and seen_out.get(n, step) <= step - lag)
            if hits:
                out[step] = hits
            written |= names
        elif m.role == "tool":
            for n in identifiers(m.text):
                seen_out.setdefault(n, max(step, 0))
    return out


def token_errors(traj: Trajectory, model: str = "") -> list[tuple[int, int, int]]:
    """(step, our tokens, the provider's prompt_tokens) for every recorded step with a usage record."""
    from contextkit.messages import from_wire
    from contextkit.sizing import RequestMeter

    meter = RequestMeter(model)
    tools = list(traj.tool_schemas)
    rows = []
    history = [from_wire(m.wire(), index=i) for i, m in enumerate(traj.messages)]
    for k, at in enumerate(traj.steps):
        recorded = traj.messages[at].prompt_tokens
        if recorded:
            rows.append((k, meter.measure(history[:at], tools=tools).tokens, recorded))
    return rows


def calibrated_errors(rows: Sequence[tuple[int, int, int]]) -> tuple[list[float], list[float]]:
    """Relative errors (ours / provider's - 1) before and after calibration, the way a session
    calibrates (``RequestMeter.calibrate``): each step counted at the ratio learned from the steps
    before it, then learned from (the first step, with nothing learned, counts as it is)."""
    from contextkit.sizing import RequestMeter

    meter = RequestMeter()
    before, after = [], []
    for _, ours, theirs in rows:
        before.append(ours / theirs - 1)
        scaled = round(ours * meter.ratio)
        after.append(scaled / theirs - 1)
        meter.calibrate(scaled, theirs)
    return before, after


def billed(records: Sequence[object], model: str) -> float:
    """Dollars of the accepted requests in ``records`` (the simulator's log) at ``model``'s prices in
    litellm's cost map, with automatic prefix caching as the recorded provider bills it: input read
    from the cache at the cache-read price, the rest at the input price, output at the output price."""
    from contextkit.backend import model_info

    info = model_info(model)
    if not info.get("input_cost_per_token"):
        raise ValueError(f"litellm's cost map has no input price for {model!r}; price the replay as a model it lists")
    inp = float(info["input_cost_per_token"])
    read = info.get("cache_read_input_token_cost")
    read = inp if read is None else float(read)
    out = float(info.get("output_cost_per_token") or 0.0)
    total = 0.0
    for r in records:
        if not getattr(r, "accepted", False):
            continue
        tokens, cached = int(getattr(r, "tokens", 0)), int(getattr(r, "cached_tokens", 0))
        total += max(0, tokens - cached) * inp + cached * read + int(getattr(r, "completion_tokens", 0)) * out
    return total


def median_abs(values: Sequence[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else 0.0
