"""contextkit.analysis: frame schemas, outcomes per recovery level and compaction stage, charts from a
real simulated session, offline export."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import altair as alt
import polars as pl
import pytest

from contextkit.analysis import (
    COMPACTIONS_SCHEMA,
    OUTCOMES_SCHEMA,
    RECOVERIES_SCHEMA,
    REQUESTS_SCHEMA,
    Frames,
    chart_svg,
    enable_offline_renderer,
    frames,
    history_vs_cap_chart,
    outcomes,
    outcomes_chart,
    prefix_reuse_chart,
    retention_chart,
    save_chart,
)
from contextkit.events import (
    CapEvent,
    CompactionEvent,
    EventLog,
    HistoryEvent,
    NoticeEvent,
    RecoveryEvent,
    RequestEvent,
)

# synthetic log --------------------------------------------------------------------------------


def _log() -> EventLog:
    clock = iter(float(t) for t in range(100, 200))
    log = EventLog(clock=lambda: next(clock))
    add = log.append
    add(HistoryEvent(session_id="a", cap_bytes=None, context_window=32_000))
    add(RequestEvent(session_id="a", turn=1, bytes=1_000, tokens=250, cost=0.001))
    add(NoticeEvent(session_id="a", code="preflight", text="ignored by frames"))
    add(RequestEvent(session_id="a", turn=2, bytes=200_000, outcome="rejected", failure_kind="waf_rejection", status=403,
                     prefix_shared_bytes=900, prefix_share=0.9))  # fmt: skip
    add(CapEvent(session_id="a", cap_bytes=190_000, rejected_bytes=200_000, source="learned"))
    add(CompactionEvent(session_id="a", turn=2, trigger="recovery", phase="budget", stage="trim", outcome="running"))
    add(CompactionEvent(session_id="a", turn=2, trigger="recovery", phase="budget", stage="trim", outcome="applied",
                        bytes_before=200_000, bytes_after=120_000, tokens_before=50_000, tokens_after=30_000,
                        archived_keys=("0123456789abcdef", "fedcba9876543210")))  # fmt: skip
    add(RecoveryEvent(session_id="a", turn=2, failure_kind="waf_rejection", level=1, attempt=1, outcome="retrying",
                      bytes_before=200_000, bytes_after=120_000, tokens_before=50_000, tokens_after=30_000, latency_s=0.5))  # fmt: skip
    add(RequestEvent(session_id="a", turn=2, attempt=2, level=1, bytes=120_000, tokens=30_000, cost=0.01,
                     prefix_shared_bytes=60_000, prefix_share=0.3, prompt_tokens=30_000, cached_prompt_tokens=20_000,
                     cache_write_tokens=4_000, append_only=False))  # fmt: skip
    add(RecoveryEvent(session_id="a", turn=2, level=1, attempt=1, outcome="recovered"))
    add(CompactionEvent(session_id="a", turn=3, phase="summarize", stage="summary", outcome="applied", bytes_before=120_000,
                        bytes_after=20_000, summarizer_prompt_tokens=900, summarizer_completion_tokens=100,
                        summarizer_cost=0.002, identifier_retention=0.75))  # fmt: skip
    add(CompactionEvent(session_id="a", turn=3, phase="microcompact", stage="trim", outcome="skipped"))
    add(
        CompactionEvent(
            session_id="a", turn=3, phase="done", stage="summary", outcome="applied", bytes_before=120_000,
            bytes_after=20_000,
        )
    )
    # a second session, interleaved: its own request index and cap
    add(RequestEvent(session_id="b", turn=1, bytes=5, purpose="turn"))
    add(RecoveryEvent(session_id="b", turn=1, failure_kind="payload_too_large", level=2, outcome="retrying"))
    add(RequestEvent(session_id="b", turn=1, bytes=3, purpose="summary", outcome="ok"))  # summaries do not settle it
    add(RequestEvent(session_id="b", turn=1, bytes=4, outcome="rejected", attempt=2, level=2))
    return log


def test_empty_input_gives_empty_frames_with_the_schemas() -> None:
    f = frames([])
    assert (f.requests.schema, f.compactions.schema, f.recoveries.schema) == (
        REQUESTS_SCHEMA,
        COMPACTIONS_SCHEMA,
        RECOVERIES_SCHEMA,
    )
    assert f.requests.height == f.compactions.height == f.recoveries.height == 0
    table = outcomes(f)
    assert table.schema == OUTCOMES_SCHEMA and table.height == 0


def test_every_frame_has_its_exact_schema_and_rows() -> None:
    f = frames(_log())
    assert f.requests.schema == REQUESTS_SCHEMA
    assert f.compactions.schema == COMPACTIONS_SCHEMA
    assert f.recoveries.schema == RECOVERIES_SCHEMA
    assert f.requests.height == 6 and f.compactions.height == 4 and f.recoveries.height == 3


def test_requests_frame_tracks_cap_window_and_index_per_session() -> None:
    req = frames(_log()).requests
    a = req.filter(pl.col("session_id") == "a")
    assert a["request_index"].to_list() == [0, 1, 2]
    assert a["cap_bytes"].to_list() == [None, None, 190_000]  # the cap learned after the rejection
    assert a["context_window"].to_list() == [32_000, 32_000, 32_000]
    assert a["outcome"].to_list() == ["ok", "rejected", "ok"]
    assert a["failure_kind"].to_list() == [None, "waf_rejection", None]
    assert a["status"].to_list() == [None, 403, None]
    assert a["prefix_share"].to_list() == [None, 0.9, 0.3]
    assert a["cached_prompt_tokens"].to_list() == [0, 0, 20_000]
    assert a["cache_write_tokens"].to_list() == [0, 0, 4_000]
    assert a["append_only"].to_list() == [None, None, False]
    b = req.filter(pl.col("session_id") == "b")
    assert b["request_index"].to_list() == [0, 1, 2]
    assert b["cap_bytes"].to_list() == [None, None, None]


def test_compactions_frame_derives_freed_bytes_archived_and_latency() -> None:
    comp = frames(_log()).compactions
    budget = comp.row(0, named=True)
    assert budget["phase"] == "budget" and budget["outcome"] == "applied"
    assert budget["freed_bytes"] == 80_000 and budget["freed_tokens"] == 20_000
    assert budget["archived"] == 2
    assert budget["latency_s"] == pytest.approx(1.0)  # ts 105 (running) → 106 (applied)
    summary = comp.filter(pl.col("phase") == "summarize").row(0, named=True)
    assert summary["latency_s"] is None  # no running event
    assert summary["identifier_retention"] == 0.75 and summary["summarizer_cost"] == 0.002
    assert "running" not in comp["outcome"].to_list()


def test_recoveries_frame_links_each_step_to_the_next_request() -> None:
    rec = frames(_log()).recoveries
    step, done, other = rec.rows(named=True)
    assert (step["outcome"], step["next_outcome"], step["succeeded"]) == ("retrying", "ok", True)
    assert step["freed_bytes"] == 80_000
    assert (done["outcome"], done["succeeded"]) == ("recovered", True)
    # session b: the summary request in between is skipped; the retry was rejected
    assert (other["next_outcome"], other["succeeded"]) == ("rejected", False)


def test_frames_accept_a_log_event_objects_and_json_dicts_alike() -> None:
    log = _log()
    from_log = frames(log)
    from_list = frames(list(log))
    from_json = frames(json.loads(json.dumps(log.to_dicts())))
    for x, y, z in zip(from_log, from_list, from_json, strict=True):
        assert x.equals(y) and x.equals(z)


def test_bad_event_input_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no 'type' key"):
        frames([{"session_id": "x"}])
    with pytest.raises(TypeError, match="EventLog, Event objects or event dicts"):
        frames([42])  # type: ignore[list-item]


def test_outcomes_on_the_synthetic_log() -> None:
    table = outcomes(frames(_log()))
    assert table.schema == OUTCOMES_SCHEMA
    rows = {r["label"]: r for r in table.iter_rows(named=True)}
    assert list(rows) == ["recovery L1", "recovery L2", "compaction trim", "compaction summary"]
    keys = [(r["source"], r["level"], r["stage"]) for r in rows.values()]
    assert keys == [("recovery", 1, None), ("recovery", 2, None), ("compaction", None, "trim"),
                    ("compaction", None, "summary")]  # fmt: skip
    r1 = rows["recovery L1"]  # the "recovered" marker is not a second firing
    assert (r1["fired"], r1["succeeded"], r1["success_rate"], r1["bytes_freed"]) == (1, 1, 1.0, 80_000)
    assert r1["mean_latency_s"] == 0.5 and r1["cost"] == pytest.approx(0.01)
    assert (rows["recovery L2"]["fired"], rows["recovery L2"]["success_rate"]) == (1, 0.0)
    c1 = rows["compaction trim"]  # skipped microcompact and the aggregate "done" row are excluded
    assert (c1["fired"], c1["bytes_freed"], c1["mean_latency_s"]) == (1, 80_000, pytest.approx(1.0))
    c2 = rows["compaction summary"]
    assert (c2["fired"], c2["cost"], c2["identifier_retention"]) == (1, 0.002, 0.75)


def test_chart_functions_reject_foreign_input() -> None:
    with pytest.raises(TypeError, match="Frames or a polars DataFrame"):
        prefix_reuse_chart([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs columns"):
        retention_chart(pl.DataFrame({"x": [1]}))


# a real simulated session -------------------------------------------------------------------


@pytest.fixture(scope="module")
def real() -> Frames:
    """An agent session on the simulator: one WAF rejection (recovery), summaries (no microcompact)."""
    from contextkit.archive import Archive
    from contextkit.experiments.workload import SYSTEM_PROMPT, Workload
    from contextkit.session.core import Session
    from contextkit.settings import Limits
    from contextkit.sim import GatewaySimulator

    work = Workload(5, 12)
    limits = Limits(context_window=32_000, microcompact_truncate_turns=10**6, microcompact_summarize_turns=10**6)
    with GatewaySimulator(context_window=32_000, max_body="128KB", reject_with="waf403") as gw:
        session = Session(
            gw.model, api_base=gw.api_base, api_key="sim-key", system=SYSTEM_PROMPT, limits=limits,
            archive=Archive.in_memory(session_id="real"), tools=work.session_tools(), session_id="real",
            status=False, on_flush=None,
        )  # fmt: skip
        for turn in range(work.turns):
            if turn == 3:
                gw.fail_next("waf403")
            session.send(work.user_message(turn))
        # every turn request the gateway saw is a RequestEvent (summaries are reported as compactions)
        assert sum(1 for r in gw.requests if r.kind == "turn") == len(session.events.of_type(RequestEvent))
    return frames(session.events)


def _spec(chart: Any) -> dict[str, Any]:
    spec = chart.to_dict()
    assert isinstance(spec, dict)
    return spec


def _rows(spec: dict[str, Any], node: dict[str, Any]) -> list[dict[str, Any]]:
    """The data rows of ``node`` (altair moves inline data to the top-level ``datasets``)."""
    data = node.get("data") or spec["data"]  # layers sharing one data source inherit the top one
    return data["values"] if "values" in data else spec["datasets"][data["name"]]


def test_real_session_frames_have_the_schemas_and_the_incident(real: Frames) -> None:
    assert real.requests.schema == REQUESTS_SCHEMA
    assert real.compactions.schema == COMPACTIONS_SCHEMA
    assert real.recoveries.schema == RECOVERIES_SCHEMA
    assert real.requests.filter(pl.col("outcome") == "rejected")["failure_kind"].to_list() == ["waf_rejection"]
    retry = real.recoveries.filter(pl.col("outcome") == "retrying").row(0, named=True)
    assert retry["failure_kind"] == "waf_rejection" and retry["succeeded"] is True
    assert real.compactions.filter(pl.col("phase") == "summarize").height >= 1


def test_outcomes_chart_on_a_real_session(real: Frames) -> None:
    table = outcomes(real)
    assert {"recovery L1", "compaction trim", "compaction summary"} <= set(table["label"].to_list())
    spec = _spec(outcomes_chart(real))
    assert spec["facet"]["field"] == "metric"
    enc = spec["spec"]["encoding"]
    assert (enc["x"]["field"], enc["y"]["field"], enc["color"]["field"]) == ("label", "value", "source")
    rows = _rows(spec, spec)
    fired = {r["label"]: r["value"] for r in rows if r["metric"] == "times fired"}
    assert fired == {r["label"]: float(r["fired"]) for r in table.iter_rows(named=True)}
    assert {r["metric"] for r in rows} >= {"times fired", "success rate", "mean bytes freed"}
    # a metric that is zero everywhere (an unpriced session's cost) gets no empty panel
    priced = bool(table["cost"].fill_null(0).sum())
    assert ("cost (USD)" in {r["metric"] for r in rows}) == priced
    assert spec["facet"]["sort"] == [m for m in spec["facet"]["sort"] if m in {r["metric"] for r in rows}]
    assert "cost (USD)" in _spec(outcomes_chart(table.with_columns(pl.lit(0.5).alias("cost"))))["facet"]["sort"]


def test_history_vs_cap_chart_on_a_real_session(real: Frames) -> None:
    spec = _spec(history_vs_cap_chart(real))
    layers = spec["layer"]
    line = layers[0]
    assert (line["encoding"]["x"]["field"], line["encoding"]["y"]["field"]) == ("request_index", "bytes")
    assert [r["bytes"] for r in _rows(spec, line)] == real.requests["bytes"].to_list()
    by_field = {layer["encoding"].get("y", {}).get("field"): layer for layer in layers[1:]}
    cap = by_field["cap_bytes"]  # the cap learned from the WAF rejection
    assert all(r["cap_bytes"] is not None for r in _rows(spec, cap))
    rejected = next(layer for layer in layers if layer["mark"].get("shape") == "cross")
    assert [r["outcome"] for r in _rows(spec, rejected)] == ["rejected"]
    rules = next(layer for layer in layers if layer["mark"]["type"] == "rule")
    assert rules["encoding"]["color"]["field"] == "stage"  # coloured by stage, as the dashboard is
    assert {r["phase"] for r in _rows(spec, rules)} >= {"summarize"}


def test_retention_chart_on_a_real_session(real: Frames) -> None:
    spec = _spec(retention_chart(real))
    points = spec["layer"][0]
    assert (points["encoding"]["x"]["field"], points["encoding"]["y"]["field"]) == ("stage", "identifier_retention")
    expected = real.compactions.drop_nulls("identifier_retention")["identifier_retention"].to_list()
    assert [r["identifier_retention"] for r in _rows(spec, points)] == expected
    assert expected and all(0.0 <= v <= 1.0 for v in expected)


def test_prefix_reuse_chart_on_a_real_session(real: Frames) -> None:
    spec = _spec(prefix_reuse_chart(real))
    assert (spec["encoding"]["x"]["field"], spec["encoding"]["y"]["field"]) == ("request_index", "prefix_share")
    rows = _rows(spec, spec)
    assert len(rows) == real.requests.height - 1  # the first request has no previous body
    assert [r["prefix_share"] for r in rows] == real.requests["prefix_share"].drop_nulls().to_list()


# offline output -------------------------------------------------------------------------------


def test_svg_and_png_export_offline(real: Frames, tmp_path: Any) -> None:
    svg_path = save_chart(history_vs_cap_chart(real), tmp_path / "out" / "history.svg")
    svg = svg_path.read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "</svg>" in svg
    assert "<script" not in svg and "cdn" not in svg
    png = save_chart(outcomes_chart(real), tmp_path / "outcomes.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert chart_svg(retention_chart(real)).startswith("<svg")
    with pytest.raises(ValueError, match=r"\.svg or \.png"):
        save_chart(retention_chart(real), tmp_path / "chart.html")


def test_offline_renderer_is_enabled_and_validated() -> None:
    previous = alt.renderers.active
    try:
        assert enable_offline_renderer() == "jupyter"
        assert alt.renderers.active == "jupyter"
        assert enable_offline_renderer("svg") == "svg" and alt.renderers.active == "svg"
        with pytest.raises(ValueError, match="'jupyter', 'svg' or 'png'"):
            enable_offline_renderer("html")
    finally:
        alt.renderers.enable(previous)


def test_import_contextkit_stays_light() -> None:
    code = (
        "import sys, contextkit, contextkit.prompt.prefix; "
        "heavy = [m for m in ('polars', 'altair', 'contextkit.analysis') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_metrics_long_melts_the_named_metrics_by_label_and_drops_nulls() -> None:
    from contextkit.analysis.charts import metrics_long

    df = pl.DataFrame({"who": ["a", "b"], "n": [1, None], "rate": [0.5, 0.25], "other": [9, 9]})
    long = metrics_long(df, ["who"], {"n": "count", "rate": "success rate"})
    assert long.columns == ["who", "metric", "value"] and long.schema["value"] == pl.Float64
    assert sorted(long.rows()) == [("a", "count", 1.0), ("a", "success rate", 0.5), ("b", "success rate", 0.25)]
