"""Table tests for contextkit.failures.classify: real provider/gateway error texts and constructed exceptions."""

from __future__ import annotations

import subprocess
import sys

import httpx
import openai
import pytest

from contextkit.failures.classify import (
    LIKELY_PAYLOAD_MIN_BYTES,
    Failure,
    FailureKind,
    classify_failure,
    classify_finish_reason,
    window_from_message,
)

K = FailureKind
OVER, PAY, WAF, LIKELY = K.CONTEXT_OVERFLOW, K.PAYLOAD_TOO_LARGE, K.WAF_REJECTION, K.LIKELY_PAYLOAD
RATE, AUTH, TRANS, OTHER = K.RATE_LIMIT, K.AUTH, K.TRANSIENT, K.OTHER

NGINX_413 = (
    "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
    "<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx/1.25.3</center>\r\n</body>\r\n</html>"
)
CLOUDFLARE_403 = (
    '<!DOCTYPE html>\n<!--[if lt IE 7]> <html class="no-js ie6 oldie" lang="en-US"> <![endif]-->\n'
    '<html class="no-js" lang="en-US"><head><title>Attention Required! | Cloudflare</title></head>'
    "<body><h1>Sorry, you have been blocked</h1><p>Cloudflare Ray ID: 8f1e2d3c4b5a6978</p></body></html>"
)
AKAMAI_403 = (
    "<HTML><HEAD>\n<TITLE>Access Denied</TITLE>\n</HEAD><BODY>\n<H1>Access Denied</H1>\n"
    'You don\'t have permission to access "http&#58;&#47;&#47;llm&#46;corp&#46;example&#47;v1&#47;chat" on this server.<P>\n'
    "Reference&#32;&#35;18&#46;2f1e3b17&#46;1732900000&#46;4a1b2c3\n</BODY>\n</HTML>"
)
BEDROCK_GO = (
    "operation error Bedrock Runtime: InvokeModel, https response error StatusCode: 403, RequestID: , "
    "deserialization failed, failed to decode response body, invalid character '<' looking for beginning of value"
)

