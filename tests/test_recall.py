"""Recall (tool + @recall) and recall_context."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from contextkit.archive import (
    Archive,
    find_inline_recalls,
    handle_tool_call,
    is_recall_tool,
    recall_context_tool_schema,
    recall_tool_schema,
)
from contextkit.archive.recall import recall
from contextkit.errors import RecallValidationError
from contextkit.markers import extract_keys_tolerant, key_for, marker, recall_suffix
from contextkit.sizing import text_tokens

K = "aaaabbbbccccdddd"


class DictStore:
    """Minimal readable store: anything with ``get(key)`` can answer a recall."""

    def __init__(self, data: dict[str, str]) -> None:
        self.data = data

    def get(self, key: str) -> str | None:
        return self.data.get(key)


# reference cases ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["@recall", "recall", "@RECALL", " recall "])
def test_is_recall_tool_true(name: str) -> None:
    assert is_recall_tool(name)


@pytest.mark.parametrize("name", ["@search", "recalls", "recal", "", None])
def test_is_recall_tool_false(name: object) -> None:
    assert not is_recall_tool(name)


@pytest.mark.parametrize(
    "payload",
    [
        f'{{"key":"<<ccr:{K}>>"}}',
        f'{{"key":"{K}"}}',
        f'{{"key":"ccr:{K}"}}',
        f'{{"key":"<ccr:{K}>"}}',
        '{"key":"CCR:AAAABBBBCCCCDDDD"}',
        f'{{"key":"<< ccr: {K} >>"}}',
        f'{{"marker":"<<ccr:{K}>>"}}',
        f'{{"id":"{K}"}}',
        f'{{"key":"`{K}`"}}',
        f"ccr:{K}",
        K,
        f'{{"key":"please recall <<ccr:{K}>> for me"}}',
        f'{{"target":"<<ccr:{K}>>"}}',
    ],
)
def test_tolerant_extraction_finds_the_key_once(payload: str) -> None:
    assert extract_keys_tolerant(payload) == [K]


@pytest.mark.parametrize(
    "payload",
    ["", '{"key":"aaaabbbbccccddd"}', '{"key":"not-a-ccr-key-at-all"}', f"the hash {K} appeared in the log"],
)
def test_tolerant_extraction_finds_nothing(payload: str) -> None:
    assert extract_keys_tolerant(payload) == []


def test_single_key_returns_original_byte_exact() -> None:
    result = recall(DictStore({K: "the original content"}), f'{{"key":"ccr:{K}"}}')
    assert result.text == "the original content"
    assert (result.found, result.missing, result.is_error) == ((K,), (), False)


def test_multi_key_sections_with_miss_in_place() -> None:
    a, b, c = "a" * 16, "b" * 16, "c" * 16
    store = DictStore({a: "first original", b: "second original"})
    result = recall(store, f"{marker(a)} {marker(c)} {marker(b)}")
    assert result.text == (
        f"--- @recall <<ccr:{a}>> ---\nfirst original\n\n"
        f"--- @recall <<ccr:{c}>> ---\n[no archived content for {c}]\n\n"
        f"--- @recall <<ccr:{b}>> ---\nsecond original"
    )
    assert result.keys == (a, c, b) and result.found == (a, b) and result.missing == (c,)
    assert not result.is_error


def test_garbage_and_unknown_keys_give_actionable_text_not_exceptions() -> None:
    store = DictStore({"1111222233334444": "THE FULL ORIGINAL"})
    garbage = recall(store, '{"key":"garbage"}')
    assert garbage.is_error and "16 hex chars" in garbage.text and '"garbage"' in garbage.text
    assert recall(store, '{"key":"1111222233334444"}').text == "THE FULL ORIGINAL"
    assert recall(store, "<<ccr:1111222233334444>>").text == "THE FULL ORIGINAL"
    unknown = recall(store, '{"key":"9999888877776666"}')
    assert unknown.is_error and "no archived content for 9999888877776666" in unknown.text
    assert "16 hex chars" in unknown.text
    none_found = recall(store, f"{marker('9' * 16)} {marker('8' * 16)}")
    assert none_found.is_error and "none of the 2 keys" in none_found.text
    long_payload = recall(store, "x" * 10_000)
    assert long_payload.is_error and len(long_payload.text) < 500


def test_too_many_keys_are_reported_not_silently_dropped() -> None:
    keys = [f"{i:016x}" for i in range(40)]
    result = recall(DictStore({keys[0]: "zero"}), " ".join(marker(k) for k in keys))
    assert len(result.keys) == 32 and "8 more keys not recalled" in result.text
    assert marker(keys[39]) in result.text and "zero" in result.text
    assert "8 more keys not recalled" in recall(DictStore({}), " ".join(keys)).text


def test_plain_list_of_bare_keys_is_accepted_but_prose_is_not() -> None:
    a, b = "a" * 16, "B" * 16
    store = DictStore({a: "A text", b.lower(): "B text"})
    assert recall(store, f"{a} {b}").found == (a, b.lower())
    assert recall(store, json.dumps({"key": f"{a}, {b}"})).found == (a, b.lower())
    assert recall(store, f"see {a} and {b}").is_error


# archive-backed recall ---------------------------------------------------------------------------
@pytest.fixture
def archive(open_archive):
    """Every test that takes it runs on both backends (SQLite file, PostgreSQL)."""
    with open_archive("r", session_id="s") as arc:
        yield arc


def test_archive_recall_round_trip_and_message_flags(archive: Archive) -> None:
    original = "big tool output\n" * 100 + "\udc80 end"
    key = archive.put(original, kind="tool_result")
    assert key
    stub = "big tool output..." + recall_suffix([key])
    assert archive.recall(stub).text == original
    msg = archive.recall_message("call_1", json.dumps({"key": marker(key)}))
    assert (msg.role, msg.tool_call_id, msg.name, msg.content) == ("tool", "call_1", "recall", original)
    assert msg.is_recall and msg.preserve_verbatim
    assert archive.put(msg.content) == key  # re-putting recall output is a no-op, not a second copy
    assert len(archive) == 1


def test_recall_tool_schema_shape() -> None:
    schema = recall_tool_schema()
    fn = schema["function"]
    assert schema["type"] == "function" and fn["name"] == "recall"
    assert fn["parameters"]["properties"]["key"]["type"] == "string"
    assert fn["parameters"]["required"] == ["key"]
    json.dumps(schema)


def test_find_inline_recalls_forms() -> None:
    a, b = "a" * 16, "b" * 16
    assert find_inline_recalls(f"please @recall <<ccr:{a}>>") == [a]
    assert find_inline_recalls(f"@recall {a.upper()} and then @RECALL ccr:{b}") == [a, b]
    assert find_inline_recalls(f"[full content recoverable via @recall <<ccr:{a}>> <<ccr:{b}>>]") == [a, b]
    assert find_inline_recalls(f"@recall <<ccr:{a}>>, {b}") == [a, b]
    assert find_inline_recalls(f"the key {a} without the verb") == []
    assert find_inline_recalls("@recall nothing-here") == []
    assert find_inline_recalls(f"email@recall{a}") == []


def test_recall_inline_on_user_text(archive: Archive) -> None:
    key = archive.put("the archived stack trace")
    assert key
    result = archive.recall_inline(f"please @recall <<ccr:{key}>> and explain")
    assert result is not None and result.text == "the archived stack trace"
    assert archive.recall_inline("no recall here") is None


def test_handle_tool_call_dispatch(archive: Archive) -> None:
    key = archive.put("alpha beta gamma")
    assert key
    msg = archive.handle_tool_call("c1", "@recall", json.dumps({"key": key}))
    assert msg is not None and msg.content == "alpha beta gamma" and msg.is_recall
    ctx = handle_tool_call(archive, "c2", "recall_context", json.dumps({"query": "beta"}))
    assert ctx is not None and ctx.content.startswith("### contextkit Context") and key in ctx.content
    bad = handle_tool_call(archive, "c3", "recall_context", json.dumps({"query": "beta", "max_items": 99}))
    assert bad is not None and "1 to 50" in bad.content
    lenient = archive.handle_tool_call(
        "c5", "recall_context", '{"query": "beta", "max_items": "3", "max_tokens": 99.0}'
    )
    assert lenient is not None and lenient.content.startswith("### contextkit Context")
    raw = archive.handle_tool_call("c6", "recall_context", "gamma")  # non-JSON arguments: the text is the query
    assert raw is not None and key in raw.content
    assert handle_tool_call(archive, "c4", "read_file", "{}") is None


# recall_context --------------------------------------------------------------------------------
CORPUS: list[tuple[str, dict[str, Any] | None, str]] = [
    ("tool_result", {"tool": "grep", "path": "src/db.py"}, "connection pool settings: size 10, timeout 30s"),
    ("message", {"role": "user"}, "the weather today is sunny with a light breeze"),
    (
        "read",
        {"tool": "read_file", "path": "src/migrate.py", "line_start": 1, "line_end": 80},
        "def migrate_database(): run the postgres database migration; database schema version 42; "
        "database rollback on failure",
    ),
    ("segment", None, "we discussed the database briefly before lunch"),
    ("tool_result", {"tool": "pytest"}, "12 passed, 1 failed: test_login expected 200 got 401"),
]


@pytest.fixture
def seeded(archive: Archive) -> Archive:
    for kind, origin, text in CORPUS:
        archive.put(text, kind=kind, origin=origin)
    for i in range(30):
        archive.put(f"filler note {i}: database mention number {i} " + "lorem ipsum " * 40, kind="message")
    return archive


def test_ranking_puts_best_match_first(seeded: Archive) -> None:
    result = seeded.recall_context_result("postgres database migration schema")
    best = key_for(CORPUS[2][2])
    assert result.items[0].key == best
    lines = result.text.splitlines()
    assert lines[0] == "### contextkit Context"
    assert lines[1] == f"Items: {result.used_items}"
    assert lines[2] == f"Reference: {best} | Type: read | Location: read_file src/migrate.py:1-80"
    login = seeded.recall_context_result("login 401")
    assert login.items[0].key == key_for(CORPUS[4][2]) and login.used_items == 1


def test_exact_format_without_budget_line(seeded: Archive) -> None:
    result = seeded.recall_context_result("weather breeze", max_items=5, max_tokens=500)
    key = key_for(CORPUS[1][2])
    assert result.text == (
        "### contextkit Context\nItems: 1\n"
        f"Reference: {key} | Type: message | Location: user\n"
        f"Context:\n[1] <<ccr:{key}>>\n{CORPUS[1][2]}"
    )
    assert result.used_items == 1 and result.dropped == 0 and result.shortened == 0
    body = result.text.split("Context:\n", 1)[1]
    assert result.used_tokens == text_tokens(body)


@pytest.mark.parametrize("max_tokens", [1, 2, 7, 20, 57, 150, 600, 1500])
def test_token_bound_is_exact_and_budget_line_only_when_cut(seeded: Archive, max_tokens: int) -> None:
    result = seeded.recall_context_result("database", max_items=20, max_tokens=max_tokens)
    body = result.text.split("\nContext:\n", 1)[1]
    assert result.used_tokens == text_tokens(body) <= max_tokens
    has_budget = any(line.startswith("Budget:") for line in result.text.splitlines())
    assert has_budget == bool(result.dropped or result.shortened)
    assert result.used_items + result.dropped == result.matched == 20
    assert result.text.count("\nReference: ") == result.used_items
    if max_tokens < 1500:
        assert has_budget


def test_no_budget_line_when_everything_fits(seeded: Archive) -> None:
    result = seeded.recall_context_result("database", max_items=3, max_tokens=12_000)
    assert result.used_items == 3 and "Budget:" not in result.text


def test_huge_content_is_shortened_with_excerpt_near_match(archive: Archive) -> None:
    key = archive.put("x" * 2_000_000 + "\nthe needle sits here\n" + "y" * 1_000_000, kind="tool_result")
    result = archive.recall_context_result("needle", max_tokens=60)
    assert result.items[0].key == key and result.items[0].shortened
    assert "needle" in result.text and "Budget:" in result.text and result.used_tokens <= 60


def test_no_match_text(seeded: Archive) -> None:
    assert seeded.recall_context("zebra quokka") == "No matching archived context was found."
    empty = seeded.recall_context_result("zebra")
    assert (empty.used_items, empty.used_tokens, empty.items) == (0, 0, ())


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"query": ""}, "non-empty"),
        ({"query": "   \n"}, "non-empty"),
        ({"query": "x", "max_items": 0}, "1 to 50"),
        ({"query": "x", "max_items": 51}, "1 to 50"),
        ({"query": "x", "max_items": True}, "1 to 50"),
        ({"query": "x", "max_tokens": 0}, "1 to 12,000"),
        ({"query": "x", "max_tokens": 12_001}, "1 to 12,000"),
        ({"query": "x", "max_tokens": 2.5}, "1 to 12,000"),
    ],
)
def test_validation_errors_name_the_range(seeded: Archive, kwargs: dict, fragment: str) -> None:
    with pytest.raises(RecallValidationError, match=fragment):
        seeded.recall_context_result(**kwargs)


def test_bounds_edges_are_accepted(seeded: Archive) -> None:
    assert seeded.recall_context_result("database", max_items=1, max_tokens=1).used_tokens <= 1
    assert seeded.recall_context_result("database", max_items=50, max_tokens=12_000).used_items == 32


HOSTILE_QUERIES = [
    "'; DROP TABLE entries; --",
    '"unbalanced quote',
    "data*",
    "NEAR(database migration, 2)",
    "database AND OR NOT",
    "body:database",
    "^database",
    "{body}: database",
    "../../etc/passwd",
    "x" * 10_000,
    "database " * 120_000,
]


def test_hostile_queries_are_safe_and_read_only(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite"
    with Archive(path) as arc:
        for kind, origin, text in CORPUS:
            arc.put(text, kind=kind, origin=origin)
        before = path.read_bytes(), Path(str(path) + "-wal").read_bytes()
        for query in HOSTILE_QUERIES:
            text = arc.recall_context(query)
            assert text.startswith("### contextkit Context") or text == "No matching archived context was found."
        assert "Reference: " + key_for(CORPUS[2][2]) in arc.recall_context("NEAR(database migration, 2)")
        assert "Reference: " in arc.recall_context("'; DROP TABLE entries; -- database")  # words still search
        for payload in ["'; DROP TABLE entries; --", "../../etc/passwd", "x" * 10_000]:
            assert arc.recall(payload).is_error
        good = key_for(CORPUS[0][2])
        assert arc.recall(marker(good)).text == CORPUS[0][2] and arc.get(good) == CORPUS[0][2]
        assert arc.recall_context_result("database", max_items=50, max_tokens=12_000).used_items == 2
        assert len(arc.entries()) == len(arc) == len(CORPUS)
        assert (path.read_bytes(), Path(str(path) + "-wal").read_bytes()) == before
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT count(*) FROM entries").fetchone()[0] == len(CORPUS)


def test_recall_context_respects_scopes(open_archive) -> None:
    with open_archive("scoped", session_id="A") as a, open_archive("scoped", session_id="B") as b:
        a.put("kubernetes deployment manifest for A")
        assert b.recall_context("kubernetes") == "No matching archived context was found."
        assert b.grant("A").recall_context_result("kubernetes").used_items == 1


def test_recall_context_tool_schema_shape() -> None:
    fn = recall_context_tool_schema()["function"]
    assert fn["name"] == "recall_context"
    props = fn["parameters"]["properties"]
    assert (props["max_items"]["minimum"], props["max_items"]["maximum"]) == (1, 50)
    assert (props["max_tokens"]["minimum"], props["max_tokens"]["maximum"]) == (1, 12_000)
    assert fn["parameters"]["required"] == ["query"]


def test_recall_context_budget_holds_for_long_source_files() -> None:
    """Regression: chunked token counting must not let the body exceed max_tokens."""
    from contextkit.archive import Archive
    from contextkit.sim import Workspace

    ws = Workspace(seed=5, target_bytes=20_000)
    archive = Archive.in_memory(session_id="budget")
    for i in range(4):
        archive.put(ws.read_file(f"src/file_{i}.py").content, kind="read")
    for max_items, max_tokens in ((3, 300), (8, 1500), (2, 37)):
        result = archive.recall_context_result("checksum timeout store", max_items=max_items, max_tokens=max_tokens)
        assert result.used_tokens <= max_tokens
