"""Benchmark: real agent runs replayed through contextkit and its peers (``contextkit.replay``).

Reads the recorded mini-swe-agent runs (``*.tgz`` of ``*.traj.json``, or the files themselves) from
``--traces`` (default: ``shared/traces`` next to the repository, or one level further up from a
worktree), replays each under every strategy at every window (and behind a 128 KB gateway at 64k)
and prints one row per cell: runs that served every step, steps served, requests rejected, billed
input at the recorded model's prices (the simulator's prefix cache), the agent's first-use
references (verbatim, and verbatim or one recall away), the strategy's own time per step (median over
runs; ``none`` in the same processes is the baseline), then the token-count error against the
provider's ``prompt_tokens`` before and after calibration, and the acceptance bars. A peer that
cannot run here has a row that says why.

    python benchmarks/traces.py [--runs N] [--jobs 2] [--windows 16384,32768,65536] [--strategies none,masking,...]

``--runs N`` takes N runs spread over the archives and their sizes (the output names them); the
default, 0, takes all 61. Every replay runs in a worker process (``--jobs``, default 2) with its own
simulator; each result is appended to ``--cache`` (default ``build/traces-cache.jsonl``) under the
run, strategy, window, gateway and a hash of the package's source, so a run stopped half way is
continued by the same command (``--fresh`` starts over; ``--cached-only`` prints the table over the
runs already measured for every cell, and measures nothing). Skips (exit 0, with the reason) when
the traces are absent.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import hashlib
import json
import logging
import multiprocessing
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GATEWAY = "128KB"
STRATEGIES = (
    "none", "masking", "contextkit", "langchain-summarization", "langchain-context-editing",
    "anthropic-clearing", "litellm-compress", "headroom",
)  # fmt: skip


def find_traces(given: str | None) -> Path | None:
    candidates = [Path(given)] if given else [ROOT.parent / "shared" / "traces", ROOT.parents[1] / "shared" / "traces"]
    return next((p for p in candidates if p.is_dir()), None)


def trajectory_files(folder: Path, into: Path) -> list[Path]:
    files = sorted(folder.glob("**/*.traj.json"))
    for tgz in sorted(folder.glob("*.tgz")):
        with tarfile.open(tgz) as tar:
            tar.extractall(into / tgz.stem, filter="data")
        files += sorted((into / tgz.stem).glob("**/*.traj.json"))
    return files


def pick(files: list[Path], runs: int) -> list[Path]:
    """``runs`` runs spread over the archives and over their sizes (evenly spaced by file size)."""
    if runs <= 0 or runs >= len(files):
        return files
    by_set: dict[str, list[Path]] = {}
    for f in files:
        by_set.setdefault(f.parent.name, []).append(f)
    share = {name: runs * len(group) // len(files) for name, group in by_set.items()}
    for name in sorted(by_set, key=lambda n: -len(by_set[n]))[: runs - sum(share.values())]:
        share[name] += 1
    out: list[Path] = []
    for name, group in by_set.items():
        group.sort(key=lambda p: p.stat().st_size)
        n = share[name]
        out += [group[(2 * i + 1) * len(group) // (2 * n)] for i in range(n)] if n else []
    return out


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def source_hash() -> str:
    """A hash of the package's Python source: a cached result is reused only for the same code."""
    h = hashlib.sha256()
    for f in sorted((ROOT / "contextkit").rglob("*.py")):
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def quiet_worker() -> None:
    """A worker's logging: headroom's notice that it detects content in pure Python (no ONNX Runtime
    1.24+) is not a result; the worker is this benchmark's own process."""
    logging.getLogger("headroom").setLevel(logging.ERROR)


def measure(path: str, strategy: str, window: int, gateway: str | None) -> dict[str, Any]:
    """One replay in this (worker) process: the row's numbers for one run."""
    import contextkit

    contextkit.offline()
    from contextkit.replay import calibrated_errors, load_trajectory, replay, token_errors

    traj = load_trajectory(path)
    if strategy == "tokens":
        before, after = calibrated_errors(token_errors(traj))
        return {"before": before, "after": after}
    r = replay(traj, strategy, window=window, max_body=gateway)
    return {
        "available": r.available, "ok": r.served_all, "served": r.steps_served, "steps": r.steps_total,
        "rejected": r.rejected, "billed": r.billed, "needed": r.needed,
        "verbatim": sum(len(x.verbatim) for x in r.records),
        "reach": sum(len(x.verbatim) + len(x.recalled) for x in r.records),
        "own": r.own_ms_per_step, "error": r.error, "note": r.note,
    }  # fmt: skip


