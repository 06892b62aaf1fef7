"""A loopback HTTP server that answers every POST with one recorded middlebox answer (status, headers,
body from ``tests/fixtures/middleboxes``), so litellm raises what it raised in front of the real server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "middleboxes"
# framing headers are the server's own business: the replay sets its own
_FRAMING = {"content-length", "connection", "transfer-encoding", "keep-alive"}


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8")))


def names() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.json"))


class ReplayServer:
    """``with ReplayServer(fixture) as server:`` then point litellm at ``server.origin`` (+ ``/v1``)."""

    def __init__(self, fixture: dict[str, Any]) -> None:
        self.fixture = fixture
        self.received: list[int] = []
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                replay.received.append(len(self.rfile.read(length)))
                body = str(replay.fixture["body"]).encode("utf-8")
                self.send_response(int(replay.fixture["status"]))
                for key, value in replay.fixture["headers"]:
                    if key.lower() not in _FRAMING:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
