"""The dashboard's live chart, header and status lines.

The chart is checked on what a browser would draw: the Vega-Lite spec rendered to SVG offline by
vl-convert, counting the marks of each named layer. Stream and cache fields come from the real
``StreamEvent`` and ``RequestEvent.cached_prompt_tokens`` / ``append_only``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from contextkit.events import (
    CapEvent,
    CompactionEvent,
    Event,
    EventLog,
    HistoryEvent,
    NoticeEvent,
    RecoveryEvent,
    RequestEvent,
    StreamEvent,
)
from contextkit.limits.state import SessionStats
from contextkit.widgets.labels import LEVELS, STATS, stat_label, stat_value
from contextkit.widgets.series import SessionSeries

ROOT = Path(__file__).resolve().parents[1]


def story() -> list[Event]:
    """Four requests: one refused by the gateway, a learned cap, a recovery at level 2 with a
    compaction, a turn-boundary microcompact, and a cache break after the compaction."""
    return [
        HistoryEvent(bytes=10_000, tokens=2_500, messages=3, context_window=32_000),
        RequestEvent(bytes=10_000, tokens=2_500, prompt_tokens=2_500, outcome="ok"),
        NoticeEvent(code="microcompact", text="microcompact: 1 truncated, 0 summarized, 20 KB freed"),
        RequestEvent(bytes=90_000, tokens=20_000, outcome="rejected", failure_kind="waf_rejection", status=403, append_only=True),
        CapEvent(cap_bytes=67_500, rejected_bytes=90_000, source="learned"),
        CompactionEvent(trigger="recovery", phase="start", outcome="running", bytes_before=90_000),
        CompactionEvent(trigger="recovery", phase="summarize", stage="summary", outcome="applied", bytes_before=90_000, bytes_after=40_000),
        CompactionEvent(trigger="recovery", phase="done", stage="summary", outcome="applied", bytes_before=90_000, bytes_after=40_000),
        RecoveryEvent(failure_kind="waf_rejection", level=2, attempt=1, outcome="retrying", bytes_before=90_000, bytes_after=40_000),
        RequestEvent(bytes=40_000, tokens=9_000, prompt_tokens=9_000, level=2, outcome="ok", append_only=False),
        RecoveryEvent(level=2, attempt=1, outcome="recovered", bytes_before=40_000),
        RequestEvent(bytes=41_000, tokens=9_200, prompt_tokens=9_200, cached_prompt_tokens=8_800, outcome="ok", append_only=True, cost=0.0123),
    ]  # fmt: skip


def _marks(svg: str, layer: str) -> int:
    """Number of drawn items in the named layer (Vega puts each layer's items in one group)."""
    found = re.search(rf'<g class="mark-\w+ role-mark {layer}_\d+_marks"[^>]*?(/>|>(.*?)</g>)', svg, re.S)
    assert found is not None, f"no {layer} layer in the SVG"
    return len(re.findall(r"<(path|line|rect)\b", found.group(2) or ""))


def test_series_and_chart_marks_follow_the_events() -> None:
    from contextkit.analysis import chart_svg
    from contextkit.widgets.chart import session_chart

    series = SessionSeries()
    counts = []
    for event in story():
        series.apply(event)
        counts.append(series.counts()["requests"])
    assert counts == [0, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 4] and series.counts() == {
        "requests": 4, "rejections": 1, "recoveries": 1, "compactions": 2, "major_compactions": 1, "routine": 1,
        "cache_breaks": 1,
    }  # fmt: skip
    rejected, retried = series.requests[1], series.requests[2]
    assert (
        rejected["result"] == "refused"
        and "firewall/proxy page" in rejected["explain"]
        and "HTTP 403" in rejected["explain"]
    )
    assert retried["level"] == 2 and "Sent after recovery level 2" in retried["explain"]
    assert "Cache break" in retried["explain"] and retried["cap_kb"] == pytest.approx(67_500 / 1024)
    assert rejected["cap_kb"] is None  # the cap was learned from this very refusal
    assert series.requests[-1]["cached_share"] == pytest.approx(8_800 / 9_200)
    assert "96% of its prompt came from the provider's cache" in series.requests[-1]["explain"]
    assert series.recoveries[0]["n"] == 3 and "level 2" in series.recoveries[0]["explain"]
    assert [c["phase"] for c in series.compactions] == ["microcompact", "summarize"]
    assert "to recover from a refused request" in series.compactions[1]["explain"]

    svg = chart_svg(session_chart(series))
    assert "cdn.jsdelivr" not in svg
    assert _marks(svg, "requests") == 4 and _marks(svg, "tokens") == 4
    assert _marks(svg, "rejections") == 1 and _marks(svg, "recoveries") == 1
    assert _marks(svg, "compactions") == 1 and _marks(svg, "routine") == 1  # the microcompact is a routine trim
    assert _marks(svg, "cache_breaks") == 1


def test_an_empty_chart_still_draws_every_layer_and_a_metric_that_can_fail() -> None:
    from contextkit.analysis import chart_svg
    from contextkit.widgets.chart import session_chart

    series = SessionSeries()
    svg = chart_svg(session_chart(series))
    assert _marks(svg, "requests") == 0 and _marks(svg, "rejections") == 0
    series.apply(RequestEvent(bytes=5, tokens=1, outcome="ok"))
    svg = chart_svg(session_chart(series))
    assert _marks(svg, "requests") == 1 and _marks(svg, "rejections") == 0  # no refusal, no rejection mark


def test_live_chart_redraws_on_events_and_stops_after_close() -> None:
    from contextkit.widgets import LiveChart

    @dataclass
    class S:
        events: EventLog

    log = EventLog()
    for event in story()[:4]:
        log.append(event)
    chart = LiveChart(S(log))  # the past is replayed once, then drawn once
    assert chart.series.counts()["requests"] == 2 and chart.redraws == 1
    assert chart.embed_options == {"renderer": "svg", "actions": False}
    for event in story()[4:]:
        log.append(event)
    assert chart.series.counts()["requests"] == 4 and chart.redraws == 1 + 4  # one per request, compaction or recovery
    drawn = chart.chart.to_dict()
    layers = {layer.get("name", "").rsplit("_", 1)[0]: layer for layer in drawn["vconcat"][0]["layer"]}
    assert {"requests", "rejections", "recoveries", "compactions", "routine", "cache_breaks", "limits"} <= set(layers)
    chart.close()
    log.append(RequestEvent(bytes=1))
    assert chart.series.counts()["requests"] == 4 and chart.last_error is None


def test_header_counts_the_streamed_answer_and_shows_the_cached_share() -> None:
    from contextkit.widgets import HistoryGauge

    @dataclass
    class S:
        events: EventLog

    log = EventLog()
    gauge = HistoryGauge(S(log))
    log.append(
        RequestEvent(
            bytes=1000, tokens=900, prompt_tokens=900, cached_prompt_tokens=600, outcome="ok", append_only=True
        )
    )
    assert gauge.cached_share == pytest.approx(600 / 900) and "67% of the last prompt from cache" in gauge.info.value
    for n in (3, 11, 27):
        log.append(StreamEvent(kind="delta", text="x", tokens_so_far=n, chars_so_far=n * 4))
        assert gauge.streaming and gauge.answer_tokens == n
        assert f"answer so far: <b class='ck-answer-tokens'>{n:,}</b> tokens" in gauge.info.value
    log.append(StreamEvent(kind="voided", reason="retry"))
    assert gauge.answer_tokens == 0 and gauge.streaming
    log.append(StreamEvent(kind="delta", tokens_so_far=5))
    log.append(StreamEvent(kind="done", tokens_so_far=41))
    assert not gauge.streaming and gauge.answer_tokens == 41 and "last streamed answer" in gauge.info.value
    log.append(RequestEvent(bytes=1000, tokens=900, prompt_tokens=900, outcome="ok", append_only=False))
    assert gauge.cache_broken and "cache lost" in gauge.info.value and gauge.last_error is None


def test_every_counter_has_a_plain_label_and_an_explanation() -> None:
    names = set(SessionStats.__dataclass_fields__)
    assert names <= set(STATS), f"unexplained counters: {sorted(names - set(STATS))}"
    for name in names:
        label, help_text = stat_label(name)
        assert "_" not in label and len(help_text) > 30, name
    assert stat_label("truncation_falls")[0] == "times the session had to cut messages"
    # one description per recovery level: the counter's tooltip says what the timeline's rows say
    assert all(text in stat_label("recoveries_by_level")[1] for text in LEVELS.values())
    assert stat_value("cached_share", 0.5) == "50%" and stat_value("cached_share", None) == "not reported"
    assert (
        stat_value("failures_by_kind", {"payload_too_large": 2})
        == "2 × the gateway refused the body as too large (413)"
    )
    assert stat_value("recoveries_by_level", {"2": 1, "1": 3}) == "4 steps (3 × level 1, 1 × level 2)"
    assert stat_value("cost", 0.5) == "$0.5000" and stat_value("bytes_sent", 2048) == "2.0 KB"


def test_status_lines_in_a_notebook_collapse_or_go_to_the_dashboard(tmp_path: Path) -> None:
    """In a real kernel: no stderr; one collapsible block per cell, or nothing while a dashboard shows."""
    setup = (
        "import contextkit\ncontextkit.offline()\n"  # as the notebooks do: litellm prints nothing either
        "from contextkit import Limits, Session\nfrom contextkit.sim import GatewaySimulator, Workspace\n"
        "from contextkit.display.status import show_status_in_notebook\nhandler = show_status_in_notebook()\n"
        "gw = GatewaySimulator(max_body='24KB', reject_with='413').start()\nws = Workspace(seed=1, target_bytes=6000)\n"
        "s = Session(gw.model, api_base=gw.api_base, api_key='k', limits=Limits(context_window=32_000))\n"
        "print(type(handler).__name__, show_status_in_notebook() is handler)"
    )
    talk = "for i in range(4):\n    s.send(f'turn {i}\\n' + ws.tail_log(80).content)"
    dash = "from contextkit.widgets import Dashboard\nd = Dashboard(s)\nd"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in (setup, talk, dash, talk, "print(len(d.status_log.lines))")]
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [cell.outputs for cell in nb.cells]
    assert outputs[0][0]["text"].strip() == "NotebookStatus True"  # attached once
    assert not [o for cell in outputs for o in cell if o.get("name") == "stderr"]
    (block,) = outputs[1]  # one block for all the lines of the cell, updated in place
    assert "<details class='ck-status'>" in block["data"]["text/html"]
    lines = re.search(r"contextkit: (\d+) status lines", block["data"]["text/plain"])
    assert lines and int(lines.group(1)) >= 3 and "gateway rejected" in block["data"]["text/plain"]
    assert outputs[3] == []  # the dashboard's status log has them instead
    assert int(outputs[4][0]["text"]) >= int(lines.group(1))