# (provider / source, text, status, expected kind)
TABLE: list[tuple[str, str, int | None, FailureKind]] = [
    # --- context overflow: every provider phrasing ---
    ("openai chat", "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages.", 400, OVER),
    ("openai responses", "Your input exceeds the context window of this model. Please adjust your input and try again.", 400, OVER),
    ("openai json code", '{"error":{"message":"...","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}', 400, OVER),
    ("azure openai", "This model's maximum context length is 8192 tokens, however you requested 9000 tokens (8000 in your prompt; 1000 for the completion). Please reduce your prompt; or completion length.", 400, OVER),
    ("azure responses", "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 300000 tokens. Please reduce the length of the messages.", 400, OVER),
    ("anthropic", '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 250000 tokens > 200000 maximum"}}', 400, OVER),
    ("anthropic max_tokens+input", "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000, decrease input length or `max_tokens` and try again", 400, OVER),
    ("gemini", "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).", 400, OVER),
    ("vertex gemini", "400 The input token count (2097153) exceeds the maximum number of tokens allowed (2097152). [reason: INVALID_ARGUMENT]", None, OVER),
    ("vertex anthropic", 'Vertex_aiException - {"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 201234 tokens > 200000 maximum"}}', 400, OVER),
    ("xai", "This model's maximum prompt length is 131072 but the request contains 140000 tokens.", 400, OVER),
    ("mistral", "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length", 400, OVER),
    ("groq", '{"error":{"message":"Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}', 400, OVER),
    ("cohere", "too many tokens: total number of tokens in the prompt cannot exceed 4081 - received 5000. Try using a shorter prompt, or enabling prompt truncating.", 400, OVER),
    ("deepseek", "This model's maximum context length is 65536 tokens. However, you requested 70000 tokens (70000 in the messages, 0 in the completion). Please reduce the length of the messages or completion.", 400, OVER),
    ("bedrock invoke", "ValidationException: Input is too long for requested model.", 400, OVER),
    ("bedrock converse", "An error occurred (ValidationException) when calling the Converse operation: The model returned the following errors: Input is too long for requested model.", None, OVER),
    ("openrouter", 'This endpoint\'s maximum context length is 200000 tokens. However, you requested about 251234 tokens (251234 of text input). Please reduce the length of either one, or use the "middle-out" transform to compress your prompt automatically.', 400, OVER),
    ("vllm (status rule)", "The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure that `max_model_len` is no smaller than the number of text tokens.", 400, OVER),
    ("llama.cpp", "the request exceeds the available context size, try increasing it", 400, OVER),
    ("cerebras", "Please reduce your prompt; Current length is 9000 while limit is 8192", 400, OVER),
    ("tgi 422", "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 2048. Given: 2000 `inputs` tokens and 100 `max_new_tokens`", 422, OVER),
    ("tgi 422 json", '{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 2048. Given: 2000 `inputs` tokens and 100 `max_new_tokens`","error_type":"validation"}', 422, OVER),
    ("tgi inputs", "Input validation error: `inputs` must have less than 1024 tokens. Given: 1500", 422, OVER),
    ("vllm", "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.", 400, OVER),
    ("vllm input messages", "This model's maximum context length is 4096 tokens. However, you requested 1000 output tokens and your prompt contains at least 3097 input tokens, for a total of at least 4097 tokens. Please reduce the length of the input messages or the number of requested output tokens.", 400, OVER),
    ("vllm longer than", "Input prompt (5000 tokens) is longer than the model's context length (4096 tokens).", 400, OVER),
    ("llama.cpp json", '{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5965,"n_ctx":2048}}', 400, OVER),
    ("llama.cpp requested tokens", "Requested tokens (5965) exceed context window of 2048", 400, OVER),
    ("llama-cpp-python", "This model's maximum context length is 2048 tokens. However, you requested 5981 tokens (5965 in the messages, 16 in the completion). Please reduce the length of the messages or completion.", 400, OVER),
    ("openai message content over 10 MB", "Invalid 'messages[3].content': string too long. Expected a string with maximum length 10485760, but got a string with length 12000000 instead.", 400, OVER),
    ("groq 413 tpm", "Request too large for model `llama-3.1-8b-instant` in organization `org_01` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 12000, please reduce your message size and try again.", 413, RATE),  # a token rate, not the window
    ("generic", "context length exceeded", None, OVER),
    ("generic token limit", "token limit exceeded for this deployment", None, OVER),
    ("litellm str", "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: OpenAIException - prompt is too long: 210000 tokens > 200000 maximum", 400, OVER),
    # --- payload too large (gateways and providers) ---
    ("nginx 413 html", NGINX_413, 413, PAY),
    ("nginx 413 html, status only in text", NGINX_413, None, PAY),
    ("envoy", "Payload Too Large", 413, PAY),
    ("cloudflare 413 (not WAF)", "<html><head><title>413 Request Entity Too Large</title></head><body><center><h1>413 Request Entity Too Large</h1></center><hr><center>cloudflare</center></body></html>", 413, PAY),
    ("anthropic 413 json", '{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}', 413, PAY),
    ("anthropic 413 via litellm (status 400)", 'AnthropicException - {"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}', 400, PAY),
    ("aws api gateway", '{"message":"Request Too Long"}', 413, PAY),
    ("vertex body cap", "400 Request payload size exceeds the limit: 10485760 bytes.", 400, PAY),
    ("kong", '{"message":"Request size limit exceeded"}', 413, PAY),
    ("akamai 413", "HTTP/1.1 413 Request Entity Too Large", None, PAY),
    ("go net/http", "http: request body too large", None, PAY),
    ("generic 413", "HTTP 413 Payload Too Large", None, PAY),
    ("431", "431 Request Header Fields Too Large", None, PAY),
    ("431 status only", "", 431, PAY),
    # --- WAF / proxy block (403 + signals or HTML block page) ---
    ("waf firewall", "403 forbidden — blocked by firewall", None, WAF),
    ("cloudflare text", "HTTP 403: cloudflare challenge", None, WAF),
    ("cloudflare html", CLOUDFLARE_403, 403, WAF),
    ("akamai html", AKAMAI_403, 403, WAF),
    ("bedrock go sdk", BEDROCK_GO, None, WAF),
    ("html as json", "StatusCode: 403, invalid character '<' looking for beginning of value", None, WAF),
    ("bedrock html block page", "<html><head><title>Access Denied</title></head><body>Request blocked by security policy</body></html>", 403, WAF),
    ("modsecurity", "403 Forbidden: ModSecurity: Access denied with code 403 (phase 2).", None, WAF),
    ("f5 asm", "The requested URL was rejected. Please consult with your administrator. Your support ID is: 1234567890", 403, WAF),
    ("aws waf html", "<html>\r\n<head><title>403 Forbidden</title></head>\r\n<body>\r\n<center><h1>403 Forbidden</h1></center>\r\n</body>\r\n</html>", None, WAF),
    # --- negatives: rate limit, auth, timeouts, other ---
    ("rate limit text", "Rate limit exceeded: too many requests, retry after 20s", None, RATE),
    ("tpm 429", "tokens per minute limit exceeded", 429, RATE),
    ("openai tpm 'request too large'", "Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 45000. The input or output tokens must be reduced in order to run successfully.", 429, RATE),
    ("anthropic 429", '{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 40,000 input tokens per minute."}}', 429, RATE),
    ("gemini 429", "Resource has been exhausted (e.g. check quota).", 429, RATE),
    ("bedrock throttling", "ThrottlingException: Too many tokens, please wait before trying again.", None, RATE),
    ("openai 401", "Incorrect API key provided: sk-abc123. You can find your API key at https://platform.openai.com/account/api-keys.", 401, AUTH),
    ("anthropic 401", '{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}', 401, AUTH),
    ("plain 403 invalid key", "403 Forbidden: invalid_api_key", None, AUTH),
    ("plain 403 text", "403 Forbidden", None, AUTH),
    ("openai 403 json", '{"error":{"message":"Project proj_1 does not have access to model gpt-5","code":"model_not_found"}}', 403, AUTH),
    ("bedrock access denied", "AccessDeniedException: You don't have access to the model with the specified model ID.", 403, AUTH),
    ("gemini bad key (400)", "API key not valid. Please pass a valid API key.", 400, AUTH),
    ("go timeout", "context deadline exceeded", None, TRANS),
    ("go client timeout", 'Post "https://api.example.com/v1/chat/completions": context deadline exceeded (Client.Timeout exceeded while awaiting headers)', None, TRANS),
    ("408", "Request Timeout", 408, TRANS),
    ("openai 500", "The server had an error while processing your request. Sorry about that!", 500, TRANS),
    ("openai 503", "The server is overloaded or not ready yet.", 503, TRANS),
    ("anthropic 529", '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', 529, TRANS),
    ("502 html (not 403)", "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>", 502, TRANS),
    ("unknown parameter", "unknown parameter: foo", 400, OTHER),
    # --- a field too long is not the context too long (litellm calls some of these overflows) ---
    ("openai tool description too long", "Invalid 'tools[0].function.description': string too long. Expected a string with maximum length 1024, but got a string with length 1400 instead.", 400, OTHER),
    ("openai message name too long", "Invalid 'messages[1].name': string too long. Expected a string with maximum length 64, but got a string with length 80 instead.", 400, OTHER),
    ("openai name, litellm class text", "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: OpenAIException - Invalid 'messages[1].name': string too long. Expected a string with maximum length 64, but got a string with length 80 instead.", 400, OTHER),
    ("openai too many tools", "Invalid 'tools': array too long. Expected an array with maximum length 128, but got an array with length 140 instead.", 400, OTHER),
    ("openai user too long", '{"error":{"message":"Invalid \'user\': string too long. Expected a string with maximum length 64","code":"string_above_max_length"}}', 400, OTHER),
    ("openai tool name pattern", "Invalid 'tools[0].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", 400, OTHER),
    ("anthropic tool name length", '{"type":"error","error":{"type":"invalid_request_error","message":"tools.0.custom.name: String should have at most 64 characters"}}', 400, OTHER),
    ("unsupported parameter", "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", 400, OTHER),
    ("unknown parameter quoted", "Unknown parameter: 'max_length'.", 400, OTHER),
    ("extra inputs", "max_context_length: Extra inputs are not permitted", 400, OTHER),
    ("gemini unknown field", 'Invalid JSON payload received. Unknown name "max_length": Cannot find field.', 400, OTHER),
    ("tgi parameter", "Input validation error: `temperature` must be strictly positive", 422, OTHER),
    ("tgi max_new_tokens alone", "Input validation error: `max_new_tokens` must be <= 100. Given: 200", 422, OTHER),
    ("openai unrecognized arg", "Unrecognized request argument supplied: foo", 400, OTHER),
    ("model not found", "The model `gpt-9` does not exist or you do not have access to it.", 404, OTHER),
    ("file name too long", "open /tmp/a/very/long/path/name.txt: file name too long", None, OTHER),
    ("413 inside a request id", "request failed (request id: req_413a9f431b, trace 413-9c1d)", None, OTHER),
    ("413/431 inside token counts", "prompt used 4130 tokens, 431 cached", None, OTHER),
    ("openai max_tokens too large", "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided 100000.", 400, OTHER),
    ("anthropic max_tokens too large", "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-opus-4", 400, OTHER),
]  # fmt: skip


