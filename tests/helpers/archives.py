"""Archives on either backend for the archive's test suite: an SQLite file or a PostgreSQL schema.

``tests/conftest.py`` turns these into the fixtures ``archive_backend`` (``"sqlite"`` or
``"postgresql"``, the second marked ``real``: it needs Debian's PostgreSQL, started once per test
session) and ``open_archive(name="a", **kw)``: an ``Archive`` of the "file" ``name`` for this test;
the same name in one test is the same file (or, on PostgreSQL, the same schema of one database).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contextkit.archive import Archive

DATABASE = "contextkit_tests"
_counter = itertools.count()


def sqlite_opener(folder: Path) -> Callable[..., Archive]:
    def url_for(name: str) -> str:
        return str(folder / f"{name}.sqlite")

    def open_archive(name: str = "a", **kwargs: Any) -> Archive:
        return Archive(url_for(name), **kwargs)

    open_archive.url_for = url_for  # type: ignore[attr-defined]
    return open_archive


def postgres_opener(server: Any) -> Callable[..., Archive]:
    """Each name a schema of its own (``search_path`` in the URL), so tests never see each other's rows."""
    import psycopg

    schemas: dict[str, str] = {}
    base = server.url(DATABASE)

    def url_for(name: str) -> str:
        if name not in schemas:
            schema = f"t{next(_counter)}_{re.sub(r'[^a-z0-9_]', '_', name.lower())}"[:60]
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f'CREATE SCHEMA "{schema}"')
            schemas[name] = schema
        return f"{base}?options=-csearch_path%3D{schemas[name]}"

    def open_archive(name: str = "a", **kwargs: Any) -> Archive:
        return Archive(url_for(name), **kwargs)

    open_archive.url_for = url_for  # type: ignore[attr-defined]
    return open_archive


def age_scope(archive: Archive, scope: str, days: float) -> None:
    """Make ``scope`` look idle for ``days`` on either backend (its entries and totals written that long
    ago), through the archive's own connection."""
    import time

    then = time.time() - days * 86_400
    store = archive._store
    with store.cursor("age a scope", write=True) as conn:
        if store.kind == "sqlite":
            conn.execute("UPDATE entries SET created_at = ? WHERE session_id = ?", (then, scope))
            conn.execute("UPDATE scopes SET first_at = ?, last_at = ? WHERE session_id = ?", (then, then, scope))
        else:
            conn.execute("UPDATE contextkit_entries SET created_at = %s WHERE session_id = %s", (then, scope))
            conn.execute("UPDATE contextkit_scopes SET first_at = %s, last_at = %s WHERE session_id = %s",
                         (then, then, scope))  # fmt: skip
