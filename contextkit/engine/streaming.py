"""Streamed turns: the turn flow driven while the provider's text reaches the reader as it arrives.

``ReplyStream`` (``Session.stream``) and ``AsyncReplyStream`` (``Session.astream``) are the
streaming drivers of the one turn flow, so a streamed turn recovers as ``send`` does: pre-flight,
compaction, the recovery ladder, ``max_tokens`` escalation and the stats and events are those of
``send``. Each streamed model call
is a generator (``EffectRunner.stream_model`` / ``astream_model``) whose deltas are handed to the
reader before the outcome goes back into the flow.

What the reader gets (the concatenated deltas):

* a turn without tools: exactly ``reply.text``. A stream cut by a failure or by ``max_tokens`` is
  continued, never restarted, so every sentence appears once. Only when the provider refuses to
  continue an interrupted answer is it voided: a marker line follows the voided text and the answer
  starts again; ``reply.text`` holds the same (voided text, marker, answer) while the history keeps
  only the answer.
* tool rounds stream too: the text a model writes before calling tools ("Let me read the file.")
  is yielded as it arrives, followed by a line break, and marked afterwards by a ``tool_round``
  event (reason ``"@recall"`` for a reply that asked ``@recall <<ccr:KEY>>`` in its text). ``reply.text`` is the final answer only, so the deltas are the tool rounds' text plus
  ``reply.text`` (which they end with).

Every delta is also published as a ``StreamEvent(kind="delta")`` (to subscribers only, not kept
in the log) with the answer's size so far; the log keeps the ``tool_round``, ``retry``,
``continuation``, ``voided``, ``done`` and ``cancelled`` events. Stopping early (``break``,
``close()``, ``aclose()`` or cancelling the task) closes the provider stream and puts the history
back as it was before the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from contextkit.engine.effects import CallModel, ModelReply, Reply, StreamNote
from contextkit.engine.flow import turn_flow
from contextkit.events import EventLog, StreamEvent
from contextkit.messages import Message
from contextkit.sizing import text_tokens

if TYPE_CHECKING:
    from contextkit.engine.driver import EffectRunner
    from contextkit.limits.context import FlowContext
    from contextkit.limits.state import SessionState


class StreamHost(Protocol):
    """What the drivers need of a ``contextkit.session.core.Session`` (which imports this module, so it
    is described here rather than imported: no import cycle)."""

    model: str
    session_id: str
    events: EventLog
    _state: SessionState
    _runner: EffectRunner
    _lock: threading.RLock

    def _context(self) -> FlowContext: ...
    def _turn(self, what: str) -> contextlib.AbstractContextManager[None]: ...
    def _closing(self, flow: Any) -> contextlib.AbstractContextManager[None]: ...
    def _async_lock(self) -> asyncio.Lock: ...


class StreamTap:
    """Publishes the ``StreamEvent``s of one streamed turn and counts the answer shown so far.

    The count is of the current answer: it starts again after a tool round and after the marker
    line of a voided answer (the answer starts again there).
    """

    def __init__(self, events: EventLog, session_id: str, turn: int, model: str) -> None:
        self.events = events
        self.session_id = session_id
        self.turn = turn
        self.model = model
        self.chars = 0
        self.tokens = 0
        self._answer: list[str] = []

    def _event(self, kind: str, text: str = "", reason: str = "", level: int = 0) -> StreamEvent:
        return StreamEvent(
            session_id=self.session_id,
            turn=self.turn,
            kind=kind,
            text=text,
            chars_so_far=self.chars,
            tokens_so_far=self.tokens,
            reason=reason,
            level=level,
        )

    def delta(self, text: str) -> None:
        self.chars += len(text)
        self.tokens += text_tokens(text, self.model)  # per delta: a live count, exact at "done"
        self._answer.append(text)
        self.events.publish(self._event("delta", text))

    def note(self, note: StreamNote) -> list[str]:
        """Publish what the flow decided; returns the text the reader must see now."""
        shown = [note.show] if note.show else []
        if note.kind == "tool_round":
            for text in shown:
                self.delta(text)
            self.events.append(self._event("tool_round", note.text, note.reason, note.level))
            self._restart()  # the next round is a new answer
            return shown
        if note.kind == "done":
            self.done(note.reason)
            return []
        self.events.append(self._event(note.kind, note.text, note.reason, note.level))
        for text in shown:
            self.delta(text)
        if note.kind == "voided":
            self._restart()  # the answer starts again after the marker line
        return shown

    def _restart(self) -> None:
        self.chars = self.tokens = 0
        self._answer = []

    def done(self, finish_reason: str | None) -> None:
        answer = "".join(self._answer)
        self.chars, self.tokens = len(answer), text_tokens(answer, self.model)
        self.events.append(self._event("done", reason=finish_reason or ""))

    def cancelled(self) -> None:
        self.events.append(self._event("cancelled", reason="the reader stopped the stream"))


class _Outcome:
    """What a stream's generator reports back. Kept apart from the stream object so the generator
    does not reference it: a ``for`` loop left early then drops the last reference and closes it."""

    def __init__(self) -> None:
        self.reply: Reply | None = None
        self.text = ""
        self.cancelled = False


class _StreamedTurn:
    """One streamed turn, as both drivers run it: its flow and what the reader was shown."""

    def __init__(self, session: StreamHost, messages: list[Message], max_rounds: int, out: _Outcome) -> None:
        state = session._state
        self.session = session
        self.out = out
        self.ctx = session._context()
        self.tap = StreamTap(session.events, session.session_id, state.turn, session.model)
        self.flow = turn_flow(self.ctx, messages, stream=True, max_rounds=max_rounds)

    def advance(self, value: Any) -> Any:
        """The flow's next effect, or None when the turn ended (``out.reply`` is then set)."""
        try:
            return self.flow.send(value)
        except StopIteration as stop:
            self.out.reply = stop.value  # the flow's last note published "done"
            return None

    def relay(self, text: str) -> str:
        """``text`` goes to the reader now: publish it first, then hand it over."""
        self.tap.delta(text)
        self.out.text += text
        return text

    def shown(self, effect: Any, value: Any) -> list[str]:
        """Text the reader must see after a non-streamed effect: a note's line, a probe's answer."""
        if isinstance(effect, StreamNote):
            texts = self.tap.note(effect)
            self.out.text += "".join(texts)
            return texts
        if isinstance(effect, CallModel) and isinstance(value, ModelReply) and value.content:
            return [self.relay(value.content)]  # re-sent unstreamed after an empty stream
        return []

    def stopped(self, exc: BaseException) -> None:
        """Something escaped the driver. The flow has already rolled the turn back (a turn is a
        transaction: ``Session._closing`` hands the exception to the flow, which restores the history
        as it was before the turn). The reader stopping - the iterator closed, the task cancelled,
        Ctrl-C - is also a ``cancelled`` stream event."""
        if isinstance(exc, GeneratorExit | KeyboardInterrupt | asyncio.CancelledError):
            self.out.cancelled = True
            self.tap.cancelled()


