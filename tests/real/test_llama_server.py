"""A real model server: llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct, n_ctx 2048.

Prompts stay small: on two shared cores the model evaluates ~45-100 prompt tokens/s.
"""

from __future__ import annotations

import httpx
import pytest

from contextkit import Limits, Session, backend
from contextkit.archive import Archive
from contextkit.compaction.compactor import Compactor
from contextkit.compaction.summarizer import LiteLLMSummarizer, SummaryRequest, SummaryResponse
from contextkit.events import NoticeEvent, RecoveryEvent, RequestEvent
from contextkit.failures.classify import FailureKind, classify_failure
from contextkit.messages import Message, render_transcript
from contextkit.policy import ledger as ids
from contextkit.policy import summary as s2
from contextkit.policy.expand import expand_markers
from contextkit.sim.corpus import agent_segment, document
from contextkit.sim.llama import LlamaServer
from contextkit.sizing import request_bytes

pytestmark = pytest.mark.real


def test_real_overflow_error_is_a_context_overflow(llama_2048: LlamaServer) -> None:
    messages = [{"role": "user", "content": "word " * 3000}]
    raw = httpx.post(f"{llama_2048.api_base}/chat/completions", json={"messages": messages, "max_tokens": 16}, timeout=120)
    assert raw.status_code == 400  # the server's own answer, before litellm
    error_body = raw.json()["error"]
    assert error_body["code"] == "context_length_exceeded" and error_body["type"] == "invalid_request_error"
    assert error_body["message"].startswith("This model's maximum context length is 2048 tokens. However, you requested")
    kwargs = llama_2048.litellm_kwargs()
    model = kwargs.pop("model")
    with pytest.raises(Exception) as info:  # whatever litellm raises, the classifier must read it
        backend.completion(model, messages, timeout=120, max_tokens=16, **kwargs)
    error = info.value
    assert getattr(error, "status_code", None) == 400 and "maximum context length is 2048 tokens" in str(error)
    assert classify_failure(error).kind is FailureKind.CONTEXT_OVERFLOW


def test_session_learns_the_real_window_and_the_turn_succeeds(llama_2048: LlamaServer) -> None:
    """The session believes the window is 32k; the server's real 400 teaches it 2048, and the turn goes through."""
    kwargs = llama_2048.litellm_kwargs()
    model = kwargs.pop("model")
    session = Session(
        model, archive=Archive.in_memory(session_id="llama"), status=None, on_flush=None,
        limits=Limits(context_window=32_768, min_keep_recent=2, retry_backoff=0.0, summary_timeout=300,
                      request_timeout=300),
        max_tokens=24, temperature=0.0, **kwargs,
    )  # fmt: skip
    docs = [document(seed, 2_500)[0] for seed in range(4)]
    for doc in docs:  # earlier turns, as if pasted before: about 2,600 tokens together
        session.add_messages([{"role": "user", "content": doc}, {"role": "assistant", "content": "Noted."}])
    reply = session.send("Which port does the last incident mention? Answer in one line.")
    assert reply.text.strip()
    assert session.context_window == 2048  # learned from "maximum context length is 2048 tokens"
    requests = [e for e in session.events if isinstance(e, RequestEvent)]
    assert requests[0].outcome == "rejected" and requests[0].failure_kind == "context_overflow"
    assert requests[-1].outcome == "ok"
    assert any(e.code == "learned_window" for e in session.events if isinstance(e, NoticeEvent))
    assert any(e.failure_kind == "context_overflow" for e in session.events if isinstance(e, RecoveryEvent))
    expanded = "\n".join(expand_markers(m.content, session.archive, max_depth=200) for m in session.history)
    assert all(doc in expanded for doc in docs)  # nothing lost


class Recording:
    """A LiteLLMSummarizer that keeps every request and answer (the real server keeps no log)."""

    def __init__(self, inner: LiteLLMSummarizer) -> None:
        self.inner = inner
        self.requests: list[SummaryRequest] = []
        self.answers: list[str] = []

    def summarize(self, request: SummaryRequest) -> SummaryResponse:
        self.requests.append(request)
        response = self.inner.summarize(request)
        self.answers.append(response.text)
        return response

    async def asummarize(self, request: SummaryRequest) -> SummaryResponse:
        return self.summarize(request)


def test_real_summaries_go_through_the_gate(llama_2048: LlamaServer) -> None:
    """SmolLM2's own summaries: applied only when the gate accepts them, never an invented fact; the ledger keeps
    every identifier either way; a retry is never the identical request."""
    messages, planted = agent_segment(7)
    history = [Message.system("You are a coding agent."), *messages, Message.user("What next?")]
    kwargs = llama_2048.litellm_kwargs()
    summarizer = Recording(LiteLLMSummarizer(kwargs.pop("model"), timeout=300, **kwargs))
    archive = Archive.in_memory()
    compactor = Compactor(archive=archive, limits=Limits(min_keep_recent=1, summary_timeout=300))
    result = compactor.compact(  # over budget, so a summary the gate refuses gives way to the extractive one
        history, summarizer=summarizer, trigger="auto", budget=request_bytes(history) * 9 // 10,
        measure=request_bytes, summarizer_window=2048,
    )  # fmt: skip
    calls = len(summarizer.requests)
    assert 1 <= calls <= 2 and result.summary_calls == calls
    assert all(r.max_tokens is not None and r.max_tokens <= 512 for r in summarizer.requests)  # fits n_ctx 2048
    if calls == 2:
        first, second = summarizer.requests
        assert (first.prompt, first.temperature) != (second.prompt, second.temperature)
    assert result.stage == "summary" and result.summary_source in ("model", "extractive")
    summary = next(m for m in result.history if m.is_summary).content
    transcript = render_transcript(messages)
    if result.summary_source == "model":
        # the gate kept the answer less any clause that named an identifier the segment does not contain
        prose = summary.split(ids.LEDGER_HEADER)[0]
        assert ids.ungrounded(prose, transcript) == []  # the gate let no invention in
        assert compactor.stats.prose_chars_kept <= len(summarizer.answers[-1].strip())
        assert compactor.stats.summary_rejections == calls - 1
    else:  # both answers failed the gate: none of their text reached the history
        assert s2.EXTRACTIVE_HEADER in summary and compactor.stats.summary_rejections == 2
        assert all(answer.strip() not in summary for answer in summarizer.answers if answer.strip())
    kept = [value for _, value in planted.items() if value in summary]
    assert len(kept) == len(planted), [v for _, v in planted.items() if v not in summary]  # the ledger keeps all
    assert len(summary) < len(transcript)
    expanded = "\n".join(expand_markers(m.content, archive) for m in result.history)
    assert all(m.content in expanded for m in messages)
