"""The simulator's HTTP side: the threading server, routing (POST to the two APIs, GET for health,
the log and the model list), reading a request and writing its response - a JSON body, or an event
stream written chunk by chunk, which a ``StreamGate`` may hold open after its first delta."""

from __future__ import annotations

import time
from dataclasses import asdict
from http.server import ThreadingHTTPServer
from typing import Any, Protocol

from contextkit.serving import ServiceHandler
from contextkit.sim import faults, wire
from contextkit.sim.config import SIM_MODEL, RequestRecord, SimConfig
from contextkit.sim.gate import StreamGate, peer_gone
from contextkit.sim.gateway import Outcome, Upstream, respond


class Gateway(Upstream, Protocol):
    """What the HTTP side needs of the ``GatewaySimulator``."""

    @property
    def api_base(self) -> str: ...

    @property
    def requests(self) -> list[RequestRecord]: ...

    @property
    def config(self) -> SimConfig: ...

    def handle(self, handler: ServiceHandler) -> None: ...

    def _next_seq(self) -> int: ...

    def _record(
        self, seq: int, route: str, path: str, body: bytes, out: Outcome, headers: dict[str, str] | None = None
    ) -> None: ...


def serve_post(sim: Gateway, handler: ServiceHandler) -> None:
    """Route one POST, answer it and log it (``sim.requests``)."""
    path = handler.path.split("?", 1)[0].rstrip("/")
    route = wire.ANTHROPIC if path.endswith("/messages") else wire.OPENAI
    seq = sim._next_seq()
    length = int(handler.headers.get("Content-Length") or 0)
    body = handler.rfile.read(length) if length > 0 else b""
    cfg = sim.config
    headers = {name.lower(): value for name, value in handler.headers.items()}
    if not (path.endswith(("/chat/completions", "/messages"))):
        out = Outcome(faults.not_found(route, path), "not found")
    else:
        try:
            out = respond(sim, route, body, cfg, seq, betas=headers.get("anthropic-beta", ""))
        except Exception as exc:  # noqa: BLE001 - a bug in the sim must still answer, not hang the client
            out = Outcome(faults.server_error(route, f"simulator error: {type(exc).__name__}: {exc}"), "sim error")
    sim._record(seq, route, path, body, out, headers)
    if out.sleep_then_drop:
        time.sleep(out.sleep_then_drop)
        return
    send_response(handler, out.response, out.gate, route == wire.ANTHROPIC)


def send_response(
    handler: ServiceHandler, resp: wire.Response, gate: StreamGate | None = None, anthropic: bool = False
) -> None:
    if resp.drop:
        handler.close_connection = True
        return
    try:
        # an empty 5xx from a proxy (Caddy) has no content type: resp.content_type is "" and none is sent
        if resp.chunks is None:
            handler.send_body(resp.status, resp.body, resp.content_type, resp.headers)
            return
        handler.send_stream_head(resp.status, resp.content_type, resp.headers)
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


class SimServer(ThreadingHTTPServer):
    # The stdlib default backlog of 5 resets connections when many clients (tests, sweeps) connect at once.
    request_queue_size = 256
    daemon_threads = True


class SimHandler(ServiceHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: "drop" and SSE end by closing
    server_version = "contextkit-sim/0.1"

    @property
    def sim(self) -> Gateway:
        return self.service  # type: ignore[no-any-return]

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
            send_response(self, faults.not_found(wire.OPENAI, path))
            return
        send_response(self, wire.json_response(200, payload))

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the request log is the record
