"""Sweeps that survive: lost dask workers recompute nothing finished, are named in the rows, and a grid
with runs that never ran is a partial grid that says so (rows with reasons, non-zero exit)."""

from __future__ import annotations

import concurrent.futures as cf
from pathlib import Path

import polars as pl
import pytest
from helpers.sweeps import dask_cluster, ended_before, fake_run, starts

from contextkit.experiments import GatewaySpec, RunSpec, runner, summarize
from contextkit.experiments import report as report_mod


def specs(n: int, cell: str = "cell") -> list[RunSpec]:
    return [RunSpec("none", GatewaySpec(cell), seed, 2) for seed in range(n)]


def test_a_lost_worker_recomputes_no_finished_run_and_losing_every_worker_ends_the_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dask.distributed import Client

    monkeypatch.setenv("CK_SWEEP_DIR", str(tmp_path))
    (tmp_path / "kill").write_text("3")
    with dask_cluster(tmp_path, workers=2) as address, Client(address) as client:
        client.wait_for_workers(2, timeout=60)
        first = runner.run_specs(specs(8, "one-lost"), executor=client.get_executor(), progress=False, run=fake_run)
        counts = starts(tmp_path)
        finished_first = ended_before(tmp_path, "none.one-lost.s3")
        assert first["outcome"].to_list() == ["completed"] * 8
        assert all(counts[r] == 1 for r in finished_first) and finished_first  # nothing finished was run again
        assert counts["none.one-lost.s3"] == 2  # the run the lost worker was on ran again elsewhere
        lost = first.filter(pl.col("lost_worker").is_not_null())
        # the run it was running, and any the scheduler had queued on it, name the lost worker
        assert "none.one-lost.s3" in lost["run_id"].to_list() and lost["lost_worker"].n_unique() == 1
        assert first["worker"].null_count() == 0
        assert runner.exit_status(first) == 0

        (tmp_path / "kill").write_text(">=2")  # the worker left dies too: nobody can run the rest
        second = runner.run_specs(specs(6, "all-lost"), executor=client, progress=False, run=fake_run, no_worker_grace=2.0)
    outcomes = second["outcome"].to_list()
    assert outcomes[:2] == ["completed", "completed"] and set(outcomes[2:]) == {"not_run"}
    assert all("every worker of the scheduler was lost" in e for e in second["error"].to_list()[2:])
    text = runner.describe_missing(second)
    assert "4 of 6 runs are missing" in text and all(f"none.all-lost.s{i}" in text for i in range(2, 6))
    table = summarize(second).row(0, named=True)
    assert (table["runs"], table["based_on"]) == (6, 2)
    assert runner.exit_status(second) == runner.EXIT_MISSING and runner.exit_status(second, allow_missing=True) == 0


def test_a_broken_process_pool_leaves_rows_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(spec: RunSpec) -> dict:
        if spec.seed == 1:
            raise cf.BrokenExecutor("A process in the process pool was terminated abruptly")
        return fake_row(spec)

    with cf.ThreadPoolExecutor(1) as pool:
        df = runner.run_specs(specs(3), executor=pool, progress=False, run=broken)
    assert df["outcome"].to_list()[1:] == ["not_run", "not_run"] or df["outcome"].to_list()[1] == "not_run"
    assert "the executor broke" in df["error"][1]


def fake_row(spec: RunSpec) -> dict:
    return {"run_id": spec.run_id, "strategy": spec.strategy, "gateway": spec.gateway.name, "seed": spec.seed,
            "completed": True, "outcome": "completed", "requests": 1}  # fmt: skip


def test_the_experiment_cli_exits_non_zero_on_a_partial_grid(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    rows = [fake_row(s) for s in specs(2)] + [runner.missing_row(specs(3)[2], "not run: every worker was lost")]
    frame = runner._frame(rows)
    monkeypatch.setattr(report_mod, "run_sweep", lambda *a, **k: frame)
    monkeypatch.setattr(report_mod, "build_report", lambda *a, **k: "<html></html>")
    assert report_mod.run_experiment_cli(["smoke", "--out", str(tmp_path), "--quiet"]) == runner.EXIT_MISSING
    err = capsys.readouterr().err
    assert "1 of 3 runs are missing" in err and "none.cell.s2" in err and "--allow-missing" in err
    assert report_mod.run_experiment_cli(["smoke", "--out", str(tmp_path), "--quiet", "--allow-missing"]) == 0
