"""Named sweeps, the self-contained HTML report, and ``contextkit experiment NAME --out DIR``.

The report embeds every chart as inline SVG rendered by vl-convert: it opens offline, with no
CDN and no JavaScript.
"""

from __future__ import annotations

import argparse
import html
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

from contextkit.analysis.charts import metrics_long
from contextkit.experiments.registry import BASELINES, CONTEXTKIT_STRATEGIES
from contextkit.experiments.runner import EXIT_MISSING, default_executor, exit_status, run_sweep, save_results
from contextkit.experiments.summary import format_table, summarize
from contextkit.experiments.workload import GatewaySpec

BUILTIN = CONTEXTKIT_STRATEGIES + BASELINES

__all__ = ["SWEEPS", "Sweep", "build_report", "run_experiment_cli", "strategy_chart"]


@dataclass(frozen=True)
class Sweep:
    description: str
    strategies: tuple[str, ...] = BUILTIN  # peers: benchmarks/peers.py
    gateways: tuple[GatewaySpec, ...] = (GatewaySpec(),)
    seeds: int = 2
    turns: int = 6


SWEEPS: dict[str, Sweep] = {
    "smoke": Sweep("every strategy, 2 seeds x 6 turns, 128 KB WAF gateway, 32k window", seeds=2, turns=6),
    "strategies": Sweep("every strategy, 20 seeds x 40 turns, 128 KB WAF gateway, 32k window", seeds=20, turns=40),
    "gateways": Sweep(
        "contextkit vs none across gateway caps and rejection styles, 5 seeds x 30 turns",
        strategies=("contextkit", "contextkit-learned-cap", "none"),
        gateways=(
            GatewaySpec("24KB-413", max_body="24KB", reject_with="413"),
            GatewaySpec("128KB-waf403", max_body="128KB", reject_with="waf403"),
            GatewaySpec("256KB-drop", max_body="256KB", reject_with="drop"),
        ),
        seeds=5,
        turns=30,
    ),
}

_STRATEGY_METRICS = {
    "completion_rate": "completion rate",
    "rejected": "rejected requests",
    "tokens_per_turn_vs_none": "tokens per turn vs none",
    "prefix_reuse": "prefix reuse",
    "needle_accuracy": "needle accuracy",
    "recoverable": "tool outputs recoverable",
}


def strategy_chart(summary: pl.DataFrame) -> alt.FacetChart:
    """Bars per strategy for the headline metrics of ``summarize`` output, one panel per metric."""
    long = metrics_long(summary, ["strategy", "gateway"], _STRATEGY_METRICS)
    return (
        alt.Chart(alt.InlineData(values=long.to_dicts()))
        .mark_bar()
        .encode(
            x=alt.X("strategy:N", sort=list(BUILTIN), title=None),
            y=alt.Y("value:Q", title=None),
            color=alt.Color("gateway:N"),
            xOffset=alt.XOffset("gateway:N"),
            tooltip=["strategy:N", "gateway:N", "metric:N", alt.Tooltip("value:Q", format=",.3g")],
        )
        .properties(width=150, height=150)
        .facet(facet=alt.Facet("metric:N", title=None, sort=list(_STRATEGY_METRICS.values())), columns=3)
        .resolve_scale(y="independent")
        .properties(title="Strategies side by side")
    )


def _table_html(df: pl.DataFrame) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
        return html.escape(str(v))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in df.iter_rows())
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _first_run(frames: Any, results: pl.DataFrame, strategy: str) -> Any:
    from contextkit.analysis import Frames

    ids = results.filter(pl.col("strategy") == strategy)["run_id"].to_list()
    if not ids:
        return None
    run = ids[0]
    return run, Frames(*(f.filter(pl.col("session_id") == run) for f in frames))


