"""Package surface: public API, light import, settings, sizes, messages."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import contextkit
from contextkit import ConfigError, InvalidMessageError, Limits, Message, ToolCall, from_wire, parse_size
from contextkit.messages import message_from_dict, message_to_dict, to_wire
from contextkit.sizing import RequestMeter, format_size, request_bytes

PUBLIC = {
    "Archive",
    "ArchiveError",
    "AsyncReplyStream",
    "AuthenticationFailed",
    "ConfigError",
    "ContextkitError",
    "ContextkitRuntimeError",
    "EventLog",
    "Failure",
    "FailureKind",
    "InvalidMessageError",
    "Limits",
    "Message",
    "Origin",
    "PayloadFloorError",
    "ProviderError",
    "RecallValidationError",
    "RecoveryFailedError",
    "Reply",
    "ReplyStream",
    "Session",
    "Tool",
    "ToolCall",
    "ToolResult",
    "UsageError",
    "__version__",
    "acompletion",
    "completion",
    "classify_failure",
    "format_size",
    "from_wire",
    "offline",
    "parse_size",
    "repair_tool_pairing",
}


def test_public_api_is_what_we_think() -> None:
    assert set(contextkit.__all__) == PUBLIC
    assert contextkit.__all__ == sorted(contextkit.__all__)
    for name in contextkit.__all__:
        assert hasattr(contextkit, name), name


def test_what_left_the_top_level_stays_importable_from_its_module() -> None:
    """Helpers that duplicate a method, low-level meters and exceptions contextkit never raises are not
    part of the top level, but code written against them keeps working from their modules."""
    from contextkit.errors import SummaryRejected
    from contextkit.messages import to_wire as to_wire_fn
    from contextkit.sizing import RequestMeter as Meter
    from contextkit.sizing import request_bytes as bytes_fn

    for name in ("to_wire", "RequestMeter", "request_bytes", "SummaryRejected"):
        assert name not in contextkit.__all__
    assert callable(to_wire_fn) and callable(bytes_fn) and isinstance(Meter, type)
    assert issubclass(SummaryRejected, contextkit.ContextkitRuntimeError)
    assert contextkit.ReplyStream.__module__ == "contextkit.engine.streaming"


def test_import_is_light() -> None:
    code = (
        "import sys, contextkit, json; "
        "print(json.dumps([m for m in ('litellm', 'polars', 'altair', 'ipywidgets', 'tiktoken', 'openai') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
    assert out.stderr == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5MB", 5_242_880),
        ("5mb", 5_242_880),
        ("5 MB", 5_242_880),
        ("5M", 5_242_880),
        ("512KB", 524_288),
        ("512K", 524_288),
        ("2.5MB", 2_621_440),
        ("1GB", 1_073_741_824),
        ("1024B", 1024),
        ("5", 5_242_880),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["garbage", "-5", "0", "", "5 parsecs", "1e5"])
def test_parse_size_rejects_with_accepted_forms(bad: str) -> None:
    with pytest.raises(ConfigError, match="512KB"):
        parse_size(bad)


def test_format_size() -> None:
    assert [format_size(n) for n in (512, 2048, 5_242_880, 2_621_440, 1_073_741_824)] == [
        "512 B",
        "2.0 KB",
        "5.0 MB",
        "2.5 MB",
        "1.0 GB",
    ]


def test_limits_from_env_and_overrides_never_mutate_env() -> None:
    env = {
        "CONTEXTKIT_MAX_PAYLOAD": "512KB",
        "CONTEXTKIT_EMERGENCY_KEEP_MESSAGES": "6",
        "CONTEXTKIT_COMPACT_MODEL": "openai/x",
    }
    limits = Limits.from_env(env)
    assert (limits.payload_cap, limits.emergency_keep_messages, limits.compact_model) == (524_288, 6, "openai/x")
    assert Limits.from_env(env, max_payload="128KB").payload_cap == 131_072
    assert env["CONTEXTKIT_MAX_PAYLOAD"] == "512KB"


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        ("CONTEXTKIT_MAX_PAYLOAD", "-1", "CONTEXTKIT_MAX_PAYLOAD"),
        ("CONTEXTKIT_MAX_PAYLOAD", "abc", "512KB"),
        ("CONTEXTKIT_MAX_PAYLOAD", "0", "greater than zero"),
        ("CONTEXTKIT_MAX_RECOVERY_ATTEMPTS", "x", "whole number"),
        ("CONTEXTKIT_CONTEXT_WINDOW", "0", ">= 1"),
    ],
)
def test_absurd_env_values_are_clear_config_errors(name: str, value: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        Limits.from_env({name: value})


def test_message_wire_round_trip_and_metadata_stays_off_the_wire() -> None:
    call = ToolCall("c1", "read_file", '{"path": "a.py"}')
    history = [
        Message.system("s"),
        Message.user("look", images=("data:image/png;base64,AAAA",)),
        Message.assistant("", [call], turn=1),
        Message.tool("c1", "body", name="read_file", path="a.py", lines=(1, 9), preserve_verbatim=True),
    ]
    wire = [to_wire(m) for m in history]
    assert wire[2]["content"] is None and wire[2]["tool_calls"][0]["function"]["name"] == "read_file"
    assert "preserve_verbatim" not in json.dumps(wire) and 'a.py",' not in json.dumps(wire[3])
    assert wire[1]["content"][1]["type"] == "image_url"
    back = [from_wire(w) for w in wire]
    assert [m.content for m in back] == ["s", "look", "", "body"]
    assert [message_from_dict(message_to_dict(m)) for m in history] == history


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"content": "x"}, "role"),
        ({"role": "boss", "content": "x"}, "role"),
        ({"role": "tool", "content": "x"}, "tool_call_id"),
        ({"role": "user"}, "content"),
        ({"role": "user", "content": 5}, "content"),
        ("hello", "dict"),
        ({"role": "user", "content": "x", "tool_calls": [{"id": "a", "function": {"name": "f"}}]}, "only assistant"),
    ],
)
def test_malformed_messages_name_the_problem(raw: object, needle: str) -> None:
    with pytest.raises(InvalidMessageError, match=needle):
        from_wire(raw, index=3)  # type: ignore[arg-type]


def test_meter_equals_request_bytes_and_counts_tokens_like_litellm() -> None:
    from contextkit import backend

    history = [Message.system("be brief"), Message.user("héllo wörld ✓"), Message.assistant("hi")]
    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]
    meter = RequestMeter("gpt-4o")
    m = meter.measure(history, tools=tools)
    assert m.bytes == request_bytes(history, tools=tools, model="gpt-4o")
    plain = meter.measure(history)
    assert plain.tokens == backend.token_counter("gpt-4o", [to_wire(x) for x in history])


@pytest.mark.parametrize("model", ["gpt-4o", "openai/sim-model", "anthropic/claude-sonnet-4-20250514", "gpt-4"])
def test_per_message_tokens_match_litellm(model: str) -> None:
    from contextkit import backend
    from contextkit.sizing import message_tokens

    messages = [
        Message.user("hello world"),
        Message.assistant("héllo ✓ naïve café " * 40),
        Message.system(""),
        Message("user", "x", name="bob"),
        Message.assistant("", [ToolCall("c1", "read_file", '{"path": "a.py"}')]),
        Message.tool("c1", "file body\n" * 30),
        # counted without litellm (a speed-up: litellm's counter sets itself up on every call): the same formula
        Message.assistant("let me look ✓", [ToolCall("c2", "grep", '{"q": "naïve"}'), ToolCall("c3", "ls", "{}")]),
        Message.tool("c2", "", name="grep"),
        Message.tool("c3", "a.py\nb.py", name="ls", path="."),
        Message("user", "hi", name=""),
    ]
    for m in messages:
        assert message_tokens(m, model) == backend.token_counter(model, [to_wire(m)]) - 3, m


def test_truncate_to_tokens_never_exceeds_the_budget() -> None:
    from contextkit.sizing import text_tokens, truncate_to_tokens

    text = "checksum timeout store ✓ naïve " * 400
    for budget in (1, 7, 100, 300, 1500, 10_000):
        cut = truncate_to_tokens(text, budget)
        assert text.startswith(cut)
        assert text_tokens(cut) <= budget
        if text_tokens(text) > budget:
            assert text_tokens(text[: len(cut) + 8]) > budget  # and it is (nearly) the longest such prefix
