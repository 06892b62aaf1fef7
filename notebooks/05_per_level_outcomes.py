# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 5 · Outcomes per recovery level and compaction stage: contextkit against the libraries people use, and what each mechanism costs
#
# Compaction is not free. A summary (the summary stage) costs an LLM call and loses detail;
# truncation (the last stage) loses whole turns (recallable, but no longer in view); microcompact
# (in the trim stage) rewrites old messages, which breaks the provider's prompt cache. To choose
# settings you need numbers, not intuition — and a comparison with the tools you already use, on a
# task where the answer can be wrong.
#
# This notebook runs a **small peer arena**: the same seeded agent workload under contextkit, our
# baselines and real peer libraries (LangChain v1's summarization and context-editing middleware,
# Anthropic-style clearing, litellm's `trim_messages`) behind two gateways. The workload plants
# **needles** — a port, a build hash, a constant on a line of a file, an error code — in tool
# outputs and asks for them later; the simulator's model answers only from what the request carries
# (recalling archived content when it can). Then every event becomes **polars** frames and
# **altair** charts (rendered offline as PNG images).
#
# > **Simulator or real model.** Every cell runs against the bundled gateway simulator unless the
# > environment variable `CONTEXTKIT_NOTEBOOK_MODEL` names a litellm model *and* `OPENAI_API_KEY` or
# > `ANTHROPIC_API_KEY` is set. Cells marked *simulator only* inject gateway faults, which a real
# > provider does not do on request; they keep using the simulator either way.
#
# The arena always runs on the simulator: it needs identical, seeded conversations for every strategy.

# %%
import os

import contextkit
from contextkit.display.status import show_status_in_notebook

# This notebook owns its process: nothing is fetched from the network (litellm's cost map and
# tiktoken's encodings come from their bundled copies; call it before litellm loads), litellm
# prints no debug hints, and status lines show in the notebook (the dashboard's log, else one
# collapsible block per cell).
contextkit.offline()
os.environ.setdefault("LITELLM_LOG", "ERROR")
show_status_in_notebook()

# THE switch. Unset (default): the bundled gateway simulator - no API key, no network, deterministic.
# Set CONTEXTKIT_NOTEBOOK_MODEL to a litellm model string ("openai/gpt-4o-mini" with OPENAI_API_KEY,
# "anthropic/claude-3-5-haiku-latest" with ANTHROPIC_API_KEY) to run the conversations on a real model.
PROVIDER = os.environ.get("CONTEXTKIT_NOTEBOOK_MODEL") or None
if PROVIDER and not (os.environ.get("OPENAI_API_KEY") or os.environ.get("ANTHROPIC_API_KEY")):
    print(f"CONTEXTKIT_NOTEBOOK_MODEL={PROVIDER} is set but no OPENAI_API_KEY/ANTHROPIC_API_KEY: using the simulator")
    PROVIDER = None
print("conversations run on:", PROVIDER or "the gateway simulator (default)")

# %%
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import altair as alt
import polars as pl

from contextkit.analysis import enable_offline_renderer, frames, outcomes
from contextkit.experiments import load_results
from contextkit.experiments.arena import STANDARD_CELL, cells, format_arena, grid_specs, summarize_arena
from contextkit.experiments.peers import peer_status
from contextkit.experiments.runner import PRICE_AS, run_specs

enable_offline_renderer("png")  # static images through vl-convert: no CDN; JupyterLab shows PNG in an untrusted notebook (Binder), SVG only once trusted
_ = pl.Config.set_tbl_cols(14), pl.Config.set_tbl_width_chars(160)

# %% [markdown]
# ## The arena
#
# Six strategies × two cells × two seeds, 12 agent turns each (under a minute); every run starts its
# own simulator. The standard cell is a **128 KB Cloudflare-style gateway in front of a 32k window**;
# the other a **1 MB gateway answering 413 in front of a 200k window**. Every peer is told the window
# and nothing else — none of them knows the gateway's byte cap. `benchmarks/peers.py` runs the full
# grid (14 cells, 20 seeds × 40 turns in the standard cell) on a Dask cluster and saves a Parquet
# file: point `CONTEXTKIT_PEERS_RESULTS` at it to chart the full results instead.

# %%
strategies = ["contextkit", "sliding-window", "trim_messages", "anthropic-clearing",
              "langchain-summarization", "langchain-context-editing"]
missing = {s: why for s in strategies if s in ("langchain-summarization", "langchain-context-editing")
           and (why := peer_status(s)) is not None}
for s, why in missing.items():
    print(f"{s}: not run here ({why}); install contextkit[peers]")
strategies = [s for s in strategies if s not in missing]

RESULTS_FILE = os.environ.get("CONTEXTKIT_PEERS_RESULTS", "")
sweep_events = []
if RESULTS_FILE and os.path.exists(RESULTS_FILE):
    results = load_results(RESULTS_FILE)
    print(f"loaded {results.height} runs from {RESULTS_FILE}")
