"""Plain-HTML building blocks and the notebook fallbacks (no ipywidgets needed).

``session_html(session)`` and ``archive_html(archive)`` return a compact summary table for
``Session._repr_html_`` / ``Archive._repr_html_``: a static notebook viewer (GitHub, nbviewer,
an exported HTML file) shows something useful even where widgets cannot render. The widgets
reuse the same helpers so both paths draw bars and tables the same way.

Only the standard library and light contextkit modules are imported here.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from contextkit.sizing import format_size

AMBER_AT = 0.70  # the gauge turns amber at 70% of the cap or window
RED_AT = 0.85  # and red at the default pre-flight ratio, where compaction is due
COLOURS = {"green": "#2e7d32", "amber": "#f9a825", "red": "#c62828", "none": "#9e9e9e"}
# One colour per compaction stage, shared by every chart that draws compactions (the dashboard's and
# the analysis charts), so a stage looks the same wherever it appears.
STAGE_COLOURS = {"trim": "#90a4ae", "summary": "#00897b", "truncation": "#d84315"}
_CELL = "padding:2px 8px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top;overflow-wrap:break-word"


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def ratio(value: int | float, limit: int | float | None) -> float:
    """``value / limit``; 0.0 when there is no limit."""
    if not limit:
        return 0.0
    return float(value) / float(limit)


def pressure_state(pressure: float, *, red_at: float = RED_AT, amber_at: float = AMBER_AT) -> str:
    """``green`` below 70%, ``amber`` below the pre-flight ratio, ``red`` from it on."""
    if pressure >= red_at:
        return "red"
    if pressure >= amber_at:
        return "amber"
    return "green"


def bar_html(value_ratio: float | None, *, colour: str, marks: Sequence[tuple[float, str, str]] = ()) -> str:
    """A horizontal bar filled to ``value_ratio`` (clamped to 100%) with vertical marks.

    ``marks`` are ``(ratio, css_class, title)``: the 85% pre-flight line, a learned cap.
    ``None`` draws an empty grey track (no limit known).
    """
    fill = 0.0 if value_ratio is None else max(0.0, min(value_ratio, 1.0))
    data = "" if value_ratio is None else f"{value_ratio:.4f}"
    parts = [
        f'<div class="ck-bar" data-ratio="{data}" style="position:relative;height:16px;background:#eceff1;'
        'border-radius:3px;margin:4px 0 2px 0">',
        f'<div class="ck-fill" style="width:{fill * 100:.1f}%;height:100%;background:{colour};border-radius:3px"></div>',
    ]
    for at, css, title in marks:
        if 0.0 < at <= 1.0:
            parts.append(
                f'<div class="{esc(css)}" title="{esc(title)}" style="position:absolute;left:{at * 100:.1f}%;'
                'top:-3px;bottom:-3px;border-left:2px dashed #263238"></div>'
            )
    parts.append("</div>")
    return "".join(parts)


def table_html(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[tuple[str, str]],
    *,
    css: str = "ck-table",
    row_class: str = "ck-row",
    row_class_key: str | None = None,
    empty: str = "nothing yet",
) -> str:
    """An HTML table: ``columns`` are ``(key, header)``; rows are mappings, values escaped.

    ``row_class_key`` adds ``ck-<value>`` to each row's class (e.g. the outcome), which both
    styles the row and lets a browser test find it.
    """
    head = "".join(f'<th style="{_CELL}">{esc(title)}</th>' for _, title in columns)
    body = []
    for row in rows:
        extra = f" ck-{esc(row.get(row_class_key, ''))}" if row_class_key else ""
        cells = "".join(f'<td style="{_CELL}">{esc(row.get(key, ""))}</td>' for key, _ in columns)
        body.append(f'<tr class="{row_class}{extra}">{cells}</tr>')
    if not body:
        body.append(
            f'<tr class="ck-empty"><td colspan="{len(columns)}" style="{_CELL};color:#777">{esc(empty)}</td></tr>'
        )
    return (
        f'<table class="{css}" style="border-collapse:collapse;font-size:12px;line-height:1.35;width:100%">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def kv_table(pairs: Iterable[tuple[str, object]], *, css: str = "ck-kv") -> str:
    """Two-column key/value table."""
    rows = "".join(
        f'<tr><th style="{_CELL};font-weight:600">{esc(k)}</th><td style="{_CELL}">{esc(v)}</td></tr>' for k, v in pairs
    )
    return f'<table class="{css}" style="border-collapse:collapse;font-size:12px;line-height:1.35">{rows}</table>'


def format_origin(origin: object) -> str:
    """Archive origins come as text, a mapping (tool/path/lines) or an ``Origin``."""
    if origin is None:
        return ""
    if isinstance(origin, str):
        return origin
    describe = getattr(origin, "describe", None)
    if callable(describe):
        return str(describe())
    if isinstance(origin, Mapping):
        tool, path = origin.get("tool"), origin.get("path")
        where = str(path or "")
        start, end = origin.get("line_start"), origin.get("line_end")
        if path and start is not None:
            where += f":{start}-{end if end is not None else ''}"
        text = " ".join(p for p in (str(tool or ""), where) if p)
        return text or ", ".join(f"{k}={v}" for k, v in origin.items())
    return str(origin)


def format_stat(value: object) -> str:
    """Stats values: dicts as ``k=v`` lists, costs with 4 decimals."""
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _attr(obj: object, name: str, default: Any = None) -> Any:
    try:
        return getattr(obj, name, default)
    except Exception:  # noqa: BLE001 - a fallback repr must never raise
        return default


def session_html(session: object) -> str:
    """Compact summary of a session: sizes vs limits (with a bar), cap origin, stats."""
    measure = _attr(session, "measure")
    size = measure() if callable(measure) else None
    nbytes, tokens, messages = (
        (int(_attr(size, "bytes", 0)), int(_attr(size, "tokens", 0)), int(_attr(size, "messages", 0)))
        if size is not None
        else (0, 0, 0)
    )
    cap = _attr(session, "payload_cap")
    window = _attr(session, "context_window")
    pressure = max(ratio(nbytes, cap), ratio(tokens, window))
    state = pressure_state(pressure)
    pairs: list[tuple[str, object]] = [
        ("model", _attr(session, "model", "")),
        ("messages", messages),
        ("request", f"{format_size(nbytes)} / {format_size(cap) + ' cap' if cap else 'no cap'}"),
        ("tokens", f"{tokens:,} / {f'{window:,}' if window else '?'} window"),
        ("cap source", _attr(session, "cap_source") or "-"),
        ("pressure", f"{pressure:.0%} ({state})"),
    ]
    stats = _attr(session, "stats")
    to_dict = _attr(stats, "to_dict")
    if callable(to_dict):
        pairs.extend((k, format_stat(v)) for k, v in to_dict().items())
    archive = _attr(session, "archive")
    if archive is not None and callable(_attr(archive, "entries")):
        pairs.append(("archive entries", _count(archive)))
        if _attr(archive, "location"):
            pairs.append(("archive", _attr(archive, "location")))
    bar = bar_html(pressure, colour=COLOURS[state], marks=[(RED_AT, "ck-preflight", "85% pre-flight")])
    title = f"contextkit session {esc(_attr(session, 'session_id', ''))}"
    return f'<div class="ck-session-html"><b>{title}</b>{bar}{kv_table(pairs)}</div>'


ENTRY_COLUMNS = (("key", "key"), ("kind", "kind"), ("origin", "origin"), ("size", "size"), ("turn", "turn"))


def entry_row(entry: object) -> dict[str, Any]:
    """One archive entry (object or mapping) as a display row with ``bytes`` kept numeric."""

    def get(*names: str) -> Any:
        for name in names:
            value = entry.get(name) if isinstance(entry, Mapping) else getattr(entry, name, None)
            if value is not None:
                return value
        return None

    size = get("size", "bytes", "nbytes", "chars")
    turn = get("turn")
    return {
        "key": str(get("key") or ""),
        "kind": str(get("kind") or ""),
        "origin": format_origin(get("origin")),
        "bytes": int(size) if size is not None else 0,
        "size": format_size(int(size)) if size is not None else "",
        "turn": "" if turn is None else turn,
    }


def _count(archive: object) -> int:
    """How many entries, from the archive's metadata (``len``) when it has it."""
    try:
        return len(archive)  # type: ignore[arg-type]
    except TypeError:
        entries = _attr(archive, "entries")
        return len(list(entries())) if callable(entries) else 0


def _newest(archive: object, limit: int) -> list[Any]:
    """The newest ``limit`` entries, oldest first: one page from the metadata, never the whole listing."""
    entries = _attr(archive, "entries")
    if not callable(entries):
        return []
    try:
        return list(reversed(entries(limit, newest_first=True)))
    except TypeError:  # an archive-like object without paging
        return list(entries())[-limit:]


def archive_html(archive: object, *, limit: int = 20) -> str:
    """The newest ``limit`` entries of an archive as a table, with the total count and where it lives."""
    total = _count(archive)
    shown = [entry_row(e) for e in _newest(archive, limit)]
    more = f" (showing the last {len(shown)})" if total > len(shown) else ""
    where = _attr(archive, "location")
    place = f" in {esc(where)}" if where else ""
    table = table_html(shown, ENTRY_COLUMNS, css="ck-archive-table", empty="the archive is empty")
    return f'<div class="ck-archive-html"><b>contextkit archive: {total} entries{more}</b>{place}{table}</div>'
