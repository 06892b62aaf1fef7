"""Session construction and persistence that must not surprise: Limits over CONTEXTKIT_*, keyword
arguments that never vanish, no shadowed recall tool, archive scopes, saving an in-memory archive, and
event subscribers whose errors are counted and reported."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from contextkit import Limits, Session
from contextkit.archive import Archive
from contextkit.errors import ConfigError, ProviderError
from contextkit.events import EventLog, NoticeEvent, RequestEvent
from contextkit.markers import marker
from contextkit.sim import GatewaySimulator
from contextkit.tools import Tool


@pytest.fixture(scope="module")
def gw():
    with GatewaySimulator(record_bodies=True, timeout_sleep=1.0) as sim:
        yield sim


def make(gw: GatewaySimulator, **kwargs: Any) -> Session:
    kw = gw.litellm_kwargs()
    model = kw.pop("model")
    kwargs.setdefault("archive", Archive.in_memory())
    kwargs.setdefault("status", None)
    return Session(model, **kw, **kwargs)


# Limits and CONTEXTKIT_* ---------------------------------------------------------------------------


ENV = {
    "CONTEXTKIT_MAX_RECOVERY_ATTEMPTS": "5",
    "CONTEXTKIT_MAX_PAYLOAD": "1MB",
    "CONTEXTKIT_EMERGENCY_KEEP_MESSAGES": "6",
    "CONTEXTKIT_CONTEXT_WINDOW": "50000",
}


def test_limits_override_only_the_fields_they_set(gw: GatewaySimulator, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    s = make(gw, limits=Limits(max_payload="128KB", emergency_keep_messages=12))
    assert s.limits.payload_cap == 128 * 1024 and s.limits.emergency_keep_messages == 12  # set: they win
    assert s.limits.max_recovery_attempts == 5 and s.context_window == 50_000  # not set: from the environment
    assert s.payload_cap == 128 * 1024
    plain = make(gw)
    assert (plain.limits.max_recovery_attempts, plain.limits.payload_cap) == (5, 1024 * 1024)


def test_explicit_default_values_still_win(gw: GatewaySimulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTKIT_MAX_RECOVERY_ATTEMPTS", "5")
    monkeypatch.setenv("CONTEXTKIT_MAX_PAYLOAD", "1MB")
    s = make(gw, limits=Limits(max_recovery_attempts=3, max_payload=None))
    assert s.limits.max_recovery_attempts == 3 and s.payload_cap is None


def test_explicit_fields_survive_copies() -> None:
    limits = Limits(max_payload="128KB")
    assert limits.explicit_fields == {"max_payload"}
    assert limits.with_overrides(request_timeout=9).explicit_fields == {"max_payload", "request_timeout"}
    assert Limits.from_env({}, min_keep_recent=2).explicit_fields == {"min_keep_recent"}
    assert Limits(1000).explicit_fields == {"context_window"}
    assert Limits() == Limits.from_env({})


# keyword arguments -------------------------------------------------------------------------------------


def test_timeout_sets_the_request_timeout(gw: GatewaySimulator) -> None:
    s = make(gw, timeout=0.3, max_retries=0)
    assert s.limits.request_timeout == 0.3
    gw.fail_next("timeout")  # the simulator answers nothing for a second, then closes
    with pytest.raises(ProviderError) as info:
        s.send("hello")
    assert info.value.failure is not None and info.value.failure.reason == "timeout"  # our timeout, not a drop


def test_retries_are_ours(gw: GatewaySimulator) -> None:
    s = make(gw, num_retries=1, limits=Limits(retry_backoff=0))
    assert s.limits.max_retries == 1
    gw.clear_log()
    gw.fail_next("500", times=3)
    with pytest.raises(ProviderError):
        s.send("hello")
    assert len(gw.requests) == 2  # one try + one retry of ours; the SDK retried nothing
    gw.reset(timeout_sleep=1.0)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"timeout": "soon"}, "timeout='soon': pass a number (seconds)"),
        ({"timeout": 5, "limits": Limits(request_timeout=9)}, "conflicts with Limits(request_timeout=9"),
        ({"messages": []}, "session.send"),
        ({"stream": True}, "session.stream"),
    ],
)
def test_bad_keyword_arguments_raise_clear_errors(gw: GatewaySimulator, kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        make(gw, **kwargs)
    assert fragment in str(info.value)


def test_other_keyword_arguments_reach_the_body(gw: GatewaySimulator) -> None:
    s = make(gw, top_k=3, repetition_penalty=1.1)
    gw.clear_log()
    s.send("hello")
    body = json.loads(gw.body(gw.requests[-1].seq))
    assert (body["top_k"], body["repetition_penalty"]) == (3, 1.1)
    assert [e.bytes for e in s.events if isinstance(e, RequestEvent)] == [r.bytes for r in gw.requests]


@pytest.mark.parametrize("name", ["recall", "Recall"])
def test_a_tool_named_recall_is_refused(gw: GatewaySimulator, name: str) -> None:
    def recall(key: str) -> str:
        """My own notes."""
        return key

    with pytest.raises(ConfigError, match="shadow the built-in recall tool"):
        make(gw, tools=[Tool.from_function(recall, name=name)])


# archive scope and saving ----------------------------------------------------------------------------


def test_an_archive_without_scope_stores_under_the_session_id(gw: GatewaySimulator, tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite"
    s = make(gw, archive=Archive(path))
    assert s.archive.session_id == s.session_id
    key = s.archive.put("archived by the session", kind="note")
    with Archive(path, session_id=s.session_id) as reopened:
        assert reopened.get(key or "") == "archived by the session"
    explicit = make(gw, archive=Archive(path, session_id="team"))
    assert explicit.archive.session_id == "team"  # a chosen scope is kept


def test_save_and_load_with_an_unscoped_archive_keeps_recall(gw: GatewaySimulator, tmp_path: Path) -> None:
    s = make(gw, archive=Archive(tmp_path / "a.sqlite"))
    key = s.archive.put("the archived log\n" * 3, kind="tool_result")
    s.add_messages([{"role": "user", "content": f"log: {marker(key or '')}"}])
    saved = s.save(tmp_path / "s.json")
    loaded = Session.load(saved, api_base=gw.api_base, api_key="sim-key", status=None)
    assert loaded.archive.get(key or "") == "the archived log\n" * 3


def test_saving_an_in_memory_archive_copies_it_and_warns(gw: GatewaySimulator, tmp_path: Path) -> None:
    s = make(gw, archive=Archive.in_memory())
    key = s.archive.put("only in memory", kind="tool_result")
    s.add_messages([{"role": "user", "content": f"see {marker(key or '')}"}])
    with pytest.warns(UserWarning, match="archive is in memory"):
        saved = s.save(tmp_path / "s.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.archive.sqlite", "s.json"]
    assert any(isinstance(e, NoticeEvent) and e.code == "archive_copied" for e in s.events)
    loaded = Session.load(saved, api_base=gw.api_base, api_key="sim-key", status=None)
    assert loaded.archive.path == tmp_path / "s.archive.sqlite"
    assert loaded.archive.recall(marker(key or "")).text == "only in memory"
    loaded.archive.close()
    (tmp_path / "s.archive.sqlite").unlink()
    with pytest.raises(ConfigError, match="no longer exists"):
        Session.load(saved, api_base=gw.api_base, api_key="sim-key", status=None)


# event subscribers -------------------------------------------------------------------------------------


def test_a_failing_subscriber_is_counted_and_reported_once(
    gw: GatewaySimulator, caplog: pytest.LogCaptureFixture
) -> None:
    log = EventLog()
    seen: list[str] = []

    def broken(event: Any) -> None:
        raise ValueError("widget gone")

    log.subscribe(broken)
    log.subscribe(lambda e: seen.append(e.type))
    s = make(gw, events=log)
    with caplog.at_level(logging.WARNING, logger="contextkit"):
        assert s.send("hello").text and s.send("again").text  # the session keeps running
    notices = [e for e in log if isinstance(e, NoticeEvent) and e.code == "subscriber_error"]
    assert len(notices) == 1 and "broken" in notices[0].text and "ValueError: widget gone" in notices[0].text
    assert log.subscriber_errors == len(seen) > 5  # every event failed in `broken`, all were delivered to the other
    assert isinstance(log.last_subscriber_error, ValueError)
    assert [r.levelname for r in caplog.records if "widget gone" in r.getMessage()] == ["WARNING"]


def test_load_takes_a_new_timeout(gw: GatewaySimulator, tmp_path: Path) -> None:
    s = make(gw, archive=Archive(tmp_path / "a.sqlite"), timeout=30)
    saved = s.save(tmp_path / "s.json")
    assert Session.load(saved, api_base=gw.api_base, api_key="k", status=None).limits.request_timeout == 30
    again = Session.load(saved, api_base=gw.api_base, api_key="k", status=None, timeout=5)
    assert again.limits.request_timeout == 5


def test_limits_are_the_callers_object_when_the_environment_adds_nothing(gw: GatewaySimulator) -> None:
    limits = Limits(max_payload="128KB")
    assert make(gw, limits=limits).limits is limits
