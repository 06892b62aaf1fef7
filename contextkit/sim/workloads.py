"""Seeded generators of realistic, big tool outputs for agent workloads.

Everything here is deterministic in its arguments (a seed, a path, a size), so a test or a
notebook can regenerate the exact bytes an agent read. ``Workspace`` bundles the tool
implementations an agent loop registers; each returns a ``ToolOutput`` with the content and
its origin (tool, path, line range) so compaction can cite and archive it precisely.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contextkit.messages import Message

_WORDS = [
    "config",
    "buffer",
    "request",
    "session",
    "cache",
    "token",
    "window",
    "payload",
    "retry",
    "budget",
    "archive",
    "marker",
    "history",
    "summary",
    "compact",
    "gateway",
    "handler",
    "stream",
    "parser",
    "schema",
    "record",
    "segment",
    "offset",
    "checksum",
    "latency",
    "timeout",
    "limit",
    "cursor",
    "batch",
    "queue",
    "worker",
    "commit",
    "index",
]
_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")
_MODULES = ("src/app/core.py", "src/app/io.py", "src/app/net.py", "src/app/store.py", "lib/util/text.py")


def _rng(*parts: object) -> random.Random:
    """A Random seeded from the parts (stable across processes, unlike ``hash``)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def source_line(path: str, number: int, seed: int = 0) -> str:
    """Line ``number`` (1-based) of the synthetic file ``path``; independent of the other lines."""
    rng = _rng("line", path, number, seed)
    indent = "    " * rng.randint(0, 2)
    kind = rng.random()
    name = f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}"
    if kind < 0.15:
        body = f"def {name}(self, {rng.choice(_WORDS)}: int = {rng.randint(0, 999)}) -> None:"
    elif kind < 0.35:
        body = f"# {_words(rng, rng.randint(4, 10))}"
    elif kind < 0.7:
        body = f"{name} = compute_{rng.choice(_WORDS)}({rng.randint(0, 9999)}, '{_words(rng, 3)}')"
    else:
        body = f"if {name} > {rng.randint(0, 500)}: return {rng.choice(_WORDS)}.{rng.choice(_WORDS)}()"
    return indent + body


def file_content(path: str, lines: int, seed: int = 0, *, start: int = 1) -> str:
    """Numbered source-like lines ``start .. start+lines-1`` of ``path`` (``"   12| code"``).

    The number column has a fixed width, so any line range is a slice of the whole file."""
    return "\n".join(f"{n:>5}| {source_line(path, n, seed)}" for n in range(start, start + lines))


def file_length(path: str, seed: int = 0, *, min_lines: int = 400, max_lines: int = 1200) -> int:
    """The total line count of the synthetic file ``path`` (deterministic)."""
    return _rng("len", path, seed).randint(min_lines, max_lines)


def grep_output(pattern: str, matches: int, seed: int = 0) -> str:
    """``path:line:text`` hits for ``pattern``, like ``grep -rn``."""
    rng = _rng("grep", pattern, seed)
    out = []
    for _ in range(matches):
        path = rng.choice(_MODULES)
        line = rng.randint(1, 1200)
        out.append(f"{path}:{line}:    {source_line(path, line, seed)} # {pattern}")
    return "\n".join(out)


def log_output(lines: int, seed: int = 0) -> str:
    """Timestamped service log lines with occasional ERROR lines and tracebacks."""
    rng = _rng("log", seed)
    out = []
    for i in range(lines):
        level = rng.choice(_LEVELS)
        ts = f"2026-11-29T10:{(i // 60) % 60:02d}:{i % 60:02d}.{rng.randint(0, 999):03d}Z"
        msg = _words(rng, rng.randint(5, 12))
        if level == "ERROR":
            msg = (
                f"request {rng.randint(10000, 99999)} failed: {rng.choice(_WORDS)} timeout after {rng.randint(1, 30)}s"
            )
        out.append(f"{ts} {level:<5} [{rng.choice(_WORDS)}-worker-{rng.randint(1, 8)}] {msg}")
    return "\n".join(out)


def json_output(records: int, seed: int = 0) -> str:
    """A pretty-printed JSON array of ``records`` API-like objects."""
    rng = _rng("json", seed)
    items = [
        {
            "id": f"rec-{seed}-{i:05d}",
            "status": rng.choice(("active", "pending", "failed", "archived")),
            "bytes": rng.randint(100, 2_000_000),
            "owner": f"{rng.choice(_WORDS)}@example.org",
            "tags": [rng.choice(_WORDS) for _ in range(3)],
            "note": _words(rng, 8),
        }
        for i in range(records)
    ]
    return json.dumps(items, indent=2)


