"""Bounded memory over long sessions (``benchmarks/soak.py``): a fixed-budget run always, the
1,000-turn run with ``--run-slow``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def load_soak() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "soak.py"
    spec = importlib.util.spec_from_file_location("contextkit_soak_benchmark", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def test_short_soak_keeps_caches_and_history_bounded() -> None:
    soak = load_soak()
    points = soak.soak(90, (30, 60, 90), max_events=400, max_body="24KB", report=False)
    for p in points:
        assert p.events <= 400
        assert p.history_bytes < 24 * 1024  # the learned cap keeps the history under the gateway's limit
        # the size cache only holds messages in use (it used to keep every replaced original alive)
        assert p.meter_entries <= 2 * p.messages + 10, p
    assert points[-1].events_dropped > 0
    assert points[-1].archive_entries >= points[0].archive_entries


@pytest.mark.slow
def test_thousand_turn_soak_runs_in_bounded_memory() -> None:
    soak = load_soak()
    points = soak.soak(1_000, (100, 500, 1_000), max_events=5_000, report=False)
    first, last = points[0], points[-1]
    assert last.rss < 1.25 * first.rss
    assert all(p.meter_entries <= 2 * p.messages + 10 for p in points)
    assert last.history_bytes < 256 * 1024
