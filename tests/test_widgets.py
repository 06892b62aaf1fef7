"""Headless state tests for contextkit.widgets (no kernel: ipywidgets uses a dummy comm).

Events are the contract between the session and the panels. Most tests drive hand-made events
through a real EventLog and a real in-memory Archive on a small stand-in object with the
Session's read-only attributes (SESSION_API.md), so every event sequence the panels must handle
can be produced exactly; ``test_widgets_live_session`` drives a real Session against the
simulator.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest

from contextkit.archive import Archive
from contextkit.display.html import COLOURS
from contextkit.errors import UsageError
from contextkit.events import (
    ArchiveEvent,
    CapEvent,
    CompactionEvent,
    EventLog,
    HistoryEvent,
    NoticeEvent,
    RecoveryEvent,
    RequestEvent,
)
from contextkit.markers import marker
from contextkit.messages import Message
from contextkit.settings import Limits
from contextkit.sizing import format_size
from contextkit.widgets import ArchiveBrowser, Dashboard, HistoryGauge, PhaseTimeline, archive_html, session_html
from contextkit.widgets.timeline import timeline_rows

CAP = 100_000
WINDOW = 32_000


@dataclass
class Stats:
    requests: int = 0
    compactions: int = 0
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    summarizer_cost: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Measure:
    bytes: int
    tokens: int
    messages: int


@dataclass
class StandIn:
    """The attributes of contextkit.Session that the panels read, nothing else."""

    events: EventLog = field(default_factory=EventLog)
    history: list[Message] = field(default_factory=list)
    archive: Archive | None = field(default_factory=Archive.in_memory)
    limits: Limits = field(default_factory=lambda: Limits(max_payload=CAP, context_window=WINDOW))
    payload_cap: int | None = CAP
    context_window: int = WINDOW
    cap_source: str | None = "configured"
    model: str = "openai/sim-model"
    session_id: str = "s-test"
    stats: Stats = field(default_factory=Stats)

    def measure(self) -> Measure:
        return Measure(bytes=sum(len(m.content) for m in self.history), tokens=0, messages=len(self.history))


def history_event(nbytes: int, tokens: int = 1000, messages: int = 6, cap: int | None = CAP) -> HistoryEvent:
    return HistoryEvent(messages=messages, bytes=nbytes, tokens=tokens, cap_bytes=cap, context_window=WINDOW)


# -- gauge ----------------------------------------------------------------------------------------
def test_gauge_colour_follows_pressure_and_labels_show_sizes() -> None:
    s = StandIn(history=[Message.system("be brief"), Message.user("hi")])
    gauge = HistoryGauge(s)
    assert (gauge.messages, gauge.request_bytes, gauge.cap_bytes) == (2, len("be brief") + 2, CAP)
    assert gauge.state == "green"

    s.events.append(history_event(50_000, tokens=8_000))
    assert (gauge.request_bytes, gauge.tokens, gauge.messages) == (50_000, 8_000, 6)
    assert gauge.bytes_ratio == pytest.approx(0.5) and gauge.tokens_ratio == pytest.approx(0.25)
    assert (gauge.state, gauge.colour) == ("green", COLOURS["green"])
    assert "48.8 KB" in gauge.bytes_bar.value and "97.7 KB configured payload cap" in gauge.bytes_bar.value
    assert "width:50.0%" in gauge.bytes_bar.value and "ck-preflight" in gauge.bytes_bar.value
    assert "left:85.0%" in gauge.bytes_bar.value
    assert "8,000" in gauge.tokens_bar.value and "32,000-token window" in gauge.tokens_bar.value

    s.events.append(history_event(72_000, tokens=8_000))
    assert (gauge.state, gauge.colour) == ("amber", COLOURS["amber"])
    # tokens dominate: bytes are low but the window is nearly full
    s.events.append(history_event(10_000, tokens=28_000, messages=40))
    assert gauge.pressure == pytest.approx(28_000 / WINDOW)
    assert (gauge.state, gauge.colour) == ("red", COLOURS["red"])
    assert "40 messages" in gauge.info.value and "88% red" in gauge.info.value
    s.events.append(history_event(120_000, tokens=1_000))
    assert gauge.bytes_ratio == pytest.approx(1.2) and "width:100.0%" in gauge.bytes_bar.value
    assert "120%" in gauge.bytes_bar.value and gauge.last_error is None


def test_gauge_shows_the_cached_share_and_cache_breaks() -> None:
    s = StandIn()
    gauge = HistoryGauge(s)
    assert "ck-cache" not in gauge.info.value  # nothing billed yet
    s.events.append(RequestEvent(prompt_tokens=1_000, append_only=None))
    s.events.append(RequestEvent(prompt_tokens=2_000, cached_prompt_tokens=1_500, append_only=True))
    s.events.append(RequestEvent(prompt_tokens=1_000, cached_prompt_tokens=500, append_only=False))
    assert (gauge.prompt_tokens, gauge.cached_tokens, gauge.cache_breaks) == (4_000, 2_000, 1)
    assert "cache lost (<b>50%</b> of 4,000 prompt tokens so far, 1 cache break)" in gauge.info.value
    assert HistoryGauge(s).cache_breaks == 1  # replayed from the log


def test_gauge_shows_learned_cap_and_how_it_was_learned() -> None:
    s = StandIn(payload_cap=None, cap_source=None, limits=Limits(context_window=WINDOW))
    gauge = HistoryGauge(s)
    s.events.append(history_event(90_000, cap=None))
    assert gauge.cap_bytes is None and gauge.state == "green"
    assert "no payload cap known" in gauge.bytes_bar.value and "ck-preflight" not in gauge.bytes_bar.value

    s.events.append(NoticeEvent(code="learned_cap", text="gateway rejected 120 KB; learned cap 96 KB", level="warning"))
    s.events.append(CapEvent(cap_bytes=98_304, rejected_bytes=122_880, source="learned"))
    assert gauge.cap_source == "learned" and gauge.cap_bytes == 98_304
    assert gauge.cap_detail == "learned 96.0 KB after a rejected 120.0 KB request"
    assert "learned 96.0 KB after a rejected 120.0 KB request" in gauge.info.value
    assert "gateway rejected 120 KB" in gauge.info.value
    assert gauge.state == "red"  # 90 KB of a 96 KB cap
    s.events.append(history_event(30_000, cap=98_304))
    assert gauge.state == "green" and "96.0 KB learned payload cap" in gauge.bytes_bar.value


def test_gauge_replays_past_events_and_ignores_stale_sizes() -> None:
    s = StandIn()
    s.events.append(history_event(10_000))
    s.events.append(history_event(80_000))
    gauge = HistoryGauge(s)  # created after the events: built from the replay, not from measure()
    assert gauge.request_bytes == 80_000 and gauge.state == "amber"
    stale = s.events[0]
    gauge._feed._on_event(stale)  # a slower thread delivering an older event late
    assert gauge.request_bytes == 80_000


def test_gauge_honours_a_custom_preflight_ratio() -> None:
    s = StandIn(limits=Limits(max_payload=CAP, context_window=WINDOW, preflight_ratio=0.75))
    gauge = HistoryGauge(s)
    s.events.append(history_event(76_000))
    assert gauge.state == "red" and "left:75.0%" in gauge.bytes_bar.value


# -- timeline -------------------------------------------------------------------------------------
def test_timeline_groups_a_compaction_into_one_row_whose_running_phase_is_replaced() -> None:
    s = StandIn()
    timeline = PhaseTimeline(s)
    assert timeline.rows == [] and timeline.running == "" and "no compaction or recovery yet" in timeline.table.value
    s.events.append(CompactionEvent(trigger="auto", phase="start", outcome="running", bytes_before=90_000))
    s.events.append(
        CompactionEvent(
            trigger="auto", phase="microcompact", stage="trim", outcome="applied", bytes_before=90_000, bytes_after=60_000,
            status="microcompact: 3 truncated",
        )
    )  # fmt: skip
    s.events.append(
        CompactionEvent(
            trigger="auto", phase="summarize", stage="summary", outcome="running", bytes_before=60_000,
            status="Summarizing 22 messages…",
        )
    )  # fmt: skip
    assert len(timeline.rows) == 1 and timeline.rows[0]["outcome"] == "running"
    assert [st["outcome"] for st in timeline.rows[0]["steps"]] == ["applied", "running"]
    assert timeline.running == "summarized old messages (summary stage): Summarizing 22 messages…"
    assert "ck-running-line" in timeline.status.value and "Summarizing 22 messages" in timeline.status.value
    # the running row is open and says in plain words what is happening
    assert "class='ck-episode ck-compaction ck-running' open" in timeline.table.value
    assert "now: summarized old messages" in timeline.table.value

    s.events.append(
        CompactionEvent(
            trigger="auto", phase="summarize", stage="summary", outcome="applied", bytes_before=60_000, bytes_after=12_000,
            summarizer_prompt_tokens=1200, summarizer_completion_tokens=300, summarizer_cost=0.0042,
            identifier_retention=0.9, status="Summary applied",
        )
    )  # fmt: skip
    s.events.append(
        CompactionEvent(trigger="auto", phase="done", outcome="applied", bytes_before=90_000, bytes_after=12_000)
    )
    assert len(timeline.rows) == 1 and timeline.running == ""
    row = timeline.rows[0]
    assert row["outcome"] == "applied" and [st["phase"] for st in row["steps"]] == ["microcompact", "summarize"]
    assert row["summary"] == (
        "Compaction before sending (the history was over its budget) · 87.9 KB → 11.7 KB (freed 76.2 KB) · "
        "shortened old tool output, summarized old messages"
    )
    assert "1,200 tokens read, 300 written, $0.0042 · kept 90% of paths/ids" in timeline.table.value
    assert "ck-compaction ck-running" not in timeline.table.value and "ck-idle-line" in timeline.status.value
    assert "1 compaction, 0 recovery steps" in timeline.status.value


def test_timeline_groups_a_recovery_ladder_into_one_row() -> None:
    s = StandIn()
    timeline = PhaseTimeline(s)
    s.events.append(
        RecoveryEvent(
            failure_kind="payload_too_large", reason="413", level=1, attempt=1, bytes_before=130_000,
            bytes_after=70_000, outcome="retrying",
        )
    )  # fmt: skip
    assert timeline.rows[0]["outcome"] == "retrying" and "trying level 1" in timeline.rows[0]["summary"]
    s.events.append(
        RecoveryEvent(failure_kind="payload_too_large", level=2, attempt=2, bytes_before=70_000, bytes_after=40_000)
    )
    s.events.append(
        RecoveryEvent(level=2, attempt=2, bytes_before=40_000, outcome="recovered", archived_keys=("a" * 16,))
    )
    assert len(timeline.rows) == 1
    row = timeline.rows[0]
    assert row["outcome"] == "recovered" and [st["outcome"] for st in row["steps"]] == [
        "retrying",
        "retrying",
        "recovered",
    ]
    assert row["summary"] == (
        "Recovery after the gateway refused the body as too large (413) · recovered at level 2: emergency "
        "truncation · 2 steps"
    )
    assert "1 pieces archived" in timeline.table.value
    s.events.append(RecoveryEvent(failure_kind="context_overflow", level=3, attempt=3, outcome="failed"))
    assert [r["outcome"] for r in timeline.rows] == ["recovered", "failed"]
    assert "ck-episode ck-recovery ck-failed" in timeline.table.value


def test_timeline_done_closes_the_run_and_rows_are_bounded() -> None:
    rows: list[dict[str, Any]] = []
    rows = timeline_rows(rows, CompactionEvent(phase="start", outcome="running", bytes_before=5000))
    rows = timeline_rows(rows, CompactionEvent(phase="summarize", stage="summary", outcome="running"))
    before = rows
    rows = timeline_rows(rows, CompactionEvent(phase="done", outcome="cancelled", bytes_before=5000, bytes_after=5000))
    assert before[0]["outcome"] == "running" and before[0]["steps"][0]["outcome"] == "running"  # input unchanged
    assert rows[0]["outcome"] == "cancelled" and rows[0]["steps"][0]["outcome"] == "ended"
    rows = timeline_rows(rows, CompactionEvent(phase="start", outcome="running", bytes_before=5000))
    rows = timeline_rows(rows, CompactionEvent(phase="start", outcome="running", bytes_before=4000))
    assert [r["outcome"] for r in rows] == ["cancelled", "ended", "running"]  # a start without its done
    assert timeline_rows(rows, RequestEvent()) is rows
    for i in range(10):
        rows = timeline_rows(rows, CompactionEvent(phase="start", outcome="running", turn=i), max_rows=5)
    assert len(rows) == 5 and rows[-1]["n"] == 13


# -- archive browser ------------------------------------------------------------------------------
def _archived_session() -> tuple[StandIn, str, str]:
    s = StandIn()
    assert s.archive is not None
    config = "def parse_config(path):\n    return toml.load(path)\n" * 30
    key1 = s.archive.put(config, kind="tool_result", origin={"tool": "read_file", "path": "src/config.py"}, turn=1)
    key2 = s.archive.put("pytest output: 3 failed, 12 passed\n" * 40, kind="tool_result", origin="run_tests", turn=2)
    assert key1 and key2
    s.history = [
        Message.system("sys"),
        Message.user("read the config"),
        Message.assistant("ok"),
        Message.user(f"[Old tool result cleared] {marker(key1)}"),
    ]
    return s, key1, key2


def test_archive_browser_lists_entries_shows_content_and_stub() -> None:
    s, key1, key2 = _archived_session()
    browser = ArchiveBrowser(s)
    assert [r["key"] for r in browser.entries] == [key1, key2]
    first = browser.entries[0]
    assert (first["kind"], first["turn"]) == ("tool_result", 1) and "read_file src/config.py" in first["origin"]
    assert first["size"] == "1.5 KB" and first["bytes"] == 1530
    assert len(browser.entry_list.options) == 2 and "<span class='ck-archive-count'>2</span>" in browser.header.value
    assert not hasattr(browser, "table")  # one list, not a table and a list of the same entries
    assert [v for _, v in browser.entry_list.options] == [key2, key1]  # newest first

    browser.entry_list.value = key1  # what a click in the list does
    assert browser.selected_key == key1
    assert browser.original is not None and browser.original.startswith("def parse_config(path):")
    assert "<pre class='ck-content'" in browser.content.value
    assert browser.stub_indices == [3] and "history[3] (user)" in browser.stub.value
    # the stub the model saw, next to the original, as a small diff
    assert browser.stub_text == f"[Old tool result cleared] {marker(key1)}"
    assert (
        "what the model saw" in browser.stub.value
        and "<div class='ck-add'>[Old tool result cleared]" in browser.stub.value
    )
    assert (
        "more lines removed (archived)" in browser.stub.value
        and "<div class='ck-del'>def parse_config" in browser.stub.value
    )

    # the stub moves when the history changes; the view follows on the HistoryEvent
    s.history = [Message.system("sys"), Message.user(f"summary {marker(key1)}")]
    s.events.append(history_event(1000, messages=2))
    assert browser.stub_indices == [1]
    s.history = [Message.system("sys")]
    s.events.append(history_event(100, messages=1))
    assert browser.stub_indices == [] and "not in the live history" in browser.stub.value
    assert browser.last_error is None


def test_archive_browser_follows_archive_events_and_searches() -> None:
    s, key1, key2 = _archived_session()
    browser = ArchiveBrowser(s)
    assert s.archive is not None
    key3 = s.archive.put("tokenizer vocabulary table\n" * 50, kind="transcript", origin="compaction", turn=5)
    assert key3
    s.events.append(ArchiveEvent(action="put", key=key3, kind="transcript", bytes=1350, origin="compaction", turn=5))
    s.events.append(ArchiveEvent(action="put", key=key3, kind="transcript", bytes=1350, origin="compaction", turn=5))
    assert [r["key"] for r in browser.entries] == [key1, key2, key3]
    assert browser.entries[2]["size"] == "1.3 KB" and browser.entries[2]["turn"] == 5

    browser.search.value = "parse_config"  # typing + Enter in the search box
    assert browser.query == "parse_config" and browser.visible_keys == [key1]
    assert (
        "<b>1</b> matching entries" in browser.results.value and f"&lt;&lt;ccr:{key1}&gt;&gt;" in browser.results.value
    )
    assert [v for _, v in browser.entry_list.options] == [key1]
    browser.search_for("nothing-matches-this")
    assert browser.visible_keys == [] and "<b>0</b> matching entries" in browser.results.value
    browser.clear_button.click()
    assert browser.query == "" and browser.visible_keys == [key3, key2, key1] and browser.results.value == ""


def test_archive_browser_lists_only_the_newest_rows() -> None:
    s, key1, key2 = _archived_session()
    browser = ArchiveBrowser(s, max_rows=1)
    assert len(browser.entries) == 2 and browser.visible_keys == [key2]
    assert "newest 1 of 2 shown; search to find older entries" in browser.more.value
    browser.select(key1)  # not listed, still viewable (e.g. from code)
    assert browser.selected_key == key1 and browser.entry_list.value is None and browser.stub_indices == [3]
    browser.search_for("parse_config")
    assert browser.visible_keys == [key1] and browser.entry_list.value == key1 and "newest" not in browser.more.value


def test_archive_browser_on_an_archive_alone_and_bad_input() -> None:
    archive = Archive.in_memory()
    browser = ArchiveBrowser(archive)
    assert browser.entries == [] and "no archived content yet" in browser.more.value
    key = archive.put("some long text " * 10, kind="message", origin="user", turn=0)
    assert key
    browser.refresh()
    assert [r["key"] for r in browser.entries] == [key]
    browser.select(key)
    assert browser.original == "some long text " * 10 and "open the browser on a session" in browser.stub.value
    browser.select("0" * 16)
    assert browser.original is None and "is not in this archive" in browser.content.value
    with pytest.raises(UsageError, match="ArchiveBrowser needs a contextkit Session or Archive"):
        ArchiveBrowser(object())
    no_archive = ArchiveBrowser(StandIn(archive=None))
    assert "this session has no archive" in no_archive.header.value
    with pytest.raises(UsageError, match="HistoryGauge needs a contextkit Session"):
        HistoryGauge({"events": []})


# -- dashboard, threads, fallbacks ----------------------------------------------------------------
def test_dashboard_combines_panels_and_updates_stats() -> None:
    s, _, _ = _archived_session()
    dash = Dashboard(s)
    assert dash.stats.stats["requests"] == 0 and "ck-stats-table" in dash.stats.table.value
    s.stats.requests, s.stats.failures_by_kind = 3, {"payload_too_large": 1}
    s.events.append(RequestEvent(bytes=5000, outcome="ok"))
    assert dash.stats.stats["requests"] == 3
    # plain words with a tooltip, not the counter's name
    visible = re.sub(r"<[^>]+>", " ", dash.stats.table.value)  # the text a student sees
    assert "requests refused, by reason" in visible and "times the history was compacted" in visible
    assert "failures_by_kind" not in visible and "_" not in visible
    assert "1 × the gateway refused the body as too large (413)" in dash.stats.table.value
    assert "title='Requests the gateway or the provider refused" in dash.stats.table.value
    s.events.append(history_event(90_000))
    assert dash.gauge.state == "red" and len(dash.browser.entries) == 2
    subscribers = len(s.events._subscribers)
    assert subscribers == 6  # header, chart, numbers, timeline, archive, status log
    dash.close()
    assert len(s.events._subscribers) == 0
    s.events.append(history_event(1_000))
    assert dash.gauge.request_bytes == 90_000 and dash.last_error is None


def test_updates_from_background_threads_and_asyncio_tasks() -> None:
    s = StandIn()
    gauge, timeline = HistoryGauge(s), PhaseTimeline(s)
    worker = threading.Thread(target=lambda: s.events.append(history_event(88_000, messages=12)))
    worker.start()
    worker.join()
    assert gauge.request_bytes == 88_000 and gauge.state == "red" and gauge.messages == 12

    def burst(n: int) -> None:
        for i in range(25):  # a failed recovery closes its row at once: one row per event
            s.events.append(RecoveryEvent(level=1, outcome="failed", turn=n * 100 + i, bytes_before=n * 100 + i))
            s.events.append(history_event(1_000 + n))

    threads = [threading.Thread(target=burst, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(timeline.rows) == 100 and [r["n"] for r in timeline.rows] == list(range(1, 101))
    assert sorted(r["bytes_before"] for r in timeline.rows) == sorted(n * 100 + i for n in range(4) for i in range(25))
    last_history = max((e for e in s.events if isinstance(e, HistoryEvent)), key=lambda e: e.seq)
    assert gauge.request_bytes == last_history.bytes  # the newest sizes win whatever the thread order

    async def task() -> None:
        await asyncio.sleep(0)
        s.events.append(CompactionEvent(phase="summarize", outcome="running", status="in flight"))

    asyncio.run(task())
    assert timeline.running == "summarized old messages: in flight"
    assert gauge.last_error is None and timeline.last_error is None


def test_html_fallbacks_need_no_ipywidgets() -> None:
    s, key1, _ = _archived_session()
    s.stats.requests = 7
    page = session_html(s)
    assert "contextkit session s-test" in page and "openai/sim-model" in page and ">requests<" in page
    assert ">7<" in page and "archive entries" in page and "ck-preflight" in page
    page = archive_html(s.archive)
    assert "2 entries" in page and key1 in page and "read_file src/config.py" in page
    assert "empty" in archive_html(Archive.in_memory())
    code = (
        "import sys; sys.modules['ipywidgets'] = None\n"
        "import contextkit, contextkit.widgets as w\n"
        "assert 'traitlets' not in sys.modules, 'widgets package pulled in traitlets'\n"
        "assert callable(w.session_html) and callable(w.archive_html)\n"
        "try:\n    w.Dashboard\nexcept ImportError as e:\n    print('ok', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok contextkit.widgets.Dashboard needs ipywidgets")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, contextkit; print(sorted(m for m in sys.modules "
            "if m.startswith(('contextkit.widgets', 'ipywidgets'))))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# -- a real Session against the gateway simulator --------------------------------------------------
def test_dashboard_follows_a_real_session_after_every_event() -> None:
    from contextkit.session.core import Session
    from contextkit.sim import GatewaySimulator, Workspace

    ws = Workspace(seed=1, target_bytes=6000)
    with GatewaySimulator(max_body="64KB", reject_with="waf403") as gw:
        kw = gw.litellm_kwargs("openai")
        model = kw.pop("model")
        s = Session(
            model,
            **kw,
            system="Be brief.",
            limits=Limits(context_window=48_000),
            archive=Archive.in_memory(session_id="w"),
            session_id="w",
            status=None,
        )
        dash = Dashboard(s)
        gauge, timeline, browser = dash.gauge, dash.timeline, dash.browser
        assert (gauge.messages, gauge.cap_bytes, gauge.context_window) == (1, None, 48_000)
        seen: list[str] = []
        problems: list[str] = []

        def check(event: Any) -> None:  # subscribed after the dashboard: runs once the panels saw the event
            seen.append(event.type)
            if isinstance(event, HistoryEvent) and (gauge.request_bytes, gauge.messages) != (
                event.bytes,
                event.messages,
            ):
                problems.append(f"gauge behind history event {event.seq}")
            if isinstance(event, CompactionEvent) and event.outcome == "running" and not timeline.running:
                problems.append(f"running phase {event.phase} not shown")
            if isinstance(event, CapEvent) and gauge.cap_bytes != event.cap_bytes:
                problems.append("cap not shown")

        s.events.subscribe(check)
        for i in range(6):  # 8.7 KB per turn: the gateway's 64 KB cap rejects the 8th request
            s.send(f"turn {i}: please look at this log\n" + ws.tail_log(80).content)
            assert gauge.request_bytes == s.measure().bytes and gauge.state == "green"
        worker = threading.Thread(target=lambda: s.send("turn 6: more\n" + ws.tail_log(80).content))
        worker.start()
        worker.join()
        asyncio.run(s.asend("turn 7: and more\n" + ws.tail_log(80).content))
        for i in range(8, 10):
            s.send(f"turn {i}: again\n" + ws.tail_log(80).content)
        rejected = [r for r in gw.requests if not r.accepted]

    assert problems == [] and dash.last_error is None
    assert {"history", "compaction", "recovery", "cap", "request", "notice"} <= set(seen)
    assert len(rejected) == 1
    m = s.measure()
    assert (gauge.request_bytes, gauge.messages, gauge.tokens) == (m.bytes, m.messages, m.tokens)
    assert gauge.cap_source == "learned" and gauge.cap_bytes == s.payload_cap
    assert (
        gauge.cap_detail.startswith("learned ")
        and f"rejected {format_size(rejected[0].bytes)} request" in gauge.cap_detail
    )
    assert gauge.bytes_ratio == pytest.approx(m.bytes / (s.payload_cap or 1))

    recovery = [r for r in timeline.rows if r["kind"] == "recovery"]
    assert [(r["failure_kind"], r["outcome"]) for r in recovery] == [("waf_rejection", "recovered")]
    summaries = [
        st for r in timeline.rows for st in r["steps"] if st["phase"] == "summarize" and st["outcome"] == "applied"
    ]
    assert summaries and all("tokens read" in st["extra"] for st in summaries)
    # the chart has one request mark per request the simulator received for a turn
    assert dash.chart.series.counts()["requests"] == s.stats.requests == sum(r.kind == "turn" for r in gw.requests)
    assert dash.chart.series.counts()["rejections"] == 1 and dash.chart.series.counts()["recoveries"] >= 1
    assert timeline.running == "" and not [r for r in timeline.rows if r["outcome"] == "running"]
    assert s.archive is not None
    assert [r["key"] for r in browser.entries] == [e.key for e in s.archive.entries()]
    assert dash.stats.stats == s.stats.to_dict() and dash.stats.stats["failures_by_kind"] == {"waf_rejection": 1}

    # the newest summary transcript is referenced from the live history
    stubbed = next(r["key"] for r in reversed(browser.entries) if any(marker(r["key"]) in h.content for h in s.history))
    html = s._repr_html_()  # the static fallback the Session hooks in
    assert "cap source" in html and "learned" in html and "waf_rejection=1" in html
    browser.select(stubbed)
    assert browser.stub_indices and marker(stubbed) in s.history[browser.stub_indices[0]].content
    assert browser.original == s.archive.get(stubbed)
    dash.close()