@pytest.mark.parametrize(("source", "text", "status", "kind"), TABLE, ids=[row[0] for row in TABLE])
def test_provider_error_table(source: str, text: str, status: int | None, kind: FailureKind) -> None:
    failure = classify_failure(text, status=status)
    assert failure.kind == kind, f"{source}: {failure.reason}"
    assert failure.reason


def test_table_is_large_and_covers_every_family() -> None:
    assert len(TABLE) >= 40
    assert {row[3] for row in TABLE} >= {OVER, PAY, WAF, RATE, AUTH, TRANS, OTHER}


# Reference cases from an earlier classifier. Its IsContextOverflowError / IsProxyWAFRejection were booleans; we
# check the kind. Deviations (our fixes) are marked.
OVERFLOW_VECTORS: list[tuple[str, int | None, bool]] = [
    ("This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.", None, True),
    ("Your input exceeds the context window of this model. Please adjust your input and try again.", None, True),
    ('{"error":{"code":"context_length_exceeded","message":"..."}}', None, True),
    ("prompt is too long: 250000 tokens > 200000 maximum", None, True),
    ("The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).", None, True),
    ("This request exceeds the maximum prompt length for the model.", None, True),
    ("Prompt contains 40000 tokens, too large for model with 32768 maximum context length", None, True),
    ("ValidationException: Input is too long for requested model.", None, True),
    ("Please reduce the length of the messages or completion.", None, True),
    ("invalid request: total tokens 300k exceed what the model supports", 400, True),
    # The earlier classifier also flagged this as payload (bare "413"); a 413 about prompt length is a token limit.
    ("send: API error: status 413 - prompt length above the limit", 413, True),
    ("input token count (99) exceeds the maximum number of tokens allowed", None, True),
    ("Rate limit exceeded: too many requests, retry after 20s", None, False),
    ("rate limit exceeded", None, False),
    ("tokens per minute limit exceeded", 429, False),
    ("invalid api key", 401, False),
    ("context deadline exceeded", None, False),
    ("unknown parameter: foo", 400, False),
    ("", None, False),
]  # fmt: skip


