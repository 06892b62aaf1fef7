"""Runs a grid is missing: rows without metrics (a run that crashed, never ran or stalled), named.

A grid whose averages leave runs out must not look like a finished one: ``describe_missing`` names
them, ``exit_status`` makes the experiment CLI and ``benchmarks/peers.py`` exit ``EXIT_MISSING``
unless the caller accepts a partial grid (``--allow-missing``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

__all__ = ["EXIT_MISSING", "MISSING_OUTCOMES", "describe_missing", "exit_status", "missing_runs"]

MISSING_OUTCOMES = ("crashed", "not_run")
EXIT_MISSING = 3  # the exit status of a grid with runs that crashed or never ran


def missing_runs(results: pl.DataFrame) -> pl.DataFrame:
    """The rows without metrics (crashed, never ran, stalled): ``run_id``, ``outcome``, ``error``."""
    import polars as pl

    gone = pl.col("outcome").is_in(list(MISSING_OUTCOMES)) | pl.col("error").str.starts_with("timeout: stalled").fill_null(False)
    return results.filter(gone).select("run_id", "outcome", "error", "lost_worker")


def describe_missing(results: pl.DataFrame, *, limit: int = 20) -> str:
    """A few lines naming the runs the grid is missing and why ("" when none)."""
    gone = missing_runs(results)
    if gone.is_empty():
        return ""
    lines = [f"{gone.height} of {results.height} runs are missing (no metrics; the averages leave them out):"]
    for r in gone.head(limit).iter_rows(named=True):
        lost = f" [worker {r['lost_worker']} lost]" if r["lost_worker"] else ""
        lines.append(f"  {r['run_id']}: {r['outcome']} - {(r['error'] or '')[:160]}{lost}")
    if gone.height > limit:
        lines.append(f"  ... and {gone.height - limit} more")
    return "\n".join(lines)


def exit_status(results: pl.DataFrame, *, allow_missing: bool = False) -> int:
    """0, or ``EXIT_MISSING`` after naming the missing runs on stderr (a grid whose averages leave
    runs out must not look like a finished one) unless ``allow_missing``."""
    text = describe_missing(results)
    if not text:
        return 0
    print("\n" + text, file=sys.stderr)
    if allow_missing:
        print("(--allow-missing: exiting 0 anyway)", file=sys.stderr)
        return 0
    print(f"exiting {EXIT_MISSING}: pass --allow-missing to accept a partial grid", file=sys.stderr)
    return EXIT_MISSING
