"""Identifier retention across nested summaries (the identifier ledger guarantees retention).

A long conversation is summarized again and again: each new segment starts with the previous
summary, whose ledger already lists every identifier summarized so far. Budgeting that ledger as a
share of the new segment squeezed it (the 30-turn real-stack run kept 51-100% per summary, losing the
*new* documents' numbers and names first). These tests pin the fix: an earlier ledger is carried at its
own size, the segment's own identifiers are always listed, and only when the ledger reaches its
ceiling do the oldest carried identifiers age out - still listed in the archived segment.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from contextkit.archive import Archive
from contextkit.compaction.compactor import Compactor
from contextkit.compaction.summarizer import ScriptedSummarizer
from contextkit.events import CompactionEvent, EventLog
from contextkit.messages import Message
from contextkit.policy import ledger as ids
from contextkit.policy import summary as s2
from contextkit.settings import Limits
from contextkit.sim.corpus import agent_segment, document
from contextkit.sizing import request_bytes

# a weak model's prose: passes the gate, quotes no identifier (so the ledger carries all of them)
WEAK = (
    "The user pasted several incident reports about services and the assistant answered which port each "
    "one mentions. The reports describe outages, their causes and the fixes."
)
LEDGER_BLOCK = re.compile(re.escape(ids.LEDGER_HEADER) + r"(?:\n(?:- |  \$ )[^\n]*)*")


def measure(history: Sequence[Message]) -> int:
    return request_bytes(history)


def exchange(seed: int, size: int | None = None) -> tuple[list[Message], str]:
    doc, _ = document(seed, size or 6_000 + (seed * 1_337) % 4_000)
    return [Message.user(f"Incident report {seed}:\n\n{doc}\n\nWhich port?"), Message.assistant("One port.")], doc


def summary_of(history: Sequence[Message]) -> str:
    return next(m.content for m in history if m.is_summary)


def test_a_summary_of_a_summary_keeps_every_identifier_of_its_segment() -> None:
    """Ten documents summarized, then that summary and two shorter documents: every identifier of all
    twelve is still written in the history. Before the fix the second ledger was cut to a third of its
    segment, most of which was the first ledger."""
    compactor = Compactor(archive=Archive.in_memory(), limits=Limits(min_keep_recent=1))
    history, docs = [Message.system("You answer questions about incident reports.")], []
    for seed in range(10):
        messages, doc = exchange(seed)
        history += messages
        docs.append(doc)
    history.append(Message.user("Thanks."))
    first = compactor.compact(history, summarizer=ScriptedSummarizer(WEAK), trigger="manual", budget=10**6,
                              measure=measure)  # fmt: skip
    assert first.summary_source == "model" and first.identifier_retention == 1.0
    history = first.history
    for seed in (10, 11):
        messages, doc = exchange(seed, 4_000)
        history += messages
        docs.append(doc)
    history.append(Message.user("Thanks."))
    carried = sum(len(block) for block in LEDGER_BLOCK.findall(summary_of(history)))
    assert carried > 4_000  # the first ledger is a third of the second segment
    second = compactor.compact(history, summarizer=ScriptedSummarizer(WEAK), trigger="manual", budget=10**6,
                               measure=measure)  # fmt: skip
    assert second.stage == "summary" and second.summary_source == "model"
    assert second.identifier_retention == 1.0
    text = summary_of(second.history)
    wanted = set().union(*(ids.identifiers(doc) for doc in docs))
    assert sorted(i for i in wanted if i not in text) == []
    assert len(text) < sum(len(d) for d in docs) // 4  # still a summary, not the documents again


def test_a_long_conversation_keeps_its_new_identifiers_and_ages_only_the_oldest() -> None:
    """30 turns of 6-10 KB documents under a 34 KB budget (a 48 KB gateway): every summary lists every
    identifier of the messages it summarizes for the first time; what leaves the ledger when it reaches
    its ceiling was carried by an earlier summary, is said in the event, and stays in the archived
    segment. No pass falls to truncation."""
    archive, log = Archive.in_memory(), EventLog()
    compactor = Compactor(archive=archive, limits=Limits(min_keep_recent=4), events=log)
    budget = 34_406
    history: list[Message] = [Message.system("You answer questions about incident reports.")]
    summaries = 0
    for seed in range(30):
        history += exchange(seed)[0]
        if measure(history) <= budget:
            continue
        result = compactor.compact(history, summarizer=ScriptedSummarizer(WEAK), trigger="auto", budget=budget,
                                   measure=measure)  # fmt: skip
        if result.summary_source != "model":
            history = result.history
            continue
        summaries += 1
        segment = archive.get(result.archived_keys[-1])
        assert segment is not None
        own = ids.identifiers(LEDGER_BLOCK.sub(" ", segment))  # the messages summarized for the first time
        carried = ids.identifiers("\n".join(LEDGER_BLOCK.findall(segment)))
        text = summary_of(result.history)
        assert sorted(i for i in own - carried if i not in text) == []
        lost = {i for i in own | carried if i not in text}
        assert lost <= carried
        event = next(e for e in result.events if e.phase == "summarize" and e.outcome == "applied")
        assert (f"{len(lost)} older identifiers aged out" in event.detail) == bool(lost)
        assert all(i in segment for i in lost)  # one recall away
        history = result.history
    assert summaries >= 10 and compactor.stats.truncation_falls == 0
    applied = [e for e in log if isinstance(e, CompactionEvent) and e.phase == "summarize" and e.outcome == "applied"]
    assert all(e.identifier_retention is not None and e.identifier_retention >= 0.8 for e in applied)
    assert sum(e.identifier_retention == 1.0 for e in applied) >= len(applied) // 2


def test_the_archived_segment_behind_an_earlier_summary_is_not_read_again() -> None:
    """The ledger is taken from the segment (and the stubs this pass made), not from what an earlier
    summary archived: its identifiers are already in that summary's ledger, or deliberately aged out."""
    archive = Archive.in_memory()
    old = archive.put("an older segment naming /srv/old/ghost.conf and port 7777", kind="segment")
    assert old
    earlier = Message.user(f"[STRUCTURED SUMMARY]\n\nnotes\n\n[recall <<ccr:{old}>>]", is_summary=True)
    history = [Message.system("s"), earlier]
    for seed in range(3):
        history += exchange(seed)[0]
    history.append(Message.user("next"))
    plan = s2.plan_segment(history, min_keep_recent=1)
    assert plan is not None
    ledger = s2.segment_ledger(plan, archive)
    assert "/srv/old/ghost.conf" not in ledger.identifiers() and "7777" not in ledger.identifiers()
    stub_key = archive.put("tool output naming /srv/new/fresh.conf", kind="tool_result")
    assert stub_key
    stubbed = [*history[:-1], Message.user(f"[cleared <<ccr:{stub_key}>>]"), history[-1]]
    plan = s2.plan_segment(stubbed, min_keep_recent=1)
    assert plan is not None
    assert "/srv/new/fresh.conf" in s2.segment_ledger(plan, archive, new_keys={stub_key}).identifiers()
    assert "/srv/new/fresh.conf" not in s2.segment_ledger(plan, archive).identifiers()  # an older stub


def test_a_tight_budget_does_not_cut_the_segments_own_identifiers() -> None:
    """The ceiling from the pass's budget bounds only what earlier ledgers add: a first summary of an agent
    segment under a budget just below the history still lists every planted identifier."""
    messages, planted = agent_segment(7)
    history = [Message.system("You are a coding agent."), *messages, Message.user("What next?")]
    compactor = Compactor(archive=Archive.in_memory(), limits=Limits(min_keep_recent=1))
    result = compactor.compact(history, summarizer=ScriptedSummarizer(WEAK), trigger="auto",
                               budget=measure(history) * 9 // 10, measure=measure)  # fmt: skip
    assert result.summary_source == "model" and result.identifier_retention == 1.0
    summary = summary_of(result.history)
    assert [value for _, value in planted.items() if value not in summary] == []
