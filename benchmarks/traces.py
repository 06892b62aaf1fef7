"""Benchmark: real agent runs replayed through contextkit and its peers (``contextkit.replay``).

Reads the recorded mini-swe-agent runs (``*.tgz`` of ``*.traj.json``, or the files themselves) from
``--traces`` (default: ``shared/traces`` next to the repository, or one level further up from a
worktree), replays each under every strategy at every window (and behind a 128 KB gateway at 64k)
and prints one row per cell: runs that served every step, steps served, requests rejected, billed
input at the recorded model's prices (the simulator's prefix cache), the agent's first-use
references (verbatim, and verbatim or one recall away), contextkit's own time per step (median over
runs; ``none`` in the same process is the baseline), then the token-count error against the
provider's ``prompt_tokens`` before and after calibration, and the acceptance bars.

    python benchmarks/traces.py [--runs 8] [--windows 16384,32768,65536] [--strategies none,masking,contextkit]

``--runs N`` takes N runs spread over the archives and their sizes (the output names them); 0: all 61.
Skips (exit 0, with the reason) when the traces are absent.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GATEWAY = "128KB"


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", default=None)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--windows", default="16384,32768,65536")
    ap.add_argument("--strategies", default="none,masking,contextkit")
    ap.add_argument("--no-gateway", action="store_true", help="skip the 128 KB gateway cells")
    args = ap.parse_args(argv)
    folder = find_traces(args.traces)
    if folder is None:
        print("SKIP: no trajectories found (pass --traces DIR holding the *.tgz or *.traj.json runs)")
        return 0
    import contextkit

    contextkit.offline()
    from contextkit.replay import calibrated_errors, load_trajectory, median_abs, replay, token_errors

    today = dt.date.today().isoformat()
    with tempfile.TemporaryDirectory() as tmp:
        files = trajectory_files(folder, Path(tmp))
        chosen = pick(files, args.runs)
        trajs = [load_trajectory(p) for p in chosen]
    names = [f"{p.parent.name}/{t.name}" for p, t in zip(chosen, trajs, strict=True)]
    print(f"# benchmarks/traces.py, {today}: {len(trajs)} of {len(files)} runs from {folder}")
    print("# runs: " + ", ".join(names))
    windows = [int(w) for w in args.windows.split(",") if w]
    cells: list[tuple[int, str | None]] = [(w, None) for w in windows]
    if not args.no_gateway and 65536 in windows:
        cells.append((65536, GATEWAY))
    strategies = [s for s in args.strategies.split(",") if s]
    header = (
        f"{'strategy':<11} {'window':>6} {'gateway':>7} {'runs ok':>8} {'steps':>12} {'rejected':>8} "
        f"{'billed $':>9} {'verbatim':>8} {'reach':>7} {'own ms/step':>11}"
    )
    print(header)
    table: dict[tuple[str, int, str | None], dict[str, Any]] = {}
    for window, gw in cells:
        for strategy in strategies:
            runs = [replay(t, strategy, window=window, max_body=gw) for t in trajs]
            needed = sum(r.needed for r in runs)
            verbatim = sum(sum(len(x.verbatim) for x in r.records) for r in runs) / needed if needed else None
            reach = sum(sum(len(x.verbatim) + len(x.recalled) for x in r.records) for r in runs) / needed if needed else None
            row = {
                "ok": sum(r.served_all for r in runs),
                "served": sum(r.steps_served for r in runs),
                "steps": sum(r.steps_total for r in runs),
                "rejected": sum(r.rejected for r in runs),
                "billed": sum(r.billed for r in runs),
                "verbatim": verbatim,
                "reach": reach,
                "own": statistics.median(r.own_ms_per_step for r in runs),
            }
            table[(strategy, window, gw)] = row
            print(
                f"{strategy:<11} {window // 1024:>5}k {gw or '-':>7} {row['ok']:>4}/{len(runs):<3} "
                f"{row['served']:>5}/{row['steps']:<6} {row['rejected']:>8} {row['billed']:>9.4f} "
                f"{pct(verbatim):>8} {pct(reach):>7} {row['own']:>11.1f}",
                flush=True,
            )
    before: list[float] = []
    after: list[float] = []
    for t in trajs:
        b, a = calibrated_errors(token_errors(t))
        before += b
        after += a
    print(
        f"token-count error vs the recorded prompt_tokens ({len(before)} steps): median |error| "
        f"{pct(median_abs(before))} before calibration, {pct(median_abs(after))} after"
    )
    failed = bars(table, cells, median_abs(after))
    return 1 if failed else 0


def bars(table: dict[tuple[str, int, str | None], dict[str, Any]], cells: list[tuple[int, str | None]], err: float) -> bool:
    failed = False

    def check(ok: bool, text: str) -> None:
        nonlocal failed
        failed |= not ok
        print(f"  [{'ok' if ok else 'FAIL'}] {text}")

    print("bars:")
    for window, gw in cells:
        ck, mask = table.get(("contextkit", window, gw)), table.get(("masking", window, gw))
        where = f"{window // 1024}k" + (f" behind {gw}" if gw else "")
        if ck is None:
            continue
        check(ck["served"] == ck["steps"], f"{where}: contextkit serves every step ({ck['served']}/{ck['steps']})")
        check((ck["reach"] or 0) >= 0.95, f"{where}: first-use references present or one recall away {pct(ck['reach'])} >= 95%")
        if mask is not None:
            check(
                (ck["verbatim"] or 0) >= (mask["verbatim"] or 0),
                f"{where}: verbatim {pct(ck['verbatim'])} >= masking's {pct(mask['verbatim'])}",
            )
            ratio = ck["billed"] / mask["billed"] if mask["billed"] else float("inf")
            check(ratio <= 0.6, f"{where}: billed {ratio:.2f}x masking's (bar 0.6x)")
        check(ck["own"] < 10, f"{where}: own time {ck['own']:.1f} ms/step median (bar 10 ms)")
    check(err <= 0.03, f"token-count error after calibration {pct(err)} (bar 3%)")
    return failed


if __name__ == "__main__":
    sys.exit(main())
