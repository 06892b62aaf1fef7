"""Peers: other context-management libraries, driven as their users drive them, on the same
simulator, workloads and seeds as contextkit.

* ``langchain-summarization`` — LangChain v1 ``create_agent`` with ``SummarizationMiddleware`` in its
  documented fractional form (``trigger=("fraction", 0.8)``, ``keep=("fraction", 0.3)``), the model a
  ``ChatOpenAI`` pointed at the simulator whose profile states the window (as LangChain's docs say
  to do for models without profile data). The summarizer is the same model.
* ``langchain-context-editing`` — ``create_agent`` with ``ContextEditingMiddleware`` and one
  ``ClearToolUsesEdit`` (its default ``keep=3``; trigger at 80% of the told window instead of the
  default 100k tokens, which is beyond a 32k window).
* ``headroom`` — headroom-ai's library ``compress(messages, model_limit=window)`` before every
  request, with its ``headroom_retrieve`` tool offered and served from headroom's own CCR store.
* ``openhands-condenser`` — the OpenHands SDK condensers; a row that says why it cannot run when the
  SDK is not importable (its releases need Python >= 3.12).

Anthropic-style clearing and litellm's ``trim_messages`` need no extra package: they are the
``anthropic-clearing`` and ``trim_messages`` baselines of ``experiments.strategies``.

Every peer is told the model window and nothing else: none of them knows the gateway's byte cap.
Peer libraries are imported inside the runners only (``import contextkit`` never loads them).
A peer that raises ends its run, like a user's agent loop would end; the error is the row's
``error``. A peer whose library is missing gets ``peer_status(name)`` — the reason, with versions.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from collections.abc import Callable
from typing import Any

from contextkit.experiments.strategies import MAX_TOOL_ROUNDS, REQUEST_TIMEOUT, StrategyRun, _share_in, _text
from contextkit.experiments.workload import SYSTEM_PROMPT, GatewaySpec, RunTimeout, Workload
from contextkit.messages import reply_to_wire

__all__ = ["PEERS", "PEER_PACKAGES", "TRIGGER_FRACTION", "peer_status", "run_peer"]

PEERS = (
    "langchain-summarization",
    "langchain-context-editing",
    "headroom",
    "openhands-condenser",
)
# what each peer needs importable (distribution names, for the "why not" row)
PEER_PACKAGES: dict[str, tuple[str, ...]] = {
    "langchain-summarization": ("langchain", "langchain-openai"),
    "langchain-context-editing": ("langchain", "langchain-openai"),
    "headroom": ("headroom-ai",),
    "openhands-condenser": ("openhands-sdk",),
}
_MODULES = {"langchain": "langchain.agents", "langchain-openai": "langchain_openai", "headroom-ai": "headroom",
            "openhands-sdk": "openhands.sdk"}  # fmt: skip
TRIGGER_FRACTION = 0.8  # LangChain's documented fractional trigger (both LangChain rows)
KEEP_FRACTION = 0.3  # LangChain's documented fractional keep
KEEP_TOOL_RESULTS = 3  # ClearToolUsesEdit's default keep


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def peer_status(name: str) -> str | None:
    """None when ``name`` can run here; else why not (missing package, its import error, versions)."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; use one of {', '.join(PEERS)}")
    for dist in PEER_PACKAGES[name]:
        try:
            importlib.import_module(_MODULES[dist])
        except Exception as exc:  # noqa: BLE001 - any import failure is the reason the row gives
            python = ".".join(map(str, sys.version_info[:3]))
            hint = " (its releases on PyPI need Python >= 3.12)" if dist == "openhands-sdk" else ""
            installed = _version(dist)
            got = f"{dist} {installed} installed but" if installed else f"{dist} not installed{hint};"
            return f"{got} import failed on Python {python}: {type(exc).__name__}: {exc}"[:300]
    if name == "openhands-condenser":
        return "openhands-sdk imports, but no adapter drives it yet in this version of contextkit"
    return None


def versions(name: str) -> str:
    return ", ".join(f"{d} {_version(d)}" for d in PEER_PACKAGES[name]) or "no extra package"


