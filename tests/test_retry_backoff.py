"""Retry back-off: exponential, with jitter from a random source the session passes in (the flow has none)."""

from __future__ import annotations

import random
from types import SimpleNamespace

from contextkit import Limits
from contextkit.engine.flow import backoff


def _ctx(jitter: object, base: float = 0.5) -> SimpleNamespace:
    return SimpleNamespace(state=SimpleNamespace(limits=Limits(retry_backoff=base)), jitter=jitter)


def test_backoff_doubles_and_stays_in_the_upper_half_of_each_step() -> None:
    rng = random.Random(7)
    delays = {n: [backoff(_ctx(rng.random), n) for _ in range(200)] for n in (1, 2, 3)}  # type: ignore[arg-type]
    for n, values in delays.items():
        full = 0.5 * 2 ** (n - 1)
        assert all(full / 2 <= v <= full for v in values)
        assert len({round(v, 6) for v in values}) > 100  # jittered: clients that failed together spread out


def test_without_a_random_source_the_delay_is_the_full_step() -> None:
    assert backoff(_ctx(lambda: 1.0), 3) == 2.0  # type: ignore[arg-type]
    assert backoff(_ctx(lambda: 1.0, base=0.0), 5) == 0.0  # type: ignore[arg-type]


def test_a_session_retries_after_a_jittered_delay(gw: object) -> None:
    from contextkit.session.core import Session

    kwargs = gw.litellm_kwargs()  # type: ignore[attr-defined]
    session = Session(kwargs.pop("model"), status=None, limits=Limits(context_window=100_000), **kwargs)
    delays = {round(backoff(session._context(), 1), 6) for _ in range(20)}
    assert len(delays) > 1 and all(0.25 <= d <= 0.5 for d in delays)
