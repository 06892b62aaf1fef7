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
# # 3 · Microcompact and recall
#
# In an agent session most of the budget goes to **tool output**: whole files, logs, JSON dumps.
# Their value decays fast — the model needed the file while it was editing it, not twelve turns
# later. Microcompact ages old tool results *without any LLM call*:
#
# * **2+ turns old** and at least 3,000 chars → a head + tail **preview** with a banner;
# * **4+ turns old** → a **one-line stub**: `[Old tool result cleared - L lines, C chars, TYPE; tool path:lines]`.
#
# Two rules make this safe:
#
# 1. **Archive before you drop.** The original goes to the archive first; the stub ends with
#    `[full content recoverable via @recall <<ccr:KEY>>]`.
# 2. **The pointer steers recall.** The stub says *what* was there (tool, path, line range, type,
#    size) so the model can decide whether it needs it back — and how to ask.
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
# ## Ageing tool results
#
# An agent read six files, one per turn. Age is counted in assistant turns since the result arrived.

# %%
import json

from contextkit import Message, ToolCall, format_size
from contextkit.archive import Archive
from contextkit.messages import assistant_turns
from contextkit.policy.microcompact import microcompact
from contextkit.sim import Workspace

ws = Workspace(seed=5, target_bytes=20_000)
paths = ["src/app/core.py", "src/app/io.py", "src/app/net.py", "src/app/store.py", "lib/util/text.py", "src/app/cli.py"]
history = [Message.system("You are a coding agent.")]
for t, path in enumerate(paths):
    out = ws.read_file(path)
    history += [
        Message.user(f"read {path}"),
        Message.assistant("", [ToolCall(f"call_{t}", "read_file", json.dumps({"path": path}))]),
        out.message(f"call_{t}"),  # tagged with tool, path and line range
        Message.assistant(f"I read {path}."),
    ]
archive = Archive.in_memory(session_id="microcompact")
aged, report = microcompact(history, archive=archive)
print(report.describe())

# %%
# NBVAL_CHECK_OUTPUT
turns = assistant_turns(history)
print(f"{'path':<18}{'age':>4}{'before':>10}{'after':>9}  now")
for before, after, tag in zip(history, aged, turns):
    if before.role == "tool":
        state = "one-liner" if after.content.startswith("[Old tool") else "preview" if after is not before else "full"
        print(f"{before.origin.path:<18}{turns[-1] - tag:>4}{len(before.content):>10,}{len(after.content):>9,}  {state}")

# %% [markdown]
# What the model now reads instead of a 27 KB file — a pointer, not a loss:

# %%
one_liner = next(m for m in aged if m.role == "tool" and m.content.startswith("[Old tool"))
preview = next(m for m, b in zip(aged, history) if m.role == "tool" and "omitted from old tool result" in m.content)
print(one_liner.content)
print("-" * 80)
print(preview.content[:300], "\n   ...\n", preview.content[-300:])

# %%
# NBVAL_CHECK_OUTPUT
from contextkit.markers import extract_keys

key = extract_keys(one_liner.content)[0]
original = archive.get(key)
print("archived entries:", len(archive))
print("byte-exact original behind the stub:", original == history[aged.index(one_liner)].content)
entry = archive.entry(key)
print("entry:", entry.kind, entry.origin, format_size(entry.bytes))

# %% [markdown]
# ## Recall in a running session
#
# Same history, now inside a session (against the simulator). In a session microcompact runs only
# under pressure (`Limits.pressure_trigger`, 60% of the window or the cap by default): below it the
# history is sent untouched, so the provider's prompt cache survives (notebook 6). Six whole files
# (the per-result budget raised to 60,000 chars) fill more than 60% of a 56k-token window, so the
# first request rewrites the old results in one batch.
# The model gets the `recall` tool as soon as the archive holds something (an agent with tools of
# its own has it from the start). Here the scripted model calls it for the first stub; you can also
# type `@recall <<ccr:KEY>>` in a user message, and a model without tools may write it in its answer
# (the session recalls and asks again). Recall output is marked `is_recall`: it is never
# re-archived; the whole original is also `preserve_verbatim`. An original larger than a quarter of
# the request budget comes in pages, each ending with a line that says how to get the next one
# (`recall(key=..., start_line=N)` or `@recall <<ccr:KEY>> lines N-M`).

# %%
from contextkit import Limits, Session
from contextkit.markers import marker
from contextkit.sim import GatewaySimulator


def connection(gw):
    if PROVIDER:
        return PROVIDER, {}
    return gw.model, {"api_base": gw.api_base, "api_key": "sim-key"}


gw = GatewaySimulator(context_window=64_000).start()
model, kwargs = connection(gw)
session = Session(model, **kwargs, system="You are a coding agent.",
                  limits=Limits(context_window=56_000, tool_result_max_chars=60_000),
                  archive=Archive.in_memory(session_id="recall"), session_id="recall", status=print)
