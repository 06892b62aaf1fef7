"""The turn flow for hosts that own the loop: the host makes the model calls, contextkit decides.

A host (a LangChain middleware, ``contextkit.completion``, the proxy, your own agent loop) asks a
``HostTurn`` for the request to send, sends it however it likes, and feeds back what the provider
answered or raised; the turn answers with a ``Decision``:

* ``send``     - send ``decision.request`` (the first request of the turn)
* ``retry``    - wait ``decision.delay`` seconds, then send ``decision.request`` (the same body again)
* ``recover``  - send ``decision.request`` instead (compacted after a size failure: a learned cap, a
  recovery level)
* ``continue`` - the answer was cut at ``max_tokens``: send ``decision.request`` to continue it
* ``done``     - the turn ended: ``decision.reply`` (``reply.tool_calls_made`` when the model called
  the host's tools; the host runs them and starts the next turn with their results)
* ``fail``     - the turn failed: ``decision.error`` (the history is as it was before the turn)

It is the same ``turn_flow`` a ``Session`` drives, so the evidence, the archive and the events are the
same; only the model call is the host's. Summaries and ``recall`` run in-process (``run_effect``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any

from contextkit.compaction.summarizer import SummaryRequest
from contextkit.engine.effects import CallModel, ModelFailure, ModelReply, Reply, RunTools, Sleep, StreamNote
from contextkit.errors import UsageError
from contextkit.messages import Message

__all__ = ["ACTIONS", "Decision", "HostTurn", "fingerprint"]

ACTIONS = ("send", "retry", "recover", "continue", "done", "fail")


@dataclass(frozen=True)
class Decision:
    """What the host does next (see the module docstring for each ``action``)."""

    action: str
    request: CallModel | None = None
    delay: float = 0.0
    reply: Reply | None = None
    error: BaseException | None = None

    @property
    def finished(self) -> bool:
        return self.action in ("done", "fail")


class HostTurn:
    """One turn of a session whose model calls the host makes (``Session.begin`` builds it)."""

    def __init__(
        self,
        flow: Any,
        *,
        run_effect: Callable[[Any], Any],
        arun_effect: Callable[[Any], Awaitable[Any]] | None = None,
        on_end: Callable[[Decision], None] | None = None,
    ) -> None:
        self._flow = flow
        self._run = run_effect
        self._arun = arun_effect
        self._on_end = on_end
        self._started = False
        self._pending: CallModel | None = None  # the request the host was told to send
        self.decision: Decision | None = None

    # the host's side -------------------------------------------------------------------------------
    def start(self) -> Decision:
        """The first request to send."""
        self._check_start()
        return self._advance(None, "send")

    async def astart(self) -> Decision:
        self._check_start()
        return await self._aadvance(None, "send")

    def feed(self, outcome: ModelReply | ModelFailure | BaseException) -> Decision:
        """What the provider answered (a ``ModelReply``) or raised (the exception, or a ``ModelFailure``)."""
        value, after = self._outcome(outcome)
        return self._advance(value, after)

    async def afeed(self, outcome: ModelReply | ModelFailure | BaseException) -> Decision:
        value, after = self._outcome(outcome)
        return await self._aadvance(value, after)

    def close(self) -> None:
        """Abandon the turn (the client went away): the history goes back to what it was before it."""
        if self.decision is not None and self.decision.finished:
            return
        try:
            self._flow.throw(GeneratorExit())
        except BaseException:  # noqa: BLE001 - the flow re-raises after its rollback: nothing else to do
            pass
        finally:
            self._flow.close()
        self._end(Decision("fail", error=UsageError("the turn was abandoned by its host")))

    @property
    def request(self) -> CallModel | None:
        """The request the host was last told to send (None once the turn ended)."""
        return self._pending

    # internals -------------------------------------------------------------------------------------
    def _check_start(self) -> None:
        if self._started:
            raise UsageError("HostTurn.start() called twice; feed() the provider's answer to the request it gave")
        self._started = True

    def _outcome(self, outcome: Any) -> tuple[Any, str]:
        if self._pending is None:
            raise UsageError("HostTurn.feed() without a request in flight; call start() first (once per turn)")
        if isinstance(outcome, BaseException):
            outcome = ModelFailure(outcome)
        if isinstance(outcome, ModelFailure):
            try:  # classify_failure reports the rejected size from it
                outcome.error.request_bytes = self._pending.bytes  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - some exception types forbid new attributes
                pass
            return outcome, "recover"
        if not isinstance(outcome, ModelReply):
            raise UsageError(
                f"HostTurn.feed() takes a ModelReply, a ModelFailure or the exception the provider raised, got "
                f"{type(outcome).__name__}; convert a litellm response with contextkit.engine.driver.parse_reply"
            )
        return outcome, "continue"

    def _advance(self, value: Any, after: str) -> Decision:
        decision = next(self._steps(value, after, run_here=True))
        assert isinstance(decision, Decision)  # run_here: the steps yield only the decision
        return decision

    async def _aadvance(self, value: Any, after: str) -> Decision:
        arun = self._arun
        steps = self._steps(value, after, run_here=arun is None)
        step = next(steps)
        while not isinstance(step, Decision):
            assert arun is not None  # with run_here the steps yield only the decision
            try:
                result = await arun(step)
            except Exception as exc:  # noqa: BLE001 - thrown in where the effect was asked for: the turn fails with it
                step = steps.throw(exc)
            else:
                step = steps.send(result)
        return step

    def _steps(self, value: Any, after: str, *, run_here: bool) -> Generator[Decision | SummaryRequest | RunTools, Any, None]:
        """Drive the flow to its next model call or to its end; the last thing yielded is that ``Decision``.

        The summaries and tool rounds the flow asks for on the way run here (``run_here``: the sync
        host) or are yielded to the caller, which sends their result back in or throws their error in
        (the async host: one loop for both, whether the effect is awaited or not).
        """
        delay = 0.0
        try:
            while True:
                effect = self._flow.send(value)
                if isinstance(effect, CallModel):
                    decision = self._ask(effect, after, delay)
                    break
                if isinstance(effect, Sleep):
                    delay += effect.seconds
                    after, value = "retry", None
                elif isinstance(effect, StreamNote):
                    value = None
                elif isinstance(effect, SummaryRequest | RunTools):
                    value = self._run(effect) if run_here else (yield effect)
                else:
                    raise TypeError(f"unknown effect {effect!r}")  # a new effect type without a host is a bug
        except StopIteration as stop:
            decision = self._end(Decision("done", reply=stop.value))
        except Exception as exc:  # noqa: BLE001 - the flow rolled the turn back; the host decides what to raise
            decision = self._end(Decision("fail", error=exc))
        yield decision

    def _ask(self, effect: CallModel, after: str, delay: float) -> Decision:
        self._pending = effect
        self.decision = Decision(after, request=effect, delay=delay)
        return self.decision

    def _end(self, decision: Decision) -> Decision:
        self._pending = None
        self.decision = decision
        if self._on_end is not None:
            on_end, self._on_end = self._on_end, None
            on_end(decision)
        return decision


def fingerprint(message: Message) -> str:
    """What identifies a message a host sends again in its next request: role, text, tool-call ids
    and names, the call a tool result answers. Not the arguments' spacing nor metadata, which hosts
    re-serialise their own way."""
    calls = [[c.id, c.name] for c in message.tool_calls]
    key = [message.role, message.content.strip(), calls, message.tool_call_id or ""]
    return hashlib.sha256(json.dumps(key, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()[:32]
