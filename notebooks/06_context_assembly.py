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
# # 6 · Context assembly and the prefix cache
#
# Providers cache the **longest byte-identical prefix** of consecutive requests: a cached prefix is
# cheaper (often 50–90% off) and faster. Two consequences for how a prompt should be built:
#
# 1. **Order blocks stable → volatile.** Persona and rules never change; project memory changes
#    rarely; the conversation grows at the end; the clock, a retrieved snippet or a scratchpad change
#    on every call and belong *last*. One volatile byte early in the prompt invalidates everything
#    after it.
# 2. **Every block must earn its place.** Ask of each one: *when does this block NOT enter?* A block
#    with no answer is paid for on every call.
#
# And a third, about compaction: rewriting an *old* message (a microcompact stub, a summary) changes
# the prefix from that point on — a **cache break**. contextkit rewrites old tool results only under
# pressure, in few large steps, and the last part of this notebook shows the hits and the breaks.
#
# > **Simulator or real model.** Every cell runs against the bundled gateway simulator unless the
# > environment variable `CONTEXTKIT_NOTEBOOK_MODEL` names a litellm model *and* `OPENAI_API_KEY` or
# > `ANTHROPIC_API_KEY` is set. Cells marked *simulator only* inject gateway faults, which a real
# > provider does not do on request; they keep using the simulator either way.

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

# %% [markdown]
# ## Blocks with entry conditions
#
# `contextkit.prompt.assembly.Block(name, render, stability=…, skip_when=…)`: `render` is text or a function
# of the call's context; `stability` is an explicit rank (0 = never changes); `skip_when` answers
# *when does this block NOT enter?* with a reason.

# %%
from contextkit import Message
from contextkit.prompt.assembly import Assembler, Block

blocks = [
    Block("clock", lambda c: f"Current time: {c['now']}", stability=9, role="user",
          description="volatile: changes every call"),
    Block("persona", "You are a careful coding agent for the inventory service.", stability=0),
    Block("rules", "Prefer targeted reads with line ranges. Never invent file contents.", stability=0),
    Block("memory", lambda c: "Project notes:\n" + c["notes"], stability=1,
          skip_when=lambda c: None if c.get("notes") else "no project notes yet"),
    Block("tools-help", "Use grep before reading whole files.", stability=2,
          skip_when=lambda c: None if c.get("tools") else "no tools registered"),
    Block("history", lambda c: c["history"], stability=5),
    Block("retrieved", lambda c: c.get("snippet"), stability=8, role="user",
          skip_when=lambda c: None if c.get("snippet") else "nothing retrieved for this question"),
]
assembler = Assembler(blocks)
print("layout:", " -> ".join(b.name for b in assembler.layout))

# %%
# NBVAL_CHECK_OUTPUT
history = [Message.user("Where is the retry budget configured?"),
           Message.assistant("In src/app/net.py, RETRY_BUDGET = 3.")]
first = assembler.assemble(now="10:00", history=history, tools=["grep", "read_file"])
print(first.log)

# %% [markdown]
# The log is per call. Next call: the user added project notes and a snippet was retrieved — two
# blocks enter that did not before, and the log says what each costs in tokens.

# %%
# NBVAL_CHECK_OUTPUT
history = [*history, Message.user("And the timeout?")]
second = assembler.assemble(now="10:01", history=history, tools=["grep", "read_file"],
                            notes="net.py owns retries; store.py owns timeouts", snippet="store.py:88 TIMEOUT_S = 30")
print(second.log)
print()
for m in second.messages:
    print(f"{m.role:<9} {m.content[:70]!r}")

# %% [markdown]
# ## Stable → volatile keeps the cache; volatile first throws it away
#
# Compare two consecutive calls byte by byte with `contextkit.prompt.prefix.shared_prefix` — the same probe
# the session runs on every request (`RequestEvent.prefix_share`).

# %%
# NBVAL_CHECK_OUTPUT
from contextkit.prompt.prefix import shared_prefix
from contextkit.sizing import dumps


def body(assembly):
    return dumps(assembly.wire())


def reuse(asm, ctx_a, ctx_b):
    a, b = body(asm.assemble(**ctx_a)), body(asm.assemble(**ctx_b))
    shared = shared_prefix(a, b)
    return shared, len(a), shared / len(a)


ctx = dict(history=history, tools=["grep"], notes="net.py owns retries")
good = reuse(Assembler(blocks), {**ctx, "now": "10:00"}, {**ctx, "now": "10:05"})
clock_first = [Block("clock", lambda c: f"Current time: {c['now']}", stability=-1), *blocks[1:]]
bad = reuse(Assembler(clock_first), {**ctx, "now": "10:00"}, {**ctx, "now": "10:05"})
print(f"stable -> volatile : {good[0]:>5} of {good[1]} bytes reused ({good[2]:.0%})")
print(f"clock first        : {bad[0]:>5} of {bad[1]} bytes reused ({bad[2]:.0%})")

# %% [markdown]
# ## What the model received: a per-call trace
#
# `contextkit.prompt.trace.trace_request` lists every piece of a request with its size, its origin (system
# block, user, tool result with path and lines, summary, stub with marker, recall output, notice) and
# what a mechanism did to it. It stores **no content by default** — hashes and sizes only — so traces
# can be kept and shared; pass `include_content=True` to keep the text.

# %%
# NBVAL_CHECK_OUTPUT
from contextkit.prompt.trace import trace_request