class _StreamBase:
    def __init__(self, session: StreamHost, messages: list[Message], max_rounds: int) -> None:
        self._session = session
        self._messages = messages
        self._max_rounds = max_rounds
        self._outcome = _Outcome()

    @property
    def reply(self) -> Reply | None:
        """The turn's ``Reply`` once the stream ended (None before, or when it was cancelled)."""
        return self._outcome.reply

    @property
    def text(self) -> str:
        """Everything yielded so far."""
        return self._outcome.text

    @property
    def cancelled(self) -> bool:
        return self._outcome.cancelled


class ReplyStream(_StreamBase):
    """Iterator of text deltas for one streamed turn; ``reply`` is set when it ends.

    ``for delta in stream`` (or ``next(stream)``). Leaving a ``for`` loop early, or ``close()``,
    cancels the turn: the provider stream is closed and the history is as before the turn.
    """

    def __init__(self, session: StreamHost, messages: list[Message], max_rounds: int) -> None:
        super().__init__(session, messages, max_rounds)
        self._deltas: Generator[str, None, None] | None = None

    def _generator(self) -> Generator[str, None, None]:
        if self._deltas is None:
            self._deltas = _run(self._session, self._messages, self._max_rounds, self._outcome)
        return self._deltas

    def __iter__(self) -> Iterator[str]:
        return _until_left(self._generator())

    def __next__(self) -> str:
        return next(self._generator())

    def close(self) -> None:
        """Stop reading: closes the provider stream and undoes the turn (nothing happens if it ended)."""
        if self._deltas is not None:
            self._deltas.close()


