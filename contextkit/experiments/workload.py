"""The experiment workload: seeded synthetic agent sessions with big tool outputs (S7, S9.3).

A session of ``turns`` turns follows ``contextkit.sim.agent_steps(seed, turns)``: each turn is a
user message that makes the simulator's scripted model call one tool (a whole-file read, grep
output, a service log or a JSON dump from ``contextkit.sim.Workspace``, 20-60 KB each), then the
model acknowledges the result. Everything is deterministic in the seed, so every strategy sees
exactly the same conversation, and every tool output is recorded as ground truth for the
"nothing lost" check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contextkit.sim import TOOL_SCHEMAS, Workspace, agent_steps

__all__ = ["SYSTEM_PROMPT", "GatewaySpec", "Workload"]

SYSTEM_PROMPT = (
    "You are a coding agent working in a repository. Use the tools to read files, search, inspect logs "
    "and fetch records; answer briefly after each tool result."
)


@dataclass(frozen=True)
class GatewaySpec:
    """Simulator settings for one run: context window (tokens), body cap and rejection style."""

    name: str = "128KB-waf403"
    context_window: int = 32_000
    max_body: int | str | None = "128KB"
    reject_with: str = "waf403"

    def simulator_kwargs(self) -> dict[str, Any]:
        return {"context_window": self.context_window, "max_body": self.max_body, "reject_with": self.reject_with}


@dataclass
class Workload:
    """One seeded agent session: the user turns, the tools, and the record of tool outputs."""

    seed: int
    turns: int
    target_bytes: int = 40_000
    outputs: list[str] = field(default_factory=list)  # every tool output handed to the model, in order

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ValueError(f"turns must be >= 1, got {self.turns}")
        self.workspace = Workspace(self.seed, target_bytes=self.target_bytes)
        self.plan = agent_steps(self.seed, self.turns, files=max(6, self.turns // 4))

    def user_message(self, turn: int) -> str:
        """The user text of turn ``turn`` (0-based): a request plus the simulator's tool directive."""
        name, args = self.plan[turn]
        note = " ".join(f"{k}={v}" for k, v in args.items())
        return f"Turn {turn + 1}/{self.turns}: please run {name} {note}. [[tool:{name} {json.dumps(args)}]]"

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        return [dict(s) for s in TOOL_SCHEMAS]

    def call(self, name: str, arguments: str) -> str:
        """Run a tool by name with JSON arguments (baselines); records the output."""
        out = self.workspace.call(name, arguments)
        self.outputs.append(out.content)
        return out.content

    def session_tools(self) -> list[Callable[..., Any]]:
        """The tools as typed Python callables for ``Session(tools=...)``; outputs are recorded
        and carry their path/line range so read dedup can see them."""
        ws, outputs = self.workspace, self.outputs

        def read_file(path: str, start: int | None = None, end: int | None = None) -> Any:
            """Read a file of the workspace, optionally a 1-based inclusive line range."""
            out = ws.read_file(path, start, end)
            outputs.append(out.content)
            return out

        def grep(pattern: str) -> Any:
            """Search the workspace for a pattern (grep -rn)."""
            out = ws.grep(pattern)
            outputs.append(out.content)
            return out

        def tail_log(n: int) -> Any:
            """The last n lines of the service log."""
            out = ws.tail_log(n)
            outputs.append(out.content)
            return out

        def get_json(n: int) -> Any:
            """Fetch n records from the inventory API as JSON."""
            out = ws.get_json(n)
            outputs.append(out.content)
            return out

        return [read_file, grep, tail_log, get_json]
