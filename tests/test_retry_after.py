"""Bounded waits: a provider's Retry-After, in seconds or as an HTTP-date, is honoured up to
``Limits.max_retry_wait``; one that asks for longer fails the turn at once, saying how long."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.errors import ConfigError, ProviderError
from contextkit.failures.classify import classify_failure
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator


class _Response:
    def __init__(self, headers: dict[str, str]) -> None:
        self.status_code, self.text, self.headers = 429, '{"error": {"message": "Rate limit reached"}}', headers


def rate_limited(retry_after: str) -> BaseException:
    error = type("RateLimitError", (Exception,), {})("litellm.RateLimitError: Rate limit reached")
    error.status_code = 429  # type: ignore[attr-defined]
    error.response = _Response({"retry-after": retry_after})  # type: ignore[attr-defined]
    return error


def http_date(seconds_from_now: float) -> str:
    return format_datetime(datetime.now(UTC) + timedelta(seconds=seconds_from_now), usegmt=True)


def session_for(gw: GatewaySimulator, **limits: Any) -> Session:
    kw = gw.litellm_kwargs()
    model = kw.pop("model")
    return Session(model, archive=Archive.in_memory(session_id="w"), session_id="w", status=None,
                   limits=Limits(context_window=1_000_000, retry_backoff=0.0, **limits), **kw)  # fmt: skip


def test_retry_after_in_seconds_and_as_an_http_date_are_read() -> None:
    assert classify_failure(rate_limited("3600")).retry_after == 3600.0
    dated = classify_failure(rate_limited(http_date(120)))
    assert dated.retry_after is None and dated.retry_at is not None
    assert 110 < dated.retry_at - time.time() <= 121
    assert classify_failure(rate_limited("soon")).retry_at is None  # not a date either: the back-off decides


@pytest.mark.parametrize("retry_after", ["3600", "date"])
def test_a_wait_longer_than_the_limit_fails_the_turn_at_once(gw: GatewaySimulator, retry_after: str) -> None:
    gw.configure(retry_after=http_date(3600) if retry_after == "date" else retry_after)
    session = session_for(gw)
    session.send("hello")
    before = session.history
    gw.fail_next("429")
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"asks to wait 3,\d{3} s.*max_retry_wait=60") as info:
        session.send("and again")
    assert time.monotonic() - started < 10  # not an hour
    assert "raise max_retry_wait" in str(info.value)
    assert session.history == before and len(gw.requests) == 2


def test_the_limit_is_a_setting(gw: GatewaySimulator) -> None:
    gw.configure(retry_after="2")
    session = session_for(gw, max_retry_wait=1.0)
    gw.fail_next("429")
    with pytest.raises(ProviderError, match="max_retry_wait=1"):
        session.send("hello")
    with pytest.raises(ConfigError, match="max_retry_wait"):
        Limits(max_retry_wait=-1)


def test_a_date_in_the_past_is_retried_at_once(gw: GatewaySimulator) -> None:
    gw.configure(retry_after=http_date(-30))
    session = session_for(gw)
    gw.fail_next("429")
    started = time.monotonic()
    assert session.send("hello").text
    assert time.monotonic() - started < 10 and session.stats.retries == 1
