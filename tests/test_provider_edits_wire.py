"""``context_engine="provider"`` on the wire: what litellm's Anthropic route really sends (headers and
body, read from the simulator's request log), the simulator's refusal of the field without its beta,
and streamed turns (``stream`` / ``astream``) whose applied edits come on the final ``message_delta``
event and are mirrored exactly as a non-streamed turn's are."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.events import ProviderEditEvent
from contextkit.markers import extract_keys_tolerant
from contextkit.policy.clearing import CLEARED_PREFIX
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator
from contextkit.sizing import CALIBRATION_MIN_TOKENS
from contextkit.tools import ToolResult

BETA = "context-management-2025-06-27"
EDIT = {
    "type": "clear_tool_uses_20250919",
    "trigger": {"type": "input_tokens", "value": 100_000},
    "keep": {"type": "tool_uses", "value": 5},
    "clear_at_least": {"type": "input_tokens", "value": 20_000},
}
TURNS = 10


def part(n: int) -> str:
    # about 20k tokens each: the prompt passes the 100k trigger after five results
    return "".join(f"part {n} line {i}: request id-{n}-{i} served in {i % 97} ms by worker-{i % 5}\n" for i in range(900))


def read_log(n: int) -> ToolResult:
    """Read part n of the service log."""
    return ToolResult(part(n), path=f"logs/part{n}.log")


def _session(gw: GatewaySimulator, name: str) -> Session:
    kw = gw.litellm_kwargs("anthropic")
    model = kw.pop("model")
    return Session(
        model, **kw, tools=[read_log], context_engine="provider", archive=Archive.in_memory(session_id=name),
        # a large window: the local pressure rules stay quiet, so the provider's edit does the clearing
        limits=Limits(context_window=1_000_000, tool_result_max_chars=200_000), status=None,
    )  # fmt: skip


def _prompt(i: int) -> str:
    return f'[[tool:read_log {{"n": {i}}}]] step {i}'


def _mirrored(session: Session) -> tuple[list[str], tuple[int, int, int, int]]:
    """The tool results of the history (stub or whole) and the provider-edit counts."""
    st = session.stats
    results = [m.content for m in session.history if m.role == "tool"]
    return results, (st.provider_edits, st.provider_cleared_results, st.provider_cleared_tokens, st.expected_cache_rebuilds)


def test_every_tool_loop_request_carries_the_beta_header_and_the_edit_as_litellm_sends_them() -> None:
    with GatewaySimulator(record_bodies=True) as gw:
        session = _session(gw, "wire")
        for i in range(TURNS):
            session.send(_prompt(i))
        turns = [r for r in gw.requests if r.kind == "turn"]
        sent = [(gw.headers(r.seq), json.loads(gw.body(r.seq))) for r in turns]
        meter = session._meter
    # every model call of the tool loop: the call that asks for the tool and the one that reads its result
    assert len(turns) == 2 * TURNS and all(r.accepted for r in turns)
    for headers, body in sent:
        assert BETA in [b.strip() for b in headers["anthropic-beta"].split(",")]
        assert body["context_management"] == {"edits": [EDIT]}
        assert headers["x-api-key"] == "<redacted>"  # the request log keeps no credential
    assert any(m.get("role") == "user" and isinstance(m.get("content"), list) and m["content"][0]["type"] == "tool_result"
               for m in sent[-1][1]["messages"])  # fmt: skip
    assert session.stats.provider_edits >= 1  # and the simulator, reading the same fields, applied it
    # a request the provider edited is skipped for token calibration: it counted fewer tokens than were sent
    learnable = sum(r.tokens >= CALIBRATION_MIN_TOKENS for r in turns)
    assert meter.samples + meter.skipped == learnable - session.stats.provider_edits


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_simulator_refuses_context_management_without_its_beta_and_streams_the_applied_edits() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(8):
        messages.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "r", "input": {}}]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": part(i)}]})
    messages.append({"role": "user", "content": "summarise"})
    body = {"model": "claude-sim", "max_tokens": 100, "messages": messages, "context_management": {"edits": [EDIT]}}
    with GatewaySimulator() as gw:
        url = gw.anthropic_api_base.rstrip("/") + "/v1/messages"
        status, text = _post(url, body, {})
        assert status == 400 and "context_management" in text and BETA in text
        status, text = _post(url, {**body, "stream": True}, {"anthropic-beta": f"other-beta, {BETA}"})
    assert status == 200
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    (delta,) = [e for e in events if e["type"] == "message_delta"]
    (applied,) = delta["context_management"]["applied_edits"]
    assert applied["type"] == "clear_tool_uses_20250919" and applied["cleared_tool_uses"] == 3
    assert applied["cleared_input_tokens"] >= 20_000
    assert all("context_management" not in e for e in events if e["type"] != "message_delta")


async def _astream(session: Session, i: int) -> str:
    return "".join([delta async for delta in session.astream(_prompt(i))])


def test_streamed_turns_mirror_the_providers_edits_as_sent_turns_do() -> None:
    runs: dict[str, tuple[list[str], tuple[int, int, int, int]]] = {}
    for how in ("send", "stream", "astream"):
        with GatewaySimulator() as gw:
            session = _session(gw, how)
            for i in range(TURNS):
                if how == "send":
                    session.send(_prompt(i))
                elif how == "stream":
                    assert "".join(session.stream(_prompt(i)))
                else:
                    assert asyncio.run(_astream(session, i))
            runs[how] = _mirrored(session)
            stubs = [m for m in session.history if m.role == "tool" and m.content.startswith(CLEARED_PREFIX)]
            for m in stubs:  # every cleared result is recallable
                n = int(m.origin.path.removeprefix("logs/part").removesuffix(".log"))  # type: ignore[union-attr]
                (key,) = extract_keys_tolerant(m.content)
                assert session.archive.get(key) == part(n)
            edits = [e for e in session.events if isinstance(e, ProviderEditEvent)]
            assert len(edits) == session.stats.provider_edits
    results, counts = runs["send"]
    edits, cleared, tokens, rebuilds = counts
    assert edits >= 1 and cleared >= 3 and tokens >= 20_000 * edits
    # each edit's rebuild is counted at the next cache write: an edit on the run's last request has none yet
    assert edits - 1 <= rebuilds <= edits and rebuilds >= 1
    assert sum(r.startswith(CLEARED_PREFIX) for r in results) >= 3
    assert runs["stream"] == runs["send"] and runs["astream"] == runs["send"]
