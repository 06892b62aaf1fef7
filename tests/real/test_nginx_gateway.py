"""Debian's nginx in front of the bundled simulator: real 413 / dropped connection / WAF-style 403 answers.

Every variant is made from nginx config alone (``contextkit.sim.nginx``). The sizes contextkit reports are
checked against nginx's own access log (``$content_length``), byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from contextkit import Limits, Session, backend
from contextkit.archive import Archive
from contextkit.events import CapEvent, RecoveryEvent, RequestEvent
from contextkit.failures.classify import FailureKind, classify_failure
from contextkit.policy.expand import expand_markers
from contextkit.sim import GatewaySimulator
from contextkit.sim.corpus import document
from contextkit.sim.nginx import BLOCKED_PAGE, NginxGateway

pytestmark = pytest.mark.real

CAP = 48 * 1024
TURNS = 30
EXPECTED_KIND = {"413": FailureKind.PAYLOAD_TOO_LARGE, "waf403": FailureKind.WAF_REJECTION}
NGINX_413_TITLE = "<title>413 Request Entity Too Large</title>"


def oversized() -> list[dict[str, str]]:
    return [{"role": "user", "content": "x" * 60_000}]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ["openai", "anthropic"])
@pytest.mark.parametrize("variant", ["413", "waf403"])
def test_nginx_rejection_is_classified_from_its_real_answer(
    sim: GatewaySimulator, nginx_in_front: Callable[..., NginxGateway], variant: str, route: str, stream: bool
) -> None:
    gateway = nginx_in_front(sim.port, variant)
    kwargs = sim.litellm_kwargs(route)
    kwargs["api_base"] = gateway.api_base if route == "openai" else gateway.api_base.removesuffix("/v1")
    model = kwargs.pop("model")
    small = backend.completion(model, [{"role": "user", "content": "hi"}], timeout=30, **kwargs)
    assert small.choices[0].message.content  # the proxy itself works
    with pytest.raises(Exception) as info:
        response = backend.completion(model, oversized(), timeout=30, stream=stream, **kwargs)
        for _ in response if stream else ():
            pass
    failure = classify_failure(info.value)
    assert failure.kind is EXPECTED_KIND[variant], (type(info.value).__name__, str(info.value)[:300])
    body = getattr(getattr(info.value, "response", None), "text", "") or str(info.value)
    if route == "openai":  # nginx's own page reaches the classifier (the Anthropic route keeps only text)
        assert (NGINX_413_TITLE if variant == "413" else "security policy") in body
    statuses = [r.status for r in gateway.access_log()]
    assert statuses == [200, 413 if variant == "413" else 403]
    assert gateway.access_log()[-1].content_length is not None and gateway.access_log()[-1].content_length > CAP


def test_the_waf_page_served_is_the_configured_block_page(
    sim: GatewaySimulator, nginx_in_front: Callable[..., NginxGateway]
) -> None:
    gateway = nginx_in_front(sim.port, "waf403")
    with pytest.raises(Exception) as info:
        backend.completion(sim.model, oversized(), api_base=gateway.api_base, api_key="k", timeout=30)
    assert getattr(info.value, "status_code", None) == 403
    assert info.value.response.text == BLOCKED_PAGE  # type: ignore[attr-defined]


def test_dropped_connection_alone_is_not_yet_evidence_of_size(
    sim: GatewaySimulator, nginx_in_front: Callable[..., NginxGateway]
) -> None:
    """One drop, nothing else known: a network failure, classified without touching the history."""
    gateway = nginx_in_front(sim.port, "drop")
    with pytest.raises(Exception) as info:
        backend.completion(sim.model, oversized(), api_base=gateway.api_base, api_key="k", timeout=30)
    assert classify_failure(info.value).kind in (FailureKind.TRANSIENT, FailureKind.LIKELY_PAYLOAD)
    assert [r.status for r in gateway.access_log()] == [444]  # nginx closed it without an answer


def converse(gateway: NginxGateway, sim: GatewaySimulator, turns: int = TURNS) -> tuple[Session, list[str]]:
    """A user pasting a different 6-10 KB document each turn, behind a gateway whose cap is unknown."""
    session = Session(
        sim.model, api_base=gateway.api_base, api_key="sim-key", archive=Archive.in_memory(session_id="real"),
        limits=Limits(context_window=1_000_000, retry_backoff=0.0, request_timeout=30, summary_timeout=30),
        status=None, on_flush=None,
    )  # fmt: skip
    docs = []
    for turn in range(turns):
        doc, _ = document(turn, 6_000 + (turn * 1_337) % 4_000)
        docs.append(doc)
        reply = session.send(f"Here is incident report {turn + 1}:\n\n{doc}\n\nWhat is its port?")
        assert reply.text, f"turn {turn + 1} has no answer"
    return session, docs


def check_session_against_nginx(session: Session, gateway: NginxGateway, docs: list[str], variant: str) -> None:
    log = gateway.access_log()
    rejected = [(i, r) for i, r in enumerate(log) if r.status != 200]
    assert rejected, "the conversation must outgrow nginx's cap at least once"
    # nothing is sent again at a size nginx refused: after the last rejection of a size every request is smaller.
    # A dropped connection says nothing by itself: the evidence is the same request dropped twice while smaller
    # ones went through, so that variant may send one identical request once more - never a third time.
    repeats = 2 if variant == "drop" else 1
    sizes = [r.content_length for _, r in rejected]
    assert None not in sizes and all(sizes.count(size) <= repeats for size in sizes), sizes
    for i, r in rejected:
        later = [x.content_length or 0 for x in log[i + 1 :] if x.content_length != r.content_length]
        assert all(size < (r.content_length or 0) for size in later), (r, later)
    assert len(set(sizes)) <= 2, sizes
    # the cap is learned from nginx's answer, below what nginx refused
    caps = [e for e in session.events if isinstance(e, CapEvent) and e.source == "learned"]
    assert caps and session.payload_cap is not None and session.payload_cap < min(r.content_length or 0 for _, r in rejected)
    kinds = {e.failure_kind for e in session.events if isinstance(e, RecoveryEvent) and e.failure_kind}
    expected = {"413": "payload_too_large", "waf403": "waf_rejection", "drop": "likely_payload"}[variant]
    assert kinds == {expected}, kinds
    # honest size: every request contextkit measured is the body nginx saw, byte for byte
    measured = [e.bytes for e in session.events if isinstance(e, RequestEvent)]
    seen = [r.content_length for r in log]
    it = iter(seen)
    assert all(any(size == s for s in it) for size in measured), (measured, seen)
    summaries = session.compactor.stats.summary_calls
    assert len(seen) == len(measured) + summaries
    # nothing lost: every pasted document is still in the history or recoverable from the archive (markers
    # nest one level per compaction that drops an earlier notice, so a long session needs deep expansion)
    expanded = "\n".join(expand_markers(m.content, session.archive, max_depth=200) for m in session.history)
    assert all(doc in expanded for doc in docs)


@pytest.mark.parametrize("variant", ["413", "waf403"])
def test_long_conversation_learns_nginx_cap_and_finishes(
    sim: GatewaySimulator, nginx_in_front: Callable[..., NginxGateway], variant: str
) -> None:
    gateway = nginx_in_front(sim.port, variant)
    session, docs = converse(gateway, sim)
    check_session_against_nginx(session, gateway, docs, variant)


def test_long_conversation_through_connection_drops_finishes(
    sim: GatewaySimulator, nginx_in_front: Callable[..., NginxGateway]
) -> None:
    gateway = nginx_in_front(sim.port, "drop")
    session, docs = converse(gateway, sim, turns=12)
    check_session_against_nginx(session, gateway, docs, "drop")
