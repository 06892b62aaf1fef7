"""Shared plumbing: a view follows a session's ``EventLog`` and applies events under one lock.

Events may arrive on any thread (a background ``send``, an asyncio task, the kernel thread
running a widget callback). Every state change of a view — replayed events, live events and
user actions such as a search — runs under the view's ``RLock``, so the view's rows and traits
never interleave. Setting widget traits from a non-kernel thread is supported by ipywidgets.

Replay happens while the lock is held: an event appended concurrently during the replay waits
and is applied after the past events, in order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from contextkit.errors import UsageError
from contextkit.events import Event, EventLog


def events_of(session: object, *, panel: str) -> EventLog:
    """The session's event log, or a clear error saying what the panel needs."""
    events = getattr(session, "events", None)
    if not isinstance(events, EventLog):
        raise UsageError(
            f"{panel} needs a contextkit Session (an object with an `events` EventLog); got "
            f"{type(session).__name__}. Create one with contextkit.Session(...) and pass it in."
        )
    return events


class EventFeed:
    """Calls ``apply(event)`` for past and future events of ``events``, serialised by ``lock``."""

    def __init__(self, events: EventLog, apply: Callable[[Event], None], *, lock: threading.RLock | None = None):
        self.events = events
        self.lock = lock or threading.RLock()
        self.last_error: str | None = None  # the log swallows subscriber errors; keep the last one visible
        self.applied = 0
        self.replaying = False
        self._apply = apply
        self._unsubscribe: Callable[[], None] | None = None
        self._closed = False

    def start(self) -> None:
        """Subscribe and replay the past; views skip rendering while ``replaying`` (render once after)."""
        with self.lock:
            if self._unsubscribe is None:
                self.replaying = True
                try:
                    self._unsubscribe = self.events.subscribe(self._on_event, replay=True)
                finally:
                    self.replaying = False

    def _on_event(self, event: Event) -> None:
        with self.lock:
            if self._closed:
                return
            try:
                self._apply(event)
                self.applied += 1
            except Exception as exc:  # noqa: BLE001 - a view must never break the session
                self.last_error = f"{type(event).__name__} #{event.seq}: {type(exc).__name__}: {exc}"

    def close(self) -> None:
        with self.lock:
            self._closed = True
            if self._unsubscribe is not None:
                self._unsubscribe()
                self._unsubscribe = None


def call_quietly(func: Callable[[], Any], default: Any = None) -> Any:
    """Read something from the session for display; a failing read shows as ``default``."""
    try:
        return func()
    except Exception:  # noqa: BLE001 - display code never raises into the caller
        return default


def close_view(widget: Any) -> None:
    """Stop a panel's feed and close its descendants (``Box.close`` closes only its own comm).

    Safe on a half-built panel: ipywidgets calls ``close`` from ``__del__`` even when
    ``__init__`` raised.
    """
    feed = widget.__dict__.get("_feed")
    if isinstance(feed, EventFeed):
        feed.close()
    for child in tuple(getattr(widget, "children", ()) or ()):
        close_view(child)
        child.close()


class FeedView:
    """Mixin for panels that follow an ``EventFeed``: the last view error, and a ``close`` that
    stops the feed and closes the children. List it before the ipywidgets base class."""

    _feed: EventFeed

    @property
    def last_error(self) -> str | None:
        return self._feed.last_error

    def close(self) -> None:
        close_view(self)
        super().close()  # type: ignore[misc]
