"""Hostile and malformed input: each case ends in a clear error naming what is wrong, or in a
defined, documented behaviour. Real sessions talk to the simulator over HTTP; the archive is real
SQLite. Hypothesis fuzzes the public entry points with a fixed, derandomized budget (a long
variant runs with ``--run-slow``).

Decided behaviour for text that is not valid Unicode: ``bytes`` are refused (decode them first);
a ``str`` carrying lone surrogates (``surrogateescape`` decoding of invalid UTF-8) is accepted,
measured, archived and kept byte-exact in the history and the archive, and goes on the wire with
each lone surrogate replaced by U+FFFD (same UTF-8 size), so no encoder or provider chokes on it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.logcheck import assert_known_limits_respected
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextkit import Limits, Message, ToolCall
from contextkit.archive import Archive
from contextkit.errors import (
    ConfigError,
    InvalidMessageError,
    PayloadFloorError,
    RecallValidationError,
    UsageError,
)
from contextkit.events import NoticeEvent
from contextkit.failures.classify import Failure, classify_failure
from contextkit.markers import key_for, marker
from contextkit.messages import from_wire
from contextkit.policy.expand import expand_markers
from contextkit.policy.pairing import find_orphans, repair_tool_pairing
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace
from contextkit.sizing import parse_size
from contextkit.tools import ToolResult

FAST = settings(
    max_examples=60, derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
LONG = settings(
    max_examples=3_000, derandomize=False, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
BAD_TEXT = "invalid utf-8 \udcff\udcfe from surrogateescape, a lone \ud800 and a reversed pair \udc00\ud800"


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewaySimulator]:
    with GatewaySimulator(record_bodies=True) as sim:
        yield sim


def session_for(gw: GatewaySimulator, sim: dict[str, Any] | None = None, **kwargs: Any) -> Session:
    gw.reset(**(sim or {}))
    kw = gw.litellm_kwargs()
    model = kw.pop("model")
    kwargs.setdefault("archive", Archive.in_memory(session_id="h"))
    kwargs.setdefault("limits", Limits(context_window=1_000_000, retry_backoff=0.0, request_timeout=5))
    return Session(model, session_id="h", status=None, **kw, **kwargs)


# malformed messages ---------------------------------------------------------------------------------

BAD_MESSAGES: list[tuple[Any, str]] = [
    ({"role": "wizard", "content": "x"}, "role 'wizard' is not one of"),
    ({"content": "x"}, "missing 'role'"),
    ({"role": ["user"], "content": "x"}, "is not one of"),
    ({"role": "user"}, "needs 'content'"),
    ({"role": "user", "content": 5}, "content must be a string"),
    ({"role": "user", "content": b"\xff\xfe bytes"}, "content must be a string"),
    ({"role": "user", "content": [{"type": "audio"}]}, "unsupported content part"),
    ({"role": "user", "content": ["plain"]}, "content parts must be dicts"),
    ({"role": "tool", "content": "x"}, "tool_call_id"),
    ({"role": "user", "content": "x", "tool_calls": [{"id": "a", "function": {"name": "f"}}]}, "only assistant"),
    ({"role": "assistant", "tool_calls": "abc"}, "tool_calls must be a list"),
    ({"role": "assistant", "tool_calls": True}, "tool_calls must be a list"),
    ({"role": "assistant", "tool_calls": ["abc"]}, "each tool call must be a dict"),
    ({"role": "assistant", "tool_calls": [{"id": "a", "function": {}}]}, "no function name"),
    ({"role": "user", "content": "x", "name": {"a": 1}}, "'name' must be a string"),
    ("just a string", "expected a dict"),
    (None, "expected a dict"),
    (42, "expected a dict"),
]


@pytest.mark.parametrize(("raw", "phrase"), BAD_MESSAGES, ids=[str(i) for i in range(len(BAD_MESSAGES))])
def test_malformed_messages_are_refused_clearly_and_change_nothing(gw: GatewaySimulator, raw: Any, phrase: str) -> None:
    session = session_for(gw)
    session.add_messages([{"role": "user", "content": "first"}])
    before = session.history
    with pytest.raises(InvalidMessageError, match="message") as info:
        session.add_messages([{"role": "user", "content": "valid one"}, raw])
    assert phrase in str(info.value)
    assert "message 1" in str(info.value)  # names which message
    with pytest.raises(InvalidMessageError):
        session.send([raw])
    assert session.history == before  # nothing half-appended
    assert gw.requests == []  # nothing was sent


@pytest.mark.parametrize("value", ["hello", {"role": "user", "content": "x"}, None, 5, b"bytes"])
def test_add_messages_and_send_refuse_wrong_container_types(gw: GatewaySimulator, value: Any) -> None:
    session = session_for(gw)
    with pytest.raises(InvalidMessageError, match="add_messages"):
        session.add_messages(value)
    if not isinstance(value, str | dict):
        with pytest.raises(InvalidMessageError, match="send"):
            session.send(value)
    assert session.history == []


def test_orphan_tool_result_is_repaired_and_archived(gw: GatewaySimulator) -> None:
    session = session_for(gw)
    orphan = "ORPHAN RESULT " * 40
    session.add_messages(
        [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "call_nobody", "content": orphan},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
        ]
    )
    reply = session.send("go on")
    assert reply.text
    (record,) = gw.requests
    body = json.loads(gw.body(record.seq))
    assert orphan not in json.dumps(body)  # the orphan never went on the wire
    roles = [m["role"] for m in body["messages"]]
    assert roles.count("tool") == 1  # a synthetic result answers the unanswered call c1
    assert find_orphans(session.history) == ([], [])
    assert session.archive.get(key_for(orphan)) == orphan  # archived verbatim, not lost
    notices = [e for e in session.events if isinstance(e, NoticeEvent) and e.code == "pairing"]
    assert notices and marker(key_for(orphan)) in notices[0].text  # and the user is told where


# invalid unicode ------------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", ["send", "asend", "stream"])
def test_lone_surrogates_are_measured_archived_and_sent_safely(gw: GatewaySimulator, loop: str) -> None:
    session = session_for(gw)
    m = session.measure()
    assert m.messages == 0
    if loop == "send":
        reply = session.send(BAD_TEXT)
    elif loop == "asend":
        reply = asyncio.run(session.asend(BAD_TEXT))
    else:
        stream = session.stream(BAD_TEXT)
        "".join(stream)
        assert stream.reply is not None
        reply = stream.reply
    assert reply.text.startswith("Reply")
    assert session.history[0].content == BAD_TEXT  # the history keeps what the user gave, byte-exact
    (record,) = gw.requests
    sent = json.loads(gw.body(record.seq))["messages"][0]["content"]
    assert sent == BAD_TEXT.translate(dict.fromkeys(range(55296, 57344), "�"))
    assert len(sent.encode("utf-8")) == len(BAD_TEXT.encode("utf-8", "surrogatepass"))  # measured size holds
    assert session.measure().bytes > 0
    key = session.archive.put(BAD_TEXT, kind="message")
    assert key is not None and session.archive.get(key) == BAD_TEXT


def test_lone_surrogates_survive_save_and_load(gw: GatewaySimulator, tmp_path: Any) -> None:
    session = session_for(gw)
    session.add_messages([{"role": "user", "content": BAD_TEXT}, {"role": "assistant", "content": "ok \u00e9"}])
    with pytest.warns(UserWarning, match="archive is in memory"):  # copied next to the file, so markers resolve
        saved = session.save(tmp_path / "s.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.archive.sqlite", "s.json"]  # no temporary file left
    saved.read_bytes().decode("utf-8")  # a valid UTF-8 JSON file for any other tool
    loaded = Session.load(saved, status=None, archive=Archive.in_memory(session_id="h"))
    assert [m.content for m in loaded.history] == [BAD_TEXT, "ok \u00e9"]


def test_undecodable_file_names_in_tool_origins_are_archived(gw: GatewaySimulator) -> None:
    """A tool result whose path came from an undecodable file name (``surrogateescape``)."""
    bad_path = b"src/caf\xe9.py".decode("utf-8", "surrogateescape")
    ws = Workspace(seed=6, target_bytes=9_000)
    outputs: list[str] = []

    def read_file(path: str) -> ToolResult:
        """Read a whole file."""
        out = ws.read_file(path).content + BAD_TEXT
        outputs.append(out)
        return ToolResult(out, path=bad_path, lines=(1, 10))

    limits = Limits(context_window=1_000_000, retry_backoff=0.0, request_timeout=5, pressure_trigger=0)
    session = session_for(gw, tools=[read_file], limits=limits)
    for turn in range(5):  # microcompact on every request (trigger 0) archives old results, origin path included
        assert session.send(f'[[tool:read_file {{"path": "m{turn}.py"}}]] turn {turn}').text
    entries = session.archive.entries()
    assert any("caf\ufffd.py" in e.origin for e in entries)  # metadata made storable, shown with U+FFFD
    expanded = expand_markers("\n".join(m.content for m in session.history), session.archive)
    assert all(o in expanded for o in outputs)  # the content itself stays byte-exact
    with pytest.raises(UsageError, match="valid Unicode"):
        Archive.in_memory(session_id="s\udcff")


def test_surrogate_tool_results_survive_recovery_byte_exact(gw: GatewaySimulator) -> None:
    """Content with lone surrogates is compacted, archived and recovered exactly (nothing lost)."""
    ws = Workspace(seed=5, target_bytes=6_000)
    contents = [ws.read_file(f"m{i}.py").content + BAD_TEXT for i in range(6)]
    calls = [{"id": f"c{i}", "function": {"name": "read_file", "arguments": "{}"}} for i in range(6)]
    session = session_for(gw, {"max_body": "20KB", "reject_with": "413"})
    session.add_messages(
        [
            {"role": "user", "content": "read all"},
            {"role": "assistant", "content": "", "tool_calls": calls},
            *({"role": "tool", "tool_call_id": f"c{i}", "content": c} for i, c in enumerate(contents)),
        ]
    )
    assert session.send("summarize").text
    assert session.stats.recoveries_by_level
    expanded = expand_markers("\n".join(m.content for m in session.history), session.archive)
    assert all(c in expanded for c in contents)


# sizes -----------------------------------------------------------------------------------------------


def test_single_tool_result_bigger_than_the_cap_is_archived_and_recovered(gw: GatewaySimulator) -> None:
    big = Workspace(seed=2, target_bytes=120_000).read_file("huge.py").content
    session = session_for(gw, {"max_body": "48KB", "reject_with": "413"})
    session.add_messages(
        [
            {"role": "user", "content": "read it"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": {"name": "read_file"}}]},
            {"role": "tool", "tool_call_id": "c", "content": big},
        ]
    )
    assert session.send("what is in it?").text
    assert big in expand_markers("\n".join(m.content for m in session.history), session.archive)


def test_newest_user_message_bigger_than_the_cap_is_sent_as_an_excerpt(gw: GatewaySimulator) -> None:
    session = session_for(gw, {"max_body": "64KB", "reject_with": "413"})
    paste = "x" * 200_000
    reply = session.send(paste)
    assert reply.text and len(gw.requests) == 2  # one rejection teaches the cap; the excerpt goes through
    assert_known_limits_respected(gw.requests)
    assert paste in expand_markers("\n".join(m.content for m in session.history), session.archive)
    assert any(e.code == "message_excerpted" for e in session.events.of_type(NoticeEvent))


def test_newest_user_message_that_cannot_fit_even_as_an_excerpt_names_the_message(gw: GatewaySimulator) -> None:
    session = session_for(gw, {"max_body": "64KB", "reject_with": "413"}, system="rules " * 10_900)
    with pytest.raises(PayloadFloorError) as info:
        session.send("x" * 200_000)
    # the whole message is refused, then ever smaller excerpts down to the smallest: then nothing smaller exists
    sizes = [r.bytes for r in gw.requests]
    assert 2 <= len(sizes) <= 3 and sizes == sorted(sizes, reverse=True) and not any(r.accepted for r in gw.requests)
    assert_known_limits_respected(gw.requests)
    # the diagnostic agrees with what truncation can keep: it fires once the smallest reachable
    # request has itself been refused, not before and not after more attempts
    assert info.value.rejected_bytes == sizes[-1] and info.value.base_bytes >= sizes[-1]
    text = str(info.value)
    assert "newest message is 195.3 KB of text" in text and "shorter message" in text and "system prompt is 63." in text
    assert session.history[-1].role == "system"  # the failed turn left no trace


@pytest.mark.parametrize("configured", [False, True])
def test_system_prompt_bigger_than_the_cap(gw: GatewaySimulator, configured: bool) -> None:
    limits = Limits(context_window=1_000_000, max_payload="64KB" if configured else None)
    session = session_for(gw, {"max_body": "64KB", "reject_with": "waf403"}, system="policy " * 12_000, limits=limits)
    with pytest.raises(PayloadFloorError) as info:
        session.send("hi")
    # a configured cap is a hard limit: the request is not even sent
    assert len(gw.requests) == (0 if configured else 1) and not any(r.accepted for r in gw.requests)
    assert "system prompt" in str(info.value) and info.value.base_bytes >= info.value.rejected_bytes


# environment -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CONTEXTKIT_MAX_PAYLOAD", "-1"),
        ("CONTEXTKIT_MAX_PAYLOAD", "abc"),
        ("CONTEXTKIT_MAX_PAYLOAD", "0"),
        ("CONTEXTKIT_MAX_PAYLOAD", "1e999"),
        ("CONTEXTKIT_MAX_PAYLOAD", "9" * 400),
        ("CONTEXTKIT_CONTEXT_WINDOW", "abc"),
        ("CONTEXTKIT_CONTEXT_WINDOW", "-5"),
        ("CONTEXTKIT_MAX_RECOVERY_ATTEMPTS", "0"),
        ("CONTEXTKIT_EMERGENCY_KEEP_MESSAGES", "many"),
    ],
)
def test_absurd_env_values_name_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Limits.from_env({name: value})
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):  # a Session without explicit limits reads the environment
        Session("openai/sim-model", status=None, archive=Archive.in_memory())


# recall with hostile keys and queries ---------------------------------------------------------------------

HOSTILE = [
    "'; DROP TABLE blobs; --",
    '" OR 1=1 --',
    "../../../etc/passwd",
    "/etc/shadow\x00.txt",
    'NEAR(a b) AND body:* OR "',
    "fts MATCH '*'",
    "0123456789abcdef'; DELETE FROM entries; --",
    "<<ccr:0123456789ABCDEF>>",
    "<<ccr:../../etc/passwd>>",
    "\udcff\ud800",
]


@pytest.fixture
def archived_session(gw: GatewaySimulator) -> Session:
    session = session_for(gw, archive=Archive.in_memory(session_id="h"))
    session.archive.put("the retry budget lives in src/net/retry.py", kind="tool_result")
    other = session.archive.with_scope("someone-else")
    other.put("SECRET of another session", kind="message")
    return session


@pytest.mark.parametrize("payload", [*HOSTILE, "k" * 1_000_000], ids=[*map(str, range(len(HOSTILE))), "1MB"])
def test_recall_and_recall_context_with_hostile_keys(archived_session: Session, payload: str) -> None:
    archive = archived_session.archive
    before = len(archive)
    result = archive.recall(payload)
    assert result.is_error and result.found == ()
    assert "SECRET" not in result.text and len(result.text) < 2_000  # bounded echo, no other scope
    message = archive.handle_tool_call("call_x", "recall", json.dumps({"key": payload}))
    assert message is not None and message.role == "tool" and "SECRET" not in message.content
    pack = archive.recall_context(payload)
    assert pack.startswith(("### contextkit Context", "No matching archived context"))
    assert "SECRET" not in pack
    tool = archive.handle_tool_call("call_y", "recall_context", json.dumps({"query": payload, "max_items": "999"}))
    assert tool is not None and "max_items" in tool.content
    assert len(archive) == before  # read-only
    assert archive.get("the retry budget") is None


@pytest.mark.parametrize("payload", HOSTILE[:6])
def test_model_recall_tool_with_hostile_keys_through_a_session(archived_session: Session, payload: str) -> None:
    session = archived_session
    reply = session.send("[[tool:recall " + json.dumps({"key": payload}) + "]] please")
    assert reply.text
    result = next(m for m in session.history if m.role == "tool")
    assert result.is_recall and "recall:" in result.content and "SECRET" not in result.content
    assert session.archive.recall_context("retry budget").startswith("### contextkit Context")


def test_recall_with_a_1mb_key_through_a_session(archived_session: Session, gw: GatewaySimulator) -> None:
    """The recall tool's answer to a 1 MB argument is a short, bounded error, not a 1 MB echo."""
    session = archived_session
    call = ToolCall("call_big", "recall", json.dumps({"key": "<<ccr:" + "f" * 1_000_000 + ">>"}))
    message = session.archive.recall_message(call.id, call.arguments)
    assert message.is_recall and len(message.content) < 2_000
    session.add_messages([{"role": "user", "content": "x"}, Message.assistant("", [call]), message])
    assert session.send("go on").text
    assert gw.requests[-1].accepted
    answer = next(m for m in session.history if m.role == "tool")
    assert len(answer.content) < 2_000 and "no archive key found" in answer.content


