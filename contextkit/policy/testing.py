"""Dict-backed ``ArchiveSink``s (no SQLite, no IO): ``MemorySink`` for tests and notebooks, and
``StagedSink``, which stages archive writes in memory in front of a real archive (a rewrite that is
not applied, or the floor's dry run, archives nothing)."""

from __future__ import annotations

from collections.abc import Sequence

from contextkit.markers import ArchiveSink, extract_keys, has_marker, key_for
from contextkit.messages import Message


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


class StagedSink(MemorySink):
    """A ``MemorySink`` in front of ``archive``: puts stay in memory (same keys, same refusal of
    marked content) until ``commit``; ``get`` sees staged content first, then the archive, so derived
    stubs resolve as usual. Never committed, it is a dry archive that stores nothing."""

    def __init__(self, archive: ArchiveSink) -> None:
        super().__init__()
        self.archive = archive
        self._meta: dict[str, tuple[str, str | dict[str, object] | None, bool]] = {}

    @property
    def staged(self) -> dict[str, str]:
        return self.entries

    def put(
        self,
        content: str,
        *,
        kind: str = "message",
        origin: str | dict[str, object] | None = None,
        allow_markers: bool = False,
    ) -> str | None:
        key = super().put(content, kind=kind, origin=origin, allow_markers=allow_markers)
        if key is not None:
            self._meta.setdefault(key, (kind, origin, allow_markers))
        return key

    def get(self, key: str) -> str | None:
        staged = super().get(key)
        return staged if staged is not None else self.archive.get(key)

    def commit(self, cited: Sequence[Message]) -> bool:
        """Archive every staged original a message of ``cited`` points at (in its content or its calls'
        arguments: an excerpt of bulky arguments cites its original there); False if the archive
        refused one."""
        keys = {k for m in cited for k in extract_keys(m.content)}
        keys |= {k for m in cited for c in m.tool_calls for k in extract_keys(c.arguments)}
        for key, content in self.staged.items():
            kind, origin, allow = self._meta[key]
            if key in keys and self.archive.put(content, kind=kind, origin=origin, allow_markers=allow) != key:
                return False
        return True
