"""Benchmark: contextkit at scale - the archive as it grows, many sessions in one process, a long session.

Each figure is printed beside a baseline measured in the same run, with the date:

1. **Archive size x latency** (``--sizes``, default 10k / 50k / 200k entries of 1-20 KB tool outputs,
   log-uniform): one file holds a small session (200 entries spread through it) and a bulk session
   (the rest). Measured through today's ``Archive``: ``recall_context`` (median / p95 over
   ``--queries`` identifier queries for a planted code and as many natural-language ones)
   for the small session and over the whole file (the bulk session granted the small one),
   ``total_bytes``, the first page of ``entries`` (50) (today: median of 5; the baseline, seconds each
   at 200k: one), and how often an identifier query finds its entry in the pack. Baseline: the same entries in a file of the schema before (``user_version``
   0: one index for every scope, OR-ed words filtered by scope afterwards, sizes and listings read
   from the content), queried with that code (``recall_context`` of the archive as it was,
   reconstructed here from its SQL and its pack builder in git history).
2. **Sessions per process** (``--sessions``, default 1 / 10 / 100 concurrent ``asend`` sessions,
   ``--turns`` chat turns each, against one simulator): turns/s, p95 turn latency, RSS. Baseline:
   the same conversations sent with plain ``litellm.acompletion`` (the history a list, no management).
3. **Chat** (``--chat-turns``, part ``chat``): one session's chat turns against the same
   conversation with plain ``litellm.completion``: CPU of the calling thread per turn, the difference
   is contextkit's own CPU (bar: <= 3 ms).
4. **A 500-turn session** (``--long-turns``): an agent session (each turn reads an ~8 KB file)
   behind a 256 KB gateway; ms per turn at turns 10 / 100 / 500 (the median of the 10 turns up to
   each mark), wall and CPU of the calling
   thread (``time.thread_time``: the simulator's threads and the tool's own work not counted).
   Baseline: the same requests (taken from the simulator's log) replayed with plain
   ``litellm.completion``: what is left is contextkit's own work per turn. Where the marks fall in
   the compaction cycle is chance, so it also prints the own CPU of every append-only turn by the
   history's length and its slope (Theil-Sen): work that follows new content has a slope near 0.
   A shared machine's speed drifts during the run, so every turn of the long session is followed
   by a turn of a fresh session (a new one every 10 turns, the same workload): the "fresh" column
   and the by-length table's difference, pair by pair with a bootstrap interval, compare the two at
   the same moments. After every completion a control runs, timed apart: the same fixed
   bookkeeping of contextkit's (four meters measuring and listing one unchanging 121-message
   history). Its work never changes, yet it costs more in the long session, because litellm's work
   on a longer request leaves the processor's caches holding other memory; the by-length table
   prints the long session's extra as a share of the fresh one's for the own work and for the
   control, and the first less the second: contextkit's work that grows with the history. (An
   added walk over every message per request, ``sum(len(m.content) for m in history)``, shows
   there as +10 points at 600+ messages and +1.4 points per 100 messages.)

Files are built once into ``--cache`` (default ``~/.cache/contextkit/scale``) and reused.

    python benchmarks/scale.py                           # everything (the 200k files take minutes to build)
    python benchmarks/scale.py --sizes 10000 --parts archive --queries 10      # a quick look
    python benchmarks/scale.py --parts chat,long                               # contextkit's own CPU
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import hashlib
import itertools
import json
import math
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import contextkit

contextkit.offline()

from contextkit.archive import Archive  # noqa: E402
from contextkit.archive.records import encode_content, origin_parts, searchable_text  # noqa: E402
from contextkit.archive.sqlite import SqliteStore  # noqa: E402
from contextkit.markers import key_for  # noqa: E402
from contextkit.tools import ToolResult  # noqa: E402 - read_file's annotation is resolved from this module

SMALL = 200
BASELINE_COMMIT = "6ecbea7"  # the last commit with the schema-0 archive code
BASELINE_SCHEMA = """
CREATE TABLE blobs (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, content BLOB NOT NULL, bytes INTEGER NOT NULL);
CREATE TABLE entries (session_id TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL, origin_json TEXT,
    origin_text TEXT NOT NULL, turn INTEGER, bytes INTEGER NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (session_id, key));
