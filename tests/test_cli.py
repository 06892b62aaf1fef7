"""The ``contextkit`` command: the demo is the README's main job."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from contextkit.archive import Archive
from contextkit.cli.demo import PASTE_LINES
from contextkit.sizing import format_size


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "contextkit.cli.main", *args], capture_output=True, text=True, cwd=cwd, timeout=240
    )


ROOT = Path(__file__).resolve().parents[1]


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, cwd=ROOT).stdout


def _figure(stdout: str, label: str) -> str:
    found = re.search(rf"^  {re.escape(label)}\s+(.+)$", stdout, re.M)
    assert found, f"no {label!r} line in the demo's output"
    return found.group(1).strip()


def _known_to_pass(requests: list[dict[str, Any]]) -> int:
    """The largest body accepted, forgotten when a smaller one is refused (as the session's evidence does)."""
    largest = 0
    for r in requests:
        if r["outcome"] == "ok":
            largest = max(largest, r["bytes"])
        elif r["bytes"] <= largest:
            largest = 0
    return largest


def test_demo_tells_its_story_with_measured_figures_and_leaves_the_repository_clean() -> None:
    from contextkit.sim import Workspace, agent_steps

    before = _git_status()
    out = run("demo", "--steps", "6", cwd=ROOT)  # from the repository, as scripts/demo.sh runs it
    assert out.returncode == 0, out.stderr[-2000:]
    assert _git_status() == before  # its files went to a temporary folder, nothing new in the tree
    story, stdout = out.stderr, out.stdout
    # numbered steps, one line per turn, the events that matter in words
    assert [int(n) for n in re.findall(r"^\[(\d)/5\]", story, re.M)] == [1, 2, 3, 4, 5]
    assert len(re.findall(r"^    step \d+/6 ", story, re.M)) == 6
    for needle in ("the gateway refused", "the session learned a send limit", "recovery level 1: halve"):
        assert needle in story, needle
    assert "prompt cache restarts" not in story and "{'" not in stdout and "[contextkit]" not in stdout
    assert "Warning" not in story and "may take" not in story

    archive_path = Path(_figure(stdout, "archive"))
    events_path = Path(_figure(stdout, "event log"))
    assert not archive_path.is_relative_to(ROOT)
    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    requests = [e for e in events if e["type"] == "request"]
    refused = [r for r in requests if r["outcome"] != "ok"]
    caps = [e for e in events if e["type"] == "cap"]
    assert refused and caps  # the story is about a refusal
    # every printed figure against the measured one
    saved = json.loads((archive_path.parent / "session.json").read_text())
    summaries = saved["compactor"]["summary_calls"]  # summary calls are requests too, without a request event
    assert _figure(stdout, "summaries (model calls)") == str(summaries)
    assert _figure(stdout, "requests sent") == str(len(requests) + summaries)
    assert _figure(stdout, "requests refused by the gateway") == str(len(refused))
    assert _figure(stdout, "real cap (the simulator's)") == format_size(128 * 1024)
    assert _figure(stdout, "known to fail (smallest body refused)") == format_size(min(r["bytes"] for r in refused))
    assert _figure(stdout, "known to pass (largest body accepted)") == format_size(_known_to_pass(requests))
    assert _figure(stdout, "send limit (learned cap)") == format_size(caps[-1]["cap_bytes"])
    steps = [e for e in events if e["type"] == "recovery" and e["outcome"] == "retrying"]
    assert _figure(stdout, "recovery steps").startswith(f"{len(steps)} step")
    done = [e for e in events if e["type"] == "compaction" and e["phase"] == "done" and e["outcome"] == "applied"]
    assert _figure(stdout, "compactions") == str(len(done))
    workspace, plan = Workspace(seed=7, target_bytes=40_000), agent_steps(seed=7, steps=6)
    sizes = [len(workspace.call(tool, args).content.encode()) for tool, args in plan]
    assert f"returning {format_size(min(sizes[:3]))} to {format_size(max(sizes[:3]))} each" in story
    pasted = "Here is the full crash log from production, please keep it in mind:\n" + workspace.tail_log(PASTE_LINES).content
    assert f"pastes a production log of {format_size(len(pasted.encode()))}," in story
    with Archive(archive_path, session_id="demo") as archive:
        count, total = len(archive), archive.total_bytes
        assert count > 0 and all(archive.get(e.key) is not None for e in archive.entries())
    assert _figure(stdout, "archived pieces") == str(count)
    # it ends with three plain sentences: what the gateway did, what the session learned, what was kept
    ending = [line for line in stdout.splitlines() if line.strip()][-3:]
    assert ending[0].startswith(f"The gateway refused {len(refused)} of {len(requests) + summaries} requests")
    assert ending[1].startswith("The session learned that") and format_size(caps[-1]["cap_bytes"]) in ending[1]
    assert ending[2].startswith(f"It removed nothing for good: {count} pieces ({format_size(total)})")
    assert str(archive_path) in ending[2]
    assert saved["cap_source"] == "learned"


def test_sim_and_experiment_help(tmp_path: Path) -> None:
    sim = run("sim", "--help", cwd=tmp_path)
    assert sim.returncode == 0 and "--max-body" in sim.stdout
    bad = run("sim", "--reject-with", "teapot", cwd=tmp_path)
    assert bad.returncode == 2 and "teapot" in bad.stderr
