"""Summary tables and altair charts over the analysis frames.

Every function here is pure: frames in, a DataFrame or an ``altair`` chart out; nothing is
displayed or written. Chart data is inlined as plain rows (no data transformer, so no row limit
and no global altair state), with explicit encoding types.

Chart functions take either a ``Frames`` value or the single frame they need.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from contextkit.analysis.frames import Frames
from contextkit.display.html import STAGE_COLOURS
from contextkit.events import COMPACTION_STAGES

__all__ = [
    "OUTCOMES_SCHEMA",
    "history_vs_cap_chart",
    "history_vs_cap_data",
    "metrics_long",
    "outcomes",
    "outcomes_chart",
    "prefix_reuse_chart",
    "retention_chart",
]

# panels per row of a faceted chart: three of about 200 px fit a 1280 px screen beside the notebook's margins
FACET_COLUMNS = 3
# phases that report a whole compaction rather than one stage's work
_AGGREGATE_PHASES = ("start", "done")

OUTCOMES_SCHEMA = pl.Schema(
    {
        "source": pl.String,  # recovery | compaction
        "level": pl.Int64,  # the recovery level (1-3); null on compaction rows
        "stage": pl.String,  # the compaction stage (trim | summary | truncation); null on recovery rows
        "label": pl.String,  # "recovery L1", "compaction summary"
        "fired": pl.Int64,
        "succeeded": pl.Int64,
        "success_rate": pl.Float64,
        "bytes_freed": pl.Int64,
        "mean_bytes_freed": pl.Float64,
        "tokens_freed": pl.Int64,
        "mean_latency_s": pl.Float64,
        "cost": pl.Float64,
        "identifier_retention": pl.Float64,
    }
)


def _pick(obj: Frames | pl.DataFrame, name: str) -> pl.DataFrame:
    if isinstance(obj, Frames):
        return getattr(obj, name)
    if isinstance(obj, pl.DataFrame):
        return obj
    raise TypeError(f"expected contextkit.analysis.Frames or a polars DataFrame ({name}), got {type(obj).__name__}")


def _require(df: pl.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} needs columns {missing}; pass the frame built by contextkit.analysis.frames()")


def metrics_long(df: pl.DataFrame, index: list[str], metrics: dict[str, str]) -> pl.DataFrame:
    """``df``'s ``metrics`` columns melted for a faceted chart: rows of ``*index, metric, value``, the
    value a float, the metric by its label (``metrics``: column -> label), nulls dropped."""
    return (
        df.select(*index, *metrics)
        .with_columns(pl.col(m).cast(pl.Float64) for m in metrics)
        .unpivot(index=index, on=list(metrics), variable_name="metric", value_name="value")
        .drop_nulls("value")
        .with_columns(pl.col("metric").replace_strict(metrics, return_dtype=pl.String))
    )


def _data(df: pl.DataFrame) -> alt.InlineData:
    return alt.InlineData(values=df.to_dicts())


def _rows_in_order(table: pl.DataFrame) -> pl.DataFrame:
    """Recovery rows by level, then compaction rows in the order the stages run."""
    rank = pl.col("stage").replace_strict(
        {s: i for i, s in enumerate(COMPACTION_STAGES)}, default=len(COMPACTION_STAGES)
    )
    return (
        table.with_columns(rank.alias("_rank"))
        .sort("source", "level", "_rank", descending=[True, False, False], nulls_last=True)
        .drop("_rank")
    )


def outcomes(frames: Frames) -> pl.DataFrame:
    """Per recovery level and per compaction stage: how often it fired, how often it worked,
    bytes/tokens freed, mean latency, cost and mean identifier retention.

    Recovery rows (``level`` set): the ``retrying``/``floor`` steps (``recovered``/``failed`` rows
    only mark how a ladder ended); success = the request after the step went through; cost =
    provider cost of the requests sent at that level. Compaction rows (``stage`` set) exclude
    skipped phases and the aggregate ``start``/``done`` phases; success = ``applied``; cost =
    summarizer cost. Schema: ``OUTCOMES_SCHEMA``; recovery rows first by level, then compaction
    rows in stage order (trim, summary, truncation).
    """
    # "recovered" / "failed" rows mark how a ladder ended; the level itself fired in its "retrying" row
    rec = frames.recoveries.filter(~pl.col("outcome").is_in(["recovered", "failed"]))
    req_cost = frames.requests.group_by("level").agg(pl.col("cost").sum().alias("cost"))
    recovery = (
        rec.group_by("level")
        .agg(
            pl.len().cast(pl.Int64).alias("fired"),
            pl.col("succeeded").sum().cast(pl.Int64).alias("succeeded"),
            pl.col("freed_bytes").sum().cast(pl.Int64).alias("bytes_freed"),
            pl.col("freed_bytes").mean().cast(pl.Float64).alias("mean_bytes_freed"),
            pl.col("freed_tokens").sum().cast(pl.Int64).alias("tokens_freed"),
            pl.col("latency_s").mean().cast(pl.Float64).alias("mean_latency_s"),
        )
        .join(req_cost, on="level", how="left")
        .with_columns(
            pl.lit("recovery").alias("source"),
            pl.lit(None, dtype=pl.String).alias("stage"),
            pl.col("cost").fill_null(0.0),
            pl.lit(None, dtype=pl.Float64).alias("identifier_retention"),
        )
    )
    comp = frames.compactions.filter((pl.col("outcome") != "skipped") & ~pl.col("phase").is_in(list(_AGGREGATE_PHASES)))
    compaction = comp.group_by("stage").agg(
        pl.len().cast(pl.Int64).alias("fired"),
        (pl.col("outcome") == "applied").sum().cast(pl.Int64).alias("succeeded"),
        pl.col("freed_bytes").sum().cast(pl.Int64).alias("bytes_freed"),
        pl.col("freed_bytes").mean().cast(pl.Float64).alias("mean_bytes_freed"),
        pl.col("freed_tokens").sum().cast(pl.Int64).alias("tokens_freed"),
        pl.col("latency_s").mean().cast(pl.Float64).alias("mean_latency_s"),
        pl.col("summarizer_cost").sum().cast(pl.Float64).alias("cost"),
        pl.col("identifier_retention").mean().cast(pl.Float64).alias("identifier_retention"),
    )
    compaction = compaction.with_columns(
        pl.lit("compaction").alias("source"),
        pl.lit(None, dtype=pl.Int64).alias("level"),
        (pl.lit("compaction ") + pl.col("stage")).alias("label"),
    )
    recovery = recovery.with_columns((pl.lit("recovery L") + pl.col("level").cast(pl.String)).alias("label"))
    table = pl.concat(
        [
            part.with_columns(
                (pl.col("succeeded") / pl.col("fired")).cast(pl.Float64).alias("success_rate"),
            ).select(OUTCOMES_SCHEMA.names())
            for part in (recovery, compaction)
        ],
        how="vertical",
    )
    return _rows_in_order(table.cast(OUTCOMES_SCHEMA))


_OUTCOME_METRICS = {
    "fired": "times fired",
    "success_rate": "success rate",
    "mean_bytes_freed": "mean bytes freed",
    "mean_latency_s": "mean latency (s)",
    "cost": "cost (USD)",
}


def outcomes_chart(table: Frames | pl.DataFrame) -> alt.FacetChart:
    """Bars per recovery level and compaction stage for each outcome metric, one panel per metric.

    Accepts ``Frames`` or the ``outcomes`` table. Rows of the chart data are the table melted to
    ``label, source, metric, value`` (nulls dropped).
    """
    df = outcomes(table) if isinstance(table, Frames) else table
    _require(df, ("label", "source", *_OUTCOME_METRICS), "outcomes_chart")
    long = metrics_long(df, ["label", "source"], _OUTCOME_METRICS)
    # a metric that is zero everywhere (the cost of a session nobody priced) would be an empty panel
    shown = [m for m in _OUTCOME_METRICS.values() if long.filter((pl.col("metric") == m) & (pl.col("value") != 0)).height]
    long = long.filter(pl.col("metric").is_in(shown))
    base = alt.Chart(_data(long)).mark_bar()
    return (
        base.encode(
            x=alt.X("label:N", title="recovery level or compaction stage", sort=None),
            y=alt.Y("value:Q", title=None),
            color=alt.Color("source:N", title="source"),
            tooltip=[alt.Tooltip("label:N"), alt.Tooltip("metric:N"), alt.Tooltip("value:Q", format=",.4g")],
        )
        .properties(width=150, height=140)
        .facet(facet=alt.Facet("metric:N", title=None, sort=shown), columns=FACET_COLUMNS)
        .resolve_scale(y="independent")
        .properties(title="Recovery levels and compaction stages: outcomes")
    )


def history_vs_cap_data(frames: Frames) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The two tables behind ``history_vs_cap_chart``.

    ``points``: one row per request (``request_index, turn, bytes, tokens, cap_bytes, outcome,
    rejected, purpose, session_id``). ``marks``: one row per applied compaction phase placed at the
    index of the next request (``request_index, phase, stage, trigger, freed_bytes, session_id``).
    """
    req = frames.requests
    points = req.select(
        "session_id",
        "request_index",
        "turn",
        "bytes",
        "tokens",
        "cap_bytes",
        "outcome",
        (pl.col("outcome") != "ok").alias("rejected"),
        "purpose",
    )
    comp = frames.compactions.filter((pl.col("outcome") == "applied") & ~pl.col("phase").is_in(list(_AGGREGATE_PHASES)))
    marks_rows: list[dict[str, Any]] = []
    by_session: dict[str, list[int]] = {}
    for sid, seq in req.select("session_id", "seq").iter_rows():
        by_session.setdefault(sid, []).append(seq)
    for row in comp.iter_rows(named=True):
        seqs = by_session.get(row["session_id"], [])
        marks_rows.append(
            {
                "session_id": row["session_id"],
                "request_index": sum(1 for s in seqs if s < row["seq"]),
                "phase": row["phase"],
                "stage": row["stage"],
                "trigger": row["trigger"],
                "freed_bytes": row["freed_bytes"],
            }
        )
    marks = pl.DataFrame(
        marks_rows,
        schema={
            "session_id": pl.String,
            "request_index": pl.Int64,
            "phase": pl.String,
            "stage": pl.String,
            "trigger": pl.String,
            "freed_bytes": pl.Int64,
        },
    )
    return points, marks


