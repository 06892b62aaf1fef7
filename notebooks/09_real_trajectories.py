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
# # 9 · Real agent trajectories
#
# Every other notebook runs a workload we wrote. This one replays **a real agent run**: mini-swe-agent
# (one `bash` tool) with DeepSeek on a SWE-bench instance, as the agent recorded it. The simulator
# plays the recorded model (request *n* gets the run's *n*-th assistant message) and `bash` returns
# the recorded output, so the agent does exactly what it did; only the context management changes.
#
# Two numbers come from the agent's own behaviour. **Request size** against the window: a request
# over it is refused and a plain agent stops there. **First-use references**: names (paths,
# functions, classes) the agent writes for the first time that it read in a tool output at least
# three steps earlier; the request it wrote them from must still hold them, verbatim or one `recall`
# away. The runs here are the two trimmed real runs the tests use (`tests/fixtures/traces`);
# `benchmarks/traces.py` replays all 61 full runs (the docs' *Benchmarks* page quotes its table).

# %%
import sys
from pathlib import Path

import altair as alt

import contextkit

contextkit.offline()  # this notebook owns its process: nothing is fetched from the network

from contextkit.analysis import enable_offline_renderer  # noqa: E402
from contextkit.replay import MASK_KEEP, load_trajectory, replay  # noqa: E402

enable_offline_renderer("png")  # static images through vl-convert: no CDN

FIXTURES = Path("..") / "tests" / "fixtures" / "traces"
WINDOW = 8192
traj = load_trajectory(FIXTURES / "pvlib-1606-format-error.traj.json")
print(f"{traj.name}: {traj.model}, {len(traj.steps)} steps, {len(traj.messages)} messages")
print("the provider's prompt_tokens at the last step:", traj.messages[traj.steps[-1]].prompt_tokens)

# %% [markdown]
# ## One run, three ways, under an 8k-token window
#
# No management, observation masking (every tool output but the 10 newest replaced by a
# placeholder: the baseline of Lindenbauer et al., *The Complexity Trap*, 2025), and contextkit.

# %%
# NBVAL_CHECK_OUTPUT
runs = {s: replay(traj, s, window=WINDOW) for s in ("none", "masking", "contextkit")}
for name, run in runs.items():
    stop = f", stopped: {run.error.split(':')[0]}" if run.error else ""
    print(f"{name:<11} served {run.steps_served}/{run.steps_total} steps{stop}")

# %% [markdown]
# Every request each strategy sent, in order, with the simulator's token count; the red line is the
# window. Without management the requests grow with the run until one is refused. Masking keeps ten
# outputs whole whatever their size; contextkit keeps each request under the window.

# %%
rows = [
    {"strategy": name, "request": i + 1, "tokens": s.tokens, "refused": not s.accepted}
    for name, run in runs.items()
    for i, s in enumerate(x for x in run.sent if x.kind == "turn")
]
sizes = alt.Chart(alt.InlineData(values=rows)).encode(
    x=alt.X("request:Q", title="request"),
    y=alt.Y("tokens:Q", title="request tokens"),
    color=alt.Color("strategy:N", title=None),
)
window = alt.Chart(alt.InlineData(values=[{"window": WINDOW}])).mark_rule(color="red").encode(y="window:Q")
(sizes.mark_line() + sizes.mark_point(filled=True).encode(shape="refused:N") + window).properties(
    width=760, height=260, title=f"{traj.name}: request sizes under a {WINDOW // 1024}k window"
)

# %% [markdown]
# ## First-use references, step by step
#
# At each step where the agent wrote a name for the first time, how many of those names the request
# held verbatim, how many were one recall away (behind a `<<ccr:KEY>>` marker whose archived original
# holds them), and how many were gone. A strategy that stopped early has no bars after its last step.

# %%
refs = []
for name, run in runs.items():
    for rec in run.records:
        refs += [
            {"strategy": name, "step": rec.step, "names": len(rec.verbatim), "held": "verbatim"},
            {"strategy": name, "step": rec.step, "names": len(rec.recalled), "held": "one recall away"},
            {
                "strategy": name,
                "step": rec.step,
                "names": len(rec.needed - rec.verbatim - rec.recalled),
                "held": "gone",
            },
        ]
alt.Chart(alt.InlineData(values=refs)).mark_bar().encode(
    x=alt.X("step:O", title="step"),
    y=alt.Y("sum(names):Q", title="first-use names"),
    color=alt.Color(
        "held:N",
        title=None,
        sort=["verbatim", "one recall away", "gone"],
        scale=alt.Scale(domain=["verbatim", "one recall away", "gone"], range=["#4c78a8", "#72b7b2", "#e45756"]),
    ),
).properties(width=230, height=200).facet(column=alt.Column("strategy:N", title=None, sort=list(runs)))

# %%
# NBVAL_CHECK_OUTPUT
for name, run in runs.items():
    v, r = run.verbatim_share, run.reachable_share
    print(f"{name:<11} {run.needed:>3} first-use names: verbatim {v:.0%}, verbatim or one recall away {r:.0%}")
print(f"(masking keeps the {MASK_KEEP} newest outputs)")

# %% [markdown]
# ## The table: every strategy, both runs
#
# `benchmarks/traces.py` prints it; here over the two trimmed runs at the 8k window, with the
# peers of the docs' *Benchmarks* page: LangChain v1's `SummarizationMiddleware` and context-editing
# middleware, Anthropic-style clearing, litellm's `compress` and headroom, each driven as its users
# drive it. `billed $` is input and output at the recorded model's prices with the provider's prefix
# cache; `own ms/step` is the strategy's own time per request (the provider excluded), on this
# machine. A peer whose library is not installed has a row that says why.

# %%
import contextlib  # noqa: E402
import io  # noqa: E402
import tempfile  # noqa: E402

sys.path.insert(0, str(Path("..").resolve() / "benchmarks"))
import traces  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    for f in FIXTURES.glob("*.traj.json"):
        (Path(tmp) / "fixtures").mkdir(exist_ok=True)
        (Path(tmp) / "fixtures" / f.name).write_bytes(f.read_bytes())
    with contextlib.redirect_stderr(io.StringIO()):  # the benchmark's progress lines
        traces.main(["--traces", tmp, "--windows", "8192", "--jobs", "2", "--cache", str(Path(tmp) / "c.jsonl")])

# %% [markdown]
# **What to remember:** on a real agent run the whole trajectory is one user message and its tool
# chain, so what a strategy keeps decides whether the agent can still see what it read; the full
# table over all 61 runs, at 16k, 32k and 64k windows and behind a 128 KB gateway, is on the docs'
# *Benchmarks* page, and `docs/howto/replay.md` shows how to replay your own agent's runs.