else:
    small = [g for g in cells() if g.name in (STANDARD_CELL, "1MB-413-200k")]
    specs = [replace(spec, keep_events=True)
             for spec in grid_specs(strategies, standard_seeds=2, other_seeds=2, turns=12, gateways=small)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = run_specs(specs, executor=pool, progress=False, events=sweep_events)
summary = summarize_arena(results)
print(format_arena(summary))

# %%
# the arena's promises, checked on every run of this notebook
assert results.filter(pl.col("strategy") == "contextkit")["completed"].all(), "contextkit must complete every run"
assert results["needle_accuracy"].drop_nulls().is_between(0, 1).all()

# %% [markdown]
# Read the table with three questions in mind: did the agent finish, did it remember, what did it cost?
#
# * **complete** — did the agent get all its turns? A peer that trusts its window sends requests the
#   gateway rejects (403/413/dropped connection) and the run ends there.
# * **needles** — the share of needle questions answered with the planted fact, mean and the
#   spread across seeds. A sliding window forgets; a summary keeps some facts and loses others;
#   clearing old tool results loses what they held unless it can be recalled.
# * **$** — per session: every accepted request (turns and summaries) priced as a real model (`PRICE_AS`) by
#   `backend.request_cost`, with the cached-input price for the tokens the simulator's prompt cache served.
# * the **verdict** line says who wins each metric in the cell — also when it is not contextkit.

# %% [markdown]
# ## Spread across seeds
#
# One point per strategy is the mean over seeds; the bar is its 95% bootstrap interval. A strategy
# whose interval is wide is lucky on some seeds and not on others.

# %%
runs = results.select("strategy", "gateway", "seed", "completed", "needle_accuracy", "cost").with_columns(
    pl.col("completed").cast(pl.Float64)
)
base = alt.Chart(alt.InlineData(values=runs.to_dicts())).encode(
    y=alt.Y("strategy:N", sort=strategies, title=None), color=alt.Color("strategy:N", legend=None)
)


def spread(field: str, title: str, fmt: str) -> alt.LayerChart:
    axis = alt.Axis(format=fmt)
    return alt.layer(
        base.mark_errorbar(extent="ci", thickness=2).encode(x=alt.X(f"{field}:Q", title=title, axis=axis)),
        base.mark_point(filled=True, size=60).encode(x=alt.X(f"mean({field}):Q", axis=axis)),
    ).properties(width=150, height=150)  # three side by side fit a 1280 px screen


METRICS = (
    ("needle_accuracy", "needle accuracy", "%"),
    ("completed", "completion rate", "%"),
    ("cost", f"$ per session ({PRICE_AS})", "$.3f"),
)
alt.vconcat(
    *(
        alt.hconcat(
            *(
                spread(field, title, fmt).transform_filter(alt.datum.gateway == cell)
                for field, title, fmt in METRICS
            )
        ).properties(title=cell)
        for cell in runs["gateway"].unique(maintain_order=True).to_list()
    )
)

# %% [markdown]
# ## One session under real pressure
#
# The arena's short sessions rarely need contextkit's recovery ladder. To see the ladder and every
# compaction stage fire, add
# the tour's story: tool outputs up to 60 KB and a 280 KB paste behind a
# 128 KB gateway the session does not know about.

# %%
import json

from contextkit import Limits, Session
from contextkit.archive import Archive
from contextkit.sim import GatewaySimulator, Workspace, agent_steps

with GatewaySimulator(context_window=128_000, max_body="128KB", reject_with="waf403") as gw:
    ws = Workspace(seed=7, target_bytes=40_000)
    pressure = Session(gw.model, api_base=gw.api_base, api_key="sim-key", system="You are a careful coding agent.",
                       limits=Limits(context_window=128_000, tool_result_max_chars=60_000),
                       archive=Archive.in_memory(session_id="pressure"), tools=list(ws.tools.values()),
                       session_id="pressure", status=None)
    for i, (tool, args) in enumerate(agent_steps(seed=7, steps=8), 1):
        pressure.send(f"Step {i}: [[tool:{tool} {json.dumps(args)}]]")
    pressure.send("The full crash log:\n" + ws.tail_log(2_600).content)
    pressure.compact("keep every file path")
    pressure.send("What is left to do?")
print(pressure.stats.recoveries_by_level, "compactions:", pressure.stats.compactions)

# %% [markdown]
# ## Events → polars frames
#
# `frames(events)` gives three frames with fixed schemas: one row per **request attempt**, per
# **compaction phase**, per **recovery step**. Events from many sessions mix freely (`session_id`).

# %%
f = frames([*sweep_events, *pressure.events])
print("requests", f.requests.shape, "| compactions", f.compactions.shape, "| recoveries", f.recoveries.shape)
f.requests.select("session_id", "request_index", "bytes", "tokens", "outcome", "failure_kind", "level",
                  "prefix_share").filter(pl.col("session_id") == "pressure").tail(8)

# %%
table = outcomes(f)  # one row per recovery level and per compaction stage
table.select("label", "fired", "succeeded", "success_rate", "mean_bytes_freed", "mean_latency_s",
                "identifier_retention")

# %% [markdown]
# ## Charts
#
# Per recovery level and compaction stage: how often it fired, how often it worked, how much it
# freed, how long it took, what it cost. Then the pressure session's request size against the cap it learned, with compactions
# marked, and the identifier retention of summaries (paths, numbers, commands that survived).

# %%
from contextkit.analysis import history_vs_cap_chart, outcomes_chart, retention_chart

outcomes_chart(table)

# %%
pressure_frames = frames(pressure.events)
history_vs_cap_chart(pressure_frames)

# %%
retention_chart(f)

# %% [markdown]
# **Saving** a chart for a report or slides: `contextkit.analysis.save_chart(chart, "outcomes.svg")`
# (or `.png`) — offline, through vl-convert. The README's chart is produced exactly this way by the
# test suite.
