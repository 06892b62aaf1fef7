"""Sweeps: strategies × gateways × seeds, each run against its own simulator, on any Executor.

``run_one(RunSpec)`` is a picklable top-level function: it starts a fresh ``GatewaySimulator``
(its own port, its own request log), runs one workload under one strategy and returns a flat
metrics dict. ``run_sweep`` fans the runs out over a ``concurrent.futures.Executor`` — a local
process pool by default, or e.g. ``dask.distributed.Client(...).get_executor()`` — and returns a
polars frame with ``RESULTS_SCHEMA``.

Metrics come from the simulator's own request log, so every strategy is measured the same way:
``requests``/``rejected``/``bytes_sent`` count every body on the wire (rejected ones too),
``tokens_sent`` the prompt tokens of accepted requests (what a provider bills),
``summarizer_calls`` the summary requests, ``prefix_reuse`` the mean share of each turn request's
body that repeats the previous one byte for byte (``contextkit.prompt.prefix``). ``needle_accuracy`` is
the share of the workload's needle questions answered with the planted fact (a question never
reached counts as wrong; ``needle_recalls`` of the correct ones needed a retrieval call).
``recoverable`` is the share of all tool outputs that are still in the final context or
recallable from it (reachable through markers). ``cost`` prices every accepted request of the log
(turns and summaries, contextkit's and the peers' alike) as ``PRICE_AS``, a real model, with
``backend.request_cost``: its input, cached-input, cache-write and output prices from litellm's cost
map, applied to the tokens the simulator's prompt cache billed.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextkit.experiments.missing import EXIT_MISSING, describe_missing, exit_status, missing_runs
from contextkit.experiments.progress import make_progress
from contextkit.experiments.registry import BASELINES, STRATEGIES, run_strategy
from contextkit.experiments.strategies import PRICE_AS
from contextkit.experiments.workload import GatewaySpec, Workload

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "EXIT_MISSING",
    "PRICE_AS",
    "RESULTS_COLUMNS",
    "RunSpec",
    "describe_missing",
    "exit_status",
    "load_results",
    "missing_runs",
    "results_schema",
    "run_one",
    "run_specs",
    "run_sweep",
    "save_results",
]


_AGGREGATE_PHASES = ("start", "done")


@dataclass(frozen=True)
class RunSpec:
    """One run: a strategy on a gateway with a seeded workload of ``turns`` turns."""

    strategy: str
    gateway: GatewaySpec
    seed: int
    turns: int
    target_bytes: int = 40_000
    keep_events: bool = False
    max_wall_s: float | None = None  # the run's wall-time budget: no turn starts after it ("timeout")

    @property
    def run_id(self) -> str:
        return f"{self.strategy}.{self.gateway.name}.s{self.seed}"


RESULTS_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "strategy": "str",
    "gateway": "str",
    "context_window": "i64",
    "max_body": "i64",
    "reject_with": "str",
    "seed": "i64",
    "turns": "i64",
    "completed": "bool",
    "outcome": "str",
    "turns_completed": "i64",
    "requests": "i64",
    "rejected": "i64",
    "retries": "i64",
    "bytes_sent": "i64",
    "tokens_sent": "i64",
    "summarizer_calls": "i64",
    "summarizer_cost": "f64",
    "prefix_reuse": "f64",
    "archived_items": "i64",
    "needles_planned": "i64",
    "needles_correct": "i64",
    "needle_recalls": "i64",
    "needle_accuracy": "f64",
    "recoverable": "f64",
    "cached_tokens": "i64",
    "cost": "f64",
    "compactions": "i64",
    "recoveries": "i64",
    "wall_s": "f64",
    "error": "str",
    "note": "str",
    "worker": "str",
    "lost_worker": "str",
}


def results_schema() -> pl.Schema:
    """``RESULTS_COLUMNS`` as a ``polars.Schema``."""
    import polars as pl

    dtypes = {"str": pl.String, "i64": pl.Int64, "f64": pl.Float64, "bool": pl.Boolean}
    return pl.Schema({name: dtypes[kind] for name, kind in RESULTS_COLUMNS.items()})


def _prefix_samples(sim: Any) -> list[Any]:
    """PrefixProbe readings over the turn requests the simulator received, in order."""
    from contextkit.prompt.prefix import PrefixProbe

    probe = PrefixProbe()
    return [probe.feed(sim.body(r.seq)) for r in sim.requests if r.kind == "turn"]


def _with_prefix(events: list[Any], samples: list[Any]) -> list[Any]:
    """Baselines do not probe their own bodies: fill their request events from the wire."""
    from dataclasses import replace

    from contextkit.events import RequestEvent

    requests = [i for i, e in enumerate(events) if isinstance(e, RequestEvent)]
    if len(requests) != len(samples):
        return events
    out = list(events)
    for i, sample in zip(requests, samples, strict=True):
        out[i] = replace(out[i], prefix_shared_bytes=sample.shared_bytes, prefix_share=sample.share)
    return out


def _warm_up(strategy: str) -> None:
    """Import litellm, the session and a peer's library before timing: a fresh worker spends seconds on it."""
    import importlib

    from contextkit import backend
    from contextkit.session.core import Session  # noqa: F401 - the import is the point

    backend.litellm()
    module = {"langchain-summarization": "langchain.agents", "langchain-context-editing": "langchain.agents",
              "headroom": "headroom"}.get(strategy)  # fmt: skip
    if module is not None:
        try:
            importlib.import_module(module)
        except ImportError:
            pass  # the run itself reports why the peer cannot run


