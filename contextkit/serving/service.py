"""An HTTP server run in a daemon thread, and a handler base that writes JSON bodies and event streams.

``LocalService`` owns the lifecycle (start, stop, ``with``, the port once bound, the root URL); a
subclass names its handler class, its server class and the name of its thread. The server carries the
service as ``server.service``, so a handler reaches it as ``self.service``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

from contextkit.errors import ConfigError

__all__ = ["LocalService", "ServiceHandler"]


class ServiceHandler(BaseHTTPRequestHandler):
    """A request handler of a ``LocalService``: ``self.service``, JSON bodies, event streams."""

    @property
    def service(self) -> Any:
        return self.server.service  # type: ignore[attr-defined]

    def send_body(
        self,
        status: int,
        body: bytes,
        content_type: str | None = "application/json",
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        """A whole response: status, headers, ``Content-Length`` and the body. No ``content_type``: no
        ``Content-Type`` header (an empty 5xx from some proxies has none)."""
        self._send_head(status, content_type, headers)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status: int, data: Any) -> None:
        self.send_body(status, json.dumps(data, default=str).encode())

    def send_stream_head(
        self, status: int = 200, content_type: str | None = "text/event-stream", headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        """The head of a response whose body follows in pieces (no ``Content-Length``; not cached)."""
        self._send_head(status, content_type, headers)
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

    def _send_head(self, status: int, content_type: str | None, headers: Iterable[tuple[str, str]]) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for name, value in headers:
            self.send_header(name, value)

    def send_events(self, events: Iterable[bytes]) -> None:
        """Write each event as it comes (flushed: the client reads it before the next one exists)."""
        for event in events:
            self.wfile.write(event)
            self.wfile.flush()


class LocalService:
    """``with Service(...) as s:`` or ``s.start()`` ... ``s.stop()``: a threading HTTP server on
    ``host:port`` (port 0: any free port, ``s.port`` once started) served from a daemon thread."""

    handler: ClassVar[type[ServiceHandler]]
    server_class: ClassVar[type[ThreadingHTTPServer]] = ThreadingHTTPServer
    thread_name: ClassVar[str] = "contextkit-http"
    # what ``port`` says before start / after stop: how to start this service
    not_running: ClassVar[str] = "the service is not running; call start() or use it in a `with` block"

    def __init__(self, host: str, port: int) -> None:
        self.host, self._port = host, port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._server is not None:
            return self
        server = self.server_class((self.host, self._port), self.handler)
        server.daemon_threads = True
        server.service = self  # type: ignore[attr-defined]
        self._server = server
        self._port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self.thread_name}-{self._port}",
            daemon=True,
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

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        if self._server is None:
            raise ConfigError(self.not_running)
        return self._port

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"
