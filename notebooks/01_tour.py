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
# # 1 · A guided tour of contextkit
#
# A model's context window is a **budget**, and so is the body-size cap of every proxy, gateway or
# firewall between you and the provider. A long agent session spends that budget on every request:
# the system prompt, every question, every answer and — above all — every tool output the agent has
# ever read. Sooner or later one of two things happens:
#
# * the provider says *"maximum context length exceeded"*, or
# * a middlebox you never configured answers **413** or a Cloudflare **403 HTML page** — while the
#   token count looked fine.
#
# contextkit keeps such a session alive. This tour shows the whole story in one conversation:
# measure honestly, compress only under pressure, archive before you drop, recover when a request is
# rejected — and watch it happen live in a dashboard.
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
# ## A gateway and a session
#
# The simulator is a real HTTP server on 127.0.0.1 that speaks the OpenAI and Anthropic APIs, so
# litellm talks to it exactly as it would to a provider. In front of its scripted model sits a
# gateway with a **128 KB body cap** that rejects bigger requests the way Cloudflare does: a 403
# HTML page. The session is *not told* about this cap.

# %%
def connection(gw):
    """(model, litellm keyword arguments) for a Session: the simulator behind `gw`, or PROVIDER."""
    if PROVIDER:
        return PROVIDER, {}
    return gw.model, {"api_base": gw.api_base, "api_key": "sim-key"}

import tempfile
from pathlib import Path

from contextkit import Limits, Session, format_size
from contextkit.archive import Archive
from contextkit.sim import GatewaySimulator, Workspace, agent_steps

gw = GatewaySimulator(context_window=128_000, max_body="128KB", reject_with="waf403").start()
model, kwargs = connection(gw)
workspace = Workspace(seed=7, target_bytes=40_000)  # a synthetic repository: 20-60 KB per tool output
workdir = Path(tempfile.mkdtemp())  # the archive and the saved session go here

session = Session(
    model,
    **kwargs,
    system="You are a careful coding agent. Read files, then report what you found.",
    # a real provider has no 128 KB gateway in front of it here, so tell the session the cap instead
    limits=Limits(context_window=128_000, max_payload="128KB" if PROVIDER else None),
    # everything the session removes is archived here (SQLite) before it goes; `recall` reads it back
    archive=Archive(workdir / "tour.sqlite", session_id="tour"),
    tools=list(workspace.tools.values()),
    session_id="tour",
    # the simulator is free; price its traffic as a real model (with its prompt-cache prices) so the
    # dashboard's cost line shows what this session would cost there. A real provider prices itself.
    price_as=None if PROVIDER else "openai/gpt-4.1",
    # status lines (phases, notices): in a notebook they go to the dashboard's status log, or to one
    # collapsible block per cell; in a terminal to stderr. Pass status=print or a list's append to choose.
)
reply = session.send("Hello! We are going to investigate the inventory service together.")
print(reply.text)

# %% [markdown]
# **Honest size.** `session.measure()` is the size of the *next request*: the UTF-8 bytes of the JSON
# body litellm will send (messages, tool-call arguments, tool schemas), and its tokens. Gateways cap
# bytes, models cap tokens; contextkit budgets both.

# %%
# NBVAL_CHECK_OUTPUT
m = session.measure()
print(f"{m.messages} messages, {format_size(m.bytes)}, {m.tokens} tokens")
print("tools offered to the model:", [t["function"]["name"] for t in session.tool_schemas])

# %% [markdown]
# ## The dashboard
#
# Every state change of a session is an event; the dashboard is a set of thin views subscribed to
# the event log. Keep it visible while the next cells run: it updates by itself (no refresh).
#
# Its chart draws **what the session knows about the gateway**: the largest body that went through
# (*known to pass*, green), the smallest body refused for its size (*known to fail*, red, once
# something is refused) and the *send limit* it keeps every request under, learned from the
# refusals. The real cap is somewhere between green and red; the session never sees it. Because this gateway
# is the simulator, the dashboard is given it (`gateway=gw`) and draws its real cap too, dotted:
# the truth, for the class, not for the session. `projector=True` makes every text larger.

# %%
from contextkit.widgets import Dashboard

dashboard = Dashboard(session, gateway=None if PROVIDER else gw)
dashboard

# %% [markdown]
# ## A long agent conversation
#
# Ten steps: each makes the (scripted) model call one tool — read a whole file, grep, tail a log,
# fetch JSON. Watch the chart grow one point per request; the status log (at the bottom of the
# dashboard) says what happens in words. A tool result above the per-result budget (20,000 chars) is
# capped to a head + tail **preview** when it arrives, before the model ever sees it. Nothing older
# is rewritten while the history stays below the pressure trigger (60% of the window or the cap), so
# the provider's prompt cache keeps every earlier request; above it, old results become previews and
# **one-line stubs** in one batch — *microcompact*. Nothing is lost: the original goes to the archive
# first and the stub carries its `<<ccr:KEY>>` marker.

# %%
import json

plan = agent_steps(seed=7, steps=10)
for i, (tool, args) in enumerate(plan, 1):
    note = " ".join(f"{k}={v}" for k, v in args.items())
    reply = session.send(f"Step {i}: please run {tool} {note}. [[tool:{tool} {json.dumps(args)}]]")
    m = session.measure()
    print(f"  step {i:2d} {tool:<9} -> history {m.messages:3d} msgs, {format_size(m.bytes):>9}")

