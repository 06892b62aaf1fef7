"""The lifecycle both archive backends share (``SqliteStore``, ``PostgresStore``): one store - one
connection - per database per process, handed to every ``Archive`` of that database, with its users
and the live scopes of the open views counted, and closed with its last user.

Users and live scopes are counted under the class lock, never while holding ``self.lock`` (the
connection's): one lock order, so opening and closing in many threads cannot deadlock. Each backend
keeps its own registry (``_shared``) and class lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar, Self

from contextkit.errors import ArchiveError

__all__ = ["SharedStore"]


class SharedStore:
    _shared: ClassVar[dict[tuple[int, str], Any]]
    # re-entrant: an Archive dropped without close() is released by a weakref finalizer, which the
    # garbage collector may run in this very thread while it holds the lock (inside shared(), say)
    _shared_lock: ClassVar[threading.RLock]
    conn: Any
    label: str
    lock: threading.RLock
    users: int
    live: dict[str, int]  # scopes of the open Archive views (retention never removes them)
    _key: tuple[int, str] | None

    @classmethod
    def _share(cls, key: tuple[int, str], open_store: Callable[[], Self]) -> Self:
        """The process's store under ``key``, opened with ``open_store()`` if none is open; one user more."""
        with cls._shared_lock:
            store = cls._shared.get(key)
            if store is None or store.conn is None:
                store = open_store()
                store._key = key
                cls._shared[key] = store
            store.users += 1
            return store  # type: ignore[no-any-return]

    def add_user(self) -> None:
        with self._shared_lock:
            if self.conn is None:
                raise ArchiveError(f"the archive at {self.label} is closed; open a new Archive to make a view")
            self.users += 1

    def acquire(self, scope: str) -> None:
        with self._shared_lock:
            self.live[scope] = self.live.get(scope, 0) + 1

    def live_scopes(self) -> set[str]:
        with self._shared_lock:
            return set(self.live)

    def release(self, scope: str | None, *, user: bool = True) -> None:
        with self._shared_lock:
            if scope is not None:
                left = self.live.get(scope, 0) - 1
                if left > 0:
                    self.live[scope] = left
                else:
                    self.live.pop(scope, None)
            if not user:
                return
            self.users -= 1
            if self.users > 0:
                return
            if self._key is not None and self._shared.get(self._key) is self:
                del self._shared[self._key]
        self.close()

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None
