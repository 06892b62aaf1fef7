"""What measuring the bytes litellm sends costs on each route.

For histories of 50, 200 and 2,000 messages (CJK and ASCII text, ~4-9 KB each), a warm ``RequestMeter``
measures the history grown by one message - what the session does before each request - on the OpenAI
route (per-message sizes, summed) and on the Anthropic route (litellm's own transformation of cached
stand-ins). The baseline, in the same run: the exact body litellm builds from the real messages
(``request_bytes``, the whole history transformed and serialised). Every figure is checked equal to the
baseline's bytes. Prints the medians of 5 and the date.

    python benchmarks/measure_routes.py
"""

from __future__ import annotations

import datetime
import statistics
import time

import contextkit
from contextkit import Message
from contextkit.sizing import RequestMeter, request_bytes

ROUTES = ("openai/sim-model", "anthropic/sim-model")


def history(n: int) -> list[Message]:
    out = [Message.system("You read what the user pastes.")]
    for i in range(n // 2):
        out.append(Message.user(f"paste {i}: " + "上下文工程的字节必须与线上一致。" * 100))
        out.append(Message.assistant(f"noted {i}: " + "the port is 8443 and the unit restarts cleanly. " * 90))
    return out


def median_time(fn: object, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    contextkit.offline()
    print(f"measure_routes  {datetime.date.today().isoformat()}")
    print(f"{'route':<10} {'messages':>8} {'bytes':>11} {'meter ms':>9} {'baseline ms':>12} {'ratio':>7}")
    for model in ROUTES:
        for n in (50, 200, 2_000):
            base = history(n)
            grown = [*base, Message.user("one more question about the port")]
            meter = RequestMeter(model)
            meter.measure(base, max_tokens=512)  # warm: every message measured once

            def grown_measure(meter: RequestMeter = meter, grown: list[Message] = grown) -> int:
                meter.retain(grown)  # a new request each time, as in a turn (the memo is per request)
                return meter.measure(grown, max_tokens=512).bytes

            exact = request_bytes(grown, model=model, max_tokens=512)
            assert grown_measure() == exact, (model, n)
            t_meter = median_time(grown_measure)
            t_base = median_time(lambda grown=grown, model=model: request_bytes(grown, model=model, max_tokens=512),
                                 repeats=3 if n >= 2_000 else 5)  # fmt: skip
            route = model.split("/")[0]
            print(f"{route:<10} {len(grown):>8} {exact:>11,} {t_meter * 1e3:>9.1f} {t_base * 1e3:>12.1f} "
                  f"{t_base / t_meter:>6.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
