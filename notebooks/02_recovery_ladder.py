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
# # 2 · The recovery ladder
#
# When a request is rejected, the first question is **why**. Recovering from a firewall page by
# compacting is right; "recovering" from a wrong API key by throwing away half the conversation is a
# disaster. So contextkit classifies every failure first, then weighs it against what this session
# has seen (**learn only from evidence**), and only size problems climb the ladder:
#
# | level | what it does | what it costs |
# |---|---|---|
# | 1 | **halve the tool-result budgets** for this recovery episode; also repair tool-call pairing and cap long assistant messages | a little detail from big tool outputs |
# | 2 | **emergency truncation**: keep the system prompt and the last 10 messages | older turns (archived, recallable) |
# | 3 | **nuclear truncation**: keep the last 4 messages, each capped at 4,000 chars | almost everything (archived, recallable) |
#
# Each rung is tried only if the one before did not get the request through: **compress only under
# pressure**, and no more than needed. Two things no rung removes: the newest user message (the
# task) and the tool calls and results made since it.
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
# ## What the classifier sees *(simulator only)*
#
# We ask the simulator to fail the next request in each way a provider or a middlebox fails, send a
# tiny request through litellm, and hand the exception to `classify_failure`.

# %%
from contextkit import backend, classify_failure
from contextkit.sim import GatewaySimulator

gw = GatewaySimulator(context_window=64_000).start()
hello = [{"role": "user", "content": "hello"}]
rows = []
for fault in ["413", "413-html", "waf403", "bedrock403", "overflow", "drop", "429", "500", "auth401", "auth403"]:
    gw.fail_next(fault)
    try:
        backend.completion(gw.model, hello, timeout=5, api_base=gw.api_base, api_key="sim-key")
    except Exception as exc:  # what litellm raised, as your code would see it
        failure = classify_failure(exc)
        rows.append((fault, type(exc).__name__, failure.kind.value, failure.recoverable))
print(f"{'gateway/provider fault':<24}{'litellm raised':<30}{'classified as':<20}recoverable")
for row in rows:
    print(f"{row[0]:<24}{row[1]:<30}{row[2]:<20}{row[3]}")

# %% [markdown]
# Notice:
#
# * litellm raises a generic `APIError` for a 413 and for a Cloudflare page alike; the classifier
#   reads status, body and headers (`cf-ray`) to tell a **WAF rejection** from a plain 403 `auth`;
# * a **dropped connection** says nothing by itself. The classifier only calls it *likely payload*
#   for a big request (over 500 KB); the session adds evidence: it retries a drop once, and treats
#   it as a body-size limit when the same request drops again while smaller requests to that
#   endpoint went through (nginx's `return 444` at 60 KB looks exactly like this):

# %%
# NBVAL_CHECK_OUTPUT
gw.fail_next("drop")
try:
    backend.completion(gw.model, hello, timeout=5, api_base=gw.api_base, api_key="sim-key")
except Exception as exc:
    dropped = exc
for size in (2_000, 900_000):
    f = classify_failure(dropped, request_bytes=size)
    print(f"connection dropped after a {size:>7,}-byte request -> {f.kind.value}")
print(classify_failure((403, "<html>Access denied by security policy</html>")).kind.value)
print(classify_failure((403, '{"error": "invalid api key"}')).kind.value)

# %% [markdown]
# ## The three rungs, side by side
#
# The ladder is made of small pure functions over message lists, so we can apply each rung to a
# **copy** of the same history and compare. The history: an agent that read six big files and wrote
# long analyses.

# %%
import json

from contextkit import Message, ToolCall, format_size
from contextkit.sizing import request_bytes
from contextkit.archive import Archive
from contextkit.sim import Workspace

ws = Workspace(seed=11, target_bytes=30_000)
history = [Message.system("You are a careful coding agent.")]
for t, path in enumerate(["src/app/core.py", "src/app/io.py", "src/app/net.py", "src/app/store.py",
                          "lib/util/text.py", "src/app/cli.py"]):
    out = ws.read_file(path)
    call = ToolCall(f"call_{t}", "read_file", json.dumps({"path": path}))
    history += [
        Message.user(f"Step {t + 1}: read {path}"),
        Message.assistant("", [call]),
        out.message(f"call_{t}"),  # the tool result, tagged with its path and line range
        Message.assistant(f"{path} has {out.line_end} lines. " + "Observation. " * 600),
    ]
history.append(Message.user("What did you find?"))


def overview(h):
    return f"{len(h):3d} messages, {format_size(request_bytes(h)):>9}"


def outline(h, width=90):
    for i, m in enumerate(h):
        text = m.content.replace("\n", " | ")
        print(f"  [{i:2d}] {m.role:<9} {len(m.content):>7,} chars  {text[:width]}")


print("before:", overview(history))

# %%
# NBVAL_CHECK_OUTPUT
from contextkit.policy.budgets import aggressive_level1
from contextkit.policy.truncate import emergency_truncate

