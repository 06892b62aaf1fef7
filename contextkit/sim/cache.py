"""The simulator's prompt cache: a provider-style prefix cache over recent requests.

Providers bill a cached prompt prefix at a fraction of the input price, so whether a request
repeats an earlier one *byte for byte up to some point* decides what an agent really costs. This
module models that cache closely enough to measure context-management strategies in dollars:

* A request is a sequence of **blocks** in the provider's cache order: the tool schemas (one
  block), then (Anthropic) the system prompt, then every message. Each block is identified by
  the SHA-256 of its canonical JSON with ``cache_control`` keys removed (a breakpoint marks a
  position, it is not content), chained so a position's digest stands for the whole prefix.
* **Automatic mode** (OpenAI and most OpenAI-compatible providers): every prefix of at least
  ``min_tokens`` is cached at every block boundary; a later request reads the longest cached
  prefix, reported in steps of ``granularity`` tokens (OpenAI: 128).
* **Breakpoint mode** (Anthropic, Bedrock): nothing is cached unless the request carries
  ``cache_control`` breakpoints. Each breakpoint writes the prefix that ends at it (when it holds
  at least ``min_tokens``); a read is the longest cached prefix found at a breakpoint or up to
  ``lookback`` blocks before one (Anthropic checks about 20). Tokens between the read and the last
  breakpoint are *written* (billed 1.25x), tokens after the last breakpoint are plain input.
* Entries expire ``ttl`` seconds after their last use (a hit refreshes them, as Anthropic's
  does); the least recently used entries go first beyond ``max_entries``.

Not modelled: per-organisation sharding, the 1-hour TTL tier, partial-block (128-token) hits
inside one message. Thread-safe: the simulator serves requests from many threads.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_MIN_TOKENS", "DEFAULT_TTL", "CacheUse", "PromptBlock", "PromptCache"]

DEFAULT_MIN_TOKENS = 1024
DEFAULT_TTL = 300.0  # seconds: Anthropic's default ephemeral TTL; OpenAI keeps prefixes 5-10 minutes
ANTHROPIC_LOOKBACK = 20


@dataclass(frozen=True, slots=True)
class PromptBlock:
    """One cacheable unit of a request: ``digest`` chains every block before it (a prefix id)."""

    digest: str
    tokens: int
    breakpoint: bool = False  # the block carries ``cache_control``


@dataclass(frozen=True, slots=True)
class CacheUse:
    """What the cache did for one request. ``read_tokens + write_tokens <= prompt_tokens``."""

    prompt_tokens: int = 0
    read_tokens: int = 0
    write_tokens: int = 0  # newly cached tokens (Anthropic bills them; OpenAI writes silently)
    breakpoints: int = 0

    @property
    def uncached_tokens(self) -> int:
        """Prompt tokens that were neither read from nor written to the cache."""
        return self.prompt_tokens - self.read_tokens - self.write_tokens


class PromptCache:
    """Longest-cached-prefix lookups over recent requests, per namespace (route + model)."""

    def __init__(
        self,
        *,
        min_tokens: int = DEFAULT_MIN_TOKENS,
        ttl: float = DEFAULT_TTL,
        max_entries: int = 50_000,
        lookback: int = ANTHROPIC_LOOKBACK,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min_tokens < 1 or ttl < 0 or max_entries < 1 or lookback < 0:
            raise ValueError("min_tokens and max_entries must be >= 1, ttl and lookback >= 0")
        self.min_tokens = min_tokens
        self.ttl = ttl
        self.max_entries = max_entries
        self.lookback = lookback
        self.clock = clock
        self._entries: OrderedDict[tuple[str, str], float] = OrderedDict()  # (namespace, digest) -> last use
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def use(
        self,
        blocks: Sequence[PromptBlock],
        *,
        namespace: str = "",
        breakpoints: bool = False,
        priming: int = 0,
        granularity: int = 1,
    ) -> CacheUse:
        """Look the request up, then store what it caches. ``breakpoints``: the provider caches only
        at ``cache_control`` marks (Anthropic); otherwise every prefix is cached (OpenAI).
        ``priming``: tokens counted once per request outside any block (they are never cached)."""
        ends = _cumulative(blocks)
        prompt = priming + (ends[-1] if ends else 0)
        marks = [i for i, b in enumerate(blocks) if b.breakpoint] if breakpoints else list(range(len(blocks)))
        now = self.clock()
        with self._lock:
            self._expire(now)
            hit = self._longest_hit(blocks, marks, namespace, breakpoints)
            read = ends[hit] if hit is not None else 0
            if read < self.min_tokens:
                read, hit = 0, None
            if granularity > 1 and read:
                read = self.min_tokens + (read - self.min_tokens) // granularity * granularity
            if hit is not None:
                self._touch((namespace, blocks[hit].digest), now)
            written_to = 0
            for i in marks:
                if ends[i] >= self.min_tokens:
                    self._touch((namespace, blocks[i].digest), now)
                    written_to = max(written_to, ends[i])
        write = max(0, written_to - (ends[hit] if hit is not None else 0))
        return CacheUse(prompt, read, write, len(marks) if breakpoints else 0)

    # internals -----------------------------------------------------------------------------
    def _longest_hit(
        self, blocks: Sequence[PromptBlock], marks: Sequence[int], namespace: str, breakpoints: bool
    ) -> int | None:
        if not marks:
            return None
        if not breakpoints:
            candidates: Sequence[int] = range(len(blocks) - 1, -1, -1)
        else:  # at a breakpoint or up to `lookback` blocks before one, newest position first
            seen = {i for m in marks for i in range(max(0, m - self.lookback), m + 1)}
            candidates = sorted(seen, reverse=True)
        for i in candidates:
            if (namespace, blocks[i].digest) in self._entries:
                return i
        return None

    def _touch(self, key: tuple[str, str], now: float) -> None:
        self._entries[key] = now
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def _expire(self, now: float) -> None:
        while self._entries:
            key, last = next(iter(self._entries.items()))
            if now - last <= self.ttl:
                return
            del self._entries[key]


def _cumulative(blocks: Sequence[PromptBlock]) -> list[int]:
    ends, total = [], 0
    for b in blocks:
        total += b.tokens
        ends.append(total)
    return ends
