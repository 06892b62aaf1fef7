"""The benchmark scripts measure the workloads their docstrings define (a workload that silently changed
under a benchmark once moved the cache benchmark's moderate-pressure figure from 4 cache breaks to 18)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_moderate_cache_workload_reads_a_different_file_every_turn_and_asks_nothing() -> None:
    cache = _load("cache")
    workload = cache.DistinctReads(3, 40, target_bytes=6_000)
    texts = [workload.user_message(turn) for turn in range(40)]
    assert not workload.questions and not workload.needles
    assert all("please run read_file" in text for text in texts)
    assert len({str(args) for _, args in workload.plan}) == 40
    # the standard workload keeps its needles (the sweep's seeds, as the peer arena runs them)
    assert cache.Workload(3, 40, target_bytes=40_000).questions
