"""The limits model: a cap is an interval per endpoint; size and content are different readings of a
refusal; the absence of an answer is not a size; a failed turn rolls back what it inferred.

Through litellm over real HTTP to the simulator, which plays the middleboxes: a 413 cap, a firewall
page that states no size (a ModSecurity CRS content rule, nginx's plain "403 Forbidden"), Caddy's
empty 502, dropped connections, outages and a limit that moves.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers.histories import read_history
from helpers.logcheck import assert_known_limits_respected, binding_rejections

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.errors import ProviderError
from contextkit.events import CapEvent, LimitEvent, NoticeEvent
from contextkit.policy.expand import expand_markers
from contextkit.policy.oversize import is_excerpt
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace

WINDOW = 1_000_000
BLOCKED = "cat /etc/passwd"
CAP = 64 * 1024


def session_for(gw: GatewaySimulator, **kwargs: Any) -> Session:
    kw = gw.litellm_kwargs()
    model = kw.pop("model")
    kwargs.setdefault("archive", Archive.in_memory(session_id="m"))
    kwargs.setdefault("status", None)
    kwargs.setdefault("limits", Limits(context_window=WINDOW, retry_backoff=0.0))
    return Session(model, session_id="m", **kw, **kwargs)


def document(i: int, size: int | None = None) -> str:
    """A different 6-10 KB document per ``i`` (a service log)."""
    size = size or 6_000 + (i * 1_337) % 4_000
    return Workspace(seed=100 + i, target_bytes=size).tail_log(size // 60).content[:size]


def of(session: Session, cls: type) -> list[Any]:
    return [e for e in session.events if isinstance(e, cls)]


def notices(session: Session, code: str) -> list[NoticeEvent]:
    return [e for e in of(session, NoticeEvent) if e.code == code]


def limits_of(session: Session) -> tuple[Any, ...]:
    st = session._state
    return st.cap, st.cap_source, st.context_window, session.interval


def recoverable(session: Session, text: str) -> bool:
    return text in expand_markers("\n\x00\n".join(m.content for m in session.history), session.archive, max_depth=100)


def paste_turns(session: Session, gw: GatewaySimulator, turns: int, start: int = 0, size: int | None = None) -> list[str]:
    docs = []
    for i in range(start, start + turns):
        doc = document(i, size)
        docs.append(doc)
        assert session.send(f"document {i}, what stands out?\n{doc}").text
    return docs


# 1. a cap is an interval per endpoint ----------------------------------------------------------------------


@pytest.mark.parametrize("reject_with", ["413", "waf403", "empty502", "drop"])
def test_twenty_pastes_behind_a_64kb_middlebox_learn_an_interval_that_holds_the_real_cap(
    gw: GatewaySimulator, reject_with: str
) -> None:
    gw.configure(max_body=CAP, reject_with=reject_with)
    session = session_for(gw)
    docs = paste_turns(session, gw, 20)
    rejected = [r for r in gw.requests if not r.accepted]
    assert len(rejected) <= 2 * 2, rejected  # at most 2 rejections (a drop is retried once before it counts)
    assert len(binding_rejections(gw.requests)) <= 2
    assert_known_limits_respected(gw.requests)
    assert all(recoverable(session, doc) for doc in docs)
    interval = session.interval
    assert interval.known_to_pass <= CAP < (interval.known_to_fail or 0)
    assert interval.known_to_pass <= (session.payload_cap or 0) < (interval.known_to_fail or 0)
    (learned, *_) = [e for e in of(session, LimitEvent) if e.limit == "cap" and e.source == "learned"]
    assert learned.known_to_fail == interval.known_to_fail and learned.known_to_pass
    assert learned.known_to_pass <= learned.value < learned.known_to_fail  # the send limit sits inside
    cap_event = next(e for e in of(session, CapEvent) if e.source == "learned")
    assert (cap_event.known_to_pass, cap_event.known_to_fail) == (learned.known_to_pass, learned.known_to_fail)
    assert "known to pass" in notices(session, "learned_cap")[0].text  # the status line shows the interval
    assert "known to pass" in repr(session) and "known to fail" in str(interval)


def test_the_learned_cap_sits_above_a_body_already_accepted_when_that_is_under_the_rejection(
    gw: GatewaySimulator,
) -> None:
    gw.configure(max_body=CAP)
    session = session_for(gw)
    paste_turns(session, gw, 12)
    interval = session.interval
    # 3/4 of the rejected size would be below what went through: the cap is not lowered past it
    assert interval.known_to_fail and interval.known_to_pass > 0.75 * interval.known_to_fail
    assert session.payload_cap is not None and session.payload_cap >= interval.known_to_pass


def test_probing_never_reaches_a_size_rejected_for_size_even_after_save_and_load(
    gw: GatewaySimulator, tmp_path: Path
) -> None:
    gw.configure(max_body=CAP)
    limits = Limits(context_window=WINDOW, retry_backoff=0.0, cap_probe_turns=1)
    session = session_for(gw, limits=limits, archive=Archive(tmp_path / "a.sqlite", session_id="m"))
    paste_turns(session, gw, 10)
    before = session.interval
    assert before.known_to_fail is not None
    session.save(tmp_path / "s.json")
    loaded = Session.load(tmp_path / "s.json", api_base=gw.api_base, api_key="sim-key", status=None)
    assert loaded.interval == before and loaded._state.clean_turns == session._state.clean_turns
    assert loaded.context_window == session.context_window
    seen = len(gw.requests)
    paste_turns(loaded, gw, 8, start=10)  # every clean turn probes the cap a quarter higher
    assert_known_limits_respected(gw.requests)
    assert all(r.bytes < before.known_to_fail for r in gw.requests[seen:])
    assert (loaded.payload_cap or 0) < before.known_to_fail


def test_a_learned_window_and_the_evidence_survive_save_and_load(gw: GatewaySimulator, tmp_path: Path) -> None:
    gw.configure(context_window=6_000)
    session = session_for(gw, archive=Archive(tmp_path / "a.sqlite", session_id="m"))
    session.add_messages(read_history(n=3, size=8_000))
    assert session.send("summarize").text
    session.save(tmp_path / "s.json")
    loaded = Session.load(tmp_path / "s.json", api_base=gw.api_base, api_key="sim-key", status=None)
    assert loaded.context_window == 6_000 and loaded._state.window_source == "learned"
    saved = session._state.evidence.of(session.model)
    got = loaded._state.evidence.of(loaded.model)
    assert (got.largest_accepted, got.smallest_overflow_tokens) == (saved.largest_accepted,
                                                                    saved.smallest_overflow_tokens)  # fmt: skip


def test_a_moved_save_folder_finds_the_archive_copy_next_to_it(gw: GatewaySimulator, tmp_path: Path) -> None:
    session = session_for(gw, limits=Limits(context_window=WINDOW, retry_backoff=0.0, max_payload="24KB"))
    docs = paste_turns(session, gw, 4)
    assert any(m.archive_keys for m in session.history)
    with pytest.warns(UserWarning, match="in memory"):
        session.save(tmp_path / "first" / "s.json")
    shutil.move(tmp_path / "first", tmp_path / "moved")
    loaded = Session.load(tmp_path / "moved" / "s.json", api_base=gw.api_base, api_key="sim-key", status=None)
    assert Path(loaded.archive.path).parent == tmp_path / "moved"
    assert all(recoverable(loaded, doc) for doc in docs)


# 2. size vs content ----------------------------------------------------------------------------------------


def test_nginx_403_on_a_first_small_request_is_access_or_content_not_a_96_byte_cap(gw: GatewaySimulator) -> None:
    gw.configure(block_phrase="forbidden-word", block_style="nginx")
    session = session_for(gw)
    with pytest.raises(ProviderError, match="content or to access") as info:
        session.send("forbidden-word")
    assert "configured payload cap" not in str(info.value) and "taught no limit" in str(info.value)
    assert len(gw.requests) == 1 and gw.requests[0].bytes < 200
    assert session.payload_cap is None and session.interval.known_to_fail is None
    assert not of(session, LimitEvent) and session.history == []
    assert session.send("hello").text  # the session is not bricked


@pytest.mark.parametrize("where", ["turn 1", "turn 6", "mid-paste"])
def test_a_content_block_fails_its_turn_and_the_next_five_turns_keep_the_limits_as_before(
    gw: GatewaySimulator, where: str
) -> None:
    gw.configure(max_body=CAP, reject_with="waf403", block_phrase=BLOCKED, block_style="apache")
    session = session_for(gw)
    if where == "turn 6":
        paste_turns(session, gw, 5)
    doc = document(50, 8_000)
    text = {
        "mid-paste": f"here is my shell history\n{doc[:4_000]}\n$ {BLOCKED}\n{doc[4_000:]}",
        "turn 1": f"$ {BLOCKED}\n{doc}",
        "turn 6": f"what does `{BLOCKED}` print?\n{doc}",
    }[where]
    before, limits = session.history, limits_of(session)
    with pytest.raises(ProviderError, match="content") as info:
        session.send(text)
    assert "taught no limit" in str(info.value)
    assert session.history == before and limits_of(session) == limits  # the turn rolled back its inferences
    assert [r.reason for r in gw.requests if not r.accepted][-1].startswith("content block")
    excerpts = len(notices(session, "message_excerpted"))
    paste_turns(session, gw, 5, start=60, size=1_500)  # harmless turns that stay under the real cap
    assert limits_of(session)[:3] == limits[:3]  # same cap, same window
    assert len(notices(session, "message_excerpted")) == excerpts  # no excerpting they would not have had
    assert not any(is_excerpt(m) for m in session.history)


def test_a_403_page_is_size_evidence_once_a_smaller_request_with_the_same_new_content_passes(
    gw: GatewaySimulator,
) -> None:
    gw.configure(max_body=CAP, reject_with="waf403")
    session = session_for(gw)
    session.add_messages(read_history(n=8, size=10_000))  # ~80 KB of earlier reads, never sent
    question = "turn: " + document(3)
    assert session.send(question).text
    assert session.cap_source == "learned" and session.interval.known_to_fail
    assert any(m.content == question for m in session.history)  # confirmed with the message whole


def test_a_failed_turn_keeps_a_413_but_not_what_it_inferred(gw: GatewaySimulator) -> None:
    gw.configure(max_body=CAP)
    session = session_for(gw)
    session.add_messages(read_history(n=8, size=10_000))
    gw.fail_next("400")  # the cap answers the first request (413), the queued 400 the smaller resend
    with pytest.raises(ProviderError):
        session.send("look")
    assert session.cap_source == "learned" and session.interval.known_to_fail  # a 413 is a fact
    assert [r.status for r in gw.requests] == [413, 400]
    assert session.send("look again").text
    assert_known_limits_respected(gw.requests)


# 3. absence of an answer is not a size ---------------------------------------------------------------------


def test_an_outage_with_a_large_history_teaches_no_permanent_cap(gw: GatewaySimulator) -> None:
    session = session_for(gw)
    paste_turns(session, gw, 12)  # ~100 KB requests go through
    limits = limits_of(session)
    gw.fail_next("drop", times=40)
    with pytest.raises(ProviderError):
        session.send("and now?")
    gw.clear_faults()
    assert limits_of(session) == limits and session.payload_cap is None
    assert session.send("and now?").text


def test_caddy_empty_502_is_a_size_only_when_smaller_bodies_went_through(gw: GatewaySimulator) -> None:
    gw.configure(max_body=CAP, reject_with="empty502")
    session = session_for(gw)
    paste_turns(session, gw, 10)
    assert session.cap_source == "learned" and "empty 502" in session._state.evidence.of(session.model).rejected_how
    gw.reset()
    session2 = session_for(gw)
    gw.fail_next("empty502", times=10)  # an empty 502 on the very first request: nothing went through
    with pytest.raises(ProviderError, match="tries"):
        session2.send("hello")
    assert session2.payload_cap is None and not of(session2, LimitEvent)


def test_a_drop_below_a_size_accepted_before_means_the_limit_moved(gw: GatewaySimulator) -> None:
    session = session_for(gw)
    paste_turns(session, gw, 8)
    accepted = session.interval.known_to_pass
    gw.configure(max_body=int(accepted * 0.6), reject_with="drop")  # the gateway's limit went down
    paste_turns(session, gw, 3, start=8)
    interval = session.interval
    assert interval.known_to_fail is not None and interval.known_to_pass <= int(accepted * 0.6)
    assert (session.payload_cap or 0) <= int(accepted * 0.6)


# 4. a paste far above a cap behind a page that states no size ---------------------------------------------
# Only an excerpt of such a paste can get under the refused size, and an excerpt that passes cannot tell a
# size limit from a content rule on a line it left out: it is sent when being wrong costs nothing the session
# relies on, and the cap sized for it lasts until it goes through.

PASTE = 280_000


def big_paste(i: int, blocked_at: float | None = None) -> str:
    doc = document(i, PASTE)
    if blocked_at is None:
        return f"the full crash log:\n{doc}"
    cut = int(len(doc) * blocked_at)
    return f"the full crash log:\n{doc[:cut]}\n$ {BLOCKED}\n{doc[cut:]}"


def test_a_280kb_paste_behind_a_128kb_no_size_403_goes_as_an_excerpt_with_the_original_recallable(
    gw: GatewaySimulator,
) -> None:
    gw.configure(max_body="128KB", reject_with="waf403")
    session = session_for(gw)
    paste_turns(session, gw, 3)
    paste = big_paste(70)
    assert session.send(paste).text
    newest = next(m for m in reversed(session.history) if m.role == "user" and not m.synthetic)
    assert is_excerpt(newest) and recoverable(session, paste)  # archived whole, sent as an excerpt
    assert len(notices(session, "excerpt_test")) == 1
    refused = [r for r in gw.requests if not r.accepted]
    assert len(refused) == 1 and refused[0].bytes > 2 * 128 * 1024
    # the refused size stays known to fail; the cap that sized the excerpt does not outlive it
    assert session.interval.known_to_fail == refused[0].bytes and session.payload_cap is None
    caps = of(session, CapEvent)
    assert [e.source for e in caps] == ["learned", "rollback"] and caps[-1].cap_bytes == 0
    assert "until the excerpt goes through" in notices(session, "learned_cap")[0].text
    assert session.send("what is left to do?").text
    second = big_paste(71)  # a second paste as big is excerpted without sending the refused size again
    assert session.send(second).text and recoverable(session, second)
    assert_known_limits_respected(gw.requests)
    assert all(r.bytes < refused[0].bytes for r in gw.requests[refused[0].seq + 1 :])


def test_a_content_rule_on_a_line_the_excerpt_left_out_teaches_no_cap(gw: GatewaySimulator) -> None:
    gw.configure(reject_with="waf403", block_phrase=BLOCKED, block_style="apache")  # no size limit at all
    session = session_for(gw)
    paste_turns(session, gw, 3)
    limits = limits_of(session)
    paste = big_paste(72, blocked_at=0.5)
    assert session.send(paste).text and recoverable(session, paste)
    assert [r.reason for r in gw.requests if not r.accepted] == [f"content block {BLOCKED!r}"]
    assert limits_of(session)[:3] == limits[:3]  # no cap, the same window
    excerpts = len(notices(session, "message_excerpted"))
    paste_turns(session, gw, 5, start=73)  # harmless turns: no cap, no excerpt they would not have had
    assert session.payload_cap is None and len(notices(session, "message_excerpted")) == excerpts


def test_a_content_rule_in_every_excerpt_fails_its_turn_and_teaches_nothing(gw: GatewaySimulator) -> None:
    gw.configure(max_body="128KB", reject_with="waf403", block_phrase=BLOCKED, block_style="apache")
    session = session_for(gw)
    paste_turns(session, gw, 3)
    before, limits = session.history, limits_of(session)
    with pytest.raises(ProviderError, match="objects to the content") as info:
        session.send(big_paste(74, blocked_at=0.0))  # the blocked line heads every excerpt
    assert "excerpt of your newest message was refused too" in str(info.value), str(info.value)
    assert session.history == before and limits_of(session) == limits  # nothing inferred stays
    paste_turns(session, gw, 5, start=75, size=1_500)
    assert limits_of(session)[:3] == limits[:3] and not any(is_excerpt(m) for m in session.history)
    assert_known_limits_respected(gw.requests)


def test_no_excerpt_test_once_the_endpoint_refused_content_even_after_save_and_load(
    gw: GatewaySimulator, tmp_path: Path
) -> None:
    gw.configure(max_body="128KB", reject_with="waf403", block_phrase=BLOCKED, block_style="apache")
    session = session_for(gw, archive=Archive(tmp_path / "a.sqlite", session_id="m"))
    paste_turns(session, gw, 2)
    with pytest.raises(ProviderError, match="content"):
        session.send(f"what does `{BLOCKED}` print?")
    session.save(tmp_path / "s.json")
    loaded = Session.load(tmp_path / "s.json", api_base=gw.api_base, api_key="sim-key", status=None)
    assert loaded._state.evidence.of(loaded.model).content_refused
    with pytest.raises(ProviderError, match="already refused a request for its content") as info:
        loaded.send(big_paste(76))
    assert "set Limits(max_payload=...)" in str(info.value)
    assert loaded.payload_cap is None and not any(is_excerpt(m) for m in loaded.history)
    assert loaded.send("hello").text  # not bricked


def test_no_excerpt_test_when_the_refusal_is_not_far_above_what_the_endpoint_took(gw: GatewaySimulator) -> None:
    gw.configure(max_body="128KB", reject_with="waf403")
    session = session_for(gw)
    paste_turns(session, gw, 12)  # requests of ~100 KB went through
    accepted = session.interval.known_to_pass
    assert accepted > 90_000
    before = session.history
    with pytest.raises(ProviderError, match="not far above") as info:
        session.send(big_paste(77)[: int(1.6 * accepted)])  # refused again below 2x what passed, with the paste whole
    assert "taught no limit" in str(info.value) and session.history == before
    assert session.payload_cap is None and not notices(session, "excerpt_test")
    assert_known_limits_respected(gw.requests)


def test_the_excerpt_test_conditions_each_refuse_on_their_own() -> None:
    from contextkit.limits.evidence import EXCERPT_TEST_MIN, EndpointEvidence, excerpt_test_refused

    assert excerpt_test_refused(EndpointEvidence(largest_accepted=45_000), 280_000) == ""
    assert excerpt_test_refused(EndpointEvidence(), EXCERPT_TEST_MIN) == ""  # nothing accepted yet
    assert "below 64.0 KB" in excerpt_test_refused(EndpointEvidence(), EXCERPT_TEST_MIN - 1)
    assert "not far above" in excerpt_test_refused(EndpointEvidence(largest_accepted=150_000), 280_000)
    assert "content" in excerpt_test_refused(EndpointEvidence(largest_accepted=1_000, content_refused=True), 280_000)
    saved = EndpointEvidence(content_refused=True).to_dict()
    assert EndpointEvidence.from_dict(saved).content_refused
    assert not EndpointEvidence.from_dict({k: v for k, v in saved.items() if k != "content_refused"}).content_refused