def price(records: list[Any], model: str = PRICE_AS) -> tuple[int, float]:
    """(cached prompt tokens, dollars) of the accepted requests in ``records`` (turns and summaries
    alike), each priced as ``model`` by ``backend.request_cost``: litellm's cost map with its cache
    prices, from the tokens the simulator billed (prompt, cached, cache-written and completion)."""
    from contextkit import backend

    accepted = [r for r in records if r.accepted]
    cost = sum(
        backend.request_cost(
            model,
            prompt_tokens=r.tokens,
            completion_tokens=int(getattr(r, "completion_tokens", 0) or 0),
            cached_tokens=int(getattr(r, "cached_tokens", 0) or 0),
            cache_write_tokens=int(getattr(r, "cache_write_tokens", 0) or 0),
        )
        for r in accepted
    )
    return sum(int(getattr(r, "cached_tokens", 0) or 0) for r in accepted), cost


def run_one(spec: RunSpec) -> dict[str, Any]:
    """Run one workload under one strategy against a fresh simulator; a flat metrics dict.

    With ``spec.keep_events`` the dict also has ``events``: the run's event dicts
    (``session_id`` = ``run_id``), ready for ``contextkit.analysis.frames``.
    """
    from contextkit.events import CompactionEvent, RecoveryEvent
    from contextkit.sim import GatewaySimulator
    from contextkit.sizing import parse_size

    if spec.strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {spec.strategy!r}; use one of {', '.join(STRATEGIES)}")
    gw = spec.gateway
    _warm_up(spec.strategy)
    started = time.perf_counter()
    deadline = None if spec.max_wall_s is None else time.monotonic() + spec.max_wall_s
    workload = Workload(spec.seed, spec.turns, target_bytes=spec.target_bytes, deadline=deadline)
    with GatewaySimulator(record_bodies=True, **gw.simulator_kwargs()) as sim:
        run = run_strategy(spec.strategy, workload, gw, sim, spec.run_id)
        wall = time.perf_counter() - started
        records = sim.requests
        samples = _prefix_samples(sim)
    shares = [x.share for x in samples if x.share is not None]
    reuse = sum(shares) / len(shares) if shares else None
    if spec.strategy in BASELINES:
        run.events = _with_prefix(run.events, samples)
    accepted = [r for r in records if r.accepted]
    needles = workload.score(run.replies)
    cached, cost = price(records)
    row: dict[str, Any] = {
        "run_id": spec.run_id,
        "strategy": spec.strategy,
        "gateway": gw.name,
        "context_window": gw.context_window,
        "max_body": None if gw.max_body is None else parse_size(gw.max_body, what="max_body"),
        "reject_with": gw.reject_with,
        "seed": spec.seed,
        "turns": spec.turns,
        "completed": run.error is None and run.turns_completed == spec.turns,
        "outcome": _outcome(run, spec),
        "turns_completed": run.turns_completed,
        "requests": len(records),
        "rejected": len(records) - len(accepted),
        "retries": run.retries,
        "bytes_sent": sum(r.bytes for r in records),
        "tokens_sent": sum(r.tokens for r in accepted),
        "summarizer_calls": sum(1 for r in records if r.kind == "summary"),
        "summarizer_cost": run.summarizer_cost,
        "prefix_reuse": reuse,
        "archived_items": run.archived_items,
        "needles_planned": needles.planned,
        "needles_correct": needles.correct,
        "needle_recalls": needles.recalled,
        "needle_accuracy": needles.accuracy,
        "recoverable": run.recoverable,
        "cached_tokens": cached,
        "cost": cost,
        "compactions": sum(
            1
            for e in run.events
            if isinstance(e, CompactionEvent) and e.outcome == "applied" and e.phase not in _AGGREGATE_PHASES
        ),
        "recoveries": sum(1 for e in run.events if isinstance(e, RecoveryEvent)),
        "wall_s": wall,
        "error": run.error,
        "note": run.note,
        "worker": worker_name(),
    }
    if spec.keep_events:
        row["events"] = [e.to_dict() for e in run.events]
    return row


