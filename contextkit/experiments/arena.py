"""The peer arena: a grid of cells where each limit binds, its summary table and verdicts.

A *cell* is one gateway + window: gateway cap none / 128 KB / 1 MB, rejected as a JSON 413, a
Cloudflare-style 403 page or a dropped connection, in front of a 32k or a 200k-token window. The
standard cell (128 KB Cloudflare-style gateway, 32k window) gets the most seeds; the others fewer.

    specs = grid_specs(ARENA_STRATEGIES, standard_seeds=20, other_seeds=3, turns=40)
    results = run_specs(specs, executor=client.get_executor())   # any Executor: dask, a process pool
    print(format_arena(summarize_arena(results)))
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from contextkit.experiments.registry import PEERS
from contextkit.experiments.runner import PRICE_AS, RunSpec
from contextkit.experiments.workload import GatewaySpec

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "ARENA_STRATEGIES",
    "STANDARD_CELL",
    "cells",
    "format_arena",
    "grid_specs",
    "summarize_arena",
    "verdicts",
]

ARENA_STRATEGIES = (
    "contextkit",
    "none",
    "sliding-window",
    "trim_messages",
    "langchain-summarization",
    "langchain-context-editing",
    "anthropic-clearing",
    "headroom",
    "openhands-condenser",
)
WINDOWS = {"32k": 32_000, "200k": 200_000}
CAPS: dict[str, str | None] = {"nocap": None, "128KB": "128KB", "1MB": "1MB"}
REJECTIONS = ("413", "waf403", "drop")
STANDARD_CELL = "128KB-waf403-32k"


def cells(windows: Iterable[str] = WINDOWS, caps: Iterable[str] = CAPS) -> list[GatewaySpec]:
    """Every (cap, rejection style, window) cell; a cell without a cap has one rejection style."""
    out = []
    for window in windows:
        for cap in caps:
            styles = ("413",) if CAPS[cap] is None else REJECTIONS
            for style in styles:
                name = f"{cap}-{window}" if CAPS[cap] is None else f"{cap}-{style}-{window}"
                out.append(GatewaySpec(name, context_window=WINDOWS[window], max_body=CAPS[cap], reject_with=style))
    return out


def grid_specs(
    strategies: Sequence[str],
    *,
    standard_seeds: int = 20,
    other_seeds: int = 3,
    turns: int = 40,
    other_turns: int | None = None,
    gateways: Sequence[GatewaySpec] | None = None,
    max_wall_s: float | None = None,
) -> list[RunSpec]:
    """Runs of the grid: ``standard_seeds`` in the standard cell, ``other_seeds`` elsewhere; each run
    stops at the first turn after ``max_wall_s`` seconds (its row says ``timeout``)."""
    out = []
    for gw in gateways if gateways is not None else cells():
        standard = gw.name == STANDARD_CELL
        seeds = standard_seeds if standard else other_seeds
        n = turns if standard or other_turns is None else other_turns
        out += [RunSpec(s, gw, seed, n, max_wall_s=max_wall_s) for seed in range(seeds) for s in strategies]
    return out


def summarize_arena(results: pl.DataFrame) -> pl.DataFrame:
    """One row per (cell, strategy): runs and how many the averages are ``based_on`` (a run that crashed or
    never ran has no metrics), completion rate, runs stopped by their wall-time budget
    (``timeouts``), needle accuracy (mean and its spread
    across seeds: min and max), rejected requests per session, prompt tokens, cost and summarizer
    calls per session, wall time per session; ``status`` says why a peer did not run."""
    import polars as pl

    return (
        results.group_by("gateway", "strategy", maintain_order=True)
        .agg(
            pl.len().alias("runs"),
            _measured(results).sum().alias("based_on"),
            pl.col("completed").cast(pl.Float64).mean().alias("completion"),
            (pl.col("outcome") == "timeout").sum().alias("timeouts"),
            pl.col("needle_accuracy").mean().alias("needles"),
            pl.col("needle_accuracy").min().alias("needles_min"),
            pl.col("needle_accuracy").max().alias("needles_max"),
            pl.col("rejected").cast(pl.Float64).mean().alias("rejected"),
            pl.col("tokens_sent").cast(pl.Float64).mean().alias("prompt_tokens"),
            pl.col("cost").mean().alias("cost"),
            pl.col("summarizer_calls").cast(pl.Float64).mean().alias("summaries"),
            pl.col("wall_s").mean().alias("wall_s"),
            pl.col("context_window").first(),
            pl.col("max_body").first(),
            pl.when(pl.col("note") == "unavailable").then(pl.col("error")).otherwise(None).first().alias("status"),
            pl.col("error").drop_nulls().first().alias("example_error"),
        )
        .with_columns(pl.col("status").str.replace("^not run: ", ""))
    )


def verdicts(summary: pl.DataFrame) -> dict[str, str]:
    """A one-line verdict per cell: who wins on completion, on needles, on cost (among the strategies
    that completed every run), with ties named; unavailable peers do not compete."""
    import polars as pl

    out: dict[str, str] = {}
    for (cell,), rows in summary.filter(pl.col("status").is_null()).group_by("gateway", maintain_order=True):
        done = rows.filter(pl.col("completion") == 1.0)
        best_c = _float(rows["completion"].max())
        best_n = _float(rows["needles"].max())
        parts = [
            f"completion: {_names(rows, 'completion', best_c)} ({_pct(best_c)})",
            f"needles: {_names(rows, 'needles', best_n)} ({_pct(best_n)})",
        ]
        if done.height:
            cheapest = _float(done["cost"].min()) or 0.0
            parts.append(f"cost among completers: {_names(done, 'cost', cheapest)} (${cheapest:.3f}/session)")
        else:
            parts.append("cost: no strategy completed every run")
        out[str(cell)] = "; ".join(parts)
    return out


def _names(rows: pl.DataFrame, column: str, value: Any) -> str:
    if value is None:
        return "-"
    hits = [r["strategy"] for r in rows.iter_rows(named=True) if r[column] is not None and abs(r[column] - value) < 1e-9]
    return hits[0] if len(hits) == 1 else " = ".join(hits)


def _runs(r: dict[str, Any]) -> str:
    """``"20"``, or ``"18 of 20"`` when the averages cover only some of the cell's runs."""
    based = r.get("based_on", r["runs"])
    return str(r["runs"]) if based == r["runs"] else f"{based} of {r['runs']}"


