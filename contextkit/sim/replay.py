"""Recorded agent runs: the trajectory format, and a replay provider that answers from the recording.

A trajectory is an agent's own record of one run in the OpenAI chat wire format (mini-swe-agent's
``*.traj.json``): ``{"info": {...}, "messages": [...]}`` with a ``system`` message, the ``user``
task, then ``assistant`` messages (text, ``tool_calls`` with ids, often ``reasoning_content``) and
the ``tool`` results they caused, later ``user`` messages (the agent's format-error prompts) and a
final ``exit`` record (not a chat role: the exit status, and the exception of a run that ended in
an error). Every assistant message carries ``extra.response.usage`` with the provider's own
``prompt_tokens`` and ``prompt_tokens_details.cached_tokens`` for that step. Unknown fields are
ignored; ``docs/howto/replay.md`` shows how to convert SWE-agent ``.traj`` and OpenHands events.

``ReplayScript`` plays the recorded model behind the simulator's gateway (``SimConfig(agent=...)``):
the request that follows recorded message *p* gets the first recorded assistant message after *p*.
Like ``AgentScript`` it decides from the request alone: *p* is the newest message of the request it
can place in the recording (an assistant message by its tool-call ids or text, a tool result by its
call id, a later user message by its text), so compaction, retries and recall rounds in between do
not shift it. Where the agent's reply was not recorded (a reply that failed to parse is replaced by
the format-error prompt that follows it) the script answers with a tool-less placeholder, which ends
the host's turn; after the last recorded step it answers that the run is over.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextkit.errors import ConfigError
from contextkit.sim.model import Conversation, ScriptedReply, SimCall, SimMessage

__all__ = [
    "END_OF_RUN",
    "UNRECORDED_REPLY",
    "RecordedCall",
    "RecordedMessage",
    "ReplayScript",
    "Served",
    "Trajectory",
    "load_trajectory",
]

UNRECORDED_REPLY = "[replay: the agent's reply here was not recorded (it failed to parse); the next message says why]"
END_OF_RUN = "[replay: the recorded run ends here]"


@dataclass(frozen=True, slots=True)
class RecordedCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class RecordedMessage:
    """One chat message of the recording (``role`` is system, user, assistant or tool)."""

    role: str
    text: str
    calls: tuple[RecordedCall, ...] = ()
    tool_call_id: str | None = None
    reasoning: str = ""
    prompt_tokens: int | None = None  # the provider's count for the request that produced this reply
    cached_tokens: int = 0
    completion_tokens: int = 0

    def wire(self) -> dict[str, Any]:
        """The message as an OpenAI chat message (what the agent sent back to the provider)."""
        out: dict[str, Any] = {"role": self.role, "content": self.text}
        if self.calls:
            out["content"] = self.text or None
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


@dataclass(frozen=True)
class Trajectory:
    """A recorded run: ``messages`` in order (system and task first), the ``exit`` record apart."""

    name: str
    messages: tuple[RecordedMessage, ...]
    model: str = ""
    exit_status: str = ""
    error: str | None = None  # the exception a run that ended in an error stopped with
    tool_schemas: tuple[dict[str, Any], ...] = ()

    @property
    def system(self) -> str:
        return next((m.text for m in self.messages if m.role == "system"), "")

    @property
    def task(self) -> str:
        return next((m.text for m in self.messages if m.role == "user"), "")

    @property
    def steps(self) -> list[int]:
        """Indices (into ``messages``) of the recorded assistant messages: step k is ``steps[k]``."""
        return [i for i, m in enumerate(self.messages) if m.role == "assistant"]

    def request_before(self, step: int) -> list[dict[str, Any]]:
        """The messages the agent sent for step ``step`` (everything before its reply), as wire dicts."""
        return [m.wire() for m in self.messages[: self.steps[step]]]

    def output_for(self, call_id: str) -> str | None:
        """The recorded result of tool call ``call_id`` (None: the run ended before it came back)."""
        return next((m.text for m in self.messages if m.role == "tool" and m.tool_call_id == call_id), None)


MINI_SWE_AGENT_BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Execute a bash command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command to execute"}},
            "required": ["command"],
        },
    },
}


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return str(content)


def _calls(raw: Any) -> tuple[RecordedCall, ...]:
    if isinstance(raw, str):  # some writers keep the list as a JSON string
        try:
            raw = json.loads(raw)
        except ValueError:
            return ()
    out: list[RecordedCall] = []
    for c in raw or []:
        if not isinstance(c, Mapping):
            continue
        fn = c.get("function") or {}
        args = fn.get("arguments")
        out.append(
            RecordedCall(
                str(c.get("id") or f"call_{len(out)}"),
                str(fn.get("name") or "bash"),
                args if isinstance(args, str) else json.dumps(args or {}),
            )
        )
    return tuple(out)


def _usage(extra: Any) -> tuple[int | None, int, int]:
    usage = ((extra or {}).get("response") or {}).get("usage") if isinstance(extra, Mapping) else None
    if not isinstance(usage, Mapping):
        return None, 0, 0
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    prompt = usage.get("prompt_tokens")
    return (
        int(prompt) if isinstance(prompt, int) else None,
        int(cached or usage.get("prompt_cache_hit_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
    )


def parse_trajectory(data: Mapping[str, Any], name: str = "") -> Trajectory:
    """A ``Trajectory`` from a parsed trajectory file (see the module docstring for the format)."""
    raw = data.get("messages") if isinstance(data, Mapping) else None
    if not isinstance(raw, list):
        kind = type(data).__name__ if not isinstance(data, Mapping) else f"keys {sorted(data)[:6]}"
        raise ConfigError(
            f"trajectory {name or '(unnamed)'} has no 'messages' list ({kind}); expected a mini-swe-agent "
            "*.traj.json ({'info': ..., 'messages': [...]}) - see docs/howto/replay.md to convert other formats"
        )
    info: Mapping[str, Any] = data["info"] if isinstance(data.get("info"), Mapping) else {}
    messages: list[RecordedMessage] = []
    exit_status, error = str(info.get("exit_status") or ""), None
    for m in raw:
        if not isinstance(m, Mapping):
            continue
        role = str(m.get("role") or "")
        if role == "exit":
            extra: Mapping[str, Any] = m["extra"] if isinstance(m.get("extra"), Mapping) else {}
            exit_status = str(extra.get("exit_status") or exit_status)
            error = str(extra["exception_str"]) if extra.get("exception_str") else None
            continue
        if role not in ("system", "user", "assistant", "tool"):
            continue
        prompt, cached, completion = _usage(m.get("extra")) if role == "assistant" else (None, 0, 0)
        reasoning = m.get("reasoning_content") or ""
        messages.append(
            RecordedMessage(
                role=role,
                text=_text(m.get("content")),
                calls=_calls(m.get("tool_calls")) if role == "assistant" else (),
                tool_call_id=str(m["tool_call_id"]) if role == "tool" and m.get("tool_call_id") else None,
                reasoning=reasoning if isinstance(reasoning, str) else "",
                prompt_tokens=prompt,
                cached_tokens=cached,
                completion_tokens=completion,
            )
        )
    config: Mapping[str, Any] = info["config"] if isinstance(info.get("config"), Mapping) else {}
    model_cfg: Mapping[str, Any] = config["model"] if isinstance(config.get("model"), Mapping) else {}
    model = str(model_cfg.get("model_name") or "")
    if not model:
        model = next(
            (
                str((m.get("extra") or {}).get("response", {}).get("model") or "")
                for m in raw
                if isinstance(m, Mapping) and m.get("role") == "assistant" and isinstance(m.get("extra"), Mapping)
            ),
            "",
        )
    return Trajectory(name, tuple(messages), model, exit_status, error, (MINI_SWE_AGENT_BASH,))


def load_trajectory(path: str | Path) -> Trajectory:
    """Read one trajectory file (``*.traj.json``); a clear error names what is wrong with it."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"trajectory file {p} does not exist") from None
    except ValueError as exc:
        raise ConfigError(f"trajectory file {p} is not JSON ({exc}); expected a *.traj.json file") from None
    return parse_trajectory(data, p.name.removesuffix(".json").removesuffix(".traj"))


