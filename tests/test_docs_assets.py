"""The README's images, generated from real runs (never drawn by hand).

``docs/images/level_outcomes.svg``: outcomes per recovery level and compaction stage over several
real sessions (seeds) against the gateway simulator (an agent reading big files, then a paste far
above an unknown 128 KB Cloudflare-style cap), priced as a real model (``price_as``), means with 95% intervals through
``contextkit.analysis``.
``docs/images/dashboard.png``: the browser test's screenshot of the tour's dashboard in Voila at
the end of its run, with the figures it shows in ``docs/images/dashboard.json``
(``tests/test_voila_browser.py`` rewrites both whenever a run's figures differ from them, never for
pixels alone). Here the figures are compared with the stored tour's outputs, so an image left from an
older tour fails the suite.

The chart is rendered and checked on every run; the committed file is (re)written only when missing
or when ``CONTEXTKIT_REFRESH_DOCS=1`` is set, so a test run does not dirty the work tree with an
image that differs only in timings.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"


def _refresh(target: Path) -> bool:
    return not target.exists() or os.environ.get("CONTEXTKIT_REFRESH_DOCS") == "1"


SEEDS = range(1, 7)
PRICE_AS = "anthropic/claude-sonnet-4-5"


def pressure_story(seed: int) -> list[dict[str, object]]:
    """One session: 8 agent steps, a paste far above the unknown cap (sent as an excerpt of the archived
    original: the refusal is far above anything the gateway took), a manual compaction, a question."""
    from contextkit.archive import Archive
    from contextkit.policy.oversize import is_excerpt
    from contextkit.session.core import Session
    from contextkit.settings import Limits
    from contextkit.sim import GatewaySimulator, Workspace, agent_steps

    with GatewaySimulator(context_window=128_000, max_body="128KB", reject_with="waf403") as gw:
        ws = Workspace(seed=seed, target_bytes=40_000)
        session = Session(
            gw.model,
            api_base=gw.api_base,
            api_key="sim-key",
            system="You are a careful coding agent.",
            limits=Limits(context_window=128_000),
            archive=Archive.in_memory(session_id=f"docs-{seed}"),
            tools=list(ws.tools.values()),
            session_id=f"docs-{seed}",
            status=None,
            on_flush=None,
            price_as=PRICE_AS,  # real prices (cache reads and writes included), so the cost panel is not empty
        )
        for i, (tool, args) in enumerate(agent_steps(seed=seed, steps=8), 1):
            session.send(f"Step {i}: [[tool:{tool} {json.dumps(args)}]]")
        paste = "The full crash log:\n" + ws.tail_log(2_400 + 100 * seed).content
        session.send(paste)
        assert any(is_excerpt(m) for m in session.history), "the paste goes as an excerpt of the archived original"
        session.compact("keep every file path")
        session.send("What is left to do?")
        rejected = sum(not r.accepted for r in gw.requests)
    assert rejected >= 1, "the story must hit the gateway, or the chart shows no recovery levels"
    return [e.to_dict() for e in session.events]


@pytest.fixture(scope="module")
def pressure_events() -> list[dict[str, object]]:
    with ThreadPoolExecutor(2) as pool:  # each session has its own simulator
        runs = list(pool.map(pressure_story, SEEDS))
    return [event for run in runs for event in run]


def test_outcomes_chart_for_the_readme(pressure_events: list[dict[str, object]], tmp_path: Path) -> None:
    from contextkit.analysis import frames, outcome_intervals_chart, outcomes_across_sessions, save_chart

    table = outcomes_across_sessions(frames(pressure_events))
    labels = set(table["label"].to_list())
    # one gateway rejection sizes the excerpt of the paste (no deeper rung needed)
    assert {"recovery L1", "compaction summary", "compaction truncation"} <= labels, labels
    fired = table.filter(pl.col("metric") == "times fired per session")
    assert fired["sessions"].max() == len(SEEDS)  # aggregated over every seed, not n = 1
    assert (table["low"] <= table["mean"]).all() and (table["mean"] <= table["high"]).all()
    cost = table.filter(pl.col("metric") == "cost per session (USD)")
    assert cost.height and (cost["mean"] > 0).any(), "the cost panel must show real prices"
    path = save_chart(outcome_intervals_chart(table), tmp_path / "level_outcomes.svg")
    svg = path.read_text(encoding="utf-8")
    assert svg.lstrip().startswith("<svg") and "recovery L1" in svg and "success rate" in svg
    assert f"over up to {len(SEEDS)} sessions" in svg
    assert "cdn.jsdelivr" not in svg  # rendered offline, self-contained
    target = IMAGES / "level_outcomes.svg"
    if _refresh(target):
        IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    committed = target.read_text(encoding="utf-8")
    assert committed.lstrip().startswith("<svg") and "recovery L1" in committed and "95% interval" in committed


def _stored_tour_figures() -> dict[str, str]:
    """The closing sentence and the priced cost the stored tour (``notebooks/01_tour.ipynb``) shows."""
    notebook = json.loads((ROOT / "notebooks" / "01_tour.ipynb").read_text(encoding="utf-8"))
    outputs = [o for cell in notebook["cells"] for o in cell.get("outputs", [])]
    texts = ["".join(o.get("text", "")) for o in outputs]
    sentence = [t.strip() for t in texts if "removed pieces" in t][-1]
    html = ["".join(o.get("data", {}).get("text/html", "")) for o in outputs]
    costs = [re.findall(r"data-key='cost'.*?<td[^>]*>([^<]*)</td>", h, re.S) for h in html]
    return {"sentence": sentence, "cost": [c for found in costs for c in found][-1]}


def test_the_readme_dashboard_image_shows_the_stored_tour() -> None:
    target = IMAGES / "dashboard.png"
    data = target.read_bytes()  # a real PNG of the rendered dashboard, not a placeholder
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    figures = json.loads((IMAGES / "dashboard.json").read_text(encoding="utf-8"))
    assert figures == _stored_tour_figures(), (
        "docs/images/dashboard.png shows another run than the stored tour: run tests/test_voila_browser.py "
        "(it redraws the image when the figures differ) and commit docs/images/"
    )
