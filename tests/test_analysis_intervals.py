"""Outcomes per recovery level and compaction stage across sessions: the interval math, and a table
built from event dicts (today's and those written before the compaction stages had names)."""

from __future__ import annotations

import math

import pytest

from contextkit.analysis import frames, outcome_intervals_chart, outcomes_across_sessions
from contextkit.analysis.intervals import mean_interval, wilson
from contextkit.events import CompactionEvent, RecoveryEvent, RequestEvent


def test_intervals_are_exact_at_the_ends_and_widen_with_spread() -> None:
    assert mean_interval([4.0]) == (4.0, 4.0, 4.0)
    mean, low, high = mean_interval([1.0, 3.0])  # sd = sqrt(2), t(1) = 12.706
    assert mean - low == pytest.approx(high - mean)
    assert mean == 2.0 and high - mean == pytest.approx(12.706 * math.sqrt(2) / math.sqrt(2))
    assert wilson(10, 10)[1:] == (pytest.approx(0.72246, abs=1e-4), 1.0)
    assert wilson(0, 10)[:2] == (0.0, 0.0) and wilson(0, 10)[2] == pytest.approx(0.27754, abs=1e-4)
    narrow, wide = wilson(50, 100), wilson(5, 10)
    assert narrow[2] - narrow[1] < wide[2] - wide[1]  # more trials, tighter interval
    assert math.isnan(wilson(0, 0)[0])


def _session(sid: str, recovered: bool, freed: int) -> list[dict[str, object]]:
    steps = [
        RequestEvent(session_id=sid, bytes=100_000, outcome="rejected", failure_kind="payload_too_large"),
        RecoveryEvent(session_id=sid, level=1, attempt=1, outcome="retrying", bytes_before=100_000, bytes_after=100_000 - freed),
        RequestEvent(session_id=sid, level=1, attempt=2, bytes=100_000 - freed, outcome="ok" if recovered else "rejected"),
    ]  # fmt: skip
    return [dict(e.to_dict(), seq=i) for i, e in enumerate(steps)]


def test_a_level_is_summarised_over_sessions_not_pooled_as_one() -> None:
    events = _session("a", True, 10_000) + _session("b", True, 30_000) + _session("c", False, 20_000)
    table = outcomes_across_sessions(frames(events))
    row = {r["metric"]: r for r in table.filter(table["label"] == "recovery L1").iter_rows(named=True)}
    assert row["times fired per session"]["sessions"] == 3
    freed = row["bytes freed per use"]
    assert freed["mean"] == pytest.approx(20_000) and freed["low"] < 20_000 < freed["high"]
    rate = row["success rate"]
    assert rate["mean"] == pytest.approx(2 / 3) and 0 < rate["low"] < 2 / 3 < rate["high"] < 1
    spec = outcome_intervals_chart(table).to_dict()
    assert spec["spec"]["layer"][0]["mark"]["type"] == "rule" and "over up to 3 sessions" in str(spec["title"])


def _compaction(sid: str, stage: str, freed: int) -> dict[str, object]:
    event = CompactionEvent(session_id=sid, phase="summarize" if stage == "summary" else "truncate", stage=stage,
                            outcome="applied", bytes_before=100_000, bytes_after=100_000 - freed)  # fmt: skip
    return event.to_dict()


def test_compaction_stages_are_rows_in_pipeline_order_and_old_level_numbers_still_read() -> None:
    today = [_compaction("a", "truncation", 5_000), _compaction("a", "summary", 40_000)]
    # an events file written before the stages had names: "level": 2 / 3 and no "stage"
    older = [{k: v for k, v in e.items() if k != "stage"} | {"level": n} for e, n in
             ((_compaction("b", "summary", 60_000), 2), (_compaction("b", "truncation", 7_000), 3))]  # fmt: skip
    table = outcomes_across_sessions(frames(today + older))
    fired = table.filter(table["metric"] == "times fired per session")
    assert fired["label"].to_list() == ["compaction summary", "compaction truncation"]  # the order the stages run
    assert fired["stage"].to_list() == ["summary", "truncation"] and fired["level"].to_list() == [None, None]
    assert fired["sessions"].to_list() == [2, 2]  # the old file's rows joined today's, not a stage of their own
    freed = table.filter((table["metric"] == "bytes freed per use") & (table["stage"] == "summary"))
    assert freed["mean"].to_list() == [pytest.approx(50_000)]