@pytest.mark.parametrize(("text", "status", "overflow"), OVERFLOW_VECTORS)
def test_reference_overflow_vectors(text: str, status: int | None, overflow: bool) -> None:
    assert (classify_failure(text, status=status).kind == OVER) is overflow


WAF_VECTORS: list[tuple[str | None, bool]] = [
    (None, False),
    ("403 Forbidden: invalid_api_key", False),
    ("403 forbidden — blocked by firewall", True),
    ("HTTP 403: cloudflare challenge", True),
    (BEDROCK_GO, True),
    ("StatusCode: 403, invalid character '<' looking for beginning of value", True),
    ("deserialization failed, invalid character '<'", False),  # no 403
    ("403 Forbidden", False),
]


@pytest.mark.parametrize(("text", "waf"), WAF_VECTORS)
def test_reference_waf_vectors(text: str | None, waf: bool) -> None:
    assert (classify_failure(text).kind == WAF) is waf


@pytest.mark.parametrize(
    ("text", "size", "kind"),
    [
        ("unexpected EOF", 500_001, LIKELY),
        ("unexpected EOF", 499_999, TRANS),
        # Deviation: the earlier classifier used `>= 500_000`; a suspected payload limit is a history larger than 500 KB.
        ("unexpected EOF", 500_000, TRANS),
        ("EOF", 600_000, LIKELY),
        ("error reading request body: EOF", 600_000, TRANS),  # the earlier classifier: not payload-likely
        ("read tcp 10.0.0.2:51234->10.0.0.1:443: read: connection reset by peer", 612 * 1024, LIKELY),
        ("write tcp 10.0.0.2:51234->10.0.0.1:443: write: broken pipe", 700_000, LIKELY),
        ("stream error: stream ID 3; INTERNAL_ERROR; received from peer", 700_000, LIKELY),
        ("stream error: stream ID 3; INTERNAL_ERROR; received from peer", 1_000, TRANS),
        ("connection reset by peer", None, TRANS),
    ],
)
def test_likely_payload_threshold(text: str, size: int | None, kind: FailureKind) -> None:
    assert LIKELY_PAYLOAD_MIN_BYTES == 500_000
    assert classify_failure(text, history_bytes=size).kind == kind