def history_vs_cap_chart(frames: Frames) -> alt.LayerChart:
    """Request bytes per attempt (line), the payload cap in force (dashed step line), rejected
    attempts (red crosses) and applied compactions (vertical rules, coloured by compaction stage
    with the dashboard's colours; the phase is in the tooltip)."""
    points, marks = history_vs_cap_data(frames)
    x = alt.X("request_index:Q", title="request")
    line = (
        alt.Chart(_data(points))
        .mark_line(point=True)
        .encode(
            x=x,
            y=alt.Y("bytes:Q", title="request bytes"),
            detail=alt.Detail("session_id:N"),
            tooltip=["request_index:Q", "turn:Q", "bytes:Q", "tokens:Q", "outcome:N", "purpose:N"],
        )
    )
    layers: list[alt.Chart] = [line]
    caps = points.drop_nulls("cap_bytes")
    if caps.height:
        layers.append(
            alt.Chart(_data(caps))
            .mark_line(strokeDash=[6, 4], color="gray", interpolate="step-after")
            .encode(x=x, y=alt.Y("cap_bytes:Q"), tooltip=["cap_bytes:Q"])
        )
    rejected = points.filter(pl.col("rejected"))
    if rejected.height:
        layers.append(
            alt.Chart(_data(rejected))
            .mark_point(shape="cross", size=120, color="red", filled=True)
            .encode(x=x, y=alt.Y("bytes:Q"), tooltip=["request_index:Q", "bytes:Q", "outcome:N"])
        )
    if marks.height:
        layers.append(
            alt.Chart(_data(marks))
            .mark_rule(strokeWidth=2, opacity=0.6)
            .encode(
                x=x,
                color=alt.Color(
                    "stage:N",
                    title="compaction stage",
                    scale=alt.Scale(domain=list(COMPACTION_STAGES), range=[STAGE_COLOURS[s] for s in COMPACTION_STAGES]),
                ),
                tooltip=["stage:N", "phase:N", "trigger:N", "freed_bytes:Q"],
            )
        )
    return alt.LayerChart(layer=layers, width=520, height=260, title="Request size vs payload cap")