CREATE INDEX entries_key ON entries(key);
CREATE VIRTUAL TABLE fts USING fts5(body, content='', tokenize='unicode61 remove_diacritics 2')
"""


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def pctl(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- 1. the archive ---------------------------------------------------------------------------------
class Corpus:
    """Deterministic tool outputs: code, logs and prose over a Zipf vocabulary, each with a planted
    identifier (``ERR_<WORD>_<n>`` raised at a path of its own)."""

    def __init__(self, seed: int = 1) -> None:
        rng = random.Random(seed)
        syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "xi", "bo", "da", "fe", "gu"]
        self.vocab = list(dict.fromkeys("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(40_000)))
        weights = [1 / (i + 1) for i in range(len(self.vocab))]
        self.cum = list(itertools_accumulate(weights))
        self.total = self.cum[-1]
        self.rng = rng
        common = ["the", "of", "and", "to", "in", "is", "for", "on", "with", "that", "this", "by", "from", "at", "as", "be", "are", "was", "it", "an", "or", "not", "we", "has", "have"]
        self.lines = []
        for _ in range(30_000):
            k = rng.random()
            words = " ".join(rng.choice(common) if rng.random() < 0.4 else self.word() for _ in range(rng.randint(6, 14)))
            if k < 0.3:
                self.lines.append(f"{rng.randint(1, 999):>5}| def {self.word()}_{self.word()}(self, {self.word()}: int = {rng.randint(0, 999)}) -> None:")
            elif k < 0.6:
                self.lines.append(f"2026-11-29T10:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z INFO [{self.word()}-worker-{rng.randint(1, 8)}] {words}")
            else:
                self.lines.append(words)

    def word(self) -> str:
        return self.vocab[bisect.bisect(self.cum, self.rng.random() * self.total)]

    def entry(self, i: int) -> tuple[str, str]:
        """(content, its planted code) of entry ``i``."""
        rng = random.Random(i * 7919 + 1)
        size = int(math.exp(rng.uniform(math.log(1_000), math.log(20_000))))
        parts: list[str] = []
        n = 0
        while n < size:
            line = self.lines[rng.randrange(len(self.lines))]
            parts.append(line)
            n += len(line) + 1
        code = f"ERR_{self.vocab[rng.randrange(2_000, len(self.vocab))].upper()}_{i:06d}"
        parts.insert(rng.randint(0, len(parts)), f"raise Failure('{code}') at src/{self.vocab[rng.randrange(len(self.vocab))]}/mod_{i}.py:{rng.randint(1, 900)}")
        return "\n".join(parts), code


def itertools_accumulate(values: list[float]) -> list[float]:
    out, total = [], 0.0
    for v in values:
        total += v
        out.append(total)
    return out


def scope_of(i: int, n: int) -> str:
    return "small" if i % (n // SMALL) == 0 and i // (n // SMALL) < SMALL else "bulk"


def build(n: int, cache: Path, corpus: Corpus) -> tuple[Path, Path]:
    """Today's file and the baseline (schema 0) file with the same ``n`` entries."""
    cache.mkdir(parents=True, exist_ok=True)
    new, old = cache / f"scale-{n}.sqlite", cache / f"scale-{n}-schema0.sqlite"
    if new.exists() and old.exists():
        return new, old
    for p in (new, old):
        for suffix in ("", "-wal", "-shm"):
            Path(str(p) + suffix).unlink(missing_ok=True)
    started = time.perf_counter()
    store = SqliteStore(str(new), str(new), new)
    raw = sqlite3.connect(old, isolation_level=None)
    raw.execute("PRAGMA journal_mode = WAL")
    for statement in BASELINE_SCHEMA.split(";"):
        if statement.strip():
            raw.execute(statement)
    raw.execute("BEGIN")
    now = time.time() - n
    for i in range(n):
        content, _code = corpus.entry(i)
        data = encode_content(content)
        key = key_for(content)
        scope = scope_of(i, n)
        origin_json, origin_text = origin_parts({"tool": "run", "turn": i}, i)
        store.put(scope, key, data, "tool_result", origin_json, origin_text, i, now + i)
        blob = raw.execute("INSERT INTO blobs(key, content, bytes) VALUES (?, ?, ?)", (key, data, len(data))).lastrowid
        raw.execute("INSERT INTO fts(rowid, body) VALUES (?, ?)", (blob, searchable_text(data)))
        raw.execute("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (scope, key, "tool_result", origin_json, origin_text, i, len(data), now + i))  # fmt: skip
        if i % 5_000 == 4_999:
            raw.execute("COMMIT")
            raw.execute("BEGIN")
            print(f"  built {i + 1:,} of {n:,} entries ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    raw.execute("COMMIT")
    raw.close()
    store.close()
    return new, old


class BaselineArchive:
    """The archive as it was (schema 0), for its ``recall_context``: the SQL of its ``search``,
    ``get``, ``entry``, ``total_bytes`` and ``entries``, over a schema-0 file."""

    def __init__(self, path: Path, scopes: list[str]) -> None:
        self.conn = sqlite3.connect(path)
        self.scopes = scopes
        self.marks = ",".join("?" * len(scopes))

    def get(self, key: str) -> str | None:
        row = self.conn.execute(f"SELECT b.content FROM blobs b WHERE b.key = ? AND EXISTS (SELECT 1 FROM entries e WHERE e.key = b.key AND e.session_id IN ({self.marks}))", (key, *self.scopes)).fetchone()
        return None if row is None else bytes(row[0]).decode("utf-8", "surrogatepass")

    def search(self, fts_query: str, limit: int) -> list[Any]:
        from types import SimpleNamespace

        rows = self.conn.execute(
            "SELECT b.key, bm25(fts) AS score FROM fts JOIN blobs b ON b.id = fts.rowid WHERE fts MATCH ? AND EXISTS"
            f" (SELECT 1 FROM entries e WHERE e.key = b.key AND e.session_id IN ({self.marks})) ORDER BY score, b.id LIMIT ?",
            (fts_query, *self.scopes, int(limit)),
        ).fetchall()
        hits = []
        for key, score in rows:  # the old search read each hit's entry row (with the content's head) too
            self.conn.execute(f"SELECT e.key, e.kind, e.origin_text, substr(b.content, 1, 480) FROM entries e JOIN blobs b ON b.key = e.key WHERE e.session_id IN ({self.marks}) AND e.key = ?", (*self.scopes, key)).fetchall()
            hits.append(SimpleNamespace(key=key, kind="tool_result", origin="-", score=float(score)))
        return hits

    def total_bytes(self) -> int:
        return int(self.conn.execute(f"SELECT coalesce(sum(bytes), 0) FROM blobs WHERE key IN (SELECT key FROM entries WHERE session_id IN ({self.marks}))", self.scopes).fetchone()[0])

    def entries(self) -> list[Any]:
        return self.conn.execute(f"SELECT e.key, e.session_id, e.kind, e.origin_text, e.bytes, e.turn, e.created_at, substr(b.content, 1, 480) FROM entries e JOIN blobs b ON b.key = e.key WHERE e.session_id IN ({self.marks}) ORDER BY e.created_at, e.rowid", self.scopes).fetchall()


def baseline_recall_context() -> Callable[..., Any]:
    """The pack builder of ``BASELINE_COMMIT`` (``archive/search.py``), loaded from git history."""
    import subprocess
    import types

    source = subprocess.run(["git", "show", f"{BASELINE_COMMIT}:contextkit/archive/search.py"], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).resolve().parents[1]).stdout  # fmt: skip
    source = source.replace("from contextkit.archive._db import SearchHit", "from contextkit.archive.records import SearchHit")
    module = types.ModuleType("baseline_search")
    sys.modules["baseline_search"] = module  # dataclasses look their module up
    exec(compile(source, "baseline_search.py", "exec"), module.__dict__)
    return module.recall_context


@dataclass
class Timing:
    median: float
    p95: float
    found: int
    asked: int


def time_queries(pack: Callable[[str], Any], queries: list[tuple[str, str | None]], found_in: Callable[[Any, str], bool]) -> Timing:
    times, found, asked = [], 0, 0
    for text, target in queries:
        t = time.perf_counter()
        result = pack(text)
        times.append(time.perf_counter() - t)
        if target is not None:
            asked += 1
            found += found_in(result, target)
    return Timing(statistics.median(times), pctl(times, 0.95), found, asked)


def queries_for(n: int, corpus: Corpus, scope: str, count: int) -> list[tuple[str, str | None]]:
    rng = random.Random(n + len(scope))
    members = [i for i in range(n) if scope == "whole" or scope_of(i, n) == scope]
    picks = rng.sample(members, min(count, len(members)))
    out: list[tuple[str, str | None]] = []
    for i in picks:
        content, code = corpus.entry(i)
        out.append((f"what raised {code}?", key_for(content)))
    for _ in range(count):
        words = [corpus.vocab[rng.randrange(50, len(corpus.vocab))] for _ in range(3)]
        out.append((" ".join(words), None))
    return out


def archive_part(sizes: list[int], cache: Path, queries: int) -> list[tuple[str, bool]]:
    corpus = Corpus()
    old_pack = baseline_recall_context()
    bars: list[tuple[str, bool]] = []
    print("\n== 1. archive size x latency (today's archive vs the schema-0 archive, same entries)")
    header = f"{'entries':>8}  {'reader':<6}  {'measure':<24}  {'today':>12}  {'baseline':>12}"
    print(header + "\n" + "-" * len(header))
    for n in sizes:
        new, old = build(n, cache, corpus)
        for reader, scopes in (("small", ["small"]), ("whole", ["bulk", "small"])):
            arc = Archive(new, session_id=scopes[0], read_scopes=scopes[1:], retention=None)
            base = BaselineArchive(old, scopes)
            qs = queries_for(n, corpus, "small" if reader == "small" else "whole", queries)
            today = time_queries(arc.recall_context_result, qs, lambda r, k: any(i.key == k for i in r.items))
            then = time_queries(partial(old_pack, base), qs, lambda r, k: any(i.key == k for i in r.items))
            tb_new = statistics.median(timed(lambda a=arc: a.total_bytes) for _ in range(5))
            t0 = time.perf_counter()
            base.total_bytes()
            tb_old = time.perf_counter() - t0
            page_new = statistics.median(timed(lambda a=arc: a.entries(50)) for _ in range(5))
            t0 = time.perf_counter()
            base.entries()[:50]
            page_old = time.perf_counter() - t0
            rows = [
                ("recall_context median", ms(today.median), ms(then.median)),
                ("recall_context p95", ms(today.p95), ms(then.p95)),
                ("identifier in the pack", f"{today.found}/{today.asked}", f"{then.found}/{then.asked}"),
                ("total_bytes", ms(tb_new), ms(tb_old)),
                ("entries, first page of 50", ms(page_new), ms(page_old)),
            ]
            for name, a, b in rows:
                print(f"{n:>8,}  {reader:<6}  {name:<24}  {a:>12}  {b:>12}")
            if n == max(sizes) and n >= 200_000:
                limit = 0.020 if reader == "small" else 0.150
                bars.append((f"{n:,} entries, {reader}: recall_context median {ms(today.median)} <= {ms(limit)}", today.median <= limit))
                bars.append((f"{n:,} entries, {reader}: total_bytes {ms(tb_new)} <= 50 ms", tb_new <= 0.050))
                bars.append((f"{n:,} entries, {reader}: first page of entries {ms(page_new)} <= 50 ms", page_new <= 0.050))
                bars.append((f"{n:,} entries, {reader}: identifier query in the pack {today.found} of {today.asked} (all)",
                             today.found == today.asked))  # fmt: skip
            arc.close()
            base.conn.close()
    return bars


# --- 2. sessions per process ------------------------------------------------------------------------
def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def chat_text(session: int, turn: int) -> str:
    rng = random.Random(session * 1000 + turn)
    return f"turn {turn} of session {session}: " + " ".join(rng.choice(("deploy", "latency", "cache", "retry", "index", "query", "budget")) for _ in range(rng.randint(150, 300)))


async def _contextkit_sessions(gw: Any, n: int, turns: int, folder: Path) -> tuple[float, list[float]]:
    from contextkit import Session

    archive = Archive(folder / "sessions.sqlite", retention=None)
    sessions = [Session(gw.model, api_base=gw.api_base, api_key="k", archive=archive.with_scope(f"s{i}"), status=None, on_flush=None)
                for i in range(n)]  # fmt: skip
    latencies: list[float] = []

    async def one(i: int) -> None:
        for t in range(turns):
            started = time.perf_counter()
            await sessions[i].asend(chat_text(i, t))
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - started
    for s in sessions:
        s.archive.close()
        s.close()
    archive.close()
    return wall, latencies


async def _plain_sessions(gw: Any, n: int, turns: int) -> tuple[float, list[float]]:
    from contextkit import backend

    litellm = backend.litellm()
    latencies: list[float] = []

    async def one(i: int) -> None:
        history: list[dict[str, Any]] = []
        for t in range(turns):
            history.append({"role": "user", "content": chat_text(i, t)})
            started = time.perf_counter()
            reply = await litellm.acompletion(model=gw.model, messages=list(history), api_base=gw.api_base, api_key="k")
            history.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - started, latencies


def sessions_part(counts: list[int], turns: int) -> None:
    from contextkit.sim import GatewaySimulator

    print(f"\n== 2. sessions per process ({turns} chat turns each, asend, one simulator; baseline: plain litellm.acompletion)")
    header = f"{'sessions':>8}  {'':<10}  {'turns/s':>8}  {'p95 turn':>10}  {'RSS':>8}"
    print(header + "\n" + "-" * len(header))
    with tempfile.TemporaryDirectory() as tmp, GatewaySimulator() as gw:
        asyncio.run(_plain_sessions(gw, 1, 1))  # warm up litellm and the connection pool
        asyncio.run(_contextkit_sessions(gw, 1, 1, Path(tmp)))
        for n in counts:
            for name, run in (("contextkit", lambda n=n: _contextkit_sessions(gw, n, turns, Path(tmp))),
                              ("baseline", lambda n=n: _plain_sessions(gw, n, turns))):  # fmt: skip
                gw.clear_log()
                wall, lat = asyncio.run(run())
                print(f"{n:>8}  {name:<10}  {n * turns / wall:>8.1f}  {ms(pctl(lat, 0.95)):>10}  {rss_bytes() / 2**20:>6.0f} MB")


class InsideLitellm:
    """CPU of the calling thread spent inside ``backend.completion`` (litellm, the SDK, the socket):
    a turn's CPU less this is contextkit's own, measured directly rather than against a baseline.
    ``control``: run after every completion and timed apart (``control_cpu``), in neither figure."""

    def __init__(self, control: Callable[[], None] | None = None) -> None:
        from contextkit import backend

        self.cpu = 0.0
        self.control_cpu = 0.0
        self._backend, self._completion = backend, backend.completion

        def completion(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return self._completion(*args, **kwargs)
            finally:
                self.cpu += time.thread_time() - started
                if control is not None:
                    started = time.thread_time()
                    control()
                    self.control_cpu += time.thread_time() - started

        backend.completion = completion  # type: ignore[assignment]

    def close(self) -> None:
        self._backend.completion = self._completion  # type: ignore[assignment]


def fixed_work() -> Callable[[], None]:
    """The control of the long session: the same bookkeeping calls of contextkit's (four meters each
    measuring and listing one unchanging history of 121 messages, every cache of theirs warm) on
    the same objects every time. Its work never changes, so whatever it costs more in one session
    than in another at the same moment is the state litellm's work left the processor in (caches
    filled with a longer request), not contextkit's work growing with the history."""
    from contextkit.messages import Message, ToolCall
    from contextkit.sizing import RequestMeter

    history = [Message.system("You are a coding agent.")]
    for i in range(40):
        history += [
            Message.user(f"step {i}: look at module {i} " * 8),
            Message.assistant("", [ToolCall(f"call_{i}", "read_file", json.dumps({"path": f"src/mod_{i}.py"}))]),
            Message.tool(f"call_{i}", f"{i:>4}| def handler_{i}(request): return request\n" * 12),
        ]
    meters = [RequestMeter() for _ in range(4)]

    def control() -> None:
        for meter in meters:
            meter.measure(history)
            meter.wire_list(history)

    control()
    return control


# --- 3. chat: contextkit's own CPU per turn -------------------------------------------------------------
def chat_part(turns: int) -> list[tuple[str, bool]]:
    """One session, ``turns`` chat turns of 1-2 KB (``send``), against the same conversation sent with
    plain ``litellm.completion``: CPU of the calling thread per turn (``time.thread_time``: the
    simulator serves from threads of its own, so its work is not counted); the difference is
    contextkit's own CPU."""
    from contextkit import Session, backend
    from contextkit.sim import GatewaySimulator

    litellm = backend.litellm()
    print(f"\n== 3. chat: {turns} chat turns, one session (send); baseline: the same conversation with plain litellm.completion")
    with tempfile.TemporaryDirectory() as tmp, GatewaySimulator() as gw:
        archive = Archive(Path(tmp) / "chat.sqlite", session_id="chat", retention=None)
        session = Session(gw.model, api_base=gw.api_base, api_key="k", archive=archive, session_id="chat", status=None, on_flush=None)
        session.send("warm up")
        litellm.completion(model=gw.model, messages=[{"role": "user", "content": "warm up"}], api_base=gw.api_base, api_key="k")
        ck: list[float] = []
        base: list[float] = []
        direct: list[float] = []
        history: list[dict[str, Any]] = []
        inside = InsideLitellm()
        for t in range(turns):
            text = chat_text(0, t)
            inside.cpu = 0.0
            started = time.thread_time()
            session.send(text)
            ck.append(time.thread_time() - started)
            direct.append(ck[-1] - inside.cpu)
            history.append({"role": "user", "content": text})
            started = time.thread_time()
            reply = litellm.completion(model=gw.model, messages=list(history), api_base=gw.api_base, api_key="k")
            base.append(time.thread_time() - started)
            history.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
        inside.close()
        session.close()
        archive.close()
    a, b, own = statistics.median(ck), statistics.median(base), statistics.median(direct)
    print(f"CPU per turn (median): contextkit {a * 1000:.1f} ms, baseline {b * 1000:.1f} ms, difference {(a - b) * 1000:.1f} ms; "
          f"contextkit's own (its turn less the CPU inside litellm's completion) {own * 1000:.1f} ms, "
          f"turns 1-10 {statistics.median(direct[:10]) * 1000:.1f} ms, last 10 {statistics.median(direct[-10:]) * 1000:.1f} ms")  # fmt: skip
    return [(f"chat: contextkit's own CPU per turn {own * 1000:.1f} ms <= 3 ms", own <= 0.003)]


# --- 4. a long session ------------------------------------------------------------------------------
def long_part(turns: int) -> None:
    from contextkit import Limits, Session, backend
    from contextkit.sim import GatewaySimulator, Workspace

    points = [p for p in (10, 100, 500) if p <= turns]
    window = 10  # turns up to each mark: a pass rewrites every few turns near the cap, so 5 were too few
    ws = Workspace(seed=1, target_bytes=8_000)

    tool_cpu = [0.0]  # the tool's CPU (building the file), the workload's and not contextkit's

    def read_file(path: str) -> ToolResult:
        """Read a whole file."""
        started = time.thread_time()
        out = ws.read_file(path)
        tool_cpu[0] += time.thread_time() - started
        return ToolResult(out.content, path=out.path, lines=out.lines)

    litellm = backend.litellm()
    print(f"\n== 4. a {turns}-turn agent session (an ~8 KB read per turn, 256 KB gateway); baseline: its requests replayed with plain litellm")
    print(f"   the median of the {window} turns up to each mark; wall: ms per turn; CPU: of the calling thread (time.thread_time;")
    print("   the simulator's threads and the tool not counted);")
    print("   own direct: contextkit's turn CPU less the CPU inside litellm's completion (no baseline needed);")
    print("   append-only: own direct over the turns whose requests only appended to the last one (how many), without")
    print("   the turns where a pass or a compaction rewrote the history; fresh: own direct of a session never older than")
    print(f"   {window} turns, one of its turns after each turn of the long one (the same moments: the machine's drift cancels);")
    print("   control: the same fixed bookkeeping of contextkit's after every completion (timed apart, in no other column):")
    print("   what it costs more in the long session is the state litellm's longer requests leave the processor in")
    header = (f"{'turn':>5}  {'contextkit wall':>15}  {'baseline wall':>13}  {'own wall':>9}  {'contextkit CPU':>14}  "
              f"{'baseline CPU':>12}  {'own CPU':>8}  {'own direct':>10}  {'append-only':>15}  {'fresh':>7}  {'history':>9}  {'messages':>8}")  # fmt: skip
    print(header + "\n" + "-" * len(header))
    inside = InsideLitellm(control=fixed_work())

    with tempfile.TemporaryDirectory() as tmp, GatewaySimulator(max_body="256KB", reject_with="413", record_bodies=True) as gw:

        def open_session(name: str) -> tuple[Session, Archive, list[bool]]:
            archive = Archive(Path(tmp) / f"{name}.sqlite", session_id=name, retention=None)
            session = Session(gw.model, api_base=gw.api_base, api_key="k", archive=archive, session_id=name, tools=[read_file],
                              limits=Limits(context_window=1_000_000), status=None, on_flush=None)  # fmt: skip
            session.send("warm up")
            rewrote = [False]  # a request of this turn was not the last one's continuation (a pass, a compaction)
            session.events.subscribe(lambda e: rewrote.__setitem__(0, rewrote[0] or getattr(e, "append_only", None) is False))
            return session, archive, rewrote

        def one_turn(session: Session, rewrote: list[bool], turn: int) -> tuple[float, float, float, bool, float]:
            """(wall, CPU less the tool's, own direct, append-only, the control's CPU) of one turn."""
            rewrote[0] = False
            tool_cpu[0] = 0.0
            inside.cpu = inside.control_cpu = 0.0
            started, cpu = time.perf_counter(), time.thread_time()
            session.send(f'[[tool:read_file {{"path": "src/mod_{turn % 97}.py"}}]] turn {turn}: check this module')
            control = inside.control_cpu  # its CPU stands for its wall time too: it waits on nothing
            took, took_cpu = time.perf_counter() - started - control, time.thread_time() - cpu - tool_cpu[0] - control
            return took, took_cpu, took_cpu - inside.cpu, not rewrote[0], control

        session, archive, rewrote = open_session("long")
        fresh: tuple[Session, Archive, list[bool]] | None = None
        cols = ("own", "base", "own_cpu", "base_cpu", "direct", "sizes", "lengths", "quiet", "fresh")
        at: dict[str, dict[int, list[float]]] = {c: {p: [] for p in points} for c in cols}
        # (messages in the long history, its own direct, fresh's, its control, fresh's) when both appended only
        paired: list[tuple[int, float, float, float, float]] = []
        for turn in range(1, turns + 1):
            gw.clear_log()
            took, took_cpu, own_direct, quiet, control = one_turn(session, rewrote, turn)
            near = [p for p in points if p - window < turn <= p]
            if near:
                cell = near[0]
                at["direct"][cell].append(own_direct)
                if quiet:
                    at["quiet"][cell].append(own_direct)
                at["sizes"][cell].append(session.measure().bytes)
                at["lengths"][cell].append(len(session.history))
                bodies = [json.loads(gw.body(r.seq)) for r in gw.requests if r.accepted]
                t0, cpu = time.perf_counter(), time.thread_time()
                for body in bodies:
                    litellm.completion(model=gw.model, messages=body["messages"], tools=body.get("tools"), api_base=gw.api_base, api_key="k")
                at["own"][cell].append(took)
                at["base"][cell].append(time.perf_counter() - t0)
                at["own_cpu"][cell].append(took_cpu)
                at["base_cpu"][cell].append(time.thread_time() - cpu)
            if fresh is None or turn % window == 1:
                if fresh is not None:
                    fresh[0].close()
                    fresh[1].close()
                fresh = open_session(f"fresh-{turn}")
            _, _, fresh_direct, fresh_quiet, fresh_control = one_turn(fresh[0], fresh[2], turn)
            if near:
                at["fresh"][near[0]].append(fresh_direct)
            if quiet and fresh_quiet:
                paired.append((len(session.history), own_direct, fresh_direct, control, fresh_control))
        if fresh is not None:
            fresh[0].close()
            fresh[1].close()
        inside.close()
        med = {c: {p: statistics.median(v) if v else math.nan for p, v in cols_.items()} for c, cols_ in at.items()}
        for p in points:
            a, b, c, d = med["own"][p], med["base"][p], med["own_cpu"][p], med["base_cpu"][p]
            calm = f"{med['quiet'][p] * 1000:.1f} ms ({len(at['quiet'][p])})" if at["quiet"][p] else "-"
            print(f"{p:>5}  {a * 1000:>12.1f} ms  {b * 1000:>10.1f} ms  {(a - b) * 1000:>6.1f} ms  {c * 1000:>11.1f} ms  "
                  f"{d * 1000:>9.1f} ms  {(c - d) * 1000:>5.1f} ms  {med['direct'][p] * 1000:>7.1f} ms  "
                  f"{calm:>15}  {med['fresh'][p] * 1000:>4.1f} ms  {med['sizes'][p] / 1024:>6.0f} KB  {med['lengths'][p]:>8.0f}")  # fmt: skip
        print_by_length(paired)
        session.close()
        archive.close()


def theil_sen(points: list[tuple[int, float]]) -> float:
    """The median of the pairwise slopes (seconds per message): a full garbage collection now and then
    (a few hundred ms in a turn) would drag a least-squares line wherever it falls."""
    slopes = [(tb - ta) / (nb - na) for i, (na, ta) in enumerate(points) for nb, tb in points[i + 1 :] if nb != na]
    return statistics.median(slopes) if slopes else math.nan


@dataclass(frozen=True)
class LengthBin:
    """The append-only turns of one range of history lengths (``print_by_length``): medians in
    seconds, the long session less the fresh one (pair by pair) with its 95% interval, and that
    extra as a share of the fresh session's figure for the own work and for the control, and the
    first less the second (with its interval)."""

    label: str
    turns: int
    long: float = math.nan
    fresh: float = math.nan
    extra: float = math.nan
    extra_interval: tuple[float, float] = (math.nan, math.nan)
    own_share: float = math.nan
    control_share: float = math.nan
    beyond: tuple[float, float] = (math.nan, math.nan)

    @property
    def beyond_control(self) -> float:
        return self.own_share - self.control_share


def _shares(pairs: list[tuple[float, float, float, float]]) -> tuple[float, float]:
    """(own, control): the median of the long session's extra over the fresh one's, as a share of
    the fresh session's median, for ``(own long, own fresh, control long, control fresh)`` pairs."""
    own = statistics.median(a - b for a, b, _, _ in pairs) / statistics.median(b for _, b, _, _ in pairs)
    control = statistics.median(c - d for _, _, c, d in pairs) / statistics.median(d for _, _, _, d in pairs)
    return own, control


def by_length(turns: list[tuple[int, float, float, float, float]], seed: int = 0) -> tuple[list[LengthBin], dict[str, float]]:
    """The bins of ``print_by_length`` and its slopes per message (Theil-Sen: seconds for ``long``,
    ``fresh`` and ``extra``; shares of the fresh session's median for ``own``, ``control`` and
    ``beyond``), from ``(messages in the long history, own long, own fresh, control long, control
    fresh)`` per pair of append-only turns."""
    rng = random.Random(seed)
    edges = [0, 100, 300, 600, 10**9]
    bins = []
    for lo, hi in itertools.pairwise(edges):
        got = [(a, b, c, d) for n, a, b, c, d in turns if lo <= n < hi]
        label = f"{lo}+" if hi == 10**9 else f"{lo}-{hi - 1}"
        if not got:
            bins.append(LengthBin(label, 0))
            continue
        diffs = [a - b for a, b, _, _ in got]
        # the intervals resample the pairs (bootstrap, 1,000 draws)
        boots = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(1000))
        own, control = _shares(got)
        beyond = sorted(o - c for o, c in (_shares(rng.choices(got, k=len(got))) for _ in range(1000)))
        bins.append(LengthBin(
            label, len(got), statistics.median(a for a, _, _, _ in got), statistics.median(b for _, b, _, _ in got),
            statistics.median(diffs), (boots[25], boots[974]), own, control, (beyond[25], beyond[974]),
        ))  # fmt: skip
    own_fresh = statistics.median(b for _, _, b, _, _ in turns) if turns else math.nan
    control_fresh = statistics.median(d for _, _, _, _, d in turns) if turns else math.nan
    slopes = {
        "long": theil_sen([(n, a) for n, a, _, _, _ in turns]),
        "fresh": theil_sen([(n, b) for n, _, b, _, _ in turns]),
        "extra": theil_sen([(n, a - b) for n, a, b, _, _ in turns]),
        "own": theil_sen([(n, (a - b) / own_fresh) for n, a, b, _, _ in turns]),
        "control": theil_sen([(n, (c - d) / control_fresh) for n, _, _, c, d in turns]),
    }
    slopes["beyond"] = slopes["own"] - slopes["control"]
    return bins, slopes


def print_by_length(turns: list[tuple[int, float, float, float, float]]) -> None:
    """Own direct CPU of every append-only turn of the long session by the history's length (where the
    marks fall depends on when compaction last ran), beside the fresh session's turn right after it,
    the difference of the two (pair by pair) and the slopes (Theil-Sen): a turn whose work follows
    its new content costs what a fresh session's turn costs at any length - or as much more as the
    control, whose work never changes, costs more at the same moments (``fixed_work``). The last
    columns put the two side by side, as shares of the fresh session's figure: what contextkit's
    own work costs beyond the control is what grows with the history."""
    print("   own direct over every turn where both sessions only appended, by messages in the long history (median);")
    print("   long - fresh as a share of fresh, for the own work and for the control, and the first less the second:")
    print(f"   {'messages':>9}  {'turns':>5}  {'long':>7}  {'fresh':>7}  {'long - fresh':>12}  {'95% interval':>17}  "
          f"{'own':>5}  {'control':>7}  {'own - control':>13}  {'95% interval':>15}")  # fmt: skip
    bins, slopes = by_length(turns)
    for b in bins:
        if not b.turns:
            print(f"   {b.label:>9}  {0:>5}")
            continue
        interval = f"{b.extra_interval[0] * 1000:+.2f} to {b.extra_interval[1] * 1000:+.2f} ms"
        print(f"   {b.label:>9}  {b.turns:>5}  {b.long * 1000:>4.1f} ms  {b.fresh * 1000:>4.1f} ms  {b.extra * 1000:>+9.2f} ms  "
              f"{interval:>17}  {b.own_share:>+5.0%}  {b.control_share:>+7.0%}  {b.beyond_control * 100:>+9.1f} pts  "
              f"{b.beyond[0] * 100:+.1f} to {b.beyond[1] * 100:+.1f}")  # fmt: skip
    print(f"   slope (Theil-Sen, per 100 messages): long {slopes['long'] * 1e8:+.0f} us, fresh {slopes['fresh'] * 1e8:+.0f} us "
          f"(the machine's drift), long - fresh {slopes['extra'] * 1e8:+.0f} us")  # fmt: skip
    print(f"   as shares of fresh, per 100 messages: own {slopes['own'] * 1e4:+.1f}%, control {slopes['control'] * 1e4:+.1f}%, "
          f"own beyond the control {slopes['beyond'] * 1e4:+.1f} pts")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,50000,200000")
    parser.add_argument("--queries", type=int, default=30, help="identifier queries, and as many natural-language ones, per reader and size")
    parser.add_argument("--sessions", default="1,10,100")
    parser.add_argument("--turns", type=int, default=10, help="chat turns per session in part 2")
    parser.add_argument("--long-turns", type=int, default=500)
    parser.add_argument("--parts", default="archive,sessions,chat,long", help="comma-separated: archive, sessions, chat, long")
    parser.add_argument("--chat-turns", type=int, default=50, help="chat turns of the chat part")
    parser.add_argument("--cache", default=str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "contextkit" / "scale"))
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    print(f"benchmarks/scale.py - {time.strftime('%Y-%m-%d %H:%M')} - {os.cpu_count()} CPUs, SQLite {sqlite3.sqlite_version}")
    bars: list[tuple[str, bool]] = []
    if "archive" in parts:
        bars += archive_part([int(s) for s in args.sizes.split(",")], Path(args.cache), args.queries)
    if "sessions" in parts:
        sessions_part([int(s) for s in args.sessions.split(",")], args.turns)
    if "chat" in parts:
        bars += chat_part(args.chat_turns)
    if "long" in parts:
        long_part(args.long_turns)
    if bars:
        print("\nacceptance:")
        for text, met in bars:
            print(f"  [{'met' if met else 'NOT MET'}] {text}")
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    print(f"\n(script {digest})")
    return 0 if all(met for _, met in bars) else 1


if __name__ == "__main__":
    sys.exit(main())