def test_likely_payload_reason_and_threshold_on_request_bytes() -> None:
    failure = classify_failure("connection reset by peer", history_bytes=612 * 1024)
    assert failure.reason == "suspected payload limit (large history 612.0 KB + connection reset)"
    assert failure.rejected_bytes is None  # size of the history is not the size of the request
    by_request = classify_failure("connection reset by peer", request_bytes=800_000)
    assert (by_request.kind, by_request.rejected_bytes) == (LIKELY, 800_000)


def test_reference_likely_payload_bedrock_vector_ignores_size() -> None:
    text = "operation error Bedrock Runtime: InvokeModel, https response error StatusCode: 403, RequestID: , deserialization failed, invalid character '<' looking for beginning of value"
    assert classify_failure(text, history_bytes=0).recoverable


# --- constructed exception objects ---------------------------------------------------------

REQ = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")


def _resp(status: int, text: str = "", headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, text=text, headers=headers or {}, request=REQ)


def test_openai_413_html_in_response_text_only() -> None:
    # litellm's openai route: str(e) is only "Error code: 413"; the HTML sits in response.text.
    exc = openai.APIStatusError("Error code: 413", response=_resp(413, NGINX_413), body=None)
    failure = classify_failure(exc, request_bytes=2_000_000)
    assert (failure.kind, failure.status, failure.rejected_bytes) == (PAY, 413, 2_000_000)
    assert failure.reason == "proxy/gateway payload limit (413)"
    assert "Request Entity Too Large" in failure.provider_message


def test_cf_ray_header_alone_makes_a_403_a_waf_rejection() -> None:
    exc = openai.APIStatusError("Error code: 403", response=_resp(403, "Forbidden", {"cf-ray": "8f1e-FRA"}), body=None)
    failure = classify_failure(exc)
    assert failure.kind == WAF
    assert failure.reason == "proxy/WAF rejection (403 + Cloudflare signals)"


