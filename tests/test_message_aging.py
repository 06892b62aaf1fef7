"""``Message(age_out_after=N)``: a message that becomes a one-line recallable stub after N later user
turns (archived first, counted in the floor as sent), the same mechanism as the assembler's
``Block(age_out_after=N)``."""

from __future__ import annotations

import json

import pytest

from contextkit.archive import Archive
from contextkit.errors import InvalidMessageError
from contextkit.events import CompactionEvent, NoticeEvent
from contextkit.limits.floor import floor_measure
from contextkit.markers import extract_keys_tolerant
from contextkit.messages import Message, message_from_dict, message_to_dict
from contextkit.policy.aging import age_messages, aged_stub, turns_after
from contextkit.policy.testing import MemorySink
from contextkit.prompt.assembly import Assembler, Block
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator

SKILL = "Skill: when a deploy fails, read the rollout log before retrying; never retry more than twice.\n" * 40


def test_a_message_ages_into_a_recallable_stub_after_n_later_turns() -> None:
    sink = MemorySink()
    skill = Message.system(SKILL, age_out_after=2)
    history = [skill, Message.user("q1"), Message.assistant("a1"), Message.user("q2")]
    assert turns_after(history)[0] == 1  # sent with q1: q2 is the first turn after it
    same, keys = age_messages(history, sink)
    assert same == history and keys == []  # one later turn: whole
    history += [Message.assistant("a2"), Message.user("q3")]
    aged, keys = age_messages(history, sink)
    stub = aged[0]
    assert stub.role == "system" and stub.content.startswith("[system message: aged out after 2 turns]")
    assert len(stub.content) < 120 and stub.age_out_after is None  # a stub does not age again
    assert extract_keys_tolerant(stub.content) == keys and sink.get(keys[0]) == SKILL  # archived first
    assert aged[1:] == history[1:]  # nothing else changes
    assert age_messages(aged, sink) == (aged, [])  # idempotent


def test_only_user_turns_count_and_stubs_keep_the_pairing_and_the_images() -> None:
    sink = MemorySink()
    call = Message.assistant("reading", tool_calls=[])
    result = Message.tool("c1", "log line\n" * 50, name="read", age_out_after=1)
    picture = Message.user("look", images=("data:image/png;base64,AAAA",), age_out_after=1)
    history = [picture, call, result, Message.user("recalled text", is_recall=True), Message.user("synthetic", synthetic=True)]
    assert turns_after(history) == [0, 0, 0, 0, 0]  # recall output and injected prompts are not turns
    assert age_messages(history, sink) == (history, [])
    history.append(Message.user("next question"))
    partial = age_messages(history, MemorySink())[0]
    assert partial[0] != picture and partial[2] == result  # the question aged; its turn's result waits for an answer
    history[-1:] = [Message.assistant("answer 1"), Message.user("next question")]
    aged, keys = age_messages(history, sink)
    assert len(keys) == 2
    assert aged[0].images == () and "[image_url: data:image/png;base64,AAAA]" in sink.get(keys[0])  # type: ignore[operator]
    assert aged[2].role == "tool" and aged[2].tool_call_id == "c1" and aged[2].content.startswith("[tool message: aged out after 1 turn]")
    assert sink.get(keys[1]) == "log line\n" * 50


class _Refusing(MemorySink):
    def put(self, content: str, **kw: object) -> str | None:  # type: ignore[override]
        return None


def test_a_message_the_archive_refuses_stays_whole_and_bad_counts_are_refused() -> None:
    history = [Message.system(SKILL, age_out_after=1), Message.user("q1"), Message.user("q2")]
    assert age_messages(history, _Refusing()) == (history, [])
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InvalidMessageError, match="age_out_after"):
            Message.system("x", age_out_after=bad)  # type: ignore[arg-type]
    m = Message.system(SKILL, age_out_after=3)
    assert message_from_dict(json.loads(json.dumps(message_to_dict(m)))).age_out_after == 3  # saved and loaded


def test_the_assembler_blocks_age_through_the_same_mechanism() -> None:
    block_sink, message_sink = MemorySink(), MemorySink()
    asm = Assembler([Block("rules", SKILL, age_out_after=1)], archive=block_sink)
    asm.assemble()
    stub = asm.assemble().messages[0].content
    assert stub == aged_stub(SKILL, label="rules", after=1, unit="call", archive=message_sink, kind="block", origin={})
    assert block_sink.get(extract_keys_tolerant(stub)[0]) == SKILL


def test_a_session_sends_the_stub_once_the_message_aged_and_the_floor_counts_it() -> None:
    with GatewaySimulator(record_bodies=True) as gw:
        session = Session(gw.model, api_base=gw.api_base, api_key="k", archive=Archive.in_memory(session_id="age"), status=None)
        session.send([Message.system(SKILL, age_out_after=2), Message.user("q1")])
        floor_whole = floor_measure(session._context())
        session.send("q2")
        whole = [gw.body(r.seq).decode() for r in gw.requests]
        session.send("q3")
        aged = gw.body(gw.requests[-1].seq).decode()
        floor_aged = floor_measure(session._context())
    assert all("never retry more than twice" in body for body in whole)  # sent whole for two turns
    assert "never retry more than twice" not in aged and "aged out after 2 turns" in aged
    stub = session.history[0]
    (key,) = extract_keys_tolerant(stub.content)
    assert session.archive.get(key) == SKILL and session.archive.recall(stub.content).text.startswith(SKILL[:40])
    assert floor_aged.bytes < floor_whole.bytes - len(SKILL) // 2  # the floor counts the message as sent: its stub
    events = [e for e in session.events if isinstance(e, CompactionEvent) and e.phase == "aging"]
    assert len(events) == 1 and events[0].archived_keys == (key,) and events[0].bytes_after < events[0].bytes_before
    assert [e.code for e in session.events if isinstance(e, NoticeEvent) and e.code == "aging"] == ["aging"]