archive = Archive.in_memory(session_id="ladder")
level1, r1 = aggressive_level1(history, archive=archive, turn_budget=100_000, per_result=10_000, assistant_cap=5_000)
level2, r2 = emergency_truncate(history, keep=10, archive=archive)
level3, r3 = emergency_truncate(history, keep=4, archive=archive, per_message_cap=4_000)
print("before :", overview(history))
print("level 1:", overview(level1), "-", r1.describe())
print("level 2:", overview(level2), "-", r2.describe())
print("level 3:", overview(level3), "-", r3.describe())
print("archive now holds", len(archive), "originals")

# %% [markdown]
# Look at what each rung left. Level 1 keeps **every message** but cuts big tool results to a head +
# tail preview with a recall marker; level 2 replaces the older turns with **one notice that points
# at the archived transcript**; level 3 keeps only the newest exchange — note how it starts at a
# *user* message and never leaves a tool result without the call that produced it.

# %%
print("LEVEL 1"); outline(level1)

# %%
print("LEVEL 2"); outline(level2)
print()
print("LEVEL 3"); outline(level3)

# %% [markdown]
# Archive before you drop: the notice's marker brings the whole dropped segment back, byte for byte.

# %%
print(archive.get(r3.segment_key)[:400])


# %% [markdown]
# ## The ladder in a live session *(simulator only)*
#
# Now the same history in a session behind a gateway that **drops the cap to 12 KB** without telling
# anyone. Every rejection teaches the session a tighter cap (¾ of the rejected size) - a hard limit
# from then on: no later request of this session is as big as one the gateway refused - and each
# rung is tried in turn until a request fits.

# %%
def connection(gw):
    """(model, litellm keyword arguments) for a Session: the simulator behind `gw`, or PROVIDER."""
    if PROVIDER:
        return PROVIDER, {}
    return gw.model, {"api_base": gw.api_base, "api_key": "sim-key"}

from contextkit import Limits, Session
from contextkit.events import RecoveryEvent

gw.configure(max_body="12KB", reject_with="413")
model, kwargs = connection(gw)
if PROVIDER:  # a real provider has no 12 KB gateway: the rejections below come from the simulator only
    model, kwargs = gw.model, {"api_base": gw.api_base, "api_key": "sim-key"}
lines = []
session = Session(model, **kwargs, system="You are a careful coding agent.", limits=Limits(context_window=64_000),
                  archive=Archive.in_memory(session_id="live"), session_id="live", status=lines.append)
session.add_messages([m.to_wire() for m in history[1:]])
print("history before:", session.measure())
reply = session.send("Continue, briefly.")
print("reply:", reply.text)
for attempt in reply.attempts:
    print("  ", attempt)

# %%
print("\n".join(lines))
print()
for e in session.events.of_type(RecoveryEvent):
    if e.outcome == "recovered":
        print(f"level {e.level} recovered: the {format_size(e.bytes_before)} request went through")
    else:
        print(f"level {e.level} {e.outcome:<9} after {e.failure_kind}: history {format_size(e.bytes_before):>9} -> "
              f"{format_size(e.bytes_after):>9}  ({e.messages_before} -> {e.messages_after} msgs)")

# %% [markdown]
# ## When the ladder runs out, and when it must not start *(simulator only)*
#
# If every rung fails, the turn is rolled back - a turn is a transaction: the session's history is
# exactly what it was before `send`, and `RecoveryFailedError.history` is that history, so a failed
# turn never leaves its message behind to make the next turn fail too. (Here the refusals are 403
# pages that state no size: once the request has shrunk below a size this gateway accepted earlier
# in the session and is still refused, the session reads them as the gateway objecting to content or
# access and fails the turn with a `ProviderError` that says so - rolled back the same way.) A real
# authentication error
# never climbs the ladder at all; like every failure that is not about size, it changes neither the
# history nor any learned limit.

# %%
from contextkit import AuthenticationFailed, ProviderError, RecoveryFailedError

gw.configure(max_body=None)
gw.fail_next("waf403", times=12)  # more rejections than the session has rungs (summaries are requests too)
before = session.history
try:
    session.send("One more question.")
except (RecoveryFailedError, ProviderError) as err:
    # refused again below a size the gateway accepted before: no size limit, and the error says so
    print(f"{type(err).__name__}:", str(err)[:160], "...")
    handed = getattr(err, "history", session.history)
    print("history:", len(handed), "messages; the session's history is unchanged:", session.history == before == handed)
gw.reset(context_window=64_000)  # clear the remaining faults

gw.fail_next("auth401")
try:
    session.send("And another.")
except AuthenticationFailed as err:
    print("AuthenticationFailed:", err)
gw.stop()

# %% [markdown]
# **What to remember:** only failures about size climb the ladder, one level at a time, and every level
# archives what it removes; a wrong key or any other failure leaves the history as it was. Next,
# notebook 3 shows how old tool output is aged and read back with `recall`.