class AsyncReplyStream(_StreamBase):
    """Async iterator of text deltas for one streamed turn (``Session.astream``).

    A true async iterator over ``litellm.acompletion(stream=True)``: the event loop is never
    blocked, so many sessions can stream concurrently in one loop. Cancelling the task that
    iterates it, or ``await stream.aclose()``, cancels the turn; leaving an ``async for`` early
    does too, as soon as the event loop finalizes the abandoned iterator.
    """

    def __init__(self, session: StreamHost, messages: list[Message], max_rounds: int) -> None:
        super().__init__(session, messages, max_rounds)
        self._deltas: AsyncGenerator[str, None] | None = None

    def _generator(self) -> AsyncGenerator[str, None]:
        if self._deltas is None:
            self._deltas = _arun(self._session, self._messages, self._max_rounds, self._outcome)
        return self._deltas

    def __aiter__(self) -> AsyncIterator[str]:
        return _auntil_left(self._generator())

    async def __anext__(self) -> str:
        return await self._generator().__anext__()

    async def aclose(self) -> None:
        if self._deltas is not None:
            await self._deltas.aclose()


def _until_left(deltas: Generator[str, None, None]) -> Generator[str, None, None]:
    """The iterator a ``for`` loop holds: when the loop drops it early, the turn is cancelled."""
    try:
        yield from deltas
    finally:
        deltas.close()


async def _auntil_left(deltas: AsyncGenerator[str, None]) -> AsyncGenerator[str, None]:
    try:
        async for delta in deltas:
            yield delta
    finally:
        await deltas.aclose()


def _run(session: StreamHost, messages: list[Message], max_rounds: int, out: _Outcome) -> Generator[str, None, None]:
    """The synchronous streaming driver."""
    runner = session._runner
    with session._lock, session._turn("stream"):
        turn = _StreamedTurn(session, messages, max_rounds, out)
        value: Any = None
        try:
            with session._closing(turn.flow):
                while (effect := turn.advance(value)) is not None:
                    if isinstance(effect, CallModel) and effect.stream:
                        deltas = runner.stream_model(effect)
                        try:
                            while True:  # not `yield from`: each delta is relayed (event, text) first
                                try:
                                    delta = next(deltas)
                                except StopIteration as stop:
                                    value = stop.value
                                    break
                                yield turn.relay(delta)
                        finally:
                            deltas.close()  # the reader stopped: hang up on the provider first
                        continue
                    value = runner.call_model(effect) if isinstance(effect, CallModel) else runner.run_one(effect)
                    yield from turn.shown(effect, value)
        except BaseException as exc:
            turn.stopped(exc)
            raise


async def _arun(session: StreamHost, messages: list[Message], max_rounds: int, out: _Outcome) -> AsyncGenerator[str, None]:
    """The asynchronous streaming driver: ``_run``'s steps, awaiting instead of blocking."""
    runner = session._runner
    async with session._async_lock():  # turns of one session run one at a time, like asend
        with session._lock, session._turn("astream"):
            turn = _StreamedTurn(session, messages, max_rounds, out)
            value: Any = None
            try:
                with session._closing(turn.flow):
                    while (effect := turn.advance(value)) is not None:
                        if isinstance(effect, CallModel) and effect.stream:
                            deltas = runner.astream_model(effect)
                            try:
                                async for item in deltas:
                                    if isinstance(item, str):
                                        yield turn.relay(item)
                                    else:
                                        value = item  # the outcome comes last
                            finally:
                                await deltas.aclose()
                            continue
                        if isinstance(effect, CallModel):
                            value = await runner.acall_model(effect)
                        else:
                            value = await runner.arun_one(effect)
                        for text in turn.shown(effect, value):
                            yield text
            except BaseException as exc:
                turn.stopped(exc)
                raise
