"""``ContextkitMiddleware`` in a real LangChain v1 ``create_agent`` agent against the simulator."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="LangChain v1 is in the integrations extra")

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from contextkit import ConfigError, Limits, ProviderError
from contextkit.archive import Archive
from contextkit.events import RequestEvent
from contextkit.integrations.langchain import ContextkitMiddleware
from contextkit.sim import GatewaySimulator

CALLS: list[str] = []


def lookup(query: str) -> str:
    """Look a term up in the team's notes."""
    CALLS.append(query)
    return f"notes about {query}: the deploy key rotates on Mondays"


def agent_for(gw: GatewaySimulator, **options: Any) -> tuple[Any, ContextkitMiddleware]:
    options.setdefault("archive", Archive.in_memory(session_id="lc"))
    options.setdefault("status", None)
    middleware = ContextkitMiddleware(gw.model, api_base=gw.api_base, api_key="sim-key", **options)
    model = ChatOpenAI(model="sim-model", base_url=gw.api_base, api_key=SecretStr("sim-key"), max_retries=0, timeout=30)
    return create_agent(model=model, tools=[lookup], system_prompt="be brief", middleware=[middleware]), middleware


def test_the_agent_runs_its_tools_and_the_session_keeps_the_managed_copy(gw: GatewaySimulator) -> None:
    agent, middleware = agent_for(gw)
    CALLS.clear()
    state = agent.invoke({"messages": [HumanMessage('[[tool:lookup {"query": "deploy"}]] what about deploys?')]})
    assert CALLS == ["deploy"]  # LangChain ran the tool, not contextkit
    roles = [type(m).__name__ for m in state["messages"]]
    assert roles == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert [m.role for m in middleware.session.history] == ["system", "user", "assistant", "tool", "assistant"]
    assert len([e for e in middleware.session.events if isinstance(e, RequestEvent)]) == 2


def test_a_transient_failure_is_retried_inside_the_model_call(gw: GatewaySimulator) -> None:
    agent, middleware = agent_for(gw, limits=Limits(retry_backoff=0.01))
    gw.fail_next("500")
    state = agent.invoke({"messages": [HumanMessage("hello")]})
    assert state["messages"][-1].content and middleware.session.stats.retries == 1
    assert [r.status for r in gw.requests] == [500, 200]


def test_a_gateway_rejection_is_recovered_without_the_agent_noticing() -> None:
    with GatewaySimulator(max_body="64KB", reject_with="waf403") as gw:
        agent, middleware = agent_for(gw, limits=Limits(context_window=1_000_000))
        pasted = [HumanMessage(f"doc {i}: " + f"line {i} of the pasted file\n" * 300) for i in range(12)]
        messages: list[Any] = []
        for paste in pasted:
            messages = agent.invoke({"messages": [*messages, paste]})["messages"]
        statuses = [r.status for r in gw.requests]
    assert 403 in statuses and statuses[-1] == 200
    assert middleware.session.payload_cap is not None  # learned from the WAF page


def test_async_agent_and_a_failure_the_ladder_cannot_fix(gw: GatewaySimulator) -> None:
    agent, _ = agent_for(gw)
    state = asyncio.run(agent.ainvoke({"messages": [HumanMessage("hi")]}))
    assert state["messages"][-1].content
    gw.fail_next("400", body={"error": {"message": "unsupported parameter"}})
    with pytest.raises(ProviderError, match="not a size problem"):
        agent.invoke({"messages": [HumanMessage("again")]})
    with pytest.raises(ConfigError, match="needs the litellm model string"):
        ContextkitMiddleware()
