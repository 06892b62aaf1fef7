"""What a user does to a ``Session``'s history between turns (mixed into ``Session``): compact it by
hand, rewind the last compaction, forget the limits failures taught."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from contextkit.errors import UsageError
from contextkit.limits.context import FlowContext, emit_history, measure
from contextkit.limits.learning import reset_limits
from contextkit.limits.preflight import run_compaction
from contextkit.limits.state import SessionState
from contextkit.messages import Message

if TYPE_CHECKING:
    import threading

    from contextkit.compaction.compactor import Compactor
    from contextkit.engine.driver import EffectRunner


class SessionControls:
    """Manual compaction, rewind and ``reset_limits`` of a ``Session`` (run under its lock, one at a time)."""

    compactor: Compactor
    _state: SessionState
    _lock: threading.RLock
    _runner: EffectRunner

    if TYPE_CHECKING:  # provided by Session

        def _turn(self, what: str) -> AbstractContextManager[None]: ...

        @staticmethod
        def _closing(flow: Any) -> AbstractContextManager[None]: ...

        def _context(self) -> FlowContext: ...

    def compact(self, instruction: str | None = None) -> Any:
        """Manual compaction (trigger ``manual``), optionally guided by an instruction.

        The older messages are summarized (following ``instruction``) and the recent ones kept; on a
        short history the newest exchange is kept and everything before it summarized. Ctrl-C or task
        cancellation leaves the history untouched (a "cancelled" compaction event says so).
        """
        with self._lock, self._turn("compact"):
            ctx = self._context()
            current = measure(ctx, self._state.history).bytes
            flow = run_compaction(ctx, trigger="manual", budget=max(1, current // 2), instruction=instruction)
            with self._closing(flow):
                result = self._runner.drive(flow)
            if result.changed:
                self._state.history = list(result.history)
                emit_history(ctx, "compaction")
            return result

    def rewind(self) -> bool:
        """Undo the last applied compaction, keeping every turn made since.

        The pre-compaction history comes back with the messages added after that compaction on
        top. When the history was rewritten since in a way that cannot be lined up with it (a
        later recovery truncated it), nothing changes and ``UsageError`` says why - turns are
        never silently dropped. Returns False when there is no compaction to undo.
        """
        with self._lock, self._turn("rewind"):
            entry = self.compactor.peek_undo_entry()
            if entry is None:
                return False
            before, after = entry
            current = self._state.history
            if after is None:  # an entry from an older compactor: only exact states can be undone
                after = current
            if not _extends(current, after):
                raise UsageError(
                    f"cannot rewind: the history was rewritten after that compaction ({len(after)} messages then, "
                    f"{len(current)} now, and they no longer line up), so rewinding would lose turns made since. "
                    "Start a new session from session.history, or add_messages() the parts you need."
                )
            self.compactor.pop_undo_entry()
            self._state.history = [*before, *current[len(after) :]]
            emit_history(self._context(), "rewind")
            return True

    def reset_limits(self) -> None:
        """Forget what failures taught this session: the payload cap goes back to the configured one
        (or none), the window to the configured or model value, tool-result budgets to the configured
        ones, and the size evidence is cleared (a body once rejected may be sent again). Each change
        is a ``LimitEvent``."""
        with self._lock, self._turn("reset_limits"):
            reset_limits(self._context())


def _extends(current: Sequence[Message], after: Sequence[Message]) -> bool:
    """``current`` is ``after`` plus messages appended since, allowing in-place rewrites of the
    old ones that keep their shape (microcompact, budgets: archived, so nothing is lost by
    putting the pre-compaction originals back)."""
    if len(current) < len(after):
        return False
    return all(
        c is a or (c.role == a.role and c.tool_call_id == a.tool_call_id and len(c.tool_calls) == len(a.tool_calls))
        for c, a in zip(current, after, strict=False)
    )