def lines_for_bytes(target_bytes: int, bytes_per_line: int = 60) -> int:
    """About how many generated lines make ``target_bytes`` (generators average ~50-70 B/line)."""
    return max(1, target_bytes // bytes_per_line)


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool result plus where it came from (for ``Message.tool(..., path=, lines=)``)."""

    content: str
    tool: str
    path: str | None = None
    line_start: int | None = None
    line_end: int | None = None

    @property
    def lines(self) -> tuple[int, int] | None:
        if self.line_start is None or self.line_end is None:
            return None
        return (self.line_start, self.line_end)

    def message(self, tool_call_id: str) -> Message:
        """The tool-result ``Message`` answering ``tool_call_id``, with this output's origin."""
        return Message.tool(tool_call_id, self.content, name=self.tool, path=self.path, lines=self.lines)


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


TOOL_SCHEMAS: list[dict[str, Any]] = [
    _fn(
        "read_file",
        "Read a file of the workspace, optionally a 1-based inclusive line range.",
        {"path": {"type": "string"}, "start": {"type": "integer"}, "end": {"type": "integer"}},
        ["path"],
    ),
    _fn("grep", "Search the workspace for a pattern (grep -rn).", {"pattern": {"type": "string"}}, ["pattern"]),
    _fn("tail_log", "The last n lines of the service log.", {"n": {"type": "integer"}}, ["n"]),
    _fn("get_json", "Fetch n records from the inventory API as JSON.", {"n": {"type": "integer"}}, ["n"]),
]


class Workspace:
    """Deterministic tool implementations over a synthetic repository.

    ``target_bytes`` sets the typical output size (files are about that big when read whole;
    grep/log/json outputs too), so an agent's tool results land in the 20-60 KB range by default.
    """

    def __init__(self, seed: int = 0, *, target_bytes: int = 40_000) -> None:
        self.seed = seed
        self.target_bytes = target_bytes

    def _size(self, *parts: object) -> int:
        # vary sizes by -50%..+50% around the target, deterministically
        return int(self.target_bytes * _rng("size", self.seed, *parts).uniform(0.5, 1.5))

    def file_lines(self, path: str) -> int:
        return lines_for_bytes(self._size("file", path), 58)

    def read_file(self, path: str, start: int | None = None, end: int | None = None) -> ToolOutput:
        total = self.file_lines(path)
        first = max(1, start or 1)
        last = min(total, end if end is not None else total)
        if first > last:
            return ToolOutput(f"error: {path} has {total} lines; range {first}-{last} is empty", "read_file", path)
        text = file_content(path, last - first + 1, self.seed, start=first)
        return ToolOutput(text, "read_file", path, first, last)

    def grep(self, pattern: str) -> ToolOutput:
        matches = lines_for_bytes(self._size("grep", pattern), 90)
        return ToolOutput(grep_output(pattern, matches, self.seed), "grep")

    def tail_log(self, n: int = 500) -> ToolOutput:
        return ToolOutput(log_output(max(1, int(n)), self.seed), "tail_log", "logs/service.log")

    def get_json(self, n: int = 100) -> ToolOutput:
        return ToolOutput(json_output(max(1, int(n)), self.seed), "get_json")

    @property
    def tools(self) -> dict[str, Callable[..., ToolOutput]]:
        return {"read_file": self.read_file, "grep": self.grep, "tail_log": self.tail_log, "get_json": self.get_json}

    def call(self, name: str, arguments: str | Mapping[str, Any]) -> ToolOutput:
        """Run tool ``name`` with JSON ``arguments``; bad calls return an error text, like real tools."""
        fn = self.tools.get(name)
        if fn is None:
            return ToolOutput(f"error: unknown tool {name!r}; available: {', '.join(self.tools)}", name)
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
            return fn(**args)
        except (TypeError, ValueError) as exc:
            return ToolOutput(f"error: bad arguments for {name}: {exc}", name)


def agent_steps(seed: int = 0, steps: int = 8, *, files: int = 6) -> list[tuple[str, dict[str, Any]]]:
    """A seeded plan of tool calls: mostly whole-file reads, plus grep, logs and JSON."""
    rng = _rng("plan", seed)
    paths = [f"src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}_{i}.py" for i in range(files)]
    plan: list[tuple[str, dict[str, Any]]] = []
    for i in range(steps):
        roll = rng.random()
        if roll < 0.55 or i == 0:
            plan.append(("read_file", {"path": paths[i % len(paths)]}))
        elif roll < 0.7:
            plan.append(("grep", {"pattern": rng.choice(_WORDS)}))
        elif roll < 0.85:
            plan.append(("tail_log", {"n": rng.randint(300, 700)}))
        else:
            plan.append(("get_json", {"n": rng.randint(80, 200)}))
    return plan


_DEFAULT = Workspace()


def read_file(path: str, start: int | None = None, end: int | None = None) -> ToolOutput:
    """``Workspace(seed=0).read_file``: the default workspace's files."""
    return _DEFAULT.read_file(path, start, end)


def grep(pattern: str) -> ToolOutput:
    return _DEFAULT.grep(pattern)


def tail_log(n: int = 500) -> ToolOutput:
    return _DEFAULT.tail_log(n)


def get_json(n: int = 100) -> ToolOutput:
    return _DEFAULT.get_json(n)
