"""``contextkit demo``: a scripted agent behind a 128 KB Cloudflare-style gateway, told live.

Starts the bundled simulator (small window, 128 KB WAF-style body cap), runs an agent that reads
big files for about 30 turns, prints the story (microcompact, pre-flight, rejection, learned cap,
recovery levels, summaries) to stderr as it happens and a final stats table to stdout, and leaves
the archive and the event log on disk.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from contextkit.sizing import format_size


def run_demo(
    out_dir: str | Path = "contextkit-demo",
    *,
    steps: int = 30,
    target_bytes: int = 40_000,
    max_result_chars: int = 60_000,
    quiet: bool = False,
) -> dict[str, Any]:
    from contextkit.archive import Archive
    from contextkit.session.core import Session
    from contextkit.settings import Limits
    from contextkit.sim import GatewaySimulator, Workspace, agent_steps

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    archive_path = out / "archive.sqlite"
    workspace = Workspace(seed=7, target_bytes=target_bytes)
    plan = agent_steps(seed=7, steps=steps)

    def say(text: str) -> None:
        if not quiet:
            print(f"  | {text}", file=sys.stderr, flush=True)

    started = time.monotonic()
    with GatewaySimulator(context_window=128_000, max_body="128KB", reject_with="waf403") as gw:
        say(f"simulator on {gw.api_base}: a 128k-token model behind a 128 KB Cloudflare-style gateway")
        say("the session does not know the gateway's cap; its tools return 30-100 KB outputs")
        session = Session(
            gw.model,
            api_base=gw.api_base,
            api_key="sim-key",
            system="You are a careful coding agent. Read files, then report what you found.",
            limits=Limits(context_window=128_000, tool_result_max_chars=max_result_chars),
            archive=Archive(archive_path, session_id="demo"),
            tools=list(workspace.tools.values()),
            session_id="demo",
            status=say,
        )
        reply = session.send("We are investigating the inventory service. Start with the code, then the logs.")
        for i, (tool, args) in enumerate(plan, 1):
            # Each turn the (scripted) model calls one tool; the directive tells the simulator which.
            reply = session.send(f"[[tool:{tool} {json.dumps(args)}]] step {i}/{len(plan)}: {tool}")
            if i == len(plan) // 2:
                say("the user pastes a 160 KB production log: bigger than the gateway allows")
                log = workspace.tail_log(2_600).content
                reply = session.send("Here is the full crash log from production, please keep it in mind:\n" + log)
        say("manual compaction with an instruction (a summary by the simulator's summarizer)")
        session.compact("keep every file path, line number and command")
        reply = session.send("What is left to do?")
        session.save(out / "session.json")
        requests = gw.requests
    events_path = out / "events.jsonl"
    with open(events_path, "w", encoding="utf-8") as fh:
        for event in session.events:
            fh.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
    stats = session.stats
    rejected = [r for r in requests if not r.accepted]
    table = {
        "final answer": reply.text[:80],
        "requests sent": len(requests),
        "requests rejected by the gateway": len(rejected),
        "largest accepted body": format_size(max((r.bytes for r in requests if r.accepted), default=0)),
        "learned payload cap": format_size(session.payload_cap) if session.payload_cap else "none",
        "recoveries by level": dict(stats.recoveries_by_level),
        "failures by kind": dict(stats.failures_by_kind),
        "compactions": stats.compactions,
        "compactions that truncated": stats.truncation_falls,
        "summaries (LLM calls)": stats.summary_calls,
        "archived entries": len(session.archive),
        "archived bytes": format_size(session.archive.total_bytes),
        "history now": f"{len(session.history)} messages, {format_size(session.measure().bytes)}",
        "wall time": f"{time.monotonic() - started:.1f} s",
        "archive": str(archive_path),
        "event log": str(events_path),
    }
    width = max(len(k) for k in table)
    print("\ncontextkit demo - what happened")
    for key, value in table.items():
        print(f"  {key.ljust(width)}  {value}")
    return table