@pytest.mark.parametrize(("items", "tokens"), [(0, 10), (51, 10), (5, 0), (5, 12_001), ("5", 10), (5, 2.5), (True, 5)])
def test_recall_context_bounds_are_validated(archived_session: Session, items: Any, tokens: Any) -> None:
    with pytest.raises(RecallValidationError):
        archived_session.archive.recall_context("retry", max_items=items, max_tokens=tokens)


def test_hostile_session_ids_are_plain_data(tmp_path: Any) -> None:
    path = tmp_path / "a.sqlite"
    evil = "x'); DROP TABLE entries; --"
    with Archive(path, session_id=evil) as archive:
        key = archive.put("kept")
        assert key is not None and archive.get(key) == "kept"
    with Archive(path, session_id="other") as archive:
        assert archive.get(key) is None and len(archive.with_scope(evil)) == 1


# Hypothesis fuzzing of the public entry points -------------------------------------------------------------

json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
roles = st.sampled_from(["system", "user", "assistant", "tool", "wizard", "", "USER"]) | st.text(max_size=5)
raw_message = (
    st.dictionaries(
        st.sampled_from(["role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content", "extra"]),
        json_value | roles,
        max_size=6,
    )
    | json_value
)
size_value = (
    st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.from_regex(r"\s*-?\d{1,30}(\.\d{0,5})?\s*(gb|mb|kb|g|m|k|b|GB|Mb|tb)?\s*", fullmatch=True)
)
limit_kwargs = st.dictionaries(
    st.sampled_from(["context_window", "max_payload", "max_recovery_attempts", "budget_ratio", "request_timeout",
                     "max_retries", "microcompact_truncate_turns", "microcompact_summarize_turns", "compact_model"]),
    json_leaf | size_value,
    max_size=4,
)  # fmt: skip


