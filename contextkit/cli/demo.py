"""``contextkit demo``: a scripted agent behind a 128 KB Cloudflare-style gateway, told as a story.

Starts the bundled simulator (a 128,000-token model behind a gateway that refuses bodies over
128 KB with a 403 page; the session is not told), runs an agent that reads files, greps and tails
logs, has the user paste a log bigger than the gateway allows half-way, and ends with a manual
compaction and one more question. The story goes to stderr in numbered steps, one line per turn
(routine status folded into it) and one line per event that matters (a refusal, a learned cap, a
recovery step, a summary or truncation); every figure is measured in the run, none is written by
hand. Stdout gets the numbers and three closing sentences: what the gateway did, what the session
learned, what was kept and where. The archive, the saved session and the event log go to a new
temporary folder unless ``--out`` names one.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from contextkit.events import CapEvent, CompactionEvent, Event, RecoveryEvent, RequestEvent
from contextkit.sizing import format_size

STEPS = 5  # the numbered steps of the story
GATEWAY_CAP = "128KB"
WINDOW = 128_000
# a paste the gateway would take on its own, but not on top of the agent's history: recovery can
# then shrink the history and keep the whole paste (a paste bigger than the cap itself could only be
# sent as an excerpt, which cannot tell a size limit from a firewall objecting to its content)
PASTE_LINES = 700


class _Story:
    """Prints the story: numbered steps, one line per turn, one line per event that matters."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.turn_notes: dict[str, int] = {}
        self.lines: list[str] = []  # everything printed, for the caller and the tests

    def say(self, text: str) -> None:
        self.lines.append(text)
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def step(self, n: int, text: str) -> None:
        self.say(f"[{n}/{STEPS}] {text}")

    def on_event(self, event: Event) -> None:
        from contextkit.widgets.labels import failure_label, level_label, phase_label

        if isinstance(event, RequestEvent) and event.outcome != "ok":
            self.say(f"      ! the gateway refused a {format_size(event.bytes)} request: {failure_label(event.failure_kind)}")
        elif isinstance(event, CapEvent) and event.source == "learned":
            self.say(
                f"      ! the session learned a send limit of {format_size(event.cap_bytes)} "
                f"(3/4 of the refused {format_size(event.rejected_bytes or 0)})"
            )
        elif isinstance(event, CapEvent) and event.source == "probe":
            self.say(f"      ! after clean turns the session raised its send limit to {format_size(event.cap_bytes)}")
        elif isinstance(event, RecoveryEvent) and event.outcome == "retrying":
            self.say(
                f"      ! recovery {level_label(event.level)}: the history went from {format_size(event.bytes_before)} "
                f"to {format_size(event.bytes_after)}, then the request was sent again"
            )
        elif isinstance(event, CompactionEvent) and event.outcome == "applied" and event.phase not in ("start", "done"):
            if event.stage in ("summary", "truncation"):
                self.say(
                    f"      ! compaction, {event.stage} stage: {phase_label(event.phase)} "
                    f"({format_size(event.bytes_before)} -> {format_size(event.bytes_after)})"
                )
            else:
                name = phase_label(event.phase)
                self.turn_notes[name] = self.turn_notes.get(name, 0) + 1

    def turn_line(self, label: str, session: Any, requests_before: int, requests_now: int) -> None:
        m = session.measure()
        notes = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in self.turn_notes.items())
        self.turn_notes = {}
        sent = requests_now - requests_before
        self.say(
            f"    {label:<24} {sent} request{'' if sent == 1 else 's'} · history {m.messages:3d} messages, "
            f"{format_size(m.bytes):>9}" + (f" · routine trim: {notes}" if notes else "")
        )


