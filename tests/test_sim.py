"""The gateway simulator, driven through litellm over real HTTP."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from contextkit import backend
from contextkit.errors import ConfigError
from contextkit.sim import (
    FAULT_KINDS,
    OVERFLOW_STYLES,
    TOOL_SCHEMAS,
    AgentScript,
    GatewaySimulator,
    Workspace,
    long_text,
    run_sim_cli,
)
from contextkit.sim.faults import BEDROCK_403, CF_RAY
from contextkit.sim.model import CONTINUATION_TRIGGER, SUMMARY_SECTIONS, SUMMARY_TRIGGER
from contextkit.sim.workloads import file_content, grep_output, json_output, log_output, read_file
from contextkit.sizing import text_tokens

ROUTES = ("openai", "anthropic")
HELLO = [{"role": "user", "content": "hello there simulator"}]


@pytest.fixture(scope="module")
def gw():
    with GatewaySimulator() as sim:
        yield sim


@pytest.fixture(autouse=True)
def _fresh(gw):
    gw.reset(timeout_sleep=0.6)
    yield


def call(gw: GatewaySimulator, route: str = "openai", messages: list[dict[str, Any]] | None = None, **kw: Any) -> Any:
    kw.setdefault("timeout", 10)
    return backend.completion(messages=messages or HELLO, **gw.litellm_kwargs(route), **kw)


def stream_text(gw: GatewaySimulator, route: str, messages: list[dict[str, Any]] | None = None, **kw: Any):
    chunks = list(call(gw, route, messages, stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return text, finish


def raises(fn, *args: Any, **kw: Any) -> Exception:
    try:
        result = fn(*args, **kw)
        if kw.get("stream"):
            list(result)
    except Exception as exc:  # noqa: BLE001 - we inspect whatever litellm raised
        return exc
    raise AssertionError("expected an exception")


def chain_names(exc: BaseException) -> list[str]:
    names, seen = [], set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        names.append(type(cur).__name__)
        cur = cur.__cause__ or cur.__context__ or getattr(cur, "original_exception", None)
    return names


# happy paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
def test_ok_reply(gw, route):
    resp = call(gw, route)
    assert resp.choices[0].message.content == "Reply 1: hello there simulator"
    assert resp.choices[0].finish_reason == "stop"
    (rec,) = gw.requests
    assert (rec.route, rec.status, rec.accepted, rec.reason, rec.kind) == (route, 200, True, "ok", "turn")
    assert resp.usage.prompt_tokens == rec.tokens > 0


@pytest.mark.parametrize("route", ROUTES)
def test_streaming(gw, route):
    text, finish = stream_text(gw, route, [{"role": "user", "content": "stream me a line please"}])
    assert text == "Reply 1: stream me a line please"
    assert finish[-1] == "stop"
    assert gw.requests[-1].stream is True


def test_reply_numbering_follows_assistant_turns(gw):
    msgs = [*HELLO, {"role": "assistant", "content": "Reply 1: x"}, {"role": "user", "content": "again"}]
    assert call(gw, messages=msgs).choices[0].message.content == "Reply 2: again"


# faults: the exception classes litellm raises for each real gateway failure -----------------------

EXPECTED = {
    ("openai", "overflow"): ("ContextWindowExceededError", 400, "maximum context length"),
    ("openai", "413"): ("APIError", 413, "Request Entity Too Large"),
    ("openai", "413-html"): ("APIError", 413, "<title>413 Request Entity Too Large</title>"),
    ("openai", "waf403"): ("APIError", 403, "Cloudflare Ray ID"),
    ("openai", "bedrock403"): ("APIError", 403, "Request blocked by security policy"),
    ("openai", "drop"): ("InternalServerError", 500, "Connection error"),
    ("openai", "429"): ("RateLimitError", 429, "Rate limit reached"),
    ("openai", "500"): ("InternalServerError", 500, "The server had an error"),
    ("openai", "timeout"): ("Timeout", 408, "timed out"),
    ("openai", "auth401"): ("AuthenticationError", 401, "Incorrect API key"),
    ("openai", "auth403"): ("APIError", 403, "Invalid API key"),
    ("openai", "stream_drop"): ("MidStreamFallbackError", 500, "Stream ended before a finish_reason"),
    ("openai", "stream_error"): ("MidStreamFallbackError", 500, "upstream overloaded mid-stream"),
    ("anthropic", "overflow"): ("ContextWindowExceededError", 400, "maximum context length"),
    ("anthropic", "413"): ("BadRequestError", 400, "request_too_large"),
    ("anthropic", "413-html"): ("BadRequestError", 400, "413 Request Entity Too Large"),
    ("anthropic", "waf403"): ("PermissionDeniedError", 403, "Cloudflare"),
    ("anthropic", "bedrock403"): ("PermissionDeniedError", 403, "Request blocked by security policy"),
    ("anthropic", "drop"): ("InternalServerError", 500, "Server disconnected without sending a response"),
    ("anthropic", "429"): ("RateLimitError", 429, "rate_limit_error"),
    ("anthropic", "500"): ("InternalServerError", 500, "api_error"),
    ("anthropic", "timeout"): ("Timeout", 408, "timed out"),
    ("anthropic", "auth401"): ("AuthenticationError", 401, "invalid x-api-key"),
    ("anthropic", "auth403"): ("PermissionDeniedError", 403, "permission_error"),
    ("anthropic", "stream_drop"): ("MidStreamFallbackError", 500, "Stream ended before a finish_reason"),
    ("anthropic", "stream_error"): ("MidStreamFallbackError", 500, "upstream overloaded mid-stream"),
}


@pytest.mark.parametrize(("route", "kind"), sorted(EXPECTED))
def test_fault_maps_to_litellm_exception(gw, route, kind):
    cls, status, text = EXPECTED[(route, kind)]
    gw.fail_next(kind)
    stream = kind.startswith("stream")
    exc = raises(call, gw, route, timeout=0.3 if kind == "timeout" else 10, stream=stream)
    assert type(exc).__name__ == cls, chain_names(exc)
    assert getattr(exc, "status_code", None) == status
    response = getattr(exc, "response", None)
    body = response.text if route == "openai" and status not in (408, 500) else str(exc)
    assert text.lower() in (body or str(exc)).lower()
    if route == "openai" and kind in ("413", "413-html", "waf403", "bedrock403", "auth403"):
        assert response.status_code == status
        assert (response.headers.get("cf-ray") == CF_RAY) is (kind == "waf403")
    if kind == "drop":
        assert {"RemoteProtocolError", "APIConnectionError"} & set(chain_names(exc)) or "disconnected" in str(exc)
    rec = gw.requests[-1]
    assert (rec.accepted, rec.reason, rec.stream) == (False, f"fault:{kind}", stream)
    assert gw.pending_faults() == []


def test_auth403_has_no_waf_signals_and_waf403_has_them(gw):
    gw.fail_next("auth403")
    plain = raises(call, gw)
    gw.fail_next("waf403")
    waf = raises(call, gw)
    assert "cf-ray" not in plain.response.headers and "cloudflare" not in plain.response.text.lower()
    assert waf.response.headers["cf-ray"] == CF_RAY and "cloudflare" in waf.response.text.lower()
    assert waf.response.headers["content-type"].startswith("text/html")


def test_bedrock403_page_is_exact(gw):
    gw.fail_next("bedrock403")
    exc = raises(call, gw)
    assert exc.response.text == BEDROCK_403
    assert exc.response.headers["content-type"].startswith("text/html")


def test_faults_apply_in_order_and_stream_faults_wait_for_a_stream(gw):
    gw.fail_next("stream_drop")
    gw.fail_next("429", times=2)
    assert type(raises(call, gw)).__name__ == "RateLimitError"
    assert type(raises(call, gw)).__name__ == "RateLimitError"
    assert gw.pending_faults() == ["stream_drop"]
    assert call(gw).choices[0].finish_reason == "stop"  # non-streaming request skips the stream fault
    assert type(raises(call, gw, stream=True)).__name__ == "MidStreamFallbackError"
    assert [r.reason for r in gw.requests] == ["fault:429", "fault:429", "ok", "fault:stream_drop"]


def test_stream_drop_yields_partial_deltas_first(gw):
    gw.fail_next("stream_drop")
    got: list[str] = []
    with pytest.raises(Exception) as info:
        for chunk in call(
            gw, messages=[{"role": "user", "content": "a fairly long sentence for streaming deltas"}], stream=True
        ):
            got.append(chunk.choices[0].delta.content or "")
    assert type(info.value).__name__ == "MidStreamFallbackError"
    assert "".join(got) and "Reply 1: a fairly long sentence".startswith("".join(got)[:20])


def test_length_fault(gw):
    gw.fail_next("length")
    resp = call(gw, messages=[{"role": "user", "content": "a reply that is longer than five tokens for sure"}])
    assert resp.choices[0].finish_reason == "length"
    assert text_tokens(resp.choices[0].message.content) <= 5


# gateway body cap --------------------------------------------------------------------------------

CAP_EXPECTED = {
    "413": ("APIError", "BadRequestError"),
    "413-html": ("APIError", "BadRequestError"),
    "waf403": ("APIError", "PermissionDeniedError"),
    "bedrock403": ("APIError", "PermissionDeniedError"),
    "drop": ("InternalServerError", "InternalServerError"),
}


@pytest.mark.parametrize("mode", sorted(CAP_EXPECTED))
@pytest.mark.parametrize("route", ROUTES)
def test_body_cap_rejections(gw, route, mode):
    gw.configure(max_body="2KB", reject_with=mode)
    assert call(gw, route).choices[0].finish_reason == "stop"  # small body passes
    big = [{"role": "user", "content": "x" * 3000}]
    exc = raises(call, gw, route, big)
    assert type(exc).__name__ == CAP_EXPECTED[mode][route == "anthropic"]
    ok, rejected = gw.requests
    assert ok.accepted and ok.bytes < 2048
    assert not rejected.accepted and rejected.reason == f"body {rejected.bytes} > cap 2048"
    assert rejected.bytes > 3000 and rejected.tokens == 0  # rejected before parsing
    assert rejected.status == {"413": 413, "413-html": 413, "waf403": 403, "bedrock403": 403, "drop": 0}[mode]


def test_max_body_accepts_size_strings(gw):
    assert gw.configure(max_body="128KB").max_body == 131072
    assert gw.configure(max_body=1000).max_body == 1000
    assert gw.configure(max_body=None).max_body is None


# context window and overflow styles ------------------------------------------------------------------

# which provider wordings litellm 1.110 turns into ContextWindowExceededError (others: BadRequestError)
LITELLM_RECOGNISES = {"openai", "azure", "anthropic", "gemini", "deepseek"}


@pytest.mark.parametrize("style", sorted(OVERFLOW_STYLES))
@pytest.mark.parametrize("route", ROUTES)
def test_overflow_styles(gw, route, style):
    gw.configure(context_window=50, overflow_style=style)
    assert call(gw, route).choices[0].finish_reason == "stop"
    exc = raises(call, gw, route, [{"role": "user", "content": "word " * 200}])
    expected = "ContextWindowExceededError" if style in LITELLM_RECOGNISES else "BadRequestError"
    assert type(exc).__name__ == expected
    assert exc.status_code == 400
    rec = gw.requests[-1]
    assert rec.reason == f"context {rec.tokens} > window 50" and rec.tokens > 200
    wording = OVERFLOW_STYLES[style][0].format(w=50, t=rec.tokens)
    seen = str(exc) + (getattr(exc.response, "text", "") or "")
    assert wording in seen or json.dumps(wording)[1:-1] in seen
    envelope = json.loads(exc.response.text) if route == "openai" else None
    if envelope is not None:
        assert envelope["error"]["message"] == wording


def test_anthropic_envelope_on_messages_route(gw):
    gw.configure(context_window=20, overflow_style="gemini")
    exc = raises(call, gw, "anthropic", [{"role": "user", "content": "word " * 100}])
    assert '{"type": "error", "error": {"type": "invalid_request_error"' in str(exc)


# output cap, continuation ----------------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
def test_max_output_tokens_gives_length(gw, route):
    gw.configure(max_output_tokens=10)
    resp = call(gw, route, [{"role": "user", "content": "[[long:80]]"}])
    assert resp.choices[0].finish_reason == "length"
    assert text_tokens(resp.choices[0].message.content) <= 10
    assert long_text(80).startswith(resp.choices[0].message.content)


def test_request_max_tokens_applies_too(gw):
    resp = call(gw, messages=[{"role": "user", "content": "[[long:80]]"}], max_tokens=7)
    assert resp.choices[0].finish_reason == "length"
    assert text_tokens(resp.choices[0].message.content) <= 7
    text, finish = stream_text(gw, "openai", [{"role": "user", "content": "[[long:80]]"}], max_tokens=7)
    assert finish[-1] == "length" and long_text(80).startswith(text)


def test_continuation_rebuilds_the_long_text(gw):
    gw.configure(max_output_tokens=25)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "write it [[long:100]]"}]
    parts = []
    for _ in range(10):
        resp = call(gw, messages=msgs)
        parts.append(resp.choices[0].message.content)
        if resp.choices[0].finish_reason == "stop":
            break
        msgs += [
            {"role": "assistant", "content": parts[-1]},
            {"role": "user", "content": f"{CONTINUATION_TRIGGER}. Resume DIRECTLY from where you stopped."},
        ]
    assert resp.choices[0].finish_reason == "stop" and len(parts) > 2
    assert "".join(parts) == long_text(100)


# scripted tools and agents --------------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
def test_tool_directive(gw, route):
    ask = [{"role": "user", "content": 'please [[tool:read_file {"path": "src/app.py"}]]'}]
    resp = call(gw, route, ask, tools=TOOL_SCHEMAS)
    (tc,) = resp.choices[0].message.tool_calls
    assert tc.function.name == "read_file" and json.loads(tc.function.arguments) == {"path": "src/app.py"}
    assert resp.choices[0].finish_reason == "tool_calls"
    result = Workspace(seed=1).read_file("src/app.py")
    msgs = [
        *ask,
        {"role": "assistant", "content": None, "tool_calls": [tc.model_dump()]},
        {"role": "tool", "tool_call_id": tc.id, "content": result.content},
    ]
    reply = call(gw, route, msgs, tools=TOOL_SCHEMAS).choices[0].message.content
    assert f"read_file returned {len(result.content)} chars" in reply
    # without the tool on offer the model answers in text
    assert call(gw, route, ask).choices[0].message.tool_calls in (None, [])


@pytest.mark.parametrize("route", ROUTES)
def test_tool_directive_streaming(gw, route):
    ask = [{"role": "user", "content": '[[tool:grep {"pattern": "retry"}]]'}]
    chunks = list(call(gw, route, ask, tools=TOOL_SCHEMAS, stream=True))
    args = "".join(
        tc.function.arguments or "" for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])
    )
    assert json.loads(args) == {"pattern": "retry"}


def run_agent(gw: GatewaySimulator, ws: Workspace, route: str = "openai") -> tuple[list[dict[str, Any]], str]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "investigate the repository"}]
    for _ in range(20):
        msg = call(gw, route, msgs, tools=TOOL_SCHEMAS).choices[0].message
        if not msg.tool_calls:
            return msgs, msg.content
        msgs.append(
            {"role": "assistant", "content": msg.content, "tool_calls": [t.model_dump() for t in msg.tool_calls]}
        )
        for tc in msg.tool_calls:
            out = ws.call(tc.function.name, tc.function.arguments)
            msgs.append({"role": "tool", "tool_call_id": tc.id, "content": out.content})
    raise AssertionError("agent did not finish")


@pytest.mark.parametrize("route", ROUTES)
def test_agent_script_progression(gw, route):
    script = AgentScript.seeded(seed=3, steps=4)
    gw.configure(agent=script)
    msgs, final = run_agent(gw, Workspace(seed=3, target_bytes=30_000), route)
    calls = [
        (tc["function"]["name"], json.loads(tc["function"]["arguments"]))
        for m in msgs
        for tc in m.get("tool_calls", [])
    ]
    assert calls == [(name, args) for name, args in script.steps]
    assert "Completed 4 steps" in final
    sizes = [len(m["content"]) for m in msgs if m["role"] == "tool"]
    assert all(10_000 < s < 60_000 for s in sizes), sizes
    assert len(gw.requests) == 5


def test_agent_script_survives_dropped_tool_messages(gw):
    script = AgentScript.seeded(seed=5, steps=5)
    gw.configure(agent=script)
    ws = Workspace(seed=5, target_bytes=2_000)
    msgs, _ = run_agent(gw, ws)
    # compaction keeps only the first user message and the last assistant/tool pair: still "done"
    short = [msgs[0], *msgs[-2:]]
    assert "Completed 5 steps" in call(gw, messages=short, tools=TOOL_SCHEMAS).choices[0].message.content
    # cut after step 2 and replace the middle by a summary: the next call is step 3, not step 1
    idx = [i for i, m in enumerate(msgs) if m["role"] == "assistant"][2]
    summary = {"role": "user", "content": "[STRUCTURED SUMMARY]\n- Done: Step 2/5"}
    nxt = call(gw, messages=[msgs[0], summary], tools=TOOL_SCHEMAS).choices[0].message.tool_calls[0]
    assert (
        nxt.function.name == script.steps[2][0]
        and nxt.function.arguments == msgs[idx]["tool_calls"][0]["function"]["arguments"]
    )


# summaries -----------------------------------------------------------------------------------------

SEGMENT = (
    "Extract facts.\n\n" + SUMMARY_TRIGGER + ":\n\n"
    "[user]: fix the timeout in src/app/net.py\n\n"
    '[assistant]: Step 1/3: reading\n[tool_calls: read_file({"path": "src/app/net.py"}), grep({"pattern": "retry"})]\n\n'
    "[tool]: 1| import socket\nerror: ConnectionResetError at src/app/net.py:42\n\n"
    "[assistant]: I decided to raise the retry budget to 5 and modified src/app/net.py lines 40-44\n\n"
)


@pytest.mark.parametrize("route", ROUTES)
def test_extractive_summary(gw, route):
    text = call(gw, route, [{"role": "user", "content": SEGMENT}]).choices[0].message.content
    for section in (
        "## Files Read",
        "## Files Modified",
        "## Commands Executed",
        "## Key Decisions",
        "## Errors & Resolutions",
        "## Current Task State",
    ):
        assert section in text
    assert "src/app/net.py" in text and 'grep({"pattern": "retry"})' in text and "ConnectionResetError" in text
    assert text.index("## Files Read") < text.index("## Current Task State") and len(text) >= 120
    assert gw.requests[-1].kind == "summary"
    assert set(SUMMARY_SECTIONS) >= {line for line in text.splitlines() if line.startswith("## ")}


def test_summary_of_empty_segment_is_still_long_enough(gw):
    text = call(gw, messages=[{"role": "user", "content": SUMMARY_TRIGGER + ":\n\n"}]).choices[0].message.content
    assert len(text) >= 120 and "## Current Task State" in text


@pytest.mark.parametrize(
    ("mode", "check"),
    [
        ("refuse", lambda t: t.lower().startswith("i'm sorry")),
        ("short", lambda t: len(t) < 40),
        ("error_text", lambda t: t.startswith("Error:")),
    ],
)
def test_summary_text_modes(gw, mode, check):
    gw.configure(summary_mode=mode)
    assert check(call(gw, messages=[{"role": "user", "content": SEGMENT}]).choices[0].message.content)
    assert call(gw).choices[0].message.content.startswith("Reply 1")  # turns are unaffected


@pytest.mark.parametrize(("mode", "cls"), [("fail", "InternalServerError"), ("timeout", "Timeout")])
def test_summary_failure_modes(gw, mode, cls):
    gw.configure(summary_mode=mode, timeout_sleep=0.6)
    exc = raises(call, gw, "openai", [{"role": "user", "content": SEGMENT}], timeout=0.3)
    assert type(exc).__name__ == cls
    assert gw.requests[-1].reason == f"summary_mode:{mode}" and gw.requests[-1].kind == "summary"


# log, config, latency, CLI -----------------------------------------------------------------------------


def test_request_log_records_exact_bodies():
    with GatewaySimulator(record_bodies=True) as sim:
        call(sim, "openai")
        call(sim, "anthropic", stream=True)
        list(call(sim, "openai", stream=True))
        recs = sim.requests
    assert [r.seq for r in recs] == [1, 2, 3]
    assert [(r.route, r.path, r.stream) for r in recs] == [
        ("openai", "/v1/chat/completions", False),
        ("anthropic", "/v1/messages", True),
        ("openai", "/v1/chat/completions", True),
    ]
    for r in recs:
        body = sim.body(r.seq)
        assert r.bytes == len(body) and r.body_sha256 == hashlib.sha256(body).hexdigest()
        assert r.model == "sim-model" and r.tokens > 0 and r.status == 200
    assert b'"stream":true' in sim.body(3)
    with pytest.raises(ConfigError):
        GatewaySimulator().body(1)


def test_get_log_and_health(gw):
    call(gw)
    with urllib.request.urlopen(gw.anthropic_api_base + "/log", timeout=5) as r:
        log = json.loads(r.read())
    with urllib.request.urlopen(gw.anthropic_api_base + "/health", timeout=5) as r:
        health = json.loads(r.read())
    assert log[0]["reason"] == "ok" and log[0]["route"] == "openai"
    assert health == {"status": "ok", "api_base": gw.api_base}


def post(url: str, payload: dict[str, Any]) -> int:
    req = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_log_is_thread_safe_under_concurrency(gw):
    gw.fail_next("429", times=5)
    url = gw.api_base + "/chat/completions"
    payloads = [{"model": "sim-model", "messages": [{"role": "user", "content": f"n{i}"}]} for i in range(60)]
    with ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(lambda p: post(url, p), payloads))
    recs = gw.requests
    assert len(recs) == 60 and sorted(r.seq for r in recs) == list(range(1, 61))
    assert statuses.count(429) == 5 == sum(r.reason == "fault:429" for r in recs)
    assert statuses.count(200) == 55 and gw.pending_faults() == []


def test_configure_validates(gw):
    with pytest.raises(ConfigError, match="unknown simulator setting"):
        gw.configure(context_windw=5)
    with pytest.raises(ConfigError, match="overflow_style"):
        gw.configure(overflow_style="nope")
    with pytest.raises(ConfigError, match="reject_with"):
        gw.configure(reject_with="418")
    with pytest.raises(ConfigError, match="max_body"):
        gw.configure(max_body="lots")
    with pytest.raises(ConfigError, match="fault"):
        gw.fail_next("meteor")
    with pytest.raises(ConfigError, match="route"):
        gw.litellm_kwargs("gemini")
    assert set(FAULT_KINDS) >= {"overflow", "413", "drop", "stream_drop", "length"}
    assert gw.config.overflow_style == "openai"  # failed configure changed nothing


def test_configure_while_running_applies_to_next_request(gw):
    call(gw)
    gw.configure(context_window=5)
    assert type(raises(call, gw)).__name__ == "ContextWindowExceededError"
    gw.configure(context_window=None)
    assert call(gw).choices[0].finish_reason == "stop"


def test_latency(gw):
    gw.configure(latency=0.25)
    start = time.monotonic()
    call(gw)
    assert time.monotonic() - start >= 0.25


def test_addresses_and_lifecycle():
    sim = GatewaySimulator()
    with pytest.raises(ConfigError, match="not running"):
        _ = sim.api_base
    sim.start()
    try:
        assert sim.api_base == f"http://127.0.0.1:{sim.port}/v1" and sim.model == "openai/sim-model"
        assert sim.litellm_kwargs("anthropic") == {
            "model": "anthropic/sim-model",
            "api_base": f"http://127.0.0.1:{sim.port}",
            "api_key": "sim-key",
        }
    finally:
        sim.stop()
    assert not sim.running


def test_cli_serves_and_stops(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(run_sim_cli(["--port", str(port), "--max-body", "1KB"], _serve_seconds=1.5))
    )
    thread.start()
    health = None
    for _ in range(50):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                health = json.loads(r.read())
            break
        except OSError:
            time.sleep(0.05)
    status = post(
        f"http://127.0.0.1:{port}/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 2000}]}
    )
    thread.join(5)
    assert health is not None and health["status"] == "ok"
    assert status == 413 and result == [0]
    assert f"http://127.0.0.1:{port}/v1" in capsys.readouterr().out


def test_cli_bad_size_is_a_clear_error(capsys):
    assert run_sim_cli(["--max-body", "lots"]) == 2
    assert "max_body" in capsys.readouterr().err


# workloads ------------------------------------------------------------------------------------------


def test_workloads_are_deterministic_and_sized():
    assert file_content("a/b.py", 50, 1) == file_content("a/b.py", 50, 1) != file_content("a/b.py", 50, 2)
    assert grep_output("x", 10, 1).count("\n") == 9 and log_output(30, 1).count("\n") == 29
    assert len(json.loads(json_output(20, 1))) == 20
    ws = Workspace(seed=7, target_bytes=40_000)
    whole = ws.read_file("src/core/engine.py")
    assert 20_000 <= len(whole.content) <= 60_000 and whole.line_start == 1
    part = ws.read_file("src/core/engine.py", 10, 20)
    assert part.lines == (10, 20) and part.path == "src/core/engine.py"
    assert part.content.splitlines() == whole.content.splitlines()[9:20]
    for out in (ws.grep("cache"), ws.tail_log(500), ws.get_json(150)):
        assert 10_000 <= len(out.content) <= 90_000, (out.tool, len(out.content))
    msg = part.message("call_9")
    assert (msg.role, msg.tool_call_id, msg.origin.path, msg.origin.line_start, msg.origin.line_end) == (
        "tool", "call_9", "src/core/engine.py", 10, 20,
    )  # fmt: skip
    assert read_file("x/y.py").content == Workspace(seed=0).read_file("x/y.py").content
    assert ws.call("nope", "{}").content.startswith("error: unknown tool")
    assert ws.call("read_file", '{"bad": 1}').content.startswith("error: bad arguments")
