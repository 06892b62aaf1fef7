"""classify_failure against real litellm exceptions: litellm over real HTTP to the gateway simulator.

Every failure kind for both wire formats (litellm's ``openai/`` route through the OpenAI SDK
and its ``anthropic/`` route through its own httpx handler), which map the same wire error to
different exception classes and statuses (measured once, pinned here).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import pytest

from contextkit import backend
from contextkit.failures.classify import Failure, FailureKind, classify_failure, classify_finish_reason
from contextkit.sim import OVERFLOW_STYLES, GatewaySimulator
from contextkit.sizing import request_bytes

K = FailureKind
ROUTES = ("openai", "anthropic")
SMALL = [{"role": "user", "content": "Hello there, simulator."}]


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewaySimulator]:
    with GatewaySimulator(timeout_sleep=1.0) as sim:
        yield sim


@contextmanager
def configured(gw: GatewaySimulator, **changes: Any) -> Iterator[None]:
    """Temporarily reconfigure the shared simulator."""
    before = {k: v for k, v in asdict(gw.config).items() if k in changes}
    gw.configure(**changes)
    try:
        yield
    finally:
        gw.configure(**before)


def _messages(nbytes: int) -> list[dict[str, Any]]:
    # varied words so tokens ~ bytes / 5; only the gateway cap matters for these sizes
    words = " ".join(f"w{i % 997}" for i in range(nbytes // 5))
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": words[:nbytes]}]


def _fail(gw: GatewaySimulator, route: str, messages: list[dict[str, Any]], **kw: Any) -> tuple[Exception, int]:
    """Call litellm and return the exception it raised plus the measured request size."""
    kwargs = gw.litellm_kwargs(route)
    size = request_bytes(messages, model=kwargs["model"])
    with pytest.raises(Exception) as info:  # any litellm exception: the classifier decides
        backend.completion(messages=messages, timeout=kw.pop("timeout", 5), **kwargs, **kw)
    return info.value, size


def _classify(exc: Exception, size: int, **kw: Any) -> Failure:
    failure = classify_failure(exc, request_bytes=size, **kw)
    # readable on failure: what litellm raised and how we read it
    print(type(exc).__mro__[:3], getattr(exc, "status_code", None), failure)
    return failure


# --- faults injected once (small body) -----------------------------------------------------

FAULTS = [
    # (fault, expected kind, rejected_bytes expected?)
    ("overflow", K.CONTEXT_OVERFLOW, True),
    ("413", K.PAYLOAD_TOO_LARGE, True),
    ("413-html", K.PAYLOAD_TOO_LARGE, True),
    ("waf403", K.WAF_REJECTION, True),
    ("bedrock403", K.WAF_REJECTION, True),
    ("drop", K.TRANSIENT, False),  # small request: a dropped connection is just a network error
    ("429", K.RATE_LIMIT, False),
    ("500", K.TRANSIENT, False),
    ("auth401", K.AUTH, False),
    ("auth403", K.AUTH, False),
]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("fault", "kind", "has_bytes"), FAULTS, ids=[f[0] for f in FAULTS])
def test_injected_fault(gw: GatewaySimulator, route: str, fault: str, kind: FailureKind, has_bytes: bool) -> None:
    gw.fail_next(fault)
    exc, size = _fail(gw, route, SMALL)
    assert gw.pending_faults() == []
    assert not gw.requests[-1].accepted
    failure = _classify(exc, size)
    assert failure.kind == kind, failure.reason
    assert failure.rejected_bytes == (size if has_bytes else None)
    assert failure.recoverable is has_bytes


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("style", ["openai", "anthropic"])
def test_overflow_shapes_for_both_routes(gw: GatewaySimulator, route: str, style: str) -> None:
    with configured(gw, context_window=50, overflow_style=style):
        exc, size = _fail(gw, route, _messages(2_000))
    assert gw.requests[-1].reason.startswith("context ")
    # litellm recognises these wordings itself; we must agree, by type or by text
    assert "ContextWindowExceededError" in {c.__name__ for c in type(exc).__mro__}
    failure = _classify(exc, size)
    assert (failure.kind, failure.rejected_bytes) == (K.CONTEXT_OVERFLOW, size)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("style", sorted(OVERFLOW_STYLES))
def test_overflow_every_provider_wording(gw: GatewaySimulator, route: str, style: str) -> None:
    # an overflow that litellm leaves as a generic 400 must still be an overflow for us (a bug seen elsewhere).
    with configured(gw, context_window=50, overflow_style=style):
        exc, size = _fail(gw, route, _messages(1_000))
    failure = _classify(exc, size)
    assert failure.kind == K.CONTEXT_OVERFLOW, f"{style}: {type(exc).__name__}: {exc}"


# --- the gateway's real body cap --------------------------------------------------------------

CAP_MODES = [
    ("413", K.PAYLOAD_TOO_LARGE, "proxy/gateway payload limit"),
    ("413-html", K.PAYLOAD_TOO_LARGE, "proxy/gateway payload limit"),
    ("waf403", K.WAF_REJECTION, "proxy/WAF rejection (403"),
    ("bedrock403", K.WAF_REJECTION, "proxy/WAF rejection (403"),
]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("mode", "kind", "reason"), CAP_MODES, ids=[m[0] for m in CAP_MODES])
def test_body_cap(gw: GatewaySimulator, route: str, mode: str, kind: FailureKind, reason: str) -> None:
    with configured(gw, max_body="64KB", reject_with=mode):
        exc, size = _fail(gw, route, _messages(100_000))
    record = gw.requests[-1]
    assert record.bytes > 64 * 1024
    assert not record.accepted
    failure = _classify(exc, size)
    assert failure.kind == kind
    assert failure.reason.startswith(reason)
    assert failure.rejected_bytes == size
    # our measurement is the OpenAI body; the Anthropic body differs a little but not in scale
    assert abs(size - record.bytes) < 0.05 * record.bytes


@pytest.mark.parametrize("route", ROUTES)
def test_drop_of_a_large_body_is_likely_payload(gw: GatewaySimulator, route: str) -> None:
    with configured(gw, max_body="512KB", reject_with="drop"):
        exc, size = _fail(gw, route, _messages(600_000))
    assert gw.requests[-1].status == 0  # closed with no response
    assert size > 500_000
    failure = _classify(exc, size)
    assert (failure.kind, failure.rejected_bytes) == (K.LIKELY_PAYLOAD, size)
    assert failure.reason.startswith("suspected payload limit (large history")


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("history_bytes", "kind"), [(499_999, K.TRANSIENT), (500_001, K.LIKELY_PAYLOAD)])
def test_drop_uses_history_bytes(gw: GatewaySimulator, route: str, history_bytes: int, kind: FailureKind) -> None:
    gw.fail_next("drop")
    exc, size = _fail(gw, route, SMALL)
    failure = classify_failure(exc, history_bytes=history_bytes, request_bytes=size)
    assert failure.kind == kind
    assert failure.rejected_bytes == (size if kind.recoverable else None)


@pytest.mark.parametrize("route", ROUTES)
def test_timeout_is_transient(gw: GatewaySimulator, route: str) -> None:
    gw.fail_next("timeout")  # the sim sleeps 1 s, then closes
    exc, size = _fail(gw, route, SMALL, timeout=0.3)
    failure = classify_failure(exc, request_bytes=size, history_bytes=5_000_000)
    assert failure.kind == K.TRANSIENT, failure.reason
    assert failure.reason == "timeout"


@pytest.mark.parametrize("route", ROUTES)
def test_rate_limit_carries_retry_after(gw: GatewaySimulator, route: str) -> None:
    gw.fail_next("429")
    exc, size = _fail(gw, route, SMALL)
    failure = classify_failure(exc, request_bytes=size)
    assert failure.kind == K.RATE_LIMIT
    assert failure.retryable
    assert failure.retry_after is not None


@pytest.mark.parametrize("route", ROUTES)
def test_finish_reason_length(gw: GatewaySimulator, route: str) -> None:
    gw.fail_next("length")
    response = backend.completion(messages=SMALL, timeout=5, **gw.litellm_kwargs(route))
    reason = response.choices[0].finish_reason
    failure = classify_finish_reason(reason)
    assert failure is not None
    assert failure.kind == K.OUTPUT_TRUNCATED
    ok = backend.completion(messages=SMALL, timeout=5, **gw.litellm_kwargs(route))
    assert classify_finish_reason(ok.choices[0].finish_reason) is None


@pytest.mark.parametrize("route", ROUTES)
def test_stream_drop_after_output_is_transient(gw: GatewaySimulator, route: str) -> None:
    gw.fail_next("stream_drop")
    kwargs = gw.litellm_kwargs(route)
    with pytest.raises(Exception) as info:
        for _chunk in backend.completion(messages=SMALL, timeout=5, stream=True, **kwargs):
            pass
    failure = classify_failure(info.value, history_bytes=2_000_000)
    assert failure.kind == K.TRANSIENT, f"{type(info.value).__name__}: {failure.reason}"


@pytest.mark.parametrize("route", ROUTES)
def test_annotated_exception_carries_rejected_bytes(gw: GatewaySimulator, route: str) -> None:
    # the session annotates the exception with the size it sent; classify finds it
    with configured(gw, max_body="64KB", reject_with="413"):
        exc, size = _fail(gw, route, _messages(100_000))
    exc.request_bytes = size  # type: ignore[attr-defined]
    wrapped = RuntimeError("turn 3 failed")
    wrapped.__cause__ = exc
    failure = classify_failure(wrapped)
    assert (failure.kind, failure.rejected_bytes) == (K.PAYLOAD_TOO_LARGE, size)


# --- a 400/422 with a given body: field errors are not overflows, every server's overflow is ---

NAME_TOO_LONG = (
    "Invalid 'messages[1].name': string too long. Expected a string with maximum length 64, but got a string "
    "with length 80 instead."
)
BODIES: list[tuple[str, str, Any, FailureKind, int | None]] = [
    # (id, status, body, kind, window named)
    ("tool description too long", "400", "Invalid 'tools[0].function.description': string too long. Expected a string with maximum length 1024, but got a string with length 1400 instead.", K.OTHER, None),
    ("message name too long", "400", {"error": {"message": NAME_TOO_LONG, "type": "invalid_request_error", "param": "messages[1].name", "code": "string_above_max_length"}}, K.OTHER, None),
    ("unknown parameter", "400", {"error": {"message": "Unknown parameter: 'max_length'.", "type": "invalid_request_error", "param": "max_length", "code": "unknown_parameter"}}, K.OTHER, None),
    ("tgi 422", "422", {"error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 2048. Given: 2000 `inputs` tokens and 100 `max_new_tokens`", "error_type": "validation"}, K.CONTEXT_OVERFLOW, 2048),
    ("vllm", "400", {"object": "error", "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.", "type": "BadRequestError", "param": None, "code": 400}, K.CONTEXT_OVERFLOW, 4096),
    ("vllm longer than", "400", {"object": "error", "message": "Input prompt (5000 tokens) is longer than the model's context length (4096 tokens).", "type": "BadRequestError", "param": None, "code": 400}, K.CONTEXT_OVERFLOW, None),
    ("llama.cpp server", "400", {"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 5965, "n_ctx": 2048}}, K.CONTEXT_OVERFLOW, 2048),
    ("llama.cpp requested tokens", "400", "Requested tokens (5965) exceed context window of 2048", K.CONTEXT_OVERFLOW, 2048),
    ("llama-cpp-python", "400", {"error": {"message": "This model's maximum context length is 2048 tokens. However, you requested 5981 tokens (5965 in the messages, 16 in the completion). Please reduce the length of the messages or completion.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}, K.CONTEXT_OVERFLOW, 2048),
]  # fmt: skip


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("status", "body", "kind", "window"), [b[1:] for b in BODIES], ids=[b[0] for b in BODIES])
def test_given_error_body(
    gw: GatewaySimulator, route: str, status: str, body: Any, kind: FailureKind, window: int | None
) -> None:
    # The real litellm exception, whatever class litellm picked (it calls some field errors overflows).
    gw.fail_next(status, body=body)
    exc, size = _fail(gw, route, SMALL)
    assert gw.requests[-1].reason == f"fault:{status}"
    failure = _classify(exc, size)
    assert failure.kind == kind, failure.reason
    assert failure.window_tokens == window
    assert failure.rejected_bytes == (size if kind.recoverable else None)


def test_litellm_calls_a_field_error_an_overflow(gw: GatewaySimulator) -> None:
    # Why the message decides and not the class: litellm's own mapping of the schema 400.
    gw.fail_next("400", body=NAME_TOO_LONG)
    exc, size = _fail(gw, "openai", SMALL)
    assert "ContextWindowExceededError" in {c.__name__ for c in type(exc).__mro__}
    assert _classify(exc, size).kind == K.OTHER
