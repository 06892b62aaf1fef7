"""Phrase and signal tables for ``contextkit.failures.classify`` (lower-case substrings, regexes, class names).

Kept apart from the decision logic so the evidence the classifier looks for can be read at a glance.
"""

from __future__ import annotations

import re

LIKELY_PAYLOAD_MIN_BYTES = 500_000

PAYLOAD_PHRASES = (
    "payload too large", "request entity too large", "entity too large", "body too large",
    "content too large", "request body exceeded", "request body is too large", "maximum request size",
    "request header fields too large", "header fields too large", "request_too_large",
    "maximum allowed number of bytes", "payload size exceeds", "client_max_body_size",
    "request size exceeds", "request too long",
    "request size is too large",  # LiteLLM's proxy (max_request_size_mb), 400 with "param": "content-length"
    "exceeds the request content length", "error 404.13",  # IIS request filtering (maxAllowedContentLength)
)  # fmt: skip
# A 413 about tokens per minute is a rate limit (Groq answers a request above its tier's TPM with 413)
TOKEN_RATE_PHRASES = ("tokens per minute", "tokens per min", "(tpm)", "tokens per day")
OVERFLOW_PHRASES = (
    "context length", "context window", "context_length_exceeded", "context-length-exceeded",
    "maximum context", "max context", "context limit",
    "prompt is too long", "prompt too long", "input too long", "input is too long", "request too large",
    "too many tokens", "too many input tokens", "token limit", "input token count", "maximum prompt length",
    "maximum number of tokens", "exceeds model", "reduce the length", "reduce your prompt",
    "messages too long", "conversation too long", "maximum input length", "prompt length",
    "exceeds the available context size", "input tokens exceed", "input length", "exceed_context_size_error",
    "tokens + `max_new_tokens` must be", "`inputs` must have less than", "maximum model length",
    "longer than the model's context length",
    "context_window_exceeded", "contextwindowexceeded",  # codes and litellm's class name: last, least telling
)  # fmt: skip
OVERFLOW_SUBJECTS = re.compile(r"\btokens?\b|\bcontext\b|\blength\b|\bprompt\b")
OVERFLOW_EXCESS = ("exceed", "too large", "too long", "limit", "maximum")
# A 400 about one field of the request (its type, its length, its name) or an unknown parameter:
# "string too long ... maximum length" there is about a tool description or a name, not the context.
# litellm maps some of these to ContextWindowExceededError, so they are checked before the class.
FIELD_ERROR_PHRASES = (
    "expected a string with maximum length", "expected an array with maximum length", "string_above_max_length",
    "array_above_max_length", "string too long", "array too long", "unrecognized request argument",
    "unknown parameter", "unsupported parameter", "unrecognized parameter", "extra inputs are not permitted",
    "additional properties are not allowed", "extra_forbidden", "string should have at most",
    "list should have at most", "string should match pattern", "does not match pattern", "unknown name",
    "invalid type for", "invalid value for",
)  # fmt: skip
# The field a provider names: OpenAI "Invalid 'tools[0].function.description': ...", Anthropic
# "tools.0.custom.name: String should ...", pydantic "Unknown parameter: 'foo'".
FIELD_NAME = re.compile(
    r"invalid (?:type for |value for )?'([^']{1,200})'|\b((?:messages|tools|system)\.\d+[\w.]*):|parameter:? '([^']{1,200})'"
)
# A message's own text over the provider's per-string limit (OpenAI: 10 MB): shrinking it helps.
CONTENT_FIELD = re.compile(r"^messages[\[.]\d+\]?\.content\b")
OUTPUT_LIMIT_PHRASES = (
    "completion tokens", "output tokens", "max_tokens is too large", "max_completion_tokens is too large",
)  # fmt: skip
WAF_SIGNALS = (
    "firewall", "security policy", "security rule", "blocked by", "cloudflare", "cf-ray", "mod_security",
    "modsecurity", "akamai", "proxy denied", "policy violation", "request blocked", "incapsula", "imperva",
    "sucuri", "attention required", "the requested url was rejected", "zscaler",
)  # fmt: skip
WAF_WORD = re.compile(r"\bwaf\b")
WAF_HEADERS = ("cf-ray", "cf-mitigated", "x-amzn-waf-action", "x-sucuri-id", "x-iinfo", "akamai-grn")
WAF_SERVERS = ("cloudflare", "akamaighost", "sucuri", "imperva")
HTML_AS_JSON_FINGERPRINTS = (
    "invalid character '<'", "deserialization failed", "failed to decode response body",
    "unexpected token '<'", "expecting value: line 1 column 1",
)  # fmt: skip
HTML_DOCUMENT = re.compile(r"<\s*(?:!doctype\s+html|html[\s>])")
# an HTML page JSON-escaped inside a proxy's error message (LiteLLM's proxy re-wrapping an upstream 403)
HTML_ESCAPED = re.compile(r"\\u003c\s*(?:!doctype\s+html|html\b)")
# headers a proxy copies from the upstream's reply: LiteLLM's proxy prefixes them with llm_provider-
UPSTREAM_CONTENT_TYPE = ("llm_provider-content-type",)
RATE_LIMIT_PHRASES = (
    "rate limit", "rate_limit", "ratelimit", "too many requests", "tokens per min", "requests per min",
    "tokens per day", "requests per day", "quota exceeded", "exceeded your current quota", "resource exhausted",
    "resource_exhausted", "throttl",
)  # fmt: skip
TIMEOUT_PHRASES = ("context deadline exceeded", "deadline exceeded", "timed out", "timeout", "read operation timed")
TIMEOUT_CLASSES = {
    "Timeout", "APITimeoutError", "TimeoutException", "ReadTimeout", "WriteTimeout", "ConnectTimeout",
    "PoolTimeout", "TimeoutError",
}  # fmt: skip
CONNECTION_PHRASES = (
    "unexpected eof", "connection reset", "broken pipe", "stream error", "server disconnected",
    "remote end closed connection", "remotedisconnected", "connection aborted", "connection error.",
    "connection closed", "peer closed connection", "incomplete chunked read", "econnreset", "epipe",
    "socket hang up", "eof occurred in violation of protocol", "stream ended before",
)  # fmt: skip
BARE_EOF = re.compile(r"\beof\b")
CONNECTION_CLASSES = {
    "ConnectionResetError", "BrokenPipeError", "ConnectionAbortedError", "RemoteProtocolError", "ReadError",
    "WriteError", "APIConnectionError", "RemoteDisconnected", "IncompleteRead",
    "ConnectionError", "NetworkError",
}  # fmt: skip
# The server was never reached: nothing about our payload can be inferred.
UNREACHABLE_PHRASES = (
    "connection refused", "all connection attempts failed", "name or service not known",
    "nodename nor servname", "no route to host", "temporary failure in name resolution",
)  # fmt: skip
UNREACHABLE_CLASSES = {"ConnectionRefusedError", "ConnectError", "gaierror"}
AUTH_PHRASES = (
    "invalid api key", "invalid_api_key", "incorrect api key", "api key not valid", "invalid x-api-key",
    "authentication", "unauthorized", "permission denied", "permission_denied", "invalid_request_error: invalid bearer",
    "missing api key", "no api key",
)  # fmt: skip
SERVER_PHRASES = (
    "internal server error", "service unavailable", "bad gateway", "gateway timeout", "overloaded",
    "server had an error", "temporarily unavailable", "upstream connect error",
)  # fmt: skip
SERVER_CLASSES = {"InternalServerError", "ServiceUnavailableError", "APIError", "BadGatewayError"}

