"""The demo run twice into the same folder, as a class reruns it: both runs end with the three
sentences, and every figure the sentences give is the one the run measured (its "what happened"
table, its archive and its event log). The first run from the repository (default temporary folder,
every figure against the event log, ``git status`` unchanged) is in ``tests/test_cli.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from contextkit.archive import Archive
from contextkit.sizing import format_size

ROOT = Path(__file__).resolve().parents[1]


def _figures(stdout: str) -> dict[str, str]:
    """The "what happened" table: ``  label   value`` lines after its title."""
    table = stdout.split("contextkit demo - what happened", 1)[1]
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^  (\S.*?)\s{2,}(\S.*)$", table, re.M)}


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, cwd=ROOT).stdout


def test_two_runs_into_one_folder_end_with_three_sentences_that_match_their_figures(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    before = _git_status()
    for run in (1, 2):  # the folder and its archive exist the second time
        out = subprocess.run(
            [sys.executable, "-m", "contextkit.cli.main", "demo", "--steps", "2", "--out", str(folder)],
            capture_output=True, text=True, cwd=ROOT, timeout=240,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        figures = _figures(out.stdout)
        ending = [line for line in out.stdout.splitlines() if line.strip()][-3:]
        assert [s.split(" ")[:2] for s in ending] == [["The", "gateway"], ["The", "session"], ["It", "removed"]], ending
        gateway, learned, kept = ending

        events = [json.loads(line) for line in Path(figures["event log"]).read_text().splitlines()]
        refused = [e for e in events if e["type"] == "request" and e["outcome"] != "ok"]
        assert refused, f"run {run}: the story is about a refusal"
        assert gateway.startswith(
            f"The gateway refused {figures['requests refused by the gateway']} of {figures['requests sent']} requests, "
            f"the smallest refused {figures['known to fail (smallest body refused)']}"
        ), (run, gateway, figures)
        assert f"its real cap, which the session was never told, is {figures['real cap (the simulator' + chr(39) + 's)']}" in gateway
        assert learned == (
            f"The session learned that {figures['known to pass (largest body accepted)']} is known to pass and "
            f"{figures['known to fail (smallest body refused)']} known to fail, and keeps every request under a "
            f"send limit of {figures['send limit (learned cap)']}."
        ), (run, learned, figures)
        with Archive(folder / "archive.sqlite", session_id="demo") as archive:
            count, total = len(archive), archive.total_bytes
        assert figures["archived pieces"] == str(count) and figures["archived bytes"] == format_size(total)
        assert kept.startswith(f"It removed nothing for good: {count} pieces ({format_size(total)})"), (run, kept)
        assert f"kept verbatim in {folder / 'archive.sqlite'}" in kept and str(folder / "events.jsonl") in kept
    assert _git_status() == before
