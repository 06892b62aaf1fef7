"""Cell texts of the numbered notebooks (see _build.py). ("md", text) or ("code", text) pairs."""

from __future__ import annotations

# The first code cell of every notebook: offline litellm, and the one switch to a real model.
SETUP = """
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
"""

CONNECT = '''
def connection(gw):
    """(model, litellm keyword arguments) for a Session: the simulator behind `gw`, or PROVIDER."""
    if PROVIDER:
        return PROVIDER, {}
    return gw.model, {"api_base": gw.api_base, "api_key": "sim-key"}
'''

SWITCH_NOTE = """
> **Simulator or real model.** Every cell runs against the bundled gateway simulator unless the
> environment variable `CONTEXTKIT_NOTEBOOK_MODEL` names a litellm model *and* `OPENAI_API_KEY` or
> `ANTHROPIC_API_KEY` is set. Cells marked *simulator only* inject gateway faults, which a real
> provider does not do on request; they keep using the simulator either way.
"""

# --------------------------------------------------------------------------------------------------
NB1 = [
    (
        "md",
        """
# 1 · A guided tour of contextkit

A model's context window is a **budget**, and so is the body-size cap of every proxy, gateway or
firewall between you and the provider. A long agent session spends that budget on every request:
the system prompt, every question, every answer and — above all — every tool output the agent has
ever read. Sooner or later one of two things happens:

* the provider says *"maximum context length exceeded"*, or
* a middlebox you never configured answers **413** or a Cloudflare **403 HTML page** — while the
  token count looked fine.

contextkit keeps such a session alive. This tour shows the whole story in one conversation:
measure honestly, compress only under pressure, archive before you drop, recover when a request is
rejected — and watch it happen live in a dashboard.
"""
        + SWITCH_NOTE,
    ),
    ("code", SETUP),
    (
        "md",
        """
## A gateway and a session

The simulator is a real HTTP server on 127.0.0.1 that speaks the OpenAI and Anthropic APIs, so
litellm talks to it exactly as it would to a provider. In front of its scripted model sits a
gateway with a **128 KB body cap** that rejects bigger requests the way Cloudflare does: a 403
HTML page. The session is *not told* about this cap.
""",
    ),
    (
        "code",
        CONNECT
        + """
from contextkit import Limits, Session, format_size
from contextkit.archive import Archive
from contextkit.sim import GatewaySimulator, Workspace, agent_steps

gw = GatewaySimulator(context_window=128_000, max_body="128KB", reject_with="waf403").start()
model, kwargs = connection(gw)
workspace = Workspace(seed=7, target_bytes=40_000)  # a synthetic repository: 20-60 KB per tool output

session = Session(
    model,
    **kwargs,
    system="You are a careful coding agent. Read files, then report what you found.",
    # a real provider has no 128 KB gateway in front of it here, so tell the session the cap instead
    limits=Limits(context_window=128_000, tool_result_max_chars=60_000, max_payload="128KB" if PROVIDER else None),
    archive=Archive.in_memory(session_id="tour"),
    tools=list(workspace.tools.values()),
    session_id="tour",
    status=print,  # phases and notices as plain lines (a list's append works too)
)
reply = session.send("Hello! We are going to investigate the inventory service together.")
print(reply.text)
""",
    ),
    (
        "md",
        """
**Honest size.** `session.measure()` is the size of the *next request*: the UTF-8 bytes of the JSON
body litellm will send (messages, tool-call arguments, tool schemas), and its tokens. Gateways cap
bytes, models cap tokens; contextkit budgets both.
""",
    ),
    (
        "code",
        """
# NBVAL_CHECK_OUTPUT
m = session.measure()
print(f"{m.messages} messages, {format_size(m.bytes)}, {m.tokens} tokens")
print("tools offered to the model:", [t["function"]["name"] for t in session.tool_schemas])
""",
    ),
    (
        "md",
        """
## The dashboard

Every state change of a session is an event; the dashboard is a set of thin views subscribed to
the event log. Keep it visible while the next cells run: it updates by itself (no refresh).
""",
    ),
    (
        "code",
        """
from contextkit.widgets import Dashboard

dashboard = Dashboard(session)
dashboard
""",
    ),
    (
        "md",
        """
## A long agent conversation

Ten steps: each makes the (scripted) model call one tool — read a whole file, grep, tail a log,
fetch JSON. Watch the status lines. After two turns a big tool result becomes a **preview** (head +
tail), after four a **one-line stub** — *microcompact*. Nothing is lost: the original goes to the
archive first and the stub carries its `<<ccr:KEY>>` marker.
""",
    ),
    (
        "code",
        """
import json

plan = agent_steps(seed=7, steps=10)
for i, (tool, args) in enumerate(plan, 1):
    note = " ".join(f"{k}={v}" for k, v in args.items())
    reply = session.send(f"Step {i}: please run {tool} {note}. [[tool:{tool} {json.dumps(args)}]]")
    m = session.measure()
    print(f"  step {i:2d} {tool:<9} -> history {m.messages:3d} msgs, {format_size(m.bytes):>9}")
""",
    ),
    (
        "md",
        """
## Hitting the gateway

Now the user pastes a 280 KB production log. The request is far above the gateway's (unknown)
cap. Follow the status lines:

1. the history is over budget, so it is **compacted** before sending (summary, then truncation,
   then shrinking the one huge message — everything archived first);
2. the gateway still rejects it with a Cloudflare page; the classifier recognises a **WAF
   rejection**, not an auth error;
3. the session **learns a cap** (¾ of the rejected size) and climbs the **recovery ladder**,
   re-compacting under the new cap until a request goes through;
4. a one-time notice asks the model to prefer targeted reads from now on.
""",
    ),
    (
        "code",
        """
log = workspace.tail_log(2_600).content
print(f"pasting {format_size(len(log.encode()))} of log")
reply = session.send("Here is the full crash log from production, please keep it in mind:\\n" + log)
print()
print("answer:", reply.text[:80])
for attempt in reply.attempts:
    print("  attempt:", attempt)
""",
    ),
    (
        "code",
        """
# NBVAL_CHECK_OUTPUT
print("payload cap now:", format_size(session.payload_cap), f"({session.cap_source})")
print("recoveries by level:", session.stats.recoveries_by_level)
print("failures by kind:", session.stats.failures_by_kind)
""",
    ),
    (
        "md",
        """
## Nothing was lost

Everything removed or shortened sits verbatim in the archive (SQLite; in memory here). The
history keeps pointers. Ask for any of them back — the model can do the same with its `recall`
tool or by writing `@recall <<ccr:KEY>>`.
""",
    ),
    (
        "code",
        """
entries = session.archive.entries()
print(len(entries), "archived entries,", format_size(session.archive.total_bytes), "in total")
for e in entries[:6]:
    print(f"  {e.key}  {e.kind:<12} {format_size(e.bytes):>9}  {e.origin}")
""",
    ),
    (
        "code",
        """
from contextkit.markers import extract_keys

stubs = [m for m in session.history if m.role == "tool" and extract_keys(m.content)]
stub = next((m for m in stubs if m.content.startswith("[Old tool")), stubs[0])
key = extract_keys(stub.content)[0]
print("what the model sees now :", stub.content[:160].replace("\\n", " | "))
print("what the archive holds  :", format_size(len(session.archive.get(key).encode())), "- byte-exact original")
""",
    ),
    (
        "md",
        """
## Keep going, then save

The session continues under its learned cap. `save` writes the history, counters and the archive
reference; `Session.load` resumes it (pass the credentials again — they are never written).
""",
    ),
    (
        "code",
        """
import tempfile
from pathlib import Path

reply = session.send("What is left to do?")
print(reply.text)
path = session.save(Path(tempfile.mkdtemp()) / "tour.json")
again = Session.load(path, archive=session.archive, status=None, **kwargs)
print("resumed:", again)
""",
    ),
    (
        "code",
        """
print(json.dumps(session.stats.to_dict(), indent=1))
dashboard.close()
gw.stop()
""",
    ),
    (
        "md",
        """
**Where next:** notebook 2 climbs the recovery ladder one rung at a time, 3 looks at microcompact
and recall, 4 at gateway caps, 5 measures what each level costs and saves, and 6 shows how to
assemble prompts so the provider's prompt cache survives.
""",
    ),
]