class _WithStatus(Exception):
    def __init__(self, text: str, status: Any) -> None:
        super().__init__(text)
        self.status_code = status


errors = (
    st.text(max_size=300)
    | st.tuples(st.integers(0, 700), st.text(max_size=200))
    | st.builds(_WithStatus, st.text(max_size=200), st.one_of(st.integers(-5, 999), st.text(max_size=5), st.none()))
    | st.builds(RuntimeError, st.text(max_size=200))
    | st.none()
)


def _tool_history() -> st.SearchStrategy[list[Message]]:
    ids = st.sampled_from(["a", "b", "c", "d"])
    user = st.builds(Message.user, st.text(max_size=20))
    assistant = st.builds(
        Message.assistant,
        st.text(max_size=20),
        st.lists(st.builds(ToolCall, ids, st.just("f")), max_size=3),
    )
    tool = st.builds(Message.tool, ids, st.text(min_size=1, max_size=40))
    return st.lists(user | assistant | tool | st.just(Message.system("sys")), max_size=14)


def check_parse_size(value: Any) -> None:
    try:
        size = parse_size(value, what="CONTEXTKIT_MAX_PAYLOAD")
    except ConfigError as exc:
        assert "CONTEXTKIT_MAX_PAYLOAD" in str(exc)
    else:
        assert isinstance(size, int) and size > 0


