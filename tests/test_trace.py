"""Per-call request trace: sizes and origins of every piece, mechanisms, content-free default."""

from __future__ import annotations

import json

from contextkit.archive import Archive
from contextkit.limits.state import PAYLOAD_NOTICE
from contextkit.messages import Message, ToolCall, to_wire_list
from contextkit.policy.budgets import enforce_tool_result_budgets
from contextkit.policy.microcompact import microcompact
from contextkit.policy.testing import MemorySink
from contextkit.policy.truncate import emergency_truncate
from contextkit.prompt.assembly import Assembler, Block
from contextkit.prompt.trace import trace_request, trace_session
from contextkit.settings import Limits
from contextkit.sim.workloads import Workspace
from contextkit.sizing import message_bytes, request_bytes, text_tokens

WS = Workspace(seed=3, target_bytes=12_000)
SECRET = "TOP-SECRET-LINE-42"


def agent_history(turns: int = 6) -> list[Message]:
    """system, then per turn: user, assistant calling read_file, the tool result, a short answer."""
    out = [Message.system("You are a coding agent.")]
    for t in range(turns):
        read = WS.read_file(f"src/mod_{t}.py", 1, 150)
        call = ToolCall(f"call_{t}", "read_file", json.dumps({"path": read.path, "start": 1, "end": 150}))
        out += [
            Message.user(f"step {t}: read src/mod_{t}.py {SECRET}"),
            Message.assistant("", [call]),
            read.message(f"call_{t}"),
            Message.assistant(f"read {read.path}"),
        ]
    return out


def test_plain_history_pieces_sizes_and_origins() -> None:
    history = agent_history(2)
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    trace = trace_request(history, tools=tools, model="openai/gpt-4o-mini")
    assert trace.bytes == request_bytes(history, tools=tools, model="openai/gpt-4o-mini")
    assert [p.origin for p in trace.pieces[:5]] == ["system", "user", "assistant", "tool_result", "assistant"]
    tool = trace.pieces[3]
    assert (tool.tool, tool.path, tool.lines) == ("read_file", "src/mod_0.py", (1, 150))
    assert tool.bytes == message_bytes(history[3])
    assert tool.tokens == text_tokens(history[3].content, "openai/gpt-4o-mini")
    assert trace.pieces[2].tool_calls == ("read_file",)
    assert trace.mechanisms == {} and trace.tools == ("read_file",) and trace.tools_bytes > 0
    assert trace.tokens == sum(p.tokens for p in trace.pieces) + trace.tools_tokens


def test_content_free_by_default_and_content_on_request() -> None:
    history = agent_history(1)
    trace = trace_request(history)
    dumped = json.dumps(trace.to_dict())
    assert SECRET not in dumped and "content" not in trace.to_dicts()[1]
    assert len(trace.pieces[1].sha256) == 16
    full = trace_request(history, include_content=True)
    assert SECRET in json.dumps(full.to_dict())
    assert full.pieces[1].sha256 == trace.pieces[1].sha256


def test_microcompact_and_budget_stubs_are_named() -> None:
    sink = MemorySink()
    history, report = microcompact(agent_history(6), archive=sink)
    assert report.truncated and report.summarized
    capped, budget = enforce_tool_result_budgets(history, archive=sink, turn_budget=200_000, per_result=3_000)
    assert budget.truncated
    trace = trace_request(capped)
    mech = trace.mechanisms
    assert mech["one-lined"] == report.summarized
    assert mech["budget-capped"] >= 1
    # the previewed results that the budget did not cut further are still counted as previews
    assert mech.get("previewed", 0) + mech["budget-capped"] >= report.truncated
    stubs = [p for p in trace.pieces if p.origin == "stub"]
    assert stubs and all(p.markers and p.role == "tool" and p.path for p in stubs)
    # every stub points at content the archive really holds
    assert all(sink.get(k) is not None for k in trace.archive_keys)
    assert "one-lined" in str(trace) and "markers" in str(trace)


def test_truncation_summary_notice_and_recall_are_told_apart() -> None:
    sink = MemorySink()
    history, report = emergency_truncate(agent_history(6), keep=6, archive=sink)
    history = [
        *history,
        Message.user(PAYLOAD_NOTICE),
        Message.user("--- @recall <<ccr:0123456789abcdef>> ---\nthe original", is_recall=True, preserve_verbatim=True),
    ]
    trace = trace_request(history)
    notice = trace.pieces[1]
    assert notice.origin == "notice" and notice.mechanism == "pruned"
    assert notice.dropped_messages == report.dropped == trace.dropped_messages
    assert notice.markers == (report.segment_key,)
    assert [p.origin for p in trace.pieces[-2:]] == ["notice", "recall"]
    assert trace.pieces[-1].mechanism is None and trace.pieces[-1].preserve_verbatim
    # the same from wire dicts (no metadata): the texts alone tell the mechanism
    wire = trace_request(to_wire_list(history))
    assert [p.origin for p in wire.pieces] == [p.origin for p in trace.pieces]
    assert wire.dropped_messages == report.dropped


def test_summary_message_is_a_summary() -> None:
    summary = Message.user(
        "[STRUCTURED SUMMARY - covering 12 earlier messages]\n\n## Files Read\n- a.py"
        "\n\n[full transcript of the summarized segment recoverable via @recall <<ccr:0123456789abcdef>>]",
        is_summary=True,
        summary_of=12,
    )
    trace = trace_request([Message.system("s"), summary])
    assert trace.pieces[1].origin == "summary" and trace.pieces[1].mechanism == "summarized"
    assert trace.dropped_messages == 12


def test_assembly_blocks_are_named_in_the_trace() -> None:
    asm = Assembler([Block("persona", "Be brief."), Block("rules", "No guessing."), Block("q", "hi", role="user")])
    result = asm.assemble()
    trace = trace_request(result.messages, blocks=result.log)
    assert [p.blocks for p in trace.pieces] == [("persona", "rules"), ("q",)]
    assert "persona+rules" in str(trace)


def test_trace_session_is_read_only_and_matches_what_would_be_sent() -> None:
    from contextkit.session.core import Session

    archive = Archive.in_memory(session_id="t")
    session = Session(
        "openai/gpt-4o-mini",
        system="You are a coding agent.",
        limits=Limits(context_window=64_000, tool_result_max_chars=3_000),
        archive=archive,
        status=None,
        on_flush=None,
    )
    session.add_messages(to_wire_list(agent_history(2)[1:]))
    before = (len(archive), [m.content for m in session.history])
    trace = trace_session(session)
    assert (len(archive), [m.content for m in session.history]) == before
    assert trace.mechanisms.get("budget-capped") == 2  # two 150-line reads over the 3,000-char cap
    assert trace.tools == ()  # a plain chat is offered `recall` only once something is archived (tools lead the cached prefix)
    assert trace.bytes < session.measure().bytes


def test_a_piece_with_many_markers_stays_one_readable_row() -> None:
    from contextkit.prompt.trace import _markers

    keys = tuple(f"{i:016x}" for i in range(12))
    assert _markers(keys) == f"markers {keys[0]} {keys[1]} +10 more" and _markers(keys[:1]) == f"markers {keys[0]}"
    assert _markers(()) == ""
