"""The simulator's scripted model: deterministic replies, tool calls, long answers, summaries.

Input is a wire-neutral ``Conversation`` (the server converts OpenAI and Anthropic requests to
it); output is a ``ScriptedReply``. Nothing here keeps state between requests: every decision is derived
from the request itself, so any client (sync, async, a notebook, another process) can drive it.

Directives in the last user message:

* ``[[tool:NAME {json args}]]`` → call tool NAME when the request offers it.
* ``[[needle:ID {"cue": ..., "tool": ...}]]`` → answer a needle question from the request only,
  recalling archived content when a retrieval tool and a marker are there (``sim.needles``).
* ``[[long:N]]`` → a deterministic reply of about N tokens.

A request that ends with a continuation prompt ("Your response was cut off ...", after a length
cut or an interrupted stream) is answered with the rest of the reply the model gives without the
trailing assistant partials, from where those partials stopped.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from contextkit.sim.needles import needle_reply
from contextkit.sim.workloads import agent_steps

SUMMARY_TRIGGER = "CONVERSATION SEGMENT TO EXTRACT FROM"
# other libraries' summarization prompts the extractive summarizer answers too (LangChain v1's
# SummarizationMiddleware ends its default prompt with "Messages to summarize:")
PEER_SUMMARY_TRIGGERS = ("Messages to summarize:",)
SUMMARY_TRIGGERS = (SUMMARY_TRIGGER, *PEER_SUMMARY_TRIGGERS)
CONTINUATION_TRIGGER = "Your response was cut off"
NOTICE_TRIGGER = "[SYSTEM NOTICE"
SUMMARY_SECTIONS = (
    "## Files Read",
    "## Files Modified",
    "## Commands Executed",
    "## Key Decisions",
    "## Errors & Resolutions",
    "## Current Task State",
)

_TOOL_RE = re.compile(r"\[\[tool:([A-Za-z0-9_.-]+)\s*(\{.*?\})?\s*\]\]", re.DOTALL)
_LONG_RE = re.compile(r"\[\[long:(\d+)\]\]")
_DIRECTIVE_RE = re.compile(r"\[\[(?:tool|long):.*?\]\]", re.DOTALL)
_STEP_RE = re.compile(r"\bStep (\d+)/(\d+)\b")
_CALL_ID_STEP_RE = re.compile(r"^call_s(\d+)_")


@dataclass(frozen=True, slots=True)
class SimCall:
    id: str
    name: str
    arguments: str = "{}"


@dataclass(frozen=True, slots=True)
class SimMessage:
    """One message in wire-neutral form (Anthropic tool_result blocks become role ``tool``)."""

    role: str
    text: str = ""
    tool_calls: tuple[SimCall, ...] = ()
    tool_call_id: str | None = None
    images: int = 0


@dataclass(frozen=True, slots=True)
class Conversation:
    messages: tuple[SimMessage, ...]
    tools: tuple[str, ...] = ()

    @property
    def last_user(self) -> SimMessage | None:
        for m in reversed(self.messages):
            if m.role == "user":
                return m
        return None

    @property
    def is_summary(self) -> bool:
        last = self.last_user
        return last is not None and any(t in last.text for t in SUMMARY_TRIGGERS)


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    text: str = ""
    tool_calls: tuple[SimCall, ...] = ()
    finish: str = "stop"  # "stop" | "tool_calls" | "length"


# agent script -------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentScript:
    """A fixed plan of tool calls, one per turn, then a final answer.

    Stateless: the current step is the largest of (tool results in the request, the step encoded
    in tool-call ids ``call_s<N>_...``, the ``Step N/M`` notes in assistant text) so it keeps
    advancing even after compaction removed old tool messages.
    """

    steps: tuple[tuple[str, dict[str, Any]], ...]
    final_text: str = "All steps done."

    @classmethod
    def seeded(cls, seed: int = 0, steps: int = 8, *, files: int = 6) -> AgentScript:
        return cls(tuple(agent_steps(seed, steps, files=files)))

    def step_index(self, conv: Conversation) -> int:
        done = sum(1 for m in conv.messages if m.role == "tool")
        for m in conv.messages:
            for call in m.tool_calls:
                hit = _CALL_ID_STEP_RE.match(call.id)
                if hit:
                    done = max(done, int(hit.group(1)) + 1)
            if m.tool_call_id:
                hit = _CALL_ID_STEP_RE.match(m.tool_call_id)
                if hit:
                    done = max(done, int(hit.group(1)) + 1)
            for s in _STEP_RE.finditer(m.text):
                if int(s.group(2)) == len(self.steps):
                    done = max(done, int(s.group(1)))
        return done

    def next_reply(self, conv: Conversation) -> ScriptedReply:
        i = self.step_index(conv)
        if i >= len(self.steps):
            return ScriptedReply(f"{self.final_text} Completed {len(self.steps)} steps.")
        name, args = self.steps[i]
        call = SimCall(f"call_s{i}_{_short_hash(conv, i)}", name, json.dumps(args))
        note = f"Step {i + 1}/{len(self.steps)}: {name} {_args_note(args)}"
        return ScriptedReply(note, (call,), "tool_calls")


def _args_note(args: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in args.items())


def _short_hash(conv: Conversation, salt: object) -> str:
    seed = f"{len(conv.messages)}|{salt}|{conv.messages[0].text[:64] if conv.messages else ''}"
    return hashlib.sha256(seed.encode()).hexdigest()[:8]


# deterministic long text ------------------------------------------------------------------------

_LONG_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "sigma",
    "omega",
]


def long_text(n_tokens: int) -> str:
    """Deterministic prose of roughly ``n_tokens`` tokens (numbered sentences, ~12 tokens each)."""
    out = []
    for i in range(max(1, n_tokens // 12 + 1)):
        w = _LONG_WORDS
        out.append(f"Sentence {i + 1} says {w[i % 13]} follows {w[(i * 7) % 13]} and {w[(i * 5 + 3) % 13]}.")
    return " ".join(out)


def _rest_of(full: str, done: str) -> str:
    """What follows ``done`` in ``full`` (found by its tail when the partials were reworded)."""
    if full.startswith(done):
        return full[len(done) :]
    tail = done.rstrip()[-40:]
    at = full.find(tail) if tail else -1
    return full[at + len(tail) :] if at >= 0 else full


# the model -------------------------------------------------------------------------------------


@dataclass
class ScriptedModel:
    """Deterministic replies; ``agent`` (an ``AgentScript``) drives tool-using workloads."""

    agent: AgentScript | None = None

    def reply(self, conv: Conversation) -> ScriptedReply:
        if conv.is_summary:
            return ScriptedReply(extractive_summary(conv.last_user.text if conv.last_user else ""))
        answer = needle_reply(conv)
        if answer is not None:
            if answer.call is None:
                return ScriptedReply(answer.text)
            call = SimCall(f"call_{_short_hash(conv, 'needle')}", *answer.call)
            return ScriptedReply(answer.text, (call,), "tool_calls")
        last = conv.messages[-1] if conv.messages else None
        if last is not None and last.role == "user":
            directive = self._directive_reply(conv, last)
            if directive is not None:
                return directive
        if self.agent is not None and conv.tools:
            return self.agent.next_reply(conv)
        if last is not None and last.role == "tool":
            return ScriptedReply(_tool_result_note(conv, last))
        if last is not None and last.role == "assistant":
            return ScriptedReply(f"Reply {_turn(conv)}: continuing.")
        return ScriptedReply(f"Reply {_turn(conv)}: {_echo(last.text if last else '')}")

    def _directive_reply(self, conv: Conversation, last: SimMessage) -> ScriptedReply | None:
        if CONTINUATION_TRIGGER in last.text:
            return self._continue(conv)
        hit = _LONG_RE.search(last.text)
        if hit:
            return ScriptedReply(long_text(int(hit.group(1))))
        tool = _TOOL_RE.search(last.text)
        if tool and tool.group(1) in conv.tools:
            args = tool.group(2) or "{}"
            try:
                args = json.dumps(json.loads(args))
            except ValueError:
                return ScriptedReply(f"Reply {_turn(conv)}: the tool directive arguments are not valid JSON: {args}")
            call = SimCall(f"call_{_short_hash(conv, tool.group(1))}", tool.group(1), args)
            return ScriptedReply(f"Calling {tool.group(1)}.", (call,), "tool_calls")
        return None

    def _continue(self, conv: Conversation) -> ScriptedReply:
        """The rest of the reply to ``conv`` without its trailing (partial, [notice], continuation) tail."""
        msgs = list(conv.messages)
        partial: list[str] = []
        while msgs and msgs[-1].role == "user" and CONTINUATION_TRIGGER in msgs[-1].text:
            msgs.pop()
            while msgs and msgs[-1].role == "user" and NOTICE_TRIGGER in msgs[-1].text:
                msgs.pop()  # a recovery's one-time notice lands before the newest user message
            if msgs and msgs[-1].role == "assistant" and not msgs[-1].tool_calls:
                partial.insert(0, msgs.pop().text)
        if not partial:
            return ScriptedReply(f"Reply {_turn(conv)}: continuing.")
        base = self.reply(Conversation(tuple(msgs), conv.tools))
        return ScriptedReply(_rest_of(base.text, "".join(partial)), base.tool_calls, base.finish)


def _turn(conv: Conversation) -> int:
    return sum(1 for m in conv.messages if m.role == "assistant") + 1


def _echo(text: str, limit: int = 60) -> str:
    clean = " ".join(_DIRECTIVE_RE.sub("", text).split())
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


def _tool_result_note(conv: Conversation, result: SimMessage) -> str:
    name = "tool"
    for m in conv.messages:
        for call in m.tool_calls:
            if call.id == result.tool_call_id:
                name = call.name
    lines = result.text.count("\n") + 1 if result.text else 0
    return f"Reply {_turn(conv)}: {name} returned {len(result.text)} chars ({lines} lines)."


# extractive summary -----------------------------------------------------------------------------

_PATH_RE = re.compile(
    r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+\.(?:py|md|json|log|txt|toml|yaml|yml|js|ts|go|rs|sh|cfg|ini|c|h))\b"
)
_CALL_RE = re.compile(r"\[tool_calls: (.*?)\]")
_ROLE_RE = re.compile(r"^\[(system|user|assistant|tool)\]: ?(.*)$")
_ERROR_RE = re.compile(r"\b(error|failed|exception|traceback)\b", re.IGNORECASE)
_DECIDE_RE = re.compile(r"\b(decided|decision|we will|i will|let's|plan)\b", re.IGNORECASE)
_MODIFY_RE = re.compile(r"\b(modified|edited|wrote|patched|changed|updated)\b", re.IGNORECASE)


def extractive_summary(prompt: str) -> str:
    """A structured summary built only from facts found in the segment (paths, calls, errors)."""
    trigger = next((t for t in SUMMARY_TRIGGERS if t in prompt), SUMMARY_TRIGGER)
    segment = prompt.split(trigger, 1)[-1].lstrip(":\n ")
    lines = segment.splitlines()
    calls = _dedup(c for hit in _CALL_RE.finditer(segment) for c in _split_calls(hit.group(1)))
    read = _dedup(p for c in calls if c.startswith("read_file") for p in _PATH_RE.findall(c))
    modified = _dedup(p for ln in lines if _MODIFY_RE.search(ln) for p in _PATH_RE.findall(ln))
    others = _dedup(p for p in _PATH_RE.findall(segment) if p not in read and p not in modified)
    errors = _dedup(ln.strip()[:160] for ln in lines if _ERROR_RE.search(ln))[:8]
    decisions = _dedup(ln.strip()[:160] for ln in lines if _DECIDE_RE.search(ln))[:6]
    roles = [m.group(1) for ln in lines if (m := _ROLE_RE.match(ln))]
    users = [m.group(2) for ln in lines if (m := _ROLE_RE.match(ln)) and m.group(1) == "user"]
    steps = [m.group(0) for m in _STEP_RE.finditer(segment)]
    out: list[str] = []
    if read or others:
        out += ["## Files Read"] + [f"- {p}" for p in read] + [f"- {p} (mentioned)" for p in others[:20]]
    if modified:
        out += ["## Files Modified"] + [f"- {p}" for p in modified]
    if calls:
        out += ["## Commands Executed"] + [f"- {c[:200]}" for c in calls[:40]]
    if decisions:
        out += ["## Key Decisions"] + [f"- {d}" for d in decisions]
    if errors:
        out += ["## Errors & Resolutions"] + [f"- {e}" for e in errors]
    out += ["## Current Task State"]
    # counts only, no sizes: a number the segment does not contain is an invented fact to the quality gate
    out.append(f"- Segment: {len(roles)} messages with {len(calls)} tool calls.")
    if steps:
        out.append(f"- Done: {steps[-1]}")
    if users:
        out.append(f"- Last request: {_echo(users[-1], 160)}")
    out.append("- Pending: continue from the most recent request in the conversation.")
    return "\n".join(out)


def _split_calls(text: str) -> list[str]:
    """``a({...}), b({...})`` → ``["a({...})", "b({...})"]`` (commas inside parentheses kept)."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur:
        parts.append("".join(cur).strip())
    return [p for p in parts if p]


def _dedup(items: Any) -> list[str]:
    return list(dict.fromkeys(items))
