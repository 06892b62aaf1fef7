"""The plain agent loop of a replay and the recorded ``bash`` tool it calls.

A *plain* strategy is a function from the agent's full wire history to the request it sends
(``Plain.shape``), with the extra tool schemas it offers (a retrieval tool) and, when it keeps the
content it removes, how to find it again: ``keys`` lists the markers a request holds, ``original``
returns what a marker stands for (what "one recall away" means for that strategy).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from contextkit.messages import reply_to_wire
from contextkit.sim.replay import ReplayScript, Trajectory

__all__ = ["NO_OUTPUT", "REQUEST_TIMEOUT", "Plain", "Shaped", "Tool", "command_of", "plain_loop"]

REQUEST_TIMEOUT = 60.0
NO_OUTPUT = (
    "<returncode>0</returncode>\n<output>\n(no output was recorded: the run ended after this command)\n</output>"
)

Shaped = tuple[list[dict[str, Any]], list[dict[str, Any]]]  # (messages sent, extra tool schemas offered)


def _no_keys(text: str) -> Iterable[str]:
    return ()


def _no_original(key: str) -> str | None:
    return None


@dataclass
class Plain:
    """A plain strategy: ``shape(history) -> (messages, extra tools)``; ``keys``/``original`` its markers."""

    name: str
    shape: Callable[[list[dict[str, Any]]], Shaped]
    keys: Callable[[str], Iterable[str]] = _no_keys
    original: Callable[[str], str | None] = _no_original
    note: str = ""


class Tool:
    """The agent's ``bash``: the recorded output of the call the replay just made."""

    def __init__(self, traj: Trajectory, script: ReplayScript) -> None:
        self.traj, self.script = traj, script
        self.used: set[str] = set()
        self._lock = threading.Lock()  # LangChain runs parallel tool calls in threads

    def output(self, command: str) -> str:
        with self._lock:
            served = next((s for s in reversed(self.script.served) if s.kind == "step"), None)
            calls = self.traj.messages[served.position].calls if served is not None else ()
            fresh = [c for c in calls if c.id not in self.used]
            match = next((c for c in fresh if command_of(c.arguments) == command), fresh[0] if fresh else None)
            if match is None:
                return NO_OUTPUT
            self.used.add(match.id)
        return self.traj.output_for(match.id) or NO_OUTPUT


def command_of(arguments: str) -> str:
    try:
        return str(json.loads(arguments).get("command", ""))
    except (ValueError, AttributeError):
        return ""


def plain_loop(traj: Trajectory, script: ReplayScript, tool: Tool, sim: Any, plain: Plain) -> tuple[str | None, float]:
    """The loop an agent without recovery runs: shape the history, send it, run the tools; it stops at
    the first failed request (or a crashed shaper). Returns (error, seconds waiting for the provider)."""
    from contextkit import backend

    kwargs = sim.litellm_kwargs()
    model = kwargs.pop("model")
    tools = list(traj.tool_schemas)
    history: list[dict[str, Any]] = [{"role": "system", "content": traj.system}, {"role": "user", "content": traj.task}]
    waited = 0.0
    while True:
        t0 = 0.0
        try:
            sent, extra = plain.shape(history)
            t0 = time.perf_counter()
            response = backend.completion(model, sent, timeout=REQUEST_TIMEOUT, tools=[*tools, *extra], **kwargs)
        except Exception as exc:  # noqa: BLE001 - a failed request ends a plain agent's run
            waited += time.perf_counter() - t0 if t0 else 0.0
            return f"{type(exc).__name__}: {str(exc)[:200]}", waited
        waited += time.perf_counter() - t0
        message = response.choices[0].message
        calls = list(getattr(message, "tool_calls", None) or [])
        last = script.served[-1]
        history.append(reply_to_wire(message))
        if not calls:
            follow = script.next_user(last.position) if last.kind == "unrecorded" else None
            if follow is None:
                return None, waited
            history.append({"role": "user", "content": follow})
            continue
        for c in calls:
            out = tool.output(command_of(c.function.arguments or "{}"))
            history.append({"role": "tool", "tool_call_id": c.id, "content": out})