def check_from_wire(raw: Any) -> None:
    try:
        message = from_wire(raw, index=3)
    except InvalidMessageError as exc:
        assert "message 3" in str(exc)
    else:
        assert message.role in ("system", "user", "assistant", "tool") and isinstance(message.content, str)
        message.to_wire()
        json.dumps(message.to_wire())


def check_classify(error: Any, size: int | None) -> None:
    failure = classify_failure(error, history_bytes=size, request_bytes=size)
    assert isinstance(failure, Failure) and failure.reason
    if failure.kind.recoverable:
        assert failure.rejected_bytes == size


def check_limits(kwargs: dict[str, Any]) -> None:
    try:
        limits = Limits(**kwargs)
    except ConfigError:
        return
    assert limits.payload_cap is None or limits.payload_cap > 0
    assert limits.context_window is None or (isinstance(limits.context_window, int) and limits.context_window > 0)


def check_pairing(history: list[Message]) -> None:
    archive = Archive.in_memory()
    repaired, report = repair_tool_pairing(history, archive=archive)
    assert find_orphans(repaired) == ([], [])
    again, second = repair_tool_pairing(repaired, archive=archive)
    assert again == repaired and not second.changed  # idempotent
    text = expand_markers("\n".join(m.content for m in repaired), archive)
    for orphan in report.orphans:
        assert archive.get(key_for(orphan.content)) == orphan.content or orphan.content in text
    archive.close()


