"""What the session knows about its gateway's body limit, as the dashboard shows it.

A session behind a 24 KB gateway it was not told about: small turns, then a paste the gateway
refuses. The chart and the header must show the interval (known to pass, the send limit, known to
fail) from the first request, with a legend entry for each line, and the simulator's real cap as
the truth the session cannot see; the counts of the "what happened" line must be the ones
``session.stats`` reports.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextkit import Limits, Session, format_size
from contextkit.archive import Archive
from contextkit.sim import GatewaySimulator, Workspace

ROOT = Path(__file__).resolve().parents[1]
CAP = 24 * 1024


def _limit_legend(chart: Any) -> list[str]:
    """The legend entries of the chart's limit lines (the colour domain of its ``limits`` layer)."""
    for layer in chart.to_dict()["vconcat"][0]["layer"]:
        if layer.get("name", "").startswith("limits"):
            return list(layer["encoding"]["color"]["scale"]["domain"])
    raise AssertionError("no limits layer")


def _evidence(session: Session) -> Any:
    return session._state.evidence.endpoints[session.model]


@pytest.fixture(scope="module")
def story() -> Iterator[dict[str, Any]]:
    from contextkit.widgets import Dashboard, LiveChart

    logs = Workspace(seed=2, target_bytes=6_000)
    with GatewaySimulator(context_window=64_000, max_body=CAP, reject_with="413") as gw:
        session = Session(gw.model, api_base=gw.api_base, api_key="k", limits=Limits(context_window=64_000),
                          archive=Archive.in_memory(session_id="knows"), session_id="knows", status=None)  # fmt: skip
        dash = Dashboard(session, gateway=gw)
        blind = LiveChart(session)  # the same session without the simulator's truth
        seen: dict[str, Any] = {"before": (dash.chart.series.known_to_pass, _limit_legend(dash.chart.chart))}
        session.send("hello")
        seen["first"] = (
            dash.chart.series.limit_rows(), _limit_legend(dash.chart.chart), dash.gauge.info.value,
            dash.chart.chart.to_dict()["vconcat"][0]["title"]["subtitle"],
        )  # fmt: skip
        for i in range(3):
            session.send(f"turn {i}: a log\n" + logs.tail_log(40).content)
        session.send("the whole log, please keep it:\n" + logs.tail_log(400).content)
        session.send("and what now?")
        yield {"session": session, "dash": dash, "blind": blind, "seen": seen, "gw": gw}
        dash.close()
        blind.close()


def test_the_interval_is_drawn_from_the_first_request_with_a_legend_entry_per_line(story: dict[str, Any]) -> None:
    from contextkit.widgets.series import KNOWN_TO_FAIL, KNOWN_TO_PASS, REAL_CAP, SEND_LIMIT

    passed, legend = story["seen"]["before"]
    assert passed is None and legend == [KNOWN_TO_PASS, SEND_LIMIT, KNOWN_TO_FAIL, REAL_CAP]  # before any request
    rows, legend, header, subtitle = story["seen"]["first"]
    assert {r["line"] for r in rows} == {KNOWN_TO_PASS, REAL_CAP}  # nothing refused, no cap yet: two lines
    assert legend == [KNOWN_TO_PASS, SEND_LIMIT, KNOWN_TO_FAIL, REAL_CAP]
    assert "nothing refused yet" in " ".join(subtitle) and "known to pass" in header
    assert f"real cap {format_size(CAP)}" in header


def test_the_lines_are_the_sessions_evidence_and_the_simulators_cap(story: dict[str, Any]) -> None:
    from contextkit.analysis import chart_svg
    from contextkit.widgets.series import KNOWN_TO_FAIL, KNOWN_TO_PASS, REAL_CAP, SEND_LIMIT

    session, series = story["session"], story["dash"].chart.series
    evidence = _evidence(session)
    assert evidence.smallest_rejected and evidence.largest_accepted  # the story refused one paste
    assert series.known_to_pass == evidence.largest_accepted < CAP
    assert series.known_to_fail == evidence.smallest_rejected > CAP
    assert series.real_cap == CAP and series.send_limit == session.payload_cap
    lines = {r["line"]: r["bytes"] for r in series.limit_rows()}
    assert lines == {KNOWN_TO_PASS: evidence.largest_accepted, SEND_LIMIT: session.payload_cap,
                     KNOWN_TO_FAIL: evidence.smallest_rejected, REAL_CAP: CAP}  # fmt: skip
    assert lines[KNOWN_TO_PASS] < CAP < lines[KNOWN_TO_FAIL]  # the truth lies in the interval
    assert lines[SEND_LIMIT] < lines[KNOWN_TO_FAIL]  # and nothing known to fail is sent
    svg = chart_svg(story["dash"].chart.chart)
    drawn = re.findall(r'<path aria-label="[^"]*the gateway&#39;s limit: ([^;"]*)[^>]*stroke="(#\w+)"', svg)
    drawn += re.findall(r"<path aria-label=\"[^\"]*the gateway's limit: ([^;\"]*)[^>]*stroke=\"(#\w+)\"", svg)
    assert len(set(drawn)) == 4, drawn  # one line each, each in its own colour
    for text in ("known to pass", "send limit", "known to fail", "the session cannot see"):
        assert text in svg, text
    header = story["dash"].gauge.info.value
    for text in (f"known to pass {format_size(evidence.largest_accepted)}",
                 f"known to fail {format_size(evidence.smallest_rejected)}",
                 f"send limit {format_size(session.payload_cap)}"):  # fmt: skip
        assert text in header, text


