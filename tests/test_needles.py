"""Needle questions: a task metric that can fail, graded against the simulator over real HTTP."""

from __future__ import annotations

import json

import pytest

from contextkit.experiments import GatewaySpec, RunSpec, Workload, run_one
from contextkit.markers import key_for, marker
from contextkit.sim.model import Conversation, ScriptedModel, SimCall, SimMessage
from contextkit.sim.needles import MAX_RECALLS, NEEDLE_KINDS, answer_of, make_needle, plant

# no cap and a window far above the workload: the whole history always fits
ROOMY = GatewaySpec("roomy", context_window=1_000_000, max_body=None)
SMALL = 4_000  # bytes per tool output: a 12-turn session stays small


def _question_conv(needle_id: str, cue: str, *before: SimMessage, tools: tuple[str, ...] = ()) -> Conversation:
    spec = json.dumps({"cue": cue, "tool": "tail_log"})
    question = SimMessage("user", f"Question {needle_id}: which? [[needle:{needle_id} {spec}]]")
    return Conversation((SimMessage("system", "agent"), *before, question), tools)


def test_every_kind_is_planted_where_a_preview_would_not_keep_it() -> None:
    w = Workload(11, 40)
    assert sorted(n.kind for n in w.needles) == sorted(NEEDLE_KINDS)
    for needle in w.needles:
        w.user_message(needle.turn)
        name, args = w.plan[needle.turn]
        assert name == needle.tool
        out = w.call(name, json.dumps(args))
        at = out.index(needle.fact)
        assert 2_000 < at < len(out) - 500  # not in a microcompact head (2,000) or tail (500) preview
        if name == "get_json":
            json.loads(out)  # still valid JSON
    # every needle is asked at the end, and those planted early enough also a few turns later
    asked = sorted(n.id for n in w.questions.values())
    assert asked.count("n1") >= 1 and len(w.questions) >= len(w.needles)
    assert max(w.questions) == w.turns - 1 and all(w.is_question(t) for t in w.questions)


def test_a_file_needle_stays_in_every_later_read_of_that_file() -> None:
    w = Workload(3, 40)
    needle = next(n for n in w.needles if n.kind == "line")
    w.user_message(needle.turn + 1)
    assert needle.fact in w.call("read_file", json.dumps({"path": needle.path}))
    ranged = w.call("read_file", json.dumps({"path": needle.path, "start": needle.line, "end": needle.line}))
    assert needle.fact in ranged and ranged.startswith(f"{needle.line:>5}| ")
    w.user_message(0)  # before the plant turn the file has its original line
    if needle.turn > 0:
        assert needle.fact not in w.call("read_file", json.dumps({"path": needle.path}))


def test_the_model_answers_only_from_what_the_request_carries() -> None:
    needle = make_needle(0, "port", seed=1, turn=0)
    log = plant(needle, "\n".join(f"line {i}" for i in range(90)), seed=1)
    model = ScriptedModel()
    call = SimMessage("assistant", "", (SimCall("c1", "tail_log", "{}"),))
    seen = _question_conv("n1", needle.cue, SimMessage("user", "go"), call, SimMessage("tool", log, tool_call_id="c1"))
    assert answer_of(model.reply(seen).text, "n1") == needle.value
    # the question alone names the cue but not the value: the model must not invent it
    gone = _question_conv("n1", needle.cue, SimMessage("user", "go"))
    assert model.reply(gone).text == "Answer n1: unknown"
    # an earlier answer does not repeat the cue, so it cannot leak the value either
    earlier = SimMessage("assistant", f"Answer n1: {needle.value}")
    assert model.reply(_question_conv("n1", needle.cue, earlier)).text == "Answer n1: unknown"


