"""Microcompact + tool-result budgets on a 2,000-message, ~10 MB history.

Run: ``.venv/bin/python benchmarks/microcompact_budget.py``. Prints the time of one naive full
re-serialisation of the history (``request_bytes``, the baseline every request pays anyway), of the
first pass (archives ~1,000 results), of the steady-state pass on the already compacted history, and
the same first pass against the real SQLite archive (``Archive.in_memory()``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from contextkit.messages import Message, ToolCall
from contextkit.policy.budgets import enforce_tool_result_budgets
from contextkit.policy.microcompact import microcompact
from contextkit.policy.testing import MemorySink
from contextkit.sizing import format_size, request_bytes


def build_history(turns: int = 1000, result_chars: int = 10_000) -> list[Message]:
    history = [Message.system("You are a coding agent.")]
    for t in range(turns - 1):
        body = "".join(f"{t:05d}:{n:04d} | some source line with content\n" for n in range(result_chars // 43 + 1))
        if t % 50 == 0:  # a few oversized results for the budget pass
            body *= 3
        history.append(Message.assistant(f"step {t}", [ToolCall(f"c{t}", "read_file", '{"path": "f.py"}')]))
        history.append(
            Message.tool(
                f"c{t}", body[: result_chars * (3 if t % 50 == 0 else 1)], name="read_file", path=f"src/f{t}.py"
            )
        )
    history.append(Message.user("continue"))
    return history


def timed(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def passes(history: list[Message], archive: Any) -> list[Message]:
    compacted, _ = microcompact(history, archive=archive)
    budgeted, _ = enforce_tool_result_budgets(compacted, archive=archive)
    return budgeted


def main() -> None:
    history = build_history()
    size = sum(len(m.content) for m in history)
    print(
        f"history: {len(history)} messages, {format_size(size)} of content, {format_size(request_bytes(history))} request"
    )
    baseline, _ = timed(lambda: request_bytes(history))
    first, compacted = timed(lambda: passes(history, MemorySink()))
    steady, _ = timed(lambda: passes(compacted, MemorySink()))
    print(f"baseline  request_bytes (full re-serialisation): {baseline * 1000:8.1f} ms")
    print(
        f"first     microcompact + budgets (MemorySink):   {first * 1000:8.1f} ms  -> {format_size(sum(len(m.content) for m in compacted))}"
    )
    print(f"steady    same passes on the compacted history:  {steady * 1000:8.1f} ms")
    print(f"ratio     first pass / baseline = {first / baseline:.2f}x, steady / baseline = {steady / baseline:.2f}x")
    try:
        from contextkit.archive import Archive
    except ImportError:
        return
    with Archive.in_memory() as archive:
        real, _ = timed(lambda: passes(history, archive), repeat=1)
    print(f"first     microcompact + budgets (SQLite archive, FTS indexing): {real * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