# The window a provider names in its overflow message (lower-cased text), most specific first.
WINDOW_PATTERNS = tuple(
    re.compile(p)
    for p in (
        r'"n_ctx"\s*:\s*(\d+)',  # llama.cpp server JSON: exceed_context_size_error
        r"tokens \+ `max_new_tokens` must be <= (\d+)",  # Hugging Face TGI
        r"`inputs` must have less than (\d+) tokens",  # Hugging Face TGI
        r"maximum context length is (\d+)",  # OpenAI, vLLM, llama-cpp-python, DeepSeek, Azure, OpenRouter
        r"exceed context window of (\d+)",  # llama.cpp "Requested tokens (N) exceed context window of W"
        r"available context size \((\d+)",  # llama.cpp "exceeds the available context size (2048 tokens)"
        r"context window of (\d+)",
        r"maximum model length of (\d+)",  # vLLM
        r"maximum number of tokens allowed \((\d+)\)",  # Gemini
        r"maximum prompt length is (\d+)",  # xAI
        r"too large for model with (\d+) maximum context length",  # Mistral
        r"exceed context limit: [\d\s+]*> ?(\d+)",  # Anthropic input + max_tokens
        r"> ?(\d+) maximum",  # Anthropic "prompt is too long: N tokens > W maximum"
        r"input tokens exceed the configured limit of (\d+)",  # Azure Responses
        r"while limit is (\d+)",  # Cerebras
        r"prompt cannot exceed (\d+)",  # Cohere
    )
)

# A status written as a status: "HTTP 413", "Error code: 413", "StatusCode: 403", "status 413",
# "<title>413 ...", or a text that starts with "413 " - never digits inside ids or counts.
_STATUS_IN_TEXT = re.compile(
    r"(?:\bhttp(?:/\d(?:\.\d)?)?\s*|\bstatus(?:[ _-]?code)?\s*[:=]?\s*|\berror code\s*[:=]?\s*"
    r"|\bapi error:\s*status\s*|<title>\s*|^\s*)([1-5]\d\d)\b(?![.,-]?\w)",
    re.MULTILINE,
)
_RETRY_IN_TEXT = re.compile(r"(?:retry|try again) (?:after|in) (\d+(?:\.\d+)?)\s*(ms|s|sec|seconds)?\b")
