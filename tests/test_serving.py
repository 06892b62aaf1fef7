"""``contextkit.serving``: the local HTTP service the simulator and the proxy both run."""

from __future__ import annotations

import http.client

import pytest

from contextkit.errors import ConfigError
from contextkit.serving import LocalService, ServiceHandler


class _Handler(ServiceHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        if self.path == "/json":
            self.send_json(201, {"name": self.service.name})
        elif self.path == "/bare":
            self.send_body(502, b"", content_type=None, headers=[("X-Why", "upstream")])
        else:
            self.send_stream_head(headers=[("X-Kind", "events")])
            self.send_events([b"data: 1\n\n", b"data: 2\n\n"])

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Service(LocalService):
    handler = _Handler
    not_running = "the test service is not running"

    def __init__(self) -> None:
        super().__init__("127.0.0.1", 0)
        self.name = "svc"


def _get(service: LocalService, path: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection(service.host, service.port, timeout=5)
    conn.request("GET", path)
    return conn.getresponse()


def test_the_port_is_known_only_while_running() -> None:
    service = _Service()
    with pytest.raises(ConfigError, match="the test service is not running"):
        service.port  # noqa: B018
    with service as running:
        assert running is service and service.running and service.port > 0
        assert service.start() is service  # a second start keeps the same server
        assert service.root_url == f"http://127.0.0.1:{service.port}"
    assert not service.running
    service.stop()  # stopping twice is harmless
    with pytest.raises(ConfigError):
        service.port  # noqa: B018


def test_the_handler_writes_json_bare_bodies_and_event_streams() -> None:
    with _Service() as service:
        json_reply = _get(service, "/json")
        assert json_reply.status == 201 and json_reply.getheader("Content-Type") == "application/json"
        assert json_reply.read() == b'{"name": "svc"}'
        bare = _get(service, "/bare")
        assert bare.status == 502 and bare.getheader("Content-Type") is None
        assert bare.getheader("X-Why") == "upstream" and bare.getheader("Content-Length") == "0"
        stream = _get(service, "/events")
        assert stream.getheader("Content-Type") == "text/event-stream" and stream.getheader("Content-Length") is None
        assert stream.getheader("Cache-Control") == "no-cache" and stream.getheader("X-Kind") == "events"
        assert stream.read() == b"data: 1\n\ndata: 2\n\n"
