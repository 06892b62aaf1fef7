"""Strategy experiments: seeded agent workloads on the simulator, run side by side.

    from contextkit.experiments import GatewaySpec, run_sweep, save_results
    df = run_sweep(["contextkit", "none", "sliding-window"], [GatewaySpec()], seeds=range(5), turns=40)
    save_results(df, "results/strategies.parquet")

Runs are independent (each starts its own simulator) and picklable, so ``run_sweep`` works on
any ``concurrent.futures.Executor``, including a dask.distributed client's executor.
"""

from __future__ import annotations

from contextkit.errors import require_extra

require_extra("contextkit.experiments", "polars")  # results are polars frames

from contextkit.experiments.registry import BASELINES, CONTEXTKIT_STRATEGIES, PEERS, STRATEGIES
from contextkit.experiments.runner import (
    RESULTS_COLUMNS,
    RunSpec,
    default_executor,
    load_results,
    results_schema,
    run_one,
    run_sweep,
    save_results,
)
from contextkit.experiments.strategies import forget_all, sliding_window
from contextkit.experiments.summary import summarize
from contextkit.experiments.workload import GatewaySpec, Workload

__all__ = [
    "BASELINES",
    "CONTEXTKIT_STRATEGIES",
    "PEERS",
    "RESULTS_COLUMNS",
    "STRATEGIES",
    "SWEEPS",
    "GatewaySpec",
    "RunSpec",
    "Workload",
    "build_report",
    "default_executor",
    "forget_all",
    "load_results",
    "results_schema",
    "run_experiment_cli",
    "run_one",
    "run_sweep",
    "save_results",
    "sliding_window",
    "summarize",
]


def __getattr__(name: str) -> object:
    # the report pulls in altair and vl-convert: load it only when asked (workers never need it)
    if name in ("SWEEPS", "build_report", "run_experiment_cli"):
        from contextkit.experiments import report

        return getattr(report, name)
    raise AttributeError(f"module 'contextkit.experiments' has no attribute {name!r}")
