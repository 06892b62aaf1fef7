"""A turn is a transaction whatever interrupts it: a Ctrl-C (or any exception) raised by a subscriber
at any event of a turn - the first history event, a text delta, a tool round, ``done`` - leaves the
history, the limits and the evidence as they were before the turn. And two sessions given one
``Archive`` object each work in a scope of their own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers.faults import run_turn

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.events import ArchiveEvent, Event
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace
from contextkit.tools import ToolResult

WS = Workspace(seed=4, target_bytes=3_000)


def tail_log(n: int) -> ToolResult:
    """The last n log lines."""
    out = WS.tail_log(n)
    return ToolResult(out.content, path=out.path)


def session_for(gw: GatewaySimulator, name: str = "t", archive: Any = None) -> Session:
    kw = gw.litellm_kwargs()
    model = kw.pop("model")
    return Session(model, archive=archive or Archive.in_memory(session_id=name), session_id=name, status=None,
                   tools=[tail_log], limits=Limits(context_window=1_000_000, retry_backoff=0.0), **kw)  # fmt: skip


TEXT = 'look at the log [[tool:tail_log {"n": 40}]] then answer'


def snapshot(session: Session) -> tuple[Any, ...]:
    """The history and what the turn could have inferred (a body accepted is a fact a turn keeps)."""
    st = session._state
    known_to_fail = {name: (ev.smallest_rejected, ev.smallest_overflow_tokens) for name, ev in st.evidence.endpoints.items()}
    return session.history, st.cap, st.context_window, known_to_fail, st.turns


class Interrupt:
    """A subscriber that raises at the ``at``-th event it sees (counting every event of the turn)."""

    def __init__(self, at: int, exc: type[BaseException]) -> None:
        self.at, self.exc, self.seen = at, exc, 0
        self.kinds: list[str] = []

    def __call__(self, event: Event) -> None:
        self.kinds.append(f"{event.type}:{getattr(event, 'kind', '')}")
        self.seen += 1
        if self.seen == self.at:
            raise self.exc("raised by a subscriber")


async def consume(session: Session) -> None:
    async for _ in session.astream(TEXT):
        pass


def events_of_a_turn(gw: GatewaySimulator, loop: str) -> list[str]:
    session = session_for(gw)
    session.send("hello")
    counter = Interrupt(at=0, exc=KeyboardInterrupt)
    session.events.subscribe(counter)
    run_turn(session, loop, TEXT)
    return counter.kinds


@pytest.mark.parametrize("loop", ["send", "stream", "astream"])
def test_an_interrupt_from_a_subscriber_at_any_event_rolls_the_turn_back(gw: GatewaySimulator, loop: str) -> None:
    kinds = events_of_a_turn(gw, loop)
    assert "stream:done" in kinds or loop == "send"
    assert sum(k.startswith("request") for k in kinds) >= 2  # a tool round, then the answer
    for at in range(1, len(kinds) + 1):
        gw.reset()
        session = session_for(gw)
        session.send("hello")
        before = snapshot(session)
        interrupt = Interrupt(at, KeyboardInterrupt)
        unsubscribe = session.events.subscribe(interrupt)
        with pytest.raises((KeyboardInterrupt, RuntimeError)):
            if loop == "astream":
                asyncio.run(consume(session))
            elif loop == "stream":
                for _ in session.stream(TEXT):
                    pass
            else:
                session.send(TEXT)
        unsubscribe()
        after = snapshot(session)
        assert after[:4] == before[:4], f"{loop}: interrupted at event {at} ({kinds[at - 1]}) left a trace"
        assert session.send("again").text  # the session is usable


def test_an_ordinary_exception_from_a_subscriber_never_breaks_a_turn(gw: GatewaySimulator) -> None:
    session = session_for(gw)
    session.events.subscribe(Interrupt(at=3, exc=ValueError))
    assert session.send(TEXT).text  # a broken view is logged, not raised


def test_two_sessions_given_one_archive_object_each_get_a_scope_of_their_own(gw: GatewaySimulator, tmp_path: Any) -> None:
    shared = Archive(tmp_path / "shared.sqlite")
    first = session_for(gw, "first", archive=shared)
    second = session_for(gw, "second", archive=shared)
    assert first.archive.session_id == "first" and second.archive.session_id == "second"
    first.archive.put("only the first session wrote this: ALPHA-7731", kind="tool_result")
    second.archive.put("only the second session wrote this: BETA-2210", kind="tool_result")
    assert [e for e in first.events if isinstance(e, ArchiveEvent)] and [
        e for e in second.events if isinstance(e, ArchiveEvent)
    ]
    assert all("BETA" not in str(e) for e in first.events)
    assert not first.archive.search("BETA-2210") and not second.archive.search("ALPHA-7731")
    assert len([e for e in first.events if isinstance(e, ArchiveEvent)]) == 1
    assert len([e for e in second.events if isinstance(e, ArchiveEvent)]) == 1
