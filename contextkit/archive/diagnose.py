"""What an archive failure really is, in words: too many open files, a full disk, a read-only file.

SQLite reports an exhausted file-descriptor table as "unable to open database file" and a full
disk as "database or disk is full"; neither says what to do. ``explain`` looks at the error code
and at the machine (a probe ``open``, the free space, the permissions) and names the cause and a
fix that works.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
from pathlib import Path

from contextkit.errors import ArchiveError

ELSEWHERE = "pass Archive(path=...) another file, set CONTEXTKIT_ARCHIVE, or use Archive.in_memory()"


def lead(label: str, action: str) -> str:
    if action == "open the archive":
        return f"cannot open the contextkit archive at {label}"
    if action.startswith("create the folder"):
        return f"cannot {action} for the contextkit archive at {label}"
    return f"could not {action} in the archive at {label}"


def _can(path: Path, mode: int) -> bool:
    """``os.access`` for the effective user (a process that switched users is judged as that user)."""
    return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)


def open_files() -> tuple[int | None, int | None]:
    """(descriptors open in this process, the soft limit ``ulimit -n``) where the OS tells."""
    try:
        count: int | None = len(os.listdir("/proc/self/fd"))
    except OSError:
        count = None
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        limit = None if soft == resource.RLIM_INFINITY else int(soft)
    except (ImportError, OSError, ValueError):
        limit = None
    return count, limit


def out_of_descriptors() -> bool:
    """Whether opening one more file fails with EMFILE/ENFILE right now."""
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
    except OSError as exc:
        return exc.errno in (errno.EMFILE, errno.ENFILE)
    os.close(fd)
    return False


def too_many_open_files(label: str, action: str) -> ArchiveError:
    count, limit = open_files()
    shown = f" (limit {limit})" if count is None else f" ({count} open, limit {limit})"
    used = "" if limit is None else shown
    return ArchiveError(
        f"{lead(label, action)}: this process has too many open files{used}. "
        "Close sessions you no longer need (session.close(), or `with Session(...) as s:`) and archives "
        "(archive.close()); archives of one file share one connection per process. Or raise the limit "
        "(`ulimit -n`)"
    )


def disk_full(label: str, path: Path | None, action: str) -> ArchiveError:
    where = ""
    if path is not None:
        try:
            free = shutil.disk_usage(path.parent if not path.is_dir() else path).free
            where = f" ({free:,} bytes free on the disk that holds {path.parent})"
        except OSError:
            pass
    return ArchiveError(
        f"{lead(label, action)}: the disk is full{where}. Free space, prune old "
        f"sessions (archive.prune(older_than=...) or archive.prune(max_bytes=...)), or {ELSEWHERE}"
    )


def read_only(label: str, path: Path | None, action: str) -> ArchiveError:
    what = "the file or its folder is read-only"
    if path is not None:
        if not _can(path.parent, os.X_OK):
            what = f"the folder {path.parent} cannot be entered (its permissions)"
        elif os.path.exists(path) and not _can(path, os.W_OK):
            what = f"the file {path} is read-only"
        elif not _can(path.parent, os.W_OK):
            what = f"the folder {path.parent} is read-only (SQLite writes its journal next to the file)"
        else:
            what = "the file is on a read-only mount or another process opened it read-only"
    return ArchiveError(
        f"{lead(label, action)}: {what}. Make it writable, or {ELSEWHERE}"
    )


def explain(exc: sqlite3.Error, label: str, path: Path | None, action: str) -> ArchiveError:
    """An ``ArchiveError`` that names the real cause of ``exc`` and a fix that works."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    text = str(exc)
    if name == "SQLITE_FULL" or "disk is full" in text:
        return disk_full(label, path, action)
    if name.startswith("SQLITE_READONLY") or "readonly" in text:
        return read_only(label, path, action)
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_IOERR")) or "unable to open" in text:
        if out_of_descriptors():
            return too_many_open_files(label, action)
        if path is not None and path.is_dir():
            return ArchiveError(f"{lead(label, action)}: {path} is a folder, not a file; {ELSEWHERE}")
        if path is not None and not _can(path.parent, os.W_OK | os.X_OK):
            return read_only(label, path, action)
    if name.startswith("SQLITE_BUSY") or "locked" in text:
        return ArchiveError(
            f"{lead(label, action)}: another connection held its write lock for more "
            f"than the 30 s busy timeout ({text}). Retry, or {ELSEWHERE}"
        )
    if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or "not a database" in text or "malformed" in text:
        return ArchiveError(
            f"{lead(label, action)}: the file is not a contextkit archive or is damaged "
            f"({text}); {ELSEWHERE}"
        )
    return ArchiveError(
        f"{lead(label, action)}: {text}. Check that the file is writable and not on a "
        f"network drive, or {ELSEWHERE}"
    )


def explain_os(exc: OSError, label: str, path: Path | None, action: str) -> ArchiveError:
    """The same for an ``OSError`` raised around the archive (a folder to create, a copy to write)."""
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return too_many_open_files(label, action)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_full(label, path, action)
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return read_only(label, path, action)
    return ArchiveError(f"{lead(label, action)}: {exc.strerror or exc}; {ELSEWHERE}")
