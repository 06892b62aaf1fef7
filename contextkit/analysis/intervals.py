"""Outcomes per recovery level and compaction stage across many sessions (seeds), with 95% intervals.

One session gives one number per level or stage (n = 1): a student cannot tell a pattern from luck.
``outcomes_across_sessions(frames)`` computes ``outcomes`` for every session in the frames, then
summarises each metric per recovery level and per compaction stage over the sessions where it
fired: the mean, a 95% interval (Student's t on the per-session values; for the success rate a
Wilson interval on the pooled counts), and ``sessions`` (how many sessions contributed).
``outcome_intervals_chart`` draws means with interval bars, one panel per metric.

Cost is the ``cost`` of the requests sent at a recovery level and the summarizer cost of a
compaction stage — the providers' prices as recorded in the events (zero for a model without a
known price, such as the bundled simulator's, unless the session prices it as a real model with
``Session(price_as=...)``, as the README chart does).
"""

from __future__ import annotations

import math

import altair as alt
import polars as pl

from contextkit.analysis.charts import FACET_COLUMNS, _rows_in_order, outcomes
from contextkit.analysis.frames import Frames

__all__ = ["INTERVALS_SCHEMA", "outcome_intervals_chart", "outcomes_across_sessions", "per_session_outcomes"]

# two-sided 95% Student t quantiles by degrees of freedom (df > 30: the normal 1.96)
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip

METRICS = {
    "fired": "times fired per session",
    "success_rate": "success rate",
    "mean_bytes_freed": "bytes freed per use",
    "mean_latency_s": "seconds per use",
    "cost": "cost per session (USD)",
}

INTERVALS_SCHEMA = pl.Schema(
    {
        "source": pl.String,  # recovery | compaction
        "level": pl.Int64,  # the recovery level (1-3); null on compaction rows
        "stage": pl.String,  # the compaction stage (trim | summary | truncation); null on recovery rows
        "label": pl.String,
        "metric": pl.String,  # one of METRICS' values
        "sessions": pl.Int64,  # sessions in which the level or stage fired
        "mean": pl.Float64,
        "low": pl.Float64,
        "high": pl.Float64,
    }
)


def t95(df: int) -> float:
    return _T95[df - 1] if 1 <= df <= len(_T95) else 1.96


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and its 95% interval (t); a single value has no spread: (v, v, v)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t95(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float, float]:
    """Pooled success rate and its Wilson 95% interval (well-behaved at 0% and 100%)."""
    if trials == 0:
        return math.nan, math.nan, math.nan
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)  # exact ends, no float drift
    return p, low, high


def per_session_outcomes(frames: Frames) -> pl.DataFrame:
    """``outcomes`` of each session, with a ``session_id`` column."""
    ids = sorted(
        set(frames.requests["session_id"].to_list())
        | set(frames.compactions["session_id"].to_list())
        | set(frames.recoveries["session_id"].to_list())
    )
    parts = [
        outcomes(Frames(*(f.filter(pl.col("session_id") == sid) for f in frames))).with_columns(
            pl.lit(sid).alias("session_id")
        )
        for sid in ids
    ]
    if not parts:
        return outcomes(frames).with_columns(pl.lit("").alias("session_id")).head(0)
    return pl.concat(parts, how="vertical")


def outcomes_across_sessions(frames: Frames) -> pl.DataFrame:
    """Mean and 95% interval of each metric per recovery level and compaction stage over sessions
    (schema ``INTERVALS_SCHEMA``)."""
    per = per_session_outcomes(frames)
    rows = []
    for (source, level, stage), group in per.group_by("source", "level", "stage", maintain_order=True):
        label = group["label"][0]
        fired = group["fired"].to_list()
        succeeded = group["succeeded"].to_list()
        for metric, name in METRICS.items():
            if metric == "success_rate":
                mean, low, high = wilson(int(sum(succeeded)), int(sum(fired)))
            else:
                values = [float(v) for v in group[metric].to_list() if v is not None and not math.isnan(v)]
                if not values:
                    continue
                mean, low, high = mean_interval(values)
                low = max(0.0, low)  # every metric here is a count, size, time or price
            rows.append(
                {"source": source, "level": level, "stage": stage, "label": label, "metric": name, "sessions": group.height,
                 "mean": mean, "low": low, "high": high}
            )  # fmt: skip
    return _rows_in_order(pl.DataFrame(rows, schema=INTERVALS_SCHEMA))


def outcome_intervals_chart(table: Frames | pl.DataFrame) -> alt.FacetChart:
    """Mean per recovery level and compaction stage (points) with 95% interval bars, one panel per
    metric; ``n`` in the tooltip."""
    df = outcomes_across_sessions(table) if isinstance(table, Frames) else table
    missing = [c for c in INTERVALS_SCHEMA.names() if c not in df.columns]
    if missing:
        raise ValueError(f"outcome_intervals_chart needs columns {missing}; pass outcomes_across_sessions() output")
    # a metric that is zero everywhere (the cost of a session nobody priced) would be an empty panel
    shown = [m for m in METRICS.values() if df.filter((pl.col("metric") == m) & (pl.col("high") != 0)).height]
    data = alt.InlineData(values=df.drop_nans().filter(pl.col("metric").is_in(shown)).to_dicts())
    x = alt.X("label:N", title=None, sort=None)
    tooltip = [
        alt.Tooltip("label:N", title="level or stage"),
        alt.Tooltip("metric:N"),
        alt.Tooltip("mean:Q", format=",.3g"),
        alt.Tooltip("low:Q", title="95% interval from", format=",.3g"),
        alt.Tooltip("high:Q", title="to", format=",.3g"),
        alt.Tooltip("sessions:Q", title="sessions (n)"),
    ]
    bars = (
        alt.Chart()
        .mark_rule(strokeWidth=2)
        .encode(x=x, y=alt.Y("low:Q", title=None), y2="high:Q", color=alt.Color("source:N"))
    )
    points = alt.Chart().mark_point(filled=True, size=70).encode(x=x, y="mean:Q", color="source:N", tooltip=tooltip)
    n_sessions = max(df["sessions"].to_list(), default=0)
    return (
        alt.layer(bars, points, data=data)
        .properties(width=150, height=150)
        .facet(facet=alt.Facet("metric:N", title=None, sort=shown), columns=FACET_COLUMNS)
        .resolve_scale(y="independent")
        .properties(
            title=f"Recovery levels and compaction stages over up to {n_sessions} sessions: mean and 95% interval"
        )
    )