def build_report(
    results: pl.DataFrame, events: Sequence[dict[str, Any]], *, title: str = "contextkit experiment"
) -> str:
    """A self-contained HTML page: summary table, strategy chart, outcomes per recovery level and
    compaction stage of the contextkit runs (means over runs with 95% intervals), and request size /
    prefix reuse of one contextkit run and one baseline run."""
    from contextkit.analysis import (
        chart_svg,
        frames,
        history_vs_cap_chart,
        outcome_intervals_chart,
        outcomes,
        prefix_reuse_chart,
        retention_chart,
    )

    summary = summarize(results)
    all_frames = frames(events)
    ck_ids = results.filter(pl.col("strategy").is_in(list(CONTEXTKIT_STRATEGIES)))["run_id"].to_list()
    from contextkit.analysis import Frames

    ck = Frames(*(f.filter(pl.col("session_id").is_in(ck_ids)) for f in all_frames))
    ck_outcomes = outcomes(ck)
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{results.height} runs, generated {html.escape(time.strftime('%Y-%m-%d %H:%M:%S'))}.</p>",
        "<h2>Summary per strategy</h2>",
        _table_html(summary),
        chart_svg(strategy_chart(summary)),
        "<h2>Recovery levels and compaction stages (contextkit runs)</h2>",
        _table_html(ck_outcomes),
        chart_svg(outcome_intervals_chart(ck)),  # per session, means with 95% intervals over the runs
        chart_svg(retention_chart(ck)),
    ]
    for strategy in ("contextkit", "none", "sliding-window"):
        picked = _first_run(all_frames, results, strategy)
        if picked is None:
            continue
        run, f = picked
        parts += [
            f"<h2>One run: {html.escape(run)}</h2>",
            chart_svg(history_vs_cap_chart(f)),
            chart_svg(prefix_reuse_chart(f)),
        ]
    parts += ["<h2>All runs</h2>", _table_html(results)]
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;font-size:12px;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}svg{display:block;margin:1em 0}"
    )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>"
    )


@dataclass
class _Args:
    name: str = ""
    out: str = ""
    seeds: int | None = None
    turns: int | None = None
    workers: int | None = None
    quiet: bool = False
    allow_missing: bool = False


def _parser() -> argparse.ArgumentParser:
    lines = "\n".join(f"  {name:<11} {sweep.description}" for name, sweep in SWEEPS.items())
    parser = argparse.ArgumentParser(
        prog="contextkit experiment",
        description="Run a named strategy sweep on the gateway simulator; write results.parquet and report.html.",
        epilog=f"sweeps:\n{lines}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", choices=sorted(SWEEPS), help="which sweep to run")
    parser.add_argument("--out", default=None, help="output folder (default: experiments/NAME)")
    parser.add_argument("--seeds", type=int, default=None, help="override the number of seeds")
    parser.add_argument("--turns", type=int, default=None, help="override the number of turns per session")
    parser.add_argument("--workers", type=int, default=None, help="local worker processes (default: up to 4)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help=f"exit 0 even when runs crashed or never ran (default: exit {EXIT_MISSING}, naming them)",
    )
    return parser


def run_experiment_cli(argv: Sequence[str] | None = None) -> int:
    """``contextkit experiment NAME --out DIR``: run the sweep, write the Parquet and the report."""
    args = _parser().parse_args(list(argv) if argv is not None else None, namespace=_Args())
    sweep = SWEEPS[args.name]
    seeds = args.seeds if args.seeds is not None else sweep.seeds
    turns = args.turns if args.turns is not None else sweep.turns
    for flag, value in (("--seeds", seeds), ("--turns", turns), ("--workers", args.workers)):
        if value is not None and value < 1:
            print(f"contextkit experiment: {flag} must be >= 1, got {value}", file=sys.stderr)
            return 2
    out = Path(args.out or f"experiments/{args.name}")
    events: list[dict[str, Any]] = []
    executor = default_executor(args.workers)
    try:
        results = run_sweep(
            sweep.strategies, sweep.gateways, range(seeds), turns,
            executor=executor, progress=not args.quiet, events=events,
        )  # fmt: skip
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    parquet = save_results(results, out / "results.parquet")
    report = out / "report.html"
    report.write_text(build_report(results, events, title=f"contextkit experiment: {args.name}"), encoding="utf-8")
    print(format_table(summarize(results)))
    print(f"\nwrote {parquet} and {report}")
    return exit_status(results, allow_missing=args.allow_missing)