# %% [markdown]
# ## Hitting the gateway
#
# Now the user pastes a production log that the gateway would take on its own, but not on top of
# the history so far: the request is above the gateway's (unknown) cap. Follow it on the dashboard: a red cross on the chart where the gateway refused a request,
# triangles where the session recovered, vertical lines where it compacted (hover any of them):
#
# 1. the history is over budget, so it is **compacted** before sending (summary, then truncation,
#    then shrinking the older messages — everything archived first; your newest message is the
#    task and is never cut by compaction);
# 2. the gateway still rejects it with a Cloudflare page; the classifier recognises a **WAF
#    rejection**, not an auth error;
# 3. the session **learns a cap** (¾ of the rejected size) and climbs the **recovery ladder**: it
#    shrinks the older history (archived first) and keeps the paste whole;
# 4. a one-time notice asks the model to keep requests small from now on.
#
# A paste bigger than the cap on its own is different behind a page that states no size: only an
# excerpt of it could be sent, and an excerpt that passes cannot tell a size limit from a firewall
# objecting to a line it left out. So the session tests one only when the refused request is far
# above anything that passed (at least 64 KB and twice the largest accepted body) and this gateway
# has not refused content before: the paste is archived whole and sent as a head + tail excerpt the
# model can page through with `recall`. If the excerpt passes, only the refused size stays *known to
# fail*; the cap that sized the excerpt is dropped again. Otherwise the turn fails with a message
# saying so and changes nothing. `Limits(max_payload=...)` tells the session the cap when you know it.
#
# On the chart the red *known to fail* line appears at the refused size. The learned cap (the send
# limit) is ¾ of it: it can sit above the real cap, because one refusal only says the real cap is
# below the refused size. What the session knows is the interval between the green and the red line.

# %%
log = workspace.tail_log(700).content
print(f"pasting {format_size(len(log.encode()))} of log")
reply = session.send("Here is the full crash log from production, please keep it in mind:\n" + log)
print()
print("answer:", reply.text[:80])
for attempt in reply.attempts:
    print("  attempt:", attempt)

# %%
# NBVAL_CHECK_OUTPUT
from contextkit.widgets.series import evidence_of, real_cap_of

known_to_pass, known_to_fail = evidence_of(session)
print(f"known to pass {format_size(known_to_pass)}, send limit {format_size(session.payload_cap)} "
      f"({session.cap_source}), known to fail {format_size(known_to_fail)}")
if real_cap_of(gw):
    print(f"the truth the session cannot see: the simulator's real cap is {format_size(real_cap_of(gw))}")
from contextkit.widgets.labels import stat_value

print("recovery steps:", stat_value("recoveries_by_level", session.stats.recoveries_by_level))
print("refusals:", stat_value("failures_by_kind", session.stats.failures_by_kind))

# %% [markdown]
# ## Nothing was lost
#
# Everything removed or shortened sits verbatim in the archive (SQLite; in memory here). The
# history keeps pointers. Ask for any of them back — the model can do the same with its `recall`
# tool or by writing `@recall <<ccr:KEY>>`.

# %%
entries = session.archive.entries()
print(len(entries), "archived entries,", format_size(session.archive.total_bytes), "in total")
for e in entries[:6]:
    print(f"  {e.key}  {e.kind:<12} {format_size(e.bytes):>9}  {e.origin}")

# %%
from contextkit.markers import extract_keys

stubs = [m for m in session.history if m.role == "tool" and extract_keys(m.content)]
stub = next((m for m in stubs if m.content.startswith("[Old tool")), stubs[0])
key = extract_keys(stub.content)[0]
print("what the model sees now :", stub.content[:160].replace("\n", " | "))
print("what the archive holds  :", format_size(len(session.archive.get(key).encode())), "- byte-exact original")

# %% [markdown]
# ## Keep going, then save
#
# The session continues under its learned cap. `save` writes the history, counters and the archive
# reference; `Session.load` resumes it (pass the credentials again — they are never written).

# %%
reply = session.send("What is left to do?")
print(reply.text)
path = session.save(workdir / "tour.json")
again = Session.load(path, archive=session.archive, status=None, **kwargs)
print("resumed:", again)

# %%
stats = session.stats
refused, steps = sum(stats.failures_by_kind.values()), sum(stats.recoveries_by_level.values())
print(
    f"The session sent {stats.requests} requests and the gateway refused {refused}; the session compacted "
    f"its history {stats.compactions} time{'' if stats.compactions == 1 else 's'}, took {steps} recovery "
    f"step{'' if steps == 1 else 's'} and kept {len(session.archive)} removed pieces "
    f"({format_size(session.archive.total_bytes)}) in its archive, where recall finds them."
)
gw.stop()

# %% [markdown]
# **Where next:** notebook 2 climbs the recovery ladder one rung at a time, 3 looks at microcompact
# and recall, 4 at gateway caps, 5 measures what each recovery level and compaction stage costs and
# saves, 6 shows how to assemble prompts so the provider's prompt cache survives, 7 runs the same
# session against real servers (nginx in front of llama.cpp), 8 brings an agent you did not write, and
# 9 replays real agent runs through contextkit and its peers.
