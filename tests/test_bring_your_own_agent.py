"""Acceptance: other people's agents behind a 64 KB WAF gateway with a 32k window, with and without contextkit.

Twenty turns, each pasting a different 6-10 KB document (about 160 KB in all, well past both the
gateway's cap and the window): a LangChain ``create_agent`` agent with ``ContextkitMiddleware``, the
plain ``openai`` SDK through ``contextkit proxy`` (resending its full history each turn, some turns
streamed), a loop of ``contextkit.completion`` calls and the ``anthropic`` SDK through the proxy on
``/v1/messages`` all complete every turn with every document recoverable from the managed history
and its archive. The same clients without contextkit fail at the gateway.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from contextkit.archive import Archive
from contextkit.policy.expand import expand_markers
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator

TURNS = 20
WINDOW = 32_768


@functools.cache
def document(i: int) -> str:
    """A different 6-10 KB document per turn (words no other document has)."""
    rnd = random.Random(i)
    size = rnd.randint(6_000, 10_000)
    words = [f"DOC-{i}"]
    length = len(words[0])
    while length < size:
        words.append(f"w{i}x{rnd.randint(0, 999_999)}")
        length += len(words[-1]) + 1
    return " ".join(words)


def ask(i: int) -> str:
    return f"Here is document {i}:\n{document(i)}\nKeep it in mind."


@dataclass
class Run:
    completed: int = 0
    error: str | None = None
    answers: list[str] = field(default_factory=list)


def gateway() -> GatewaySimulator:
    return GatewaySimulator(max_body="64KB", reject_with="waf403", context_window=WINDOW)


def recoverable(session: Session) -> list[int]:
    """The documents the managed history holds, verbatim or behind a marker its archive resolves."""
    text = expand_markers("\n".join(m.content for m in session.history), session.archive)
    return [i for i in range(TURNS) if document(i) in text]


def assert_complete(run: Run, session: Session, gw: GatewaySimulator) -> None:
    assert run.error is None and run.completed == TURNS, run.error
    assert all(run.answers)
    assert recoverable(session) == list(range(TURNS))
    statuses = [r.status for r in gw.requests]
    assert statuses[-1] == 200 and set(statuses) <= {200, 403, 400}, statuses


def assert_fails_at_the_gateway(run: Run, gw: GatewaySimulator) -> None:
    assert run.completed < TURNS and run.error is not None
    assert gw.requests[-1].status in (403, 400), gw.requests[-1]
    assert "403" in run.error or "context" in run.error.lower() or "denied" in run.error.lower(), run.error


# the three clients ------------------------------------------------------------------------------------


def langchain_run(gw: GatewaySimulator, middleware: Any) -> Run:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    model = ChatOpenAI(model="sim-model", base_url=gw.api_base, api_key=SecretStr("sim-key"), max_retries=0, timeout=30)
    agent = create_agent(model=model, tools=[], system_prompt="You read documents.",
                         middleware=[middleware] if middleware else [])  # fmt: skip
    run, messages = Run(), []
    for i in range(TURNS):
        try:
            messages = agent.invoke({"messages": [*messages, HumanMessage(ask(i))]})["messages"]
        except Exception as exc:  # noqa: BLE001 - the run ends where the client fails
            run.error = f"{type(exc).__name__}: {exc}"
            return run
        run.completed += 1
        run.answers.append(str(messages[-1].content))
    return run


def openai_run(base_url: str, *, stream_every: int = 0) -> Run:
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="sim-key", max_retries=0, timeout=60)
    run = Run()
    messages: list[Any] = [{"role": "system", "content": "You read documents."}]
    for i in range(TURNS):
        messages.append({"role": "user", "content": ask(i)})
        try:
            if stream_every and i % stream_every == stream_every - 1:
                chunks = client.chat.completions.create(model="sim-model", messages=messages, stream=True)
                answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                response = client.chat.completions.create(model="sim-model", messages=messages)
                answer = response.choices[0].message.content or ""
        except Exception as exc:  # noqa: BLE001 - the run ends where the client fails
            run.error = f"{type(exc).__name__}: {exc}"
            return run
        messages.append({"role": "assistant", "content": answer})
        run.completed += 1
        run.answers.append(answer)
    return run


def completion_run(call: Any, gw: GatewaySimulator) -> Run:
    run = Run()
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You read documents."}]
    for i in range(TURNS):
        messages.append({"role": "user", "content": ask(i)})
        try:
            response = call(gw.model, messages, api_base=gw.api_base, api_key="sim-key", timeout=60)
        except Exception as exc:  # noqa: BLE001 - the run ends where the client fails
            run.error = f"{type(exc).__name__}: {exc}"
            return run
        answer = response.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": answer})
        run.completed += 1
        run.answers.append(answer)
    return run


def anthropic_run(base_url: str) -> Run:
    import anthropic

    client = anthropic.Anthropic(base_url=base_url, api_key="sim-key", max_retries=0, timeout=60)
    run = Run()
    messages: list[Any] = []
    for i in range(TURNS):
        messages.append({"role": "user", "content": ask(i)})
        try:
            reply = client.messages.create(model="sim-model", max_tokens=512, system="You read documents.",
                                           messages=messages)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the run ends where the client fails
            run.error = f"{type(exc).__name__}: {exc}"
            return run
        answer = "".join(b.text for b in reply.content if b.type == "text")
        messages.append({"role": "assistant", "content": answer})
        run.completed += 1
        run.answers.append(answer)
    return run


# with contextkit --------------------------------------------------------------------------------------


def test_a_langchain_agent_with_the_middleware_completes() -> None:
    pytest.importorskip("langchain.agents", reason="LangChain v1 is in the integrations extra")
    from contextkit.integrations.langchain import ContextkitMiddleware

    with gateway() as gw:
        middleware = ContextkitMiddleware(gw.model, api_base=gw.api_base, api_key="sim-key", status=None,
                                          archive=Archive.in_memory(session_id="lc"))  # fmt: skip
        run = langchain_run(gw, middleware)
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
        assert_fails_at_the_gateway(langchain_run(gw, None), gw)
    with gateway() as gw:
        assert_fails_at_the_gateway(openai_run(gw.api_base), gw)
    with gateway() as gw:

        def plain(model: str, messages: list[Any], **kwargs: Any) -> Any:
            return completion(model, messages, **kwargs)  # litellm.completion, retries off

        assert_fails_at_the_gateway(completion_run(plain, gw), gw)
