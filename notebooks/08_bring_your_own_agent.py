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
# # 8 · Bring your own agent
#
# Your agent already has a loop: a LangChain agent, a plain OpenAI SDK client, an IDE assistant.
# contextkit can sit under it instead of owning the conversation. Two ways in, both against the
# bundled simulator behind a **64 KB gateway that answers oversize bodies with a Cloudflare-style 403
# page** and a 32k-token window:
#
# * **`contextkit proxy`** — any client points its base URL at it (here the `openai` SDK, which
#   resends its whole history every turn);
# * **`ContextkitMiddleware`** — a LangChain v1 `create_agent` middleware.
#
# Each turn pastes a different 6-10 KB document; twelve of them are about 100 KB, well past the cap.
# See the docs page *Bring your own agent* for the litellm drop-in, the OpenAI Agents SDK and pydantic-ai.

# %%
import random

import contextkit
from contextkit.display.status import show_status_in_notebook

contextkit.offline()  # this notebook owns its process: nothing is fetched from the network
show_status_in_notebook()

from contextkit.archive import Archive  # noqa: E402
from contextkit.policy.expand import expand_markers  # noqa: E402
from contextkit.sim import GatewaySimulator  # noqa: E402

TURNS = 12


def document(i: int) -> str:
    rnd = random.Random(i)
    words, size = [f"DOC-{i}"], rnd.randint(6_000, 10_000)
    while sum(map(len, words)) + len(words) < size:
        words.append(f"w{i}x{rnd.randint(0, 999_999)}")
    return " ".join(words)


def recoverable(session) -> str:
    text = expand_markers("\n".join(m.content for m in session.history), session.archive)
    return f"{sum(document(i) in text for i in range(TURNS))}/{TURNS} documents recoverable"


gw = GatewaySimulator(max_body="64KB", reject_with="waf403", context_window=32_768).start()

# %% [markdown]
# ## The plain OpenAI SDK, first without contextkit
#
# Straight to the gateway, the client fails as soon as its history passes 64 KB.

# %%
# NBVAL_CHECK_OUTPUT
import openai  # noqa: E402


def chat(client: openai.OpenAI) -> int:
    messages = [{"role": "system", "content": "You read documents."}]
    for i in range(TURNS):
        messages.append({"role": "user", "content": f"Document {i}:\n{document(i)}"})
        try:
            response = client.chat.completions.create(model="sim-model", messages=messages)
        except openai.APIStatusError as exc:
            print(f"turn {i + 1}: HTTP {exc.status_code} from the gateway")
            return i
        messages.append({"role": "assistant", "content": response.choices[0].message.content})
    return TURNS


print("turns completed:", chat(openai.OpenAI(base_url=gw.api_base, api_key="sim-key", max_retries=0)))

# %% [markdown]
# ## The same client through the proxy
#
# `contextkit proxy --upstream URL` in a terminal; here the same server runs in this process
# (`ProxyServer`), bound to loopback. The client changes nothing but its base URL. The proxy
# recognises the conversation by its messages, keeps a managed copy within the limits it learns,
# and archives what it takes out.

# %%
from contextkit.integrations.proxy import ProxyServer  # noqa: E402

gw.clear_log()
proxy = ProxyServer(gw.api_base, archive=Archive.in_memory(session_id="proxy"), status=None).start()
print("OpenAI base URL:", proxy.base_url.replace(str(proxy.port), "PORT"))

# %%
# NBVAL_CHECK_OUTPUT
print("turns completed:", chat(openai.OpenAI(base_url=proxy.base_url, api_key="sim-key", max_retries=0)))
(session,) = proxy.conversations.sessions
print(recoverable(session))
print("gateway refusals:", sum(not r.accepted for r in gw.requests), "of", len(gw.requests), "requests")

# %% [markdown]
# Each managed conversation is a `Session`: the dashboard watches it live while a client runs
# (start the dashboard first, then the client); here it shows the run that just ended.

# %%
from contextkit.widgets import Dashboard  # noqa: E402

Dashboard(session)

# %% [markdown]
# ## A LangChain agent with the middleware
#
# `ContextkitMiddleware` wraps every model call of a `create_agent` agent: the request the model gets
# is the session's, and a refusal is classified, recovered and retried inside the call. The agent's
# own state keeps every message as it was.

# %%
# NBVAL_CHECK_OUTPUT
from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from pydantic import SecretStr  # noqa: E402

from contextkit.integrations.langchain import ContextkitMiddleware  # noqa: E402

middleware = ContextkitMiddleware(gw.model, api_base=gw.api_base, api_key="sim-key", status=None,
                                  archive=Archive.in_memory(session_id="langchain"))  # fmt: skip
model = ChatOpenAI(model="sim-model", base_url=gw.api_base, api_key=SecretStr("sim-key"), max_retries=0)
agent = create_agent(model=model, system_prompt="You read documents.", middleware=[middleware])
messages = []
for i in range(TURNS):
    messages = agent.invoke({"messages": [*messages, HumanMessage(f"Document {i}:\n{document(i)}")]})["messages"]
print("turns completed:", TURNS, "- messages in the agent's state:", len(messages))
print(recoverable(middleware.session))
print("learned cap:", contextkit.format_size(middleware.session.payload_cap))

# %%
proxy.stop()
gw.stop()

# %% [markdown]
# **What to remember:** an agent you did not write gets the same protection through the proxy or the
# middleware: the gateway's refusals teach the session its limit, and every document it removed stays
# recoverable from the archive.
