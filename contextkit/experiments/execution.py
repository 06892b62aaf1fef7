"""Running a grid of runs on an executor so that it survives lost workers.

* **A finished run is saved and released at once.** Its row is taken (and checkpointed) as soon as
  it is done, and the future is dropped (on dask, ``Future.release()``): the scheduler keeps no
  result in a worker's memory, so a worker that dies later costs no recomputation.
* **Lost workers are recorded.** On a dask client the scheduler's worker list is watched; a run that
  was processing on a worker when it disappeared says so in its row (``lost_worker``), and every row
  names the worker that produced it (``worker``).
* **Runs that never ran are rows with a reason** (``outcome="not_run"``): every worker gone for
  ``no_worker_grace`` seconds, a broken process pool, a stalled grid (``stall_timeout``: the old
  ``timeout`` rows). Nothing is averaged over silently: see ``summary.summarize`` (``based_on``).

``drive(specs, run, executor, on_row, ...)`` is the loop; ``runner.run_specs`` wraps it.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

NO_WORKER_GRACE_S = 30.0
POLL_S = 0.5
Row = dict[str, Any]


def dask_client(executor: Any) -> Any:
    """The ``distributed.Client`` behind ``executor`` (a client itself, or its ``get_executor()``), else None."""
    try:
        from distributed import Client
        from distributed.cfexecutor import ClientExecutor
    except ImportError:
        return None
    if isinstance(executor, Client):
        return executor
    if isinstance(executor, ClientExecutor):
        return executor._client
    return None


def drive(
    specs: Sequence[Any],
    run: Callable[[Any], Row],
    executor: Any,
    on_row: Callable[[int, Row], None],
    *,
    crash_row: Callable[[Any, BaseException], Row],
    missing_row: Callable[[Any, str], Row],
    stall_timeout: float | None = None,
    no_worker_grace: float = NO_WORKER_GRACE_S,
) -> None:
    """Run every spec; ``on_row(index, row)`` once per spec, as soon as its row exists."""
    client = dask_client(executor)
    if client is not None:
        _drive_dask(specs, run, client, on_row, crash_row, missing_row, stall_timeout, no_worker_grace)
    else:
        _drive_executor(specs, run, executor, on_row, crash_row, missing_row, stall_timeout)


def _drive_executor(specs: Sequence[Any], run: Callable[[Any], Row], pool: cf.Executor, on_row: Callable[[int, Row], None],
                    crash_row: Callable[[Any, BaseException], Row], missing_row: Callable[[Any, str], Row],
                    stall_timeout: float | None) -> None:  # fmt: skip
    futures: dict[cf.Future[Row], int] = {pool.submit(run, spec): i for i, spec in enumerate(specs)}
    while futures:
        done, _ = cf.wait(set(futures), timeout=stall_timeout, return_when=cf.FIRST_COMPLETED)
        if not done:  # nothing finished for stall_timeout: the pending runs never come back
            for future in list(futures):
                future.cancel()
                i = futures.pop(future)
                on_row(i, stalled(specs[i], stall_timeout or 0.0, crash_row))
            return
        for future in done:
            i = futures.pop(future)  # released: nothing keeps a finished run's result alive
            try:
                row = future.result()
            except cf.BrokenExecutor as exc:
                reason = f"not run: the executor broke ({type(exc).__name__}: {exc}); a worker process died"
                on_row(i, missing_row(specs[i], reason))
                for other, j in list(futures.items()):
                    other.cancel()
                    on_row(j, missing_row(specs[j], reason))
                futures.clear()
                return
            except Exception as exc:  # noqa: BLE001 - one crashed run must not lose the whole sweep
                row = crash_row(specs[i], exc)
            on_row(i, row)


def stalled(spec: Any, waited_s: float, crash_row: Callable[[Any, BaseException], Row]) -> Row:
    row = crash_row(spec, TimeoutError())
    row.update(outcome="timeout", error=f"timeout: stalled - no run of the sweep finished for {waited_s:g} s")
    return row


def _workers(client: Any) -> set[str]:
    try:
        return set(client.scheduler_info(n_workers=-1)["workers"])
    except TypeError:  # older distributed: no n_workers argument
        return set(client.scheduler_info()["workers"])
    except Exception:  # noqa: BLE001 - the scheduler itself is gone: no workers either
        return set()


def _processing(client: Any) -> dict[str, str]:
    """Which worker is processing each task key right now."""
    try:
        return {key: worker for worker, keys in client.processing().items() for key in keys}
    except Exception:  # noqa: BLE001 - a scheduler that does not answer tells us nothing new
        return {}


def _drive_dask(specs: Sequence[Any], run: Callable[[Any], Row], client: Any, on_row: Callable[[int, Row], None],
                crash_row: Callable[[Any, BaseException], Row], missing_row: Callable[[Any, str], Row],
                stall_timeout: float | None, no_worker_grace: float) -> None:  # fmt: skip
    from distributed import wait

    tag = uuid.uuid4().hex[:8]
    futures = {client.submit(run, spec, pure=False, key=f"contextkit-run-{tag}-{i}"): i for i, spec in enumerate(specs)}
    keys = {f.key: i for f, i in futures.items()}
    lost_on: dict[int, str] = {}  # run index -> the lost worker it was processing on
    known = _workers(client)
    where = _processing(client)
    last_done = time.monotonic()
    no_workers_since: float | None = None
    while futures:
        try:
            done, _ = wait(list(futures), timeout=POLL_S, return_when="FIRST_COMPLETED")
        except TimeoutError:  # distributed's wait raises where concurrent.futures' returns nothing done
            done = set()
        for future in done:
            i = futures.pop(future)
            try:
                row = future.result()
            except Exception as exc:  # noqa: BLE001 - KilledWorker, a bug: the run's own row
                row = crash_row(specs[i], exc)
            future.release()  # the scheduler forgets the result: a later worker loss recomputes nothing
            if i in lost_on:
                row["lost_worker"] = lost_on[i]
            on_row(i, row)
            last_done = time.monotonic()
        now = _workers(client)
        for gone in known - now:
            for key, worker in where.items():
                if worker == gone and key in keys:
                    lost_on.setdefault(keys[key], gone)
        known = now
        where = _processing(client) or where
        if not futures:
            return
        if not now:
            no_workers_since = no_workers_since or time.monotonic()
            if time.monotonic() - no_workers_since >= no_worker_grace:
                reason = f"not run: every worker of the scheduler was lost (none for {no_worker_grace:g} s)"
                _give_up(futures, specs, lost_on, on_row, missing_row, reason)
                return
        else:
            no_workers_since = None
        if stall_timeout is not None and time.monotonic() - last_done >= stall_timeout:
            for future in list(futures):
                i = futures.pop(future)
                future.cancel()
                row = stalled(specs[i], stall_timeout, crash_row)
                on_row(i, row)
            return


def _give_up(futures: dict[Any, int], specs: Sequence[Any], lost_on: dict[int, str], on_row: Callable[[int, Row], None],
             missing_row: Callable[[Any, str], Row], reason: str) -> None:  # fmt: skip
    for future in list(futures):
        i = futures.pop(future)
        future.cancel()
        row = missing_row(specs[i], reason)
        if i in lost_on:
            row["lost_worker"] = lost_on[i]
        on_row(i, row)
