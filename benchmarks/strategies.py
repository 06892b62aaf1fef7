"""Benchmark: contextkit vs baselines on the gateway simulator.

128 KB gateway (Cloudflare-style 403 on oversize bodies), 32k-token model window, 20 seeded agent
sessions of 40 turns per strategy, each turn reading a 20-60 KB tool output. Prints one row per
strategy: completion rate, rejected requests, tokens sent relative to no management, prefix
reuse, needle accuracy (facts planted in tool outputs and asked about later). Exits 1 unless
contextkit's pipeline completes every session. Peers (other libraries): benchmarks/peers.py.

    python benchmarks/strategies.py [--seeds 20] [--turns 40] [--workers N] [--out results.parquet]
"""

from __future__ import annotations

import argparse
import sys
import time

import polars as pl

from contextkit.experiments import (
    BASELINES,
    CONTEXTKIT_STRATEGIES,
    GatewaySpec,
    default_executor,
    run_sweep,
    save_results,
)
from contextkit.experiments.summary import format_table, summarize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--out", default=None, help="also save the per-run results to this .parquet file")
    args = parser.parse_args(argv)
    gateway = GatewaySpec("128KB-waf403", context_window=32_000, max_body="128KB", reject_with="waf403")
    started = time.perf_counter()
    executor = default_executor(args.workers)
    try:
        results = run_sweep(CONTEXTKIT_STRATEGIES + BASELINES, [gateway], range(args.seeds), args.turns, executor=executor)
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    if args.out:
        save_results(results, args.out)
    summary = summarize(results)
    print(
        f"\n{args.seeds} sessions x {args.turns} turns per strategy, {gateway.name}, window {gateway.context_window} tokens"
    )
    print(
        "tokens/none: prompt tokens accepted by the provider, relative to no management (tok/turn: per completed turn)"
    )
    print("needles: share of needle questions answered with the planted fact; recoverable: tool outputs")
    print("still in context or recallable at the end\n")
    print(format_table(summary))
    errors = (
        results.filter(pl.col("error").is_not_null())
        .group_by("strategy", maintain_order=True)
        .agg(pl.col("error").first())
    )
    for strategy, error in errors.iter_rows():
        print(f"  {strategy}: e.g. {error[:150]}")
    print(f"\nwall time {time.perf_counter() - started:.0f} s")
    ck = summary.filter(summary["strategy"] == "contextkit").row(0, named=True)
    if ck["completion_rate"] != 1.0:
        print("FAIL: contextkit must complete every session", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from contextkit import offline

    offline()  # a benchmark owns its process: litellm's bundled cost map and tokenizers, no network
    sys.exit(main())