_FUZZ_ARCHIVE = Archive.in_memory(session_id="fuzz")
_FUZZ_ARCHIVE.put("alpha beta gamma retry budget", kind="tool_result")
_FUZZ_ARCHIVE.with_scope("other").put("hidden other scope text alpha", kind="message")


def check_recall(payload: str, items: Any, tokens: Any) -> None:
    result = _FUZZ_ARCHIVE.recall(payload)
    assert "hidden other scope" not in result.text
    try:
        pack = _FUZZ_ARCHIVE.recall_context_result(payload, items, tokens)
    except RecallValidationError:
        in_range = all(
            isinstance(v, int) and not isinstance(v, bool) and low <= v <= high
            for v, low, high in ((items, 1, 50), (tokens, 1, 12_000))
        )
        assert not in_range or not payload.strip()
        return
    assert pack.used_tokens <= tokens and "hidden other scope" not in pack.text


FUZZERS: list[tuple[str, Any, Any]] = [
    ("parse_size", check_parse_size, (size_value,)),
    ("from_wire", check_from_wire, (raw_message,)),
    ("classify_failure", check_classify, (errors, st.none() | st.integers(0, 2_000_000))),
    ("limits", check_limits, (limit_kwargs,)),
    ("repair_tool_pairing", check_pairing, (_tool_history(),)),
    ("recall", check_recall, (st.text(max_size=200), st.integers(-2, 60) | st.booleans(), st.integers(-2, 13_000))),
]


