"""For hosts that can only rewrite the model's input (the OpenAI Agents SDK's ``call_model_input_filter``,
pydantic-ai's history processors): ``InputRewriter.rewrite(history)`` returns the messages to send.

Each rewrite starts a host-driven turn (``Session.begin_from``) and takes its first request:
compacted, measured, within the limits in force. The host then makes the call where contextkit
cannot see it; the next rewrite reads its outcome from the history it is given: when that history
continues the last one with the model's answer, the answer is fed to the open turn (the body was
accepted: evidence, the reply kept in the managed history); anything else (the host retried the same
input after a failure, or rewrote its history) closes the open turn unanswered. Hosts that keep
the rewritten messages as their history (pydantic-ai does) continue from what was returned; that is
recognised too.

What such a host cannot get from contextkit: the classification of a failed call, its retry and its
recovery happen in the host's own code (the call raises there); use the proxy or the litellm drop-in
in front of the host's model client for that.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from contextkit.engine.effects import ModelReply
from contextkit.engine.host import HostTurn, fingerprint
from contextkit.errors import ConfigError
from contextkit.messages import Message, ToolCall, from_wire
from contextkit.session.core import Session

__all__ = ["InputRewriter", "adapter_session"]


class InputRewriter:
    """``rewriter = InputRewriter(session)``; ``rewriter.rewrite(chat_messages, tools=...)`` → the chat
    messages (OpenAI format) to send instead."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._turn: HostTurn | None = None
        self._sent: list[str] = []  # fingerprints of the history the open turn's request was made from
        self._returned: list[str] = []  # and of the messages returned for it
        self._lock = threading.Lock()

    def rewrite(self, history: Sequence[Any], *, tools: Sequence[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
        messages = [from_wire(m, index=i) for i, m in enumerate(history)]
        prints = [fingerprint(m) for m in messages]
        with self._lock:
            self._settle(messages, prints)
            turn = self.session.begin_from(messages, tools=tools)
            decision = turn.start()
            if decision.action == "fail":
                assert decision.error is not None
                raise decision.error
            assert decision.request is not None
            out = [dict(m) for m in decision.request.messages]
            self._turn, self._sent = turn, prints
            self._returned = [fingerprint(from_wire(m, index=i)) for i, m in enumerate(out)]
            return out

    def close(self) -> None:
        """Close the open turn, if any, unanswered."""
        with self._lock:
            if self._turn is not None:
                self._turn.close()
                self._turn = None

    def _settle(self, messages: list[Message], prints: list[str]) -> None:
        """Feed the open turn the answer the host's history now shows, or close it."""
        turn, self._turn = self._turn, None
        if turn is None:
            return
        kept = None
        for before in (self._sent, self._returned):
            n = len(before)
            if len(messages) > n and prints[:n] == before and messages[n].role == "assistant":
                kept = before
                break
        if kept is None:
            turn.close()
            return
        answer = messages[len(kept)]
        calls = tuple(ToolCall(id=c.id, name=c.name, arguments=_compact_json(c.arguments)) for c in answer.tool_calls)
        decision = turn.feed(ModelReply(answer.content, calls, finish_reason="tool_calls" if calls else "stop"))
        if not decision.finished:  # the turn wants another call (an @recall in the answer): the host moved on
            turn.close()
        elif decision.action == "done" and kept is self._returned and decision.reply is not None:
            # the host's history is now the rewritten one: it is what the managed history stands for
            reply = decision.reply
            self.session._host_seen = [*kept, fingerprint(Message.assistant(reply.text, reply.tool_calls_made))]


def _compact_json(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), ensure_ascii=False)
    except ValueError:
        return arguments


# shared by the adapters built on InputRewriter (openai_agents.py, pydantic_ai.py) ------------------
def adapter_session(adapter: str, model: str | None, session: Session | None, options: dict[str, Any]) -> Session:
    """The session an adapter rewrites for: ``session`` as given, else a new one for ``model`` with
    ``options`` (the status line on unless they say otherwise)."""
    if session is not None:
        return session
    if model is None:
        raise ConfigError(f"{adapter} needs the litellm model string (e.g. 'openai/gpt-4o-mini') or session=")
    options.setdefault("status", True)
    return Session(model, **options)