def run_peer(strategy: str, workload: Workload, gw: GatewaySpec, sim: Any, run_id: str) -> StrategyRun:
    """Run ``workload`` under the peer ``strategy`` against the running simulator ``sim``."""
    why = peer_status(strategy)
    if why is not None:
        return StrategyRun(0, f"not run: {why}", [], note="unavailable")
    if strategy.startswith("langchain-"):
        return _langchain(strategy, workload, gw, sim)
    return _headroom(workload, gw, sim)


# LangChain v1 ------------------------------------------------------------------------------------


def _langchain_tools(workload: Workload) -> list[Callable[..., str]]:
    """The workload's tools as plain typed functions returning text (create_agent wraps them)."""

    def read_file(path: str, start: int | None = None, end: int | None = None) -> str:
        """Read a file of the workspace, optionally a 1-based inclusive line range."""
        args: dict[str, Any] = {"path": path}
        if start is not None:
            args["start"] = start
        if end is not None:
            args["end"] = end
        return workload.call("read_file", json.dumps(args))

    def grep(pattern: str) -> str:
        """Search the workspace for a pattern (grep -rn)."""
        return workload.call("grep", json.dumps({"pattern": pattern}))

    def tail_log(n: int) -> str:
        """The last n lines of the service log."""
        return workload.call("tail_log", json.dumps({"n": n}))

    def get_json(n: int) -> str:
        """Fetch n records from the inventory API as JSON."""
        return workload.call("get_json", json.dumps({"n": n}))

    return [read_file, grep, tail_log, get_json]


def langchain_middleware(strategy: str, model: Any, window: int) -> tuple[Any, str]:
    """The LangChain v1 middleware a peer runs (``langchain-summarization`` or
    ``langchain-context-editing``) for a window of ``window`` tokens, and how it was set up, in words."""
    from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware, SummarizationMiddleware

    if strategy == "langchain-summarization":
        middleware = SummarizationMiddleware(
            model=model, trigger=("fraction", TRIGGER_FRACTION), keep=("fraction", KEEP_FRACTION)
        )
        return middleware, f"SummarizationMiddleware(trigger=('fraction', {TRIGGER_FRACTION}), keep=('fraction', {KEEP_FRACTION}))"
    trigger = int(window * TRIGGER_FRACTION)
    edit = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=trigger, keep=KEEP_TOOL_RESULTS)])
    return edit, f"ContextEditingMiddleware(ClearToolUsesEdit(trigger={trigger}, keep={KEEP_TOOL_RESULTS}))"


def _langchain(strategy: str, workload: Workload, gw: GatewaySpec, sim: Any) -> StrategyRun:
    # langchain-openai counts tokens with tiktoken, which downloads its encodings unless
    # TIKTOKEN_CACHE_DIR names a copy: contextkit.offline() points it at litellm's bundled one.
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    window = gw.context_window
    model = ChatOpenAI(
        model=sim.litellm_kwargs()["model"].split("/", 1)[1], base_url=sim.api_base, api_key=SecretStr("sim-key"),
        timeout=REQUEST_TIMEOUT, profile={"max_input_tokens": window},
    )  # fmt: skip
    middleware, note = langchain_middleware(strategy, model, window)
    agent = create_agent(
        model=model, tools=_langchain_tools(workload), system_prompt=SYSTEM_PROMPT, middleware=[middleware]
    )
    note = f"{versions(strategy)}; {note}; window told: {window}"
    messages: list[Any] = []
    replies: dict[int, str] = {}
    for turn in range(workload.turns):
        try:
            text = workload.user_message(turn)
        except RunTimeout as exc:
            return StrategyRun(turn, str(exc), [], replies=replies, note=note,
                               recoverable=_share_in(workload.outputs, _lc_text(messages)))  # fmt: skip
        try:
            state = agent.invoke(
                {"messages": [*messages, HumanMessage(text)]},
                {"recursion_limit": 2 * MAX_TOOL_ROUNDS + 1},
            )
        except Exception as exc:  # noqa: BLE001 - whatever the library raises ends the user's agent run
            return StrategyRun(turn, f"{type(exc).__name__}: {str(exc)[:300]}", [], replies=replies, note=note,
                               recoverable=_share_in(workload.outputs, _lc_text(messages)))  # fmt: skip
        messages = list(state["messages"])
        replies[turn] = str(messages[-1].content or "")
    return StrategyRun(workload.turns, None, [], replies=replies, note=note,
                       recoverable=_share_in(workload.outputs, _lc_text(messages)))  # fmt: skip


