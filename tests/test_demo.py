"""The demo run twice into the same folder, as a class reruns it: both runs end with the three
sentences, and every figure the sentences give is the one the run measured (its "what happened"
table, its archive and its event log). The first run from the repository (default temporary folder,
every figure against the event log, ``git status`` unchanged) is in ``tests/test_cli.py``.

``scripts/demo.sh``'s first run says it is installing and about how long it takes; the second says
nothing and starts the demo at once (checked with a stand-in Python, so nothing is installed).
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


FAKE_PYTHON = """#!/bin/bash
# stands in for python3 and for the venv's python: records what it was asked, installs nothing
echo "python $*" >> "$CALLS"
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin"
  cp "$0" "$3/bin/python"
  printf '#!/bin/bash\\necho "contextkit $*"\\n' > "$3/bin/contextkit"
  chmod +x "$3/bin/contextkit"
fi
exit 0
"""


def test_scripts_demo_says_on_its_first_run_that_it_installs_and_how_long_and_not_again(tmp_path: Path) -> None:
    """``scripts/demo.sh`` in a copy of the repository, with a stand-in Python (nothing is installed)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("demo.sh", "_env.sh"):
        (repo / "scripts" / name).write_text((ROOT / "scripts" / name).read_text(encoding="utf-8"), encoding="utf-8")
    for name in ("requirements.lock", "pyproject.toml"):
        (repo / name).write_text((ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON, encoding="utf-8")
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "CALLS": str(tmp_path / "calls"), "HOME": str(tmp_path)}

    def demo() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(repo / "scripts" / "demo.sh"), "--steps", "2"], capture_output=True,
                              text=True, cwd=tmp_path, env=env, timeout=60)  # fmt: skip

    first = demo()
    assert first.returncode == 0, first.stderr
    said = first.stderr.splitlines()
    assert said[0].startswith("contextkit: first run: installing contextkit and its pinned dependencies"), said
    assert re.search(r"about \d+-\d+ minutes", said[0]) and said[-1] == "contextkit: installed.", said
    assert first.stdout.strip() == "contextkit demo --steps 2"  # then the demo itself runs
    assert "pip install -q -r requirements.lock" in (tmp_path / "calls").read_text()
    second = demo()
    assert second.returncode == 0 and second.stderr == "", second.stderr  # installed: it starts at once
    assert second.stdout.strip() == "contextkit demo --steps 2"
