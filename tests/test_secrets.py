"""Secrets: a planted canary API key and Authorization header never leak.

The session runs through real failures and recoveries (gateway 413, 500 with retry, an overflow,
a summary, an auth failure) against the simulator over HTTP. Afterwards the canary must not
appear in the events, the archive file (database and WAL bytes), the saved session, the widget
state, the exceptions raised to the caller, or anything logged or printed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.errors import AuthenticationFailed, ContextkitError
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace

CANARY = "sk-canary-7f3a9c1e5b2d4f6a8c0e"
HEADER_CANARY = "hdr-canary-0b1c2d3e4f5a6b7c"
MARKS = (CANARY, HEADER_CANARY, CANARY[10:], HEADER_CANARY[11:])


def leaks(blob: str | bytes) -> list[str]:
    text = blob.decode("utf-8", "replace") if isinstance(blob, bytes) else blob
    return [m for m in MARKS if m in text]


def history(n: int = 6) -> list[dict[str, Any]]:
    ws = Workspace(seed=4, target_bytes=8_000)
    outs = [ws.read_file(f"src/s{i}.py") for i in range(n)]
    calls = [
        {"id": f"c{i}", "function": {"name": "read_file", "arguments": json.dumps({"path": o.path})}}
        for i, o in enumerate(outs)
    ]
    return [
        {"role": "user", "content": "read the service"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"c{i}", "content": o.content} for i, o in enumerate(outs)),
    ]


def test_canary_key_and_header_never_leak(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    status_lines: list[str] = []
    raised: list[BaseException] = []
    archive_path = tmp_path / "archive.sqlite"
    with GatewaySimulator(max_body="32KB", reject_with="413") as gw:
        archive = Archive(archive_path, session_id="secret-test")
        session = Session(
            gw.model,
            api_base=gw.api_base,
            api_key=CANARY,
            extra_headers={"Authorization": f"Bearer {HEADER_CANARY}", "X-Api-Key": HEADER_CANARY},
            archive=archive,
            session_id="secret-test",
            limits=Limits(context_window=1_000_000, retry_backoff=0.0, min_keep_recent=2),
            status=status_lines.append,
        )
        assert leaks(repr(session)) == []
        session.add_messages(history())
        gw.fail_next("500")
        assert session.send("summarize the service").text  # 413 -> recovery, 500 -> retry
        gw.configure(context_window=2_500)
        session.add_messages(history(4))
        assert session.send("and now?").text  # overflow -> learned window -> compaction with a summary
        session.compact("keep file names")
        gw.configure(context_window=None)
        gw.fail_next("auth401")
        with pytest.raises(AuthenticationFailed) as auth:
            session.send("one more")
        raised.append(auth.value)
        gw.fail_next("500", times=5)
        with pytest.raises(ContextkitError) as transient:
            session.send("again")
        raised.append(transient.value)
        saved = session.save(tmp_path / "session.json")
        stats = session.stats.to_dict()
        dashboard_state = widget_state(session)
        html = session._repr_html_()
        archive.close()
    assert session.stats.recoveries_by_level and session.stats.summary_calls
    assert leaks(json.dumps([e.to_dict() for e in session.events], default=str)) == []
    assert leaks(json.dumps(stats)) == []
    for path in tmp_path.rglob("*"):  # archive db, WAL/SHM, workbench notes, saved JSON
        if path.is_file():
            assert leaks(path.read_bytes()) == [], path.name
    assert leaks(saved.read_text()) == []
    assert leaks(dashboard_state) == [] and leaks(html) == []
    for exc in raised:
        chain: BaseException | None = exc
        while chain is not None:  # the caller may print the whole chain
            assert leaks(str(chain)) == [] and leaks(repr(chain)) == [], type(chain).__name__
            for value in vars(chain).values():
                assert leaks(repr(value)) == []
            chain = chain.__cause__ or chain.__context__
    assert leaks("\n".join(status_lines)) == []
    assert leaks("\n".join(r.getMessage() for r in caplog.records)) == []
    out, err = capfd.readouterr()
    assert leaks(out) == [] and leaks(err) == []


def widget_state(session: Session) -> str:
    """Every widget's synced state of a live dashboard, as JSON ("" if widgets are unavailable)."""
    try:
        from ipywidgets.embed import embed_data

        from contextkit.widgets import Dashboard
    except ImportError:  # pragma: no cover - the widget extra is installed in this project
        pytest.fail("contextkit.widgets must import in the test environment")
    dash = Dashboard(session)
    try:
        data = embed_data(views=[dash])
        return json.dumps(data["manager_state"], default=str)
    finally:
        dash.close()