def _run_one_offline(spec: RunSpec) -> dict[str, Any]:
    """What a sweep's workers run when its caller called ``contextkit.offline()``: a worker process
    inherits the environment that call set, not litellm kept quiet, so it calls it too."""
    from contextkit import backend

    backend.offline()
    return run_one(spec)


def worker_name() -> str:
    """Where this run ran: the dask worker's address, else host:pid."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        import socket

        return f"{socket.gethostname()}:{os.getpid()}"


def _outcome(run: Any, spec: RunSpec) -> str:
    """completed | failed (a request or the strategy failed) | timeout (the wall-time budget ran out)
    | unavailable (a peer that cannot run here)."""
    if run.note == "unavailable":
        return "unavailable"
    if run.error is None and run.turns_completed == spec.turns:
        return "completed"
    return "timeout" if (run.error or "").startswith("timeout:") else "failed"


def crash_row(spec: RunSpec, exc: BaseException) -> dict[str, Any]:
    """The row of a run that raised (a bug or a broken worker): not completed, ``error`` says why."""
    row: dict[str, Any] = dict.fromkeys(RESULTS_COLUMNS)
    row.update(
        run_id=spec.run_id, strategy=spec.strategy, gateway=spec.gateway.name, context_window=spec.gateway.context_window,
        reject_with=spec.gateway.reject_with, seed=spec.seed, turns=spec.turns, completed=False, outcome="crashed",
        turns_completed=0,
        error=f"crashed: {type(exc).__name__}: {exc}"[:2000],
    )  # fmt: skip
    return row


def stalled_row(spec: RunSpec, waited_s: float) -> dict[str, Any]:
    """The row of a run still pending when the sweep stalled (no run finished for ``waited_s``)."""
    row = crash_row(spec, TimeoutError())
    row.update(outcome="timeout", error=f"timeout: stalled - no run of the sweep finished for {waited_s:g} s")
    return row


def _abandoned(row: dict[str, Any]) -> bool:
    """A row made for a run the sweep stopped waiting for (stalled, never ran)."""
    return row.get("outcome") == "not_run" or str(row.get("error") or "").startswith("timeout: stalled")


def missing_row(spec: RunSpec, reason: str) -> dict[str, Any]:
    """The row of a run that never ran (``outcome="not_run"``); ``error`` says why."""
    row = crash_row(spec, RuntimeError())
    row.update(outcome="not_run", error=reason[:2000])
    return row


def default_executor(max_workers: int | None = None) -> cf.Executor:
    """A local process pool with spawned workers (safe with the threads litellm and the simulator
    start). When ``__main__`` cannot be re-imported by a spawned worker (``python -`` or ``-c``),
    a thread pool instead."""
    workers = max_workers or max(1, min(4, os.cpu_count() or 1))
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file is not None and not os.path.exists(main_file):
        return cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="contextkit-sweep")
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def _specs(
    strategies: Iterable[str], gateways: Iterable[GatewaySpec], seeds: Iterable[int], turns: int, keep_events: bool
) -> list[RunSpec]:
    strategies, gateways, seeds = list(strategies), list(gateways), list(seeds)
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; choose from {', '.join(STRATEGIES)}")
    if not strategies or not gateways or not seeds:
        raise ValueError("a sweep needs at least one strategy, one gateway and one seed")
    if not isinstance(turns, int) or turns < 1:
        raise ValueError(f"turns must be a positive int, got {turns!r}")
    for g in gateways:
        if not isinstance(g, GatewaySpec):
            raise TypeError(f"gateways must be GatewaySpec values, got {type(g).__name__}")
    return [RunSpec(s, g, seed, turns, keep_events=keep_events) for g in gateways for seed in seeds for s in strategies]


def run_sweep(
    strategies: Sequence[str],
    gateways: Sequence[GatewaySpec],
    seeds: Iterable[int],
    turns: int,
    *,
    executor: cf.Executor | None = None,
    progress: bool | Any = True,
    events: list[dict[str, Any]] | None = None,
) -> pl.DataFrame:
    """Run every (strategy, gateway, seed) combination; a polars frame with ``RESULTS_COLUMNS``.

    ``executor``: any ``concurrent.futures.Executor`` (default: a local process pool, shut down
    afterwards; a passed executor is left running). ``progress``: a ``tqdm.auto`` bar (tqdm's notebook
    widget in Jupyter, else stderr), ``False`` for none, or your own tqdm bar.
    ``events``: pass a list to receive every run's event dicts (``session_id`` = ``run_id``).
    Rows are in sweep order (gateway, seed, strategy) whatever order the runs finish in.
    """
    specs = _specs(strategies, gateways, seeds, turns, events is not None)
    return run_specs(specs, executor=executor, progress=progress, events=events)


def run_specs(
    specs: Sequence[RunSpec],
    *,
    executor: cf.Executor | None = None,
    progress: bool | Any = True,
    events: list[dict[str, Any]] | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    stall_timeout: float | None = None,
    no_worker_grace: float = 30.0,
    run: Any = None,
) -> pl.DataFrame:
    """Run the given runs (any mix of strategies, gateways, seeds and turns) like ``run_sweep``;
    rows in the order of ``specs``. ``checkpoint``: a ``.parquet`` path rewritten (atomically) with
    every run finished so far, so an interrupted or stalled grid still leaves usable results.
    A finished run is saved and released at once (a worker lost later costs no recomputation; see
    ``experiments/execution.py``); lost workers are named in ``lost_worker``; runs that never ran
    (every dask worker gone for ``no_worker_grace`` seconds, a broken pool) are ``not_run`` rows.
    ``stall_timeout``: when no run finishes for that many seconds (a worker hung inside a turn, where
    ``RunSpec.max_wall_s`` cannot stop it), the runs still pending become ``timeout`` rows and the
    sweep returns instead of waiting for ever. ``run``: the function run per spec (``run_one``)."""
    if stall_timeout is not None and not stall_timeout > 0:
        raise ValueError(f"stall_timeout must be a positive number of seconds or None, got {stall_timeout!r}")
    from contextkit.experiments.execution import drive

    owned = executor is None
    pool = default_executor() if executor is None else executor
    bar = make_progress(len(specs), progress)
    rows: dict[int, dict[str, Any]] = {}

    def take(i: int, row: dict[str, Any]) -> None:
        rows[i] = row
        if checkpoint is not None:
            save_results(_frame([rows[j] for j in sorted(rows)]), checkpoint)
        bar.set_postfix_str(specs[i].run_id, refresh=False)
        bar.update(1)

    finished = False
    try:
        from contextkit import backend

        default = _run_one_offline if backend.offline_requested() else run_one
        drive(specs, run or default, pool, take, crash_row=crash_row, missing_row=missing_row,
              stall_timeout=stall_timeout, no_worker_grace=no_worker_grace)  # fmt: skip
        finished = len(rows) == len(specs) and not any(_abandoned(r) for r in rows.values())
    finally:
        bar.close()
        if owned:
            # a stalled or lost worker would keep shutdown(wait=True) waiting for ever
            pool.shutdown(wait=finished, cancel_futures=True)
    ordered = [rows[i] for i in range(len(specs))]
    if events is not None:
        for row in ordered:
            events.extend(row.pop("events", []))
    return _frame(ordered)


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame([{k: row.get(k) for k in RESULTS_COLUMNS} for row in rows], schema=results_schema())


def save_results(df: pl.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write a sweep frame to Parquet (parent folders created; written to a temporary file first and
    renamed, so a reader never sees half a file); returns the path."""
    target = Path(path)
    if target.suffix != ".parquet":
        raise ValueError(f"save_results writes Parquet; give a path ending in .parquet, got {str(target)!r}")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    df.write_parquet(partial)
    os.replace(partial, target)
    return target


def load_results(path: str | os.PathLike[str]) -> pl.DataFrame:
    import polars as pl

    return pl.read_parquet(Path(path))