def _float(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) else None


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


VERDICT_WIDTH = 110


def format_arena(summary: pl.DataFrame, *, standard_first: bool = True) -> str:
    """The benchmark's text table: one block per cell, one line per strategy, then the verdict."""
    import polars as pl

    # per-session figures under short headers (the block's first line says so): the table must fit
    # a 1024 px slide without wrapping, so its lines stay within VERDICT_WIDTH characters
    headers = ("strategy", "runs", "complete", "needles", "rejected", "prompt tokens", "$", "summaries", "wall s")
    order = list(dict.fromkeys(summary["gateway"].to_list()))
    if standard_first and STANDARD_CELL in order:
        order.remove(STANDARD_CELL)
        order.insert(0, STANDARD_CELL)
    said = verdicts(summary)
    blocks = []
    for cell in order:
        rows = summary.filter(pl.col("gateway") == cell)
        first = rows.row(0, named=True)
        cap = "no cap" if first["max_body"] is None else f"cap {first['max_body']:,} B"
        lines: list[tuple[str, ...]] = []
        for r in rows.iter_rows(named=True):
            if r["status"] is not None:
                lines.append((r["strategy"], _runs(r), "not run: " + r["status"]))
                continue
            spread = "-" if r["needles"] is None else f"{r['needles']:.0%} ({r['needles_min']:.0%}-{r['needles_max']:.0%})"
            complete = _pct(r["completion"]) + (f" ({r['timeouts']} timed out)" if r.get("timeouts") else "")
            lines.append((
                r["strategy"], _runs(r), complete, spread, f"{r['rejected']:.2f}",
                f"{r['prompt_tokens']:,.0f}", f"{r['cost']:.3f}", f"{r['summaries']:.1f}", f"{r['wall_s']:.1f}",
            ))  # fmt: skip
        full = [row for row in lines if len(row) == len(headers)]
        widths = [max([len(h), *(len(row[i]) for row in full)]) for i, h in enumerate(headers)]
        fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
        text = [
            f"== {cell}: {cap}, {first['context_window']:,}-token window (per session; $ as {PRICE_AS})",
            fmt.format(*headers),
        ]
        for row in lines:
            text.append(fmt.format(*row) if len(row) == len(headers) else f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]}")
        # wrapped so the table and its verdict fit a 1280 px notebook or a projected slide
        text.append(textwrap.fill(f"verdict: {said.get(cell, 'no strategy ran')}", width=VERDICT_WIDTH, subsequent_indent="  "))
        blocks.append("\n".join(text))
    return "\n\n".join(blocks)


def peer_notes(results: pl.DataFrame) -> dict[str, str]:
    """How each peer was configured (library versions, middleware settings), from the runs' notes."""
    import polars as pl

    rows = results.filter(pl.col("strategy").is_in(list(PEERS)) & pl.col("note").is_not_null())
    return dict(rows.group_by("strategy", maintain_order=True).agg(pl.col("note").first()).iter_rows())


def _measured(results: pl.DataFrame) -> pl.Expr:
    """Rows with metrics: not a run that crashed or never ran (and, where the frame has it, one that
    sent requests)."""
    import polars as pl

    ran = ~pl.col("outcome").is_in(["crashed", "not_run"])
    return ran & pl.col("requests").is_not_null() if "requests" in results.columns else ran
