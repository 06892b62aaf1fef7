"""Every strategy the sweeps know: contextkit's, our baselines, and the peers (other libraries)."""

from __future__ import annotations

from typing import Any

from contextkit.experiments.peers import PEERS, run_peer
from contextkit.experiments.strategies import BASELINES, CONTEXTKIT_STRATEGIES, StrategyRun, run_builtin
from contextkit.experiments.workload import GatewaySpec, Workload

__all__ = ["BASELINES", "CONTEXTKIT_STRATEGIES", "PEERS", "STRATEGIES", "run_strategy"]

STRATEGIES = CONTEXTKIT_STRATEGIES + BASELINES + PEERS


def run_strategy(strategy: str, workload: Workload, gw: GatewaySpec, sim: Any, run_id: str) -> StrategyRun:
    """Run ``workload`` under ``strategy`` against the running simulator ``sim``."""
    if strategy in PEERS:
        return run_peer(strategy, workload, gw, sim, run_id)
    if strategy in CONTEXTKIT_STRATEGIES or strategy in BASELINES:
        return run_builtin(strategy, workload, gw, sim, run_id)
    raise ValueError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
