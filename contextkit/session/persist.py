"""Save and load a session: history (with metadata), counters, limits and the archive reference.

Writes are atomic (temp file, fsync, replace), so a crash mid-save leaves the previous file. API
keys and other litellm keyword arguments are never written.

The archive reference is its file and its scope (session id and read scopes), so a loaded session
reads exactly what the saved one could. A session whose archive lives in memory would come back
with markers that point at nothing: ``save`` copies that archive to ``<name>.archive.sqlite`` next to
the session file and warns. ``load`` refuses a saved archive file that has gone missing while the
history still cites it.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from contextkit.compaction.types import CompactionStats
from contextkit.errors import ConfigError
from contextkit.limits.evidence import EvidenceBook
from contextkit.limits.state import SessionStats
from contextkit.messages import message_from_dict, message_to_dict
from contextkit.settings import LIMIT_KWARGS, Limits

if TYPE_CHECKING:
    from contextkit.archive import Archive

SAVE_VERSION = 1
# the Session class is passed in (never imported here): session imports this module
_S = TypeVar("_S")


def session_to_dict(session: Any) -> dict[str, Any]:
    st = session._state
    return {
        "version": SAVE_VERSION,
        "model": session.model,
        "session_id": session.session_id,
        "limits": asdict(session.limits),
        "context_window": st.context_window,
        "cap": st.cap,
        "cap_source": st.cap_source,
        "turn_budget": st.turn_budget,
        "per_result_budget": st.per_result_budget,
        "size_warned": st.size_warned,
        "turns": st.turns,
        "window_source": st.window_source,
        # the interval per endpoint: without it a loaded session probes its cap back up to a size refused before
        "evidence": st.evidence.to_dict(),
        "clean_turns": st.clean_turns,
        "window_counts_output": st.window_counts_output,
        "stats": st.stats.to_dict(),
        "compactor": session.compactor.stats.to_dict(),
        "archive": {
            "path": str(session.archive.path) if session.archive.path else None,
            # a database archive: its URL without the password (libpq finds that in PGPASSWORD or ~/.pgpass)
            "url": getattr(session.archive, "url", None),
            "session_id": getattr(session.archive, "session_id", session.session_id),
            "read_scopes": list(getattr(session.archive, "scopes", ())[1:]),
        },
        "history": [message_to_dict(m) for m in st.history],
    }


def archive_copy_path(path: str | os.PathLike[str]) -> Path:
    """Where ``save`` puts the copy of an in-memory archive: ``s.json`` -> ``s.archive.sqlite``."""
    target = Path(path)
    return target.with_name(target.stem + ".archive.sqlite")


def save_session(session: Any, path: str | os.PathLike[str]) -> Path:
    """Write the session; an in-memory archive is first copied next to it (with a warning), so the
    saved file never cites markers that no archive holds."""
    data = session_to_dict(session)
    archive = session.archive
    if getattr(archive, "path", "?") is None and getattr(archive, "url", None) is None and hasattr(archive, "copy_to"):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        copy = archive.copy_to(archive_copy_path(path))
        data["archive"]["path"] = str(copy)
        text = (
            f"the session's archive is in memory: copied it to {copy} so the saved session's <<ccr:KEY>> markers "
            "stay recallable; pass Session(archive=Archive(path)) to keep the archive in a file of your choice"
        )
        warnings.warn(text, UserWarning, stacklevel=3)
        session._notify("archive_copied", text, "warning")
    return write_atomic(path, data)


def write_atomic(path: str | os.PathLike[str], data: dict[str, Any]) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, ensure_ascii=False)
    try:
        blob = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates in the history: \u escapes keep them exact
        blob = json.dumps(data).encode("ascii")
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _moved_archive(path: str | os.PathLike[str], saved: str) -> str | None:
    """The archive file of a session whose folder was moved: the copy ``save`` makes next to the
    session file, or a file of the same name next to it."""
    here = Path(path).parent
    for candidate in (archive_copy_path(path), here / Path(saved).name):
        if candidate.exists():
            return str(candidate)
    return None


def read_saved(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed file, or a ``ConfigError`` naming the file and what is wrong with it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"no saved session at {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the saved session at {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path} is not a saved contextkit session ({exc})") from None
    if not isinstance(data, dict) or data.get("version") != SAVE_VERSION:
        raise ConfigError(f"{path} is not a saved contextkit session (version {SAVE_VERSION})")
    return data


def load_session(
    cls: Callable[..., _S], path: str | os.PathLike[str], *, archive: Archive | None = None, **kwargs: Any
) -> _S:
    from contextkit.archive import Archive

    data = read_saved(path)
    try:  # a truncated or hand-edited file: say which file and what is wrong, not a KeyError
        limit_fields = {f.name for f in fields(Limits)}
        # a timeout= / max_retries= given to load replaces the saved value instead of conflicting with it
        replaced = {LIMIT_KWARGS[name] for name in kwargs if name in LIMIT_KWARGS}
        limits = Limits(**{k: v for k, v in data["limits"].items() if k in limit_fields and k not in replaced})
        model, session_id = data["model"], data["session_id"]
        history = [message_from_dict(m) for m in data["history"]]
        window = int(data["context_window"])
        turn_budget, per_result_budget = int(data["turn_budget"]), int(data["per_result_budget"])
        stats = SessionStats.from_dict(data.get("stats") or {})
        evidence = EvidenceBook.from_dict(data.get("evidence") or {})
        clean_turns = int(data.get("clean_turns") or 0)
        compactor_stats = CompactionStats.from_dict(data.get("compactor") or {})
        archive_ref = data.get("archive") or {}
        archive_path = archive_ref.get("path")
        archive_url = archive_ref.get("url")
        archive_scope = archive_ref.get("session_id") or session_id
        read_scopes = [str(scope) for scope in archive_ref.get("read_scopes") or ()]
    except KeyError as exc:
        raise ConfigError(f"{path} is not a complete saved contextkit session (missing {exc})") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{path} is not a valid saved contextkit session: {exc}") from None
    if archive is None and archive_url:
        archive = Archive(archive_url, session_id=archive_scope, read_scopes=read_scopes)
    if archive is None:
        cited = any(m.archive_keys for m in history)
        if archive_path and not Path(archive_path).exists():
            archive_path = _moved_archive(path, archive_path) or archive_path
        if archive_path and cited and not Path(archive_path).exists():
            raise ConfigError(
                f"{path} cites archived content in {archive_path}, which no longer exists; pass "
                "Session.load(path, archive=Archive(<the archive file>)) to resume with the recallable originals"
            )
        if not archive_path and cited:
            warnings.warn(
                f"{path} was saved with an in-memory archive: its <<ccr:KEY>> markers cannot be recalled; pass "
                "Session.load(path, archive=...) with the archive that holds them",
                UserWarning,
                stacklevel=3,
            )
        archive = (
            Archive(archive_path, session_id=archive_scope, read_scopes=read_scopes)
            if archive_path
            else Archive.in_memory(session_id=archive_scope)
        )
    session: Any = cls(model, limits=limits, archive=archive, session_id=session_id, **kwargs)
    st = session._state
    st.history = history
    st.context_window = window
    st.cap, st.cap_source = data.get("cap"), data.get("cap_source")
    st.turn_budget, st.per_result_budget = turn_budget, per_result_budget
    st.size_warned = bool(data.get("size_warned"))
    st.turns = int(data.get("turns") or 0)  # event turn numbers go on where they stopped
    if data.get("window_source") == "learned":
        st.window_source = "learned"
    st.evidence = evidence
    st.clean_turns = clean_turns
    st.window_counts_output = bool(data.get("window_counts_output"))
    st.stats = stats
    session.compactor.stats = compactor_stats
    return session
