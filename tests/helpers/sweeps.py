"""A cheap stand-in for ``run_one`` that dask worker processes can import (no litellm), and that can
kill the worker running it: for the tests of sweeps that survive lost workers.

Driven by files in ``$CK_SWEEP_DIR``: every start and end is appended to ``log``; ``kill`` holds a
seed ``N`` (the first worker to start seed N dies, once) or ``>=N`` (every worker that starts a seed
>= N dies). The workers run without a nanny (``dask_cluster``), so nothing restarts one that died:
the scheduler has lost it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from contextkit.sim.nginx import die_with_parent, stop_process


def _log(folder: Path, text: str) -> None:
    with (folder / "log").open("a", encoding="utf-8") as fh:
        fh.write(text + "\n")


def fake_run(spec: Any) -> dict[str, Any]:
    folder = Path(os.environ["CK_SWEEP_DIR"])
    _log(folder, f"start {spec.run_id} {os.getpid()}")
    plan = (folder / "kill").read_text().strip() if (folder / "kill").exists() else ""
    once = folder / f"killed-{spec.seed}"
    dies = (plan.startswith(">=") and spec.seed >= int(plan[2:])) or (plan == str(spec.seed) and not once.exists())
    if dies:
        once.touch()
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.3)
    _log(folder, f"end {spec.run_id} {os.getpid()}")
    return {"run_id": spec.run_id, "strategy": spec.strategy, "gateway": spec.gateway.name, "seed": spec.seed,
            "turns": spec.turns, "completed": True, "outcome": "completed", "turns_completed": spec.turns,
            "requests": 1, "worker": f"pid {os.getpid()}"}  # fmt: skip


def starts(folder: Path) -> dict[str, int]:
    """How many times each run started (a run started twice was recomputed or restarted)."""
    counts: dict[str, int] = {}
    for line in (folder / "log").read_text().splitlines():
        what, run_id, _pid = line.split()
        if what == "start":
            counts[run_id] = counts.get(run_id, 0) + 1
    return counts


def ended_before(folder: Path, run_id: str) -> list[str]:
    """The runs whose end was logged before ``run_id`` first started."""
    done: list[str] = []
    for line in (folder / "log").read_text().splitlines():
        what, rid, _pid = line.split()
        if what == "start" and rid == run_id:
            return done
        if what == "end":
            done.append(rid)
    return done


@contextmanager
def dask_cluster(folder: Path, workers: int = 2) -> Iterator[str]:
    """A real ``dask scheduler`` and ``workers`` ``dask worker --no-nanny`` processes (one thread each);
    yields the scheduler's address. Every process stops with the test."""
    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")])}
    info = folder / "scheduler.json"
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    procs = [subprocess.Popen([*dask, "--port", "0", "--no-dashboard", "--scheduler-file", str(info)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)]  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        worker = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--no-nanny", "--nthreads", "1",
                  "--no-dashboard", "--death-timeout", "30"]  # fmt: skip
        for _ in range(workers):
            procs.append(subprocess.Popen(worker, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          preexec_fn=die_with_parent))  # fmt: skip
        yield address
    finally:
        for proc in reversed(procs):
            stop_process(proc, signal.SIGTERM, grace=10)
