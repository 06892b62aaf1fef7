"""Listings, counts and sizes from the archive's metadata: paged ``entries``, ``len``, ``total_bytes``, ``sessions``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextkit.archive import Archive
from contextkit.display.html import archive_html

SCOPES = ("a", "b", "c")
puts = st.lists(st.tuples(st.sampled_from(SCOPES), st.integers(0, 12)), min_size=0, max_size=40)


def brute(path: Path, scopes: tuple[str, ...]) -> tuple[list[str], int]:
    """Keys in listing order and their distinct bytes, straight from the tables: a key is listed at the
    row of the first scope (in the archive's order) that holds it."""
    raw = sqlite3.connect(path)
    rows = raw.execute("SELECT id, session_id, key, bytes FROM entries ORDER BY id").fetchall()
    raw.close()
    chosen: dict[str, tuple[int, int, int]] = {}
    for rid, scope, key, size in rows:
        if scope not in scopes:
            continue
        rank = scopes.index(scope)
        if key not in chosen or rank < chosen[key][0]:
            chosen[key] = (rank, rid, size)
    ordered = sorted(chosen, key=lambda k: chosen[k][1])
    return ordered, sum(v[2] for v in chosen.values())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=puts, grants=st.lists(st.sampled_from(SCOPES[1:]), unique=True), page=st.integers(1, 7))
def test_pages_counts_and_sizes_agree_with_the_tables(tmp_path_factory, writes, grants, page) -> None:
    path = tmp_path_factory.mktemp("meta") / "m.sqlite"
    with Archive(path, session_id="a") as root:
        views = {s: root if s == "a" else root.with_scope(s) for s in SCOPES}
        for scope, n in writes:
            views[scope].put(f"content number {n} " + "x" * n, kind="k")
        reader = root.with_scope("a", read_scopes=grants)
        keys, size = brute(path, reader.scopes)
        assert [e.key for e in reader.entries()] == keys
        assert len(reader) == len(keys) and reader.total_bytes == size
        paged = [e.key for off in range(0, len(keys) + page, page) for e in reader.entries(page, offset=off)]
        assert paged == keys
        assert [e.key for e in reader.entries(page, newest_first=True)] == keys[::-1][:page]
        for view in [reader, *views.values()]:
            if view is not root:
                view.close()


def test_listings_never_read_the_content(tmp_path: Path) -> None:
    path = tmp_path / "big.sqlite"
    with Archive(path, session_id="s") as arc:
        key = arc.put("head of a long output " + "z" * 2_000_000, kind="tool_result")
        raw = sqlite3.connect(path)
        raw.execute("UPDATE blobs SET content = zeroblob(10) WHERE key = ?", (key,))  # the content is gone
        raw.commit()
        raw.close()
        entry = arc.entries(1)[0]
        assert entry.preview.startswith("head of a long output zzz") and entry.bytes == 2_000_022
        assert arc.total_bytes == 2_000_022 and len(arc) == 1


def test_sessions_list_each_scope_from_metadata(open_archive) -> None:
    with open_archive("s", session_id="one") as one, one.with_scope("two") as two:
        one.put("first")
        two.put("second entry")
        two.put("third entry!")
        infos = {s.session_id: s for s in one.sessions()}
    assert (infos["one"].entries, infos["one"].bytes) == (1, 5)
    assert (infos["two"].entries, infos["two"].bytes) == (2, 24)
    assert infos["two"].first_at <= infos["two"].last_at


def test_the_notebook_display_shows_one_page_and_where_the_archive_lives(open_archive) -> None:
    with open_archive("d", session_id="d") as arc:
        for i in range(30):
            arc.put(f"entry {i}", kind="note")
        html = archive_html(arc, limit=5)
        where = arc.location
    assert "30 entries (showing the last 5)" in html and where in html and "password" not in html
    assert "entry 29" not in html  # previews are not shown, keys are
    assert html.count("</tr>") == 6  # the header and five rows
