"""The summary stage through litellm over real HTTP to the bundled gateway simulator, every summarizer mode."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence

import pytest

from contextkit.archive import Archive
from contextkit.compaction.compactor import Compactor
from contextkit.compaction.summarizer import LiteLLMSummarizer, SummaryRequest, SummaryTimeout
from contextkit.events import EventLog
from contextkit.messages import Message, ToolCall
from contextkit.policy import summary as s2
from contextkit.policy.expand import expand_markers
from contextkit.policy.pairing import find_orphans
from contextkit.settings import Limits
from contextkit.sim import GatewaySimulator
from contextkit.sizing import request_bytes


def measure(history: Sequence[Message]) -> int:
    return request_bytes(history)


def agent_history() -> list[Message]:
    h = [Message.system("You are a coding agent."), Message.user("Fix the failing test in src/app/api.py")]
    for i, path in enumerate(["src/app/api.py", "src/app/models.py", "tests/test_api.py"]):
        args = json.dumps({"path": path})
        h += [
            Message.assistant(f"I will read {path}.", [ToolCall(f"call_{i}", "read_file", args)]),
            Message.tool(
                f"call_{i}", f"# {path}\n" + "".join(f"line {n}: code\n" for n in range(400)), name="read_file"
            ),
        ]
    h += [
        Message.assistant("Running the tests.", [ToolCall("call_9", "bash", json.dumps({"cmd": "pytest -q tests"}))]),
        Message.tool("call_9", "FAILED tests/test_api.py::test_get - KeyError: 'id' (error at line 12345)"),
        Message.assistant("I decided to patch src/app/api.py to return the id."),
        Message.user("go on"),
        Message.assistant("Patched. Re-running."),
        Message.user("thanks, what next?"),
    ]
    return h


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewaySimulator]:
    with GatewaySimulator(timeout_sleep=3.0) as sim:
        yield sim


def summary_requests(gw: GatewaySimulator) -> int:
    return sum(1 for r in gw.requests if r.kind == "summary")


def run(gw: GatewaySimulator, mode: str, *, limits: Limits | None = None, budget: int | None = None):  # type: ignore[no-untyped-def]
    gw.configure(summary_mode=mode)
    gw.clear_log()
    archive, log = Archive.in_memory(), EventLog()
    limits = limits or Limits(min_keep_recent=2, emergency_keep_messages=3)
    compactor = Compactor(archive=archive, limits=limits, events=log)
    summarizer = LiteLLMSummarizer(**gw.litellm_kwargs(), timeout=30)
    h = agent_history()
    result = compactor.compact(h, summarizer=summarizer, trigger="auto", budget=budget or 3000, measure=measure)
    return h, result, archive, compactor


def test_extract_mode_applies_a_real_summary(gw: GatewaySimulator) -> None:
    h, result, archive, compactor = run(gw, "extract")
    assert summary_requests(gw) == 1
    assert result.stage == "summary" and result.outcome == "applied"
    summary = next(m for m in result.history if m.is_summary)
    assert summary.content.startswith("[STRUCTURED SUMMARY - covering")
    assert "## Files Read" in summary.content and "src/app/api.py" in summary.content
    assert result.identifier_retention == 1.0 and result.summary_source == "model"
    assert result.prose_retention is not None and 0 < result.prose_retention <= 1.0
    from contextkit.analysis import frames

    assert compactor.events is not None
    row = frames(compactor.events).compactions.filter(phase="summarize", outcome="applied").row(0, named=True)
    assert (row["identifier_retention"], row["prose_retention"], row["summary_source"]) == (
        1.0, result.prose_retention, "model",
    )  # fmt: skip
    assert compactor.stats.summary_calls == 1 and compactor.stats.summarizer_prompt_tokens > 0
    assert compactor.stats.summarizer_completion_tokens > 0
    assert find_orphans(result.history) == ([], [])
    expanded = "\n".join(expand_markers(m.content, archive) for m in result.history)
    assert all(m.content in expanded for m in h)


@pytest.mark.parametrize("mode", ["refuse", "short", "error_text", "fail"])
def test_bad_summarizer_modes_never_replace_the_segment(gw: GatewaySimulator, mode: str) -> None:
    """Two unusable answers: an extractive summary (ledger + first/last lines) instead of truncation."""
    h, result, archive, compactor = run(gw, mode)
    assert summary_requests(gw) == 2  # one changed retry, then the extractive summary
    summaries = [r for r in gw.requests if r.kind == "summary"]
    assert summaries[0].body_sha256 != summaries[1].body_sha256  # never the identical request twice
    texts = "\n".join(m.content for m in result.history)
    for bad in ("I'm sorry", "## Summary\n- ok", "Error: the summarization backend"):
        assert bad not in texts
    assert result.stage == "summary" and result.summary_source == "extractive"
    assert s2.EXTRACTIVE_HEADER in texts and "CONTEXT TRUNCATED" not in texts
    for ident in ("src/app/api.py", "tests/test_api.py", "pytest -q tests", "KeyError", "12345"):
        assert ident in texts, ident  # the ledger keeps what the model could not
    assert result.identifier_retention == 1.0 and result.prose_retention is None
    failed = next(e for e in result.events if e.outcome == "failed")
    assert failed.phase == "summarize" and failed.detail and "extractive summary instead" in failed.status
    assert find_orphans(result.history) == ([], [])
    expanded = "\n".join(expand_markers(m.content, archive) for m in result.history)
    assert all(m.content in expanded for m in h)
    stats = compactor.stats
    assert (stats.summary_calls, stats.extractive_summaries, stats.truncation_falls, stats.model_pauses) == (2, 1, 0, 1)


def test_timeout_mode_is_a_failed_attempt(gw: GatewaySimulator) -> None:
    limits = Limits(min_keep_recent=2, emergency_keep_messages=3, summary_timeout=0.5)
    _, result, _, _ = run(gw, "timeout", limits=limits)
    assert summary_requests(gw) == 2
    assert result.stage == "summary" and result.summary_source == "extractive"
    assert "SummaryTimeout" in next(e for e in result.events if e.outcome == "failed").detail


def test_direct_timeout_raises_summary_timeout(gw: GatewaySimulator) -> None:
    gw.configure(summary_mode="timeout")
    summarizer = LiteLLMSummarizer(**gw.litellm_kwargs(), timeout=0.3)
    with pytest.raises(SummaryTimeout, match="did not answer within"):
        summarizer.summarize(SummaryRequest("x\nCONVERSATION SEGMENT TO EXTRACT FROM:\n\n[user]: hi", timeout=0.3))


def test_async_path_and_dedicated_compact_model(gw: GatewaySimulator) -> None:
    gw.configure(summary_mode="extract")
    gw.clear_log()
    limits = Limits.from_env({"CONTEXTKIT_COMPACT_MODEL": "openai/sim-summarizer"}, min_keep_recent=2)
    compactor = Compactor(archive=Archive.in_memory(), limits=limits)
    summarizer = LiteLLMSummarizer(**gw.litellm_kwargs())
    h = agent_history()
    result = asyncio.run(compactor.acompact(h, summarizer=summarizer, trigger="manual", budget=10**6, measure=measure))
    assert result.stage == "summary"
    summaries = [r for r in gw.requests if r.kind == "summary"]
    assert len(summaries) == 1 and summaries[0].model == "sim-summarizer"
