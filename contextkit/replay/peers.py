"""Peers on a replay: other context managers, driven as their users drive them, on the same recording.

* ``anthropic-clearing`` - Anthropic-style clearing of old tool results (the arena's
  ``experiments.strategies.clearing_shaper``, the same trigger, keep and minimum), applied to the
  full history before every request; no recall tool, as with Anthropic's server-side clearing.
* ``litellm-compress`` - litellm's own ``compress`` (litellm >= 1.110): above its trigger, BM25
  relevance picks the messages kept, the rest become stubs, and its ``litellm_content_retrieve`` tool
  is offered with the stubs' keys; the trigger is ``TRIGGER_FRACTION`` of the window (its default is
  200k tokens, beyond these windows), the target its default (70% of the trigger).
* ``headroom`` - headroom-ai's ``compress(messages, model_limit=window)`` before every request, with
  its ``headroom_retrieve`` tool offered (the arena's peer).
* ``langchain-summarization`` / ``langchain-context-editing`` - LangChain v1 ``create_agent`` with
  ``SummarizationMiddleware`` / ``ContextEditingMiddleware(ClearToolUsesEdit)`` in the arena's
  settings, the model a ``ChatOpenAI`` pointed at the simulator (the replay provider), with the window
  in its profile; the summarizer is the same model (the simulator answers a summary request with an
  extractive summary, the recorded model never saw one).

Every peer is told the window; only the clearing baseline is also told the gateway's cap (as in the
arena). The recorded agent never calls a retrieval tool, so "one recall away" is measured as for
contextkit: a marker in the request whose stored original holds the name. A peer whose library is
missing (or too old) is not run: ``peer_status`` says why, and its row says so.
"""

from __future__ import annotations

import re
import time
from typing import Any

from contextkit.replay.loop import REQUEST_TIMEOUT, Plain, Tool
from contextkit.sim.replay import ReplayScript, Trajectory

__all__ = ["REPLAY_PEERS", "peer_status", "plain_peer", "run_langchain"]

REPLAY_PEERS = (
    "langchain-summarization",
    "langchain-context-editing",
    "anthropic-clearing",
    "litellm-compress",
    "headroom",
)
TOKEN_MODEL = "gpt-4o"  # what litellm's compress counts tokens as (headroom is told the same model)
_LITELLM_KEY = re.compile(r"\[Compressed: (\S+) ")
_HEADROOM_KEY = re.compile(r"hash=([a-f0-9]{24})")


def peer_status(name: str) -> str | None:
    """None when ``name`` can run here; else why not (the missing package or API, with versions)."""
    from contextkit.experiments import peers

    if name not in REPLAY_PEERS:
        raise ValueError(f"unknown replay peer {name!r}; use one of {', '.join(REPLAY_PEERS)}")
    if name in peers.PEERS:
        return peers.peer_status(name)
    if name == "litellm-compress":
        from contextkit import backend

        if not callable(getattr(backend.litellm(), "compress", None)):
            return f"litellm {peers._version('litellm')} has no compress() (added in litellm 1.110)"
    return None


def note(name: str) -> str:
    from contextkit.experiments import peers

    if name in peers.PEERS:
        return peers.versions(name)
    return f"litellm {peers._version('litellm')}" if name == "litellm-compress" else "no extra package"


def plain_peer(name: str, traj: Trajectory, window: int, max_body: int | str | None) -> Plain:
    """The plain-loop peers: ``anthropic-clearing``, ``litellm-compress``, ``headroom``."""
    if name == "anthropic-clearing":
        return _clearing(traj, window, max_body)
    if name == "litellm-compress":
        return _litellm_compress(window)
    if name == "headroom":
        return _headroom(window)
    raise ValueError(f"{name!r} is not a plain-loop replay peer")


def _clearing(traj: Trajectory, window: int, max_body: int | str | None) -> Plain:
    from contextkit.experiments.strategies import CLEARING_AT_LEAST, CLEARING_KEEP, CLEARING_TRIGGER, clearing_shaper
    from contextkit.experiments.workload import GatewaySpec

    shape = clearing_shaper(GatewaySpec("replay", window, max_body), list(traj.tool_schemas))
    return Plain(
        "anthropic-clearing", lambda history: (shape(history), []),
        note=f"trigger {CLEARING_TRIGGER:.0%} of the window, keep {CLEARING_KEEP}, clear at least {CLEARING_AT_LEAST:.0%}",
    )  # fmt: skip