# --------------------------------------------------------------------------------------------------
NB2 = [
    (
        "md",
        """
# 2 · The recovery ladder

When a request is rejected, the first question is **why**. Recovering from a firewall page by
compacting is right; "recovering" from a wrong API key by throwing away half the conversation is a
disaster. So contextkit classifies every failure first, and only size problems climb the ladder:

| level | what it does | what it costs |
|---|---|---|
| 1 | repair tool-call pairing, halve this session's tool-result budgets, cap long assistant messages | a little detail from big tool outputs |
| 2 | emergency truncation: keep the system prompt and the last 10 messages | older turns (archived, recallable) |
| 3 | nuclear truncation: keep the last 4 messages, each capped at 4,000 chars | almost everything (archived, recallable) |

Each rung is tried only if the one before did not get the request through: **compress only under
pressure**, and no more than needed.
"""
        + SWITCH_NOTE,
    ),
    ("code", SETUP),
    (
        "md",
        """
## What the classifier sees *(simulator only)*

We ask the simulator to fail the next request in each way a provider or a middlebox fails, send a
tiny request through litellm, and hand the exception to `classify_failure`.
""",
    ),
    (
        "code",
        """
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
""",
    ),
    (
        "md",
        """
Notice:

* litellm raises a generic `APIError` for a 413 and for a Cloudflare page alike; the classifier
  reads status, body and headers (`cf-ray`) to tell a **WAF rejection** from a plain 403 `auth`;
* a **dropped connection** is only *likely a payload problem* when the request was big (over 500
  KB); for a tiny request it is just `transient` and is retried, not compacted:
""",
    ),
    (
        "code",
        """
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
""",
    ),
    (
        "md",
        """
## The three rungs, side by side

The ladder is made of small pure functions over message lists, so we can apply each rung to a
**copy** of the same history and compare. The history: an agent that read six big files and wrote
long analyses.
""",
    ),
    (
        "code",
        """
import json

from contextkit import Message, ToolCall, format_size, request_bytes
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
        text = m.content.replace("\\n", " | ")
        print(f"  [{i:2d}] {m.role:<9} {len(m.content):>7,} chars  {text[:width]}")


print("before:", overview(history))
""",
    ),
    (
        "code",
        """
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
""",
    ),
    (
        "md",
        """
Look at what each rung left. Level 1 keeps **every message** but cuts big tool results to a head +
tail preview with a recall marker; level 2 replaces the older turns with **one notice that points
at the archived transcript**; level 3 keeps only the newest exchange — note how it starts at a
*user* message and never leaves a tool result without the call that produced it.
""",
    ),
    ("code", 'print("LEVEL 1"); outline(level1)'),
    ("code", 'print("LEVEL 2"); outline(level2)\nprint()\nprint("LEVEL 3"); outline(level3)'),
    (
        "md",
        """
Archive before you drop: the notice's marker brings the whole dropped segment back, byte for byte.
""",
    ),
    (
        "code",
        """
print(archive.get(r3.segment_key)[:400])
""",
    ),
    (
        "md",
        """
## The ladder in a live session *(simulator only)*

Now the same history in a session behind a gateway that **drops the cap to 12 KB** without telling
anyone. Every rejection teaches the session a tighter cap (¾ of the rejected size), and each rung
is tried in turn until a request fits.
""",
    ),
    (
        "code",
        CONNECT
        + """
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
""",
    ),
    (
        "code",
        """
print("\\n".join(lines))
print()
for e in session.events.of_type(RecoveryEvent):
    if e.outcome == "recovered":
        print(f"level {e.level} recovered: the {format_size(e.bytes_before)} request went through")
    else:
        print(f"level {e.level} {e.outcome:<9} after {e.failure_kind}: history {format_size(e.bytes_before):>9} -> "
              f"{format_size(e.bytes_after):>9}  ({e.messages_before} -> {e.messages_after} msgs)")
""",
    ),
    (
        "md",
        """
## When the ladder runs out, and when it must not start *(simulator only)*

If every rung fails, `RecoveryFailedError` carries a detached copy of the history so you can
continue elsewhere. A real authentication error never climbs the ladder at all.
""",
    ),
    (
        "code",
        """
from contextkit import AuthenticationFailed, RecoveryFailedError

gw.configure(max_body=None)
gw.fail_next("waf403", times=12)  # more rejections than the session has rungs (summaries are requests too)
try:
    session.send("One more question.")
except RecoveryFailedError as err:
    print("RecoveryFailedError:", str(err)[:160], "...")
    print("history handed back:", len(err.history), "messages")
gw.reset(context_window=64_000)  # clear the remaining faults

gw.fail_next("auth401")
try:
    session.send("And another.")
except AuthenticationFailed as err:
    print("AuthenticationFailed:", err)
gw.stop()
""",
    ),
]

