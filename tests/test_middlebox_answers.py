"""How the classifier reads each real middlebox's rejection, replayed from its recorded answer.

The answers in tests/fixtures/middleboxes were recorded from Debian's Squid, HAProxy, Apache +
ModSecurity + OWASP CRS and Caddy in front of the simulator (scripts/record_middlebox_fixtures.py).
A loopback server replays each one (status, headers, body) so litellm raises, on both routes, what it
raised in front of the real server; no middlebox needs to be installed.
"""

from __future__ import annotations

import pytest
from helpers.replay import ReplayServer, load, names

from contextkit import backend
from contextkit.failures.classify import FailureKind, classify_failure

# What the classifier can know from one answer. A 413 states a size. A 403 block page states neither
# size nor content (ModSecurity's page is the same for its body limit's neighbours and a CRS content
# rule; HAProxy's is the same for any deny): it is read as a WAF rejection, and the session's evidence
# decides which it was. An empty 502 says nothing at all: one of them is not yet evidence of a size.
READING = {
    "squid_413": {FailureKind.PAYLOAD_TOO_LARGE},
    "haproxy_413": {FailureKind.PAYLOAD_TOO_LARGE},
    "modsecurity_413": {FailureKind.PAYLOAD_TOO_LARGE},
    "haproxy_403": {FailureKind.WAF_REJECTION},
    "modsecurity_403_command": {FailureKind.WAF_REJECTION},
    "modsecurity_403_sqli": {FailureKind.WAF_REJECTION},
    "caddy_502": {FailureKind.TRANSIENT, FailureKind.LIKELY_PAYLOAD},
}


def test_every_fixture_has_a_reading_and_says_why_it_was_refused():
    assert sorted(READING) == names()
    for name in names():
        fixture = load(name)
        assert fixture["cause"] in ("size", "content") and fixture["cap_bytes"] == 64 * 1024
        assert (fixture["request_bytes"] > fixture["cap_bytes"]) == (fixture["cause"] == "size")


def replayed(name: str, route: str) -> BaseException:
    fixture = load(name)
    with ReplayServer(fixture) as server, pytest.raises(Exception) as info:
        base = f"{server.origin}/v1" if route == "openai" else server.origin
        backend.completion(
            f"{route}/sim-model", [{"role": "user", "content": "x" * 200}], timeout=10, api_base=base, api_key="k"
        )
    assert server.received  # litellm posted to the replay
    return info.value


@pytest.mark.parametrize("route", ["openai", "anthropic"])
@pytest.mark.parametrize("name", sorted(READING))
def test_the_recorded_answer_is_read_as_today(name, route):
    error = replayed(name, route)
    failure = classify_failure(error, request_bytes=load(name)["request_bytes"])
    assert failure.kind in READING[name], (type(error).__name__, str(error)[:300])


@pytest.mark.parametrize("name", ["squid_413", "haproxy_413", "modsecurity_413"])
def test_a_413_is_read_as_size_on_the_anthropic_route_too(name):
    """litellm's Anthropic route turns the 413 into a 400 BadRequestError: the body still tells."""
    error = replayed(name, "anthropic")
    assert getattr(error, "status_code", None) == 400
    assert classify_failure(error).kind is FailureKind.PAYLOAD_TOO_LARGE


def test_the_crs_block_page_is_the_same_for_content_and_for_any_rule():
    """Why the classifier cannot tell content from size at a CRS 403: the pages are identical."""
    command, sqli = load("modsecurity_403_command"), load("modsecurity_403_sqli")
    assert command["status"] == sqli["status"] == 403 and command["body"] == sqli["body"]
    assert "Forbidden" in command["body"]


def test_squid_names_its_error_in_a_header():
    headers = {k.lower(): v for k, v in load("squid_413")["headers"]}
    assert headers["x-squid-error"].startswith("ERR_TOO_BIG")


def test_caddy_answers_its_body_limit_with_an_empty_502():
    fixture = load("caddy_502")
    assert fixture["status"] == 502 and fixture["body"] == ""