trace = trace_request(second.messages, blocks=second.log, model="openai/gpt-4o-mini")
print(trace)
print("stored fields of one piece:", sorted(trace.pieces[0].to_dict()))

# %% [markdown]
# ## Hits and breaks of the provider's prompt cache
#
# The simulator keeps a prompt cache the way providers do (`contextkit.sim.cache`): it remembers the
# prefixes of recent requests and reports, in the provider's own usage fields, how many prompt tokens
# it served from the cache (OpenAI: `usage.prompt_tokens_details.cached_tokens`; Anthropic:
# `usage.cache_read_input_tokens` / `cache_creation_input_tokens`). Every `RequestEvent` carries what
# litellm's usage object said: `cached_prompt_tokens`, `cache_write_tokens`, and `append_only` — the
# previous request is a prefix of this one (`False` is a **cache break**). `Session(price_as=...)`
# prices the simulator as a real model, cache prices included.
#
# Two runs of the same agent (a file per turn, a 12k-token window, a 64 KB gateway):
#
# * **contextkit** — old tool results are rewritten only when the request reaches 60% of the window
#   or the cap (`Limits.pressure_trigger`), then in one batch down to 25% (`Limits.pressure_target`),
#   keeping the newest result;
# * **always on** — `Limits(pressure_trigger=0)`, how contextkit behaved before: microcompact rewrote
#   old tool results on every request.

# %%
import json

from contextkit import Limits, Session
from contextkit.archive import Archive
from contextkit.events import NoticeEvent, RequestEvent
from contextkit.sim import GatewaySimulator, Workspace


def connection(gw):
    if PROVIDER:
        return PROVIDER, {}
    return gw.model, {"api_base": gw.api_base, "api_key": "sim-key"}


gw = GatewaySimulator(context_window=12_000, max_body="64KB").start()
model, kwargs = connection(gw)
PRICE_AS = None if PROVIDER else "anthropic/claude-sonnet-4-5"  # a real model prices itself


def agent(name, **limits):
    ws = Workspace(seed=2, target_bytes=3_000)
    session = Session(model, **kwargs, system="You are a careful coding agent.", session_id=name, status=False,
                      limits=Limits(context_window=12_000, max_payload="64KB", **limits), price_as=PRICE_AS,
                      archive=Archive.in_memory(session_id=name), tools=list(ws.tools.values()))
    for i in range(16):
        session.send(f"Step {i}: read src/m{i}.py [[tool:read_file {json.dumps({'path': f'src/m{i}.py'})}]]")
    return session


gated = agent("gated")
always_on = agent("always-on", pressure_trigger=0)

print(f"{'request':>7} {'prompt':>7} {'cached':>7}  ")
for i, e in enumerate(gated.events.of_type(RequestEvent)):
    note = "first request" if e.append_only is None else ("append-only" if e.append_only else "CACHE BREAK")
    print(f"{i:>7} {e.prompt_tokens:>7} {e.cached_prompt_tokens:>7}  {note}")

# %% [markdown]
# Each break is a pressure pass, and the session says so (a `NoticeEvent` with code `pressure`, also
# a `CompactionEvent` of the trim stage with trigger `turn`):

# %%
for e in gated.events.of_type(NoticeEvent):
    if e.code == "pressure":
        print(e.text)

# %%
for s in (gated, always_on):
    st = s.stats
    print(f"{s.session_id:<10} requests {st.requests:>3}   cache breaks {st.cache_breaks:>3}   "
          f"cached {st.cached_share:.0%} of {st.prompt_tokens:,} prompt tokens   cost ${st.cost:.4f}")

# %% [markdown]
# What to read from it. Below the trigger the gated session is append-only: every request reads the
# previous one from the cache. When it acts, it frees a lot at once, so the next break is many turns
# away. The always-on session breaks the prefix at nearly every request — but each of its breaks is
# *near the end* of the prompt, so it loses little, while its prompt stays smaller. Which one costs
# less depends on the provider's prices and on how big the prompt gets between passes;
# `benchmarks/cache.py` measures both on the standard workloads (and `Limits.pressure_trigger` is
# the knob). On Anthropic and Claude on Bedrock the cache only exists where the request places
# `cache_control` breakpoints: the session places them itself (`Session(cache_breakpoints=...)`).
#
# A compaction is a break too. Compact the gated session by hand, send once more, and look at the
# prefix the probe measured per request (`RequestEvent.prefix_share`), as a chart:

# %%
gated.compact("keep every file path")
gated.send("What next?")
last = gated.events.of_type(RequestEvent)[-1]
print(f"after the compaction: append_only={last.append_only}, cached {last.cached_prompt_tokens} "
      f"of {last.prompt_tokens} prompt tokens")

# %%
from contextkit.analysis import enable_offline_renderer, frames, prefix_reuse_chart

enable_offline_renderer("svg")
prefix_reuse_chart(frames(gated.events))

# %% [markdown]
# And the trace of what the session will send next: the summary that replaced the old turns, the
# stubs with their markers, each with its size. `trace_session(session)` is read-only.

# %%
from contextkit.prompt.trace import trace_session

after = trace_session(gated)
print(after)
print("dropped messages behind summaries/notices:", after.dropped_messages)
print("archive keys the model can recall:", len(after.archive_keys))
gw.stop()

# %% [markdown]
# **What to remember:** stable blocks first and volatile ones last keep the provider's prompt cache
# warm, and the trace of each call shows what the model really received. Next, notebook 7 runs a
# session against real servers.
