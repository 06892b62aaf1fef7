"""What an archive does to stay small and fast: ``sessions``, ``prune``, ``optimize``, retention at open.

A mixin of ``Archive`` (``store.py``): it works through the archive's backend (``self._store``),
its ``path`` (for the workbench files that go with a pruned session) and ``location``. The rules
are planned by ``retention.plan``; see ``retention.py`` for the default.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from contextkit.archive.records import PruneReport, ScopeInfo, workbench_file
from contextkit.archive.retention import Retention, plan
from contextkit.errors import UsageError

RETENTION_CHECKED = "retention_checked_at"


def check_scope_name(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"a session to prune must be a non-empty string, got {value!r}")
    return value


class Upkeep:
    _store: Any
    path: Path | None

    @property
    def location(self) -> str:
        return str(self._store.label)

    def sessions(self) -> list[ScopeInfo]:
        """Every session that archived into this file/database (entries, bytes, first and last write),
        longest idle first: what retention and ``prune`` choose from."""
        return list(self._store.scope_infos())

    def prune(
        self,
        *,
        older_than: float | dt.timedelta | None = None,
        max_bytes: int | str | None = None,
        sessions: Iterable[str] = (),
        dry_run: bool = False,
        keep_recent: float | dt.timedelta = 0.0,
    ) -> PruneReport:
        """Remove whole sessions from the file: those named in ``sessions``, those not written for
        ``older_than`` (seconds or a timedelta), then the longest-idle ones until the file's content
        is at most ``max_bytes`` (bytes or "500MB"). Sessions open in this process are kept, and so
        are those written within ``keep_recent``. Their workbench files go with them. Reclaims the
        freed space when that pays (``optimize``). ``dry_run`` only reports."""
        from contextkit.sizing import parse_size

        age = older_than.total_seconds() if isinstance(older_than, dt.timedelta) else older_than
        recent = keep_recent.total_seconds() if isinstance(keep_recent, dt.timedelta) else float(keep_recent)
        cap = parse_size(max_bytes, what="max_bytes") if max_bytes is not None else None
        if age is not None and (isinstance(age, bool) or not isinstance(age, int | float) or age < 0):
            raise UsageError(f"older_than must be seconds >= 0 or a timedelta, got {older_than!r}")
        named = [sessions] if isinstance(sessions, str) else list(sessions)
        for name in named:
            check_scope_name(name)
        infos = self._store.scope_infos()
        live = self._store.live_scopes()
        chosen, kept = plan(infos, time.time(), older_than=age, max_bytes=cap, named=named, protected=live,
                            keep_recent_s=recent)  # fmt: skip
        sizes = {s.session_id: s for s in infos}
        if dry_run:
            return PruneReport(tuple(chosen), sum(sizes[s].entries for s in chosen), sum(sizes[s].bytes for s in chosen),
                               dry_run=True, kept_live=tuple(kept))  # fmt: skip
        before = self._file_bytes()
        entries = size = blobs = files = 0
        for scope in chosen:
            n, b, k = self._store.delete_scope(scope)
            entries, size, blobs = entries + n, size + b, blobs + k
            files += self._remove_workbench(scope)
        if chosen:
            self._store.optimize()
        reclaimed = max(0, before - self._file_bytes()) if chosen else 0
        return PruneReport(tuple(chosen), entries, size, blobs, files, reclaimed, kept_live=tuple(kept))

    def optimize(self, *, vacuum: bool | None = None) -> list[str]:
        """Bounded index upkeep, and giving free space back to the disk when it pays (more than a
        quarter of the file free) or when ``vacuum=True``; the steps taken."""
        return list(self._store.optimize(vacuum=vacuum))

    def _file_bytes(self) -> int:
        return int(self._store.file_bytes())

    def _remove_workbench(self, scope: str) -> int:
        if self.path is None:
            return 0
        target = workbench_file(self.path, scope)
        try:
            target.unlink()
        except FileNotFoundError:
            return 0
        except OSError:
            return 0
        return 1

    def _apply_retention(self, rules: Retention) -> PruneReport | None:
        """The rules, when they last ran more than ``rules.every_s`` ago (the time is kept in the file)."""
        now = time.time()
        last = self._store.get_meta(RETENTION_CHECKED)
        try:
            due = last is None or now - float(last) >= rules.every_s
        except ValueError:
            due = True
        if not due:
            return None
        self._store.set_meta(RETENTION_CHECKED, repr(now))
        if last is None and not self._store.scope_infos():
            return None
        report = self.prune(older_than=rules.max_age_s, max_bytes=rules.max_bytes, keep_recent=rules.keep_recent_s)
        if report.scopes:
            logging.getLogger("contextkit").info("archive %s: retention %s", self.location, report.describe())
        return report

