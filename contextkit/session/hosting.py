"""``Session`` as the core of a host that owns the loop: ``begin`` and ``begin_from`` (mixed into ``Session``).

The host keeps its own history and makes the model calls; the session keeps the managed copy
(compacted, archived, measured) and decides, through a ``HostTurn`` (``contextkit.engine.host``),
what to send and what a failure means. ``begin(new_messages)`` takes what is new this turn;
``begin_from(history)`` takes the host's whole history, as clients resend it on every call, and
works out what is new from the messages it has already seen (their fingerprints): a history that
does not extend them (the host rewrote it) replaces the managed one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from contextkit.engine.flow import turn_flow
from contextkit.engine.host import Decision, HostTurn, fingerprint
from contextkit.errors import InvalidMessageError, UsageError
from contextkit.limits.context import emit_history
from contextkit.messages import Message, from_wire
from contextkit.sizing import body_params

__all__ = ["HostingMixin", "tool_name"]


def tool_name(schema: Mapping[str, Any]) -> str:
    function = schema.get("function")
    return str(function.get("name", "")) if isinstance(function, Mapping) else str(schema.get("name", ""))


class HostingMixin:
    """The host-driven turn of ``Session``; the session's own attributes are typed as ``Any``."""

    _state: Any
    _lock: Any
    _busy: bool
    _closed: bool
    _runner: Any
    _litellm_kwargs: dict[str, Any]

    def _context(self) -> Any: ...  # Session's

    def _notify(self, code: str, text: str, level: str) -> None: ...  # Session's

    def begin(
        self,
        new_messages: Sequence[Any],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        params: Mapping[str, Any] | None = None,
        max_rounds: int = 50,
    ) -> HostTurn:
        """Start a turn whose model calls the host makes: ``decision = turn.start()``, send
        ``decision.request``, ``turn.feed(reply_or_exception)`` until ``decision.finished``.

        ``tools``: the host's tool schemas (OpenAI format) for this turn; ``recall`` is added once the
        archive holds content and is served in-process. A reply calling the host's tools ends the turn
        (``reply.tool_calls_made``). ``params``: the host's request parameters (measured into the bytes).
        """
        messages = _messages(new_messages)
        return self._host_turn(messages, tools, params, max_rounds, self.host_seen)

    def begin_from(
        self,
        history: Sequence[Any],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        params: Mapping[str, Any] | None = None,
        max_rounds: int = 50,
    ) -> HostTurn:
        """``begin`` for a host that sends its whole history every time: the messages after those the
        session has seen are this turn's. A history that does not start with them replaces the managed
        history (a ``history_replaced`` notice)."""
        messages = _messages(history)
        prints = [fingerprint(m) for m in messages]
        seen = self.host_seen
        with self._lock:
            if prints[: len(seen)] == seen and len(prints) > len(seen):
                new = messages[len(seen) :]
            else:
                new = self._adopt(messages)
        return self._host_turn(new, tools, params, max_rounds, self.host_seen)

    @property
    def host_seen(self) -> list[str]:
        """Fingerprints of the host messages the managed history stands for (``begin_from``)."""
        return list(getattr(self, "_host_seen", []))

    def _adopt(self, messages: list[Message]) -> list[Message]:
        """The host's history does not extend the one it sent before: start over from it (the archive,
        the evidence and the learned limits stay). Returns the messages to send as this turn's."""
        st = self._state
        keep = [m for m in st.history[:1] if m.role == "system" and not any(x.role == "system" for x in messages)]
        if st.history[len(keep) :]:
            self._notify(
                "history_replaced",
                "the host's history does not extend the one it sent before - the managed history starts over from it",
                "info",
            )
        st.history = keep
        self._host_seen: list[str] = []
        # the turn starts at the newest user message: what comes before it is context, not this turn's
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=0)
        if last_user:
            st.history = [*keep, *messages[:last_user]]
            self._host_seen = [fingerprint(m) for m in messages[:last_user]]
            emit_history(self._context(), "load")
        return messages[last_user:]

    def _host_turn(
        self,
        messages: list[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        params: Mapping[str, Any] | None,
        max_rounds: int,
        seen_before: list[str],
    ) -> HostTurn:
        with self._lock:
            if self._closed:
                raise UsageError("begin() called on a closed session; open a new Session")
            if self._busy:
                raise UsageError(
                    "begin() called while this session is running a turn; finish it (feed its answers until "
                    "decision.finished) or close() the HostTurn first"
                )
            ctx = self._context()
            if tools is not None:
                recall = [t for t in ctx.tools if tool_name(t) == "recall"]
                ctx.tools = [*copy.deepcopy([dict(t) for t in tools if tool_name(t) != "recall"]), *recall]
            if params is not None:
                ctx.params = body_params({**self._litellm_kwargs, **params})
            self._busy = True
            try:
                flow = turn_flow(ctx, messages, max_rounds=max_rounds, hand_back_tools=True)
            except BaseException:
                self._busy = False
                raise

        def on_end(decision: Decision) -> None:
            with self._lock:
                self._busy = False
                if decision.action == "done" and decision.reply is not None:
                    reply = decision.reply
                    answer = Message.assistant(reply.text, reply.tool_calls_made)
                    self._host_seen = [*seen_before, *(fingerprint(m) for m in messages), fingerprint(answer)]

        return HostTurn(flow, run_effect=self._runner.run_one, arun_effect=self._runner.arun_one, on_end=on_end)


def _messages(raw: Sequence[Any]) -> list[Message]:
    if isinstance(raw, str | bytes | Mapping | Message) or not isinstance(raw, Sequence):
        raise InvalidMessageError(
            f"expected a list of messages (dicts like {{'role': 'user', 'content': '...'}} or Message), got "
            f"{type(raw).__name__}"
        )
    return [from_wire(m, index=i) for i, m in enumerate(raw)]
