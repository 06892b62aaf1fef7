"""Prompt assembly: entry conditions, stable -> volatile layout, the per-call log."""

from __future__ import annotations

import pytest

from contextkit.errors import ConfigError
from contextkit.messages import Message, to_wire_list
from contextkit.prompt.assembly import Assembler, Block
from contextkit.prompt.prefix import shared_prefix
from contextkit.sizing import dumps, text_tokens

PERSONA = "You are a careful coding agent. Read files, then report what you found."
RULES = "Prefer targeted reads with line ranges; grep before reading whole files."


def blocks() -> list[Block]:
    return [
        Block("clock", lambda c: f"Current time: {c['now']}", stability=9, role="user"),
        Block("persona", PERSONA, stability=0),
        Block(
            "memory",
            lambda c: "Project notes:\n" + c["notes"],
            stability=1,
            skip_when=lambda c: "no project notes" if not c.get("notes") else None,
        ),
        Block("rules", RULES, stability=0),
        Block("history", lambda c: c["history"], stability=5),
        Block("retrieved", lambda c: c.get("snippet"), stability=8, role="user"),
        Block("debug", "debug mode on", stability=2, enter_when=lambda c: bool(c.get("debug"))),
    ]


HISTORY = [Message.user("What does src/app/core.py do?"), Message.assistant("It parses requests.")]


def test_layout_is_stable_to_volatile_with_declaration_order_for_ties() -> None:
    asm = Assembler(blocks())
    assert [b.name for b in asm.layout] == ["persona", "rules", "memory", "debug", "history", "retrieved", "clock"]


def test_log_names_every_block_with_its_reason_and_tokens() -> None:
    asm = Assembler(blocks())
    result = asm.assemble(now="10:00", history=HISTORY)
    log = result.log
    assert log.entered == ["persona", "rules", "history", "clock"]
    assert log.skipped == {"memory": "no project notes", "debug": "enter_when is false", "retrieved": "rendered empty"}
    assert log.tokens_by_block()["persona"] == text_tokens(PERSONA)
    assert log.tokens_by_block()["clock"] == text_tokens("Current time: 10:00")
    assert log.tokens == sum(log.tokens_by_block().values())
    # the system blocks are merged into one message; history keeps its roles; the clock comes last
    assert [m.role for m in result.messages] == ["system", "user", "assistant", "user"]
    assert result.messages[0].content == PERSONA + "\n\n" + RULES
    assert result.messages[-1].content == "Current time: 10:00"
    assert log.block_of_message[0] == ("persona", "rules")
    # the log's bytes per block add up to the messages' JSON bytes
    entered = [e for e in log.entries if e.entered]
    assert sum(e.bytes for e in entered) == sum(len(dumps(w).encode()) for w in result.wire())
    text = str(log)
    assert "memory" in text and "no project notes" in text and "4 of 7 blocks entered" in text


def test_true_skip_when_and_skip_reason_of_a_bool() -> None:
    asm = Assembler([Block("a", "x"), Block("b", "y", skip_when=lambda c: True)])
    assert asm.assemble().log.skipped == {"b": "skip_when is true"}


def test_one_log_per_call_and_blocks_enter_when_their_condition_changes() -> None:
    asm = Assembler(blocks())
    asm.assemble(now="10:00", history=HISTORY)
    second = asm.assemble(now="10:01", history=HISTORY, notes="uses sqlite", debug=True, snippet="line 12: x = 1")
    assert [log.call for log in asm.logs] == [1, 2]
    assert second.log.entered == ["persona", "rules", "memory", "debug", "history", "retrieved", "clock"]
    assert "Project notes:\nuses sqlite" in second.messages[0].content


def test_stable_first_keeps_the_cached_prefix_volatile_first_loses_it() -> None:
    good = Assembler(blocks())
    a = dumps(to_wire_list(good.assemble(now="10:00", history=HISTORY).messages))
    b = dumps(to_wire_list(good.assemble(now="10:05", history=HISTORY).messages))
    # everything up to the clock is byte-identical
    assert shared_prefix(a, b) == a.index("Current time: 10:0") + len("Current time: 10:0")
    bad = Assembler([Block("clock", lambda c: f"Current time: {c['now']}", stability=0), *blocks()[1:]])
    c = dumps(to_wire_list(bad.assemble(now="10:00", history=HISTORY).messages))
    d = dumps(to_wire_list(bad.assemble(now="10:05", history=HISTORY).messages))
    assert shared_prefix(c, d) < 50 < shared_prefix(a, b)


def test_max_tokens_cuts_a_long_block_and_says_so() -> None:
    asm = Assembler([Block("doc", "word " * 500, max_tokens=20)])
    result = asm.assemble()
    assert text_tokens(result.messages[0].content) <= 20
    assert result.log.entries[0].reason == "cut to 20 tokens"
    assert result.log.entries[0].tokens <= 20


def test_messages_and_dicts_from_a_block() -> None:
    asm = Assembler([Block("h", lambda c: [{"role": "user", "content": "hi"}, Message.assistant("yo")])])
    result = asm.assemble()
    assert [m.content for m in result.messages] == ["hi", "yo"]
    assert result.log.entries[0].role == "user/assistant"
    assert result.log.entries[0].messages == 2


def test_merge_system_off_keeps_one_message_per_block() -> None:
    asm = Assembler([Block("a", "A"), Block("b", "B")], merge_system=False)
    assert [m.content for m in asm.assemble().messages] == ["A", "B"]


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: Block("", "x"), "non-empty name"),
        (lambda: Block("a", "x", role="tool"), "role must be one of"),
        (lambda: Block("a", "x", stability=1.5), "stability must be an int"),  # type: ignore[arg-type]
        (lambda: Block("a", 42), "render must be a string or a callable"),  # type: ignore[arg-type]
        (lambda: Block("a", "x", max_tokens=0), "max_tokens must be a positive int"),
        (lambda: Assembler([Block("a", "x"), Block("a", "y")]), "repeated: a"),
        (lambda: Assembler(["not a block"]), "takes Block values"),  # type: ignore[list-item]
    ],
)
def test_bad_configuration_is_a_clear_config_error(make, needle) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=needle):
        make()


def test_html_log_renders() -> None:
    log = Assembler(blocks()).assemble(now="1", history=HISTORY).log
    html = log._repr_html_()
    assert "<table>" in html and "no project notes" in html
    assert log.to_dicts()[0]["block"] == "persona" and log.to_dicts()[0]["call"] == 1
