"""``contextkit proxy``: the plain OpenAI and Anthropic SDKs through it to the simulator, its bind and
token rules, its event feed."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from contextkit import ConfigError
from contextkit.archive import Archive
from contextkit.cli.main import main
from contextkit.events import RequestEvent
from contextkit.integrations.proxy import ProxyServer, is_loopback
from contextkit.sim import GatewaySimulator

TOKEN = "t0ken-for-the-tests-0123456789"


@pytest.fixture
def proxy(gw: GatewaySimulator) -> Iterator[ProxyServer]:
    with ProxyServer(gw.api_base, archive=Archive.in_memory(session_id="p"), status=None) as server:
        yield server


def openai_client(proxy: ProxyServer, key: str = "sim-key") -> Any:
    import openai

    return openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0, timeout=30)


def test_the_openai_sdk_through_the_proxy_keeps_one_conversation(proxy: ProxyServer, gw: GatewaySimulator) -> None:
    client = openai_client(proxy)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one"}]
    for turn in range(3):
        response = client.chat.completions.create(model="sim-model", messages=messages)  # type: ignore[arg-type]
        assert response.choices[0].message.content
        messages += [{"role": "assistant", "content": response.choices[0].message.content},
                     {"role": "user", "content": f"turn {turn + 2}"}]  # fmt: skip
    (session,) = proxy.conversations.sessions
    assert len(session.history) == 7 and len(gw.requests) == 3


def test_the_openai_sdk_streams_through_the_proxy(proxy: ProxyServer) -> None:
    client = openai_client(proxy)
    stream = client.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "hi"}], stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text and text == proxy.conversations.sessions[0].history[-1].content


def test_tool_calls_reach_the_client_and_recall_does_not(proxy: ProxyServer) -> None:
    client = openai_client(proxy)
    tool = {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}  # fmt: skip
    messages: list[Any] = [{"role": "user", "content": '[[tool:read_file {"path": "a.py"}]] read a.py'}]
    response = client.chat.completions.create(model="sim-model", messages=messages, tools=[tool])  # type: ignore[list-item]
    (call,) = response.choices[0].message.tool_calls or []
    assert call.function.name == "read_file" and response.choices[0].finish_reason == "tool_calls"
    messages += [response.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "print('a')"}]  # fmt: skip
    final = client.chat.completions.create(model="sim-model", messages=messages, tools=[tool])  # type: ignore[list-item]
    assert final.choices[0].message.content and not final.choices[0].message.tool_calls
    assert len(proxy.conversations.sessions) == 1


def test_the_anthropic_sdk_through_the_proxy_json_and_stream(proxy: ProxyServer) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=proxy.anthropic_base_url, api_key="sim-key", max_retries=0, timeout=30)
    messages: list[Any] = [{"role": "user", "content": "hello"}]
    reply = client.messages.create(model="sim-model", max_tokens=256, system="be brief", messages=messages)
    assert reply.content[0].type == "text" and reply.content[0].text and reply.stop_reason == "end_turn"
    messages += [{"role": "assistant", "content": reply.content[0].text}, {"role": "user", "content": "again"}]
    with client.messages.stream(model="sim-model", max_tokens=256, system="be brief", messages=messages) as stream:
        text = "".join(stream.text_stream)
    assert text
    (session,) = proxy.conversations.sessions
    assert [m.role for m in session.history] == ["system", "user", "assistant", "user", "assistant"]


def test_errors_reach_the_client_in_its_own_api(proxy: ProxyServer, gw: GatewaySimulator) -> None:
    import anthropic
    import openai

    gw.fail_next("auth401")
    with pytest.raises(openai.AuthenticationError, match="refused the credentials"):
        openai_client(proxy).chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "x"}])
    gw.fail_next("auth401")
    client = anthropic.Anthropic(base_url=proxy.anthropic_base_url, api_key="k", max_retries=0, timeout=30)
    with pytest.raises(anthropic.AuthenticationError, match="refused the credentials"):
        client.messages.create(model="sim-model", max_tokens=64, messages=[{"role": "user", "content": "x"}])


def test_loopback_by_default_and_says_so(gw: GatewaySimulator, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="contextkit"), ProxyServer(gw.api_base, status=None) as server:
        assert server.host == "127.0.0.1"
    assert "loopback only" in caplog.text
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")


def test_a_non_loopback_bind_needs_the_flag_and_a_token(gw: GatewaySimulator, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="--allow-remote"):
        ProxyServer(gw.api_base, host="0.0.0.0")
    with pytest.raises(ConfigError, match="without an access token"):
        ProxyServer(gw.api_base, host="0.0.0.0", allow_remote=True)
    with pytest.raises(ConfigError, match="at least 16 characters"):
        ProxyServer(gw.api_base, host="0.0.0.0", allow_remote=True, token="short")
    with pytest.raises(ConfigError, match="upstream must be an http"):
        ProxyServer("localhost:8000")
    # the command refuses to start, with the same reason
    assert main(["proxy", "--upstream", gw.api_base, "--host", "0.0.0.0", "--allow-remote"]) == 2
    assert "without an access token" in capsys.readouterr().out


def test_a_token_is_required_on_every_request(gw: GatewaySimulator) -> None:
    import openai

    with ProxyServer(gw.api_base, token=TOKEN, upstream_api_key="sim-key", status=None,
                     archive=Archive.in_memory(session_id="tok")) as server:  # fmt: skip
        with pytest.raises(openai.AuthenticationError, match="access token"):
            openai_client(server, key="wrong").chat.completions.create(
                model="sim-model", messages=[{"role": "user", "content": "x"}]
            )
        ok = openai_client(server, key=TOKEN).chat.completions.create(
            model="sim-model", messages=[{"role": "user", "content": "x"}]
        )
        assert ok.choices[0].message.content
        assert len(gw.requests) == 1  # the refused request never reached the upstream


def test_the_event_feed_serves_every_conversations_events(proxy: ProxyServer) -> None:
    openai_client(proxy).chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "x"}])
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.port}/contextkit/events?since=0", timeout=10) as resp:
        feed = json.loads(resp.read())
    kinds = {e.get("type") or e.get("kind") for e in feed["events"]}
    assert feed["next"] == len(proxy.events) and kinds
    assert [e for e in proxy.events if isinstance(e, RequestEvent)]


def test_recall_is_served_to_the_model_and_never_reaches_the_client(gw: GatewaySimulator) -> None:
    archive = Archive.in_memory(session_id="notes")
    key = archive.put("archived build notes: the flaky test is test_upload_retry", kind="message")
    with ProxyServer(gw.api_base, archive=archive, status=None) as server:
        client = openai_client(server)
        response = client.chat.completions.create(
            model="sim-model",
            messages=[{"role": "user", "content": f'[[tool:recall {{"key": "<<ccr:{key}>>"}}]] what was flaky?'}],
            extra_headers={"x-contextkit-conversation": "notes"},
        )
        assert response.choices[0].message.content and not response.choices[0].message.tool_calls
        (session,) = server.conversations.sessions
        results = [m for m in session.history if m.role == "tool"]
        assert results and "test_upload_retry" in results[0].content
        assert len(gw.requests) == 2  # the recall round went upstream once more, in the same client request


def test_the_anthropic_sdk_runs_its_tools_through_the_proxy(proxy: ProxyServer) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=proxy.anthropic_base_url, api_key="sim-key", max_retries=0, timeout=60)
    tool = {"name": "read_file", "description": "Read a file.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}  # fmt: skip
    messages: list[Any] = [{"role": "user", "content": '[[tool:read_file {"path": "a.py"}]] read a.py'}]
    reply = client.messages.create(model="sim-model", max_tokens=256, messages=messages, tools=[tool])  # type: ignore[list-item]
    uses = [b for b in reply.content if b.type == "tool_use"]
    assert reply.stop_reason == "tool_use" and len(uses) == 1
    assert uses[0].name == "read_file" and uses[0].input == {"path": "a.py"}
    messages += [{"role": "assistant", "content": [b.model_dump() for b in reply.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                               "content": "print('a')"}]}]  # fmt: skip
    final = client.messages.create(model="sim-model", max_tokens=256, messages=messages, tools=[tool])  # type: ignore[list-item]
    assert final.stop_reason == "end_turn" and final.content[0].type == "text"
    (session,) = proxy.conversations.sessions
    assert [m.role for m in session.history] == ["user", "assistant", "tool", "assistant"]
    assert session.history[2].content == "print('a')"


def test_a_bad_request_is_a_400_naming_what_is_wrong(proxy: ProxyServer, gw: GatewaySimulator) -> None:
    def post(path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(f"http://127.0.0.1:{proxy.port}{path}", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    status, body = post("/v1/chat/completions", b"{not json")
    assert status == 400 and "not JSON" in body["error"]["message"]
    status, body = post("/v1/chat/completions", json.dumps({"model": "sim-model"}).encode())
    assert status == 400 and "needs 'messages'" in body["error"]["message"]
    status, body = post("/v1/messages", json.dumps({"messages": []}).encode())
    assert status == 400 and body["type"] == "error" and "needs 'model'" in body["error"]["message"]
    status, body = post("/v1/embeddings", b"{}")
    assert status == 404 and "/v1/chat/completions" in body["error"]["message"]
    assert gw.requests == []  # nothing reached the upstream
