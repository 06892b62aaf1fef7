"""``GatewaySimulator``: a real HTTP server on 127.0.0.1 that plays provider + gateway.

litellm talks to it over real HTTP (OpenAI chat completions and Anthropic messages, JSON and
SSE). In front of the scripted model sits a simulated gateway: a body-size cap checked on
Content-Length (like nginx or a WAF, before any parsing), a context window counted with
tiktoken, an output cap, latency and one-shot faults. Behind the gateway, a provider-style prompt
cache (``gw.cache``, ``contextkit.sim.cache``) reports cached prompt tokens in each route's usage
fields. Every request is logged as a ``RequestRecord`` (with its cached and newly cached tokens).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from contextkit.errors import ConfigError
from contextkit.sim import faults, wire
from contextkit.sim.cache import CacheUse, PromptCache
from contextkit.sim.config import (
    BODY_FAULTS,
    CONFIG_KEYS,
    ERROR_TEXT,
    FAULT_KINDS,
    REFUSAL,
    SHORT_SUMMARY,
    SIM_MODEL,
    STREAM_FAULTS,
    SUMMARY_MODES,
    RequestRecord,
    SimConfig,
)
from contextkit.sim.gate import StreamGate, peer_gone
from contextkit.sim.model import CONTINUATION_TRIGGER, SUMMARY_TRIGGERS, Conversation, Reply, ScriptedModel
from contextkit.sizing import text_tokens, truncate_to_tokens

__all__ = ["FAULT_KINDS", "SUMMARY_MODES", "GatewaySimulator", "RequestRecord", "SimConfig", "StreamGate"]

FaultBody = str | Mapping[str, Any] | None  # the body of a "400" / "422" fault (see fail_next)


@dataclass
class _Outcome:
    response: wire.Response
    reason: str = "ok"
    tokens: int = 0
    stream: bool = False
    model: str = ""
    kind: str = "turn"
    sleep_then_drop: float = 0.0
    gate: StreamGate | None = None
    cache: CacheUse | None = None
    completion_tokens: int = 0


class GatewaySimulator:
    """Provider + gateway on 127.0.0.1, for litellm over real HTTP.

    ``with GatewaySimulator(context_window=32_768, max_body="128KB") as gw:`` then call
    ``backend.completion(**gw.litellm_kwargs(), messages=..., timeout=10)``.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, record_bodies: bool = False, **config: Any) -> None:
        self._lock = threading.Lock()
        self._config = self._build(SimConfig(), config)
        self._faults: deque[tuple[str, FaultBody]] = deque()  # (kind, body of a "400" / "422")
        self._log: list[RequestRecord] = []
        self._bodies: dict[int, bytes] = {}
        self._seq = 0
        self.cache = PromptCache(min_tokens=self._config.cache_min_tokens, ttl=self._config.cache_ttl)
        self.record_bodies = record_bodies
        self.host, self._port = host, port
        self._gate: StreamGate | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle ---------------------------------------------------------------------------------
    def start(self) -> GatewaySimulator:
        if self._server is not None:
            return self
        server = _Server((self.host, self._port), _Handler)
        server.daemon_threads = True
        server.sim = self  # type: ignore[attr-defined]
        self._server = server
        self._port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"sim-{self._port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> GatewaySimulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    # addresses ---------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._server is None:
            raise ConfigError("the simulator is not running; use `with GatewaySimulator() as gw:` or gw.start()")
        return self._port

    @property
    def anthropic_api_base(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.anthropic_api_base}/v1"

    model = f"openai/{SIM_MODEL}"
    anthropic_model = f"anthropic/{SIM_MODEL}"

    def litellm_kwargs(self, route: str = "openai") -> dict[str, Any]:
        if route == "openai":
            return {"model": self.model, "api_base": self.api_base, "api_key": "sim-key"}
        if route == "anthropic":
            return {"model": self.anthropic_model, "api_base": self.anthropic_api_base, "api_key": "sim-key"}
        raise ConfigError(f"route {route!r} is unknown; use 'openai' or 'anthropic'")

    # configuration and faults -------------------------------------------------------------------
    @staticmethod
    def _build(base: SimConfig, changes: dict[str, Any]) -> SimConfig:
        unknown = sorted(set(changes) - set(CONFIG_KEYS))
        if unknown:
            raise ConfigError(f"unknown simulator setting(s) {', '.join(unknown)}; valid: {', '.join(CONFIG_KEYS)}")
        return replace(base, **changes).checked()

    def configure(self, **changes: Any) -> SimConfig:
        """Change settings while running (thread-safe); returns the new config."""
        with self._lock:
            self._config = self._build(self._config, changes)
            self.cache.min_tokens = self._config.cache_min_tokens
            self.cache.ttl = self._config.cache_ttl
            return self._config

    @property
    def config(self) -> SimConfig:
        with self._lock:
            return self._config

    def fail_next(self, kind: str, times: int = 1, *, body: FaultBody = None) -> None:
        """Queue a one-shot fault for the next matching request(s); stream faults wait for a stream.

        ``"400"`` / ``"422"`` answer with a client error whose body is ``body``: a dict is sent as the
        JSON body as is; a string is the message inside the route's error envelope, or - when it
        starts with ``{`` or ``<`` - the raw body (JSON or an HTML page). The default is an
        unknown-parameter 400 / an invalid-input 422.
        """
        if kind not in FAULT_KINDS:
            raise ConfigError(f"fault {kind!r} is unknown; use one of {', '.join(FAULT_KINDS)}")
        if body is not None and kind not in BODY_FAULTS:
            raise ConfigError(f"body= only applies to the faults {' and '.join(BODY_FAULTS)}, not {kind!r}")
        with self._lock:
            self._faults.extend([(kind, body)] * times)

    def reset(self, **config: Any) -> None:
        """Back to the default settings (plus ``config``), no pending faults, empty log."""
        fresh = self._build(SimConfig(), config)
        with self._lock:
            self._config = fresh
            self._faults.clear()
            self._gate = None
            self._log.clear()
            self._bodies.clear()
            self._seq = 0
        self.cache = PromptCache(min_tokens=fresh.cache_min_tokens, ttl=fresh.cache_ttl)

    def clear_cache(self) -> None:
        """Forget every cached prompt prefix (as if the provider's cache had expired)."""
        self.cache.clear()

    def clear_faults(self) -> None:
        """Drop the faults no request has taken yet."""
        with self._lock:
            self._faults.clear()

    def hold_streams(self, *, after_chunks: int | None = None, timeout: float = 60.0) -> StreamGate:
        """Hold every streamed turn reply open after its first text delta until ``gate.release()``.

        For ordering tests: the client must see the first delta while the server still holds the
        rest. Replies started after the release stream normally.
        """
        gate = StreamGate(after_chunks=after_chunks, timeout=timeout)
        with self._lock:
            self._gate = gate
        return gate

    def pending_faults(self) -> list[str]:
        with self._lock:
            return [kind for kind, _ in self._faults]

    def _take_fault(self, stream: bool) -> tuple[str, FaultBody] | None:
        with self._lock:
            for i, (kind, body) in enumerate(self._faults):
                if kind not in STREAM_FAULTS or stream:
                    del self._faults[i]
                    return kind, body
        return None

    # log ---------------------------------------------------------------------------------------
    @property
    def requests(self) -> list[RequestRecord]:
        with self._lock:
            return sorted(self._log, key=lambda r: r.seq)

    def clear_log(self) -> None:
        """Empty the log; sequence numbers start again at 1."""
        with self._lock:
            self._log.clear()
            self._bodies.clear()
            self._seq = 0

    def body(self, seq: int) -> bytes:
        """The raw body of request ``seq`` (only with ``record_bodies=True``)."""
        with self._lock:
            if seq not in self._bodies:
                raise ConfigError(f"no body stored for request {seq}; create the simulator with record_bodies=True")
            return self._bodies[seq]

    def _next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def _record(self, seq: int, route: str, path: str, body: bytes, out: _Outcome) -> None:
        status = 0 if out.response.drop or out.sleep_then_drop else out.response.status
        rec = RequestRecord(
            seq=seq, route=route, path=path, bytes=len(body), tokens=out.tokens, status=status,
            accepted=out.reason == "ok", reason=out.reason, stream=out.stream, kind=out.kind,
            body_sha256=hashlib.sha256(body).hexdigest(), model=out.model, ts=time.time(),
            cached_tokens=out.cache.read_tokens if out.cache else 0,
            cache_write_tokens=out.cache.write_tokens if out.cache else 0,
            completion_tokens=out.completion_tokens,
        )  # fmt: skip
        with self._lock:
            self._log.append(rec)
            if self.record_bodies:
                self._bodies[seq] = body

    # request handling ----------------------------------------------------------------------------
    def _process(self, route: str, body: bytes, cfg: SimConfig, seq: int) -> _Outcome:
        # unparsed (rejected by the cap): guess the kind from the raw bytes
        kind = "summary" if any(t.encode() in body for t in SUMMARY_TRIGGERS) else "turn"
        if cfg.max_body is not None and len(body) > cfg.max_body:
            resp = faults.gateway_reject(route, cfg.reject_with, len(body), cfg.max_body)
            return _Outcome(resp, f"body {len(body)} > cap {cfg.max_body}", kind=kind)
        try:
            data = json.loads(body)
            conv = wire.parse_anthropic(data) if route == wire.ANTHROPIC else wire.parse_openai(data)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return _Outcome(
                faults.bad_request(route, f"could not parse the request body: {exc}"), "bad request", kind=kind
            )
        stream = bool(data.get("stream"))
        blocks = wire.prompt_blocks(route, data)
        tokens = wire.PRIMING_TOKENS + sum(b.tokens for b in blocks)
        is_summary = conv.is_summary  # parsed: only the last user message decides
        kind = "summary" if is_summary else "turn"
        out = _Outcome(wire.Response(), "ok", tokens, stream, str(data.get("model", "")), kind)
        taken = self._take_fault(stream)
        fault, fault_body = taken if taken is not None else (None, None)
        if fault is not None:
            out.reason = f"fault:{fault}"
            window = cfg.context_window or max(1, tokens - 1)
            if fault == "overflow":
                out.response = faults.overflow(route, cfg.overflow_style, max(tokens, window + 1), window)
            elif fault in faults.REJECT_MODES:
                out.response = faults.gateway_reject(route, fault, len(body), cfg.max_body)
            elif fault in ("429", "500", "auth401", "auth403"):
                out.response = faults.simple_fault(route, fault)
            elif fault == "timeout":
                out.sleep_then_drop = cfg.timeout_sleep
            elif fault in BODY_FAULTS:
                out.response = faults.client_error(route, fault_body, int(fault))
            if fault not in ("stream_drop", "stream_error", "length"):
                return out
        if cfg.context_window is not None and tokens > cfg.context_window and fault is None:
            out.reason = f"context {tokens} > window {cfg.context_window}"
            out.response = faults.overflow(route, cfg.overflow_style, tokens, cfg.context_window)
            if stream and cfg.empty_stream_on_overflow:  # llama.cpp: 200, an event stream with no events
                out.reason += " (empty stream)"
                out.response = wire.Response(200, content_type="text/event-stream", chunks=())
            return out
        last = conv.last_user
        if cfg.refuse_continuation and last is not None and CONTINUATION_TRIGGER in last.text and fault is None:
            out.reason = "continuation refused"
            out.response = faults.bad_request(route, "This deployment does not accept continuation requests.")
            return out
        if is_summary and cfg.summary_mode != "extract" and fault is None:
            if cfg.summary_mode == "fail":
                out.reason = "summary_mode:fail"
                out.response = faults.server_error(route, "The summarizer model failed: internal error.")
                return out
            if cfg.summary_mode == "timeout":
                out.reason, out.sleep_then_drop = "summary_mode:timeout", cfg.timeout_sleep
                return out
        if cfg.latency:
            time.sleep(cfg.latency)
        reply = self._reply(conv, cfg, is_summary)
        limits = [n for n in (cfg.max_output_tokens, data.get("max_tokens"), data.get("max_completion_tokens")) if n]
        if fault == "length":
            limits.append(5)
        reply = _cap_reply(reply, min(limits) if limits else None)
        if cfg.prompt_cache:  # the provider read the prompt: its prefix is cached from here on
            anthropic = route == wire.ANTHROPIC
            out.cache = self.cache.use(
                blocks, namespace=f"{route}:{out.model}", breakpoints=anthropic,
                priming=wire.PRIMING_TOKENS, granularity=1 if anthropic else 128,
            )  # fmt: skip
        out.completion_tokens = text_tokens(reply.text)
        out.response = self._render(route, reply, out, fault, seq)
        if stream and kind == "turn":
            with self._lock:
                gate = self._gate
            out.gate = gate if gate is not None and not gate.released else None
        return out

    def _reply(self, conv: Conversation, cfg: SimConfig, is_summary: bool) -> Reply:
        if is_summary and cfg.summary_mode != "extract":
            text = {"refuse": REFUSAL, "short": SHORT_SUMMARY, "error_text": ERROR_TEXT}[cfg.summary_mode]
            return Reply(text)
        return ScriptedModel(agent=cfg.agent).reply(conv)

    def _render(self, route: str, reply: Reply, out: _Outcome, fault: str | None, seq: int) -> wire.Response:
        model = out.model or SIM_MODEL
        if not out.stream:
            render = wire.anthropic_reply if route == wire.ANTHROPIC else wire.openai_reply
            return wire.json_response(200, render(reply, model, out.tokens, seq, out.cache))
        stream = wire.anthropic_stream if route == wire.ANTHROPIC else wire.openai_stream
        chunks = list(stream(reply, model, out.tokens, seq, out.cache))
        if fault in STREAM_FAULTS:
            head = chunks[: max(2, min(5, len(chunks) - 3))]
            tail = [wire.stream_error_event(route)] if fault == "stream_error" else []
            return wire.Response(
                200, content_type="text/event-stream", chunks=tuple(head + tail), drop_after_chunks=True
            )
        return wire.Response(200, content_type="text/event-stream", chunks=tuple(chunks))

    def handle(self, handler: _Handler) -> None:
        path = handler.path.split("?", 1)[0].rstrip("/")
        route = wire.ANTHROPIC if path.endswith("/messages") else wire.OPENAI
        seq = self._next_seq()
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length > 0 else b""
        cfg = self.config
        if not (path.endswith(("/chat/completions", "/messages"))):
            out = _Outcome(faults.not_found(route, path), "not found")
        else:
            try:
                out = self._process(route, body, cfg, seq)
            except Exception as exc:  # noqa: BLE001 - a bug in the sim must still answer, not hang the client
                out = _Outcome(faults.server_error(route, f"simulator error: {type(exc).__name__}: {exc}"), "sim error")
        self._record(seq, route, path, body, out)
        if out.sleep_then_drop:
            time.sleep(out.sleep_then_drop)
            return
        _send(handler, out.response, out.gate, route == wire.ANTHROPIC)


