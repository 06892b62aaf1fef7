"""Fault matrix: every failure the simulator offers x every loop x with and without a payload cap.

Each cell drives a real ``Session`` through litellm over real HTTP to one shared
``GatewaySimulator`` (reset per cell). A cell either recovers or raises the specific, actionable
error; in every cell nothing is lost (every original content is recoverable through the markers
left in the history) and no body the gateway/provider refused for its size is ever re-sent
unchanged. The outcome table is printed in the terminal summary.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from helpers.histories import pasted_history, read_history
from helpers.logcheck import assert_known_limits_respected

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.errors import AuthenticationFailed, ContextkitError, ProviderError, RecoveryFailedError
from contextkit.events import RecoveryEvent
from contextkit.messages import Message
from contextkit.policy.expand import expand_markers
from contextkit.session.core import Session
from contextkit.sim import OVERFLOW_STYLES, GatewaySimulator, Workspace
from contextkit.sim.config import RequestRecord
from contextkit.tools import ToolResult

LOOPS = ("send", "tools", "stream", "astream", "asend")
STREAMS = ("stream", "astream")
CAPS = ("nocap", "cap")
MAX_RETRIES = 2
SIZE_FAULTS = ("fault:overflow", "fault:413", "fault:413-html", "fault:waf403", "fault:bedrock403")


def large_history() -> list[dict[str, Any]]:
    """Above the 500 KB line where a dropped connection is a suspected payload limit (below it, a transient error)."""
    return pasted_history(n=8, size=72_000, seed=1)


def small_reads() -> list[dict[str, Any]]:
    """One recent agent turn that read 6 files (~41 KB, ~10k tokens)."""
    return read_history(n=6, size=6_000)


def small_logs() -> list[dict[str, Any]]:
    """Logs pasted by the user: only a summary or truncation can shrink them."""
    return pasted_history(n=8, size=8_000, seed=1)


@dataclass(frozen=True)
class Mode:
    """One failure mode: simulator settings, a one-shot fault, the history and what must happen."""

    name: str
    sim: dict[str, Any] = field(default_factory=dict)
    fault: str | None = None
    times: int = 1
    route: str = "openai"
    history: Callable[[], list[dict[str, Any]]] = small_reads
    cap: str = "1MB"  # the configured Limits(max_payload=...) of the "cap" column
    expect: str = "recover"  # recover | retry | escalate | summary | an exception class name
    message: str = ""  # a phrase the actionable error must contain
    loops: tuple[str, ...] = LOOPS  # stream faults only exist in streamed responses


# The gateway modes configure a cap above the gateway's real one: the configured cap is a hard limit
# (nothing above it is sent) but the ~41 KB history is below it, so the first request goes out, the
# gateway refuses it and recovery learns the tighter cap. The history must also stay below the pressure
# trigger (60%) of the configured cap, or the no-LLM pass would shrink it under the real cap before
# anything is sent: hence 96 KB, not 64 KB.
MODES: list[Mode] = [
    *[Mode(f"overflow-{style}", {"context_window": 3_000, "overflow_style": style}) for style in OVERFLOW_STYLES],
    Mode("overflow-anthropic-route", {"context_window": 3_000, "overflow_style": "anthropic"}, route="anthropic"),
    *[Mode(f"gateway-{m}", {"max_body": "24KB", "reject_with": m}, cap="96KB") for m in ("413", "413-html")],
    *[Mode(f"gateway-{m}", {"max_body": "24KB", "reject_with": m}, cap="96KB") for m in ("waf403", "bedrock403")],
    Mode("gateway-413-anthropic", {"max_body": "24KB", "reject_with": "413"}, route="anthropic", cap="96KB"),
    Mode("gateway-waf403-anthropic", {"max_body": "24KB", "reject_with": "waf403"}, route="anthropic", cap="96KB"),
    Mode("drop-small-history", fault="drop", expect="retry"),
    Mode("drop-large-history", {"max_body": "520KB", "reject_with": "drop"}, history=large_history, cap="2MB"),
    Mode("429", fault="429", expect="retry"),
    Mode("429-beyond-retries", fault="429", times=MAX_RETRIES + 1, expect="ProviderError", message="rate limit"),
    Mode("500", fault="500", expect="retry"),
    Mode("500-beyond-retries", fault="500", times=MAX_RETRIES + 1, expect="ProviderError", message="server error"),
    Mode("timeout", fault="timeout", expect="retry"),
    Mode("timeout-beyond-retries", fault="timeout", times=MAX_RETRIES + 1, expect="ProviderError", message="timeout"),
    *[
        Mode(f"summary-{m}", {"context_window": 8_000, "summary_mode": m}, history=small_logs, expect="summary")
        for m in ("extract", "refuse", "short", "error_text", "fail", "timeout")
    ],
    Mode("finish-length", fault="length", expect="escalate"),
    Mode("stream-drop-midway", fault="stream_drop", expect="retry", loops=STREAMS),
    Mode("stream-error-event", fault="stream_error", expect="retry", loops=STREAMS),
    # llama.cpp: a streamed request over the window gets 200 and an empty event stream
    Mode("empty-stream-overflow", {"context_window": 3_000, "empty_stream_on_overflow": True}, loops=STREAMS),
    Mode("auth401", fault="auth401", expect="AuthenticationFailed", message="credentials"),
    Mode("auth403", fault="auth403", expect="AuthenticationFailed", message="credentials"),
]

RESULTS: dict[tuple[str, str, str], str] = {}


@pytest.fixture(scope="module")
def gw(request: pytest.FixtureRequest) -> Iterator[GatewaySimulator]:
    with GatewaySimulator() as sim:
        yield sim
    request.config.contextkit_reports = [  # type: ignore[attr-defined]
        *getattr(request.config, "contextkit_reports", []),
        ("fault matrix (test_fault_matrix.py)", render_table()),
    ]


def render_table() -> str:
    columns = [(loop, cap) for cap in CAPS for loop in LOOPS]
    header = ["mode", *(f"{loop}/{cap}" for loop, cap in columns)]
    rows = [[m.name, *(RESULTS.get((m.name, loop, cap), "-") for loop, cap in columns)] for m in MODES]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def drive(loop: str, session: Session, text: str) -> str:
    if loop in ("send", "tools"):
        return session.send(text).text
    if loop in STREAMS:
        stream, deltas = _stream(loop, session, text)
        assert stream.reply is not None
        assert deltas == stream.reply.text  # continued, never restarted: every piece shown once
        return stream.reply.text
    return asyncio.run(session.asend(text)).text


def _stream(loop: str, session: Session, text: str) -> tuple[Any, str]:
    if loop == "stream":
        stream = session.stream(text)
        return stream, "".join(stream)

    async def read() -> tuple[Any, str]:
        stream = session.astream(text)
        return stream, "".join([d async for d in stream])

    return asyncio.run(read())


def size_rejection(record: RequestRecord) -> bool:
    return not record.accepted and (record.reason.startswith(("body ", "context ")) or record.reason in SIZE_FAULTS)


def check_log(gw: GatewaySimulator) -> None:
    """Nothing at or above a size rejected as evidence of a limit (a first drop or a stray page may be
    retried once); a transient failure re-sends at most max_retries times."""
    assert_known_limits_respected(gw.requests)
    tries: dict[str, int] = {}
    for record in gw.requests:
        tries[record.body_sha256] = tries.get(record.body_sha256, 0) + 1
    assert max(tries.values()) <= MAX_RETRIES + 1


def nothing_lost(session: Session, history: list[Message], originals: list[str]) -> None:
    expanded = expand_markers("\n\x00\n".join(m.content for m in history), session.archive)
    missing = [c[:60] for c in originals if c not in expanded]
    assert not missing, f"{len(missing)} original contents are not recoverable, e.g. {missing[:2]}"


def outcome_label(session: Session, expect: str) -> str:
    stats = session.stats
    levels = sorted(int(k) for k in stats.recoveries_by_level)
    parts = []
    if levels:
        parts.append(f"L{max(levels)}")
    if stats.retries:
        parts.append(f"r{stats.retries}")
    if stats.escalations:
        parts.append(f"x{stats.escalations}")
    if expect == "summary":
        parts.append(f"s{stats.summary_calls}")
    return "ok " + "+".join(parts) if parts else "ok"


CELLS = [(m, loop, cap) for m in MODES for loop in LOOPS for cap in CAPS if loop in m.loops]


@pytest.mark.parametrize(("mode", "loop", "cap"), CELLS, ids=[f"{m.name}-{loop}-{cap}" for m, loop, cap in CELLS])
def test_fault_cell(gw: GatewaySimulator, mode: Mode, loop: str, cap: str) -> None:
    RESULTS[(mode.name, loop, cap)] = "FAIL"
    gw.reset(timeout_sleep=0.6, **mode.sim)
    ws = Workspace(seed=3, target_bytes=1_500)
    tool_outputs: list[str] = []

    def read_file(path: str) -> ToolResult:
        """Read a whole file."""
        out = ws.read_file(path)
        tool_outputs.append(out.content)
        return ToolResult(out.content, path=out.path, lines=out.lines)

    limits = Limits(
        context_window=1_000_000,
        max_payload=mode.cap if cap == "cap" else None,
        request_timeout=0.4,
        summary_timeout=0.4,
        retry_backoff=0.0,
        max_retries=MAX_RETRIES,
    )
    kwargs = gw.litellm_kwargs(mode.route)
    model = kwargs.pop("model")
    session = Session(
        model, archive=Archive.in_memory(session_id="m"), session_id="m", limits=limits, tools=[read_file],
        status=None, **kwargs,
    )  # fmt: skip
    history = mode.history()
    session.add_messages(history)
    if mode.fault:
        gw.fail_next(mode.fault, mode.times)
    text = '[[tool:read_file {"path": "src/extra.py"}]] check one more file' if loop == "tools" else "Summarize."
    originals = [m["content"] for m in history if m.get("content")] + [text]
    before_turn = session.history

    if mode.expect in ("recover", "retry", "escalate", "summary"):
        answer = drive(loop, session, text)
        assert answer
        rejected = [r for r in gw.requests if not r.accepted or r.reason.startswith("fault:")]
        assert rejected, "the mode must make the simulator refuse or cut at least one request"
        stats = session.stats
        if mode.expect == "recover":
            assert any(isinstance(e, RecoveryEvent) and e.outcome == "recovered" for e in session.events)
        elif mode.expect == "retry":
            assert stats.retries >= 1 and not stats.recoveries_by_level
        elif mode.expect == "escalate":
            assert stats.escalations == 1
        else:  # the summarizer was really asked, in the mode under test, and its failure was survived
            summaries = [r for r in gw.requests if r.kind == "summary"]
            assert summaries and stats.summary_calls >= 1
            # the summary request itself fits the provider window it just learned
            assert not any(size_rejection(r) for r in summaries), [r.reason for r in summaries]
            assert stats.compactions >= 1
            if mode.sim["summary_mode"] != "extract":
                assert stats.truncation_falls >= 1  # a failed summary falls back to truncation
        if loop == "tools" and mode.expect != "escalate":
            assert tool_outputs, "the tool loop must have run the tool after recovering"
        after = session.history
        RESULTS[(mode.name, loop, cap)] = outcome_label(session, mode.expect)
    else:
        with pytest.raises(ContextkitError) as info:
            drive(loop, session, text)
        err = info.value
        assert type(err).__name__ == mode.expect, repr(err)
        assert isinstance(err, ProviderError) and not isinstance(err, RecoveryFailedError)
        assert mode.message in str(err).lower(), str(err)
        if isinstance(err, AuthenticationFailed):
            assert len(gw.requests) == 1  # never retried, never "recovered"
        assert not session.stats.recoveries_by_level
        after = session.history
        assert after == before_turn  # a failed turn leaves no trace in the history
        originals.remove(text)
        tool_outputs.clear()
        RESULTS[(mode.name, loop, cap)] = type(err).__name__
    check_log(gw)
    nothing_lost(session, after, originals + tool_outputs)
    configured = Limits(max_payload=mode.cap).payload_cap
    if cap == "cap" and session.payload_cap is not None and configured is not None:
        assert session.payload_cap <= configured  # a learned cap only tightens


@pytest.mark.parametrize(
    ("error", "calls"),
    [
        (Exception("This model's maximum context length is 8000 tokens. However, your messages resulted in 9000"), 1),
        (Exception("413 Request Entity Too Large"), 1),
        (Exception("500 The server had an error while processing your request"), 2),
        (TimeoutError("summarizer did not answer"), 2),
    ],
)
def test_summary_rejected_for_size_is_not_resent(error: Exception, calls: int) -> None:
    """A summary request refused for its size would be refused again: no identical second attempt."""
    from contextkit.compaction.compactor import Compactor
    from contextkit.compaction.summarizer import ScriptedSummarizer

    history = [
        Message.user(m["content"]) if m["role"] == "user" else Message.assistant(m["content"]) for m in small_logs()
    ]
    summarizer = ScriptedSummarizer([error])
    compactor = Compactor(archive=Archive.in_memory(), limits=Limits(min_keep_recent=4))
    result = compactor.compact(
        history, summarizer=summarizer, budget=20_000, measure=lambda h: sum(len(m.content) for m in h)
    )
    assert summarizer.calls == calls
    assert result.changed and result.stage == "truncation"  # fell back to truncation, nothing lost
    nothing_lost_in(result.history, compactor.archive, [m.content for m in history])


def nothing_lost_in(history: list[Message], archive: Any, originals: list[str]) -> None:
    expanded = expand_markers("\n\x00\n".join(m.content for m in history), archive)
    assert all(c in expanded for c in originals)


def test_length_escalation_then_payload_recovery_folds_the_parts(gw: GatewaySimulator) -> None:
    """A payload recovery between two parts of an escalated answer: the notice it adds must not
    shift what is folded away (a positional fold kept a partial answer twice)."""
    from contextkit.limits.state import CONTINUATION, PAYLOAD_NOTICE_MARKER
    from contextkit.sim import long_text

    gw.reset()
    kwargs = gw.litellm_kwargs()
    model = kwargs.pop("model")
    session = Session(model, archive=Archive.in_memory(session_id="f"), session_id="f", status=None,
                      limits=Limits(context_window=1_000_000), **kwargs)  # fmt: skip
    history = small_reads()
    session.add_messages(history)
    gw.fail_next("length")  # the answer is cut after 5 tokens ...
    # ... and the continuation request is refused by the gateway, twice: once would be a stray page
    # (microcompact made it smaller than the accepted first request), twice is evidence
    gw.fail_next("413", times=2)
    reply = session.send("[[long:300]] write the report")
    assert reply.finish_reason == "stop" and session.stats.escalations == 1 and session.stats.recoveries_by_level
    assert reply.text.startswith(long_text(300)[:15])
    roles = [m.role for m in session.history]
    assert roles[-1] == "assistant" and roles[-2] != "assistant"  # one folded answer, no leftover partial
    assert [m.content for m in session.history].count(reply.text) == 1
    assert not any(m.content == CONTINUATION for m in session.history)
    assert sum(PAYLOAD_NOTICE_MARKER in m.content for m in session.history) == 1
    check_log(gw)
    nothing_lost(session, session.history, [m["content"] for m in history if m.get("content")])
