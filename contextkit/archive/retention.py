"""Retention: which sessions' archived content an archive file lets go, and when (pure planning).

The archive keeps everything a session removed for as long as the session may recall it: nothing is
pruned while a session is open, and retention works on whole sessions (scopes), never on single
entries. What it removes goes with its workbench file (``workbench/<session>.md`` next to the file).

``DEFAULT_RETENTION`` (what the default per-user archive does, checked at most once a day when an
``Archive`` opens it): a session not written to for 30 days is removed; when the file holds more
than 2 GiB of content, the sessions written longest ago are removed until it holds at most that.
Sessions open in this process and sessions written in the last 24 hours are never removed by these
rules (another process may be using them). An ``Archive(path)`` you name yourself prunes only when
asked (``archive.prune(...)``) or when given ``retention=Retention(...)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contextkit.archive.records import ScopeInfo
from contextkit.errors import UsageError

DAY = 86_400.0


@dataclass(frozen=True)
class Retention:
    """Rules for letting archived sessions go; see the module docstring for the default."""

    max_age_s: float | None = 30 * DAY  # a session idle for longer is removed
    max_bytes: int | None = 2 << 30  # content bytes the file may hold; the longest-idle sessions go first
    keep_recent_s: float = DAY  # sessions written this recently are never removed by the rules
    every_s: float = DAY  # how often opening an archive applies the rules

    def __post_init__(self) -> None:
        for name in ("max_age_s", "max_bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
                raise UsageError(f"Retention({name}=...) must be a positive number or None, got {value!r}")
        for name in ("keep_recent_s", "every_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise UsageError(f"Retention({name}=...) must be a number of seconds >= 0, got {value!r}")


DEFAULT_RETENTION = Retention()


def plan(
    scopes: Sequence[ScopeInfo],
    now: float,
    *,
    older_than: float | None = None,
    max_bytes: int | None = None,
    named: Iterable[str] = (),
    protected: Iterable[str] = (),
    keep_recent_s: float = 0.0,
) -> tuple[list[str], list[str]]:
    """``(to remove, kept because live)``: the sessions named, those last written more than
    ``older_than`` seconds before ``now``, then the longest-idle ones until the rest holds at most
    ``max_bytes``. Rule-chosen sessions that are ``protected`` or written within ``keep_recent_s``
    are kept; a session named explicitly is removed unless it is open in this process."""
    live = set(protected)
    by_id = {s.session_id: s for s in scopes}
    chosen: dict[str, None] = {}
    kept: dict[str, None] = {}
    for name in named:
        if name in by_id:
            (kept if name in live else chosen)[name] = None

    def take(info: ScopeInfo) -> None:
        if info.session_id in chosen:
            return
        if info.session_id in live or now - info.last_at < keep_recent_s:
            kept[info.session_id] = None
        else:
            chosen[info.session_id] = None

    if older_than is not None:
        for info in scopes:
            if now - info.last_at > older_than:
                take(info)
    if max_bytes is not None:
        total = sum(s.bytes for s in scopes if s.session_id not in chosen)
        for info in sorted(scopes, key=lambda s: s.last_at):
            if total <= max_bytes:
                break
            if info.session_id in chosen:
                continue
            take(info)
            if info.session_id in chosen:
                total -= info.bytes
    return list(chosen), [k for k in kept if k not in chosen]
