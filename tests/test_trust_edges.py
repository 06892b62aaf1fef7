"""Trust at the edges: promises about evidence, floors and limits that the main trust tests leave
unattacked, and ordinary mistakes around them.

Through litellm over real HTTP to the simulator, with a real SQLite archive where the archive matters.
Counts and order only, never seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.faults import run_turn
from helpers.histories import pasted_history, read_history
from helpers.logcheck import assert_known_limits_respected

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.errors import ConfigError, PayloadFloorError, ProviderError, RecoveryFailedError
from contextkit.events import CapEvent, LimitEvent, RecoveryEvent
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace
from contextkit.sizing import request_bytes

WINDOW = 1_000_000
# litellm maps this schema 400 to ContextWindowExceededError: the message must decide, not the class
NAME_TOO_LONG = (
    "Invalid 'messages[1].name': string too long. Expected a string with maximum length 64, but got a string "
    "with length 80 instead."
)
TOOL_DESCRIPTION_TOO_LONG = (
    "Invalid 'tools[0].function.description': string too long. Expected a string with maximum length 1024, but "
    "got a string with length 1400 instead."
)


def session_for(gw: GatewaySimulator, *, route: str = "openai", **kwargs: Any) -> Session:
    kw = gw.litellm_kwargs(route)
    model = kw.pop("model")
    kwargs.setdefault("archive", Archive.in_memory(session_id="a"))
    kwargs.setdefault("status", None)
    kwargs.setdefault("limits", Limits(context_window=WINDOW, retry_backoff=0.0))
    return Session(model, session_id="a", **kw, **kwargs)


def limits_of(session: Session) -> tuple[Any, ...]:
    st = session._state
    ceilings = {name: ev.ceiling for name, ev in st.evidence.endpoints.items()}
    return st.cap, st.cap_source, st.context_window, st.turn_budget, st.per_result_budget, ceilings


def of(session: Session, cls: type) -> list[Any]:
    return [e for e in session.events if isinstance(e, cls)]


def chat(session: Session, turns: int, size: int = 6_000, seed: int = 0) -> None:
    logs = Workspace(seed=seed, target_bytes=size)
    for i in range(turns):
        session.send(f"turn {i}: log\n" + logs.tail_log(size // 60).content)


# P1: a 400 about a field is not about size, whatever class litellm raised, in every loop --------------------


@pytest.mark.parametrize("loop", ["send", "stream", "astream"])
@pytest.mark.parametrize(("route", "body"), [("openai", NAME_TOO_LONG), ("anthropic", TOOL_DESCRIPTION_TOO_LONG)])
def test_a_field_too_long_400_changes_nothing_in_any_loop(
    gw: GatewaySimulator, route: str, body: str, loop: str
) -> None:
    session = session_for(gw, route=route)
    chat(session, 2)
    before, limits, archived, sent = session.history, limits_of(session), len(session.archive), len(gw.requests)
    gw.fail_next("400", body=body)
    with pytest.raises(ProviderError, match="not a size problem"):
        run_turn(session, loop, "one more question")
    assert len(gw.requests) == sent + 1  # one request: no retry, no compaction, no summary call
    assert session.history == before and limits_of(session) == limits and len(session.archive) == archived
    assert not of(session, LimitEvent) and not of(session, RecoveryEvent)
    assert session.stats.failures_by_kind == {"other": 1}


@pytest.mark.parametrize("loop", ["send", "stream"])
def test_a_schema_400_after_a_learned_cap_keeps_the_cap_the_evidence_and_the_history(
    gw: GatewaySimulator, loop: str
) -> None:
    gw.configure(max_body="40KB", reject_with="413")
    session = session_for(gw)
    chat(session, 7, size=9_000)
    assert session.cap_source == "learned"
    before, limits, events = session.history, limits_of(session), len(session.events)
    gw.fail_next("400", body=TOOL_DESCRIPTION_TOO_LONG)
    with pytest.raises(ProviderError, match="not a size problem"):
        run_turn(session, loop, "and the config?")
    assert session.history == before and limits_of(session) == limits
    assert not [e for e in list(session.events)[events:] if isinstance(e, LimitEvent | CapEvent | RecoveryEvent)]
    assert run_turn(session, loop, "and the config?").text
    assert_known_limits_respected(gw.requests)


# P1 + the classifier's table: other servers' overflow wordings teach their window through a session --------


@pytest.mark.parametrize(
    ("status", "body", "window"),
    [
        ("422", {"error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8192. Given: 9000 "
                 "`inputs` tokens and 100 `max_new_tokens`", "error_type": "validation"}, 8_192),
        ("400", {"object": "error", "message": "This model's maximum context length is 8192 tokens. However, you "
                 "requested 9100 tokens (9000 in the messages, 100 in the completion). Please reduce the length of "
                 "the messages or completion.", "type": "BadRequestError", "param": None, "code": 400}, 8_192),
        ("400", {"error": {"code": 400, "message": "the request exceeds the available context size, try increasing "
                 "it", "type": "exceed_context_size_error", "n_prompt_tokens": 9000, "n_ctx": 8192}}, 8_192),
    ],
    ids=["tgi-422", "vllm", "llama.cpp"],
)  # fmt: skip
def test_other_servers_overflow_wordings_teach_their_window_never_a_cap(
    gw: GatewaySimulator, status: str, body: Any, window: int
) -> None:
    session = session_for(gw)
    session.add_messages(pasted_history(n=4, size=12_000))  # ~12k tokens: over the stated window
    gw.fail_next(status, body=body)
    assert session.send("summarize").text
    (learned,) = [e for e in of(session, LimitEvent) if e.limit == "window"]
    assert (learned.value, learned.source) == (window, "learned") and session.context_window == window
    assert session.payload_cap is None and not of(session, CapEvent)
    assert gw.requests[-1].accepted and gw.requests[-1].tokens < window


# P1: a firewall that refuses one request's content is not a size limit ---------------------------------------


def test_a_waf_that_keeps_refusing_a_small_request_is_about_content_and_teaches_nothing(gw: GatewaySimulator) -> None:
    """A WAF rule matching a message's content refuses that request whatever its size. It used to be
    retried once, then taken for a size limit: the session learned caps of 3/4 of ever smaller
    bodies and shrank to stubs, although the endpoint had accepted a body four times bigger."""
    session = session_for(gw)
    session.add_messages(read_history(n=6, size=10_000))
    session.send("look at it")  # a ~68 KB body goes through
    session.compact("keep the file names")
    before, limits, sent = session.history, limits_of(session), len(gw.requests)
    gw.fail_next("waf403", times=20)  # every request of this content is refused
    with pytest.raises(ProviderError, match="content, not its size") as info:
        session.send("'; DROP TABLE users; --")
    gw.clear_faults()
    assert "not a size problem" in str(info.value)
    refused = gw.requests[sent:]
    assert len(refused) == 2 and refused[0].body_sha256 == refused[1].body_sha256  # retried once, then told
    assert session.history == before and limits_of(session) == limits and session.payload_cap is None
    assert not of(session, LimitEvent) and not of(session, RecoveryEvent)
    assert session.send("a plain question").text
    assert session.history[: len(before)] == before  # nothing compacted for the blocked request
    # what the error offers when the limit really went down: reset_limits, and the rejection is evidence again
    session.reset_limits()
    gw.fail_next("waf403")
    assert session.send("and the next step?").text
    assert session.cap_source == "learned"


def test_a_413_repeated_far_below_an_accepted_size_means_the_limit_moved(gw: GatewaySimulator) -> None:
    """413 is about size by definition: the same small body refused twice means the gateway's limit
    went down (a reload, another backend), so the cap is learned - unlike a WAF page."""
    session = session_for(gw)
    session.add_messages(read_history(n=6, size=10_000))
    session.send("look at it")
    session.compact("keep the file names")
    sent = len(gw.requests)
    gw.fail_next("413", times=2)
    assert session.send("and now?").text
    refused = [r for r in gw.requests[sent:] if not r.accepted]
    assert len(refused) == 2 and session.cap_source == "learned" and session.payload_cap < refused[0].bytes
    assert_known_limits_respected(gw.requests)


# P3: transactions in the fourth loop ------------------------------------------------------------------------


def test_recovery_failed_restores_the_history_in_astream_too(gw: GatewaySimulator) -> None:
    session = session_for(gw)
    chat(session, 2)
    before = session.history
    gw.fail_next("overflow", times=30)
    with pytest.raises(RecoveryFailedError) as info:
        run_turn(session, "astream", "please go on")
    assert info.value.history == before and session.history == before


# P5: halved budgets belong to their episode, also when it fails; reset_limits after everything ---------------


@pytest.mark.parametrize("loop", ["send", "stream"])
def test_halved_budgets_come_back_when_the_episode_fails(gw: GatewaySimulator, loop: str) -> None:
    session = session_for(gw)
    chat(session, 1)
    configured = (session._state.turn_budget, session._state.per_result_budget)
    gw.fail_next("overflow", times=30)
    with pytest.raises(RecoveryFailedError):
        run_turn(session, loop, "go on")
    gw.clear_faults()
    budgets = [(e.limit, e.source) for e in of(session, LimitEvent) if e.limit.endswith("budget")]
    assert ("per_result_budget", "episode") in budgets and budgets[-1][1] == "restored"
    assert (session._state.turn_budget, session._state.per_result_budget) == configured


def test_reset_limits_after_halvings_caps_and_windows_sends_what_was_refused_again(gw: GatewaySimulator) -> None:
    """reset_limits forgets everything failures taught (cap, window, halved budgets, the evidence), so
    a size the gateway once refused may go out again: what the user asked for, and the log shows it."""
    session = session_for(gw, limits=Limits(context_window=WINDOW, retry_backoff=0.0, max_recovery_attempts=3))
    session.add_messages(read_history(n=3, size=20_000))
    gw.fail_next("413")
    gw.fail_next("overflow")
    session.send("go")
    refused = min(r.bytes for r in gw.requests if r.reason == "fault:413")
    assert session.cap_source == "learned" and session.context_window < WINDOW
    configured = Limits()
    session.reset_limits()
    st = session._state
    assert (st.cap, st.cap_source, st.context_window) == (None, None, WINDOW)
    assert (st.turn_budget, st.per_result_budget) == (
        configured.tool_result_turn_budget,
        configured.tool_result_max_chars,
    )
    sent = len(gw.requests)
    session.add_messages(read_history(n=3, size=20_000, seed=1))
    assert session.send("and again").text
    assert max(r.bytes for r in gw.requests[sent:]) >= refused  # the forgotten evidence no longer binds


# P4: the floor diagnostic counts what recovery itself adds -------------------------------------------------


def test_the_floor_error_counts_the_recall_schema_and_the_rest_of_the_history(gw: GatewaySimulator) -> None:
    """A message too big for a tiny configured cap: the error used to name only the system prompt plus
    the message's excerpt (1.5 KB) while the smallest request recovery can reach also carries the recall
    schema (offered as soon as something is archived) and the truncated history's notice (3.1 KB): a user
    who set the cap to the number named got the floor error again."""
    question = "question " + Workspace(seed=3, target_bytes=4_000).tail_log(60).content
    session = session_for(gw, limits=Limits(context_window=WINDOW, max_payload=1_000))
    session.add_messages(read_history(n=6, size=9_000))
    before = session.history
    with pytest.raises(PayloadFloorError) as info:
        session.send(question)
    message = str(info.value)
    assert message.startswith("The configured payload cap of 1000 B, but")  # not "The the ..."
    assert "(the recall tool)" in message and not gw.requests and session.history == before
    recall_schema = request_bytes([], tools=[session._context().recall_tool]) - request_bytes([])
    excerpt_only = 1_526  # what the error named before: an empty request plus the excerpt (measured here)
    assert info.value.base_bytes >= excerpt_only + recall_schema


# ordinary mistakes --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["retry_backoff", "max_retries", "cap_probe_turns"])
def test_a_negative_limit_that_may_be_zero_says_so(field: str) -> None:
    with pytest.raises(ConfigError, match=f"Limits.{field} must be zero or more, got -1"):
        Limits(**{field: -1})


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"limits": {"max_payload": "1MB"}}, "must be a contextkit.Limits"),
        ({"limits": 5}, "must be a contextkit.Limits"),
    ],
)
def test_limits_given_as_the_wrong_type_is_a_clear_error(
    gw: GatewaySimulator, kwargs: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment):
        session_for(gw, **kwargs)


def test_a_file_archive_restores_history_and_nothing_is_lost_after_a_failed_recovery(
    gw: GatewaySimulator, tmp_path: Path
) -> None:
    """Real SQLite file: the ladder archives what it removes, the failed turn restores the history, and
    everything the ladder archived stays recallable from the file after reopening it."""
    path = tmp_path / "archive.sqlite"
    session = session_for(gw, archive=Archive(path, session_id="a"))
    session.add_messages(pasted_history(n=4, size=16_000))
    before = session.history
    gw.fail_next("overflow", times=30)
    with pytest.raises(RecoveryFailedError):
        session.send("go on")
    assert session.history == before
    reopened = Archive(path, session_id="a")
    keys = [e.key for e in reopened.entries()]
    assert keys and all(reopened.get(k) for k in keys)
    originals = [m["content"] for m in pasted_history(n=4, size=16_000)]
    stored = "\n".join(reopened.get(k) or "" for k in keys)
    assert any(text in stored for text in originals)  # the ladder archived the originals before cutting them
