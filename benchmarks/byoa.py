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
import sys
import time
from typing import Any

import contextkit

contextkit.offline()

from contextkit.archive import Archive  # noqa: E402 - after the offline environment is set
from contextkit.policy.expand import expand_markers  # noqa: E402
from contextkit.sim import GatewaySimulator, pastes  # noqa: E402 - pastes: the workload its acceptance test runs too


def langchain(gw: GatewaySimulator, managed: bool) -> tuple[pastes.ClientRun, Any]:
    from contextkit.integrations.langchain import ContextkitMiddleware

    middleware = ContextkitMiddleware(gw.model, api_base=gw.api_base, api_key="sim-key", status=None,
                                      archive=Archive.in_memory(session_id="lc")) if managed else None  # fmt: skip
    return pastes.langchain_run(gw, middleware), middleware.session if middleware else None


def openai_sdk(gw: GatewaySimulator, managed: bool) -> tuple[pastes.ClientRun, Any]:
    from contextkit.integrations.proxy import ProxyServer

    proxy = ProxyServer(gw.api_base, archive=Archive.in_memory(session_id="px"), status=None).start() if managed else None
    try:
        run = pastes.openai_run(proxy.base_url if proxy else gw.api_base, stream_every=3)
        return run, proxy.conversations.sessions[0] if proxy else None
    finally:
        if proxy:
            proxy.stop()


def completion(gw: GatewaySimulator, managed: bool) -> tuple[pastes.ClientRun, Any]:
    from contextkit.backend import completion as plain
    from contextkit.integrations import Conversations

    conversations = Conversations(archive=Archive.in_memory(session_id="cc"), status=None)
    run = pastes.completion_run(conversations.completion if managed else plain, gw)
    return run, conversations.sessions[0] if managed else None


def anthropic_sdk(gw: GatewaySimulator, managed: bool) -> tuple[pastes.ClientRun, Any]:
    from contextkit.integrations.proxy import ProxyServer

    proxy = ProxyServer(gw.api_base, archive=Archive.in_memory(session_id="an"), status=None).start() if managed else None
    try:
        run = pastes.anthropic_run(proxy.anthropic_base_url if proxy else gw.anthropic_api_base)
        return run, proxy.conversations.sessions[0] if proxy else None
    finally:
        if proxy:
            proxy.stop()


CLIENTS = {"langchain": langchain, "openai-sdk": openai_sdk, "completion": completion, "anthropic": anthropic_sdk}


def main() -> int:
    print(f"bring your own agent - {dt.date.today().isoformat()} - 64 KB WAF-403 gateway, 32k window, "
          f"{pastes.TURNS} turns of 6-10 KB documents")  # fmt: skip
    print(f"{'client':<12} {'contextkit':<10} {'turns':>5} {'requests':>8} {'refused':>7} {'largest':>8} "
          f"{'recoverable':>11} {'seconds':>7}  error")  # fmt: skip
    failed = False
    for name, run in CLIENTS.items():
        for managed in (True, False):
            with pastes.paste_gateway() as gw:
                started = time.monotonic()
                client_run, session = run(gw, managed)
                seconds = time.monotonic() - started
                log = gw.requests
            done = client_run.completed
            error = ""
            if client_run.error:  # "Type: message": the first line of the message, 80 characters at most
                kind, _, message = client_run.error.partition(": ")
                error = f"{kind}: {(message.splitlines() or [''])[0][:80]}"
            recoverable = "-"
            if session is not None:
                text = expand_markers("\n".join(m.content for m in session.history), session.archive)
                recoverable = f"{len(pastes.documents_in(text))}/{pastes.TURNS}"
                failed |= done < pastes.TURNS or recoverable != f"{pastes.TURNS}/{pastes.TURNS}"
            refused = sum(not r.accepted for r in log)
            largest = max((r.bytes for r in log), default=0)
            print(f"{name:<12} {'yes' if managed else 'no':<10} {done:>5} {len(log):>8} {refused:>7} "
                  f"{largest / 1024:>6.1f}KB {recoverable:>11} {seconds:>7.1f}  {error}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
