"""Benchmark: other people's agents behind a 64 KB WAF gateway with a 32k window, with and without contextkit.

Each client runs 20 turns, each pasting a different 6-10 KB document, against the gateway simulator
(``max_body=64KB``, ``reject_with=waf403``, ``context_window=32768``):

* ``langchain``   - a LangChain v1 ``create_agent`` agent (``ChatOpenAI``), with ``ContextkitMiddleware``;
* ``openai-sdk``  - the plain ``openai`` SDK resending its full history, through ``contextkit proxy``
                    (every third turn streamed);
* ``completion``  - a loop of ``contextkit.completion`` calls (baseline: ``litellm.completion``);
* ``anthropic``   - the ``anthropic`` SDK through the proxy on ``/v1/messages`` (baseline: the SDK
                    straight to the simulator's messages route).

The baseline of each is the same client without contextkit, measured in the same run. Per row: turns
completed, requests the gateway saw and how many it refused, the largest body sent, the documents
recoverable from the managed history and its archive (contextkit rows) and the wall time.

    python benchmarks/byoa.py
"""

from __future__ import annotations

import datetime as dt
import functools
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import contextkit

contextkit.offline()

from contextkit.archive import Archive  # noqa: E402 - after the offline environment is set
from contextkit.policy.expand import expand_markers  # noqa: E402
from contextkit.sim import GatewaySimulator  # noqa: E402

TURNS = 20


@functools.cache
def document(i: int) -> str:
    rnd = random.Random(i)
    words = [f"DOC-{i}"]
    size = rnd.randint(6_000, 10_000)
    length = len(words[0])
    while length < size:
        words.append(f"w{i}x{rnd.randint(0, 999_999)}")
        length += len(words[-1]) + 1
    return " ".join(words)


def ask(i: int) -> str:
    return f"Here is document {i}:\n{document(i)}\nKeep it in mind."


def chat_loop(send: Callable[[list[dict[str, Any]], int], str]) -> tuple[int, str]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You read documents."}]
    for i in range(TURNS):
        messages.append({"role": "user", "content": ask(i)})
        try:
            answer = send(messages, i)
        except Exception as exc:  # noqa: BLE001 - the run ends where the client fails
            return i, f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
        messages.append({"role": "assistant", "content": answer})
    return TURNS, ""


def langchain(gw: GatewaySimulator, managed: bool) -> tuple[int, str, Any]:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    from contextkit.integrations.langchain import ContextkitMiddleware

    middleware = ContextkitMiddleware(gw.model, api_base=gw.api_base, api_key="sim-key", status=None,
                                      archive=Archive.in_memory(session_id="lc")) if managed else None  # fmt: skip
    model = ChatOpenAI(model="sim-model", base_url=gw.api_base, api_key=SecretStr("sim-key"), max_retries=0, timeout=60)
    agent = create_agent(model=model, system_prompt="You read documents.", middleware=[middleware] if middleware else [])
    messages: list[Any] = []
    for i in range(TURNS):
        try:
            messages = agent.invoke({"messages": [*messages, HumanMessage(ask(i))]})["messages"]
        except Exception as exc:  # noqa: BLE001 - the run ends where the client fails
            return i, f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}", middleware.session if middleware else None
    return TURNS, "", middleware.session if middleware else None


def openai_sdk(gw: GatewaySimulator, managed: bool) -> tuple[int, str, Any]:
    import openai

    from contextkit.integrations.proxy import ProxyServer

    proxy = ProxyServer(gw.api_base, archive=Archive.in_memory(session_id="px"), status=None).start() if managed else None
    client = openai.OpenAI(base_url=proxy.base_url if proxy else gw.api_base, api_key="sim-key", max_retries=0, timeout=60)

    def send(messages: list[dict[str, Any]], i: int) -> str:
        if i % 3 == 2:
            chunks = client.chat.completions.create(model="sim-model", messages=messages, stream=True)  # type: ignore[arg-type]
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        response = client.chat.completions.create(model="sim-model", messages=messages)  # type: ignore[arg-type]
        return response.choices[0].message.content or ""

    try:
        done, error = chat_loop(send)
        return done, error, proxy.conversations.sessions[0] if proxy else None
    finally:
        if proxy:
            proxy.stop()


def completion(gw: GatewaySimulator, managed: bool) -> tuple[int, str, Any]:
    from contextkit.backend import completion as plain
    from contextkit.integrations import Conversations

    conversations = Conversations(archive=Archive.in_memory(session_id="cc"), status=None)
    call = conversations.completion if managed else plain

    def send(messages: list[dict[str, Any]], i: int) -> str:
        response = call(gw.model, messages, api_base=gw.api_base, api_key="sim-key", timeout=60)
        return response.choices[0].message.content or ""

    done, error = chat_loop(send)
    return done, error, conversations.sessions[0] if managed else None


def anthropic_sdk(gw: GatewaySimulator, managed: bool) -> tuple[int, str, Any]:
    import anthropic

    from contextkit.integrations.proxy import ProxyServer

    proxy = ProxyServer(gw.api_base, archive=Archive.in_memory(session_id="an"), status=None).start() if managed else None
    base = proxy.anthropic_base_url if proxy else gw.anthropic_api_base
    client = anthropic.Anthropic(base_url=base, api_key="sim-key", max_retries=0, timeout=60)

    def send(messages: list[dict[str, Any]], i: int) -> str:
        reply = client.messages.create(model="sim-model", max_tokens=512, system=messages[0]["content"],
                                       messages=messages[1:])  # type: ignore[arg-type]  # fmt: skip
        return "".join(b.text for b in reply.content if b.type == "text")

    try:
        done, error = chat_loop(send)
        return done, error, proxy.conversations.sessions[0] if proxy else None
    finally:
        if proxy:
            proxy.stop()


CLIENTS = {"langchain": langchain, "openai-sdk": openai_sdk, "completion": completion, "anthropic": anthropic_sdk}


def main() -> int:
    print(f"bring your own agent - {dt.date.today().isoformat()} - 64 KB WAF-403 gateway, 32k window, "
          f"{TURNS} turns of 6-10 KB documents")  # fmt: skip
    print(f"{'client':<12} {'contextkit':<10} {'turns':>5} {'requests':>8} {'refused':>7} {'largest':>8} "
          f"{'recoverable':>11} {'seconds':>7}  error")  # fmt: skip
    failed = False
    for name, run in CLIENTS.items():
        for managed in (True, False):
            with GatewaySimulator(max_body="64KB", reject_with="waf403", context_window=32_768) as gw:
                started = time.monotonic()
                done, error, session = run(gw, managed)
                seconds = time.monotonic() - started
                log = gw.requests
            recoverable = "-"
            if session is not None:
                text = expand_markers("\n".join(m.content for m in session.history), session.archive)
                recoverable = f"{sum(document(i) in text for i in range(TURNS))}/{TURNS}"
                failed |= done < TURNS or recoverable != f"{TURNS}/{TURNS}"
            refused = sum(not r.accepted for r in log)
            largest = max((r.bytes for r in log), default=0)
            print(f"{name:<12} {'yes' if managed else 'no':<10} {done:>5} {len(log):>8} {refused:>7} "
                  f"{largest / 1024:>6.1f}KB {recoverable:>11} {seconds:>7.1f}  {error}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
