"""``GatewaySimulator``: a real HTTP server on 127.0.0.1 that plays provider + gateway.

litellm talks to it over real HTTP (OpenAI chat completions and Anthropic messages, JSON and
SSE). In front of the scripted model sits a simulated gateway: a body-size cap checked on
Content-Length (like nginx or a WAF, before any parsing), a context window counted with
tiktoken, an output cap, latency and one-shot faults. Behind the gateway, a provider-style prompt
cache (``gw.cache``, ``contextkit.sim.cache``) reports cached prompt tokens in each route's usage
fields. Every request is logged as a ``RequestRecord`` (with its cached and newly cached tokens).

This module is the simulator's API: lifecycle, addresses, settings, faults and the log. What it
answers to a request is ``contextkit.sim.gateway``; the HTTP server and handler are ``contextkit.sim.handler``.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from dataclasses import replace
from typing import Any

from contextkit.errors import ConfigError
from contextkit.serving import LocalService, ServiceHandler
from contextkit.sim.cache import PromptCache
from contextkit.sim.config import (
    BODY_FAULTS,
    CONFIG_KEYS,
    FAULT_KINDS,
    SIM_MODEL,
    STREAM_FAULTS,
    SUMMARY_MODES,
    FaultBody,
    RequestRecord,
    SimConfig,
)
from contextkit.sim.gate import StreamGate
from contextkit.sim.gateway import Outcome
from contextkit.sim.handler import SimHandler, SimServer, serve_post

_CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})

__all__ = ["FAULT_KINDS", "SUMMARY_MODES", "GatewaySimulator", "RequestRecord", "SimConfig", "StreamGate"]


class GatewaySimulator(LocalService):
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
        self._headers: dict[int, dict[str, str]] = {}
        self._seq = 0
        self.cache = PromptCache(min_tokens=self._config.cache_min_tokens, ttl=self._config.cache_ttl)
        self.record_bodies = record_bodies
        self._gate: StreamGate | None = None
        super().__init__(host, port)

    # lifecycle (LocalService: start, stop, `with`, running, port) -------------------------------
    handler = SimHandler
    server_class = SimServer
    thread_name = "sim"
    not_running = "the simulator is not running; use `with GatewaySimulator() as gw:` or gw.start()"

    # addresses ---------------------------------------------------------------------------------
    @property
    def anthropic_api_base(self) -> str:
        return self.root_url

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
            self._headers.clear()
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

    def _stream_gate(self) -> StreamGate | None:
        with self._lock:
            return self._gate

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
            self._headers.clear()
            self._seq = 0

    def body(self, seq: int) -> bytes:
        """The raw body of request ``seq`` (only with ``record_bodies=True``)."""
        with self._lock:
            if seq not in self._bodies:
                raise ConfigError(f"no body stored for request {seq}; create the simulator with record_bodies=True")
            return self._bodies[seq]

    def headers(self, seq: int) -> dict[str, str]:
        """The headers of request ``seq`` as received, names lower-cased, credentials (``authorization``,
        ``x-api-key``, ``api-key``) replaced by ``"<redacted>"`` (only with ``record_bodies=True``)."""
        with self._lock:
            if seq not in self._headers:
                raise ConfigError(f"no headers stored for request {seq}; create the simulator with record_bodies=True")
            return dict(self._headers[seq])

    def _next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def _record(
        self, seq: int, route: str, path: str, body: bytes, out: Outcome, headers: dict[str, str] | None = None
    ) -> None:
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
                self._headers[seq] = {
                    name: "<redacted>" if name in _CREDENTIAL_HEADERS else value for name, value in (headers or {}).items()
                }

    # request handling (contextkit.sim.handler, contextkit.sim.gateway) ---------------------------
    def handle(self, handler: ServiceHandler) -> None:
        serve_post(self, handler)
