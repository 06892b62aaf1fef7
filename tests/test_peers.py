"""The peer arena: real peers on the simulator, rows that say why a peer did not run, the grid."""

from __future__ import annotations

import concurrent.futures as cf
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from contextkit.experiments import GatewaySpec, RunSpec, Workload, run_one
from contextkit.experiments.arena import (
    ARENA_STRATEGIES,
    STANDARD_CELL,
    VERDICT_WIDTH,
    cells,
    format_arena,
    grid_specs,
    summarize_arena,
    verdicts,
)
from contextkit.experiments.peers import PEERS, peer_status

ROOMY = GatewaySpec("roomy", context_window=1_000_000, max_body=None)


def test_import_contextkit_loads_no_peer_library() -> None:
    code = (
        "import sys, contextkit, contextkit.experiments, contextkit.experiments.peers;"
        "bad = [m for m in ('langchain', 'langchain_openai', 'langgraph', 'headroom', 'openhands') if m in sys.modules];"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


@pytest.mark.parametrize("peer", ["langchain-summarization", "langchain-context-editing", "headroom"])
def test_a_real_peer_answers_every_needle_when_the_history_fits(peer: str) -> None:
    pytest.importorskip("langchain" if peer.startswith("langchain") else "headroom")
    row = run_one(RunSpec(peer, ROOMY, 0, 12, target_bytes=4_000))
    assert row["completed"] and row["error"] is None and row["turns_completed"] == 12
    assert row["needles_planned"] >= 2 and row["needle_accuracy"] == 1.0
    assert row["requests"] > 12 and row["tokens_sent"] > 0 and row["cost"] > 0  # measured on the wire
    assert "window told: 1000000" in row["note"] or peer == "headroom"


def test_langchain_summarization_summarizes_through_the_simulator_and_loses_needles() -> None:
    """A window far below the history: the middleware's summary requests reach the simulator (counted
    as summarizer calls) and the summarized-away facts are gone."""
    pytest.importorskip("langchain")
    tight = GatewaySpec("tight", context_window=6_000, max_body=None)
    row = run_one(RunSpec("langchain-summarization", tight, 0, 14, target_bytes=4_000))
    assert row["summarizer_calls"] >= 1
    assert row["needle_accuracy"] is not None and row["needle_accuracy"] < 1.0


def test_peers_do_not_know_the_byte_cap() -> None:
    """A 200k window behind a 128 KB gateway: LangChain summarizes at 80% of the window it was told,
    far above the cap, so the gateway's 403 ends the run; contextkit, told the cap, completes."""
    pytest.importorskip("langchain")
    gw = next(g for g in cells() if g.name == "128KB-waf403-200k")
    row = run_one(RunSpec("langchain-summarization", gw, 0, 8))
    assert not row["completed"] and row["rejected"] >= 1 and "403" in row["error"]
    assert row["summarizer_calls"] == 0  # it never reached its trigger
    ck = run_one(RunSpec("contextkit", gw, 0, 8))
    assert ck["completed"] and ck["rejected"] == 0


def test_an_unavailable_peer_gets_a_row_that_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from contextkit.experiments import peers
    from contextkit.experiments.peers import run_peer

    # the import headroom's row depends on fails (as on a machine without the extra)
    monkeypatch.setitem(peers._MODULES, "headroom-ai", "headroom_not_installed_here")
    why = peer_status("headroom")
    assert why is not None and "headroom-ai" in why and "No module named 'headroom_not_installed_here'" in why

    run = run_peer("headroom", None, ROOMY, None, "x")  # type: ignore[arg-type]
    assert run.turns_completed == 0 and run.error is not None and run.error.startswith("not run: ")
    assert run.note == "unavailable"


def test_openhands_row_names_the_python_requirement_when_the_sdk_is_missing() -> None:
    try:
        import openhands.sdk  # noqa: F401
    except ImportError:
        why = peer_status("openhands-condenser")
        assert why is not None and "openhands-sdk" in why and "3.12" in why
    else:  # pragma: no cover - a Python >= 3.12 machine with the SDK
        assert peer_status("openhands-condenser") is not None
    with pytest.raises(ValueError, match="unknown peer"):
        peer_status("no-such-peer")
    assert set(PEERS) >= {"langchain-summarization", "langchain-context-editing", "headroom"}
    # Anthropic-style clearing is the shared baseline on contextkit.policy.clearing (tests/test_clearing.py)
    assert "anthropic-clearing" in ARENA_STRATEGIES and "anthropic-clearing" not in PEERS


def test_the_grid_has_a_cell_per_cap_rejection_and_window_and_more_seeds_in_the_standard_one() -> None:
    names = [g.name for g in cells()]
    assert len(names) == 14 and STANDARD_CELL in names and "nocap-200k" in names and "1MB-drop-200k" in names
    specs = grid_specs(["contextkit", "none"], standard_seeds=3, other_seeds=1, turns=5)
    per_cell = pl.DataFrame({"cell": [s.gateway.name for s in specs]}).group_by("cell").len()
    counts = dict(per_cell.iter_rows())
    assert counts[STANDARD_CELL] == 6 and all(v == 2 for k, v in counts.items() if k != STANDARD_CELL)


def _row(strategy: str, completed: bool, needles: float, cost: float, note: str | None = None) -> dict[str, object]:
    return {
        "gateway": STANDARD_CELL, "strategy": strategy, "completed": completed, "needle_accuracy": needles,
        "outcome": "unavailable" if note == "unavailable" else "completed" if completed else "failed",
        "rejected": 0 if completed else 1, "tokens_sent": 1000, "cost": cost, "summarizer_calls": 0,
        "wall_s": 1.0, "context_window": 32_000, "max_body": 131_072, "note": note,
        "error": "not run: missing" if note == "unavailable" else None,
    }  # fmt: skip


def test_the_verdict_names_the_winners_and_says_when_a_strategy_does_not_win() -> None:
    frame = pl.DataFrame([
        _row("contextkit", True, 0.5, 0.20), _row("contextkit", True, 0.7, 0.22),
        _row("sliding-window", True, 0.0, 0.10), _row("sliding-window", True, 0.0, 0.12),
        _row("langchain-summarization", True, 0.9, 0.30), _row("langchain-summarization", False, 0.4, 0.10),
        _row("openhands-condenser", False, 0.0, 0.0, note="unavailable"),
    ])  # fmt: skip
    summary = summarize_arena(frame)
    said = verdicts(summary)[STANDARD_CELL]
    assert said.startswith("completion: contextkit = sliding-window (100%)")
    assert "needles: langchain-summarization (65%)" in said and "cost among completers: sliding-window" in said
    table = format_arena(summary)
    assert "60% (50%-70%)" in table and "not run: missing" in table and "verdict:" in table
    # it fits a 1024 px slide: no line wider than the verdict's wrap width
    assert max(map(len, table.splitlines())) <= VERDICT_WIDTH, max(table.splitlines(), key=len)


def test_cost_is_the_real_models_price_of_the_wire_log_and_matches_the_sessions_own_accounting() -> None:
    """The arena prices the simulator's request log (turns and summaries, with the tokens its prompt
    cache billed) as PRICE_AS; contextkit's Session(price_as=PRICE_AS) prices its own requests from
    litellm's usage objects. The two must agree, and caching must make the bill smaller."""
    from contextkit import Limits, Session, backend
    from contextkit.archive import Archive
    from contextkit.events import RequestEvent
    from contextkit.experiments.runner import PRICE_AS, price
    from contextkit.experiments.workload import SYSTEM_PROMPT
    from contextkit.sim import GatewaySimulator

    w = Workload(0, 6, target_bytes=4_000)
    with GatewaySimulator(context_window=8_000) as sim:
        kw = sim.litellm_kwargs()
        s = Session(kw.pop("model"), system=SYSTEM_PROMPT, limits=Limits(context_window=8_000),
                    archive=Archive.in_memory(session_id="cost"), tools=w.session_tools(), session_id="cost",
                    status=False, on_flush=None, price_as=PRICE_AS, **kw)  # fmt: skip
        for turn in range(w.turns):
            s.send(w.user_message(turn))
        s.compact("keep every file path")  # a summary request on the wire, priced like any other
        records = list(sim.requests)
    assert any(r.kind == "summary" for r in records)
    cached, cost = price(records)
    own = sum(e.cost or 0.0 for e in s.events if isinstance(e, RequestEvent) and e.outcome == "ok")
    assert cached > 0 and cost == pytest.approx(own + s.stats.to_dict()["summarizer_cost"], rel=1e-9)
    tokens = sum(r.tokens for r in records if r.accepted)
    uncached = backend.request_cost(PRICE_AS, prompt_tokens=tokens, completion_tokens=0)
    assert 0 < cost < uncached  # cached tokens at the cached-input price


def _counting_clock(step: float = 1.0) -> Callable[[], float]:
    ticks = iter(range(10**6))
    return lambda: next(ticks) * step


@pytest.mark.parametrize("strategy", ["contextkit", "sliding-window"])
def test_a_run_past_its_wall_time_budget_stops_at_the_next_turn_and_says_timeout(strategy: str) -> None:
    """A clock that advances one unit per turn and a deadline of 2.5: turns 1-3 run, turn 4 does not."""
    from contextkit.experiments.registry import run_strategy
    from contextkit.experiments.runner import _outcome
    from contextkit.sim import GatewaySimulator

    w = Workload(0, 8, target_bytes=4_000, deadline=2.5, clock=_counting_clock())
    with GatewaySimulator(context_window=ROOMY.context_window) as sim:
        run = run_strategy(strategy, w, ROOMY, sim, "t")
    assert run.turns_completed == 3 and run.error is not None and run.error.startswith("timeout:")
    assert sorted(run.replies) == [0, 1, 2]
    assert _outcome(run, RunSpec(strategy, ROOMY, 0, 8)) == "timeout"


def test_the_grid_is_written_after_every_finished_run(tmp_path: Path) -> None:
    """An interrupted grid leaves a usable Parquet file: the checkpoint holds every run finished so far."""
    from contextkit.experiments.runner import run_specs

    path = tmp_path / "grid.parquet"
    seen: list[int] = []

    class Peek:  # a progress bar (tqdm's interface) that reads the checkpoint at every finished run
        def update(self, n: int = 1) -> None:
            seen.append(pl.read_parquet(path).height)

        def set_postfix_str(self, text: str, refresh: bool = True) -> None:
            pass

        def close(self) -> None:
            pass

    specs = [RunSpec(s, ROOMY, 0, 3, target_bytes=4_000) for s in ("none", "sliding-window", "forget-all")]
    with cf.ThreadPoolExecutor(max_workers=1) as pool:
        frame = run_specs(specs, executor=pool, progress=Peek(), checkpoint=path)
    assert seen == [1, 2, 3]
    assert pl.read_parquet(path).equals(frame) and set(frame["outcome"]) == {"completed"}
