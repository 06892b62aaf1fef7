"""Histories the session tests load before a turn (plain litellm dicts, built from the simulator's workloads)."""

from __future__ import annotations

import json
from typing import Any

from contextkit.sim import Workspace


def read_history(n: int = 14, size: int = 12_000, seed: int = 0) -> list[dict[str, Any]]:
    """One recent agent turn that read ``n`` big files in parallel (too young for microcompact)."""
    ws = Workspace(seed=seed, target_bytes=size)
    outputs = [ws.read_file(f"src/module_{i}.py") for i in range(n)]
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": o.path})},
        }
        for i, o in enumerate(outputs)
    ]
    return [
        {"role": "user", "content": "Please review the service code."},
        {"role": "assistant", "content": "Reading every module.", "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"call_{i}", "content": o.content} for i, o in enumerate(outputs)),
        {"role": "assistant", "content": "I have read every module."},
    ]


def pasted_history(n: int = 8, size: int = 100_000, seed: int = 0) -> list[dict[str, Any]]:
    """Big logs pasted by the user: only a summary, truncation or shrinking can reduce them."""
    ws = Workspace(seed=seed, target_bytes=size)
    messages: list[dict[str, Any]] = []
    for i in range(n):
        messages.append({"role": "user", "content": f"log part {i}:\n" + ws.tail_log(size // 60).content})
        messages.append({"role": "assistant", "content": f"Noted part {i}."})
    return messages


# Six messages of decisions (a port, a file that stays, an order of work), padded so that a compaction
# has something to summarize, ending on a short exchange that is too young to touch.
DECISIONS: list[dict[str, Any]] = [
    {"role": "user", "content": "We are moving the inventory service to port 8443 this week. " + "context " * 150},
    {"role": "assistant", "content": "Understood: port 8443, and the retry logic in src/retry.py stays. " + "ok " * 150},
    {"role": "user", "content": "The deploy waits for the load test. " + "detail " * 150},
    {"role": "assistant", "content": "Noted, the deploy waits for the load test. " + "fine " * 150},
    {"role": "user", "content": "Anything else before we start?"},
    {"role": "assistant", "content": "No, that is all."},
]
