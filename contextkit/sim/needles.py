"""Needle questions: facts planted in tool outputs and asked about later (a task metric that can fail).

A ``Needle`` is one fact — a port, a build hash, a constant on a line of a file, an error code —
written into one tool output as a line that fits that output (a log line, a JSON note, a source
line). Later the user asks for it with a directive the scripted model understands::

    Question n2: which port is service billing-api listening on? [[needle:n2 {"cue": "...", "tool": "tail_log"}]]

The scripted model (``needle_reply``) answers *only from the request it received*:

1. the fact (``cue`` followed by a value) is in some message of the request → ``Answer n2: 48213``;
2. else, when a retrieval tool is offered (contextkit's ``recall`` for ``<<ccr:KEY>>`` markers,
   headroom's ``headroom_retrieve`` for ``hash=KEY`` markers) and a marker is present that it has not
   yet expanded for this question → it calls the tool: when the tool can search (contextkit's
   ``recall`` takes a ``query``), first one call over every marker in view asking for the cue; then
   one marker at a time (markers next to the file the question names first, then markers in results
   of the question's tool or on an index line that names that tool's call; newest first), following
   "next page" hints; at most ``MAX_RECALLS`` calls per question;
3. else → ``Answer n2: unknown``.

The question's own message (and every other question) is never searched, and answers do not
repeat the cue, so a previous answer cannot leak the value: only tool outputs, summaries and
recalled content can.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from typing import Any

# the scripted model's request view (``sim.model.Conversation``): messages with role, text,
# tool_calls, tool_call_id, and the names of the tools offered; typed loosely so this module does
# not import the model that imports it
Conversation = Any

__all__ = [
    "MAX_RECALLS",
    "NEEDLE_KINDS",
    "Needle",
    "NeedleAnswer",
    "answer_of",
    "make_needle",
    "needle_reply",
    "plant",
]

NEEDLE_KINDS = ("port", "build", "line", "error")
NEEDLE_TOOLS = {"port": "tail_log", "build": "get_json", "line": "read_file", "error": "tail_log"}
MAX_RECALLS = 6
UNKNOWN = "unknown"

NEEDLE_RE = re.compile(r"\[\[needle:([A-Za-z0-9_-]+)\s*(\{.*?\})\s*\]\]", re.DOTALL)
_ANSWER_RE = re.compile(r"Answer ([A-Za-z0-9_-]+): (\S+)")
_CCR_RE = re.compile(r"<<ccr:([0-9a-f]{16})>>")
_HEADROOM_RE = re.compile(r"hash=([0-9a-f]{8,64})\b")
_PAGE_RE = re.compile(r"start_line[\"'=: ]+(\d+)")
# retrieval tool name -> (marker regex, argument name, how the argument is written)
RETRIEVERS: dict[str, tuple[re.Pattern[str], str, str]] = {
    "recall": (_CCR_RE, "key", "<<ccr:{}>>"),
    "headroom_retrieve": (_HEADROOM_RE, "hash", "{}"),
}
SEARCHABLE = ("recall",)  # retrieval tools whose schema takes a ``query`` (contextkit's recall)
MAX_SEARCH_KEYS = 32  # contextkit's recall reads at most 32 keys per call
_SERVICES = ("billing-api", "auth-gw", "search-indexer", "media-proxy", "ledger-sync", "notify-hub", "geo-cache")
_WORDS = ("INFLIGHT", "RETRY", "BATCH", "QUEUE", "WINDOW", "SHARD", "BACKOFF", "BUFFER", "POOL", "CURSOR")


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@dataclass(frozen=True)
class Needle:
    """One planted fact: where it goes (``turn``, ``tool``, ``path``), what it says, when it is asked."""

    id: str
    kind: str
    cue: str  # the text right before the value in the planted line
    value: str
    tool: str
    turn: int  # the turn whose tool output carries it
    path: str | None = None  # read_file needles: the file (the line stays in every later read)
    line: int | None = None  # read_file needles: the 1-based line number replaced

    @property
    def fact(self) -> str:
        """The planted text, as it appears in the tool output."""
        return f"{self.cue} {self.value}"

    def question(self) -> str:
        """The user's question, with the directive the scripted model reads."""
        what = {
            "port": f"which port did the service log say {self.cue.split()[1]} is listening on",
            "build": f"what is the {self.cue}",
            "line": f"what value does {self.path} set for {self.cue.rstrip(' =')}",
            "error": f"which error code did the log report for {' '.join(self.cue.split()[:2])}",
        }[self.kind]
        where = {"path": self.path} if self.path else {}  # the question names the file: so may the model
        spec = json.dumps({"cue": self.cue, "tool": self.tool, **where})
        return f"Question {self.id}: {what}? Answer from the tool outputs. [[needle:{self.id} {spec}]]"

    def correct(self, reply: str) -> bool:
        """Whether ``reply`` answers this needle with its value."""
        return answer_of(reply, self.id) == self.value


