"""A dict-backed ``ArchiveSink`` for tests and notebooks (no SQLite, no IO)."""

from __future__ import annotations

from contextkit.markers import has_marker, key_for


class MemorySink:
    """Implements the ``ArchiveSink`` protocol: content-addressed, refuses marked content unless allowed."""

    def __init__(self) -> None:
        self.entries: dict[str, str] = {}
        self.kinds: dict[str, str] = {}
        self.puts = 0

    def put(
        self,
        content: str,
        *,
        kind: str = "message",
        origin: str | dict[str, object] | None = None,
        allow_markers: bool = False,
    ) -> str | None:
        if has_marker(content) and not allow_markers:
            return None
        self.puts += 1
        key = key_for(content)
        self.entries.setdefault(key, content)
        self.kinds.setdefault(key, kind)
        return key

    def get(self, key: str) -> str | None:
        return self.entries.get(key)

    def __len__(self) -> int:
        return len(self.entries)