def _fuzz(check: Any, strategies: Any, budget: settings) -> None:
    budget(given(*strategies)(check))()


@pytest.mark.parametrize(("name", "check", "strategies"), FUZZERS, ids=[f[0] for f in FUZZERS])
def test_fuzz_entry_points(name: str, check: Any, strategies: Any) -> None:
    _fuzz(check, strategies, FAST)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "check", "strategies"), FUZZERS, ids=[f[0] for f in FUZZERS])
def test_fuzz_entry_points_long(name: str, check: Any, strategies: Any) -> None:
    _fuzz(check, strategies, LONG)


# saved sessions that are truncated or hand-edited ---------------------------------------------------------

_SAVED = {"version": 1, "model": "openai/sim-model", "session_id": "s", "limits": {}, "context_window": 100,
          "turn_budget": 1, "per_result_budget": 1, "history": []}  # fmt: skip
BAD_SAVES: list[tuple[str, bytes, str]] = [
    ("empty", b"", "is not a saved contextkit session"),
    ("binary", b"\xff\xfe\x00garbage", "is not a saved contextkit session"),
    ("not-a-dict", b"[]", "is not a saved contextkit session"),
    ("truncated", json.dumps(_SAVED).encode()[:40], "is not a saved contextkit session"),
    ("no-history", json.dumps({k: v for k, v in _SAVED.items() if k != "history"}).encode(), "missing 'history'"),
    ("history-not-list", json.dumps(_SAVED | {"history": 5}).encode(), "not a valid saved"),
    ("bad-message", json.dumps(_SAVED | {"history": [{"role": "wizard"}]}).encode(), "role 'wizard'"),
    ("bad-limits", json.dumps(_SAVED | {"limits": {"max_payload": -5}}).encode(), "max_payload"),
    ("limits-list", json.dumps(_SAVED | {"limits": []}).encode(), "not a valid saved"),
    ("window-text", json.dumps(_SAVED | {"context_window": "abc"}).encode(), "not a valid saved"),
]