def make_needle(
    index: int, kind: str, seed: int, turn: int, *, path: str | None = None, path_lines: int = 300
) -> Needle:
    """The ``index``-th needle of a seeded session: deterministic in (seed, index, kind). A ``line``
    needle replaces a line in the middle third of ``path`` (``path_lines`` long)."""
    if kind not in NEEDLE_KINDS:
        raise ValueError(f"needle kind {kind!r} is unknown; use one of {', '.join(NEEDLE_KINDS)}")
    rng = _rng("needle", seed, index, kind)
    nid = f"n{index + 1}"
    service = f"{rng.choice(_SERVICES)}-{rng.randint(2, 99)}"
    tool = NEEDLE_TOOLS[kind]
    if kind == "port":
        return Needle(nid, kind, f"service {service} listening on port", str(rng.randint(1025, 65535)), tool, turn)
    if kind == "build":
        value = "".join(rng.choice("0123456789abcdef") for _ in range(12))
        return Needle(nid, kind, f"build hash of {service} is", value, tool, turn)
    if kind == "error":
        job = rng.randint(100_000, 999_999)
        return Needle(nid, kind, f"job {job} failed with error code", f"E{rng.randint(1000, 9999)}", tool, turn)
    if path is None:
        raise ValueError("a 'line' needle needs the path of the file it is planted in")
    ident = f"MAX_{rng.choice(_WORDS)}_{rng.choice(_WORDS)}_{rng.randint(10, 99)}"
    line = rng.randint(max(1, path_lines // 3), max(1, 2 * path_lines // 3))
    return Needle(nid, kind, f"{ident} =", str(rng.randint(2, 9999)), tool, turn, path, line)


def plant(needle: Needle, output: str, seed: int) -> str:
    """``output`` with the needle's line in it: a numbered source line replaced (``read_file``), or a
    line inserted in the middle third (logs, JSON notes), so head+tail previews do not keep it."""
    lines = output.split("\n")
    if needle.kind == "line":
        assert needle.line is not None
        prefix = f"{needle.line:>5}| "
        for i, text in enumerate(lines):
            if text.startswith(prefix):
                lines[i] = f"{prefix}    {needle.fact}"
                return "\n".join(lines)
        return output  # the file is shorter (or the range misses the line): nothing to plant here
    rng = _rng("plant", seed, needle.id)
    at = rng.randint(len(lines) // 3, max(len(lines) // 3, 2 * len(lines) // 3))
    if needle.tool == "get_json":
        # a note field inside the pretty-printed array, so the JSON stays valid
        for i in range(at, len(lines)):
            if lines[i].strip().startswith('"note":'):
                indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
                comma = "," if lines[i].rstrip().endswith(",") else ""
                lines[i] = f'{indent}"note": "{needle.fact}"{comma}'
                return "\n".join(lines)
    level = "ERROR" if needle.kind == "error" else "INFO "
    stamp = f"2026-11-29T10:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z"
    lines.insert(at, f"{stamp} {level} [ops-worker-{rng.randint(1, 8)}] {needle.fact}")
    return "\n".join(lines)


def answer_of(reply: str, needle_id: str) -> str | None:
    """The value a reply gives for ``needle_id`` (``Answer n2: 48213`` → ``48213``), else None."""
    for nid, value in _ANSWER_RE.findall(reply or ""):
        if nid == needle_id:
            return value.rstrip(".,;")
    return None


# the scripted model's side ---------------------------------------------------------------------


def _pending_question(conv: Conversation) -> tuple[int, str, dict[str, Any]] | None:
    """The open question of this request: the newest needle directive in the user messages after the
    last final assistant answer (tool rounds and recalls may follow it)."""
    for i in range(len(conv.messages) - 1, -1, -1):
        m = conv.messages[i]
        if m.role == "assistant" and not m.tool_calls:
            return None
        if m.role == "user":
            hit = NEEDLE_RE.search(m.text)
            if hit:
                try:
                    spec = json.loads(hit.group(2))
                except ValueError:
                    return None
                return i, hit.group(1), spec if isinstance(spec, dict) else {}
    return None


def _value_pattern(cue: str) -> re.Pattern[str]:
    return re.compile(re.escape(cue) + r"[\s\"':=]*([A-Za-z0-9_.-]+)")


def _tool_names(conv: Conversation) -> dict[str, str]:
    return {c.id: c.name for m in conv.messages for c in m.tool_calls}


def _retrieval_calls(conv: Conversation, since: int) -> list[tuple[str, dict[str, Any]]]:
    """(tool name, parsed arguments) of retrieval calls made after message ``since``."""
    out = []
    for m in conv.messages[since + 1 :]:
        for c in m.tool_calls:
            if c.name in RETRIEVERS:
                try:
                    args = json.loads(c.arguments or "{}")
                except ValueError:
                    args = {}
                out.append((c.name, args if isinstance(args, dict) else {}))
    return out


@dataclass(frozen=True)
class NeedleAnswer:
    """The scripted model's move on a needle question: a final answer, or one retrieval call."""

    text: str
    call: tuple[str, str] | None = None  # (tool name, JSON arguments)


def needle_reply(conv: Conversation) -> NeedleAnswer | None:
    """The scripted model's reply to an open needle question; None when no question is open."""
    pending = _pending_question(conv)
    if pending is None:
        return None
    qidx, nid, spec = pending
    cue = str(spec.get("cue") or "")
    if not cue:
        return NeedleAnswer(f"Answer {nid}: {UNKNOWN}")
    pattern = _value_pattern(cue)
    names = _tool_names(conv)
    for m in conv.messages:
        if m.role == "user" and NEEDLE_RE.search(m.text):
            continue
        hit = pattern.search(m.text)
        if hit:
            recalled = m.role == "tool" and names.get(m.tool_call_id or "") in RETRIEVERS
            return NeedleAnswer(f"Answer {nid}: {hit.group(1)}" + (" (from recalled content)" if recalled else ""))
    offered = [name for name in RETRIEVERS if name in conv.tools]
    done = _retrieval_calls(conv, qidx)
    if not offered or len(done) >= MAX_RECALLS:
        return NeedleAnswer(f"Answer {nid}: {UNKNOWN}")
    # a recall result that says how to get its next page: follow it first
    last = conv.messages[-1]
    if last.role == "tool" and names.get(last.tool_call_id or "") in RETRIEVERS:
        page = _PAGE_RE.findall(last.text[-400:])
        prev = done[-1] if done else None
        if page and prev is not None:
            args = dict(prev[1])
            args["start_line"] = int(page[-1])
            return NeedleAnswer("Reading the next page.", (prev[0], json.dumps(args)))
    # a search read no original through: the markers it covered can still be read one by one
    tried = {(name, str(args.get(RETRIEVERS[name][1]))) for name, args in done if "query" not in args}
    path = str(spec.get("path") or "")
    best: list[tuple[str, str]] = []  # markers next to the file the question names
    preferred: list[tuple[str, str]] = []
    others: list[tuple[str, str]] = []
    for m in reversed(conv.messages):
        if m.role == "user" and NEEDLE_RE.search(m.text):
            continue
        source = names.get(m.tool_call_id or "") if m.role == "tool" else None
        if source in RETRIEVERS:
            continue  # recalled content is searched above; its markers point at what was already recalled
        for line in reversed(m.text.split("\n")):
            # a marker in a result of the question's tool, or on an index line naming that tool
            named = source == spec.get("tool") or (source is None and f"{spec.get('tool')}(" in line)
            for tool in offered:
                regex, _, form = RETRIEVERS[tool]
                for key in reversed(regex.findall(line)):
                    arg = form.format(key)
                    if (tool, arg) in tried or any((tool, arg) in tier for tier in (best, preferred, others)):
                        continue
                    tier = best if named and path and path in (line if source is None else m.text) else None
                    (tier if tier is not None else preferred if named else others).append((tool, arg))
    candidates = best + preferred + others
    if not candidates:
        return NeedleAnswer(f"Answer {nid}: {UNKNOWN}")
    searchable = [arg for tool, arg in candidates if tool in SEARCHABLE]
    if searchable and not any("query" in args for _, args in done):
        # a retrieval tool that searches: one call over every original in view, asking for the cue
        tool = next(t for t, _ in candidates if t in SEARCHABLE)
        args = {RETRIEVERS[tool][1]: " ".join(searchable[:MAX_SEARCH_KEYS]), "query": cue}
        return NeedleAnswer(f"Searching {len(searchable[:MAX_SEARCH_KEYS])} archived originals for question {nid}.",
                            (tool, json.dumps(args)))  # fmt: skip
    tool, arg = candidates[0]
    return NeedleAnswer(f"Looking up {arg} for question {nid}.", (tool, json.dumps({RETRIEVERS[tool][1]: arg})))
