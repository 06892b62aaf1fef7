"""contextkit.experiments: baselines, sweeps on a local pool and on a dask cluster, results, report CLI."""

from __future__ import annotations

import concurrent.futures as cf
import io
import json
import os
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from contextkit.experiments import (
    BASELINES,
    CONTEXTKIT_STRATEGIES,
    GatewaySpec,
    RunSpec,
    Workload,
    load_results,
    results_schema,
    run_one,
    run_sweep,
    save_results,
    sliding_window,
    summarize,
)
from contextkit.experiments.progress import make_progress

STRATEGIES = CONTEXTKIT_STRATEGIES + BASELINES  # the peers have their own tests (test_peers.py)
TURNS = 5  # four tool turns (20-60 KB outputs) and the needle question
SEEDS = (0, 1)
# what must not depend on where a run executes (everything but timings)
DETERMINISTIC = [
    "run_id", "completed", "turns_completed", "requests", "rejected", "retries", "bytes_sent", "tokens_sent",
    "summarizer_calls", "prefix_reuse", "archived_items", "needles_planned", "needles_correct", "needle_accuracy",
    "recoverable", "cost", "error",
]  # fmt: skip


def _msg(role: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": extra.pop("content", role), **extra}


def test_sliding_window_keeps_system_and_never_orphans_a_tool_result() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    history = [
        _msg("system"),
        _msg("user", content="u1"),
        _msg("assistant", content=None, tool_calls=[call]),
        _msg("tool", tool_call_id="c1"),
        _msg("assistant", content="a1"),
        _msg("user", content="u2"),
    ]
    assert sliding_window(history, keep=10) == history
    cut = sliding_window(history, keep=3)  # would start at the tool result: it goes too
    assert [m["role"] for m in cut] == ["system", "assistant", "user"]
    assert [m["role"] for m in sliding_window(history, keep=4)] == ["system", "assistant", "tool", "assistant", "user"]
    assert sliding_window(history, keep=0) == [history[0]]


def test_workload_is_deterministic_and_records_outputs() -> None:
    a, b = Workload(7, 5), Workload(7, 5)
    assert [a.user_message(i) for i in range(5)] == [b.user_message(i) for i in range(5)]
    assert "[[tool:" in a.user_message(0)
    name, args = a.plan[0]
    out = a.call(name, json.dumps(args))
    assert a.outputs == [out] and len(out) > 10_000  # a big tool output
    with pytest.raises(ValueError, match="turns must be >= 1"):
        Workload(1, 0)


def test_bad_sweep_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown strategies"):
        run_sweep(["magic"], [GatewaySpec()], [0], 2, progress=False)
    with pytest.raises(ValueError, match="turns must be a positive int"):
        run_sweep(["none"], [GatewaySpec()], [0], 0, progress=False)
    with pytest.raises(TypeError, match="GatewaySpec"):
        run_sweep(["none"], ["128KB"], [0], 2, progress=False)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="unknown strategy"):
        run_one(RunSpec("magic", GatewaySpec(), 0, 2))


def _check_sweep(df: pl.DataFrame) -> None:
    assert df.schema == results_schema()
    assert df.height == len(STRATEGIES) * len(SEEDS)
    assert df["run_id"].to_list() == [f"{s}.128KB-waf403.s{seed}" for seed in SEEDS for s in STRATEGIES]
    for row in df.iter_rows(named=True):
        assert row["requests"] >= row["turns_completed"] and row["rejected"] <= row["requests"]
        assert row["bytes_sent"] > 0 and row["tokens_sent"] > 0
        if row["strategy"].startswith("contextkit"):
            assert row["completed"] and row["error"] is None and row["turns_completed"] == TURNS
            assert row["archived_items"] > 0 and row["recoverable"] == 1.0
        else:
            assert row["archived_items"] is None  # no archive
            assert row["completed"] == (row["error"] is None)
        assert row["needles_planned"] == 1 and row["needle_accuracy"] == row["needles_correct"]
    none = df.filter(pl.col("strategy") == "none")
    # four 20-60 KB tool outputs never fit a 128 KB gateway: no management fails on a WAF rejection
    assert not none["completed"].any() and none["rejected"].to_list() == [1, 1]
    assert all(e.startswith("waf_rejection") for e in none["error"].to_list())


@pytest.fixture(scope="module")
def local_sweep() -> pl.DataFrame:
    """The small sweep on the default executor (a spawned local process pool)."""
    return run_sweep(STRATEGIES, [GatewaySpec()], SEEDS, TURNS, progress=False)


def test_sweep_on_the_default_local_pool(local_sweep: pl.DataFrame) -> None:
    _check_sweep(local_sweep)


def test_sweep_on_a_dask_cluster_gives_the_same_results(local_sweep: pl.DataFrame) -> None:
    from dask.distributed import Client, LocalCluster

    events: list[dict[str, Any]] = []
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        executor = client.get_executor()
        df = run_sweep(STRATEGIES, [GatewaySpec()], SEEDS, TURNS, executor=executor, progress=False, events=events)
        seen = {info["id"] for info in client.scheduler_info()["workers"].values()}
    _check_sweep(df)
    assert len(seen) == 2
    assert df.select(DETERMINISTIC).equals(local_sweep.select(DETERMINISTIC))
    assert {e["session_id"] for e in events} == set(df["run_id"].to_list())
    from contextkit.analysis import frames

    requests = frames(events).requests
    assert requests.group_by("session_id").len().height == df.height
    # baseline request events carry the prefix figures measured on the wire; their mean is prefix_reuse
    for row in df.filter(pl.col("strategy").is_in(list(BASELINES))).iter_rows(named=True):
        shares = requests.filter(pl.col("session_id") == row["run_id"])["prefix_share"]
        assert shares.null_count() == 1  # only the first request has no previous body
        assert shares.drop_nulls().mean() == pytest.approx(row["prefix_reuse"])