def test_without_the_simulator_no_truth_is_drawn(story: dict[str, Any]) -> None:
    from contextkit.widgets.series import REAL_CAP

    blind = story["blind"]
    assert blind.series.real_cap is None and REAL_CAP not in _limit_legend(blind.chart)
    assert blind.series.known_to_fail == story["dash"].chart.series.known_to_fail  # the same evidence


def test_the_what_happened_line_counts_what_the_numbers_count(story: dict[str, Any]) -> None:
    from contextkit.widgets.timeline import counts

    session, dash = story["session"], story["dash"]
    stats = session.stats
    got = counts(dash.timeline.rows)
    assert got["recovery_steps"] == sum(stats.recoveries_by_level.values()) >= 1
    assert got["compactions"] == stats.compactions
    text = dash.timeline.status.value
    assert f"{stats.compactions} compaction" in text and f"{got['recovery_steps']} recovery step" in text
    table = dash.stats.table.value
    assert f"{got['recovery_steps']} step" in table


def test_a_pass_that_removed_nothing_is_not_counted_as_a_compaction() -> None:
    from contextkit.events import CompactionEvent
    from contextkit.widgets.timeline import counts, idle_line, timeline_rows

    rows: list[dict[str, Any]] = []
    for outcome in ("applied", "skipped"):
        for phase in ("start", "trim", "done"):
            rows = timeline_rows(rows, CompactionEvent(trigger="auto", phase=phase, stage="trim", outcome=outcome,
                                                       bytes_before=67_500, bytes_after=0))  # fmt: skip
    assert counts(rows)["compactions"] == 1 and counts(rows)["no_change"] == 1
    assert idle_line(rows) == "1 compaction, 0 recovery steps · 1 pass found nothing to remove"
    steps = [s["size"] for r in rows for s in r["steps"]]
    assert "…" not in " ".join(steps) and "65.9 KB, unchanged" in steps  # no "65.9 KB -> ..." rows


def test_marks_at_the_same_x_sit_side_by_side() -> None:
    from contextkit.widgets.chart import spread

    rows = spread([{"x": 2.5}, {"x": 2.5}, {"x": 2.5}, {"x": 4.5}])
    assert [r["xs"] for r in rows] == pytest.approx([2.2, 2.5, 2.8, 4.5])
    assert len({r["xs"] for r in rows}) == 4


def _scales_without_domain(spec: Any, path: str = "") -> list[str]:
    """Positional encodings whose scale the renderer would compute from the data (an empty layer then
    has an infinite extent: Vega's "Infinite extent for field" warning)."""
    found: list[str] = []
    if isinstance(spec, dict):
        encoding = spec.get("encoding", {})
        for channel in ("x", "y"):
            enc = encoding.get(channel)
            if isinstance(enc, dict) and "field" in enc and "domain" not in enc.get("scale", {}):
                found.append(f"{path}/{channel}:{enc['field']}")
        for key, value in spec.items():
            found += _scales_without_domain(value, f"{path}/{key}")
    elif isinstance(spec, list):
        for i, value in enumerate(spec):
            found += _scales_without_domain(value, f"{path}/{i}")
    return found


def test_every_scale_of_the_chart_has_a_domain_so_empty_layers_warn_about_nothing(story: dict[str, Any]) -> None:
    import altair as alt

    from contextkit.widgets.chart import session_chart
    from contextkit.widgets.series import SessionSeries

    for series in (SessionSeries(), story["dash"].chart.series):
        assert _scales_without_domain(session_chart(series).to_dict()) == []
    bad = alt.Chart(alt.InlineData(values=[])).mark_line().encode(x="n:Q", y="cap_kb:Q")
    assert _scales_without_domain(bad.to_dict()) == ["/x:n", "/y:cap_kb"]  # the check can fail


def test_projector_mode_enlarges_the_chart_text_and_the_panels(story: dict[str, Any]) -> None:
    from contextkit.widgets import Dashboard
    from contextkit.widgets.chart import session_chart

    big = session_chart(story["dash"].chart.series, projector=True).to_dict()["config"]
    assert big["axis"]["labelFontSize"] >= 16 and big["legend"]["labelFontSize"] >= 15
    assert "axis" not in session_chart(story["dash"].chart.series).to_dict().get("config", {})
    dash = Dashboard(story["session"], projector=True)
    try:
        assert "ck-projector" in dash._dom_classes and "font-size:17px" in dash.title.value
    finally:
        dash.close()


def test_recovery_levels_have_one_name_in_the_tooltips_and_in_notebook_02() -> None:
    from contextkit.widgets.labels import LEVELS, stat_label

    notebook = (ROOT / "notebooks" / "02_recovery_ladder.py").read_text(encoding="utf-8")
    tooltip = stat_label("recoveries_by_level")[1]
    for n, name in LEVELS.items():
        what = name.split(": ", 1)[1]
        assert f"| {n} | **{what}**" in notebook, name
        assert name in tooltip


def test_the_analysis_chart_colours_compactions_by_stage_as_the_dashboard_does() -> None:

    from contextkit.analysis import frames, history_vs_cap_chart
    from contextkit.events import CompactionEvent, RequestEvent
    from contextkit.widgets.chart import STAGE_SCALE

    events = [RequestEvent(session_id="a", bytes=100, tokens=10, outcome="ok"),
              CompactionEvent(session_id="a", phase="summarize", stage="summary", outcome="applied", bytes_before=100,
                              bytes_after=50),
              RequestEvent(session_id="a", bytes=50, tokens=5, outcome="ok")]  # fmt: skip
    spec = history_vs_cap_chart(frames(events)).to_dict()
    rules = [layer for layer in spec["layer"] if layer["mark"]["type"] == "rule"]
    assert rules and rules[0]["encoding"]["color"]["field"] == "stage"
    assert rules[0]["encoding"]["color"]["scale"] == STAGE_SCALE.to_dict()
