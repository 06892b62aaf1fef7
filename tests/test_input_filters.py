"""Hosts that can only rewrite the model's input: the OpenAI Agents SDK's ``call_model_input_filter`` with
``ContextkitSession``, pydantic-ai's history processor, and the ``InputRewriter`` under both.

Both frameworks run real agents (a tool every fifth turn) against the simulator behind the 64 KB
WAF-403 gateway with a 32k window, pasting a different 6-10 KB document each of 20 turns. A filter
does not see the call's failures, so these hosts state the limits they know (``Limits``); without
the filter the same agent fails at the gateway.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.errors import ConfigError
from contextkit.integrations.content import arguments_json, text_of
from contextkit.integrations.rewriter import InputRewriter, adapter_session
from contextkit.policy.expand import expand_markers
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator
from contextkit.sim.pastes import TURNS
from contextkit.sim.pastes import document as pasted_document
from contextkit.sim.pastes import paste_gateway as gateway

LIMITS = Limits(context_window=32_768, max_payload="64KB")


def document(i: int) -> str:
    return pasted_document(i, seed=1000, word="p")


def ask(i: int) -> str:
    tool = f' [[tool:lookup {{"q": "term {i}"}}]]' if i % 5 == 0 else ""
    return f"Here is document {i}:\n{document(i)}\nKeep it.{tool}"


def recoverable(session: Session) -> list[int]:
    text = expand_markers("\n".join(m.content for m in session.history), session.archive)
    return [i for i in range(TURNS) if document(i) in text]


def test_the_rewriter_feeds_the_answer_it_finds_and_closes_a_turn_left_unanswered(gw: GatewaySimulator) -> None:
    session = Session(gw.model, api_base=gw.api_base, api_key="k", archive=Archive.in_memory(), status=None)
    rewriter = InputRewriter(session)
    history: list[dict[str, Any]] = [{"role": "user", "content": "one"}]
    assert rewriter.rewrite(history) == [{"role": "user", "content": "one"}]
    history += [{"role": "assistant", "content": "answer one"}, {"role": "user", "content": "two"}]
    rewriter.rewrite(history)  # the answer to "one" is in the history: the first turn is done
    assert [m.content for m in session.history] == ["one", "answer one", "two"]
    rewriter.rewrite(history)  # the same input again (the host retried): the open turn closes unanswered
    assert [m.content for m in session.history] == ["one", "answer one", "two"]
    rewriter.close()
    assert not session._busy


def test_an_agents_sdk_agent_with_the_filter_and_session_completes() -> None:
    agents = pytest.importorskip("agents", reason="the OpenAI Agents SDK (openai-agents) is in the integrations extra")
    from openai import AsyncOpenAI

    from contextkit.integrations.openai_agents import ContextkitSession

    @agents.function_tool
    def lookup(q: str) -> str:
        """Look a term up."""
        return f"notes on {q}"

    async def run(gw: GatewaySimulator, with_filter: bool) -> tuple[int, ContextkitSession]:
        client = AsyncOpenAI(base_url=gw.api_base, api_key="sim-key", max_retries=0)
        model = agents.OpenAIChatCompletionsModel("sim-model", client)
        agent = agents.Agent(name="reader", instructions="You read documents.", model=model, tools=[lookup])
        session = ContextkitSession(gw.model, api_base=gw.api_base, api_key="sim-key", status=None, limits=LIMITS,
                                    archive=Archive.in_memory(session_id="ag"))  # fmt: skip
        config = agents.RunConfig(call_model_input_filter=session.input_filter if with_filter else None,
                                  tracing_disabled=True)  # fmt: skip
        for i in range(TURNS):
            try:
                result = await agents.Runner.run(agent, ask(i), session=session, run_config=config)
            except Exception:  # noqa: BLE001 - the run ends where the agent fails
                return i, session
            assert result.final_output
        return TURNS, session

    with gateway() as gw:
        done, session = asyncio.run(run(gw, True))
        assert done == TURNS and recoverable(session.contextkit) == list(range(TURNS))
        assert all(r.status == 200 for r in gw.requests)  # the filter kept every request within the limits
        assert len(asyncio.run(session.get_items())) > 2 * TURNS  # the SDK's own items, all of them
    with gateway() as gw:
        done, _ = asyncio.run(run(gw, False))
        assert done < TURNS and gw.requests[-1].status in (400, 403)


def test_a_pydantic_ai_agent_with_the_history_processor_completes() -> None:
    pytest.importorskip("pydantic_ai", reason="pydantic-ai (pydantic-ai-slim) is in the integrations extra")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from contextkit.integrations.pydantic_ai import ContextkitHistory

    def run(gw: GatewaySimulator, processor: ContextkitHistory | None) -> int:
        model = OpenAIChatModel("sim-model", provider=OpenAIProvider(base_url=gw.api_base, api_key="sim-key"))
        agent = Agent(model, system_prompt="You read documents.",
                      capabilities=[processor.capability()] if processor else [])  # fmt: skip

        def lookup(q: str) -> str:
            """Look a term up."""
            return f"notes on {q}"

        agent.tool_plain(lookup)
        history: list[Any] = []
        for i in range(TURNS):
            try:
                history = agent.run_sync(ask(i), message_history=history).all_messages()
            except Exception:  # noqa: BLE001 - the run ends where the agent fails
                return i
        return TURNS

    with gateway() as gw:
        processor = ContextkitHistory(gw.model, api_base=gw.api_base, api_key="sim-key", status=None, limits=LIMITS,
                                      archive=Archive.in_memory(session_id="pa"))  # fmt: skip
        assert run(gw, processor) == TURNS
        assert recoverable(processor.session) == list(range(TURNS))
        assert all(r.status == 200 for r in gw.requests)
    with gateway() as gw:
        assert run(gw, None) < TURNS and gw.requests[-1].status in (400, 403)


def test_the_adapters_share_their_session_and_message_glue() -> None:
    pytest.importorskip("agents")
    pytest.importorskip("pydantic_ai")
    from contextkit.integrations.openai_agents import ContextkitSession, chat_to_items
    from contextkit.integrations.pydantic_ai import ContextkitHistory, from_chat

    for adapter in (ContextkitSession, ContextkitHistory):
        with pytest.raises(ConfigError, match=f"^{adapter.__name__} needs the litellm model string"):
            adapter()
    own = Session("openai/sim", status=None, archive=Archive.in_memory(session_id="glue"))
    assert adapter_session("X", None, own, {}) is own and ContextkitHistory(session=own).session is own
    options: dict[str, Any] = {"archive": Archive.in_memory(session_id="made")}
    made = adapter_session("X", "openai/sim", None, options)
    assert made.model == "openai/sim" and options["status"] is True  # the status line is on by default
    made.close()
    own.close()
    assert text_of([{"type": "text", "text": "a"}, {"type": "image_url"}, {"text": "b"}]) == "a\nb"
    assert text_of(None) == "" and text_of("as is") == "as is"
    responses_parts = [{"type": "input_text", "text": "a"}, {"type": "text", "text": "b"}, {"type": "thinking", "text": "c"}]
    assert text_of(responses_parts) == "a\nb\nc" and text_of(responses_parts, text_parts_only=True) == "b"
    assert arguments_json({"q": 1}) == '{"q": 1}' and arguments_json("") == "{}" and arguments_json('{"a":2}') == '{"a":2}'
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"q": 1}}}]}
    assert chat_to_items([call]) == [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"q": 1}'}]
    assert from_chat([call])[0].parts[0].args == '{"q": 1}'