# --------------------------------------------------------------------------------------------------
NB3 = [
    (
        "md",
        """
# 3 · Microcompact and recall

In an agent session most of the budget goes to **tool output**: whole files, logs, JSON dumps.
Their value decays fast — the model needed the file while it was editing it, not twelve turns
later. Microcompact ages old tool results *without any LLM call*:

* **2+ turns old** and at least 3,000 chars → a head + tail **preview** with a banner;
* **4+ turns old** → a **one-line stub**: `[Old tool result cleared - L lines, C chars, TYPE; tool path:lines]`.

Two rules make this safe:

1. **Archive before you drop.** The original goes to the archive first; the stub ends with
   `[full content recoverable via @recall <<ccr:KEY>>]`.
2. **The pointer steers recall.** The stub says *what* was there (tool, path, line range, type,
   size) so the model can decide whether it needs it back — and how to ask.
"""
        + SWITCH_NOTE,
    ),
    ("code", SETUP),
    (
        "md",
        """
## Ageing tool results

An agent read six files, one per turn. Age is counted in assistant turns since the result arrived.
""",
    ),
    (
        "code",
        """
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
""",
    ),
    (
        "code",
        """
# NBVAL_CHECK_OUTPUT
turns = assistant_turns(history)
print(f"{'path':<18}{'age':>4}{'before':>10}{'after':>9}  now")
for before, after, tag in zip(history, aged, turns):
    if before.role == "tool":
        state = "one-liner" if after.content.startswith("[Old tool") else "preview" if after is not before else "full"
        print(f"{before.origin.path:<18}{turns[-1] - tag:>4}{len(before.content):>10,}{len(after.content):>9,}  {state}")
""",
    ),
    (
        "md",
        """
What the model now reads instead of a 27 KB file — a pointer, not a loss:
""",
    ),
    (
        "code",
        """
one_liner = next(m for m in aged if m.role == "tool" and m.content.startswith("[Old tool"))
preview = next(m for m, b in zip(aged, history) if m.role == "tool" and "omitted from old tool result" in m.content)
print(one_liner.content)
print("-" * 80)
print(preview.content[:300], "\\n   ...\\n", preview.content[-300:])
""",
    ),
    (
        "code",
        """
# NBVAL_CHECK_OUTPUT
from contextkit.markers import extract_keys

key = extract_keys(one_liner.content)[0]
original = archive.get(key)
print("archived entries:", len(archive))
print("byte-exact original behind the stub:", original == history[aged.index(one_liner)].content)
entry = archive.entry(key)
print("entry:", entry.kind, entry.origin, format_size(entry.bytes))
""",
    ),
    (
        "md",
        """
## Recall in a running session

Same history, now inside a session (against the simulator). The model gets the `recall` tool
automatically whenever the session has an archive. Here the scripted model calls it for the first
stub; you can also type `@recall <<ccr:KEY>>` in a user message. Recall output is marked
`is_recall` and `preserve_verbatim`: it is never re-compressed or re-archived.
""",
    ),
    (
        "code",
        """
from contextkit import Limits, Session
from contextkit.markers import marker
from contextkit.sim import GatewaySimulator


def connection(gw):
    if PROVIDER:
        return PROVIDER, {}
    return gw.model, {"api_base": gw.api_base, "api_key": "sim-key"}


gw = GatewaySimulator(context_window=64_000).start()
model, kwargs = connection(gw)
session = Session(model, **kwargs, system="You are a coding agent.", limits=Limits(context_window=64_000),
                  archive=Archive.in_memory(session_id="recall"), session_id="recall", status=print)
session.add_messages(history[1:])  # Message values keep their tool/path/line metadata
reply = session.send("Anything else to read?")
stub = next(m for m in session.history if m.role == "tool" and m.content.startswith("[Old tool"))
key = extract_keys(stub.content)[0]
print(stub.content)
""",
    ),
    (
        "code",
        """
reply = session.send(f"Look at that file again. [[tool:recall {json.dumps({'key': marker(key)})}]]")
recalled = [m for m in session.history if m.is_recall][-1]
print("model:", reply.text)
print("recall result:", format_size(len(recalled.content)), "is_recall =", recalled.is_recall,
      "preserve_verbatim =", recalled.preserve_verbatim)
print(recalled.content[:200])
""",
    ),
    (
        "code",
        """
reply = session.send(f"And compare it with @recall {marker(key)} please.")
inline = [m for m in session.history if m.role == "user"][-1]
print("the session expanded @recall into a user message:", inline.is_recall, "-", format_size(len(inline.content)))
print(session.archive.recall("<<ccr:0000000000000000>>").text)  # a wrong key is an answer, never an exception
""",
    ),
    (
        "md",
        """
## The archive browser

Entries (key, kind, origin, size), a search box backed by `recall_context`, the original content
of the selected entry and **which history message still points at it**.
""",
    ),
    (
        "code",
        """
from contextkit.widgets import ArchiveBrowser

browser = ArchiveBrowser(session)
browser.select(key)
print("selected", browser.selected_key, "- pointed at by history message(s)", list(browser.stub_indices))
browser
""",
    ),
    (
        "md",
        """
## `recall_context`: a bounded search over everything archived

When the model (or you) does not know the key, `recall_context(query, max_items, max_tokens)`
searches the archive (SQLite FTS5, BM25 ranking) and returns a **bounded** context pack. The bounds
matter: recall must not blow the budget it exists to protect. When items are dropped or shortened
to fit, a `Budget:` line says so, and the structured form reports `used_items`/`used_tokens`.
""",
    ),
    (
        "code",
        """
for max_items, max_tokens in [(8, 1500), (3, 300)]:
    pack = session.archive.recall_context_result("checksum timeout store", max_items=max_items, max_tokens=max_tokens)
    print(f"max_items={max_items}, max_tokens={max_tokens}: matched {pack.matched}, used {pack.used_items} items, "
          f"{pack.used_tokens} tokens, dropped {pack.dropped}, shortened {pack.shortened}")
print()
print(session.archive.recall_context("checksum timeout store", max_items=3, max_tokens=300)[:700])
""",
    ),
    (
        "code",
        """
# NBVAL_CHECK_OUTPUT
from contextkit import RecallValidationError

print(session.archive.recall_context("no such words anywhere zzzz"))
try:
    session.archive.recall_context("checksum", max_items=0)
except RecallValidationError as err:
    print("RecallValidationError:", err)
""",
    ),
    ("code", "browser.close()\ngw.stop()"),
]

