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
# # 4 · Gateway caps
#
# Token windows are documented; **body-size caps are not**. nginx defaults to 1 MB, API gateways
# and WAFs to anything from 128 KB to 10 MB, and they answer with a 413, an HTML error page, a
# Cloudflare 403, or simply by dropping the connection. No mainstream framework budgets request
# *bytes* — so a session can be rejected while its token count looks perfectly fine.
#
# contextkit treats the cap as a budget like the window:
#
# * **pre-flight** — with a known cap, a request above 85% of it is compacted *before* it is sent;
#   the cap is a hard limit: a request above it is never sent;
# * **learned cap** — a rejection of known size sets the cap to ¾ of it, for this session only, and
#   no later request is as big as the one refused; a single rejection far below a size the gateway
#   already accepted is a stray page, retried once and learned from only if it repeats;
# * **a message too big to send whole** — archived, and sent as a head + tail excerpt the model can
#   page through with `recall`;
# * **floor diagnostic** — when even the smallest request (system prompt, tool schemas, the smallest
#   excerpt of your message) cannot fit, fail fast with an actionable error naming the real sizes;
# * **one-time notice** — after a payload rejection the model is told, once, to keep requests small
#   (with advice about targeted file reads only when the session has tools that read);
# * **limits recover** — after clean turns a learned cap is probed upwards (never back to a refused
#   size), and `session.reset_limits()` forgets what failures taught. Every change is a `LimitEvent`.
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


# %%
def connection(gw):
    """(model, litellm keyword arguments) for a Session: the simulator behind `gw`, or PROVIDER."""
    if PROVIDER:
        return PROVIDER, {}
    return gw.model, {"api_base": gw.api_base, "api_key": "sim-key"}

from contextkit import Limits, PayloadFloorError, Session, format_size
from contextkit.archive import Archive
from contextkit.events import CapEvent, NoticeEvent
from contextkit.policy.oversize import EXCERPT_TAG
from contextkit.sim import GatewaySimulator, Workspace
from contextkit.limits.state import PAYLOAD_NOTICE_MARKER

gw = GatewaySimulator(context_window=128_000, max_body="96KB", reject_with="413").start()
model, kwargs = connection(gw)
logs = Workspace(seed=3, target_bytes=6_000)

# %% [markdown]
# ## Pre-flight: a known cap
#
# If you know your gateway's limit, say so: `Limits(max_payload="64KB")` or
# `CONTEXTKIT_MAX_PAYLOAD=64KB`. Below 70% of the cap nothing happens (compress only under
# pressure). A request that would land above **85%** is compacted first, to a tighter 40% budget,
# with a notice that says why. The cap is a hard limit: whatever happens, a request above it is
# never sent (the session compacts further first).

# %%
notes = []
session = Session(model, **kwargs, system="Be brief.", limits=Limits(context_window=128_000, max_payload="64KB"),
                  archive=Archive.in_memory(session_id="preflight"), session_id="preflight", status=notes.append)
for i in range(3):
    session.send(f"turn {i}: a log excerpt\n" + logs.tail_log(60).content)
print("before the paste:", format_size(session.measure().bytes))
session.send("And the full trace (please keep it):\n" + logs.tail_log(320).content)
print("after the paste :", format_size(session.measure().bytes), "- requests rejected:",
      sum(not r.accepted for r in gw.requests))
print()
print("\n".join(notes))

# %% [markdown]
# ## Learned cap: an unknown cap *(simulator only)*
#
# Now nobody told the session. The gateway rejects a 97 KB request; the failure carries the size
# we sent (we always know the body), so the session sets its cap to ¾ of it and recovers. From now
# on no request of this session is 97 KB or more. The cap belongs to this session: other sessions
# in the process never see it. It tightens on rejections; after `Limits(cap_probe_turns=8)` clean
# turns it is raised a quarter (never to a refused size), and `reset_limits()` forgets it.

# %%
notes = []
sim_model, sim_kwargs = gw.model, {"api_base": gw.api_base, "api_key": "sim-key"}  # the gateway is the subject
learner = Session(sim_model, **sim_kwargs, system="Be brief.", limits=Limits(context_window=128_000),
                  archive=Archive.in_memory(session_id="learned"), session_id="learned", status=notes.append)
for i in range(3):
    learner.send(f"turn {i}: log\n" + logs.tail_log(300).content)
print("\n".join(notes))

# %%
# NBVAL_CHECK_OUTPUT
for e in learner.events.of_type(CapEvent):
    print(f"cap {e.source}: rejected {format_size(e.rejected_bytes)} -> cap {format_size(e.cap_bytes)} (3/4)")
