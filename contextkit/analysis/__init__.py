"""Analyses of session events: polars frames, summary tables and offline altair charts.

A leaf package: nothing in contextkit imports it, so ``import contextkit`` never loads polars or
altair. Typical use::

    from contextkit.analysis import frames, outcomes, outcome_intervals_chart, history_vs_cap_chart, save_chart
    f = frames(session.events)
    outcomes(f)                             # polars table per recovery level and compaction stage
    outcome_intervals_chart(f)              # the same over many sessions: means with 95% intervals
    save_chart(history_vs_cap_chart(f), "history.svg")
"""

from __future__ import annotations

from contextkit.errors import require_extra

require_extra("contextkit.analysis", "polars", "altair", "vl_convert")

from contextkit.analysis.charts import (
    OUTCOMES_SCHEMA,
    history_vs_cap_chart,
    history_vs_cap_data,
    outcomes,
    outcomes_chart,
    prefix_reuse_chart,
    retention_chart,
)
from contextkit.analysis.export import chart_png, chart_svg, enable_offline_renderer, save_chart
from contextkit.analysis.frames import (
    COMPACTIONS_SCHEMA,
    RECOVERIES_SCHEMA,
    REQUESTS_SCHEMA,
    Frames,
    frames,
    to_events,
)
from contextkit.analysis.intervals import (
    INTERVALS_SCHEMA,
    outcome_intervals_chart,
    outcomes_across_sessions,
    per_session_outcomes,
)

__all__ = [
    "COMPACTIONS_SCHEMA",
    "INTERVALS_SCHEMA",
    "OUTCOMES_SCHEMA",
    "RECOVERIES_SCHEMA",
    "REQUESTS_SCHEMA",
    "Frames",
    "chart_png",
    "chart_svg",
    "enable_offline_renderer",
    "frames",
    "history_vs_cap_chart",
    "history_vs_cap_data",
    "outcome_intervals_chart",
    "outcomes",
    "outcomes_across_sessions",
    "outcomes_chart",
    "per_session_outcomes",
    "prefix_reuse_chart",
    "retention_chart",
    "save_chart",
    "to_events",
]