@dataclass(frozen=True, slots=True)
class Served:
    """One reply of the script: ``step`` (the recorded step answered; None for a placeholder)."""

    kind: str  # "step" | "unrecorded" | "end"
    step: int | None
    position: int  # index into Trajectory.messages the reply follows


Observer = Callable[[int, Conversation], None]


@dataclass
class ReplayScript:
    """The recorded model behind the simulator (``SimConfig(agent=ReplayScript(trajectory))``).

    ``observe(step, conversation)`` is called with every request answered with a recorded step
    (the metrics read what the request held); ``served`` lists every reply in order.
    """

    trajectory: Trajectory
    observe: Observer | None = None
    served: list[Served] = field(default_factory=list)

    def __post_init__(self) -> None:
        msgs = self.trajectory.messages
        self._by_call = {c.id: i for i, m in enumerate(msgs) if m.role == "assistant" for c in m.calls}
        self._by_result = {m.tool_call_id: i for i, m in enumerate(msgs) if m.role == "tool" and m.tool_call_id}
        self._by_text = {m.text: i for i, m in enumerate(msgs) if m.role == "assistant" and not m.calls and m.text}
        self._step_of = {i: k for k, i in enumerate(self.trajectory.steps)}
        self._lock = threading.Lock()

    def _anchor(self, m: SimMessage) -> int | None:
        if m.role == "assistant":
            for c in m.tool_calls:
                if c.id in self._by_call:
                    return self._by_call[c.id]
            return self._by_text.get(m.text) if m.text else None
        if m.role == "tool" and m.tool_call_id:
            return self._by_result.get(m.tool_call_id)
        return None

    def position(self, conv: Conversation) -> int:
        """Index of the newest recorded message the request holds (-1: none yet, the first request)."""
        msgs = self.trajectory.messages
        at, anchor_at = -1, -1
        for j in range(len(conv.messages) - 1, -1, -1):
            found = self._anchor(conv.messages[j])
            if found is not None:
                at, anchor_at = found, j
                break
        # later user messages (format-error prompts) are placed by their text, after the anchor
        for m in conv.messages[anchor_at + 1 :]:
            if m.role != "user":
                continue
            nxt = next((i for i in range(at + 1, len(msgs)) if msgs[i].role == "user" and msgs[i].text == m.text), None)
            if nxt is not None:
                at = nxt
        return at

    def next_reply(self, conv: Conversation) -> ScriptedReply:
        msgs = self.trajectory.messages
        at = max(self.position(conv), next((i for i, m in enumerate(msgs) if m.role == "user"), 0))
        nxt = next((i for i in range(at + 1, len(msgs)) if msgs[i].role in ("assistant", "user")), None)
        if nxt is None:
            return self._serve(Served("end", None, at), ScriptedReply(END_OF_RUN))
        if msgs[nxt].role == "user":
            return self._serve(Served("unrecorded", None, at), ScriptedReply(UNRECORDED_REPLY))
        step = self._step_of[nxt]
        if self.observe is not None:
            self.observe(step, conv)
        m = msgs[nxt]
        calls = tuple(SimCall(c.id, c.name, c.arguments) for c in m.calls)
        return self._serve(Served("step", step, nxt), ScriptedReply(m.text, calls, "tool_calls" if calls else "stop"))

    def _serve(self, served: Served, reply: ScriptedReply) -> ScriptedReply:
        with self._lock:
            self.served.append(served)
        return reply

    def next_user(self, after: int) -> str | None:
        """The recorded user message that follows position ``after`` before the next assistant reply."""
        for m in self.trajectory.messages[after + 1 :]:
            if m.role == "assistant":
                return None
            if m.role == "user":
                return m.text
        return None
