"""The ``contextkit`` command: the demo is the README's main job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from contextkit.archive import Archive


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "contextkit.cli.main", *args], capture_output=True, text=True, cwd=cwd, timeout=240
    )


def test_demo_tells_the_story_and_leaves_archive_and_events(tmp_path: Path) -> None:
    out = run("demo", "--out", str(tmp_path / "demo"), "--steps", "8", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    # the story goes to stderr, the final table to stdout (so pipelines get clean output)
    for needle in ("gateway rejected", "payload cap set to", "pre-flight", "microcompact:", "Summary applied"):
        assert needle in out.stderr, needle
    assert "contextkit demo - what happened" in out.stdout
    assert "requests rejected by the gateway" in out.stdout
    assert "[contextkit]" not in out.stdout and "Warning" not in out.stderr
    archive_path = tmp_path / "demo" / "archive.sqlite"
    events = [json.loads(line) for line in (tmp_path / "demo" / "events.jsonl").read_text().splitlines()]
    assert {"request", "compaction", "recovery", "cap"} <= {e["type"] for e in events}
    with Archive(archive_path, session_id="demo") as archive:
        assert len(archive) > 0
        for entry in archive.entries():
            assert archive.get(entry.key) is not None
    saved = json.loads((tmp_path / "demo" / "session.json").read_text())
    assert saved["cap_source"] == "learned"


def test_sim_and_experiment_help(tmp_path: Path) -> None:
    sim = run("sim", "--help", cwd=tmp_path)
    assert sim.returncode == 0 and "--max-body" in sim.stdout
    bad = run("sim", "--reject-with", "teapot", cwd=tmp_path)
    assert bad.returncode == 2 and "teapot" in bad.stderr