# --------------------------------------------------------------------------------------------------
NB4 = [
    (
        "md",
        """
# 4 · Gateway caps

Token windows are documented; **body-size caps are not**. nginx defaults to 1 MB, API gateways
and WAFs to anything from 128 KB to 10 MB, and they answer with a 413, an HTML error page, a
Cloudflare 403, or simply by dropping the connection. No mainstream framework budgets request
*bytes* — so a session can be rejected while its token count looks perfectly fine.

contextkit treats the cap as a budget like the window:

* **pre-flight** — with a known cap, a request above 85% of it is compacted *before* it is sent;
* **learned cap** — a rejection of known size sets the cap to ¾ of it, for this session only;
* **floor diagnostic** — when the system prompt and tool schemas alone cannot fit, fail fast with
  an actionable error instead of burning the recovery ladder on identical payloads;
* **one-time notice** — after a payload rejection the model is told, once, to prefer targeted reads.
"""
        + SWITCH_NOTE,
    ),
    ("code", SETUP),
    (
        "code",
        CONNECT
        + """
from contextkit import Limits, PayloadFloorError, Session, format_size
from contextkit.archive import Archive
from contextkit.events import CapEvent, NoticeEvent
from contextkit.sim import GatewaySimulator, Workspace
from contextkit.state import PAYLOAD_NOTICE_MARKER

gw = GatewaySimulator(context_window=128_000, max_body="96KB", reject_with="413").start()
model, kwargs = connection(gw)
logs = Workspace(seed=3, target_bytes=6_000)
""",
    ),
    (
        "md",
        """
## Pre-flight: a known cap

If you know your gateway's limit, say so: `Limits(max_payload="64KB")` or
`CONTEXTKIT_MAX_PAYLOAD=64KB`. Below 70% of the cap nothing happens (compress only under
pressure). A request that would land above **85%** is compacted first, to a tighter 40% budget,
with a notice that says why.
""",
    ),
    (
        "code",
        """
notes = []
session = Session(model, **kwargs, system="Be brief.", limits=Limits(context_window=128_000, max_payload="64KB"),
                  archive=Archive.in_memory(session_id="preflight"), session_id="preflight", status=notes.append)
for i in range(3):
    session.send(f"turn {i}: a log excerpt\\n" + logs.tail_log(60).content)
print("before the paste:", format_size(session.measure().bytes))
session.send("And the full trace (please keep it):\\n" + logs.tail_log(320).content)
print("after the paste :", format_size(session.measure().bytes), "- requests rejected:",
      sum(not r.accepted for r in gw.requests))
print()
print("\\n".join(notes))
""",
    ),
    (
        "md",
        """
## Learned cap: an unknown cap *(simulator only)*

Now nobody told the session. The gateway rejects a 97 KB request; the failure carries the size
we sent (we always know the body), so the session sets its cap to ¾ of it and recovers. The cap
only ever tightens, and it belongs to this session: other sessions in the process never see it.
""",
    ),
    (
        "code",
        """
notes = []
sim_model, sim_kwargs = gw.model, {"api_base": gw.api_base, "api_key": "sim-key"}  # the gateway is the subject
learner = Session(sim_model, **sim_kwargs, system="Be brief.", limits=Limits(context_window=128_000),
                  archive=Archive.in_memory(session_id="learned"), session_id="learned", status=notes.append)
for i in range(3):
    learner.send(f"turn {i}: log\\n" + logs.tail_log(300).content)
print("\\n".join(notes))
""",
    ),
    (
        "code",
        """
# NBVAL_CHECK_OUTPUT
for e in learner.events.of_type(CapEvent):
    print(f"cap {e.source}: rejected {format_size(e.rejected_bytes)} -> cap {format_size(e.cap_bytes)} (3/4)")
print("this session:", format_size(learner.payload_cap), learner.cap_source)
print("the other session keeps its configured cap:", format_size(session.payload_cap), session.cap_source)
""",
    ),
    (
        "md",
        """
## The one-time notice *(simulator only)*

After the payload recovery, one user message was inserted asking the model to prefer targeted
reads and incremental summaries. It is added **once per session** — contextkit looks for an
existing copy anywhere, including inside a summary — so a second rejection does not stack notices.
""",
    ),
    (
        "code",
        """
def notices(s):
    return sum(PAYLOAD_NOTICE_MARKER in m.content for m in s.history)


print("notices after the first recovery:", notices(learner))
gw.fail_next("413")  # simulator: one more gateway rejection, whatever the size
learner.send("Another big paste:\\n" + Workspace(seed=4, target_bytes=6_000).tail_log(1_500).content)
print("notices after a second payload recovery:", notices(learner), "- recoveries:", learner.stats.recoveries_by_level)
print(next(m.content for m in learner.history if PAYLOAD_NOTICE_MARKER in m.content)[:240], "...")
""",
    ),
    (
        "md",
        """
## The floor: when no compaction can help *(simulator only)*

The system prompt and the tool schemas are never compacted — they are the *floor* of every
request. Behind a 16 KB gateway, a 20 KB system prompt can never fit. Instead of climbing three
rungs with identical payloads, the session fails fast and names both sizes and what to shrink.
""",
    ),
    (
        "code",
        """
gw.configure(max_body="16KB")
rules = "You must follow these rules.\\n" + Workspace(seed=9, target_bytes=20_000).read_file("docs/rules.md").content
heavy = Session(sim_model, **sim_kwargs, system=rules, limits=Limits(context_window=128_000),
                archive=Archive.in_memory(session_id="floor"), session_id="floor", status=print)
print("system prompt:", format_size(len(rules.encode())))
try:
    heavy.send("hi")
except PayloadFloorError as err:
    print()
    print("PayloadFloorError:", err)
    print("floor:", format_size(err.base_bytes), "- rejected:", format_size(err.rejected_bytes))
""",
    ),
    (
        "md",
        """
A system prompt at or above ¾ of a rejected size only gets a **warning**: it still fits, but
leaves little room for the conversation.

## Summary of the notices this notebook produced
""",
    ),
    (
        "code",
        """
for s in (session, learner, heavy):
    codes = [e.code for e in s.events.of_type(NoticeEvent)]
    print(f"{s.session_id:<10}", ", ".join(dict.fromkeys(codes)))
gw.stop()
""",
    ),
]