@pytest.mark.parametrize("attach", ["", "show_status_on_stderr()", "show_status_in_notebook()"])
def test_status_lines_go_to_stderr_outside_a_notebook_only_when_asked(attach: str) -> None:
    """No handler: nothing on stderr. Either handler outside a kernel: ``[contextkit] ...`` lines."""
    import subprocess
    import sys

    code = (
        "from contextkit import Limits, Session\nfrom contextkit.sim import GatewaySimulator\n"
        f"from contextkit.display.status import show_status_in_notebook, show_status_on_stderr\n{attach}\n"
        "with GatewaySimulator(max_body='24KB', reject_with='413') as gw:\n"
        "    s = Session(gw.model, api_base=gw.api_base, api_key='k', limits=Limits(context_window=32_000))\n"
        "    for i in range(4):\n        s.send(f'turn {i} ' + 'lorem ipsum ' * 800)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "[contextkit]" not in out.stdout
    if attach:
        assert "[contextkit] gateway rejected" in out.stderr
    else:
        assert out.stderr == ""


def test_the_stub_diff_shows_kept_removed_and_added_lines() -> None:
    from contextkit.widgets.browser import stub_diff_html

    original = "\n".join(f"line {i}: value {i * 7}" for i in range(1, 101))
    head, tail = original.splitlines()[:3], original.splitlines()[-3:]
    stub = "\n".join([*head, "[... 94 lines archived: recall <<ccr:0123456789abcdef>> ...]", *tail])
    html = stub_diff_html(original, stub)
    assert html.count("<div class='ck-same'>") == 6  # the preview kept the head and the tail
    assert "… 88 more lines removed (archived) …" in html  # 94 removed: 3 shown each side, the rest collapsed
    assert "<div class='ck-add'>[... 94 lines archived: recall &lt;&lt;ccr:0123456789abcdef&gt;&gt; ...]</div>" in html
    assert stub_diff_html("same\ntext", "same\ntext").count("ck-del") == 0  # nothing removed, nothing struck


def test_the_streaming_count_redraws_every_few_tokens_not_every_delta() -> None:
    from contextkit.widgets import HistoryGauge

    @dataclass
    class S:
        events: EventLog

    log = EventLog()
    gauge = HistoryGauge(S(log))
    renders: list[str] = []
    gauge.info.observe(lambda change: renders.append(change["new"]), names="value")
    for n in range(1, 41):  # one token per delta
        log.append(StreamEvent(kind="delta", tokens_so_far=n))
    assert 4 <= len(renders) <= 6 and gauge.answer_tokens in range(33, 41)
    log.append(StreamEvent(kind="done", tokens_so_far=40))
    assert gauge.answer_tokens == 40 and "last streamed answer: <b class='ck-answer-tokens'>40</b>" in gauge.info.value