def test_the_model_follows_a_marker_through_recall_and_stops_when_it_runs_out() -> None:
    needle = make_needle(0, "error", seed=2, turn=0)
    key = "0123456789abcdef"
    call = SimMessage("assistant", "", (SimCall("c1", "tail_log", "{}"),))
    stub = SimMessage("tool", f"[Old tool result cleared - 90 lines]\n{marker(key)}", tool_call_id="c1")
    conv = _question_conv("n1", needle.cue, call, stub, tools=("tail_log", "recall"))
    first = ScriptedModel().reply(conv)
    assert first.finish == "tool_calls" and first.tool_calls[0].name == "recall"
    # contextkit's recall can search: the first call asks every original in view for the cue
    assert json.loads(first.tool_calls[0].arguments) == {"key": marker(key), "query": needle.cue}
    # the recall result carries the fact: answered, and marked as recalled
    recalled = plant(needle, "\n".join(f"row {i}" for i in range(60)), seed=2)
    after = Conversation(
        (*conv.messages, SimMessage("assistant", "", first.tool_calls), SimMessage("tool", recalled, tool_call_id=first.tool_calls[0].id)),
        conv.tools,
    )  # fmt: skip
    assert ScriptedModel().reply(after).text == f"Answer n1: {needle.value} (from recalled content)"
    # without the recall tool the marker is useless
    assert ScriptedModel().reply(_question_conv("n1", needle.cue, call, stub)).text == "Answer n1: unknown"
    # a search that finds nothing: the model reads the original itself, once
    empty = Conversation(
        (*conv.messages, SimMessage("assistant", "", first.tool_calls), SimMessage("tool", "nothing", tool_call_id=first.tool_calls[0].id)),
        conv.tools,
    )  # fmt: skip
    second = ScriptedModel().reply(empty)
    assert json.loads(second.tool_calls[0].arguments) == {"key": marker(key)}
    # a recall that does not hold the fact either: no other marker left, so "unknown" (never a loop)
    emptier = Conversation(
        (*empty.messages, SimMessage("assistant", "", second.tool_calls), SimMessage("tool", "nothing", tool_call_id=second.tool_calls[0].id)),
        conv.tools,
    )  # fmt: skip
    assert ScriptedModel().reply(emptier).text == "Answer n1: unknown"
    # a retrieval tool that cannot search (headroom's) is read one marker at a time from the start
    hr = SimMessage("tool", "[90 items compressed, hash=0123456789abcdef0123]", tool_call_id="c1")
    plain = ScriptedModel().reply(_question_conv("n1", needle.cue, call, hr, tools=("tail_log", "headroom_retrieve")))
    assert json.loads(plain.tool_calls[0].arguments) == {"hash": "0123456789abcdef0123"}
    assert MAX_RECALLS >= 3


def _run(strategy: str, gw: GatewaySpec, turns: int = 12, target: int = SMALL) -> dict[str, object]:
    return run_one(RunSpec(strategy, gw, 0, turns, target_bytes=target))


def test_full_history_scores_100_and_forgetting_scores_0() -> None:
    full = _run("none", ROOMY)
    assert full["completed"] and full["needles_planned"] == full["needles_correct"] >= 3
    assert full["needle_accuracy"] == 1.0
    forgot = _run("forget-all", ROOMY)
    # it completes every turn: the metric, not the completion rate, shows what it dropped
    assert forgot["completed"] and forgot["needle_accuracy"] == 0.0


def test_a_sliding_window_scores_low() -> None:
    row = _run("sliding-window", ROOMY, turns=20)
    assert row["completed"] and row["needle_accuracy"] is not None
    assert row["needle_accuracy"] <= 0.25


def _contextkit_session(window: int) -> tuple[object, list[str], int]:
    """contextkit on a 14-turn workload behind a simulator with ``window`` tokens: (score, archived keys
    whose recall is not byte-exact, recall calls the model made)."""
    from contextkit import Limits, Session
    from contextkit.archive import Archive
    from contextkit.experiments.workload import SYSTEM_PROMPT
    from contextkit.sim import GatewaySimulator

    w = Workload(0, 14, target_bytes=SMALL)
    replies = {}
    with GatewaySimulator(context_window=window) as sim:
        kw = sim.litellm_kwargs()
        archive = Archive.in_memory(session_id="needles")
        s = Session(kw.pop("model"), system=SYSTEM_PROMPT, limits=Limits(context_window=window), archive=archive,
                    tools=w.session_tools(), session_id="needles", status=False, on_flush=None, **kw)  # fmt: skip
        for turn in range(w.turns):
            replies[turn] = s.send(w.user_message(turn)).text
        inexact = [e.key for e in archive.entries() if key_for(archive.recall(marker(e.key)).text) != e.key]
        recalls = sum(1 for m in s.history for c in m.tool_calls if c.name == "recall")
        archive.close()
    return w.score(replies), inexact, recalls


def test_contextkit_under_pressure_archives_byte_exact_and_the_model_recalls() -> None:
    score, inexact, recalls = _contextkit_session(8_000)
    assert inexact == []  # the byte-exact archive check that used to be the "recall fidelity" column
    assert recalls >= 2 and score.asked == score.planned


def test_contextkit_answers_every_needle_under_pressure() -> None:
    """An 8k window: every planted fact left the context long before it is asked. Each original stays
    one recall away (summaries and notices index them flat) and recall can search them by the cue."""
    score, _, _ = _contextkit_session(8_000)
    assert score.correct == score.planned


def test_contextkit_without_pressure_answers_every_needle() -> None:
    row = _run("contextkit", ROOMY)
    assert row["completed"] and row["needle_accuracy"] == 1.0


@pytest.mark.parametrize("kind", NEEDLE_KINDS)
def test_a_reply_is_graded_on_the_value_only(kind: str) -> None:
    needle = make_needle(2, kind, seed=5, turn=1, path="src/a.py", path_lines=300)
    assert needle.correct(f"Answer n3: {needle.value}.")
    assert not needle.correct("Answer n3: unknown") and not needle.correct(f"Answer n1: {needle.value}")
    assert needle.correct(f"Answer n3: {needle.value} (from recalled content)")