def test_server_cloudflare_header_is_a_waf_signal() -> None:
    exc = openai.PermissionDeniedError(
        "Forbidden", response=_resp(403, "Forbidden", {"server": "cloudflare"}), body=None
    )
    assert classify_failure(exc).kind == WAF


def test_plain_permission_denied_is_auth() -> None:
    body = {"error": {"message": "You are not allowed to use this model", "type": "permission_error"}}
    exc = openai.PermissionDeniedError("Error code: 403", response=_resp(403, '{"error":{}}'), body=body)
    failure = classify_failure(exc, request_bytes=1234)
    assert (failure.kind, failure.rejected_bytes, failure.recoverable) == (AUTH, None, False)


def test_bad_request_plain_text_overflow_is_read_from_body() -> None:
    # openai route, text/plain 400: litellm raises a plain BadRequestError "Error code: 400".
    exc = openai.BadRequestError(
        "Error code: 400", response=_resp(400, "prompt is too long: 210000 tokens > 200000 maximum"), body=None
    )
    assert classify_failure(exc).kind == OVER


def test_context_window_exceeded_class_name_is_enough() -> None:
    class ContextWindowExceededError(openai.BadRequestError):
        pass

    exc = ContextWindowExceededError("Error code: 400", response=_resp(400, "{}"), body=None)
    failure = classify_failure(exc, request_bytes=42_000)
    assert (failure.kind, failure.rejected_bytes) == (OVER, 42_000)


def test_rate_limit_retry_after_from_headers() -> None:
    exc = openai.RateLimitError("Error code: 429", response=_resp(429, "slow down", {"retry-after": "7"}), body=None)
    failure = classify_failure(exc)
    assert (failure.kind, failure.retry_after, failure.retryable) == (RATE, 7.0, True)
    ms = openai.RateLimitError("429", response=_resp(429, "", {"retry-after-ms": "1500"}), body=None)
    assert classify_failure(ms).retry_after == 1.5


def test_retry_after_from_text() -> None:
    assert classify_failure("Rate limit exceeded: too many requests, retry after 20s").retry_after == 20.0


def _chained(outer: BaseException, *inner: BaseException) -> BaseException:
    """Build ``outer from inner[0] from inner[1] ...`` the way `raise ... from` does."""
    current = outer
    for exc in inner:
        current.__cause__ = exc
        current = exc
    return outer


def test_cause_chain_remote_protocol_error() -> None:
    # openai route, socket drop: InternalServerError("Connection error.") <- APIConnectionError <- RemoteProtocolError
    outer = openai.InternalServerError("Connection error.", response=_resp(500), body=None)
    exc = _chained(
        outer,
        openai.APIConnectionError(request=REQ),
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
    )
    assert classify_failure(exc, history_bytes=499_999).kind == TRANS
    failure = classify_failure(exc, history_bytes=500_001, request_bytes=510_000)
    assert (failure.kind, failure.rejected_bytes) == (LIKELY, 510_000)


def test_cause_chain_connection_reset_found_by_class_under_an_opaque_wrapper() -> None:
    exc = _chained(RuntimeError("request failed"), ConnectionResetError(104, "Connection reset by peer"))
    assert classify_failure(exc, history_bytes=600_000).kind == LIKELY
    implicit = RuntimeError("wrapped")
    implicit.__context__ = BrokenPipeError(32, "Broken pipe")
    assert classify_failure(implicit, history_bytes=600_000).kind == LIKELY


def test_connection_refused_is_never_a_payload_problem() -> None:
    exc = _chained(
        openai.APIConnectionError(request=REQ),
        httpx.ConnectError("All connection attempts failed"),
        ConnectionRefusedError(111, "Connection refused"),
    )
    assert classify_failure(exc, history_bytes=5_000_000).kind == TRANS