@pytest.mark.parametrize(("name", "blob", "phrase"), BAD_SAVES, ids=[b[0] for b in BAD_SAVES])
def test_bad_saved_sessions_raise_config_errors_naming_the_file(
    tmp_path: Any, name: str, blob: bytes, phrase: str
) -> None:
    path = tmp_path / f"{name}.json"
    path.write_bytes(blob)
    with pytest.raises(ConfigError) as info:
        Session.load(path, status=None, archive=Archive.in_memory())
    assert phrase in str(info.value)
    assert str(path) in str(info.value)
    with pytest.raises(ConfigError, match="cannot read the saved session"):
        Session.load(tmp_path, status=None)  # a folder, not a file


# content that merely *looks* like an already-archived stub -------------------------------------------------


def test_content_ending_with_a_copied_recall_suffix_is_still_archived() -> None:
    """E.g. an agent reads its workbench notes, whose last line is a stub's recall suffix: the new text
    before that suffix must stay recoverable when microcompact clears the aged result."""
    from contextkit.markers import recall_suffix
    from contextkit.policy.microcompact import MicrocompactConfig, microcompact

    archive = Archive.in_memory()
    old = archive.put("OLD ORIGINAL " * 500, kind="tool_result")
    assert old is not None
    notes = "NEW UNIQUE DATA line\n" * 400 + recall_suffix([old])
    history = [Message.user("go")]
    for t in range(6):
        history += [
            Message.assistant(f"t{t}", [ToolCall(f"c{t}", "read_file")]),
            Message.tool(f"c{t}", notes if t == 0 else f"small {t}"),
        ]
    compacted, report = microcompact(history, archive=archive, config=MicrocompactConfig.from_limits(Limits()))
    assert report.changed
    # the notes themselves (with their quoted marker) are archived byte-exact and cited by the stub
    assert any(archive.get(key) == notes for m in compacted for key in m.archive_keys)
