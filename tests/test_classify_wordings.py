"""Real gateway and provider wordings, recorded as fixtures (tests/fixtures/wordings/*.json: status,
headers and body as the client receives them), read by the classifier as litellm hands them over:
an exception of litellm's class with the HTTP response attached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextkit.failures.classify import FailureKind, classify_failure
from contextkit.limits.evidence import EndpointEvidence, Lesson, gateway_how, is_self_standing, judge

WORDINGS = Path(__file__).parent / "fixtures" / "wordings"
FIXTURES = sorted(WORDINGS.glob("*.json"))


class _Response:
    def __init__(self, status: int, text: str, headers: dict[str, str]) -> None:
        self.status_code, self.text, self.headers = status, text, headers


def as_litellm_error(fixture: dict[str, Any]) -> BaseException:
    """The fixture as litellm raises it: its exception class (by name, as the classifier reads it),
    ``status_code``, ``message`` and the response with its headers."""
    cls = type(fixture["exception"], (Exception,), {})
    message = f"litellm.{fixture['exception']}: {fixture['body']}" if fixture["body"] else f"Error code: {fixture['status']}"
    error = cls(message)
    error.status_code = fixture["status"]  # type: ignore[attr-defined]
    error.message = message  # type: ignore[attr-defined]
    error.response = _Response(fixture["status"], fixture["body"], fixture["headers"])  # type: ignore[attr-defined]
    return error


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_every_fixture_names_its_source_and_expected_reading() -> None:
    assert len(FIXTURES) >= 10
    for path in FIXTURES:
        data = load(path)
        assert {"source", "exception", "status", "headers", "body", "kind"} <= set(data), path.name
        FailureKind(data["kind"])


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_a_recorded_wording_is_read_as_what_it_is(path: Path) -> None:
    data = load(path)
    failure = classify_failure(as_litellm_error(data))
    assert failure.kind == FailureKind(data["kind"]), failure.reason
    assert failure.connection_drop == bool(data.get("connection_drop")), failure.reason


def test_litellm_proxys_request_size_400_is_about_bytes_not_the_context() -> None:
    failure = classify_failure(as_litellm_error(load(WORDINGS / "litellm_proxy_request_size_400.json")))
    assert failure.kind == FailureKind.PAYLOAD_TOO_LARGE and failure.window_tokens is None
    assert is_self_standing(failure)  # a size-stating body: a fact a failed turn keeps


@pytest.mark.parametrize("name", ["litellm_proxy_rewrapped_html_403_header", "litellm_proxy_rewrapped_html_403_body"])
def test_a_re_wrapped_html_403_is_a_gateway_block_not_bad_credentials(name: str) -> None:
    failure = classify_failure(as_litellm_error(load(WORDINGS / f"{name}.json")))
    assert failure.kind == FailureKind.WAF_REJECTION and "re-wrapped" in failure.reason
    assert not is_self_standing(failure)  # a page that states no size: a reading to test, not a fact


def test_groqs_413_for_tokens_per_minute_is_a_rate_limit_with_its_retry_after() -> None:
    failure = classify_failure(as_litellm_error(load(WORDINGS / "groq_413_tokens_per_minute.json")))
    assert failure.kind == FailureKind.RATE_LIMIT and failure.retry_after == 7.0
    assert "not the body size" in failure.reason


def test_caddys_empty_502_is_no_answer_and_counts_only_with_discrimination() -> None:
    failure = classify_failure(as_litellm_error(load(WORDINGS / "caddy_request_body_502.json")))
    assert failure.connection_drop and gateway_how(failure) == "empty 502"
    fresh = EndpointEvidence()
    assert judge(fresh, failure, sent_bytes=80_000, seen=0).lesson == Lesson.RETRY  # first: retried once
    assert judge(fresh, failure, sent_bytes=80_000, seen=1).lesson == Lesson.RETRY  # nothing went through
    warm = EndpointEvidence()
    warm.accepted(60_000)
    assert judge(warm, failure, sent_bytes=80_000, seen=1).lesson == Lesson.RECOVER  # smaller ones did, recently


def test_a_502_with_a_body_is_an_ordinary_server_error() -> None:
    data = load(WORDINGS / "caddy_request_body_502.json") | {"body": "<html><body>502 Bad Gateway</body></html>"}
    data["headers"] = {"server": "nginx", "content-length": "42"}
    failure = classify_failure(as_litellm_error(data))
    assert failure.kind == FailureKind.TRANSIENT and not failure.connection_drop


def test_the_phrase_decides_not_the_status() -> None:
    """The same proxy 400 without the size phrase is not read as bytes: the rule is the phrase."""
    proxy = load(WORDINGS / "litellm_proxy_request_size_400.json")
    body = json.loads(proxy["body"])["error"]["message"].replace("Request size is too large", "Request is large")
    plain = classify_failure(as_litellm_error(proxy | {"body": json.dumps({"error": {"message": body,
                                                                                      "param": "content-length"}})}))  # fmt: skip
    assert plain.kind != FailureKind.PAYLOAD_TOO_LARGE  # the phrase, not the status, decides
