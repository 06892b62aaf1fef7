"""The engine's decisions: one test per promise, through litellm over real HTTP to the simulator.

Learn only from evidence; never send what is known to fail; transactional turns; the task survives;
one rule for a message too big to send; limits that recover; rewind, manual compaction, max_rounds,
cancellation, unknown windows, turn numbers and the notice that fits the session.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from helpers.histories import pasted_history, read_history
from helpers.logcheck import assert_known_limits_respected

from contextkit import Limits, Message
from contextkit.archive import Archive
from contextkit.errors import PayloadFloorError, ProviderError, RecoveryFailedError, UsageError
from contextkit.events import CapEvent, CompactionEvent, LimitEvent, NoticeEvent, RecoveryEvent, RequestEvent
from contextkit.limits.state import PAYLOAD_NOTICE_MARKER
from contextkit.policy.expand import expand_markers
from contextkit.policy.oversize import EXCERPT_TAG
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace
from contextkit.sim.model import AgentScript
from contextkit.sizing import format_size, request_bytes
from contextkit.tools import ToolResult

WINDOW = 1_000_000


def session_for(gw: GatewaySimulator, *, route: str = "openai", **kwargs: Any) -> Session:
    kw = gw.litellm_kwargs(route)
    model = kw.pop("model")
    kwargs.setdefault("archive", Archive.in_memory(session_id="t"))
    kwargs.setdefault("status", None)
    kwargs.setdefault("limits", Limits(context_window=WINDOW, retry_backoff=0.0))
    return Session(model, session_id="t", **kw, **kwargs)


def limits_of(session: Session) -> tuple[Any, ...]:
    st = session._state
    return st.cap, st.cap_source, st.context_window, st.turn_budget, st.per_result_budget


def events(session: Session, cls: type) -> list[Any]:
    return [e for e in session.events if isinstance(e, cls)]


def notices(session: Session, code: str) -> list[NoticeEvent]:
    return [e for e in events(session, NoticeEvent) if e.code == code]


def recoverable(session: Session, text: str) -> bool:
    return text in expand_markers("\n\x00\n".join(m.content for m in session.history), session.archive)


def chat(session: Session, turns: int, size: int = 6_000, seed: int = 0) -> None:
    logs = Workspace(seed=seed, target_bytes=size)
    for i in range(turns):
        session.send(f"turn {i}: log\n" + logs.tail_log(size // 60).content)


# 1. learn only from evidence -------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["openai", "anthropic"])
def test_overflow_teaches_a_token_window_never_a_byte_cap(gw: GatewaySimulator, route: str) -> None:
    gw.configure(context_window=6_000, overflow_style="anthropic" if route == "anthropic" else "openai")
    session = session_for(gw, route=route)
    session.add_messages(pasted_history(n=4, size=12_000))
    assert session.send("summarize").text
    assert session.payload_cap is None and not events(session, CapEvent)
    (learned,) = [e for e in events(session, LimitEvent) if e.limit == "window"]
    assert learned.value == 6_000 and learned.source == "learned" and "6,000-token window" in learned.evidence
    assert session.context_window == 6_000


def test_an_overflow_without_a_number_lowers_the_window_once_per_episode(gw: GatewaySimulator) -> None:
    """Bedrock says only "Input is too long": the window is learned once (3/4 of what overflowed),
    not 3/4 of it again on every rung."""
    gw.configure(context_window=3_000, overflow_style="bedrock")
    session = session_for(gw)
    session.add_messages(pasted_history(n=6, size=16_000))
    assert session.send("summarize").text
    levels = [e.level for e in events(session, RecoveryEvent) if e.outcome == "retrying"]
    windows = [e for e in events(session, LimitEvent) if e.limit == "window"]
    assert len(levels) >= 2 and len(windows) == 1, (levels, [w.value for w in windows])
    first_overflow = next(e for e in events(session, RequestEvent) if e.failure_kind == "context_overflow")
    assert windows[0].value == int(first_overflow.tokens * 0.75)


@pytest.mark.parametrize("fault", ["waf403", "413", "bedrock403"])
def test_a_stray_rejection_far_below_an_accepted_size_is_retried_and_teaches_nothing(
    gw: GatewaySimulator, fault: str
) -> None:
    session = session_for(gw)
    session.add_messages(read_history(n=6, size=10_000))
    session.send("look at it")  # a ~60 KB body goes through
    session.compact("keep the file names")  # the history is now much smaller
    before, limits = session.history, limits_of(session)
    gw.fail_next(fault)  # one stray page on a small request
    assert session.send("and now?").text
    rejected = [r for r in gw.requests if not r.accepted]
    assert len(rejected) == 1 and rejected[0].bytes < 0.5 * max(r.bytes for r in gw.requests if r.accepted)
    assert limits_of(session) == limits and session.payload_cap is None
    assert not events(session, CapEvent) and not events(session, RecoveryEvent)
    assert session.history[: len(before)] == before  # nothing compacted, no notice inserted
    assert session.stats.retries == 1 and "not a size limit" in notices(session, "retry")[0].text


def test_a_rejection_of_a_body_no_larger_one_contradicts_is_evidence(gw: GatewaySimulator) -> None:
    session = session_for(gw)
    gw.fail_next("waf403")  # the very first request: nothing bigger was ever accepted
    session.add_messages(read_history(n=4, size=8_000))
    assert session.send("look").text
    rejected = gw.requests[0]
    assert session.cap_source == "learned" and session.payload_cap == rejected.bytes * 3 // 4
    (cap,) = [e for e in events(session, LimitEvent) if e.limit == "cap"]
    assert cap.rejected_bytes == rejected.bytes and "WAF 403" in cap.evidence


def test_a_body_dropped_again_while_smaller_ones_succeeded_is_treated_as_payload(gw: GatewaySimulator) -> None:
    """nginx ``return 444`` at 60 KB: far below the old 500 KB rule. The first drop is retried; the
    second drop of the same body, after smaller requests succeeded, is evidence of a body limit."""
    gw.configure(max_body="60KB", reject_with="drop")
    session = session_for(gw)
    chat(session, 2, size=12_000)  # ~25 KB requests go through
    session.send("a big one:\n" + Workspace(seed=1, target_bytes=50_000).tail_log(900).content)
    drops = [r for r in gw.requests if r.status == 0]
    assert drops[0].body_sha256 == drops[1].body_sha256  # retried once, then treated as payload
    assert len({r.body_sha256 for r in drops}) == len(drops) - 1  # later drops: evidence at once, no retry
    assert set(session.stats.failures_by_kind) == {"transient"}  # what litellm said; the evidence said more
    assert session.cap_source == "learned" and session.payload_cap is not None
    assert session.payload_cap < drops[-1].bytes
    outcomes = [(e.failure_kind, e.outcome) for e in events(session, RecoveryEvent)]
    assert ("likely_payload", "retrying") in outcomes and outcomes[-1][1] == "recovered"
    assert_known_limits_respected(gw.requests)


def test_a_single_drop_is_retried_and_teaches_nothing(gw: GatewaySimulator) -> None:
    session = session_for(gw)
    chat(session, 1)
    gw.fail_next("drop")
    chat(session, 1, seed=1)
    assert session.payload_cap is None and not events(session, RecoveryEvent) and session.stats.retries == 1


@pytest.mark.parametrize(
    "body",
    [
        None,  # "Unrecognized request argument supplied: frobnicate"
        "Invalid 'messages[0].name': string does not match pattern. Expected a string that matches the pattern "
        "'^[a-zA-Z0-9_-]+$'.",
    ],
)
def test_a_non_size_failure_changes_neither_history_nor_limits(gw: GatewaySimulator, body: str | None) -> None:
    session = session_for(gw)
    chat(session, 2)
    before, limits, archived = session.history, limits_of(session), len(session.archive)
    gw.fail_next("400", body=body)
    with pytest.raises(ProviderError, match="not a size problem"):
        session.send("one more question")
    assert session.history == before and limits_of(session) == limits and len(session.archive) == archived
    assert not events(session, LimitEvent) and not events(session, RecoveryEvent)
    assert session.send("one more question").text  # the next turn is not burdened by the failed one
    assert [m.content for m in session.history].count("one more question") == 1


# 2. never send what is known to fail ------------------------------------------------------------------------


@pytest.mark.parametrize("reject_with", ["413", "waf403", "413-html"])
def test_no_request_at_or_above_a_rejected_size_is_ever_sent_again(gw: GatewaySimulator, reject_with: str) -> None:
    gw.configure(max_body="40KB", reject_with=reject_with)
    session = session_for(gw)
    chat(session, 8, size=9_000)
    rejected = [r for r in gw.requests if not r.accepted]
    assert rejected, "the gateway must have refused something"
    assert_known_limits_respected(gw.requests)
    assert all(r.bytes < rejected[0].bytes for r in gw.requests if r.seq > rejected[0].seq)


def test_the_payload_notice_never_makes_a_refused_body_bigger(gw: GatewaySimulator) -> None:
    """The old guard compared hashes: a retry with the one-line notice was 'different' and went out,
    bigger than the body just refused. Now the learned cap is a hard limit for the retry too."""
    session = session_for(gw)
    session.add_messages([{"role": "user", "content": "hello " * 3_000}, {"role": "assistant", "content": "ok"}])
    gw.fail_next("413")
    assert session.send("again").text
    first, *rest = gw.requests
    assert rest and all(r.bytes < first.bytes for r in rest)
    assert any(PAYLOAD_NOTICE_MARKER in m.content for m in session.history)
    assert session.stats.failures_by_kind == {"payload_too_large": 1}  # never an invented failure kind


def test_a_configured_cap_is_a_hard_limit(gw: GatewaySimulator) -> None:
    session = session_for(gw, limits=Limits(context_window=WINDOW, max_payload="24KB"))
    chat(session, 6, size=8_000)
    assert gw.requests and max(r.bytes for r in gw.requests) <= 24 * 1024


# 3. transactional turns ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", ["send", "asend", "stream"])
def test_recovery_failed_restores_the_history_of_before_the_turn(gw: GatewaySimulator, loop: str) -> None:
    session = session_for(gw)
    chat(session, 2)
    before, keys = session.history, len(session.archive)
    gw.fail_next("overflow", times=30)  # every request overflows, whatever its size
    with pytest.raises(RecoveryFailedError) as info:
        if loop == "send":
            session.send("please go on")
        elif loop == "asend":
            asyncio.run(session.asend("please go on"))
        else:
            list(session.stream("please go on"))
    assert info.value.history == before and session.history == before
    assert len(session.archive) >= keys  # what the ladder archived stays (append-only)
    assert any(e.code == "turn_failed" for e in events(session, NoticeEvent))


def test_a_failed_turn_leaves_no_trace_so_the_next_does_not_fail_the_same_way(gw: GatewaySimulator) -> None:
    session = session_for(gw)
    chat(session, 1)
    before = session.history
    gw.fail_next("500", times=3)  # beyond the two retries
    with pytest.raises(ProviderError):
        session.send("x" * 5_000)
    assert session.history == before
    assert session.send("short question").text
    assert not any(m.content == "x" * 5_000 for m in session.history)


# 4. the task survives --------------------------------------------------------------------------------------------


def test_recovery_keeps_the_newest_request_and_its_tool_chain(gw: GatewaySimulator) -> None:
    """A long agent chain since the user's request, behind a small gateway: every rung keeps the
    request and the whole call/result chain (the old nuclear rung kept the last 4 messages)."""
    ws = Workspace(seed=2, target_bytes=9_000)
    gw.configure(max_body="48KB", reject_with="413", agent=AgentScript.seeded(seed=2, steps=7))
    session = session_for(gw, tools=list(ws.tools.values()))
    task = "Investigate the service and report."
    assert session.send(task).text
    history = session.history
    i = max(i for i, m in enumerate(history) if m.role == "user" and PAYLOAD_NOTICE_MARKER not in m.content)
    assert history[i].content == task
    calls = [m for m in history[i:] if m.role == "assistant" and m.tool_calls]
    assert len(calls) == 7 and len([m for m in history[i:] if m.role == "tool"]) == 7
    assert_known_limits_respected(gw.requests)


def test_the_floor_message_names_real_sizes_and_no_system_prompt_when_there_is_none(gw: GatewaySimulator) -> None:
    def lookup(query: str) -> str:
        """Look something up."""
        return "nothing"

    lookup.__doc__ = "Look something up. " + "Very detailed tool documentation. " * 1_000
    gw.configure(max_body="24KB", reject_with="413")
    session = session_for(gw, tools=[lookup])
    with pytest.raises(PayloadFloorError) as info:
        session.send("hi")
    text = str(info.value)
    schemas = format_size(request_bytes([], tools=session.tool_schemas) - request_bytes([]))  # about 34 KB
    assert "system prompt" not in text and f"tool schemas are {schemas}" in text and "newest message is 2 B of text" in text
    assert session.history == []


# 5. one rule for a newest message that cannot fit --------------------------------------------------------------


@pytest.mark.parametrize("binds", ["learned", "configured", "window"])
def test_a_message_too_big_to_send_whole_goes_as_an_excerpt_the_model_can_page(
    gw: GatewaySimulator, binds: str
) -> None:
    paste = "\n".join(f"line {i}: " + "payload data " * 8 for i in range(2_500))  # ~270 KB, 2,500 lines
    if binds == "learned":
        gw.configure(max_body="96KB", reject_with="413")
        limits = Limits(context_window=WINDOW, retry_backoff=0.0)
    elif binds == "configured":
        limits = Limits(context_window=WINDOW, max_payload="96KB")
    else:
        limits = Limits(context_window=20_000)
    lines: list[str] = []
    session = session_for(gw, limits=limits, status=lines.append)
    assert session.send("Please check this:\n" + paste).text
    sent = session.history[-2]
    assert sent.content.startswith(EXCERPT_TAG) and "start_line=" in sent.content and "recall" in sent.content
    assert "line 0:" in sent.content and "line 2499:" in sent.content  # head and tail
    assert recoverable(session, "Please check this:\n" + paste)
    (notice,) = notices(session, "message_excerpted")
    assert notice.level == "warning" and any("too large to send whole" in line for line in lines)
    assert_known_limits_respected(gw.requests)
    assert len([r for r in gw.requests if not r.accepted]) == (1 if binds == "learned" else 0)


# 6. limits recover --------------------------------------------------------------------------------------------


def test_halving_belongs_to_its_episode_and_never_compounds(gw: GatewaySimulator) -> None:
    gw.configure(context_window=900_000)  # the overflows state a window that needs no compaction
    session = session_for(gw)
    chat(session, 1)
    for _ in range(2):
        gw.fail_next("overflow")
        session.add_messages(read_history(n=3, size=30_000))
        session.send("go on")
    halved = [e for e in events(session, LimitEvent) if e.limit == "per_result_budget"]
    assert [(e.source, e.value) for e in halved] == [("episode", 10_000), ("restored", 20_000)] * 2
    assert session._state.per_result_budget == 20_000


def test_a_learned_cap_is_probed_upwards_after_clean_turns_but_never_to_a_rejected_size(
    gw: GatewaySimulator,
) -> None:
    session = session_for(gw, limits=Limits(context_window=WINDOW, retry_backoff=0.0, cap_probe_turns=2))
    session.add_messages([{"role": "user", "content": "a" * 40_000}, {"role": "assistant", "content": "ok"}])
    gw.fail_next("413")
    session.send("hello")
    rejected = gw.requests[0].bytes
    learned = session.payload_cap
    chat(session, 6, size=600)
    probes = [e for e in events(session, LimitEvent) if e.limit == "cap" and e.source == "probe"]
    assert len(probes) >= 2 and all("turns without a size failure" in e.evidence for e in probes)
    assert learned is not None and learned < session.payload_cap < rejected
    assert session.payload_cap == rejected - 1  # converged on the evidence, not past it


def test_a_configured_cap_is_not_probed_unless_asked(gw: GatewaySimulator) -> None:
    for probe, expect_probe in ((False, False), (True, True)):
        gw.reset()
        limits = Limits(context_window=WINDOW, max_payload="64KB", cap_probe_turns=1, probe_configured_cap=probe)
        session = session_for(gw, limits=limits)
        chat(session, 2, size=600)
        probed = [e for e in events(session, LimitEvent) if e.source == "probe"]
        assert bool(probed) == expect_probe
        assert session.cap_source == "configured"


def test_reset_limits_forgets_what_failures_taught(gw: GatewaySimulator) -> None:
    session = session_for(gw)
    session.add_messages(read_history(n=3, size=20_000))
    gw.fail_next("413")
    gw.fail_next("overflow")
    session.send("go")
    assert session.cap_source == "learned" and session.context_window < WINDOW
    session.reset_limits()
    assert session.payload_cap is None and session.cap_source is None and session.context_window == WINDOW
    assert not session._state.evidence.endpoints
    reset = [e for e in events(session, LimitEvent) if e.source == "reset"]
    assert {e.limit for e in reset} == {"cap", "window"} and all(e.evidence for e in reset)
    assert events(session, CapEvent)[-1].cap_bytes == 0


def test_every_limit_change_is_an_event_with_its_evidence(gw: GatewaySimulator) -> None:
    gw.configure(max_body="32KB", reject_with="waf403")
    session = session_for(gw)
    chat(session, 5, size=8_000)
    changes = events(session, LimitEvent)
    assert {e.limit for e in changes} >= {"cap", "turn_budget", "per_result_budget"}
    assert all(e.evidence and e.source for e in changes)
    caps = [e for e in changes if e.limit == "cap"]
    assert [e.value for e in caps] == [e.cap_bytes for e in events(session, CapEvent)]


# 7. rewind, manual compaction, max_rounds, cancellation, windows, turn numbers, notices ------------------------


def test_rewind_keeps_the_turns_made_after_the_compaction(gw: GatewaySimulator) -> None:
    session = session_for(gw, limits=Limits(context_window=WINDOW, min_keep_recent=2))
    session.add_messages(read_history(n=6, size=8_000))
    before = session.history
    assert session.compact("keep the file names").changed
    session.send("first question after compacting")
    session.send("second question")
    after_turns = session.history
    added = after_turns[-4:]
    assert session.rewind() is True
    assert session.history == [*before, *added]
    assert session.rewind() is False


def test_rewind_refuses_rather_than_losing_turns(gw: GatewaySimulator) -> None:
    session = session_for(gw, limits=Limits(context_window=WINDOW, min_keep_recent=2))
    session.add_messages(read_history(n=6, size=8_000))
    session.compact("keep the file names")
    chat(session, 6, size=600)
    gw.configure(context_window=900_000)
    # the ladder truncates: the history no longer lines up with the compaction (the second overflow, of a
    # request smaller than earlier accepted ones, is retried once as a stray; the third is evidence)
    gw.fail_next("overflow", times=3)
    session.send("another question")
    assert 2 in [e.level for e in events(session, RecoveryEvent)]
    current = session.history
    with pytest.raises(UsageError, match="rewinding would lose turns"):
        session.rewind()
    assert session.history == current


def test_manual_compaction_of_a_short_history_follows_the_instruction(gw: GatewaySimulator) -> None:
    session = session_for(gw)
    session.add_messages(pasted_history(n=3, size=20_000))  # 6 messages: fewer than min_keep_recent (8)
    newest = session.history[-2:]
    result = session.compact("keep the part numbers")
    assert result.changed and result.stage == "summary" and result.summary_calls == 1
    assert session.history[-2:] == newest  # the newest exchange kept whole
    assert session.history[0].content.startswith(
        '[COMPACTED CONTEXT - 4 messages summarized per user instruction: "keep'
    )
    assert not [e for e in events(session, CompactionEvent) if e.phase in ("truncate", "shrink")]


@pytest.mark.parametrize("max_rounds", [1, 3])
def test_max_rounds_is_enforced_exactly(gw: GatewaySimulator, max_rounds: int) -> None:
    ws = Workspace(seed=1, target_bytes=1_000)
    ran: list[str] = []

    def read_file(path: str) -> ToolResult:
        """Read a file."""
        ran.append(path)
        return ToolResult(ws.read_file(path).content)

    gw.configure(agent=AgentScript((("read_file", {"path": "a.py"}),) * 3))
    session = session_for(gw, tools=[read_file])
    if max_rounds < 3:
        with pytest.raises(ProviderError, match=f"after {max_rounds} tool rounds"):
            session.send("work", max_rounds=max_rounds)
        assert session.history == []
    else:
        assert session.send("work", max_rounds=max_rounds).tool_calls == 3
    assert len(ran) == max_rounds
    with pytest.raises(UsageError, match="max_rounds"):
        session.send("work", max_rounds=0)


class _InterruptingSummarizer:
    model = "openai/sim-model"
    window_tokens = None

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.entered: asyncio.Event | None = None

    def summarize(self, request: Any) -> Any:
        raise self.exc

    async def asummarize(self, request: Any) -> Any:
        assert self.entered is not None
        self.entered.set()
        await asyncio.Event().wait()  # until cancelled


def _assert_cancelled_cleanly(session: Session, before: list[Message]) -> None:
    assert session.history == before
    compaction = events(session, CompactionEvent)
    assert compaction and compaction[-1].outcome == "cancelled" and compaction[-1].phase == "done"
    assert "running" not in {e.outcome for e in compaction[-1:]}


@pytest.mark.parametrize("what", ["send", "compact"])
def test_ctrl_c_reaches_the_compactor(gw: GatewaySimulator, what: str) -> None:
    session = session_for(gw, limits=Limits(context_window=20_000, min_keep_recent=2))
    session.add_messages(pasted_history(n=4, size=16_000))
    session.summarizer = session._runner.summarizer = _InterruptingSummarizer(KeyboardInterrupt())  # type: ignore[assignment]
    before = session.history
    with pytest.raises(KeyboardInterrupt):
        session.send("and now?") if what == "send" else session.compact("keep it short")
    _assert_cancelled_cleanly(session, before)
    if what == "send":
        assert any(e.code == "turn_cancelled" for e in events(session, NoticeEvent))


def test_task_cancellation_during_asend_reaches_the_compactor(gw: GatewaySimulator) -> None:
    session = session_for(gw, limits=Limits(context_window=20_000, min_keep_recent=2))
    session.add_messages(pasted_history(n=4, size=16_000))
    summarizer = _InterruptingSummarizer(RuntimeError("unused"))
    session.summarizer = session._runner.summarizer = summarizer  # type: ignore[assignment]
    before = session.history

    async def main() -> None:
        summarizer.entered = asyncio.Event()
        task = asyncio.ensure_future(session.asend("and now?"))
        await summarizer.entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    _assert_cancelled_cleanly(session, before)


def test_an_unknown_window_is_announced_once_then_learned_from_the_first_overflow(gw: GatewaySimulator) -> None:
    gw.configure(context_window=4_000)
    session = session_for(gw, limits=Limits(retry_backoff=0.0))  # sim-model: litellm does not know it
    assert session._state.window_source == "assumed"
    session.send("hello")
    session.send("hello again")
    assert len(notices(session, "window_assumed")) == 1
    session.add_messages(pasted_history(n=2, size=12_000))
    session.send("summarize")
    learned = [e for e in events(session, LimitEvent) if e.limit == "window"]
    assert [e.source for e in learned] == ["assumed", "learned"] and learned[-1].value == 4_000


def test_event_turn_numbers_count_user_turns(gw: GatewaySimulator, tmp_path: Any) -> None:
    gw.configure(context_window=6_000)
    session = session_for(gw, limits=Limits(context_window=6_000, min_keep_recent=2))
    chat(session, 4, size=3_000)
    requests = events(session, RequestEvent)
    assert [e.turn for e in requests if e.outcome == "ok"] == [1, 2, 3, 4]
    compactions = events(session, CompactionEvent)
    assert compactions and {e.turn for e in compactions} <= {1, 2, 3, 4} and 0 not in {e.turn for e in compactions}
    with pytest.warns(UserWarning, match="archive is in memory"):  # copied next to the saved file
        saved = session.save(tmp_path / "s.json")
    loaded = Session.load(saved, archive=session.archive, api_base=gw.api_base, api_key="sim-key", status=None)
    loaded.send("after loading")
    assert [e.turn for e in events(loaded, RequestEvent)] == [5]  # numbering goes on where it stopped


@pytest.mark.parametrize("with_tools", [False, True])
def test_the_payload_notice_fits_the_session(gw: GatewaySimulator, with_tools: bool) -> None:
    ws = Workspace(seed=1, target_bytes=1_000)
    session = session_for(gw, tools=list(ws.tools.values()) if with_tools else None)
    session.add_messages(read_history(n=3, size=10_000))
    gw.fail_next("413")
    session.send("go on")
    (notice,) = [m for m in session.history if PAYLOAD_NOTICE_MARKER in m.content]
    assert ("targeted reads" in notice.content) == with_tools
    assert ("grep" in notice.content) == with_tools


def test_the_payload_notice_is_added_once_even_when_shrink_runs_again(gw: GatewaySimulator) -> None:
    """Shrink (the truncation stage) reduces old messages to pointers; the notice stays whole, so a
    later payload recovery finds it and does not add a second one (it used to be stubbed, then added
    again)."""
    gw.configure(max_body="96KB", reject_with="413")
    session = session_for(gw, limits=Limits(context_window=128_000, retry_backoff=0.0))
    logs = Workspace(seed=3, target_bytes=6_000)
    for i in range(3):
        session.send(f"turn {i}: log\n" + logs.tail_log(300).content)
    for j in range(3):
        gw.fail_next("413", times=2)  # the same request refused twice: evidence of a size limit
        session.send(f"question {j}: " + logs.tail_log(100).content)
        assert sum(PAYLOAD_NOTICE_MARKER in m.content for m in session.history) == 1
    assert len(notices(session, "payload_notice")) == 1
    shrinks = [e for e in events(session, CompactionEvent) if e.phase == "shrink" and "to pointers" in e.status]
    assert shrinks  # the case this test is about: old messages were reduced to pointers


# 8. simulator faults the tests need -----------------------------------------------------------------------------


def test_simulator_generic_400_with_a_given_body(gw: GatewaySimulator) -> None:
    from contextkit import backend, classify_failure

    hello = [{"role": "user", "content": "hi"}]
    kwargs = {"api_base": gw.api_base, "api_key": "sim-key", "timeout": 5}
    for body, needle in ((None, "frobnicate"), ("custom complaint", "custom complaint"), ('{"x": "raw"}', "raw")):
        gw.fail_next("400", body=body)
        with pytest.raises(Exception) as info:
            backend.completion(gw.model, hello, **kwargs)
        response = getattr(info.value, "response", None)
        assert getattr(info.value, "status_code", None) == 400
        assert needle in str(info.value) + (response.text if response is not None else "")
        assert classify_failure(info.value).kind.value == "other"
    assert [r.reason for r in gw.requests] == ["fault:400"] * 3
    with pytest.raises(ValueError, match="only applies"):
        gw.fail_next("413", body="x")


def test_simulator_drops_only_above_its_cap(gw: GatewaySimulator) -> None:
    from contextkit import backend

    gw.configure(max_body="8KB", reject_with="drop")
    kwargs = {"api_base": gw.api_base, "api_key": "sim-key", "timeout": 5}
    assert backend.completion(gw.model, [{"role": "user", "content": "small"}], **kwargs)
    with pytest.raises(Exception, match="Connection error"):
        backend.completion(gw.model, [{"role": "user", "content": "x" * 9_000}], **kwargs)
    assert [(r.accepted, r.status) for r in gw.requests] == [(True, 200), (False, 0)]
    assert json.loads(json.dumps([r.reason for r in gw.requests]))[1].startswith("body ")