class Cache:
    """Results appended one JSON line each, keyed by (source hash, run, strategy, window, gateway)."""

    def __init__(self, path: Path, code: str, fresh: bool) -> None:
        self.path, self.code = path, code
        self.rows: dict[str, dict[str, Any]] = {}
        if fresh and path.exists():
            path.unlink()
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a stopped run
                if entry.get("code") == code:
                    self.rows[entry["key"]] = entry["row"]

    @staticmethod
    def key(run: str, strategy: str, window: int, gateway: str | None) -> str:
        return f"{run}|{strategy}|{window}|{gateway or '-'}"

    def add(self, key: str, row: dict[str, Any]) -> None:
        self.rows[key] = row
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"code": self.code, "key": key, "row": row}) + "\n")


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if rows and not all(r["available"] for r in rows):
        return {"available": False, "why": next(r["note"] for r in rows if not r["available"]), "n": len(rows)}
    needed = sum(r["needed"] for r in rows)
    return {
        "available": True, "n": len(rows), "ok": sum(r["ok"] for r in rows),
        "served": sum(r["served"] for r in rows), "steps": sum(r["steps"] for r in rows),
        "rejected": sum(r["rejected"] for r in rows), "billed": sum(r["billed"] for r in rows),
        "verbatim": sum(r["verbatim"] for r in rows) / needed if needed else None,
        "reach": sum(r["reach"] for r in rows) / needed if needed else None,
        "own": statistics.median(r["own"] for r in rows) if rows else 0.0,
        "errors": sorted({(r["error"] or "").split(":")[0] for r in rows if r["error"]}),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", default=None)
    ap.add_argument("--runs", type=int, default=0, help="how many runs (spread over the archives and sizes); 0: all")
    ap.add_argument("--windows", default="16384,32768,65536")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--no-gateway", action="store_true", help="skip the 128 KB gateway cells")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (each replay has its own simulator)")
    ap.add_argument("--cache", default=str(ROOT / "build" / "traces-cache.jsonl"))
    ap.add_argument("--fresh", action="store_true", help="forget the cached results")
    ap.add_argument(
        "--cached-only", action="store_true", help="measure nothing: the table over the runs cached for every cell"
    )
    args = ap.parse_args(argv)
    folder = find_traces(args.traces)
    if folder is None:
        print("SKIP: no trajectories found (pass --traces DIR holding the *.tgz or *.traj.json runs)")
        return 0
    today = dt.date.today().isoformat()
    windows = [int(w) for w in args.windows.split(",") if w]
    cells: list[tuple[int, str | None]] = [(w, None) for w in windows]
    if not args.no_gateway and 65536 in windows:
        cells.append((65536, GATEWAY))
    strategies = [s for s in args.strategies.split(",") if s]
    cache = Cache(Path(args.cache), source_hash(), args.fresh)
    with tempfile.TemporaryDirectory() as tmp:
        files = trajectory_files(folder, Path(tmp))
        chosen = pick(files, args.runs)
        names = [f"{p.parent.name}/{p.name.removesuffix('.traj.json')}" for p in chosen]
        # run-major, smallest first: a stopped benchmark leaves as many runs measured in every cell as it can
        runs = sorted(zip(names, chosen, strict=True), key=lambda run: run[1].stat().st_size)
        tasks = [(n, str(p), "tokens", 0, None) for n, p in runs]
        tasks += [(n, str(p), s, w, gw) for n, p in runs for w, gw in cells for s in strategies]
        todo = [t for t in tasks if Cache.key(t[0], *t[2:]) not in cache.rows]
        if todo and not args.cached_only:
            print(f"# measuring {len(todo)} of {len(tasks)} replays in {args.jobs} process{'es' * (args.jobs != 1)} "
                  f"({len(tasks) - len(todo)} cached in {cache.path})", file=sys.stderr, flush=True)  # fmt: skip
            ctx = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(
                max_workers=max(1, args.jobs), mp_context=ctx, initializer=quiet_worker
            ) as pool:
                futures = {pool.submit(measure, *t[1:]): t for t in todo}
                for done, fut in enumerate(concurrent.futures.as_completed(futures), 1):
                    t = futures[fut]
                    cache.add(Cache.key(t[0], *t[2:]), fut.result())
                    print(f"# {done}/{len(todo)} {t[0]} {t[2]} {t[3]} {t[4] or ''}", file=sys.stderr, flush=True)
    complete = [n for n in names if all(Cache.key(*t[:1], *t[2:]) in cache.rows for t in tasks if t[0] == n)]
    if not complete:
        print("no run is measured in every cell yet")
        return 1
    print(f"# benchmarks/traces.py, {today}: {len(complete)} of {len(files)} runs from {folder}, "
          f"source {cache.code}")  # fmt: skip
    print("# runs: " + ", ".join(complete))
    header = (
        f"{'strategy':<26} {'window':>6} {'gateway':>7} {'runs ok':>8} {'steps':>12} {'rejected':>8} "
        f"{'billed $':>9} {'verbatim':>8} {'reach':>7} {'own ms/step':>11}"
    )
    print(header)
    table: dict[tuple[str, int, str | None], dict[str, Any]] = {}
    notes: dict[str, str] = {}
    stopped: list[str] = []
    for window, gw in cells:
        for strategy in strategies:
            rows = [cache.rows[Cache.key(n, strategy, window, gw)] for n in complete]
            row = table[(strategy, window, gw)] = aggregate(rows)
            lead = f"{strategy:<26} {window // 1024:>5}k {gw or '-':>7}"
            if not row["available"]:
                print(f"{lead} not run: {row['why']}")
                continue
            notes.setdefault(strategy, next((r["note"] for r in rows if r["note"]), ""))
            if row["errors"]:
                where = f"{window // 1024}k" + (f" behind {gw}" if gw else "")
                stopped.append(f"  {strategy} at {where}: {', '.join(row['errors'])}")
            print(
                f"{lead} {row['ok']:>4}/{row['n']:<3} {row['served']:>5}/{row['steps']:<6} {row['rejected']:>8} "
                f"{row['billed']:>9.4f} {pct(row['verbatim']):>8} {pct(row['reach']):>7} {row['own']:>11.1f}"
            )
    before: list[float] = []
    after: list[float] = []
    for n in complete:
        tok = cache.rows[Cache.key(n, "tokens", 0, None)]
        before += tok["before"]
        after += tok["after"]
    print(
        f"token-count error vs the recorded prompt_tokens ({len(before)} steps): median |error| "
        f"{pct(median_abs(before))} before calibration, {pct(median_abs(after))} after"
    )
    if stopped:
        print("runs that did not serve every step stopped with:")
        print("\n".join(stopped))
    print("configured as:")
    for strategy, text in notes.items():
        if text:
            print(f"  {strategy}: {text}")
    failed = bars(table, cells, median_abs(after))
    return 1 if failed else 0