@pytest.mark.slow
def test_sweep_on_a_dask_cluster_of_worker_processes(local_sweep: pl.DataFrame) -> None:
    """The same sweep on separate dask worker processes (each imports litellm: ~15 s more)."""
    from dask.distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        df = run_sweep(STRATEGIES, [GatewaySpec()], SEEDS, TURNS, executor=client.get_executor(), progress=False)
        pids = client.run(os.getpid)
    assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()
    assert df.select(DETERMINISTIC).equals(local_sweep.select(DETERMINISTIC))


def test_crashed_runs_become_rows_and_progress_is_reported() -> None:
    from tqdm import tqdm

    stream = io.StringIO()
    bar = tqdm(total=2, file=stream, desc="sweep", mininterval=0)  # your own tqdm bar is used as given
    broken = GatewaySpec("broken", reject_with="no-such-mode")  # the simulator refuses it: the run raises
    with cf.ThreadPoolExecutor(2) as pool:
        df = run_sweep(["none"], [broken], [0, 1], 2, executor=pool, progress=bar)
    assert df["completed"].to_list() == [False, False]
    assert all(e.startswith("crashed: ConfigError") for e in df["error"].to_list())
    assert bar.n == 2 and "2/2" in stream.getvalue() and "none.broken.s" in stream.getvalue()
    # True: tqdm.auto picks the notebook widget in Jupyter and a stderr line elsewhere; False: silent
    import tqdm.auto

    auto = make_progress(3, True)
    assert isinstance(auto, tqdm.auto.tqdm) and auto.total == 3
    auto.close()
    assert make_progress(3, False).disable is True


def test_results_round_trip_through_parquet(local_sweep: pl.DataFrame, tmp_path: Path) -> None:
    path = save_results(local_sweep, tmp_path / "deep" / "results.parquet")
    assert load_results(path).equals(local_sweep)
    with pytest.raises(ValueError, match=r"\.parquet"):
        save_results(local_sweep, tmp_path / "results.csv")
    table = summarize(local_sweep)
    ck = table.filter(pl.col("strategy") == "contextkit").row(0, named=True)
    assert ck["completion_rate"] == 1.0 and ck["needle_accuracy"] is not None
    assert table.filter(pl.col("strategy") == "none")["tokens_vs_none"].to_list() == [1.0]


def test_experiment_cli_writes_parquet_and_an_offline_html_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from contextkit.experiments import report

    # the process pool is covered above; threads keep this test fast
    monkeypatch.setattr(report, "default_executor", lambda workers=None: cf.ThreadPoolExecutor(2))
    out = tmp_path / "smoke"
    assert report.run_experiment_cli(["smoke", "--out", str(out), "--seeds", "1", "--turns", "3", "--quiet"]) == 0
    df = load_results(out / "results.parquet")
    assert df.height == len(STRATEGIES)
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count("<svg") >= 5 and "<script" not in page and "cdn." not in page
    assert "contextkit.128KB-waf403.s0" in page
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split()[:4] == ["strategy", "gateway", "runs", "complete"]
    assert "contextkit-no-microcompact" in printed and "report.html" in printed
    assert report.run_experiment_cli(["smoke", "--seeds", "0"]) == 2
    with pytest.raises(SystemExit):
        report.run_experiment_cli(["no-such-sweep"])


def test_a_hung_run_cannot_stall_the_sweep(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A worker stuck inside one turn (where ``max_wall_s`` cannot stop it) must not hang the grid:
    after ``stall_timeout`` with no finished run, the pending runs become ``timeout`` rows."""
    import threading

    from contextkit.experiments import runner

    release = threading.Event()
    specs = [runner.RunSpec("none", GatewaySpec(), seed, 2) for seed in (0, 1)]

    def fake_run_one(spec: runner.RunSpec) -> dict[str, Any]:
        if spec.seed == 1:
            release.wait(60)  # hung until the test lets it go
        row = runner.crash_row(spec, RuntimeError("unused"))
        row.update(completed=True, outcome="completed", error=None)
        return row

    monkeypatch.setattr(runner, "run_one", fake_run_one)
    path = tmp_path / "grid.parquet"
    with cf.ThreadPoolExecutor(2) as pool:
        try:
            df = runner.run_specs(specs, executor=pool, progress=False, checkpoint=path, stall_timeout=1.0)
        finally:
            release.set()
    assert df["outcome"].to_list() == ["completed", "timeout"]
    assert "stalled" in df["error"][1]
    assert load_results(path)["outcome"].to_list() == ["completed", "timeout"]
    with pytest.raises(ValueError, match="stall_timeout"):
        runner.run_specs(specs, executor=pool, progress=False, stall_timeout=0)