def retention_chart(compactions: Frames | pl.DataFrame) -> alt.LayerChart:
    """Identifier retention of each compaction that measured it (points) and the mean per stage
    (ticks). Rows: compactions with a non-null ``identifier_retention``."""
    df = _pick(compactions, "compactions")
    _require(df, ("stage", "phase", "identifier_retention"), "retention_chart")
    rows = df.drop_nulls("identifier_retention").select("stage", "phase", "trigger", "identifier_retention", "seq")
    x = alt.X("stage:N", title="compaction stage", sort=list(COMPACTION_STAGES))
    y = alt.Y("identifier_retention:Q", title="identifier retention", scale=alt.Scale(domain=[0, 1]))
    base = alt.Chart(_data(rows))
    points = base.mark_circle(size=60, opacity=0.7).encode(
        x=x, y=y, color=alt.Color("phase:N"), tooltip=["phase:N", "trigger:N", "identifier_retention:Q"]
    )
    mean = base.mark_tick(thickness=3, size=30, color="black").encode(x=x, y=alt.Y("mean(identifier_retention):Q"))
    return alt.LayerChart(layer=[points, mean], width=300, height=220, title="Identifier retention per stage")


def prefix_reuse_chart(requests: Frames | pl.DataFrame) -> alt.Chart:
    """Share of the previous request body reused as prefix, per request (bars colored by
    purpose). Rows: requests with a non-null ``prefix_share``."""
    df = _pick(requests, "requests")
    _require(df, ("request_index", "prefix_share", "prefix_shared_bytes"), "prefix_reuse_chart")
    cols = ["session_id", "request_index", "turn", "prefix_share", "prefix_shared_bytes", "purpose", "outcome"]
    rows = df.drop_nulls("prefix_share").select([c for c in cols if c in df.columns])
    return (
        alt.Chart(_data(rows))
        .mark_bar()
        .encode(
            x=alt.X("request_index:O", title="request"),
            y=alt.Y("prefix_share:Q", title="prefix reused", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("purpose:N"),
            tooltip=["request_index:Q", "turn:Q", alt.Tooltip("prefix_share:Q", format=".1%"), "prefix_shared_bytes:Q"],
        )
        .properties(width=520, height=200, title="Prefix-cache reuse per request")
    )