def _cap_reply(reply: Reply, limit: int | None) -> Reply:
    """Cut the reply to ``limit`` tokens; a cut reply loses its tool calls and ends with "length"."""
    if limit is None or text_tokens(reply.text) + sum(text_tokens(c.arguments) for c in reply.tool_calls) <= limit:
        return reply
    return Reply(truncate_to_tokens(reply.text, limit), (), "length")


def _send(
    handler: BaseHTTPRequestHandler, resp: wire.Response, gate: StreamGate | None = None, anthropic: bool = False
) -> None:
    if resp.drop:
        handler.close_connection = True
        return
    try:
        handler.send_response(resp.status)
        handler.send_header("Content-Type", resp.content_type)
        for name, value in resp.headers:
            handler.send_header(name, value)
        if resp.chunks is None:
            handler.send_header("Content-Length", str(len(resp.body)))
            handler.end_headers()
            handler.wfile.write(resp.body)
            return
        handler.send_header("Cache-Control", "no-cache")
        handler.end_headers()
        hold_at = gate.hold_at(anthropic, len(resp.chunks)) if gate is not None else -1
        if gate is not None and hold_at < len(resp.chunks):
            gate.arrive()
        else:
            gate = None  # too short to hold (an empty stream)
        for i, chunk in enumerate(resp.chunks):
            if i == hold_at and gate is not None:
                handler.wfile.flush()
                gate.hold()
                if peer_gone(handler.connection):
                    gate.finish(peer_closed=True)
                    gate = None
                    return
            handler.wfile.write(chunk)
            handler.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        if gate is not None:
            gate.finish(peer_closed=True)
            gate = None
        # otherwise the client gave up (timeout) - nothing to answer
    finally:
        if gate is not None:
            gate.finish(peer_closed=False)


class _Server(ThreadingHTTPServer):
    # The stdlib default backlog of 5 resets connections when many clients (tests, sweeps) connect at once.
    request_queue_size = 256
    daemon_threads = True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: "drop" and SSE end by closing
    server_version = "contextkit-sim/0.1"

    @property
    def sim(self) -> GatewaySimulator:
        return self.server.sim  # type: ignore[attr-defined,no-any-return]

    def do_POST(self) -> None:
        self.sim.handle(self)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            payload: Any = {"status": "ok", "api_base": self.sim.api_base}
        elif path == "/log":
            payload = [asdict(r) for r in self.sim.requests]
        elif path in ("/v1/models", "/models"):
            payload = {"object": "list", "data": [{"id": SIM_MODEL, "object": "model", "owned_by": "contextkit"}]}
        else:
            _send(self, faults.not_found(wire.OPENAI, path))
            return
        _send(self, wire.json_response(200, payload))

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the request log is the record