def _litellm_compress(window: int) -> Plain:
    from contextkit import backend
    from contextkit.experiments.peers import TRIGGER_FRACTION

    compress = backend.litellm().compress
    trigger = int(window * TRIGGER_FRACTION)
    store: dict[str, str] = {}

    def shape(history: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        # compress stubs a message by counting the lines of its content, which is None in an
        # assistant message that only calls tools (the OpenAI wire form): it gets "" instead
        given = [{**m, "content": ""} if m.get("content") is None else m for m in history]
        result = compress(given, model=TOKEN_MODEL, compression_trigger=trigger)
        store.update(result["cache"])  # the originals its retrieval tool would answer with
        return list(result["messages"]), list(result["tools"])

    return Plain(
        "litellm-compress", shape, keys=_LITELLM_KEY.findall, original=store.get,
        note=f"{note('litellm-compress')}; compress(compression_trigger={trigger}) per request, litellm_content_retrieve offered; "
        "content None of tool-call messages sent as ''",
    )  # fmt: skip


def _headroom(window: int) -> Plain:
    # headroom reads HEADROOM_OFFLINE from the environment: contextkit.offline() sets it (see
    # experiments.peers); a host that runs this peer without it decides for itself.
    from headroom import compress
    from headroom.cache.compression_store import get_compression_store
    from headroom.ccr.tool_injection import create_ccr_tool_definition

    store = get_compression_store()
    tool = create_ccr_tool_definition("openai")

    def shape(history: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return list(compress(history, model="gpt-4o", model_limit=window).messages), [tool]

    def original(key: str) -> str | None:
        entry = store.retrieve(key)
        return entry.original_content if entry is not None else None

    return Plain(
        "headroom", shape, keys=_HEADROOM_KEY.findall, original=original,
        note=f"{note('headroom')}; compress(model_limit={window}) per request, headroom_retrieve offered",
    )  # fmt: skip


def run_langchain(
    name: str, traj: Trajectory, script: ReplayScript, tool: Tool, sim: Any, window: int
) -> tuple[str | None, float, str]:
    """Replay under a LangChain v1 agent; (error, seconds in model calls, how it was configured)."""
    from langchain.agents import create_agent
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    from contextkit.experiments.peers import langchain_middleware

    class Timer(BaseCallbackHandler):
        """Time inside model calls (the summarizer's too): the provider's share, excluded from own time."""

        def __init__(self) -> None:
            self.started: dict[Any, float] = {}
            self.waited = 0.0

        def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: Any, **kw: Any) -> None:
            self.started[run_id] = time.perf_counter()

        def on_llm_end(self, response: Any, *, run_id: Any, **kw: Any) -> None:
            self.waited += time.perf_counter() - self.started.pop(run_id, time.perf_counter())

        def on_llm_error(self, error: BaseException, *, run_id: Any, **kw: Any) -> None:
            self.on_llm_end(None, run_id=run_id)

    timer = Timer()
    model = ChatOpenAI(
        model=sim.litellm_kwargs()["model"].split("/", 1)[1], base_url=sim.api_base, api_key=SecretStr("sim-key"),
        timeout=REQUEST_TIMEOUT, profile={"max_input_tokens": window}, callbacks=[timer],
    )  # fmt: skip
    middleware, how = langchain_middleware(name, model, window)

    def bash(command: str) -> str:
        """Execute a bash command"""
        return tool.output(command)

    agent = create_agent(model=model, tools=[bash], system_prompt=traj.system, middleware=[middleware])
    how = f"{note(name)}; {how}; window told: {window}"
    messages: list[Any] = []
    text: str | None = traj.task
    while text is not None:
        try:
            state = agent.invoke({"messages": [*messages, HumanMessage(text)]}, {"recursion_limit": 100_000})
        except Exception as exc:  # noqa: BLE001 - whatever the library raises ends the user's agent run
            return f"{type(exc).__name__}: {str(exc)[:200]}", timer.waited, how
        messages = list(state["messages"])
        last = script.served[-1] if script.served else None
        text = script.next_user(last.position) if last is not None and last.kind == "unrecorded" else None
    return None, timer.waited, how
