"""Acceptance: other people's agents behind a 64 KB WAF gateway with a 32k window, with and without contextkit.

Twenty turns, each pasting a different 6-10 KB document (about 160 KB in all, well past both the
gateway's cap and the window): a LangChain ``create_agent`` agent with ``ContextkitMiddleware``, the
plain ``openai`` SDK through ``contextkit proxy`` (resending its full history each turn, some turns
streamed), a loop of ``contextkit.completion`` calls and the ``anthropic`` SDK through the proxy on
``/v1/messages`` all complete every turn with every document recoverable from the managed history
and its archive. The same clients without contextkit fail at the gateway.
"""

from __future__ import annotations

from typing import Any

import pytest

from contextkit.archive import Archive
from contextkit.policy.expand import expand_markers
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator
from contextkit.sim.pastes import (
    TURNS,
    ClientRun,
    anthropic_run,
    completion_run,
    documents_in,
    langchain_run,
    openai_run,
)
from contextkit.sim.pastes import paste_gateway as gateway


def recoverable(session: Session) -> list[int]:
    """The documents the managed history holds, verbatim or behind a marker its archive resolves."""
    return documents_in(expand_markers("\n".join(m.content for m in session.history), session.archive))


def assert_complete(run: ClientRun, session: Session, gw: GatewaySimulator) -> None:
    assert run.error is None and run.completed == TURNS, run.error
    assert all(run.answers)
    assert recoverable(session) == list(range(TURNS))
    statuses = [r.status for r in gw.requests]
    assert statuses[-1] == 200 and set(statuses) <= {200, 403, 400}, statuses


def assert_fails_at_the_gateway(run: ClientRun, gw: GatewaySimulator) -> None:
    assert run.completed < TURNS and run.error is not None
    assert gw.requests[-1].status in (403, 400), gw.requests[-1]
    assert "403" in run.error or "context" in run.error.lower() or "denied" in run.error.lower(), run.error


# with contextkit --------------------------------------------------------------------------------------


def test_a_langchain_agent_with_the_middleware_completes() -> None:
    pytest.importorskip("langchain.agents", reason="LangChain v1 is in the integrations extra")
    from contextkit.integrations.langchain import ContextkitMiddleware

    with gateway() as gw:
        middleware = ContextkitMiddleware(gw.model, api_base=gw.api_base, api_key="sim-key", status=None,
                                          archive=Archive.in_memory(session_id="lc"))  # fmt: skip
        run = langchain_run(gw, middleware, timeout=30)
        assert_complete(run, middleware.session, gw)


def test_the_openai_sdk_through_the_proxy_completes_some_turns_streamed() -> None:
    from contextkit.integrations.proxy import ProxyServer

    with gateway() as gw, ProxyServer(gw.api_base, archive=Archive.in_memory(session_id="px"), status=None) as proxy:
        run = openai_run(proxy.base_url, stream_every=3)
        (session,) = proxy.conversations.sessions  # one managed conversation, recognised by prefix
        assert_complete(run, session, gw)


def test_a_loop_of_contextkit_completion_calls_completes() -> None:
    from contextkit.integrations import Conversations

    with gateway() as gw:
        conversations = Conversations(archive=Archive.in_memory(session_id="cc"), status=None)
        run = completion_run(conversations.completion, gw)
        (session,) = conversations.sessions
        assert_complete(run, session, gw)


def test_the_anthropic_sdk_through_the_proxy_completes() -> None:
    pytest.importorskip("anthropic", reason="the Anthropic SDK is in the integrations extra")
    from contextkit.integrations.proxy import ProxyServer

    with gateway() as gw, ProxyServer(gw.api_base, archive=Archive.in_memory(session_id="an"), status=None) as proxy:
        run = anthropic_run(proxy.anthropic_base_url)
        (session,) = proxy.conversations.sessions
        assert_complete(run, session, gw)
        assert {r.route for r in gw.requests} == {"anthropic"}


# without contextkit: the same clients fail at the gateway -----------------------------------------------


def test_without_contextkit_the_same_three_fail_at_the_gateway() -> None:
    from contextkit.backend import completion

    pytest.importorskip("langchain.agents", reason="LangChain v1 is in the integrations extra")
    with gateway() as gw:
        assert_fails_at_the_gateway(langchain_run(gw, None, timeout=30), gw)
    with gateway() as gw:
        assert_fails_at_the_gateway(openai_run(gw.api_base), gw)
    with gateway() as gw:

        def plain(model: str, messages: list[Any], **kwargs: Any) -> Any:
            return completion(model, messages, **kwargs)  # litellm.completion, retries off

        assert_fails_at_the_gateway(completion_run(plain, gw), gw)