# --------------------------------------------------------------------------------------------------
NB5 = [
    (
        "md",
        """
# 5 · Per-level outcomes: what each mechanism costs and saves

Compaction is not free. A Level-2 summary costs an LLM call and loses detail; Level-3 truncation
loses whole turns (recallable, but no longer in view); microcompact rewrites old messages, which
breaks the provider's prompt cache. To choose settings you need numbers, not intuition.

This notebook runs a **small strategy sweep** — the same seeded agent workload under contextkit
and under the usual baselines (no management, a sliding window) behind two gateways — then turns
every event into **polars** frames and **altair** charts (rendered offline as SVG).
"""
        + SWITCH_NOTE
        + """
The sweep always runs on the simulator: it needs identical, seeded conversations for every strategy.
""",
    ),
    ("code", SETUP),
    (
        "code",
        """
from concurrent.futures import ThreadPoolExecutor

import polars as pl

from contextkit.analysis import enable_offline_renderer, frames, level_outcomes
from contextkit.experiments import GatewaySpec, run_sweep, summarize
from contextkit.experiments.summary import format_table

enable_offline_renderer("svg")  # static SVG through vl-convert: no CDN, works on Binder and offline
_ = pl.Config.set_tbl_cols(14), pl.Config.set_tbl_width_chars(160)
""",
    ),
    (
        "md",
        """
## The sweep

Three strategies × two gateways × one seed, 10 agent turns each; every run starts its own simulator.
A thread pool keeps it inside a notebook kernel (pass a `dask.distributed` client's executor for
big sweeps).
""",
    ),
    (
        "code",
        """
gateways = [
    GatewaySpec(),  # 32k-token window behind a 128 KB Cloudflare-style gateway
    GatewaySpec(name="48KB-413", context_window=16_000, max_body="48KB", reject_with="413"),
]
sweep_events = []
with ThreadPoolExecutor(max_workers=2) as pool:
    results = run_sweep(["contextkit", "none", "sliding-window"], gateways, seeds=[0], turns=10,
                        executor=pool, progress=False, events=sweep_events)
print(format_table(summarize(results)))
""",
    ),
    (
        "code",
        """
# NBVAL_CHECK_OUTPUT
for row in results.select("strategy", "gateway", "completed", "turns_completed", "rejected").iter_rows():
    print(*row)
""",
    ),
    (
        "md",
        """
Read the table with the essay's questions in mind:

* **complete** — did the agent get all its turns? Without management it does not: the history
  outgrows the gateway and the first rejection ends the run.
* **tokens/none** — what it sent compared with no management (lower is cheaper).
* **prefix reuse** — how much of each request repeats the previous one byte for byte (what a
  provider prompt cache can reuse). Rewriting old messages costs reuse; notebook 6 goes deeper.
* **recoverable** — share of all tool outputs still in context *or recallable from the archive*.
  A sliding window forgets; contextkit archives before it drops.
""",
    ),
    (
        "md",
        """
## One session under real pressure

The sweep's gateways are generous enough that contextkit never needed its recovery ladder. To see
every level fire, add the tour's story: tool outputs up to 60 KB and a 280 KB paste behind a
128 KB gateway the session does not know about.
""",
    ),
    (
        "code",
        """
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
    pressure.send("The full crash log:\\n" + ws.tail_log(2_600).content)
    pressure.compact("keep every file path")
    pressure.send("What is left to do?")
print(pressure.stats.recoveries_by_level, "compactions:", pressure.stats.compactions)
""",
    ),
    (
        "md",
        """
## Events → polars frames

`frames(events)` gives three frames with fixed schemas: one row per **request attempt**, per
**compaction phase**, per **recovery step**. Events from many sessions mix freely (`session_id`).
""",
    ),
    (
        "code",
        """
f = frames([*sweep_events, *pressure.events])
print("requests", f.requests.shape, "| compactions", f.compactions.shape, "| recoveries", f.recoveries.shape)
f.requests.select("session_id", "request_index", "bytes", "tokens", "outcome", "failure_kind", "level",
                  "prefix_share").filter(pl.col("session_id") == "pressure").tail(8)
""",
    ),
    (
        "code",
        """
outcomes = level_outcomes(f)
outcomes.select("label", "fired", "succeeded", "success_rate", "mean_bytes_freed", "mean_latency_s",
                "identifier_retention")
""",
    ),
    (
        "md",
        """
## Charts

Per level: how often it fired, how often it worked, how much it freed, how long it took, what it
cost. Then the pressure session's request size against the cap it learned, with compactions
marked, and the identifier retention of summaries (paths, numbers, commands that survived).
""",
    ),
    (
        "code",
        """
from contextkit.analysis import history_vs_cap_chart, level_outcomes_chart, retention_chart

level_outcomes_chart(outcomes)
""",
    ),
    (
        "code",
        """
pressure_frames = frames(pressure.events)
history_vs_cap_chart(pressure_frames)
""",
    ),
    ("code", "retention_chart(f)"),
    (
        "md",
        """
**Saving** a chart for a report or slides: `contextkit.analysis.save_chart(chart, "levels.svg")`
(or `.png`) — offline, through vl-convert. The README's chart is produced exactly this way by the
test suite.
""",
    ),
]

