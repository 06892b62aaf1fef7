"""``ArchiveBrowser``: what the recall archive holds and where it is referenced.

Entries (key, kind, origin, size, turn) come from ``archive.entries()`` once, then from the
session's events: an ``ArchiveEvent`` carries the row itself, the ``archived_keys`` of a compaction
or recovery step are looked up one by one (the archive is never re-listed). The search box runs
``archive.recall_context_result(query)`` — the same bounded pack the model would get — and
narrows the list to its items. Selecting an entry shows its original content (``archive.get``)
and the history message whose stub carries its ``<<ccr:KEY>>`` marker, refreshed on every
``HistoryEvent``.

One list (a selectable, newest first); next to the selected entry's original, the stub the
model saw instead, as a small diff: lines the stub kept, lines it removed (collapsed), and the
pointer text it added.

Pass a Session (live) or an Archive alone (static; call ``refresh()`` after changing it).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import ipywidgets as W
import traitlets as T

from contextkit.display.html import entry_row, esc
from contextkit.errors import UsageError
from contextkit.events import ArchiveEvent, CompactionEvent, Event, EventLog, HistoryEvent, RecoveryEvent
from contextkit.markers import marker
from contextkit.sizing import format_size
from contextkit.widgets._view import EventFeed, FeedView, call_quietly

_MONO = (
    "<style>.ck-archive-list select{font-family:monospace;font-size:12px}"
    ".ck-diff{font-family:monospace;font-size:11px;line-height:1.35;white-space:pre-wrap;max-height:240px;"
    "overflow:auto;border:1px solid #ddd;padding:4px 6px;margin:0}.ck-diff .ck-add{background:#e8f5e9;color:#1b5e20}"
    ".ck-diff .ck-del{background:#ffebee;color:#b71c1c;text-decoration:line-through}"
    ".ck-diff .ck-gap{color:#9e9e9e;font-style:italic}</style>"
)
_LIST_HEADER = "key               kind          origin                         size       turn"
_PRE = (
    "max-height:240px;overflow:auto;background:#fafafa;border:1px solid #ddd;padding:4px 6px;font-size:11px;"
    "line-height:1.35;white-space:pre-wrap;margin:0"
)


def stub_diff_html(original: str, stub: str, *, context: int = 3, max_lines: int = 60) -> str:
    """What the stub kept of the original, what it removed (long runs collapsed) and what it added."""
    import difflib

    before, after = original.splitlines(), stub.splitlines()
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag == "equal":
            run = before[i1:i2]
            if len(run) > 2 * context:
                run = [*run[:context], None, *run[-context:]]  # type: ignore[list-item]
            out += [
                f"<div class='ck-same'>{esc(line)}</div>" if line is not None else "<div class='ck-gap'>…</div>"
                for line in run
            ]
            continue
        removed = before[i1:i2]
        if len(removed) > 2 * context:
            out += [f"<div class='ck-del'>{esc(line)}</div>" for line in removed[:context]]
            out.append(f"<div class='ck-gap'>… {len(removed) - 2 * context} more lines removed (archived) …</div>")
            out += [f"<div class='ck-del'>{esc(line)}</div>" for line in removed[-context:]]
        else:
            out += [f"<div class='ck-del'>{esc(line)}</div>" for line in removed]
        out += [f"<div class='ck-add'>{esc(line)}</div>" for line in after[j1:j2]]
    if len(out) > max_lines:
        out = [*out[:max_lines], f"<div class='ck-gap'>… {len(out) - max_lines} more diff lines</div>"]
    return "<div class='ck-diff'>" + "".join(out) + "</div>"


def stub_locations(history: Sequence[Any], key: str) -> list[int]:
    """Indices of history messages whose content carries ``<<ccr:KEY>>``."""
    needle = marker(key)
    return [i for i, m in enumerate(history) if needle in (getattr(m, "content", "") or "")]


def _label(row: dict[str, Any]) -> str:
    origin = row["origin"] if len(row["origin"]) <= 28 else row["origin"][:27] + "…"
    turn = f"turn {row['turn']}" if row["turn"] != "" else ""
    return f"{row['key']}  {row['kind'][:12]:<12}  {origin:<28}  {row['size']:>9}  {turn}"


def _item_key(item: Any) -> str | None:
    if isinstance(item, str):
        return item
    key = item.get("key") if isinstance(item, dict) else getattr(item, "key", None)
    return str(key) if key else None


class ArchiveBrowser(FeedView, W.VBox):
    """One entry list, recall search, and the selected original next to the stub the model saw (a diff)."""

    entries: T.List[dict[str, Any]] = T.List(help="entry rows (key, kind, origin, size, bytes, turn), oldest first")
    visible_keys: T.List[str] = T.List(help="keys listed right now (all, or the search results)")
    selected_key = T.Unicode(None, allow_none=True)
    stub_indices: T.List[int] = T.List(help="history indices whose content carries the selected entry's marker")
    query = T.Unicode("")
    original = T.Unicode(None, allow_none=True, help="original content of the selected entry")
    stub_text = T.Unicode(None, allow_none=True, help="the history message that replaced it (what the model saw)")

    def __init__(
        self, session_or_archive: Any, *, max_items: int = 8, max_tokens: int = 1500, max_rows: int = 500, **kwargs: Any
    ):
        source = session_or_archive
        events = getattr(source, "events", None)
        if isinstance(events, EventLog):
            self._session: Any = source
            self.archive: Any = getattr(source, "archive", None)
        elif callable(getattr(source, "entries", None)) and callable(getattr(source, "get", None)):
            self._session, self.archive, events = None, source, None
        else:
            raise UsageError(
                f"ArchiveBrowser needs a contextkit Session or Archive; got {type(source).__name__}. "
                "Pass session (live view) or contextkit.archive.Archive (static view)."
            )
        self.max_items, self.max_tokens, self.max_rows = max_items, max_tokens, max_rows
        self.header = W.HTML()
        self.entry_list = W.Select(options=[], value=None, rows=6, layout=W.Layout(width="100%"))
        self.entry_list.add_class("ck-archive-list")
        self.search = W.Text(
            placeholder="search the archive (recall_context)", continuous_update=False, layout=W.Layout(width="70%")
        )
        self.clear_button = W.Button(description="show all", layout=W.Layout(width="90px"))
        self.results = W.HTML()
        self.list_header = W.HTML(f"<pre style='margin:0;font-size:11px;color:#555'>{esc(_LIST_HEADER)}</pre>")
        self.more = W.HTML()
        self.content = W.HTML(layout=W.Layout(flex="1 1 320px", margin="0 8px 0 0"))
        self.stub = W.HTML(layout=W.Layout(flex="1 1 320px"))
        super().__init__(
            children=[
                self.header,
                W.HBox([self.search, self.clear_button]),
                self.results,
                self.list_header,
                self.entry_list,
                self.more,
                W.HBox([self.content, self.stub], layout=W.Layout(flex_flow="row wrap", align_items="flex-start")),
            ],
            **kwargs,
        )
        self.add_class("ck-archive")
        self._rows: dict[str, dict[str, Any]] = {}
        self._found: list[str] | None = None  # keys of the last search, None when not searching
        self._feed = EventFeed(events if events is not None else EventLog(), self._apply)
        # Archive and session reads happen outside the view lock: a session thread may be
        # delivering an event (and waiting for the lock) while it holds its own locks.
        entries = self._read_entries()
        with self._feed.lock:
            self._add_entries(entries)
            if events is not None:
                self._feed.start()
            self._render()
        self.entry_list.observe(self._on_select, names="value")
        self.search.observe(self._on_search, names="value")
        self.clear_button.on_click(lambda _: self.clear_search())

    # -- actions (also called by tests) ------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read ``archive.entries()`` (needed only for an Archive without a session)."""
        entries = self._read_entries()
        with self._feed.lock:
            self._add_entries(entries)
            self._render()

    def select(self, key: str | None) -> None:
        """Show the original content of ``key`` and where its stub sits in the history."""
        original = call_quietly(lambda: self.archive.get(key)) if key and self.archive is not None else None
        history = self._read_history() if key else []
        with self._feed.lock:
            self.selected_key = key
            self._show_content(key, original)
            self._show_stub(history)
            if self.entry_list.value != key and (key is None or key in self.visible_keys):
                self.entry_list.value = key

    def search_for(self, query: str) -> None:
        """Run ``recall_context_result(query)`` and list only its items ("" lists everything)."""
        query = query.strip()
        results, found = self._recall(query)
        with self._feed.lock:
            self.query = query
            if self.search.value.strip() != query:
                self.search.value = query
            self.results.value, self._found = results, found
            self._render()

    def clear_search(self) -> None:
        self.search_for("")

    # -- events ------------------------------------------------------------------------------------
    def _apply(self, event: Event) -> None:
        if isinstance(event, ArchiveEvent) and event.action == "put" and event.key:
            if event.key not in self._rows:
                row = {"key": event.key, "kind": event.kind, "origin": event.origin, "bytes": event.bytes}
                self._rows[event.key] = entry_row({**row, "turn": event.turn})
                if not self._feed.replaying:
                    self._render()
        elif isinstance(event, CompactionEvent | RecoveryEvent) and event.archived_keys:
            # compaction archives without an ArchiveEvent: look the new keys up (one row each)
            missing = [k for k in event.archived_keys if k not in self._rows]
            if missing and self.archive is not None:
                self._add_entries(self._read_entries(missing))
                if not self._feed.replaying:
                    self._render()
        elif isinstance(event, HistoryEvent) and self.selected_key and not self._feed.replaying:
            self._show_stub(self._read_history())  # on the session's own thread

    def _on_select(self, change: dict[str, Any]) -> None:
        if change["new"] != self.selected_key:
            self.select(change["new"])

    def _on_search(self, change: dict[str, Any]) -> None:
        if str(change["new"]).strip() != self.query:
            self.search_for(str(change["new"]))

    # -- reads (no lock held) ----------------------------------------------------------------------
    def _read_entries(self, keys: list[str] | None = None) -> list[Any]:
        """All entries, or those of ``keys`` (``archive.entry(key)`` when the archive has it)."""
        archive = self.archive
        if archive is None:
            return []
        entry = getattr(archive, "entry", None)
        if keys is not None and callable(entry):
            found = [call_quietly(partial(entry, k)) for k in keys]
            return [e for e in found if e is not None]
        entries = list(call_quietly(archive.entries, []) or [])
        if keys is not None:
            wanted = set(keys)
            entries = [e for e in entries if entry_row(e)["key"] in wanted]
        return entries

    def _read_history(self) -> list[Any]:
        return list(call_quietly(lambda: list(self._session.history), []) or []) if self._session is not None else []

    def _recall(self, query: str) -> tuple[str, list[str] | None]:
        """Results HTML and the keys found; ``None`` keys mean "no search, list everything"."""
        if not query or self.archive is None:
            return "", None
        try:
            pack = self.archive.recall_context_result(query, self.max_items, self.max_tokens)
        except Exception as exc:  # noqa: BLE001 - a bad query is shown, not raised into the kernel
            return f"<div class='ck-search-error' style='color:#c62828'>{esc(exc)}</div>", []
        found = [k for k in (_item_key(i) for i in getattr(pack, "items", ()) or ()) if k]
        html = (
            f"<div class='ck-search-summary' style='font-size:12px'><b>{len(found)}</b> matching entries for "
            f"“{esc(query)}” ({getattr(pack, 'used_tokens', 0)} tokens in the recall pack)</div>"
            "<pre class='ck-recall-text' style='max-height:140px;overflow:auto;font-size:11px;background:#fafafa'>"
            f"{esc(getattr(pack, 'text', ''))}</pre>"
        )
        return html, found

    # -- state (lock held) -------------------------------------------------------------------------
    def _add_entries(self, entries: list[Any]) -> None:
        for e in entries:
            row = entry_row(e)
            if row["key"]:
                self._rows[row["key"]] = row

    def _show_content(self, key: str | None, original: str | None) -> None:
        self.original = original
        if not key:
            self.content.value = ""
            return
        text = original if original is not None else f"(key {key} is not in this archive)"
        self.content.value = (
            "<div style='font-size:12px' title='The exact text that was removed from the history and archived'>"
            f"<b>original (archived, {esc(format_size(len(text.encode('utf-8', 'surrogatepass'))))})</b></div>"
            f"<pre class='ck-content' style='{_PRE}'>{esc(text)}</pre>"
        )

    def _show_stub(self, history: list[Any]) -> None:
        key = self.selected_key
        self.stub_text = None
        if not key:
            self.stub_indices, self.stub.value = [], ""
            return
        if self._session is None:
            self.stub_indices = []
            self.stub.value = (
                f"<div class='ck-stub'>{esc(marker(key))}: open the browser on a session to see its stub</div>"
            )
            return
        self.stub_indices = stub_locations(history, key)
        if not self.stub_indices:
            where = "not in the live history (dropped, or referenced only from another archive entry)"
        else:
            parts = []
            for i in self.stub_indices:
                m = history[i]
                turn = getattr(m, "turn", None)
                parts.append(f"history[{i}] ({getattr(m, 'role', '?')}{f', turn {turn}' if turn is not None else ''})")
            where = "stub at " + ", ".join(parts)
        diff = ""
        if self.stub_indices:
            self.stub_text = str(getattr(history[self.stub_indices[0]], "content", "") or "")
            diff = stub_diff_html(self.original or "", self.stub_text)
        self.stub.value = (
            "<div style='font-size:12px' title='The message the model saw instead: red lines were removed (and "
            "archived), green lines are the pointer it got; recall brings the original back'><b>what the model saw"
            f"</b></div><div class='ck-stub' style='font-size:12px'><code>{esc(marker(key))}</code> {esc(where)}</div>"
            f"{diff}"
        )

    def _render(self) -> None:
        rows = list(self._rows.values())
        self.entries = rows
        found = self._found
        # everything newest first, or the search results in recall_context's order
        matches = rows[::-1] if found is None else [self._rows[k] for k in found if k in self._rows]
        listed = matches[: self.max_rows]
        self.visible_keys = [r["key"] for r in listed]
        total = sum(r["bytes"] for r in rows)
        where = "" if self.archive is not None else " (this session has no archive)"
        self.header.value = (
            f"{_MONO}<div class='ck-archive-header'><b>Recall archive</b> · <span class='ck-archive-count'>"
            f"{len(rows)}</span> {'entry' if len(rows) == 1 else 'entries'}, {esc(format_size(total))}{esc(where)}</div>"
        )
        more = f"newest {len(listed)} of {len(matches)} shown; search to find older entries" if found is None else ""
        empty = "no archived content yet" if not rows else ""
        self.more.value = (
            f"<div class='ck-more' style='font-size:11px;color:#777'>"
            f"{esc(more if len(matches) > len(listed) else empty)}</div>"
        )
        options = [(_label(r), r["key"]) for r in listed]
        if list(self.entry_list.options) != options:
            keep = self.selected_key if self.selected_key in self.visible_keys else None
            self.entry_list.options = options
            self.entry_list.value = keep