def _lc_text(messages: list[Any]) -> str:
    return "\n".join(str(getattr(m, "content", "") or "") for m in messages)


# a plain agent loop over litellm, with a request shaper (headroom, Anthropic-style clearing) ------------


Shaper = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
Retriever = Callable[[str, str], str | None]  # (tool name, JSON arguments) -> result, None: not a retrieval


def _loop(
    workload: Workload, sim: Any, shape: Shaper, *, tools: list[dict[str, Any]], retrieve: Retriever, note: str
) -> StrategyRun:
    """The agent loop a litellm user writes: shape the history, send it, run the tools; stop at the first
    failed request (no retries, like the baselines)."""
    from contextkit import backend

    kwargs = sim.litellm_kwargs()
    model = kwargs.pop("model")
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    replies: dict[int, str] = {}
    sent = history
    for turn in range(workload.turns):
        try:
            history.append({"role": "user", "content": workload.user_message(turn)})
        except RunTimeout as exc:
            return StrategyRun(turn, str(exc), [], replies=replies, note=note,
                               recoverable=_share_in(workload.outputs, _text(sent)))  # fmt: skip
        for _ in range(MAX_TOOL_ROUNDS):
            try:
                sent = shape(history)
                response = backend.completion(model, sent, timeout=REQUEST_TIMEOUT, tools=tools, **kwargs)
            except Exception as exc:  # noqa: BLE001 - a failed request or a crashed shaper ends the run
                return StrategyRun(turn, f"{type(exc).__name__}: {str(exc)[:300]}", [], replies=replies, note=note,
                                   recoverable=_share_in(workload.outputs, _text(sent)))  # fmt: skip
            message = response.choices[0].message
            calls = list(getattr(message, "tool_calls", None) or [])
            history.append(reply_to_wire(message))
            if not calls:
                replies[turn] = message.content or ""
                break
            for c in calls:
                args = c.function.arguments or "{}"
                result = retrieve(c.function.name, args)
                if result is None:
                    result = workload.call(c.function.name, args)
                history.append({"role": "tool", "tool_call_id": c.id, "content": result})
        else:
            return StrategyRun(turn, f"turn {turn + 1} needed more than {MAX_TOOL_ROUNDS} tool rounds", [],
                               replies=replies, note=note)  # fmt: skip
    return StrategyRun(workload.turns, None, [], replies=replies, note=note,
                       recoverable=_share_in(workload.outputs, _text(sent)))  # fmt: skip


def _headroom(workload: Workload, gw: GatewaySpec, sim: Any) -> StrategyRun:
    # headroom's only switch against its model and telemetry downloads is HEADROOM_OFFLINE, read
    # from the environment: contextkit.offline() sets it (with TIKTOKEN_CACHE_DIR for its
    # tokenizer), a host that runs this peer without it decides for itself.
    from headroom import compress
    from headroom.cache.compression_store import get_compression_store
    from headroom.ccr.tool_injection import CCR_TOOL_NAME, create_ccr_tool_definition

    store = get_compression_store()

    def shape(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return list(compress(history, model="gpt-4o", model_limit=gw.context_window).messages)

    def retrieve(name: str, arguments: str) -> str | None:
        if name != CCR_TOOL_NAME:
            return None
        try:
            key = str(json.loads(arguments).get("hash", ""))
        except (ValueError, AttributeError):
            key = ""
        entry = store.retrieve(key)
        return entry.original_content if entry is not None else f"no content stored for hash={key}"

    tools = [*workload.tool_schemas, create_ccr_tool_definition("openai")]
    note = f"{versions('headroom')}; compress(model_limit={gw.context_window}) per request, headroom_retrieve offered"
    return _loop(workload, sim, shape, tools=tools, retrieve=retrieve, note=note)