def run_demo(
    out_dir: str | Path | None = None,
    *,
    steps: int = 30,
    target_bytes: int = 40_000,
    max_result_chars: int = 60_000,
    quiet: bool = False,
) -> dict[str, Any]:
    """Run the story; returns the measured figures it printed (``sentences`` holds the ending)."""
    from contextkit.archive import Archive
    from contextkit.session.core import Session
    from contextkit.settings import Limits
    from contextkit.sim import GatewaySimulator, Workspace, agent_steps
    from contextkit.widgets.labels import stat_value
    from contextkit.widgets.series import evidence_of, real_cap_of

    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="contextkit-demo-"))
    out.mkdir(parents=True, exist_ok=True)
    archive_path = out / "archive.sqlite"
    workspace = Workspace(seed=7, target_bytes=target_bytes)
    plan = agent_steps(seed=7, steps=steps)
    outputs = [len(workspace.call(tool, args).content.encode()) for tool, args in plan]
    paste = "Here is the full crash log from production, please keep it in mind:\n"
    paste += workspace.tail_log(PASTE_LINES).content
    story = _Story(quiet)

    started = time.monotonic()
    with GatewaySimulator(context_window=WINDOW, max_body=GATEWAY_CAP, reject_with="waf403") as gw:
        real_cap = real_cap_of(gw) or 0
        story.say("contextkit demo: a scripted coding agent behind a gateway its session was not told about")
        story.step(
            1,
            f"The gateway: the simulator on {gw.api_base}, a {WINDOW:,}-token model behind a "
            f"{format_size(real_cap)} body cap that answers bigger requests with a Cloudflare-style 403 page.",
        )
        session = Session(
            gw.model,
            api_base=gw.api_base,
            api_key="sim-key",
            system="You are a careful coding agent. Read files, then report what you found.",
            limits=Limits(context_window=WINDOW, tool_result_max_chars=max_result_chars),
            archive=Archive(archive_path, session_id="demo"),
            tools=list(workspace.tools.values()),
            session_id="demo",
            status=None,
        )
        session.events.subscribe(story.on_event)

        def turn(label: str, text: str) -> Any:
            before = len(gw.requests)
            reply = session.send(text)
            story.turn_line(label, session, before, len(gw.requests))
            return reply

        half = len(plan) // 2
        story.step(
            2,
            f"The agent works: {half} tool calls (read a file, grep, tail a log, fetch JSON) returning "
            f"{format_size(min(outputs[:half] or [0]))} to {format_size(max(outputs[:half] or [0]))} each.",
        )
        turn("first question", "We are investigating the inventory service. Start with the code, then the logs.")
        for i, (tool, args) in enumerate(plan[:half], 1):
            # Each turn the (scripted) model calls one tool; the directive tells the simulator which.
            turn(f"step {i}/{len(plan)} {tool}", f"[[tool:{tool} {json.dumps(args)}]] step {i}/{len(plan)}: {tool}")
        story.step(
            3,
            f"The user pastes a production log of {format_size(len(paste.encode()))}, "
            f"on top of the {len(session.history)} messages the gateway has taken so far.",
        )
        turn("the paste", paste)
        rest = plan[half:]
        story.step(
            4,
            f"The agent goes on under what it learned: {len(rest)} more tool calls returning "
            f"{format_size(min(outputs[half:] or [0]))} to {format_size(max(outputs[half:] or [0]))} each.",
        )
        for i, (tool, args) in enumerate(rest, half + 1):
            turn(f"step {i}/{len(plan)} {tool}", f"[[tool:{tool} {json.dumps(args)}]] step {i}/{len(plan)}: {tool}")
        story.step(5, "A manual compaction with an instruction (a summary), then one more question.")
        result = session.compact("keep every file path, line number and command")
        story.say(
            f"    compact()                {format_size(result.bytes_before)} -> {format_size(result.bytes_after)} "
            f"({result.stage or 'nothing'} stage)"
        )
        turn("last question", "What is left to do?")
        session.save(out / "session.json")
        requests = gw.requests
    events_path = out / "events.jsonl"
    with open(events_path, "w", encoding="utf-8") as fh:
        for event in session.events:
            fh.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")

    stats = session.stats
    refused = [r for r in requests if not r.accepted]
    known_to_pass, known_to_fail = evidence_of(session)
    cap = session.payload_cap
    figures: dict[str, Any] = {
        "requests sent": len(requests),
        "requests refused by the gateway": len(refused),
        "real cap (the simulator's)": format_size(real_cap),
        "known to pass (largest body accepted)": format_size(known_to_pass or 0),
        "known to fail (smallest body refused)": format_size(known_to_fail) if known_to_fail else "nothing refused",
        "send limit (learned cap)": format_size(cap) if cap else "none",
        "recovery steps": stat_value("recoveries_by_level", stats.recoveries_by_level),
        "refusals by reason": stat_value("failures_by_kind", stats.failures_by_kind),
        "compactions": stats.compactions,
        "compactions that truncated": stats.truncation_falls,
        "summaries (model calls)": stats.summary_calls,
        "archived pieces": len(session.archive),
        "archived bytes": format_size(session.archive.total_bytes),
        "history now": f"{len(session.history)} messages, {format_size(session.measure().bytes)}",
        "wall time": f"{time.monotonic() - started:.1f} s",
        "archive": str(archive_path),
        "event log": str(events_path),
    }
    smallest = min((r.bytes for r in refused), default=0)
    largest = max((r.bytes for r in requests if r.accepted), default=0)
    sentences = [
        (
            f"The gateway refused {len(refused)} of {len(requests)} requests, the smallest refused "
            f"{format_size(smallest)}, and accepted every body up to {format_size(largest)}; its real cap, "
            f"which the session was never told, is {format_size(real_cap)}."
            if refused
            else f"The gateway accepted all {len(requests)} requests; its real cap is {format_size(real_cap)}."
        ),
        (
            f"The session learned that {format_size(known_to_pass or 0)} is known to pass and "
            + (f"{format_size(known_to_fail)} known to fail" if known_to_fail else "nothing is known to fail")
            + (f", and keeps every request under a send limit of {format_size(cap)}." if cap else ".")
        ),
        (
            f"It removed nothing for good: {len(session.archive)} pieces ({format_size(session.archive.total_bytes)}) "
            f"are kept verbatim in {archive_path}, and every event is in {events_path}."
        ),
    ]
    width = max(len(k) for k in figures)
    print("\ncontextkit demo - what happened")
    for key, value in figures.items():
        print(f"  {key.ljust(width)}  {value}")
    print()
    for sentence in sentences:
        print(sentence)
    figures["sentences"] = sentences
    figures["story"] = story.lines
    figures["paste bytes"] = len(paste.encode())
    figures["tool output bytes"] = outputs
    return figures