def test_timeouts_are_transient() -> None:
    assert classify_failure(openai.APITimeoutError(request=REQ), history_bytes=9_000_000).kind == TRANS
    assert classify_failure(httpx.ReadTimeout("timed out"), history_bytes=9_000_000).kind == TRANS
    assert classify_failure(TimeoutError()).kind == TRANS


def test_rejected_bytes_from_annotation_anywhere_in_the_chain() -> None:
    inner = openai.APIStatusError("Error code: 413", response=_resp(413, NGINX_413), body=None)
    inner.request_bytes = 3_145_728  # type: ignore[attr-defined]  # what the session does
    outer = _chained(RuntimeError("turn 2 failed"), inner)
    assert classify_failure(outer).rejected_bytes == 3_145_728
    # the explicit argument wins over the annotation
    assert classify_failure(outer, request_bytes=10).rejected_bytes == 10
    # non-recoverable kinds never carry rejected_bytes
    auth = openai.AuthenticationError("Error code: 401", response=_resp(401, "bad key"), body=None)
    auth.request_bytes = 99  # type: ignore[attr-defined]
    assert classify_failure(auth).rejected_bytes is None


def test_explicit_status_overrides_exception_status() -> None:
    assert classify_failure(ValueError("Payload Too Large"), status=413).status == 413
    assert classify_failure("Forbidden", status=401).kind == AUTH


def test_mid_stream_fallback_error() -> None:
    from contextkit import backend

    backend.litellm()
    from litellm.exceptions import APIConnectionError, MidStreamFallbackError

    original = APIConnectionError(message="Server disconnected", llm_provider="openai", model="m")
    after_output = MidStreamFallbackError(
        message="Stream ended before a finish_reason was received",
        model="m",
        llm_provider="openai",
        original_exception=original,
        generated_content="Hello from the mock",
    )
    # accepted and streaming: the body was not the problem, even for a big request
    assert classify_failure(after_output, history_bytes=2_000_000).kind == TRANS
    before_output = MidStreamFallbackError(
        message="Stream ended before a finish_reason was received",
        model="m",
        llm_provider="openai",
        original_exception=original,
        is_pre_first_chunk=True,
    )
    assert classify_failure(before_output, history_bytes=2_000_000).kind == LIKELY
    overflow_inside = MidStreamFallbackError(
        message="upstream error",
        model="m",
        llm_provider="openai",
        original_exception=ValueError('{"code": "context_length_exceeded"}'),
        generated_content="partial",
    )
    assert classify_failure(overflow_inside).kind == OVER


def test_unknown_and_empty_inputs() -> None:
    assert classify_failure(None).kind == OTHER
    assert classify_failure(ValueError("something odd")).kind == OTHER
    failure = classify_failure(KeyError("x"))
    assert isinstance(failure, Failure)
    assert failure.kind == OTHER