# --------------------------------------------------------------------------------------------------
NB6 = [
    (
        "md",
        """
# 6 · Context assembly and the prefix cache

Providers cache the **longest byte-identical prefix** of consecutive requests: a cached prefix is
cheaper (often 50–90% off) and faster. Two consequences for how a prompt should be built:

1. **Order blocks stable → volatile.** Persona and rules never change; project memory changes
   rarely; the conversation grows at the end; the clock, a retrieved snippet or a scratchpad change
   on every call and belong *last*. One volatile byte early in the prompt invalidates everything
   after it.
2. **Every block must earn its place.** Ask of each one: *when does this block NOT enter?* A block
   with no answer is paid for on every call.

And a third, about compaction: rewriting an *old* message (a microcompact stub, a summary) changes
the prefix from that point on. That is the price of compressing — one more reason to compress
only under pressure.
"""
        + SWITCH_NOTE,
    ),
    ("code", SETUP),
    (
        "md",
        """
## Blocks with entry conditions

`contextkit.assembly.Block(name, render, stability=…, skip_when=…)`: `render` is text or a function
of the call's context; `stability` is an explicit rank (0 = never changes); `skip_when` answers
*when does this block NOT enter?* with a reason.
""",
    ),
    (
        "code",
        """
from contextkit import Message
from contextkit.assembly import Assembler, Block

blocks = [
    Block("clock", lambda c: f"Current time: {c['now']}", stability=9, role="user",
          description="volatile: changes every call"),
    Block("persona", "You are a careful coding agent for the inventory service.", stability=0),
    Block("rules", "Prefer targeted reads with line ranges. Never invent file contents.", stability=0),
    Block("memory", lambda c: "Project notes:\\n" + c["notes"], stability=1,
          skip_when=lambda c: None if c.get("notes") else "no project notes yet"),
    Block("tools-help", "Use grep before reading whole files.", stability=2,
          skip_when=lambda c: None if c.get("tools") else "no tools registered"),
    Block("history", lambda c: c["history"], stability=5),
    Block("retrieved", lambda c: c.get("snippet"), stability=8, role="user",
          skip_when=lambda c: None if c.get("snippet") else "nothing retrieved for this question"),
]
assembler = Assembler(blocks)
print("layout:", " -> ".join(b.name for b in assembler.layout))
""",
    ),
    (
        "code",
        """
# NBVAL_CHECK_OUTPUT
history = [Message.user("Where is the retry budget configured?"),
           Message.assistant("In src/app/net.py, RETRY_BUDGET = 3.")]
first = assembler.assemble(now="10:00", history=history, tools=["grep", "read_file"])
print(first.log)
""",
    ),
    (
        "md",
        """
The log is per call. Next call: the user added project notes and a snippet was retrieved — two
blocks enter that did not before, and the log says what each costs in tokens.
""",
    ),
    (
        "code",
        """
# NBVAL_CHECK_OUTPUT
history = [*history, Message.user("And the timeout?")]
second = assembler.assemble(now="10:01", history=history, tools=["grep", "read_file"],
                            notes="net.py owns retries; store.py owns timeouts", snippet="store.py:88 TIMEOUT_S = 30")
print(second.log)
print()
for m in second.messages:
    print(f"{m.role:<9} {m.content[:70]!r}")
""",
    ),
    (
        "md",
        """
## Stable → volatile keeps the cache; volatile first throws it away

Compare two consecutive calls byte by byte with `contextkit.prefix.shared_prefix` — the same probe
the session runs on every request (`RequestEvent.prefix_share`).
""",
    ),
    (
        "code",
        """
# NBVAL_CHECK_OUTPUT
from contextkit.prefix import shared_prefix
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
""",
    ),
    (
        "md",
        """
## What the model received: a per-call trace

`contextkit.trace.trace_request` lists every piece of a request with its size, its origin (system
block, user, tool result with path and lines, summary, stub with marker, recall output, notice) and
what a mechanism did to it. It stores **no content by default** — hashes and sizes only — so traces
can be kept and shared; pass `include_content=True` to keep the text.
""",
    ),
    (
        "code",
        """
# NBVAL_CHECK_OUTPUT
from contextkit.trace import trace_request

trace = trace_request(second.messages, blocks=second.log, model="openai/gpt-4o-mini")
print(trace)
print("stored fields of one piece:", sorted(trace.pieces[0].to_dict()))
""",
    ),
    (
        "md",
        """
## What compaction does to the cached prefix

Now a real session (simulator by default): an agent reads a file per turn. Every turn makes two
requests — the user's question, then the tool result. Watch `prefix_share` per request: the second
request of a turn appends to the first and reuses most of it; the first request of the next turn
comes *after microcompact rewrote an older tool result*, so the shared prefix stops at that message.
A manual compaction near the end rewrites almost everything.
""",
    ),
    (
        "code",
        """
import json

from contextkit import Limits, Session
from contextkit.archive import Archive
from contextkit.events import RequestEvent
from contextkit.sim import GatewaySimulator, Workspace


def connection(gw):
    if PROVIDER:
        return PROVIDER, {}
    return gw.model, {"api_base": gw.api_base, "api_key": "sim-key"}


gw = GatewaySimulator(context_window=32_000).start()
model, kwargs = connection(gw)
ws = Workspace(seed=2, target_bytes=5_000)
lines = []
session = Session(model, **kwargs, system="You are a careful coding agent.", limits=Limits(context_window=32_000),
                  archive=Archive.in_memory(session_id="prefix"), session_id="prefix", status=lines.append,
                  tools=list(ws.tools.values()))
for i in range(6):
    session.send(f"Step {i}: read src/m{i}.py [[tool:read_file {json.dumps({'path': f'src/m{i}.py'})}]]")
session.compact("keep every file path")
session.send("What next?")
print("\\n".join(line for line in lines if not line.startswith(("Trim", "Summarizing"))))
""",
    ),
    (
        "code",
        """
print(f"{'request':>7} {'bytes':>7} {'shared':>7}  share")
for i, e in enumerate(session.events.of_type(RequestEvent)):
    share = "-" if e.prefix_share is None else f"{e.prefix_share:.0%}"
    print(f"{i:>7} {e.bytes:>7} {e.prefix_shared_bytes:>7}  {share}")
""",
    ),
    (
        "md",
        """
The append-only requests do not reach 100% here because the probe compares whole bodies and the
tool schemas follow the messages in the body; what matters is the contrast: append ≈ 85–90%,
after a microcompact rewrite ≈ 5–30%, after a full compaction ≈ 0%.

The same view as a chart, from the analysis package:
""",
    ),
    (
        "code",
        """
from contextkit.analysis import enable_offline_renderer, frames, prefix_reuse_chart

enable_offline_renderer("svg")
prefix_reuse_chart(frames(session.events))
""",
    ),
    (
        "md",
        """
And the trace of what the session will send next: the summary that replaced the old turns, the
stubs with their markers, each with its size. `trace_session(session)` is read-only.
""",
    ),
    (
        "code",
        """
from contextkit.trace import trace_session

after = trace_session(session)
print(after)
print("dropped messages behind summaries/notices:", after.dropped_messages)
print("archive keys the model can recall:", len(after.archive_keys))
gw.stop()
""",
    ),
]

NOTEBOOKS: dict[str, list[tuple[str, str]]] = {
    "01_tour.ipynb": NB1,
    "02_recovery_ladder.ipynb": NB2,
    "03_microcompact_and_recall.ipynb": NB3,
    "04_gateway_caps.ipynb": NB4,
    "05_per_level_outcomes.ipynb": NB5,
    "06_context_assembly.ipynb": NB6,
}
