"""``StreamGate``: the simulator holds streamed replies open after their first text chunk.

A test arms a gate (``gw.hold_streams()``), reads the first delta on the client side while the
server is provably still holding the rest, then calls ``release()``. This measures "the first delta
reaches the caller while the provider is still sending" by ordering, never by wall-clock time. The
gate also records whether the client hung up before the rest was sent (a cancelled stream must
close its connection).
"""

from __future__ import annotations

import select
import socket
import threading


class StreamGate:
    """Holds every streamed turn reply after ``after_chunks`` SSE frames until ``release()``.

    ``after_chunks=None`` holds right after the first text delta (2 frames on the OpenAI route:
    the role frame and the first text piece; 3 on the Anthropic route). ``timeout`` is only a safety
    net so a broken client cannot hang the server forever; a reply it lets go counts in
    ``timed_out`` so a test can tell.
    """

    def __init__(self, *, after_chunks: int | None = None, timeout: float = 60.0) -> None:
        self.after_chunks = after_chunks
        self.timeout = timeout
        self._cond = threading.Condition()
        self._released = False
        self.held = 0  # replies held back by this gate
        self.waiting = 0  # replies whose rest is held back right now (counted before their head is sent)
        self.finished = 0  # replies whose handler is done (sent everything, or found the client gone)
        self.peer_closed = 0  # replies whose client hung up before the rest was sent
        self.timed_out = 0  # replies let go by the safety timeout instead of release()

    @property
    def released(self) -> bool:
        with self._cond:
            return self._released

    def release(self) -> None:
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def wait_held(self, n: int = 1, timeout: float | None = None) -> bool:
        """Block (a test thread) until ``n`` replies are holding; False if the timeout passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self.waiting >= n, timeout if timeout is not None else self.timeout)

    def wait_finished(self, n: int = 1, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.finished >= n, timeout if timeout is not None else self.timeout)

    # server side -------------------------------------------------------------------------------
    def hold_at(self, anthropic: bool, frames: int) -> int:
        """The frame index after which a reply of ``frames`` frames holds."""
        at = self.after_chunks if self.after_chunks is not None else (3 if anthropic else 2)
        return max(1, min(at, frames - 1))

    def arrive(self) -> None:
        """A reply will hold: counted before any of it is sent, so a client that sees its first
        delta also sees ``waiting`` include it."""
        with self._cond:
            self.held += 1
            self.waiting += 1
            self._cond.notify_all()

    def hold(self) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._released, self.timeout):
                self.timed_out += 1
            self.waiting -= 1

    def finish(self, *, peer_closed: bool) -> None:
        with self._cond:
            self.finished += 1
            self.peer_closed += int(peer_closed)
            self._cond.notify_all()


def peer_gone(sock: socket.socket) -> bool:
    """True when the client closed its end (readable with nothing to read: EOF)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