def median_abs(values: list[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else 0.0


def bars(
    table: dict[tuple[str, int, str | None], dict[str, Any]], cells: list[tuple[int, str | None]], err: float
) -> bool:
    failed = False

    def check(ok: bool, text: str) -> None:
        nonlocal failed
        failed |= not ok
        print(f"  [{'ok' if ok else 'FAIL'}] {text}")

    print("bars:")
    for window, gw in cells:
        ck, mask = table.get(("contextkit", window, gw)), table.get(("masking", window, gw))
        where = f"{window // 1024}k" + (f" behind {gw}" if gw else "")
        if ck is None or not ck["available"]:
            continue
        check(ck["served"] == ck["steps"], f"{where}: contextkit serves every step ({ck['served']}/{ck['steps']})")
        check(
            (ck["reach"] or 0) >= 0.95,
            f"{where}: first-use references present or one recall away {pct(ck['reach'])} >= 95%",
        )
        if mask is not None:
            check(
                (ck["verbatim"] or 0) >= (mask["verbatim"] or 0),
                f"{where}: verbatim {pct(ck['verbatim'])} >= masking's {pct(mask['verbatim'])}",
            )
            ratio = ck["billed"] / mask["billed"] if mask["billed"] else float("inf")
            check(ratio <= 0.6, f"{where}: billed {ratio:.2f}x masking's (bar 0.6x)")
        whole = {
            name: p["billed"]
            for (name, w, g), p in table.items()
            if (w, g) == (window, gw) and name != "contextkit" and p["available"] and p["ok"] == p["n"]
        }
        cheaper = ", ".join(f"{name} ${b:.4f}" for name, b in whole.items() if b < ck["billed"])
        check(
            not cheaper,
            f"{where}: billed ${ck['billed']:.4f}, at most every peer that serves every step"
            + (f" (not: {cheaper})" if cheaper else f" ({len(whole)} of them)"),
        )
        check(ck["own"] < 10, f"{where}: own time {ck['own']:.1f} ms/step median (bar 10 ms)")
    check(err <= 0.03, f"token-count error after calibration {pct(err)} (bar 3%)")
    return failed


if __name__ == "__main__":
    sys.exit(main())
