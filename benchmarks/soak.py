"""Soak: a 1,000-turn agent session against the simulator in bounded memory.

Run: ``.venv/bin/python benchmarks/soak.py [--turns 1000] [--max-events 5000] [--tracemalloc]``
(tracemalloc makes the run ~5x slower; RSS is always measured).

Every turn the model calls ``read_file`` (an ~8 KB result) and then answers, through litellm over
real HTTP to an in-process ``GatewaySimulator`` with a 256 KB gateway cap: the session learns the
cap from the first rejection, then pre-flight compaction, microcompact and the archive keep the
history bounded. At turns 100 / 500 / 1000 it prints the history, the kept events, the archive on
disk, the meter cache and undo snapshots, Python heap (with ``--tracemalloc``: current, and peak
since the previous checkpoint) and the RSS, then the ratios 1000/100. The simulator's request log is cleared each turn (it is test tooling, not
part of the session's footprint).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.events import EventLog
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace
from contextkit.sizing import format_size
from contextkit.tools import ToolResult


@dataclass
class Checkpoint:
    turn: int
    messages: int
    history_bytes: int
    events: int
    events_dropped: int
    archive_entries: int
    archive_file: int
    meter_entries: int
    undo_bytes: int
    heap_current: int
    heap_peak: int
    rss: int
    seconds: float


def rss_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # peak, on platforms without /proc


def soak(
    turns: int = 1_000,
    checkpoints: tuple[int, ...] = (100, 500, 1_000),
    *,
    max_events: int | None = 5_000,
    trace: bool = False,
    folder: Path | None = None,
    report: bool = True,
    max_body: str = "256KB",
) -> list[Checkpoint]:
    ws = Workspace(seed=1, target_bytes=8_000)

    def read_file(path: str) -> ToolResult:
        """Read a whole file."""
        out = ws.read_file(path)
        return ToolResult(out.content, path=out.path, lines=out.lines)

    results: list[Checkpoint] = []
    with tempfile.TemporaryDirectory() as tmp, GatewaySimulator(max_body=max_body, reject_with="413") as gw:
        base = folder or Path(tmp)
        archive = Archive(base / "soak.sqlite", session_id="soak")
        session = Session(
            gw.model, api_base=gw.api_base, api_key="sim-key", archive=archive, session_id="soak",
            tools=[read_file], limits=Limits(context_window=1_000_000), events=EventLog(max_events=max_events),
            status=None, on_flush=None,
        )  # fmt: skip
        session.send("warm up: import litellm and tiktoken before measuring")
        if trace:
            tracemalloc.start()
        started = time.perf_counter()
        for turn in range(1, turns + 1):
            session.send(f'[[tool:read_file {{"path": "src/mod_{turn % 97}.py"}}]] turn {turn}: check this module')
            gw.clear_log()
            if turn in checkpoints:
                gc.collect()
                current, peak = tracemalloc.get_traced_memory() if trace else (0, 0)
                if trace:
                    tracemalloc.reset_peak()
                m = session.measure()
                point = Checkpoint(
                    turn, m.messages, m.bytes, len(session.events), session.events.dropped, len(archive),
                    sum(p.stat().st_size for p in base.glob("soak.sqlite*")), session._meter.entries,
                    sum(len(msg.content) for snap in session.compactor.undo_stack for msg in snap),
                    current, peak, rss_bytes(), time.perf_counter() - started,
                )  # fmt: skip
                results.append(point)
                if report:
                    print_point(point)
        if trace:
            tracemalloc.stop()
        archive.close()
    return results


def print_point(p: Checkpoint) -> None:
    print(
        f"turn {p.turn:>5}: history {p.messages:>4} msgs {format_size(p.history_bytes):>9} | events kept "
        f"{p.events:>5} (dropped {p.events_dropped:>6}) | archive {p.archive_entries:>5} entries "
        f"{format_size(p.archive_file):>9} on disk | meter {p.meter_entries:>5} | undo {format_size(p.undo_bytes):>9} | "
        f"heap {format_size(p.heap_current):>9} (peak {format_size(p.heap_peak):>9}) | RSS {format_size(p.rss):>9} | "
        f"{p.seconds:6.1f} s",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000)
    parser.add_argument("--max-events", type=int, default=5_000, help="EventLog(max_events=...); 0 = unbounded")
    parser.add_argument("--tracemalloc", action="store_true", help="also trace the Python heap (slower)")
    args = parser.parse_args(argv)
    marks = tuple(t for t in (100, 500, 1_000) if t <= args.turns) or (args.turns,)
    points = soak(args.turns, marks, max_events=args.max_events or None, trace=args.tracemalloc)
    first, last = points[0], points[-1]
    if last.turn != first.turn:
        heap = f"heap {last.heap_current / first.heap_current:.2f}x, " if first.heap_current else ""
        print(
            f"ratio turn {last.turn}/{first.turn}: {heap}RSS {last.rss / first.rss:.2f}x, "
            f"history bytes {last.history_bytes / first.history_bytes:.2f}x, "
            f"archive on disk {last.archive_file / max(first.archive_file, 1):.2f}x (grows: it keeps every original)"
        )
    return 0


if __name__ == "__main__":
    from contextkit import offline

    offline()  # a benchmark owns its process: litellm's bundled cost map and tokenizers, no network
    sys.exit(main())
