"""What the archive stores and hands out, shared by its backends: row types, encodings, origins.

Content is stored as UTF-8 bytes encoded with ``surrogatepass`` so *any* Python ``str`` (lone
surrogates, NUL, megabytes) round-trips byte-exact; the search index sees a valid-text copy.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextkit.settings import archive_path_from_env

if TYPE_CHECKING:
    from contextkit.messages import Origin

PREVIEW_CHARS = 120


@dataclass(frozen=True)
class ArchiveEntry:
    """One archived item as people see it (``archive.entries()``); read from metadata, never the content."""

    key: str
    session_id: str
    kind: str
    origin: str
    bytes: int
    turn: int | None
    created_at: float
    preview: str


@dataclass(frozen=True)
class SearchHit:
    """A ranked full-text match (lower ``score`` is better, as BM25 in SQLite)."""

    key: str
    kind: str
    origin: str
    score: float
    session_id: str = ""
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class ArchivedItem:
    """What an observer hears about a newly stored entry (no content)."""

    key: str
    kind: str
    bytes: int
    origin: str
    turn: int | None


@dataclass(frozen=True)
class ScopeInfo:
    """One session's share of an archive file (``archive.sessions()``), from metadata."""

    session_id: str
    entries: int
    bytes: int
    first_at: float
    last_at: float


@dataclass(frozen=True)
class PruneReport:
    """What ``Archive.prune`` removed (or, with ``dry_run``, would remove)."""

    scopes: tuple[str, ...] = ()
    entries: int = 0
    bytes: int = 0  # content bytes of the removed entries
    blobs: int = 0  # distinct contents no entry refers to any more, deleted
    workbench_files: int = 0
    reclaimed_bytes: int = 0  # how much the file shrank (VACUUM / incremental vacuum)
    dry_run: bool = False
    kept_live: tuple[str, ...] = ()  # scopes the rules chose but that are open or written recently

    def describe(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        text = f"{verb} {self.entries} entries ({self.bytes:,} B) of {len(self.scopes)} sessions"
        if self.reclaimed_bytes:
            text += f"; the file shrank by {self.reclaimed_bytes:,} B"
        if self.kept_live:
            text += f"; kept {len(self.kept_live)} sessions in use"
        return text


def default_archive_path(env: Mapping[str, str] | None = None) -> Path:
    """``CONTEXTKIT_ARCHIVE``, else ``$XDG_DATA_HOME/contextkit/archive.sqlite``, else ``~/.local/share/...``."""
    env = os.environ if env is None else env
    configured = archive_path_from_env(env)
    if configured:
        return Path(configured).expanduser()
    data_home = env.get("XDG_DATA_HOME", "").strip()
    base = Path(data_home).expanduser() if data_home else Path.home() / ".local" / "share"
    return base / "contextkit" / "archive.sqlite"


def encode_content(content: str) -> bytes:
    return content.encode("utf-8", "surrogatepass")


def decode_content(data: bytes) -> str:
    return bytes(data).decode("utf-8", "surrogatepass")


def searchable_text(data: bytes) -> str:
    """What the search index sees: valid text only (surrogates become U+FFFD, NUL a space)."""
    return bytes(data).decode("utf-8", "replace").replace("\x00", " ")


def origin_parts(origin: str | Mapping[str, Any] | Origin | None, turn: int | None) -> tuple[str | None, str]:
    """``(origin_json, human text)``; the text is one line so it fits ``Location:`` lines."""
    if origin is None:
        data: dict[str, Any] = {}
    elif isinstance(origin, str):
        data = {"text": origin}
    elif isinstance(origin, Mapping):
        data = dict(origin)
    elif is_dataclass(origin) and not isinstance(origin, type):  # messages.Origin
        data = {k: v for k, v in asdict(origin).items() if v is not None}
    else:
        data = {"text": str(origin)}
    if turn is not None and "turn" not in data:
        data["turn"] = turn
    if "text" in data:
        text = str(data["text"])
    else:
        parts = [str(data[name]) for name in ("role", "tool") if data.get(name)]
        if data.get("path"):
            where = str(data["path"])
            start, end = data.get("line_start", data.get("start")), data.get("line_end", data.get("end"))
            if start is not None:
                where += f":{start}-{end if end is not None else ''}"
            parts.append(where)
        if data.get("turn") is not None:
            parts.append(f"turn {data['turn']}")
        text = " ".join(parts)
    text = " ".join(text.replace("|", "/").split())[:200] or "-"
    return (json.dumps(data, ensure_ascii=False, default=str) if data else None), text


def single_line(text: str) -> str:
    printable = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(printable.split())[:PREVIEW_CHARS]


def preview_of(data: bytes) -> str:
    """The one-line preview kept in the metadata, so listings never read the content."""
    return single_line(bytes(data[: PREVIEW_CHARS * 4]).decode("utf-8", "replace"))


def safe_name(session_id: str) -> str:
    """A file name for ``session_id`` that stays inside its folder (no separators, no dot-dot)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in session_id).strip(".")
    return safe or "session"


def workbench_file(archive_path: Path, session_id: str) -> Path:
    """Where a session's workbench file lives: ``workbench/<session>.md`` next to its archive file."""
    return Path(archive_path).parent / "workbench" / f"{safe_name(session_id)}.md"
