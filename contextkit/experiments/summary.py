"""Per-strategy summary of a sweep frame (the benchmark's printed table)."""

from __future__ import annotations

import polars as pl
import polars.selectors as cs

__all__ = ["SUMMARY_COLUMNS", "format_table", "summarize"]

SUMMARY_COLUMNS = (
    "strategy",
    "gateway",
    "runs",
    "based_on",
    "completion_rate",
    "rejected",
    "retries",
    "tokens_vs_none",
    "tokens_per_turn_vs_none",
    "summarizer_calls",
    "prefix_reuse",
    "needle_accuracy",
    "recoverable",
    "cost",
    "wall_s",
)


def summarize(results: pl.DataFrame) -> pl.DataFrame:
    """One row per (strategy, gateway): ``runs`` in the cell and how many the averages are ``based_on``
    (runs that crashed or never ran have no metrics: counted in ``runs``, not in ``based_on``), completion rate, total rejected requests, retries, tokens
    sent relative to ``none`` (total, and per completed turn), summarizer calls, mean prefix reuse,
    mean needle accuracy, mean recoverable share, mean cost per session, mean wall time. The ``*_vs_none`` columns are null when the sweep has no ``none`` runs."""
    per = results.group_by("strategy", "gateway", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("runs"),
        _measured(results).sum().cast(pl.Int64)
        .alias("based_on"),
        pl.col("completed").cast(pl.Float64).mean().alias("completion_rate"),
        pl.col("rejected").sum().cast(pl.Int64).alias("rejected"),
        pl.col("retries").sum().cast(pl.Int64).alias("retries"),
        pl.col("tokens_sent").sum().cast(pl.Float64).alias("_tokens"),
        pl.col("turns_completed").sum().cast(pl.Float64).alias("_turns"),
        pl.col("summarizer_calls").sum().cast(pl.Int64).alias("summarizer_calls"),
        pl.col("prefix_reuse").mean().alias("prefix_reuse"),
        pl.col("needle_accuracy").mean().alias("needle_accuracy"),
        pl.col("recoverable").mean().alias("recoverable"),
        pl.col("cost").mean().alias("cost"),
        pl.col("wall_s").mean().alias("wall_s"),
    )
    base = per.filter(pl.col("strategy") == "none").select(
        "gateway", pl.col("_tokens").alias("_none_tokens"), pl.col("_turns").alias("_none_turns")
    )
    out = per.join(base, on="gateway", how="left").with_columns(
        (pl.col("_tokens") / pl.col("_none_tokens")).alias("tokens_vs_none"),
        ((pl.col("_tokens") / pl.col("_turns")) / (pl.col("_none_tokens") / pl.col("_none_turns"))).alias(
            "tokens_per_turn_vs_none"
        ),
    )
    return out.select(SUMMARY_COLUMNS).with_columns(cs.float().fill_nan(None))


def _runs(r: dict[str, object]) -> str:
    """``"5"``, or ``"3 of 5"`` when the averages cover only some of the cell's runs."""
    based = r.get("based_on", r["runs"])
    return str(r["runs"]) if based == r["runs"] else f"{based} of {r['runs']}"


def format_table(summary: pl.DataFrame) -> str:
    """A fixed-width text table of ``summarize`` output (for the benchmark and the CLI)."""
    headers = ("strategy", "gateway", "runs", "complete", "rejected", "retries", "tokens/none", "tok/turn/none",
               "summaries", "prefix reuse", "needles", "recoverable", "$/session", "wall s")  # fmt: skip

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.0%}"

    def ratio(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    lines = []
    for r in summary.iter_rows(named=True):
        lines.append((
            r["strategy"], r["gateway"], _runs(r), pct(r["completion_rate"]), str(r["rejected"]),
            str(r["retries"]), ratio(r["tokens_vs_none"]), ratio(r["tokens_per_turn_vs_none"]),
            str(r["summarizer_calls"]), pct(r["prefix_reuse"]), pct(r["needle_accuracy"]), pct(r["recoverable"]),
            "-" if r["cost"] is None else f"{r['cost']:.3f}",
            "-" if r["wall_s"] is None else f"{r['wall_s']:.1f}",
        ))  # fmt: skip
    widths = [max(len(h), *(len(row[i]) for row in lines)) if lines else len(h) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join(
        [fmt.format(*headers), fmt.format(*("-" * w for w in widths)), *(fmt.format(*row) for row in lines)]
    )


def _measured(results: pl.DataFrame) -> pl.Expr:
    """Rows with metrics: not a run that crashed or never ran (and, where the frame has it, one that
    sent requests)."""
    import polars as pl

    ran = ~pl.col("outcome").is_in(["crashed", "not_run"])
    return ran & pl.col("requests").is_not_null() if "requests" in results.columns else ran
