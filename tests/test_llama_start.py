"""LlamaServer.start checks that the server can answer, not only that it listens.

A llama.cpp wheel built with native CPU tuning on a CPU with AMX listens, then segfaults on the first
completion: every request of the session after it was "connection refused". The fake servers here
stand in for ``python -m llama_cpp.server`` (the real one is in tests/real).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from contextkit.sim.llama import LlamaServer

FAKE_SERVER = """#!{python}
import json, os, signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

port = int(sys.argv[sys.argv.index("--port") + 1])

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if {crash}:
            os.kill(os.getpid(), signal.SIGSEGV)
        body = json.dumps({{"choices": [{{"message": {{"role": "assistant", "content": "hi"}}}}]}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        print("request", *args, flush=True)

HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def fake_llama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, crash: bool) -> None:
    script = tmp_path / "python"
    script.write_text(FAKE_SERVER.format(python=sys.executable, crash=crash))
    script.chmod(0o755)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("CONTEXTKIT_LLAMA_PYTHON", str(script))
    monkeypatch.setenv("CONTEXTKIT_LLAMA_MODEL", str(model))


def test_a_server_that_dies_on_its_first_completion_fails_at_start_in_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_llama(tmp_path, monkeypatch, crash=True)
    server = LlamaServer(n_ctx=2048, startup_timeout=30)
    with pytest.raises(RuntimeError) as info:
        server.start()
    message = str(info.value)
    assert "died with status -11 on its first completion" in message
    assert "AMX" in message and "GGML_NATIVE=OFF" in message  # what to do about it
    assert server.process is None  # stopped, nothing left running


def test_a_server_that_answers_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_llama(tmp_path, monkeypatch, crash=False)
    with LlamaServer(n_ctx=2048, startup_timeout=30) as server:
        assert server.process is not None and server.process.poll() is None
        assert "request" in server.log()  # the warm-up completion reached it
