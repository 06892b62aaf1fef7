"""``RequestMeter``: request bytes and tokens of a history, measured again and again for the cost of
what is new in it (see the class docstring)."""

from __future__ import annotations

import json
import operator
import threading
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextkit.messages import Message, to_wire
from contextkit.sizing.anthropic import AnthropicBodies
from contextkit.sizing.counting import _REPLY_PRIMING, message_tokens, tools_tokens
from contextkit.sizing.lastbuilt import LastBody, LastList, common_prefix, fresh, prefix_copy
from contextkit.sizing.wire import (
    ANTHROPIC_ROUTE,
    dumps,
    message_bytes,
    openai_request_bytes,
    sent_message,
    wire_route,
)


@dataclass(frozen=True, slots=True)
class Measure:
    bytes: int
    tokens: int
    messages: int


RECENT_REQUESTS = 4  # histories a meter remembers whole (the request of a step and its rewrites)
CALIBRATION_BAND = (0.5, 2.0)  # provider / our token counts outside this band are not learned from
# below this many tokens the fixed framing of a request (which providers count differently) outweighs
# the tokenizer's difference, which is what the ratio is for
CALIBRATION_MIN_TOKENS = 1024
CALIBRATION_DEADBAND = 0.03


def _body_head(tools: Any) -> str:
    """The request body before its messages (the tools first: providers put them ahead of the
    messages in the cached prompt prefix)."""
    return f'{{"tools":{dumps(tools)},"messages":['


