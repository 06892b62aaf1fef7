"""Recall paging: an original larger than what a request can hold still reaches the model, page by page.

Pure tests of ``contextkit.archive.paging`` / ``recall`` first, then the whole path through a Session:
litellm over HTTP to the simulator, the model calling the ``recall`` tool (and writing ``@recall`` in
its text), every page checked in the bodies the simulator received.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from contextkit import Limits, Session
from contextkit.archive import Archive, recall_tool_schema
from contextkit.archive.paging import PageRequest, request_from_text, wire_cost
from contextkit.archive.recall import find_inline_requests, recall, recall_inline
from contextkit.events import RequestEvent
from contextkit.markers import key_for, marker
from contextkit.sim import AgentScript, GatewaySimulator, Workspace

BIG = Workspace(seed=3, target_bytes=40_000).read_file("src/app/paged.py").content
K = key_for(BIG)
NEXT_LINE = re.compile(r"start_line=(\d+)\)")
NEXT_CHAR = re.compile(r"start_char=(\d+)\)")
FOOTER = re.compile(r"\n\[page of <<ccr:[0-9a-f]{16}>>: [^\n]*\]\Z")


class DictStore:
    def __init__(self, data: dict[str, str]) -> None:
        self.data = data

    def get(self, key: str) -> str | None:
        return self.data.get(key)


def follow(store: Any, key: str, max_bytes: int, *, by: str = "tool") -> tuple[str, list[str]]:
    """Read every page the way a model would: the first call, then what each footer says."""
    pages: list[str] = []
    args: dict[str, Any] = {"key": marker(key)}
    for _ in range(1000):
        if by == "tool":
            page = recall(store, json.dumps(args), max_bytes=max_bytes).text
        else:
            text = f"@recall {marker(key)}" + (f" lines {args['start_line']}-" if "start_line" in args else "")
            text += f" chars {args['start_char']}-" if "start_char" in args else ""
            result = recall_inline(store, text, max_bytes=max_bytes)
            assert result is not None
            page = result.text
        pages.append(page)
        if m := NEXT_LINE.search(page.splitlines()[-1]):
            args = {"key": marker(key), "start_line": int(m.group(1))}
        elif m := NEXT_CHAR.search(page.splitlines()[-1]):
            args = {"key": marker(key), "start_char": int(m.group(1))}
        else:
            break
    return "".join(strip_footer(p) for p in pages), pages


def strip_footer(page: str) -> str:
    match = FOOTER.search(page)
    assert match, f"a page must end with a footer line: ...{page[-200:]!r}"
    body = page[: match.start()]
    return body


# pure ------------------------------------------------------------------------------------------


def test_small_original_is_whole_and_unpinned_pages_are_not() -> None:
    store = DictStore({K: BIG})
    whole = recall(store, marker(K), max_bytes=wire_cost(BIG))
    assert whole.text == BIG and whole.complete
    paged = recall(store, marker(K), max_bytes=5_000)
    assert not paged.complete and paged.text != BIG
    assert paged.text.splitlines()[-1].startswith(f"[page of {marker(K)}: lines 1-")
    assert f'recall(key="{marker(K)}", start_line=' in paged.text and f"@recall {marker(K)} lines " in paged.text


@pytest.mark.parametrize("by", ["tool", "text"])
@pytest.mark.parametrize("max_bytes", [1_000, 4_096, 15_000])
def test_pages_join_to_the_original_and_each_fits(by: str, max_bytes: int) -> None:
    store = DictStore({K: BIG})
    joined, pages = follow(store, K, max_bytes, by=by)
    assert joined == BIG
    assert len(pages) > 1
    assert all(wire_cost(p) <= max_bytes for p in pages)
    assert "end of the archived original" in pages[-1].splitlines()[-1]


def test_one_long_line_is_paged_by_characters() -> None:
    blob = json.dumps({"rows": [{"id": i, "name": f"ünïcode row {i} 😀", "ok": i % 3 == 0} for i in range(900)]})
    assert "\n" not in blob
    key = key_for(blob)
    joined, pages = follow(DictStore({key: blob}), key, 3_000)
    assert joined == blob
    assert len(pages) > 5 and all(wire_cost(p) <= 3_000 for p in pages)
    assert "line 1 alone is longer than a page" in pages[0]
    assert "start_char=" in pages[0]


def test_a_long_line_inside_short_lines() -> None:
    original = "head 1\nhead 2\n" + "x" * 9_000 + "\ntail 1\ntail 2\n"
    key = key_for(original)
    joined, _pages = follow(DictStore({key: original}), key, 2_000)
    assert joined == original


def test_asked_range_is_exact() -> None:
    lines = BIG.splitlines(keepends=True)
    page = recall(DictStore({K: BIG}), json.dumps({"key": K, "start_line": 5, "end_line": 7}), max_bytes=50_000).text
    assert strip_footer(page) == "".join(lines[4:7])
    assert f"lines 5-7 of {len(lines)} as asked" in page and "start_line=8" in page
    text_form = recall(DictStore({K: BIG}), json.dumps({"key": f"{marker(K)} lines 5-7"}), max_bytes=50_000).text
    assert text_form == page
    chars = recall(DictStore({K: BIG}), json.dumps({"key": K, "start_char": 11, "end_char": 20}), max_bytes=50_000)
    assert strip_footer(chars.text) == BIG[10:20]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"start_line": 0}, "start_line must be a whole number >= 1"),
        ({"start_line": "two"}, "start_line must be a whole number >= 1"),
        ({"start_line": 9, "end_line": 3}, "end_line (3) is before start_line (9)"),
        ({"start_line": 1, "start_char": 1}, "not both"),
        ({"start_line": 10**6}, "is past its end"),
        ({"start_char": 10**9}, "is past its end"),
    ],
)
def test_bad_ranges_explain_themselves(args: dict[str, Any], fragment: str) -> None:
    result = recall(DictStore({K: BIG}), json.dumps({"key": K, **args}), max_bytes=5_000)
    assert fragment in result.text


def test_numbers_sent_as_strings_are_accepted() -> None:
    a = recall(DictStore({K: BIG}), json.dumps({"key": K, "start_line": "3", "end_line": "4"})).text
    b = recall(DictStore({K: BIG}), json.dumps({"key": K, "start_line": 3, "end_line": 4})).text
    assert a == b


def test_in_text_ranges() -> None:
    assert request_from_text(" lines 181-360 please") == PageRequest(start_line=181, end_line=360)
    assert request_from_text("lines 181-") == PageRequest(start_line=181)
    assert request_from_text("line 5") == PageRequest(start_line=5, end_line=5)
    assert request_from_text("chars 8001-16000") == PageRequest(start_char=8001, end_char=16000)
    assert request_from_text("and explain it") == PageRequest()
    a, b = "a" * 16, "b" * 16
    assert find_inline_requests(f"@recall <<ccr:{a}>> lines 3-4 and @recall <<ccr:{b}>>") == [
        (a, PageRequest(start_line=3, end_line=4)),
        (b, PageRequest()),
    ]


def test_several_keys_share_the_page_budget() -> None:
    other = "\n".join(f"other line {i}" for i in range(2_000))
    store = DictStore({K: BIG, key_for(other): other})
    result = recall(store, f"{marker(K)} {marker(key_for(other))}", max_bytes=8_000)
    assert wire_cost(result.text) <= 8_000 + 200  # two section headers
    assert result.text.count("[page of ") == 2 and not result.complete


def test_schema_offers_ranges() -> None:
    props = recall_tool_schema()["function"]["parameters"]["properties"]
    assert {"key", "start_line", "end_line", "start_char", "end_char"} <= set(props)
    assert props["start_line"]["type"] == "integer"


def test_unpaged_recall_is_unchanged() -> None:
    assert recall(DictStore({K: BIG}), marker(K)).text == BIG  # no max_bytes: the whole original


# through a session -------------------------------------------------------------------------------


@pytest.fixture
def gw():
    with GatewaySimulator(record_bodies=True, max_body="64KB") as sim:
        yield sim


def make(gw: GatewaySimulator, **kwargs: Any) -> Session:
    kw = gw.litellm_kwargs()
    model = kw.pop("model")
    kwargs.setdefault("limits", Limits(max_payload="64KB"))
    return Session(model, archive=Archive.in_memory(session_id="p"), status=None, **kw, **kwargs)


def sent_to_model(gw: GatewaySimulator, text: str) -> bool:
    """``text`` was inside the body of a request the gateway accepted."""
    needle = json.dumps(text, ensure_ascii=False)[1:-1].encode()
    return any(r.accepted and needle in gw.body(r.seq) for r in gw.requests)


def test_model_pages_through_an_original_larger_than_the_request(gw: GatewaySimulator) -> None:
    s = make(gw)
    big = Workspace(seed=4, target_bytes=90_000).read_file("src/huge.py").content
    assert len(big.encode()) > 64 * 1024  # larger than the whole request may be
    key = s.archive.put(big, kind="tool_result")
    args: dict[str, Any] = {"key": marker(key)}
    pages = []
    for _ in range(40):
        s.send(f"[[tool:recall {json.dumps(args)}]]")
        page = next(m for m in reversed(s.history) if m.role == "tool" and m.name == "recall").content
        pages.append(page)
        assert sent_to_model(gw, page), "the page must reach the model"
        m = NEXT_LINE.search(page.splitlines()[-1])
        if not m:
            break
        args = {"key": marker(key), "start_line": int(m.group(1))}
    assert "".join(strip_footer(p) for p in pages) == big
    assert all(r.accepted for r in gw.requests)


def test_user_text_recall_of_a_large_original_gives_the_first_page(gw: GatewaySimulator) -> None:
    s = make(gw)
    big = Workspace(seed=5, target_bytes=90_000).read_file("src/huge.py").content
    key = s.archive.put(big, kind="tool_result")
    s.send(f"please @recall {marker(key)}")
    page = next(m for m in s.history if m.is_recall)
    assert not page.preserve_verbatim and big.startswith(strip_footer(page.content))
    assert sent_to_model(gw, page.content)
    nxt = NEXT_LINE.search(page.content.splitlines()[-1])
    assert nxt
    s.send(f"@recall {marker(key)} lines {nxt.group(1)}-")
    second = [m for m in s.history if m.is_recall][-1]
    assert strip_footer(second.content) == big[len(strip_footer(page.content)) :][: len(strip_footer(second.content))]
    assert sent_to_model(gw, second.content)


def test_small_recall_stays_whole_and_pinned(gw: GatewaySimulator) -> None:
    s = make(gw)
    key = s.archive.put("the archived stack trace\nline 2", kind="tool_result")
    s.send(f"@recall {marker(key)}")
    msg = next(m for m in s.history if m.is_recall)
    assert msg.content == "the archived stack trace\nline 2" and msg.preserve_verbatim


def test_recall_written_by_the_model_is_honoured(gw: GatewaySimulator) -> None:
    s = make(gw)
    original = "ERROR at src/db.py:88 - connection pool exhausted (max 20)\n" * 3
    key = s.archive.put(original, kind="tool_result")
    gw.configure(agent=AgentScript((), final_text=f"I need the log: @recall {marker(key)}"))
    reply = s.send("what did the log say?")
    turn = [e for e in s.events if isinstance(e, RequestEvent)]
    assert len(turn) == 2  # asked again after the recall round
    roles = [(m.role, m.is_recall) for m in s.history[-3:]]
    assert roles == [("assistant", False), ("user", True), ("assistant", False)]
    assert original in s.history[-2].content and marker(key) in s.history[-2].content
    assert sent_to_model(gw, s.history[-2].content)
    assert reply.text.startswith("I need the log")  # the model repeated itself: honoured once, then final


def test_model_recall_of_an_unknown_key_is_one_round_with_a_clear_answer(gw: GatewaySimulator) -> None:
    s = make(gw)
    s.archive.put("something archived", kind="tool_result")  # the simulator's scripted agent needs tools sent
    gw.configure(agent=AgentScript((), final_text=f"@recall {marker('0' * 16)}"))
    s.send("go")
    assert len([e for e in s.events if isinstance(e, RequestEvent)]) == 2
    assert "no archived content for 0000000000000000" in s.history[-2].content


def test_every_marker_left_by_compaction_is_deliverable(gw: GatewaySimulator) -> None:
    """No stub promises what recall cannot deliver: after recovery and compaction under a small
    gateway cap, every marker in the history is recallable, page by page within the page budget."""
    from helpers.histories import pasted_history, read_history

    from contextkit.engine.recall_round import page_bytes

    gw.configure(max_body="96KB")
    s = make(gw, limits=Limits(context_window=200_000))  # the cap is learned from the gateway
    s.add_messages(read_history(n=6, size=30_000))
    s.send("summarize the modules")
    s.add_messages(pasted_history(n=3, size=60_000))
    s.send("and the logs?")
    keys = {k for m in s.history for k in m.archive_keys}  # the stubs recovery left
    s.compact("keep the file names")
    keys |= {k for m in s.history for k in m.archive_keys}  # and the summary's
    assert len(keys) >= 3
    budget = page_bytes(s._context())
    for key in sorted(keys):
        original = s.archive.get(key)
        assert original is not None, f"{marker(key)} points at nothing"
        joined, pages = follow(s.archive, key, budget) if wire_cost(original) > budget else (original, [])
        assert joined == original
        assert all(wire_cost(p) <= budget for p in pages)


@pytest.mark.parametrize(("max_rounds", "requests"), [(1, 2), (2, 3)])
def test_a_model_recall_round_counts_against_max_rounds(gw: GatewaySimulator, max_rounds: int, requests: int) -> None:
    # one tool round, then a reply asking @recall: with max_rounds=1 the recall round is not run
    from dataclasses import replace

    ws = Workspace(seed=2, target_bytes=2_000)
    gw.configure(agent=replace(AgentScript.seeded(seed=2, steps=1), final_text=f"@recall {marker('0' * 16)}"))
    s = make(gw, tools=list(ws.tools.values()))
    reply = s.send("go", max_rounds=max_rounds)
    assert len([e for e in s.events if isinstance(e, RequestEvent)]) == requests
    assert ("no archived content" in s.history[-2].content) == (max_rounds == 2)
    assert "@recall" in reply.text


def test_a_streamed_model_recall_round_is_a_round_for_the_reader(gw: GatewaySimulator) -> None:
    # what the reader saw: the recall round's text, a line break, then reply.text (as for a tool round)
    from contextkit.events import StreamEvent

    asked = f"@recall {marker('0' * 16)}"
    s = make(gw)
    s.archive.put("something archived", kind="tool_result")  # so the recall tool is sent (the agent needs tools)
    gw.configure(agent=AgentScript((), final_text=asked))
    stream = s.stream("go")
    shown = "".join(stream)
    (round_,) = [e for e in s.events if isinstance(e, StreamEvent) and e.kind == "tool_round"]
    assert round_.text.startswith(asked) and round_.reason == "@recall"
    assert shown == round_.text + "\n" + stream.reply.text
    assert "no archived content for 0000000000000000" in s.history[-2].content


def test_a_query_returns_only_the_numbered_lines_that_hold_all_its_words() -> None:
    """A search inside archived originals: one call instead of reading a long log page by page."""
    log = "\n".join(f"row {i} ok" for i in range(5_000)) + "\njob 77 failed with error code E4242\ntail"
    other = "\n".join(f"other {i}" for i in range(300))
    store = DictStore({key_for(log): log, key_for(other): other})
    both = f"{marker(key_for(log))} {marker(key_for(other))}"
    result = recall(store, json.dumps({"key": both, "query": "JOB 77 failed"}), max_bytes=8_000)
    assert " 5001| job 77 failed with error code E4242" in result.text and "row 12 ok" not in result.text
    assert "1 of 5002" in result.text and f"no line of {marker(key_for(other))} contains" in result.text
    assert not result.complete and not result.is_error and wire_cost(result.text) < 1_000
    many = recall(store, json.dumps({"key": marker(key_for(log)), "query": "ok"}), max_bytes=4_000)
    assert wire_cost(many.text) <= 4_000 and "5000 of 5002 (the first" in many.text
    bad = recall(store, json.dumps({"key": both, "query": "ok", "start_line": 3}), max_bytes=4_000)
    assert bad.is_error and "either a query or a range" in bad.text
    assert "query" in recall_tool_schema()["function"]["parameters"]["properties"]
