"""The experiment workload: seeded synthetic agent sessions with big tool outputs.

A session of ``turns`` turns follows ``contextkit.sim.agent_steps(seed, turns)``: each turn is a
user message that makes the simulator's scripted model call one tool (a whole-file read, grep
output, a service log or a JSON dump from ``contextkit.sim.Workspace``, 20-60 KB each), then the
model acknowledges the result. Everything is deterministic in the seed, so every strategy sees
exactly the same conversation, and every tool output is recorded as ground truth for the
"nothing lost" check.

Needles (``contextkit.sim.needles``): up to four facts — a port, a build hash, a constant on a line
of a file, an error code — are planted in the tool outputs of seeded early turns; each is asked
about a few turns later and again at the end (question turns call no tool). ``score(replies)``
says which questions were answered with the planted value: a task metric that can fail.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contextkit.sim import TOOL_SCHEMAS, Workspace, agent_steps
from contextkit.sim.needles import NEEDLE_KINDS, Needle, make_needle, plant

__all__ = ["NEEDLE_GAP", "SYSTEM_PROMPT", "GatewaySpec", "NeedleScore", "RunTimeout", "Workload"]

NEEDLE_GAP = 6  # a needle is asked this many turns after it was planted (and again at the end)

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


@dataclass(frozen=True)
class NeedleScore:
    """How one strategy did on the needle questions of one session."""

    asked: int  # question turns reached
    planned: int  # question turns in the workload
    correct: int
    recalled: int  # correct answers that needed a retrieval tool call

    @property
    def accuracy(self) -> float | None:
        """Correct answers over *planned* questions: a question never reached counts as wrong."""
        return self.correct / self.planned if self.planned else None


class RunTimeout(Exception):
    """A run used up its wall-time budget (``Workload.deadline``): it stops at the next turn and its
    row says ``timeout``, so one slow run cannot stall a grid."""


@dataclass
class Workload:
    """One seeded agent session: the user turns, the tools, the needles, the record of tool outputs."""

    seed: int
    turns: int
    target_bytes: int = 40_000
    needles_wanted: int | None = None  # default: one per five turns, at most four
    outputs: list[str] = field(default_factory=list)  # every tool output handed to the model, in order
    deadline: float | None = None  # on ``clock``: no turn starts after it (RunTimeout)
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ValueError(f"turns must be >= 1, got {self.turns}")
        self.workspace = Workspace(self.seed, target_bytes=self.target_bytes)
        self.plan = agent_steps(self.seed, self.turns, files=max(6, self.turns // 4))
        self.needles: list[Needle] = []
        self.questions: dict[int, Needle] = {}  # question turn -> needle asked
        self.current_turn = 0
        self._schedule_needles()

    def _schedule_needles(self) -> None:
        """Plant turns in the first part of the session, a question NEEDLE_GAP turns later when that
        is still before the final questions, and one final question per needle at the end."""
        import random

        default = min(len(NEEDLE_KINDS), max(1, self.turns // 5)) if self.turns >= 3 else 0
        count = self.needles_wanted if self.needles_wanted is not None else default
        count = max(0, min(count, len(NEEDLE_KINDS), self.turns // 2))
        if count == 0:
            return
        rng = random.Random(f"needles|{self.seed}|{self.turns}")
        tool_turns = self.turns - count  # the last `count` turns are the final questions
        span = max(count, int(tool_turns * 0.6))
        plants = sorted(rng.sample(range(span), count))
        taken = set(plants)
        paths = [args["path"] for name, args in self.plan if name == "read_file"] or ["src/app/core.py"]
        for i, (kind, turn) in enumerate(zip(rng.sample(NEEDLE_KINDS, count), plants, strict=False)):
            path = rng.choice(paths)
            needle = make_needle(i, kind, self.seed, turn, path=path, path_lines=self.workspace.file_lines(path))
            self.needles.append(needle)
            self.plan[turn] = _step_for(needle, rng)
            ask = turn + NEEDLE_GAP
            while ask in taken and ask < tool_turns:
                ask += 1
            if ask < tool_turns:
                self.questions[ask] = needle
                taken.add(ask)
        for i, needle in enumerate(self.needles):
            self.questions[tool_turns + i] = needle

    def user_message(self, turn: int) -> str:
        """The user text of turn ``turn`` (0-based): a request plus the simulator's tool directive,
        or a needle question. Also marks ``turn`` as the current one (for planting). Raises
        ``RunTimeout`` when the run's deadline has passed: every strategy asks for each turn here."""
        if self.deadline is not None and self.clock() > self.deadline:
            raise RunTimeout(f"timeout: the run's wall-time budget ran out before turn {turn + 1}/{self.turns}")
        self.current_turn = turn
        if turn in self.questions:
            return f"Turn {turn + 1}/{self.turns}: {self.questions[turn].question()}"
        name, args = self.plan[turn]
        note = " ".join(f"{k}={v}" for k, v in args.items())
        return f"Turn {turn + 1}/{self.turns}: please run {name} {note}. [[tool:{name} {json.dumps(args)}]]"

    def is_question(self, turn: int) -> bool:
        return turn in self.questions

    def score(self, replies: dict[int, str]) -> NeedleScore:
        """Grade the final reply text of each question turn (``replies``: turn -> text)."""
        correct = recalled = asked = 0
        for turn, needle in self.questions.items():
            if turn not in replies:
                continue
            asked += 1
            if needle.correct(replies[turn]):
                correct += 1
                recalled += "(from recalled content)" in replies[turn]
        return NeedleScore(asked, len(self.questions), correct, recalled)

    def _planted(self, name: str, out: Any) -> Any:
        """The tool output with every needle due at this point written into it."""
        from dataclasses import replace

        content = out.content
        for needle in self.needles:
            due = needle.turn == self.current_turn and needle.tool == name
            sticky = needle.kind == "line" and self.current_turn >= needle.turn and out.path == needle.path
            if name == needle.tool and (due or sticky):
                content = plant(needle, content, self.seed)
        return out if content == out.content else replace(out, content=content)

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        return [dict(s) for s in TOOL_SCHEMAS]

    def call(self, name: str, arguments: str) -> str:
        """Run a tool by name with JSON arguments (baselines, peers); records the output."""
        out = self._planted(name, self.workspace.call(name, arguments))
        self.outputs.append(out.content)
        return str(out.content)

    def session_tools(self) -> list[Callable[..., Any]]:
        """The tools as typed Python callables for ``Session(tools=...)``; outputs are recorded
        and carry their path/line range so read dedup can see them."""
        ws, outputs, planted = self.workspace, self.outputs, self._planted

        def read_file(path: str, start: int | None = None, end: int | None = None) -> Any:
            """Read a file of the workspace, optionally a 1-based inclusive line range."""
            out = planted("read_file", ws.read_file(path, start, end))
            outputs.append(out.content)
            return out

        def grep(pattern: str) -> Any:
            """Search the workspace for a pattern (grep -rn)."""
            out = planted("grep", ws.grep(pattern))
            outputs.append(out.content)
            return out

        def tail_log(n: int) -> Any:
            """The last n lines of the service log."""
            out = planted("tail_log", ws.tail_log(n))
            outputs.append(out.content)
            return out

        def get_json(n: int) -> Any:
            """Fetch n records from the inventory API as JSON."""
            out = planted("get_json", ws.get_json(n))
            outputs.append(out.content)
            return out

        return [read_file, grep, tail_log, get_json]


def _step_for(needle: Needle, rng: Any) -> tuple[str, dict[str, Any]]:
    """The plan step of a needle's plant turn: the tool whose output carries it."""
    if needle.tool == "read_file":
        return ("read_file", {"path": needle.path})
    if needle.tool == "get_json":
        return ("get_json", {"n": rng.randint(80, 200)})
    return ("tail_log", {"n": rng.randint(300, 700)})