print("this session:", format_size(learner.payload_cap), learner.cap_source)
print("the other session keeps its configured cap:", format_size(session.payload_cap), session.cap_source)

# %% [markdown]
# **What the session knows is an interval.** The chart below draws it: the largest body the gateway
# accepted (*known to pass*, green), the smallest it refused for its size (*known to fail*, red) and
# the *send limit*, the cap the session keeps every request under (¾ of a refused size). The real cap
# lies somewhere between green and red; the dotted line is the simulator's real cap, the truth the session
# cannot see (drawn only because the chart is given the simulator with `gateway=gw`).

# %%
from contextkit.analysis import enable_offline_renderer
from contextkit.widgets.chart import snapshot_chart

enable_offline_renderer("png")  # static images through vl-convert: no CDN; JupyterLab shows PNG in an untrusted notebook (Binder), SVG only once trusted
snapshot_chart(learner, gateway=gw)


# %% [markdown]
# ## A stray page teaches nothing *(simulator only)*
#
# Gateways and WAFs also reject requests for reasons that have nothing to do with size. A single
# rejection of a request far below a size the gateway already accepted in this session is not
# evidence of a cap: it is retried once, and the cap stays where it was.

# %%
learner.compact("keep the log timestamps")  # the history is now much smaller than what went through
cap_before = learner.payload_cap
gw.fail_next("413")  # simulator: one rejection of a small request
learner.send("A short question about the logs.")
print("cap before:", format_size(cap_before), "- after:", format_size(learner.payload_cap),
      "- retries:", learner.stats.retries)
print(notes[-1])


# %% [markdown]
# ## The one-time notice and a message too big to send *(simulator only)*
#
# After the payload recovery, one user message was inserted asking the model to keep requests small
# and summarize incrementally (a session with file-reading tools also gets advice about targeted
# reads). It is added **once per session** — contextkit looks for an existing copy anywhere,
# including inside a summary — so a second rejection does not stack notices.
#
# The paste below is bigger than the learned cap itself. Whatever binds (a learned or configured
# cap, or the context window), such a message is archived whole and the model gets its first and
# last lines with a notice saying how to read the rest with `recall`; you get a
# `message_excerpted` notice.

# %%
def notices(s):
    return sum(PAYLOAD_NOTICE_MARKER in m.content for m in s.history)


print("notices after the first recovery:", notices(learner))
gw.fail_next("413", times=2)  # simulator: the same request refused twice - evidence, not a stray page
learner.send("Another big paste:\n" + Workspace(seed=4, target_bytes=6_000).tail_log(1_500).content)
print("notices after a second payload recovery:", notices(learner), "- recoveries:", learner.stats.recoveries_by_level)
print(next(m.content for m in learner.history if PAYLOAD_NOTICE_MARKER in m.content)[:240], "...")
print()
print(next(m.content for m in learner.history if m.content.startswith(EXCERPT_TAG))[:420], "...")

# %% [markdown]
# ## The floor: when no compaction can help *(simulator only)*
#
# The system prompt and the tool schemas are never compacted — they are the *floor* of every
# request, together with the smallest excerpt of your newest message. Behind a 16 KB gateway, a
# 20 KB system prompt can never fit. Instead of climbing three rungs in vain, the session fails
# fast, names the real sizes (only the parts that exist) and says what to shrink; the failed turn
# leaves the history as it was.

# %%
gw.configure(max_body="16KB")
rules = "You must follow these rules.\n" + Workspace(seed=9, target_bytes=20_000).read_file("docs/rules.md").content
heavy = Session(sim_model, **sim_kwargs, system=rules, limits=Limits(context_window=128_000),
                archive=Archive.in_memory(session_id="floor"), session_id="floor", status=print)
print("system prompt:", format_size(len(rules.encode())))
try:
    heavy.send("hi")
except PayloadFloorError as err:
    print()
    print("PayloadFloorError:", err)
    print("floor:", format_size(err.base_bytes), "- rejected:", format_size(err.rejected_bytes))

# %% [markdown]
# A system prompt at or above ¾ of a rejected size only gets a **warning**: it still fits, but
# leaves little room for the conversation.
#
# ## Summary of the notices this notebook produced

# %%
for s in (session, learner, heavy):
    codes = [e.code for e in s.events.of_type(NoticeEvent)]
    print(f"{s.session_id:<10}", ", ".join(dict.fromkeys(codes)))
gw.stop()

# %% [markdown]
# **What to remember:** what a session knows about a gateway's cap is an interval, from the largest
# body it accepted to the smallest it refused, and it keeps every request under a send limit learned
# from the refusals; a stray page teaches nothing, and a floor that cannot fit fails at once with the
# real sizes. Next, notebook 5 measures what each recovery level and compaction stage costs.
