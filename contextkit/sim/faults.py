"""Error responses copied from real providers, gateways and firewalls.

The envelope follows the route (OpenAI error object on ``/v1/chat/completions``, Anthropic
``{"type": "error", ...}`` on ``/v1/messages``); the wording follows the provider being imitated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contextkit.sim.wire import ANTHROPIC, Response, json_response

# provider -> (wording template, OpenAI-envelope code, error type); {w} = window, {t} = tokens
OVERFLOW_STYLES: dict[str, tuple[str, str | None, str]] = {
    "openai": (
        "This model's maximum context length is {w} tokens. However, your messages resulted in {t} tokens. "
        "Please reduce the length of the messages.",
        "context_length_exceeded",
        "invalid_request_error",
    ),
    "openai-responses": (
        "Your input exceeds the context window of this model. Please adjust your input and try again.",
        "context_length_exceeded",
        "invalid_request_error",
    ),
    "azure": (
        "This model's maximum context length is {w} tokens. However, you requested {t} tokens "
        "({t} in the messages, 0 in the completion). Please reduce the length of the messages or completion.",
        "context_length_exceeded",
        "invalid_request_error",
    ),
    "anthropic": ("prompt is too long: {t} tokens > {w} maximum", None, "invalid_request_error"),
    "gemini": (
        "The input token count ({t}) exceeds the maximum number of tokens allowed ({w}).",
        None,
        "INVALID_ARGUMENT",
    ),
    "bedrock": ("Input is too long for requested model.", None, "ValidationException"),
    "mistral": (
        "Prompt contains {t} tokens, too large for model with {w} maximum context length",
        None,
        "invalid_request_message_error",
    ),
    "xai": (
        "This model's maximum prompt length is {w} but the request contains {t} tokens.",
        None,
        "invalid_request_error",
    ),
    "groq": (
        "Please reduce the length of the messages or completion.",
        "context_length_exceeded",
        "invalid_request_error",
    ),
    "openrouter": (
        "This endpoint's maximum context length is {w} tokens. However, you requested about {t} tokens "
        '({t} of text input). Please reduce the length of either one, or use the "middle-out" transform '
        "to compress your prompt automatically.",
        None,
        "invalid_request_error",
    ),
    "deepseek": (
        "This model's maximum context length is {w} tokens. However, you requested {t} tokens "
        "({t} in the messages, 0 in the completion). Please reduce the length of the messages or completion.",
        "invalid_request_error",
        "invalid_request_error",
    ),
    "cohere": (
        "too many tokens: total number of tokens in the prompt cannot exceed {w} - received {t}. "
        "Try using a shorter prompt, or enabling prompt truncating.",
        None,
        "invalid_request_error",
    ),
}

REJECT_MODES = ("413", "413-html", "waf403", "bedrock403", "drop", "empty502")
CF_RAY = "8f1e2d3c4b5a6978-FRA"

NGINX_413 = (
    "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
    "<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)
CLOUDFLARE_403 = (
    '<!DOCTYPE html>\n<html lang="en-US">\n<head><title>Attention Required! | Cloudflare</title></head>\n'
    '<body>\n<div id="cf-wrapper">\n<h1>Sorry, you have been blocked</h1>\n'
    "<h2>You are unable to access api.example.com</h2>\n"
    "<p>This website is using a security service to protect itself from online attacks. The action you just "
    "performed triggered the security solution. There are several actions that could trigger this block "
    "including submitting a certain word or phrase, a SQL command or malformed data.</p>\n"
    f'<p>Cloudflare Ray ID: <strong class="font-semibold">{CF_RAY.split("-")[0]}</strong></p>\n'
    "<p>Performance &amp; security by Cloudflare</p>\n</div>\n</body>\n</html>\n"
)
BEDROCK_403 = "<html><head><title>Access Denied</title></head><body>Request blocked by security policy</body></html>"
# Apache + ModSecurity + OWASP CRS denying a request for its content (rule 932160, "cat /etc/passwd"):
# the plain Apache 403 page, nothing in it names the firewall or a size
APACHE_403 = (
    '<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">\n<html><head>\n<title>403 Forbidden</title>\n'
    "</head><body>\n<h1>Forbidden</h1>\n<p>You don't have permission to access this resource.</p>\n<hr>\n"
    "<address>Apache/2.4.62 (Debian) Server at 127.0.0.1 Port 8080</address>\n</body></html>\n"
)
NGINX_403 = (
    "<html>\r\n<head><title>403 Forbidden</title></head>\r\n<body>\r\n<center><h1>403 Forbidden</h1></center>\r\n"
    "<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)


def content_block(route: str, style: str) -> Response:
    """A firewall refusing a request for what it contains (``SimConfig.block_phrase``)."""
    if style == "nginx":
        return Response(403, NGINX_403.encode(), "text/html", (("Server", "nginx"),))
    return Response(403, APACHE_403.encode(), "text/html; charset=iso-8859-1", (("Server", "Apache/2.4.62 (Debian)"),))


def _error(route: str, status: int, message: str, etype: str, code: str | None = None, **headers: str) -> Response:
    hdrs = tuple((k.replace("_", "-"), v) for k, v in headers.items())
    if route == ANTHROPIC:
        return json_response(status, {"type": "error", "error": {"type": etype, "message": message}}, hdrs)
    return json_response(status, {"error": {"message": message, "type": etype, "param": None, "code": code}}, hdrs)


# vLLM counts the output the request asks for (max_tokens) against the window
VLLM_OVERFLOW = (
    "This model's maximum context length is {w} tokens. However, you requested {s} tokens ({t} in the messages, "
    "{o} in the completion). Please reduce the length of the messages or completion."
)


def overflow(route: str, style: str, tokens: int, window: int, output: int = 0) -> Response:
    if style == "vllm":
        message = VLLM_OVERFLOW.format(w=window, s=tokens + output, t=tokens, o=output)
        return _error(route, 400, message, "BadRequestError", None)
    template, code, etype = OVERFLOW_STYLES[style]
    message = template.format(w=window, t=tokens)
    if route == ANTHROPIC:
        etype = "invalid_request_error"
    return _error(route, 400, message, etype, code)


def gateway_reject(route: str, mode: str, size: int, cap: int | None) -> Response:
    """How a proxy in front of the provider refuses a request body."""
    if mode == "drop":
        return Response(drop=True)
    if mode == "empty502":  # Caddy's request_body max_size: the proxy fails reading the body, 502 and no body
        return Response(502, b"", "", (("Server", "Caddy"),))
    if mode == "413-html":
        return Response(413, NGINX_413.encode(), "text/html", (("Server", "nginx"),))
    if mode == "waf403":
        headers = (("Server", "cloudflare"), ("cf-ray", CF_RAY), ("cf-mitigated", "challenge"))
        return Response(403, CLOUDFLARE_403.encode(), "text/html; charset=UTF-8", headers)
    if mode == "bedrock403":
        return Response(403, BEDROCK_403.encode(), "text/html")
    limit = f" exceeds the limit of {cap} bytes" if cap else " exceeds the gateway limit"
    if route == ANTHROPIC:
        return _error(
            route, 413, f"Request exceeds the maximum allowed number of bytes: {size}{limit}.", "request_too_large"
        )
    return _error(
        route, 413, f"Request Entity Too Large: body of {size} bytes{limit}.", "request_too_large", "payload_too_large"
    )


def simple_fault(route: str, kind: str, retry_after: str = "0") -> Response:
    """429, 500, 503 (overloaded), a model that is gone (404) and the auth faults (``retry_after``: the
    429's ``Retry-After`` header, seconds or an HTTP-date)."""
    if kind == "429":
        message = "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 1s."
        etype = "rate_limit_error" if route == ANTHROPIC else "requests"
        return _error(route, 429, message, etype, "rate_limit_exceeded", Retry_After=retry_after)
    if kind == "500":
        etype = "api_error" if route == ANTHROPIC else "server_error"
        return _error(route, 500, "The server had an error while processing your request. Sorry about that!", etype)
    if kind == "503":
        etype = "overloaded_error" if route == ANTHROPIC else "server_error"
        return _error(route, 503, "The model is overloaded. Please try again later.", etype)
    if kind == "model_gone":
        message = "The model `sim-retired` does not exist or you do not have access to it."
        return _error(route, 404, message, "not_found_error" if route == ANTHROPIC else "invalid_request_error", "model_not_found")
    if kind == "auth401":
        if route == ANTHROPIC:
            return _error(route, 401, "invalid x-api-key", "authentication_error")
        message = "Incorrect API key provided: sim-key. You can find your API key at https://platform.openai.com/account/api-keys."
        return _error(route, 401, message, "invalid_request_error", "invalid_api_key")
    if kind == "auth403":
        etype = "permission_error" if route == ANTHROPIC else "invalid_request_error"
        return _error(
            route, 403, "Invalid API key: this key is not allowed to access the model.", etype, "invalid_api_key"
        )
    raise ValueError(f"unknown simple fault {kind!r}")


# a 400 that is about the request, not its size: nothing a compaction could fix
UNKNOWN_PARAMETER = "Unrecognized request argument supplied: frobnicate"
INVALID_INPUT_422 = "Input validation error: invalid request."


def client_error(route: str, body: str | Mapping[str, Any] | None = None, status: int = 400) -> Response:
    """A client error (400, or 422 as Hugging Face TGI sends) with a chosen body: a mapping is sent as
    JSON exactly as given; a string starting with ``{`` or ``<`` is the raw response body (JSON or an
    HTML page); any other string is the message inside the route's error envelope (a schema 400,
    TGI's 422, a vLLM wording ...). The default is an unknown-parameter 400 / an invalid-input 422."""
    if isinstance(body, Mapping):
        return json_response(status, dict(body))
    text = (UNKNOWN_PARAMETER if status == 400 else INVALID_INPUT_422) if body is None else body
    if text.lstrip().startswith("{"):
        return Response(status, text.encode("utf-8"), "application/json")
    if text.lstrip().startswith("<"):
        return Response(status, text.encode("utf-8"), "text/html")
    return _error(route, status, text, "invalid_request_error")


def server_error(route: str, message: str) -> Response:
    etype = "api_error" if route == ANTHROPIC else "server_error"
    return _error(route, 500, message, etype)


def not_found(route: str, path: str) -> Response:
    return _error(
        route, 404, f"Unknown path {path}; use POST /v1/chat/completions or POST /v1/messages", "not_found_error"
    )


def bad_request(route: str, message: str) -> Response:
    return _error(route, 400, message, "invalid_request_error")