session.add_messages(history[1:])  # Message values keep their tool/path/line metadata
reply = session.send("Anything else to read?")
stub = next(m for m in session.history if m.role == "tool" and m.content.startswith("[Old tool"))
key = extract_keys(stub.content)[0]
print(stub.content)

# %%
reply = session.send(f"Look at that file again. [[tool:recall {json.dumps({'key': marker(key)})}]]")
recalled = [m for m in session.history if m.is_recall][-1]
print("model:", reply.text)
print("recall result:", format_size(len(recalled.content)), "is_recall =", recalled.is_recall,
      "preserve_verbatim =", recalled.preserve_verbatim)
print(recalled.content[:200])

# %%
reply = session.send(f"And compare it with @recall {marker(key)} please.")
inline = [m for m in session.history if m.role == "user"][-1]
print("the session expanded @recall into a user message:", inline.is_recall, "-", format_size(len(inline.content)))
print(session.archive.recall("<<ccr:0000000000000000>>").text)  # a wrong key is an answer, never an exception

# %% [markdown]
# Pages: ask for a range (1-based, inclusive), or pass the page budget the session would use. The
# last line of a page names the next one.

# %%
page = session.archive.recall(json.dumps({"key": marker(key), "start_line": 3, "end_line": 5}))
print(page.text)
first = session.archive.recall(marker(key), max_bytes=2_000)
print("...", first.text.splitlines()[-1])

# %% [markdown]
# ## Streaming the answer
#
# `session.stream(...)` runs the same turn as `send` (pre-flight, microcompact, recovery) and yields
# the answer's text the moment the provider sends it. The dashboard follows the session's events, so
# it moves while the answer arrives: every text delta is a `StreamEvent` with the answer's size so
# far. *Simulator only:* the connection drops after the first pieces; the session asks the model to
# continue from where it stopped, so the reader sees every sentence once and the printed text is
# exactly `reply.text`.

# %%
from IPython.display import display

from contextkit.widgets import Dashboard

dashboard = Dashboard(session)
display(dashboard)
live = []  # what an observer sees while the answer streams in
unsubscribe = session.events.subscribe(lambda e: live.append(e) if e.type == "stream" else None)
if not PROVIDER:
    gw.fail_next("stream_drop")  # simulator only: cut the stream after its first pieces
stream = session.stream("In a few sentences, what do the files you read have in common? [[long:120]]")
for delta in stream:
    print(delta, end="", flush=True)
print()
unsubscribe()
deltas = [e for e in live if e.kind == "delta"]
print(f"\n{len(deltas)} deltas; the answer grew to {deltas[-1].tokens_so_far} tokens while it streamed")
print("continued after:", [e.reason for e in live if e.kind == "continuation"])
print("what was shown is reply.text:", stream.text == stream.reply.text)

# %% [markdown]
# ## The archive browser
#
# Entries (key, kind, origin, size), a search box backed by `recall_context`, the original content
# of the selected entry and **which history message still points at it**.

# %%
from contextkit.widgets import ArchiveBrowser

browser = ArchiveBrowser(session)
browser.select(key)
print("selected", browser.selected_key, "- pointed at by history message(s)", list(browser.stub_indices))
browser

# %% [markdown]
# ## `recall_context`: a bounded search over everything archived
#
# When the model (or you) does not know the key, `recall_context(query, max_items, max_tokens)`
# searches the archive and returns a **bounded** context pack. Identifiers in the query (error codes,
# paths, ids) must all match exactly; other words rank (BM25). The bounds matter: recall must not
# blow the budget it exists to protect, so the items **share** `max_tokens`, each excerpted around its
# hits. When items are dropped or shortened to fit, a `Budget:` line says so, dropped items are named
# on `Dropped:` lines, and the structured form reports `used_items`/`used_tokens`.

# %%
for max_items, max_tokens in [(8, 1500), (3, 300)]:
    pack = session.archive.recall_context_result("checksum timeout store", max_items=max_items, max_tokens=max_tokens)
    print(f"max_items={max_items}, max_tokens={max_tokens}: matched {pack.matched}, used {pack.used_items} items, "
          f"{pack.used_tokens} tokens, dropped {pack.dropped}, shortened {pack.shortened}")
print()
print(session.archive.recall_context("checksum timeout store", max_items=3, max_tokens=300)[:700])

# %%
# NBVAL_CHECK_OUTPUT
from contextkit import RecallValidationError

print(session.archive.recall_context("no such words anywhere zzzz"))
try:
    session.archive.recall_context("checksum", max_items=0)
except RecallValidationError as err:
    print("RecallValidationError:", err)

# %%
browser.close()
dashboard.close()
gw.stop()

# %% [markdown]
# **What to remember:** old tool output is rewritten only under pressure, every original stays in the
# archive under its marker, and the model (or you) reads it back with `recall`. Next, notebook 4
# looks at the gateway's body cap.
