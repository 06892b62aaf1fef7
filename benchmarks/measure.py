"""Incremental measurement vs a full recount.

Builds a 2,000-message, ~10 MB history in a Session, measures it once (warming the per-message
cache), appends one message, and times ``session.measure()`` against a full
``litellm.token_counter`` recount of the same history, in the same run. Prints both and the ratio
(the bar is >= 100x).

    python benchmarks/measure.py
"""

from __future__ import annotations

import statistics
import time

from contextkit import Archive, Limits, Message, Session, backend
from contextkit.messages import to_wire_list
from contextkit.sizing import RequestMeter

MODEL = "openai/gpt-4o-mini"


def build_history(messages: int = 2_000, total_bytes: int = 10 * 1024 * 1024) -> list[Message]:
    per = total_bytes // messages
    line = "def handler(request): return respond(request.payload, status=200)  # line\n"
    body = (line * (per // len(line) + 1))[:per]
    history: list[Message] = []
    for i in range(messages):
        role = "user" if i % 2 == 0 else "assistant"
        history.append(Message(role, f"[{i}] " + body))
    return history


def main() -> None:
    session = Session(MODEL, archive=Archive.in_memory(), limits=Limits(context_window=10_000_000), status=None)
    history = build_history()
    t0 = time.perf_counter()
    first = RequestMeter(MODEL).measure(history)  # a fresh meter counts every message once
    cold = time.perf_counter() - t0
    session.add_messages(history)
    session.measure()
    session.add_messages([Message.user("one more question about line 42 of handler.py")])

    incremental = []
    for _ in range(5):
        t0 = time.perf_counter()
        m = session.measure()
        incremental.append(time.perf_counter() - t0)
    wire = to_wire_list(session.history)
    full = []
    for _ in range(2):
        t0 = time.perf_counter()
        tokens = backend.token_counter(MODEL, wire)
        full.append(time.perf_counter() - t0)
    inc, base = statistics.median(incremental), statistics.median(full)
    print(f"history: {m.messages} messages, {m.bytes / 1024 / 1024:.1f} MB request body, {m.tokens:,} tokens")
    print(f"first measure (cold cache, counts every message once): {cold * 1000:.0f} ms ({first.tokens:,} tokens)")
    print(f"full litellm.token_counter recount (baseline):          {base * 1000:.1f} ms ({tokens:,} tokens)")
    print(f"session.measure() after appending one message:          {inc * 1000:.2f} ms")
    print(f"speed-up: {base / inc:.0f}x (bar: >= 100x)")
    if abs(tokens - m.tokens) > m.messages:  # per-message framing may differ by a token or so
        print(f"warning: token counts differ: litellm {tokens:,} vs meter {m.tokens:,}")


if __name__ == "__main__":
    from contextkit import offline

    offline()  # a benchmark owns its process: litellm's bundled cost map and tokenizers, no network
    main()
