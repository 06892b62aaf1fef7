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
# # 5 · Per-level outcomes: what each mechanism costs and saves
#
# Compaction is not free. A Level-2 summary costs an LLM call and loses detail; Level-3 truncation
# loses whole turns (recallable, but no longer in view); microcompact rewrites old messages, which
# breaks the provider's prompt cache. To choose settings you need numbers, not intuition.
#
# This notebook runs a **small strategy sweep** — the same seeded agent workload under contextkit
# and under the usual baselines (no management, a sliding window) behind two gateways — then turns
# every event into **polars** frames and **altair** charts (rendered offline as SVG).
#
# > **Simulator or real model.** Every cell runs against the bundled gateway simulator unless the
# > environment variable `CONTEXTKIT_NOTEBOOK_MODEL` names a litellm model *and* `OPENAI_API_KEY` or
# > `ANTHROPIC_API_KEY` is set. Cells marked *simulator only* inject gateway faults, which a real
# > provider does not do on request; they keep using the simulator either way.
#
# The sweep always runs on the simulator: it needs identical, seeded conversations for every strategy.

# %%
import os

# litellm must never fetch its model map from the network (set before importing contextkit)
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "True")
os.environ.setdefault("LITELLM_LOG", "ERROR")

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

import polars as pl

from contextkit.analysis import enable_offline_renderer, frames, level_outcomes
from contextkit.experiments import GatewaySpec, run_sweep, summarize
from contextkit.experiments.summary import format_table

enable_offline_renderer("svg")  # static SVG through vl-convert: no CDN, works on Binder and offline
_ = pl.Config.set_tbl_cols(14), pl.Config.set_tbl_width_chars(160)

# %% [markdown]
# ## The sweep
#
# Three strategies × two gateways × one seed, 10 agent turns each; every run starts its own simulator.
# A thread pool keeps it inside a notebook kernel (pass a `dask.distributed` client's executor for
# big sweeps).

# %%
gateways = [
    GatewaySpec(),  # 32k-token window behind a 128 KB Cloudflare-style gateway
    GatewaySpec(name="48KB-413", context_window=16_000, max_body="48KB", reject_with="413"),
]
sweep_events = []
with ThreadPoolExecutor(max_workers=2) as pool:
    results = run_sweep(["contextkit", "none", "sliding-window"], gateways, seeds=[0], turns=10,
                        executor=pool, progress=False, events=sweep_events)
print(format_table(summarize(results)))

# %%
# NBVAL_CHECK_OUTPUT
for row in results.select("strategy", "gateway", "completed", "turns_completed", "rejected").iter_rows():
    print(*row)

# %% [markdown]
# Read the table with the essay's questions in mind:
#
# * **complete** — did the agent get all its turns? Without management it does not: the history
#   outgrows the gateway and the first rejection ends the run.
# * **tokens/none** — what it sent compared with no management (lower is cheaper).
# * **prefix reuse** — how much of each request repeats the previous one byte for byte (what a
#   provider prompt cache can reuse). Rewriting old messages costs reuse; notebook 6 goes deeper.
# * **recoverable** — share of all tool outputs still in context *or recallable from the archive*.
#   A sliding window forgets; contextkit archives before it drops.

# %% [markdown]
# ## One session under real pressure
#
# The sweep's gateways are generous enough that contextkit never needed its recovery ladder. To see
# every level fire, add the tour's story: tool outputs up to 60 KB and a 280 KB paste behind a
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
outcomes = level_outcomes(f)
outcomes.select("label", "fired", "succeeded", "success_rate", "mean_bytes_freed", "mean_latency_s",
                "identifier_retention")

# %% [markdown]
# ## Charts
#
# Per level: how often it fired, how often it worked, how much it freed, how long it took, what it
# cost. Then the pressure session's request size against the cap it learned, with compactions
# marked, and the identifier retention of summaries (paths, numbers, commands that survived).

# %%
from contextkit.analysis import history_vs_cap_chart, level_outcomes_chart, retention_chart

level_outcomes_chart(outcomes)

# %%
pressure_frames = frames(pressure.events)
history_vs_cap_chart(pressure_frames)

# %%
retention_chart(f)

# %% [markdown]
# **Saving** a chart for a report or slides: `contextkit.analysis.save_chart(chart, "levels.svg")`
# (or `.png`) — offline, through vl-convert. The README's chart is produced exactly this way by the
# test suite.
