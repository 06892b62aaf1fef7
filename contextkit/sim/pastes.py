"""Pasted documents: a user pastes a different 6-10 KB document every turn, through someone else's client.

The workload of ``benchmarks/byoa.py`` and of its acceptance test (``tests/test_bring_your_own_agent.py``):
twenty turns (about 160 KB in all) against ``paste_gateway()`` - a 64 KB WAF-403 gateway with a 32k
window, well below what the documents add up to. The client runs (``langchain_run``, ``openai_run``,
``completion_run``, ``anthropic_run``) drive each client as its users do, resending the whole history;
their SDKs are imported when a run starts (the integrations extra).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contextkit.sim.server import GatewaySimulator

__all__ = [
    "SYSTEM",
    "TURNS",
    "ClientRun",
    "anthropic_run",
    "ask",
    "chat_run",
    "completion_run",
    "document",
    "documents_in",
    "langchain_run",
    "openai_run",
    "paste_gateway",
]

TURNS = 20
WINDOW = 32_768
SYSTEM = "You read documents."


@functools.cache
def document(i: int, *, seed: int = 0, word: str = "w") -> str:
    """A different 6-10 KB document per ``i`` (words no other document has: ``{word}{i}x...``)."""
    rnd = random.Random(seed + i)
    size = rnd.randint(6_000, 10_000)
    words = [f"DOC-{i}"]
    length = len(words[0])
    while length < size:
        words.append(f"{word}{i}x{rnd.randint(0, 999_999)}")
        length += len(words[-1]) + 1
    return " ".join(words)


def ask(i: int) -> str:
    return f"Here is document {i}:\n{document(i)}\nKeep it in mind."


def documents_in(text: str, turns: int = TURNS) -> list[int]:
    """The documents ``text`` holds whole (a managed history with its markers expanded)."""
    return [i for i in range(turns) if document(i) in text]


def paste_gateway() -> GatewaySimulator:
    """The gateway the documents overflow: a 64 KB body cap answered with a WAF 403, a 32k window."""
    return GatewaySimulator(max_body="64KB", reject_with="waf403", context_window=WINDOW)


@dataclass
class ClientRun:
    """How far a client got: turns completed, the error that ended the run (None: all of them), the answers."""

    completed: int = 0
    error: str | None = None
    answers: list[str] = field(default_factory=list)


def chat_run(send: Callable[[list[dict[str, Any]], int], str], *, system: bool = True) -> ClientRun:
    """``TURNS`` turns of a client that resends its whole chat history: ``send(messages, i)`` → the answer."""
    run = ClientRun()
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}] if system else []
    for i in range(TURNS):
        messages.append({"role": "user", "content": ask(i)})
        try:
            answer = send(messages, i)
        except Exception as exc:  # noqa: BLE001 - the run ends where the client fails
            run.error = f"{type(exc).__name__}: {exc}"
            return run
        messages.append({"role": "assistant", "content": answer})
        run.completed += 1
        run.answers.append(answer)
    return run


def langchain_run(gw: GatewaySimulator, middleware: Any, *, timeout: float = 60) -> ClientRun:
    """A LangChain v1 ``create_agent`` agent (``ChatOpenAI``) on the simulator, with ``middleware`` or none."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    model = ChatOpenAI(model="sim-model", base_url=gw.api_base, api_key=SecretStr("sim-key"), max_retries=0, timeout=timeout)
    agent: Any = create_agent(model=model, tools=[], system_prompt=SYSTEM, middleware=[middleware] if middleware else [])
    run, messages = ClientRun(), list[Any]()
    for i in range(TURNS):
        try:
            messages = agent.invoke({"messages": [*messages, HumanMessage(ask(i))]})["messages"]
        except Exception as exc:  # noqa: BLE001 - the run ends where the client fails
            run.error = f"{type(exc).__name__}: {exc}"
            return run
        run.completed += 1
        run.answers.append(str(messages[-1].content))
    return run


def openai_run(base_url: str, *, stream_every: int = 0) -> ClientRun:
    """The plain ``openai`` SDK; every ``stream_every``-th turn streamed (0: none)."""
    import openai

    client: Any = openai.OpenAI(base_url=base_url, api_key="sim-key", max_retries=0, timeout=60)

    def send(messages: list[dict[str, Any]], i: int) -> str:
        if stream_every and i % stream_every == stream_every - 1:
            chunks = client.chat.completions.create(model="sim-model", messages=messages, stream=True)
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        response = client.chat.completions.create(model="sim-model", messages=messages)
        return response.choices[0].message.content or ""

    return chat_run(send)


def completion_run(call: Callable[..., Any], gw: GatewaySimulator) -> ClientRun:
    """A loop of litellm-style ``call(model, messages, ...)`` calls (``contextkit.completion`` or litellm's)."""

    def send(messages: list[dict[str, Any]], i: int) -> str:
        response = call(gw.model, messages, api_base=gw.api_base, api_key="sim-key", timeout=60)
        return response.choices[0].message.content or ""

    return chat_run(send)


def anthropic_run(base_url: str) -> ClientRun:
    """The ``anthropic`` SDK on the messages API (the system prompt apart, as that API wants it)."""
    import anthropic

    client: Any = anthropic.Anthropic(base_url=base_url, api_key="sim-key", max_retries=0, timeout=60)

    def send(messages: list[dict[str, Any]], i: int) -> str:
        reply = client.messages.create(model="sim-model", max_tokens=512, system=SYSTEM, messages=messages)
        return "".join(b.text for b in reply.content if b.type == "text")

    return chat_run(send, system=False)
