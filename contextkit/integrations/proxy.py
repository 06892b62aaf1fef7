"""``contextkit proxy``: a local HTTP server any client can point its base URL at.

It speaks the OpenAI chat-completions API (``POST /v1/chat/completions``) and the Anthropic messages
API (``POST /v1/messages``), JSON and event streams. Each client conversation (recognised by its
messages: clients resend their whole history) is a managed conversation of a ``Conversations``
registry: pre-flight, compaction, recovery and the archive work against the upstream (and
whatever gateway stands in front of it), ``recall`` is served to the model in-process and never
reaches the client. Every conversation's events go to one ``EventLog`` (``proxy.events``: a
dashboard in the same process watches it; ``GET /contextkit/events?since=N`` serves it as JSON to
one in another process).

A streamed request is answered as a stream once the turn is decided (retried, recovered): the
client gets the answer of the request that went through, never a half answer from one that failed.

Binding: loopback (127.0.0.1) by default, and the log says so. Another address needs
``allow_remote=True`` (``--allow-remote``) and an access token (``--token``) that every request must
carry (``Authorization: Bearer TOKEN`` or ``x-api-key: TOKEN``); the upstream key is then
``upstream_api_key``, never the client's. On loopback without a token the client's key goes upstream.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any, Self
from urllib.parse import parse_qs, urlparse

from contextkit.errors import AuthenticationFailed, ConfigError, ContextkitError, ProviderError, UsageError
from contextkit.events import EventLog
from contextkit.integrations.anthropic_wire import message_events, message_json, to_chat_request
from contextkit.integrations.conversations import Conversations
from contextkit.serving import LocalService, ServiceHandler
from contextkit.settings import Limits

__all__ = ["ProxyServer", "is_loopback", "run_proxy_cli"]

log = logging.getLogger("contextkit")
MAX_REQUEST_BYTES = 64 * 1024 * 1024  # a client body above this is refused before it is read


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _client_key(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization") or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return headers.get("x-api-key")


def _without_v1(url: str) -> str:
    return url[:-3] if url.endswith("/v1") else url


def _status(exc: BaseException) -> int:
    if isinstance(exc, AuthenticationFailed):
        return 401
    if isinstance(exc, UsageError):
        return 400
    if isinstance(exc, ProviderError):
        failure = getattr(exc, "failure", None)
        status = getattr(failure, "status", None)
        return int(status) if isinstance(status, int) and 400 <= status < 600 else 502
    return 500


class _Handler(ServiceHandler):
    protocol_version = "HTTP/1.1"
    server_version = "contextkit-proxy"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("proxy: " + format, *args)

    @property
    def proxy(self) -> ProxyServer:
        return self.service  # type: ignore[no-any-return]

    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if not self.proxy.authorised(self._headers()):
            return self._error(401, "missing or wrong access token (send it as the API key)", anthropic=False)
        if url.path == "/contextkit/events":
            since = int((parse_qs(url.query).get("since") or ["0"])[0] or 0)
            events = self.proxy.events.to_dicts()[since:]
            return self.send_json(200, {"events": events, "next": since + len(events)})
        if url.path in ("/health", "/contextkit/health"):
            return self.send_json(200, {"ok": True, "conversations": len(self.proxy.conversations.sessions)})
        self._error(404, f"no route {url.path}; the proxy serves POST /v1/chat/completions and /v1/messages", anthropic=False)

    def do_POST(self) -> None:
        path = urlparse(self.path).path.rstrip("/")
        anthropic = path.endswith("/messages")
        headers = self._headers()
        if not self.proxy.authorised(headers):
            return self._error(401, "missing or wrong access token (send it as the API key)", anthropic=anthropic)
        length = int(headers.get("content-length") or 0)
        if length > MAX_REQUEST_BYTES:
            return self._error(413, f"request body of {length} bytes is above the proxy's {MAX_REQUEST_BYTES}", anthropic=anthropic)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError as exc:
            return self._error(400, f"the body is not JSON: {exc}", anthropic=anthropic)
        if not isinstance(body, dict):
            return self._error(400, "the body must be a JSON object", anthropic=anthropic)
        stream = bool(body.get("stream"))
        try:
            if path.endswith("/chat/completions"):
                result = self.proxy.chat(body, headers)
                return self._sse(_chat_chunks(result)) if stream else self.send_json(200, result.model_dump(exclude_none=True))
            if anthropic:
                body.pop("stream", None)
                message = self.proxy.messages(body, headers)
                return self._sse(_anthropic_events(message)) if stream else self.send_json(200, message)
        except ContextkitError as exc:
            return self._error(_status(exc), str(exc), anthropic=anthropic)
        except Exception as exc:
            log.exception("proxy: request failed")
            return self._error(500, f"{type(exc).__name__}: {exc}", anthropic=anthropic)
        self._error(404, f"no route {path}; the proxy serves POST /v1/chat/completions and /v1/messages", anthropic=False)

    def _sse(self, events: Iterator[bytes]) -> None:
        # HTTP/1.1 keeps connections open; an event stream without a length ends when this one closes
        self.send_stream_head(headers=[("Connection", "close")])
        self.close_connection = True
        self.send_events(events)

    def _error(self, status: int, message: str, *, anthropic: bool) -> None:
        kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                413: "request_too_large"}.get(status, "api_error")  # fmt: skip
        if anthropic:
            self.send_json(status, {"type": "error", "error": {"type": kind, "message": message}})
        else:
            self.send_json(status, {"error": {"message": message, "type": kind, "code": status}})


def _chat_chunks(chunks: Any) -> Iterator[bytes]:
    for chunk in chunks:
        yield b"data: " + chunk.model_dump_json(exclude_none=True).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def _anthropic_events(message: dict[str, Any]) -> Iterator[bytes]:
    for name, data in message_events(message):
        yield f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


class ProxyServer(LocalService):
    """``with ProxyServer(upstream="http://127.0.0.1:8000/v1") as proxy:`` then point a client at
    ``proxy.base_url`` (OpenAI SDK) or ``proxy.anthropic_base_url`` (Anthropic SDK).

    ``upstream``: the OpenAI-compatible base URL (ending in ``/v1``); Anthropic requests go to the same
    host without the ``/v1`` (``anthropic_upstream`` overrides). ``limits``, ``archive``, ``events``
    and ``session_options`` go to every managed conversation (``Conversations``).
    """

    def __init__(
        self,
        upstream: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        allow_remote: bool = False,
        upstream_api_key: str | None = None,
        anthropic_upstream: str | None = None,
        limits: Limits | None = None,
        archive: Any = None,
        events: EventLog | None = None,
        **session_options: Any,
    ) -> None:
        parsed = urlparse(upstream or "")
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"upstream must be an http(s) URL such as http://127.0.0.1:8000/v1, got {upstream!r}")
        if not is_loopback(host):
            if not allow_remote:
                raise ConfigError(
                    f"refusing to listen on {host}: the proxy binds to loopback (127.0.0.1) unless told otherwise; "
                    "pass --allow-remote (allow_remote=True) together with --token TOKEN to accept other machines"
                )
            if not token:
                raise ConfigError(
                    f"refusing to listen on {host} without an access token: anyone who can reach it could spend "
                    "your upstream credits; pass --token TOKEN (clients send it as their API key)"
                )
        if token is not None and (not isinstance(token, str) or len(token) < 16):
            raise ConfigError("the access token must be a string of at least 16 characters (e.g. `openssl rand -hex 16`)")
        self.upstream = upstream.rstrip("/")
        self.anthropic_upstream = (anthropic_upstream or _without_v1(self.upstream)).rstrip("/")
        super().__init__(host, port)
        self.token = token
        self.upstream_api_key = upstream_api_key
        self.conversations = Conversations(limits=limits, archive=archive, events=events, **session_options)

    @property
    def events(self) -> EventLog:
        return self.conversations.events

    # lifecycle (LocalService: start, stop, `with`, port) --------------------------------------------
    handler = _Handler
    thread_name = "contextkit-proxy"
    not_running = "the proxy is not running; use `with ProxyServer(...) as proxy:` or proxy.start()"

    def start(self) -> Self:
        if not self.running:
            super().start()
            where = "loopback only: other machines cannot reach it" if is_loopback(self.host) else "reachable from other machines; requests need the access token"
            log.info("contextkit proxy listening on http://%s:%d (%s), upstream %s", self.host, self._port, where, self.upstream)
        return self

    def serve_forever(self) -> None:
        self.start()
        assert self._thread is not None
        try:
            self._thread.join()
        except KeyboardInterrupt:
            self.stop()

    def stop(self) -> None:
        super().stop()
        self.conversations.close()

    @property
    def anthropic_base_url(self) -> str:
        return self.root_url

    @property
    def base_url(self) -> str:
        return f"{self.anthropic_base_url}/v1"

    # requests -------------------------------------------------------------------------------------
    def authorised(self, headers: Mapping[str, str]) -> bool:
        if self.token is None:
            return True
        offered = _client_key(headers) or ""
        return hmac.compare_digest(offered.encode(), self.token.encode())

    def upstream_key(self, headers: Mapping[str, str]) -> str:
        if self.token is not None:
            return self.upstream_api_key or "none"
        return _client_key(headers) or self.upstream_api_key or "none"

    def chat(self, body: dict[str, Any], headers: Mapping[str, str]) -> Any:
        """A chat-completions request: litellm's response (``stream``: its chunks)."""
        messages = body.pop("messages", None)
        model = body.pop("model", None)
        if not isinstance(model, str) or not model:
            raise UsageError("the request needs 'model' (the upstream's model name, e.g. \"gpt-4o-mini\")")
        if not isinstance(messages, list) or not messages:
            raise UsageError("the request needs 'messages': a non-empty list of {'role', 'content'}")
        conversation_id = headers.get("x-contextkit-conversation") or None  # else: recognised by its messages
        body.pop("n", None)
        return self.conversations.completion(
            f"openai/{model}", messages or [], conversation_id=conversation_id, api_base=self.upstream,
            api_key=self.upstream_key(headers), **body,
        )  # fmt: skip

    def messages(self, body: dict[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
        """A messages-API request: the Anthropic message."""
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise UsageError("the request needs 'model' (the upstream's model name, e.g. \"claude-sonnet-4-5\")")
        messages, tools, params = to_chat_request(body)
        response = self.conversations.completion(
            f"anthropic/{model}", messages, conversation_id=headers.get("x-contextkit-conversation") or None,
            api_base=self.anthropic_upstream, api_key=self.upstream_key(headers), tools=tools or None, **params,
        )  # fmt: skip
        return message_json(response, model)


def run_proxy_cli(argv: list[str]) -> int:
    """``contextkit proxy --upstream URL [--host 127.0.0.1] [--port N] [--allow-remote --token T]``."""
    import argparse

    from contextkit.archive import Archive

    parser = argparse.ArgumentParser(prog="contextkit proxy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="the provider's OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    parser.add_argument("--port", type=int, default=8787, help="port to listen on (default 8787; 0: any free port)")
    parser.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (needs --token)")
    parser.add_argument("--token", default=None, help="access token every request must carry as its API key")
    parser.add_argument("--upstream-api-key", default=None, help="the key sent upstream (default: the client's, on loopback)")
    parser.add_argument("--archive", default=None, help="SQLite archive file (default: the per-user archive)")
    parser.add_argument("--max-payload", default=None, help="the gateway's body cap if known, e.g. 128KB")
    parser.add_argument("--context-window", type=int, default=None, help="the model's window in tokens if known")
    args = parser.parse_args(argv)
    limits_kw: dict[str, Any] = {}
    if args.max_payload:
        limits_kw["max_payload"] = args.max_payload
    if args.context_window:
        limits_kw["context_window"] = args.context_window
    try:
        proxy = ProxyServer(
            args.upstream, host=args.host, port=args.port, token=args.token, allow_remote=args.allow_remote,
            upstream_api_key=args.upstream_api_key, limits=Limits(**limits_kw) if limits_kw else None,
            archive=Archive(args.archive) if args.archive else None,
        )  # fmt: skip
    except ConfigError as exc:
        print(f"contextkit proxy: {exc}", flush=True)
        return 2
    proxy.start()
    print(f"contextkit proxy on {proxy.base_url} (OpenAI) and {proxy.anthropic_base_url} (Anthropic), upstream {proxy.upstream}"
          + ("" if is_loopback(proxy.host) else " - reachable from other machines, token required"), flush=True)  # fmt: skip
    proxy.serve_forever()
    return 0
