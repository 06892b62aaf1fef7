"""Searching the archive: identifiers match exactly, words rank, packs share their budget and name what they drop."""

from __future__ import annotations

import random

import pytest

from contextkit.archive import Archive
from contextkit.archive.query import parse_query, tokens
from contextkit.markers import key_for, marker
from contextkit.sizing import text_tokens


def test_query_parsing_tells_identifiers_from_words() -> None:
    q = parse_query("where is ERR_CONN_4471 raised in src/app.py on port 8443 by fetchUser?")
    assert q.required == (("err", "conn", "4471"), ("src", "app", "py"), ("8443",), ("fetchuser",))
    assert q.optional == ("raised", "port")  # stop words left out
    assert parse_query("the and of").optional == ("the", "and", "of")  # nothing else left: kept
    assert parse_query("NEAR(database migration, 2)").required == ()
    assert parse_query("'; DROP TABLE entries; --").required == ()
    assert tokens("Café_Ünïcode straße") == ["cafe", "unicode", "strasse"]


@pytest.fixture
def logs(open_archive):
    with open_archive("logs", session_id="s") as arc:
        arc.put("request failed with ERR_CONN_4471 after retries", kind="log")
        arc.put("request failed with ERR_CONN_44712 after retries", kind="log")  # a longer code
        arc.put("request failed with ERR_CONN and 4471 elsewhere", kind="log")  # the tokens, not the identifier
        arc.put("retries exhausted: the connection pool is empty", kind="log")
        yield arc


def test_an_identifier_matches_exactly_token_for_token(logs: Archive) -> None:
    pack = logs.recall_context_result("ERR_CONN_4471")
    assert [i.key for i in pack.items] == [key_for("request failed with ERR_CONN_4471 after retries")]
    assert logs.recall_context("ERR_CONN_9999") == "No matching archived context was found."


def test_every_identifier_of_a_query_must_match_and_words_only_rank(logs: Archive) -> None:
    both = logs.recall_context_result("ERR_CONN_4471 retries")
    assert [i.key for i in both.items] == [key_for("request failed with ERR_CONN_4471 after retries")]
    assert logs.recall_context("ERR_CONN_4471 ERR_CONN_44712") == "No matching archived context was found."
    ranked = logs.recall_context_result("retries connection pool")
    assert ranked.items[0].key == key_for("retries exhausted: the connection pool is empty")
    assert ranked.used_items == 3  # natural language ranks every entry with any of its words


def test_search_takes_plain_text_and_old_fts_expressions_alike(logs: Archive) -> None:
    from contextkit.archive.search import fts_query, query_terms

    plain = logs.search("connection pool", 8)
    legacy = logs.search(fts_query(query_terms("connection pool")), 8)
    assert [h.key for h in plain] == [h.key for h in legacy] == [key_for("retries exhausted: the connection pool is empty")]


def _big(i: int, size: int = 6_000) -> str:
    rng = random.Random(i)
    filler = [f"line {n} of build output: compiled module_{rng.randint(0, 999)} in {rng.randint(1, 90)} ms" for n in range(size // 50)]
    filler.insert(len(filler) // 2, f"FATAL checksum mismatch in shard {i} (code CHK-{i:04d})")
    return "\n".join(filler)


def test_a_pack_shares_its_budget_and_excerpts_each_item_around_its_hits(open_archive) -> None:
    with open_archive("big", session_id="s") as arc:
        for i in range(5):
            arc.put(_big(i), kind="tool_result")
        pack = arc.recall_context_result("checksum mismatch shard", max_items=5, max_tokens=1500)
    assert pack.used_items == 5 and pack.dropped == 0 and pack.used_tokens <= 1500
    body = pack.text.split("\nContext:\n", 1)[1]
    sections = body.split("\n\n[")
    assert len(sections) == 5
    for section in sections:
        assert "FATAL checksum mismatch in shard" in section  # the hit, not the head of the file
        assert text_tokens(section) <= 1500 // 5 + 40  # an equal share, not the first item taking all
    assert all(item.shortened for item in pack.items) and "..." in body


def test_a_small_item_leaves_its_share_to_the_others(open_archive) -> None:
    with open_archive("mix", session_id="s") as arc:
        arc.put("checksum mismatch: short note", kind="note")
        for i in range(2):
            arc.put(_big(i, 20_000), kind="tool_result")
        pack = arc.recall_context_result("checksum mismatch", max_items=3, max_tokens=900)
    note = next(i for i in pack.items if i.key == key_for("checksum mismatch: short note"))
    others = [i for i in pack.items if i is not note]
    assert not note.shortened and all(o.tokens > 900 // 3 for o in others)  # more than an equal third each
    assert pack.used_tokens <= 900


def test_what_a_pack_drops_is_named(open_archive) -> None:
    with open_archive("drop", session_id="s") as arc:
        for i in range(8):
            arc.put(_big(i), kind="tool_result", origin={"tool": "build", "turn": i})
        pack = arc.recall_context_result("checksum mismatch", max_items=8, max_tokens=120)
    assert pack.dropped == 8 - pack.used_items > 0 and len(pack.dropped_keys) == pack.dropped
    lines = pack.text.splitlines()
    dropped_lines = [line for line in lines if line.startswith("Dropped: ")]
    assert [line.split()[1] for line in dropped_lines] == list(pack.dropped_keys)
    assert any(line.startswith("Budget: ") and "dropped" in line for line in lines)
    assert all(marker(k) not in pack.text for k in pack.dropped_keys)  # named, not included


def test_an_identifier_finds_its_entry_among_many_similar_ones(open_archive) -> None:
    """30 of 30: each planted code, asked for, is in the pack (the target sits among 300 lookalikes)."""
    rng = random.Random(7)
    codes = [f"E{rng.randint(10_000, 99_999)}_{rng.choice(['DISK', 'NET', 'AUTH'])}" for _ in range(300)]
    with open_archive("many", session_id="s") as arc:
        for i, code in enumerate(codes):
            arc.put(_big(i, 3_000).replace("FATAL", f"FATAL {code}"), kind="tool_result")
        found = 0
        for code in rng.sample(codes, 30):
            pack = arc.recall_context_result(f"what caused {code}?")
            found += any(code in arc.get(i.key) for i in pack.items) and code in pack.text
    assert found == 30