def test_broken_str_does_not_break_classification() -> None:
    class Weird(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert classify_failure(Weird()).kind == OTHER


@pytest.mark.parametrize("reason", ["length", "max_tokens", "LENGTH"])
def test_finish_reason_length_is_output_truncated(reason: str) -> None:
    failure = classify_finish_reason(reason)
    assert failure is not None
    assert failure.kind == K.OUTPUT_TRUNCATED
    assert not failure.recoverable
    assert not failure.retryable


@pytest.mark.parametrize("reason", ["stop", "tool_calls", None, "content_filter"])
def test_other_finish_reasons_are_not_failures(reason: str | None) -> None:
    assert classify_finish_reason(reason) is None


def test_kind_properties() -> None:
    assert {k for k in FailureKind if k.recoverable} == {OVER, PAY, WAF, LIKELY}
    assert {k for k in FailureKind if k.retryable} == {RATE, TRANS}
    assert FailureKind("payload_too_large") is PAY
    assert str(K.CONTEXT_OVERFLOW) == "context_overflow"


def test_classify_does_not_import_litellm() -> None:
    code = "import sys, contextkit.failures.classify; assert 'litellm' not in sys.modules; assert 'openai' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_is_fast() -> None:
    import time

    big = NGINX_413 * 200
    start = time.perf_counter()
    for _ in range(200):
        classify_failure(big, status=413)
        classify_failure("connection reset by peer", history_bytes=600_000)
    assert time.perf_counter() - start < 1.0


def test_status_body_pair() -> None:
    assert classify_failure((413, "")).kind == PAY
    assert classify_failure((403, CLOUDFLARE_403)).kind == WAF
    assert classify_failure((400, "prompt is too long: 5 tokens > 4 maximum")).kind == OVER
    assert classify_failure((401, "bad key"), status=None).status == 401


WINDOWS = [
    ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).", 4096),
    ('{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5965,"n_ctx":2048}}', 2048),
    ("Requested tokens (5965) exceed context window of 2048", 2048),
    ("the request exceeds the available context size (2048 tokens), try increasing it", 2048),
    ("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 2048. Given: 2000 `inputs` tokens and 100 `max_new_tokens`", 2048),
    ("Input validation error: `inputs` must have less than 1024 tokens. Given: 1500", 1024),
    ("The decoder prompt (length 5000) is longer than the maximum model length of 4096.", 4096),
    ("prompt is too long: 250000 tokens > 200000 maximum", 200_000),
    ("input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000, decrease input length", 200_000),
    ("The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).", 1_048_576),
    ("This model's maximum prompt length is 131072 but the request contains 140000 tokens.", 131_072),
    ("Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length", 32_768),
    ("Please reduce your prompt; Current length is 9000 while limit is 8192", 8192),
    ("the request exceeds the available context size, try increasing it", None),
    ("ValidationException: Input is too long for requested model.", None),
]  # fmt: skip


@pytest.mark.parametrize(("text", "window"), WINDOWS)
def test_window_named_by_the_overflow_message(text: str, window: int | None) -> None:
    assert window_from_message(text) == window
    failure = classify_failure(text, status=400)
    assert (failure.kind, failure.window_tokens) == (OVER, window)


def test_window_only_for_overflows() -> None:
    failure = classify_failure(
        "Invalid 'messages[1].name': string too long. Expected a string with maximum length 64", status=400
    )
    assert (failure.kind, failure.window_tokens, failure.rejected_bytes) == (OTHER, None, None)
    assert "messages[1].name" in failure.reason


def test_litellm_class_does_not_outvote_a_field_error() -> None:
    class ContextWindowExceededError(openai.BadRequestError):
        pass

    body = "Invalid 'tools[0].function.description': string too long. Expected a string with maximum length 1024, but got a string with length 1400 instead."
    exc = ContextWindowExceededError(
        f"ContextWindowExceededError: OpenAIException - {body}", response=_resp(400, body), body=None
    )
    failure = classify_failure(exc, request_bytes=42_000)
    assert (failure.kind, failure.rejected_bytes) == (OTHER, None)
    assert not failure.recoverable


def test_timeout_word_in_a_400_is_a_parameter_not_a_timeout() -> None:
    assert classify_failure("Unrecognized request argument supplied: timeout", status=400).kind == OTHER
    assert classify_failure("upstream request timeout", status=504).kind == TRANS


@pytest.mark.parametrize(
    ("error", "request_bytes", "drop"),
    [
        ("Connection error.", None, True),
        ("Server disconnected without sending a response.", 2_000_000, True),  # likely payload: still a drop
        ((500, "Internal server error"), None, False),  # an answer, not a drop
        ((429, "Rate limit reached"), None, False),
        ((400, "This model's maximum context length is 4096 tokens."), None, False),
    ],
)
def test_connection_drop_is_flagged_by_the_classifier(error: object, request_bytes: int | None, drop: bool) -> None:
    # evidence.judge reads Failure.connection_drop, not the wording of the reason
    assert classify_failure(error, request_bytes=request_bytes).connection_drop is drop
