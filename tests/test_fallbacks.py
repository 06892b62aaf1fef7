"""``Session(model, fallbacks=[...])``: a turn moves to the next model when the failure is not about size."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.errors import ConfigError, ProviderError
from contextkit.events import NoticeEvent, RequestEvent
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[GatewaySimulator, GatewaySimulator]]:
    with GatewaySimulator() as first, GatewaySimulator() as second:
        yield first, second


def _session(first: GatewaySimulator, second: GatewaySimulator, **kwargs: Any) -> Session:
    first.reset()
    second.reset()
    kwargs.setdefault("limits", Limits(retry_backoff=0.0, max_retries=2))
    return Session(
        "openai/primary-model", api_base=first.api_base, api_key="sim-key",
        fallbacks=[{"model": "openai/backup-model", "api_base": second.api_base, "api_key": "sim-key"}],
        archive=Archive.in_memory(session_id="f"), status=None, **kwargs,
    )  # fmt: skip


def _requests(session: Session) -> list[RequestEvent]:
    return [e for e in session.events if isinstance(e, RequestEvent)]


def test_a_first_model_returning_503_is_answered_by_the_second(pair: tuple[GatewaySimulator, GatewaySimulator]) -> None:
    first, second = pair
    session = _session(first, second)
    first.fail_next("503", times=10)
    reply = session.send("hello")
    assert reply.text and reply.model == "openai/backup-model"
    # the first model got its retries (three 503s), then the second answered
    assert [r.accepted for r in first.requests] == [False, False, False]
    assert [r.accepted for r in second.requests] == [True]
    events = _requests(session)
    assert [(e.model, e.outcome) for e in events] == [("openai/primary-model", "rejected")] * 3 + [
        ("openai/backup-model", "ok")
    ]
    notice = next(e for e in session.events if isinstance(e, NoticeEvent) and e.code == "fallback")
    assert "openai/primary-model failed" in notice.text and "openai/backup-model" in notice.text
    # nothing about size was learned, on either model
    assert session.payload_cap is None and session.stats.compactions == 0
    # the next turn starts with the session's model again
    first.clear_faults()
    assert session.send("again").model == "openai/primary-model"


def test_a_model_that_is_gone_moves_at_once(pair: tuple[GatewaySimulator, GatewaySimulator]) -> None:
    first, second = pair
    session = _session(first, second)
    first.fail_next("model_gone")
    reply = session.send("hello")
    assert reply.model == "openai/backup-model"
    assert len(first.requests) == 1  # no retries: the model is not coming back
    assert [e.model for e in _requests(session)][-1] == "openai/backup-model"


def test_a_size_failure_is_recovered_on_the_same_model(pair: tuple[GatewaySimulator, GatewaySimulator]) -> None:
    first, second = pair
    session = _session(first, second)
    first.fail_next("413")
    reply = session.send("hello " * 2_000)
    assert reply.model == "openai/primary-model" and second.requests == []
    assert session.payload_cap is not None  # learned, as without a chain


def test_without_fallbacks_the_turn_fails_as_before(pair: tuple[GatewaySimulator, GatewaySimulator]) -> None:
    first, _ = pair
    first.reset()
    session = Session(
        "openai/primary-model", api_base=first.api_base, api_key="sim-key", status=None,
        limits=Limits(retry_backoff=0.0, max_retries=1), archive=Archive.in_memory(session_id="n"),
    )  # fmt: skip
    first.fail_next("503", times=5)
    with pytest.raises(ProviderError, match="after 2 tries"):
        session.send("hello")


def test_an_overflow_may_go_to_a_larger_window_first(pair: tuple[GatewaySimulator, GatewaySimulator]) -> None:
    first, second = pair
    first.reset()
    second.reset()
    session = Session(
        "openai/primary-model", api_base=first.api_base, api_key="sim-key", status=None,
        limits=Limits(retry_backoff=0.0, context_window=128_000), archive=Archive.in_memory(session_id="o"),
        # gpt-4.1's window in litellm's map is about 1M tokens, larger than any request here
        fallbacks=[{"model": "openai/gpt-4.1", "api_base": second.api_base, "api_key": "sim-key"}],
        fallback_on_overflow=True,
    )  # fmt: skip
    first.fail_next("overflow")
    reply = session.send("hello")
    assert reply.model == "openai/gpt-4.1" and session.stats.compactions == 0
    assert any(isinstance(e, NoticeEvent) and "larger window" in e.text for e in session.events)


@pytest.mark.parametrize("bad", ["openai/x", [42], [{"api_base": "http://x"}], [""]])
def test_bad_fallbacks_are_a_clear_error(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"fallback|model"):
        Session("openai/primary-model", fallbacks=bad, status=None)  # type: ignore[arg-type]
