"""``benchmarks/scale.py``'s long session: the by-length figures tell work that grows with the history
from the machine's state. The control (fixed work after every completion) costs more in the long
session as the processor's caches fill with litellm's longer requests; contextkit's own work that
costs more only in that proportion reads as 0 beyond the control, and a walk over every message per
request reads as what it costs."""

from __future__ import annotations

import importlib
import random
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def scale(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("scale")


def _pairs(walk_per_message: float, seed: int = 1) -> list[tuple[int, float, float, float, float]]:
    """Append-only turn pairs over histories of 20-800 messages: the machine's state makes every
    piece of work 1.5% dearer per 100 messages of the long history (own and control alike), plus
    ``walk_per_message`` seconds of the long session's own per message; 3% noise on each figure."""
    rng = random.Random(seed)
    out = []
    for i in range(420):
        n = 20 + (i * 37) % 780
        state = 1 + 0.015 * n / 100
        own, control = 2.5e-3, 0.17e-3
        noisy = lambda x: x * rng.gauss(1, 0.03)  # noqa: E731
        out.append((n, noisy(own * state + walk_per_message * n), noisy(own), noisy(control * state), noisy(control)))
    return out


def test_work_that_costs_more_only_as_the_control_does_reads_as_nothing_beyond_it(scale: Any) -> None:
    bins, slopes = scale.by_length(_pairs(0.0))
    assert slopes["own"] > 0.01 / 100 and slopes["control"] > 0.01 / 100  # both grow: the machine's state
    assert abs(slopes["beyond"]) < 0.003 / 100
    assert all(b.beyond[0] <= 0 <= b.beyond[1] for b in bins), [b.beyond for b in bins]


def test_a_walk_over_every_message_reads_as_what_it_costs(scale: Any) -> None:
    """80 ns per message and request (two requests a turn): a generator over the history."""
    bins, slopes = scale.by_length(_pairs(160e-9))
    assert slopes["beyond"] > 0.005 / 100  # 160 ns x 100 messages over 2.5 ms: +0.64 points per 100 messages
    last = bins[-1]
    assert last.label == "600+" and last.beyond[0] > 0.02, last


def test_the_long_part_runs_and_prints_the_control(scale: Any, capsys: pytest.CaptureFixture[str]) -> None:
    scale.long_part(12)
    out = capsys.readouterr().out
    assert "control: the same fixed bookkeeping" in out
    assert "own beyond the control" in out
    row = next(line for line in out.splitlines() if line.split()[:1] == ["10"] and line.count(" ms") >= 8)
    assert row.split()[-1] == "24"  # messages: the median of turns 1-10 (a warm-up turn, then four a turn)
