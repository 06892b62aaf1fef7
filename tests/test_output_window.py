"""Tokens the provider counts: a window that counts the output a request asks for (vLLM, TGI)
makes requests reserve ``max_tokens``; an escalation never asks for more output than the window
leaves, and one that cannot fit ends the turn with the answer so far (``finish_reason="length"``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from helpers.histories import pasted_history

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.events import NoticeEvent
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator


def session_for(gw: GatewaySimulator, window: int = 1_000_000, **kwargs: Any) -> Session:
    kw = gw.litellm_kwargs()
    model = kw.pop("model")
    return Session(model, archive=Archive.in_memory(session_id="o"), session_id="o", status=None,
                   limits=Limits(context_window=window, retry_backoff=0.0), **kw, **kwargs)  # fmt: skip


def codes(session: Session) -> list[str]:
    return [e.code for e in session.events if isinstance(e, NoticeEvent)]


def test_a_vllm_window_that_counts_max_tokens_is_learned_once_and_reserved(gw: GatewaySimulator) -> None:
    gw.configure(context_window=4_000, window_counts_output=True)
    session = session_for(gw, max_tokens=1_500)
    session.add_messages(pasted_history(n=1, size=6_000))  # ~3,300 tokens: fits alone, not with 1,500 more
    assert session.send("what is in the log?").text
    rejected = [r for r in gw.requests if not r.accepted]
    assert len(rejected) == 1 and "max_tokens" in rejected[0].reason
    sent = Counter(r.body_sha256 for r in gw.requests)
    assert max(sent.values()) == 1  # the identical body is never sent again
    assert session.context_window == 4_000 and session._state.window_counts_output
    assert "window_counts_output" in codes(session)
    assert session.send("and the next step?").text  # the next turn reserves its output at once
    assert len([r for r in gw.requests if not r.accepted]) == 1


def test_an_escalation_asks_for_no_more_output_than_the_window_leaves(gw: GatewaySimulator) -> None:
    gw.configure(context_window=6_000, window_counts_output=True)
    session = session_for(gw, window=6_000, max_tokens=1_500)
    session.add_messages(pasted_history(n=1, size=6_000))  # ~3,300 tokens: doubling to 3,000 would not fit
    gw.fail_next("length")  # the first answer is cut at max_tokens
    reply = session.send("go on")
    assert [r.status for r in gw.requests] == [200, 200]  # the escalated request fit the window
    assert session.stats.escalations == 1 and reply.finish_reason == "stop"


def test_an_escalation_that_cannot_fit_ends_the_turn_with_the_answer_so_far(gw: GatewaySimulator) -> None:
    gw.configure(context_window=5_000, window_counts_output=True)
    session = session_for(gw, max_tokens=1_000)  # the session believes the window is 1M tokens
    session.add_messages(pasted_history(n=1, size=6_000))  # ~3,300 tokens + 1,000 output fits; 2,000 does not
    gw.fail_next("length")
    reply = session.send("go on")
    first = gw.requests[0]
    assert reply.finish_reason == "length" and reply.text  # the part already answered is kept
    assert "escalation_overflow" in codes(session)
    assert session.history[-1].content == reply.text and first.status == 200
