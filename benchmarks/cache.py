"""Benchmark: what context management costs with a provider prompt cache.

Runs agent workloads against the gateway simulator, whose prompt cache (``contextkit.sim.cache``)
reports cached and newly cached prompt tokens like real providers, under four strategies:

* ``contextkit``            - this version: pressure-gated, batched rewrites (+ cache breakpoints
                              on the Anthropic route);
* ``contextkit-always-on``  - contextkit before pressure gating (``Limits(pressure_trigger=0)``, no
                              breakpoints): microcompact rewrites old tool results on every request;
* ``none``                  - no management;
* ``anthropic-clearing``    - Anthropic-style context editing (``policy/clearing.py``), re-applied to
                              the full history before every request as the server does.

Scenarios (each over the sweep's seeds):

* ``no-pressure`` - the standard agent workload (20-60 KB tool outputs) with no cap and a
  1M-token window: the history stays below the trigger;
* ``moderate``    - 32k window, 128 KB gateway, every turn reads a different ~6 KB file;
* ``standard``    - the strategies sweep: 32k window, 128 KB gateway (Cloudflare-style 403).

Routes: ``openai`` (the provider caches every prefix automatically, like OpenAI) and ``anthropic``
(caching only at ``cache_control`` breakpoints: contextkit places its own, the baselines get
litellm's ``cache_control_injection_points`` on the system prompt and the last message, the
always-on baseline none - it had no breakpoints). Every figure comes from the simulator's request
log, the same way for every strategy: a request is *append-only* when the previous accepted turn
request is a prefix of it (block by block, ``cache_control`` ignored), a *cache break* otherwise;
cost is litellm's cost map for ``--price`` (cache reads at ``cache_read_input_token_cost``, newly
cached tokens at ``cache_creation_input_token_cost`` on the Anthropic route only: providers that
cache automatically bill no writes and report none; summary requests included).

    python benchmarks/cache.py [--seeds 20] [--turns 40] [--workers N] [--routes openai,anthropic]
                               [--scenarios no-pressure,moderate,standard] [--price anthropic/claude-sonnet-4-5]

Prints one row per (scenario, route, strategy) and the acceptance bars (``bars``); exits 1 when a bar fails.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import itertools
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from contextkit.experiments import GatewaySpec, Workload, default_executor

STRATEGIES = ("contextkit", "contextkit-always-on", "none", "anthropic-clearing")
BASELINES = ("none", "anthropic-clearing")
PRICE = "anthropic/claude-sonnet-4-5"
SCENARIOS: dict[str, tuple[GatewaySpec, str, int]] = {  # gateway, workload kind, tool-output size
    "no-pressure": (GatewaySpec("no-cap-1M", context_window=1_000_000, max_body=None, reject_with="413"), "agent", 40_000),
    "moderate": (GatewaySpec("128KB-413", context_window=32_000, max_body="128KB", reject_with="413"), "reads", 6_000),
    "standard": (GatewaySpec("128KB-waf403", context_window=32_000, max_body="128KB", reject_with="waf403"), "agent", 40_000),
}  # fmt: skip
INJECT = [{"location": "message", "role": "system"}, {"location": "message", "index": -1}]


class DistinctReads(Workload):
    """Every turn reads a different file of about ``target_bytes`` (the moderate-pressure workload).
    No needle questions: the plan below replaces the turns that would plant them, and a question about
    a fact never planted sends the model searching the archive on every question turn."""

    def __post_init__(self) -> None:
        self.needles_wanted = 0
        super().__post_init__()
        self.plan = [("read_file", {"path": f"src/pkg{self.seed}/module_{i:02d}.py"}) for i in range(self.turns)]


class _Route:
    """The simulator as a strategy sees it through one route (``run_strategy`` asks it for kwargs)."""

    def __init__(self, sim: Any, route: str, inject: bool) -> None:
        self._sim, self._route, self._inject = sim, route, inject

    def litellm_kwargs(self, route: str | None = None) -> dict[str, Any]:
        kwargs = self._sim.litellm_kwargs(route or self._route)
        if self._inject:
            kwargs["cache_control_injection_points"] = INJECT
        return kwargs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sim, name)


@dataclass(frozen=True)
class CacheRun:
    scenario: str
    route: str
    strategy: str
    seed: int
    turns: int
    price: str


def run_one(spec: CacheRun) -> dict[str, Any]:
    """One workload under one strategy on a fresh simulator; metrics from its request log."""
    from contextkit import backend
    from contextkit.experiments.registry import run_strategy
    from contextkit.sim import GatewaySimulator
    from contextkit.sim.wire import prompt_blocks

    backend.litellm()
    gw, kind, size = SCENARIOS[spec.scenario]
    cls = DistinctReads if kind == "reads" else Workload
    workload = cls(spec.seed, spec.turns, target_bytes=size)
    started = time.perf_counter()
    with GatewaySimulator(record_bodies=True, **gw.simulator_kwargs()) as sim:
        view = _Route(sim, spec.route, inject=spec.route == "anthropic" and spec.strategy in BASELINES)
        run = run_strategy(spec.strategy, workload, gw, view, f"{spec.strategy}.{spec.scenario}.s{spec.seed}")
        records = [r for r in sim.requests if r.accepted]
        digests = [
            [b.digest for b in prompt_blocks(r.route, json.loads(sim.body(r.seq)))] for r in records if r.kind == "turn"
        ]
    pairs = [len(a) <= len(b) and (not a or b[len(a) - 1] == a[-1]) for a, b in itertools.pairwise(digests)]
    cost = sum(
        backend.request_cost(
            spec.price, prompt_tokens=r.tokens, completion_tokens=r.completion_tokens,
            cached_tokens=r.cached_tokens, cache_write_tokens=r.cache_write_tokens if r.route == "anthropic" else 0,
        )
        for r in records
    )  # fmt: skip
    return {
        "scenario": spec.scenario, "route": spec.route, "strategy": spec.strategy, "seed": spec.seed,
        "completed": run.error is None and run.turns_completed == spec.turns, "turns": run.turns_completed,
        "error": run.error, "pairs": len(pairs), "append_only": sum(pairs), "breaks": len(pairs) - sum(pairs),
        "prompt_tokens": sum(r.tokens for r in records), "cached_tokens": sum(r.cached_tokens for r in records),
        "write_tokens": sum(r.cache_write_tokens for r in records), "cost": cost,
        "wall_s": time.perf_counter() - started,
    }  # fmt: skip


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["scenario"], row["route"], row["strategy"]), []).append(row)
    out = []
    for (scenario, route, strategy), runs in groups.items():
        pairs = sum(r["pairs"] for r in runs)
        prompt = sum(r["prompt_tokens"] for r in runs)
        out.append({
            "scenario": scenario, "route": route, "strategy": strategy, "runs": len(runs),
            "complete": sum(r["completed"] for r in runs) / len(runs),
            "append_only": sum(r["append_only"] for r in runs) / pairs if pairs else None,
            "breaks_mean": sum(r["breaks"] for r in runs) / len(runs), "breaks_max": max(r["breaks"] for r in runs),
            "cached": sum(r["cached_tokens"] for r in runs) / prompt if prompt else None,
            "tokens": prompt, "cost": sum(r["cost"] for r in runs), "error": next((r["error"] for r in runs if r["error"]), None),
        })  # fmt: skip
    return out


def table(summary: list[dict[str, Any]]) -> str:
    base = {(s["scenario"], s["route"]): s["cost"] for s in summary if s["strategy"] == "contextkit-always-on"}
    head = ("scenario", "route", "strategy", "runs", "complete", "append-only", "breaks/run", "max", "cached",
            "prompt tok", "cost $", "vs always-on")  # fmt: skip
    lines = []
    for s in summary:
        old = base.get((s["scenario"], s["route"]))
        lines.append((
            s["scenario"], s["route"], s["strategy"], str(s["runs"]), f"{s['complete']:.0%}",
            "-" if s["append_only"] is None else f"{s['append_only']:.1%}", f"{s['breaks_mean']:.1f}",
            str(s["breaks_max"]), "-" if s["cached"] is None else f"{s['cached']:.0%}", f"{s['tokens']:,}",
            f"{s['cost']:.2f}", f"{s['cost'] / old - 1:+.0%}" if old else "-",
        ))  # fmt: skip
    widths = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 3 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in lines)])


def bars(summary: list[dict[str, Any]]) -> list[tuple[str, bool, str]]:
    """The acceptance bars (what the pressure-gated default must beat), per route present in the run."""
    pick = {(s["scenario"], s["route"], s["strategy"]): s for s in summary}
    out: list[tuple[str, bool, str]] = []
    for route in dict.fromkeys(s["route"] for s in summary):
        ck = pick.get(("no-pressure", route, "contextkit"))
        if ck and ck["append_only"] is not None:
            out.append(
                (f"[{route}] no pressure: >= 99% append-only", ck["append_only"] >= 0.99, f"{ck['append_only']:.1%}")
            )
        ck = pick.get(("moderate", route, "contextkit"))
        if ck:
            ok = ck["complete"] == 1 and ck["breaks_max"] <= 5
            out.append((f"[{route}] moderate: every turn completes, <= 5 cache breaks in 40 turns", ok,
                        f"complete {ck['complete']:.0%}, breaks max {ck['breaks_max']} (mean {ck['breaks_mean']:.1f})"))  # fmt: skip
        ck, old = pick.get(("standard", route, "contextkit")), pick.get(("standard", route, "contextkit-always-on"))
        clear = pick.get(("standard", route, "anthropic-clearing"))
        if ck:
            out.append((f"[{route}] standard: completion 100%", ck["complete"] == 1, f"{ck['complete']:.0%}"))
        if ck and old:
            out.append((f"[{route}] standard: cost >= 25% below contextkit-always-on", ck["cost"] <= 0.75 * old["cost"],
                        f"${ck['cost']:.2f} vs ${old['cost']:.2f} ({ck['cost'] / old['cost'] - 1:+.0%})"))  # fmt: skip
        if ck and clear:
            out.append((f"[{route}] standard: cost not above anthropic-clearing", ck["cost"] <= clear["cost"],
                        f"${ck['cost']:.2f} vs ${clear['cost']:.2f} (clearing complete {clear['complete']:.0%})"))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--routes", default="openai,anthropic")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--price", default=PRICE, help="litellm model whose prices (cache included) apply")
    args = parser.parse_args(argv)
    from contextkit import backend

    if not backend.is_priced(args.price):
        parser.error(f"--price {args.price!r} is not in litellm's cost map")
    routes = [r for r in args.routes.split(",") if r]
    scenarios = [s for s in args.scenarios.split(",") if s]
    strategies = [s for s in args.strategies.split(",") if s]
    unknown = sorted({*routes} - {"openai", "anthropic"}) + sorted({*scenarios} - set(SCENARIOS))
    unknown += sorted({*strategies} - set(STRATEGIES))
    if unknown:
        parser.error(f"unknown route/scenario/strategy: {', '.join(unknown)}")
    specs = [
        CacheRun(scenario, route, strategy, seed, args.turns, args.price)
        for scenario in scenarios for route in routes for seed in range(args.seeds) for strategy in strategies
    ]  # fmt: skip
    started = time.perf_counter()
    executor = default_executor(args.workers)
    rows: list[dict[str, Any]] = []
    try:
        futures = [executor.submit(run_one, spec) for spec in specs]
        for n, future in enumerate(cf.as_completed(futures), 1):
            rows.append(future.result())
            print(f"\r{n}/{len(specs)} runs", end="", file=sys.stderr, flush=True)
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    print(file=sys.stderr)
    order = {(sc, ro, st): i for i, (sc, ro, st) in enumerate(
        (sc, ro, st) for sc in scenarios for ro in routes for st in strategies)}  # fmt: skip
    summary = sorted(summarize(rows), key=lambda s: order[(s["scenario"], s["route"], s["strategy"])])
    print(f"\n{args.seeds} seeds x {args.turns} turns per scenario and strategy; priced as {args.price}")
    print("append-only: consecutive accepted turn requests where the previous one is a prefix of the next;")
    print("breaks/run: the others; cached: prompt tokens read from the prompt cache; cost: all accepted requests\n")
    print(table(summary))
    for s in summary:
        if s["error"] and s["strategy"] not in ("none",):
            print(f"  {s['scenario']}/{s['route']}/{s['strategy']}: e.g. {s['error'][:150]}")
    print("\nbars:")
    results = bars(summary)
    for name, ok, detail in results:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}: {detail}")
    print(f"\nwall time {time.perf_counter() - started:.0f} s")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    from contextkit import offline

    offline()  # a benchmark owns its process: litellm's bundled cost map and tokenizers, no network
    sys.exit(main())