class RequestMeter:
    """Caches per-message sizes so re-measuring a grown history costs only the new messages.

    Keys are the immutable ``Message`` values themselves (their hash is cheap: Python caches
    string hashes), so a message that appears again after compaction is not re-counted.

    On the Anthropic route (``wire_route``) the request bytes come from the body litellm builds
    (``AnthropicBodies``).
    """

    def __init__(self, model: str = "", *, max_entries: int = 200_000) -> None:
        self.model = model
        # first in, first out (a plain dict keeps insertion order; walking an OrderedDict hashes every key)
        self._cache: dict[Message, tuple[int, int]] = {}
        # the same sizes keyed by the message object's id (the message is kept in the entry, so the id
        # cannot be reused while it is there): a dataclass hash walks every field of the message, an
        # id does not, and the flow asks about the same objects many times per request
        self._by_id: dict[int, tuple[Message, int, int]] = {}
        # each message's wire dict (``to_wire``) and its compact JSON, the pieces ``wire_body`` joins
        self._json: dict[int, tuple[Message, dict[str, Any], str]] = {}
        # running totals of the last few histories summed: a history that starts with one of them
        # (the same objects: appended to, or rewritten from some message on) adds only the rest
        self._runs: list[_Run] = []
        self._last_tools: tuple[list[Any], str, Any] | None = None  # the tools, their JSON, a copy
        self._evicted = False  # the size caches dropped an entry for room (``retain`` then walks them)
        self._list = LastList()  # the last wire list handed out (``wire_list``)
        self._body = LastBody()  # the last body stepped to (``body_step``)
        self._lock = threading.Lock()
        self._anthropic = AnthropicBodies(model, self._lock)  # the Anthropic route's bodies
        self._max = max_entries
        self.misses = 0
        self.hits = 0
        # the request framing (body skeleton bytes, tool tokens) per tools + parameters, and the last
        # few histories measured: the turn flow measures the same request several times per step,
        # and a history seen again (the same message objects) costs a comparison, not a sum
        self._framing: dict[str, tuple[int, int]] = {}
        self._recent: list[tuple[_Run, str, Measure]] = []
        self.measured = 0  # requests summed (the rest came from the recent ones)
        self.calls = 0
        self.summed = 0  # messages added to a running total (the rest came from a run's prefix)
        self.serialised = 0  # messages serialised to wire JSON for a request body
        # calibration: the provider's prompt_tokens over our count, learned from the requests it
        # answered (``calibrate``); every token count this meter gives is scaled by it
        self.ratio = 1.0
        self._counted = 0  # our tokens (before scaling) over the requests learned from
        self._reported = 0  # the provider's prompt_tokens for them
        self.samples = 0
        self.skipped = 0

    def calibrate(self, measured: int, reported: int) -> float:
        """Learn from one answered request: ``measured`` is this meter's (scaled) count of what was sent,
        ``reported`` the provider's ``prompt_tokens``. A count far from ours (below half or above
        twice) is skipped, and so is a small request (below ``CALIBRATION_MIN_TOKENS``, where the
        framing dominates): the provider did not count what we sent (it edited the request, or a proxy
        added to it), so it says nothing about the tokenizer. Returns the ratio in force."""
        if measured <= 0 or reported < CALIBRATION_MIN_TOKENS:
            return self.ratio
        raw = measured / self.ratio
        if not CALIBRATION_BAND[0] <= reported / raw <= CALIBRATION_BAND[1]:
            with self._lock:
                self.skipped += 1
            return self.ratio
        with self._lock:
            self._counted += round(raw)
            self._reported += reported
            self.samples += 1
            ratio = self._reported / self._counted
            # within CALIBRATION_DEADBAND of ours the count is close enough: it stays exact, so a
            # session's decisions do not shift with every answered request for a percent or two
            ratio = 1.0 if abs(ratio - 1.0) < CALIBRATION_DEADBAND else ratio
            if ratio != self.ratio:
                self.ratio = ratio
                self._recent = []  # remembered measures hold counts at the old ratio
            return self.ratio

    @property
    def route(self) -> str:
        return wire_route(self.model)

    def _sizes(self, message: Message) -> tuple[int, int]:
        known = self._by_id.get(id(message))
        if known is not None and known[0] is message:
            self.hits += 1
            return known[1], known[2]
        with self._lock:
            hit = self._cache.get(message)
            if hit is not None:
                self.hits += 1
                self._remember(message, hit)
                return hit
        # escaped as the route sends text: ASCII escapes on the Anthropic route, UTF-8 elsewhere
        anthropic = self.route == ANTHROPIC_ROUTE
        size = len(json.dumps(sent_message(message))) if anthropic else message_bytes(message)
        sizes = (size, message_tokens(message, self.model))
        with self._lock:
            self.misses += 1
            self._cache[message] = sizes
            if len(self._cache) > self._max:
                del self._cache[next(iter(self._cache))]
                self._evicted = True
            self._remember(message, sizes)
        return sizes

    def _remember(self, message: Message, sizes: tuple[int, int]) -> None:
        if len(self._by_id) >= self._max:
            del self._by_id[next(iter(self._by_id))]
            self._evicted = True
        self._by_id[id(message)] = (message, *sizes)

    def _wire(self, message: Message) -> tuple[Message, dict[str, Any], str]:
        known = self._json.get(id(message))
        if known is not None and known[0] is message:
            return known
        wire = to_wire(message)
        entry = (message, wire, dumps(wire))
        with self._lock:
            self.serialised += 1
            if len(self._json) >= self._max:
                del self._json[next(iter(self._json))]
            self._json[id(message)] = entry
        return entry

    def wire_json(self, message: Message) -> str:
        """``message``'s wire form (``to_wire``) as compact JSON, serialised once per message object."""
        return self._wire(message)[2]

    def wire_list(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        """``to_wire_list(messages)``: copies of the cached wire dicts (the receiver may change them:
        litellm's validation sets a message's ``tool_calls`` anew), converted once per message
        object. The copies handed out for the longest prefix shared with the last list asked for
        are handed out again unless the receiver changed them since (``LastList``)."""
        return self._list.build(messages, lambda m: self._wire(m)[1])

    def wire_body(self, messages: Sequence[Message], tools: Any) -> bytes:
        """``dumps({"tools": tools, "messages": to_wire_list(messages)})`` as UTF-8, byte for byte,
        joined from the cached pieces of ``wire_json``: only messages not seen before are serialised."""
        return f"{_body_head(tools)}{self._body.build(messages, self.wire_json)}]}}".encode("utf-8", "surrogatepass")

    def body_step(self, messages: Sequence[Message], tools: Any) -> tuple[int, int | None, int]:
        """The request body ``wire_body(messages, tools)`` follows the one before it (the last asked
        here): its bytes, the one before's (None for the first) and the bytes the two share from
        their start, the prefix a provider's prompt cache can reuse. From the cached pieces' sizes:
        only the messages after the prefix shared with the body before are looked up, and no body is
        joined (a join copies every byte of the history, every request)."""
        return self._body.step(messages, _body_head(tools), self.wire_json)

    def message_bytes(self, message: Message) -> int:
        """One message's bytes as this route escapes its texts (for budgets; the request total
        is ``measure``)."""
        return self._sizes(message)[0]

    def message_sizes(self, message: Message) -> tuple[int, int]:
        """One message's bytes (as ``message_bytes``) and tokens before calibration: what it adds to
        the sums ``measure`` scales by ``ratio``."""
        return self._sizes(message)

    def retain(self, messages: Iterable[Message]) -> None:
        """Forget every cached message not in ``messages``. The cache holds the messages themselves,
        so without this the originals that compaction replaced would stay in memory. Amortised: it
        acts once the caches hold more than an eighth beyond ``messages``, so they stay within that."""
        held = messages if isinstance(messages, (list, tuple)) else list(messages)
        with self._lock:
            # each sized message is held once: while the caches hold at most an eighth more entries
            # than the messages kept (a history that only grew holds none), the walk waits - it is a
            # set of every id and set differences, asked after every turn of a long session
            if max(len(self._by_id), len(self._json), self._anthropic.entries) - len(held) <= len(held) // 8:
                return
        # by identity: a set of ids is built without hashing the messages (a walk over every field)
        keep = set(map(id, held))
        with self._lock:
            if len(self._by_id) == len(self._cache) and not self._evicted:
                # every sized message is in both, once (the usual case: neither dropped an entry for
                # room, and no equal copy of a message was sized): what goes is found by a set
                # difference of ids in C, and only the messages that go are hashed
                for gone in self._by_id.keys() - keep:
                    self._cache.pop(self._by_id.pop(gone)[0], None)
            else:  # one of them dropped its oldest entries: walk the cache itself
                for message in [m for m in self._cache if id(m) not in keep]:
                    del self._cache[message]
                self._by_id = {k: v for k, v in self._by_id.items() if k in keep}
            for gone in self._json.keys() - keep:
                del self._json[gone]
            self._anthropic.retain(keep)
            self._recent = [r for r in self._recent if keep.issuperset(map(id, r[0].messages))]
            self._runs = [r for r in self._runs if keep.issuperset(map(id, r.messages))]
            self._list.retain(keep)
            # the last body stays (one request's messages): the next request is compared with it

    @property
    def listed(self) -> int:
        """Messages whose wire dict a wire list looked up (the rest came from the last list's prefix)."""
        return self._list.looked_up

    @property
    def joined(self) -> int:
        """Messages whose JSON a body step looked up (the rest came from the last body's prefix)."""
        return self._body.looked_up

    @property
    def fallbacks(self) -> int:
        """Anthropic-route requests measured from the real messages."""
        return self._anthropic.fallbacks

    @property
    def entries(self) -> int:
        return len(self._cache)

    def measure(
        self,
        history: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **params: Any,
    ) -> Measure:
        """Request bytes and tokens of ``history`` (+ tools), equal to ``request_bytes`` exactly."""
        key = self._key(tools, params)
        self.calls += 1
        # no copy of a list: a copy writes to every message object (its reference count), which at
        # hundreds of messages costs more than the comparison - the memory reads of objects other
        # work has pushed out of the processor's caches; the comparison reads only the two lists
        messages = history if type(history) is list else list(history)
        with self._lock:
            for seen, seen_key, result in self._recent:
                # the same messages: a list comparison in C, object by object (the same object is
                # equal at once; an equal copy measures the same)
                if seen_key == key and seen.messages == messages:
                    self.hits += len(messages)  # every message's sizes came from memory
                    return result
            framing = self._framing.get(key)
        if framing is None:
            # the skeleton has "messages":[]; each message and the commas between them are added below
            framing = (
                openai_request_bytes([], tools=tools, model=self.model, **params),
                tools_tokens(tools, self.model),
            )
            with self._lock:
                if len(self._framing) > 64:
                    self._framing.clear()
                self._framing[key] = framing
        run = self._run_of(messages)
        total_bytes = run.bytes[-1]
        total_tokens = run.tokens[-1] + _REPLY_PRIMING + framing[1]
        if self.route == ANTHROPIC_ROUTE:
            built = self._anthropic.built_bytes(history, tools, params, None)
            if built is not None:
                total_bytes = built - framing[0] - max(0, len(messages) - 1)  # the whole body, framing included
            else:
                total_bytes = sum(message_bytes(m) for m in messages)
        total_bytes += framing[0] + max(0, len(messages) - 1)
        if self.ratio != 1.0:
            total_tokens = round(total_tokens * self.ratio)
        result = Measure(bytes=total_bytes, tokens=total_tokens, messages=len(messages))
        with self._lock:
            self.measured += 1
            self._recent = [(run, key, result), *self._recent[: RECENT_REQUESTS - 1]]
        return result

    def _key(self, tools: Sequence[Mapping[str, Any]] | None, params: Mapping[str, Any]) -> str:
        """The tools and parameters as one string (what framing and remembered measures are kept by).
        The flow asks with the same tools every time: compared (in C) with the last ones, their JSON
        is reused rather than written again."""
        listed = list(tools or ())
        last = self._last_tools
        # the same dicts (identity: 1 == True, yet their JSON differs), still equal to a copy of what they were
        same = last is not None and len(last[0]) == len(listed) and all(map(operator.is_, last[0], listed))
        if last is None or not same or last[2] != listed:
            last = self._last_tools = (listed, json.dumps(listed, default=repr), fresh(listed))
        return last[1] + json.dumps(sorted(params.items()), default=repr)

    def _run_of(self, messages: Sequence[Message]) -> _Run:
        """The running totals of ``messages``: the longest prefix shared with a run already summed
        comes from it, only the messages after it are looked up."""
        with self._lock:
            runs = list(self._runs)
        # the newest run first: usually it holds all of them but the new messages (one copy then)
        held, shared = prefix_copy(runs[0].messages, messages) if runs else (list(messages), 0)
        base = runs[0] if runs and shared else None
        for run in runs[1:]:
            if shared == len(held):
                break  # nothing left to sum
            if len(run.messages) <= shared:
                continue  # it cannot share more
            n = common_prefix(run.messages, held)
            if n > shared:
                shared, base = n, run
        # running totals as arrays: a slice of one is a copy of its memory, not of an int object per message
        cum_bytes = base.bytes[: shared + 1] if base is not None else array("q", [0])
        cum_tokens = base.tokens[: shared + 1] if base is not None else array("q", [0])
        b_total, t_total = cum_bytes[-1], cum_tokens[-1]
        for message in held[shared:]:
            b, t = self._sizes(message)
            b_total += b
            t_total += t
            cum_bytes.append(b_total)
            cum_tokens.append(t_total)
        run = _Run(held, cum_bytes, cum_tokens)
        with self._lock:
            self.summed += len(held) - shared
            self._runs = [run, *[r for r in self._runs if r is not base], *([base] if base is not None else [])][
                :RECENT_REQUESTS
            ]
        return run

    def breakpoint_bytes(
        self,
        history: Sequence[Message],
        positions: Sequence[int],
        cache_control: Mapping[str, Any],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **params: Any,
    ) -> int:
        """Bytes that ``cache_control`` on the messages at ``positions`` adds to the request.

        The OpenAI form carries it as one more key of each marked message; litellm's Anthropic
        body moves it onto the message's last content block, so there it is measured."""
        if not positions:
            return 0
        if self.route == ANTHROPIC_ROUTE:
            marked = self._anthropic.built_bytes(history, tools, params, (tuple(positions), dumps(cache_control)))
            plain = self._anthropic.built_bytes(history, tools, params, None)
            if marked is not None and plain is not None:
                return marked - plain
        return len(positions) * (len(dumps({"cache_control": cache_control})) - 1)  # braces out, a comma in


@dataclass(frozen=True, slots=True)
class _Run:
    """A history summed: its messages and the running totals of their bytes and raw tokens
    (``bytes[i]``: the first ``i`` messages)."""

    messages: list[Message]  # a copy, never changed once summed
    bytes: array[int]
    tokens: array[int]


def total_chars(history: Iterable[Message]) -> int:
    """Sum of content lengths: a cheap raw measure of a history (not the bytes sent; see ``request_bytes``)."""
    return sum(len(m.content) for m in history)
