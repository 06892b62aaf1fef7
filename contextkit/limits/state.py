"""Per-session mutable state and counters. Owned by one Session; never shared or process-wide."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from contextkit.compaction.types import renamed_stats
from contextkit.limits.evidence import EvidenceBook
from contextkit.messages import Message
from contextkit.settings import Limits

PAYLOAD_NOTICE_MARKER = "[SYSTEM NOTICE - PAYLOAD LIMIT HIT]"
PAYLOAD_NOTICE = (
    PAYLOAD_NOTICE_MARKER + " A proxy/gateway rejected the previous request because of its body size. The history "
    "was compacted to recover. Going forward: (1) when reading files, prefer targeted reads with line ranges instead "
    "of whole files; (2) prefer grep with specific patterns over full-file reads; (3) if you read a large file before, "
    "recall the archived original with @recall <<ccr:KEY>> or re-read specific ranges instead of repeating the read; "
    "(4) summarize findings incrementally instead of accumulating raw tool output."
)
# the same notice for a chat without tools: no advice about file reads the model cannot make
PAYLOAD_NOTICE_CHAT = (
    PAYLOAD_NOTICE_MARKER + " A proxy/gateway rejected the previous request because of its body size. The history "
    "was compacted to recover; what was removed is archived and can be brought back with @recall <<ccr:KEY>>. "
    "Going forward: keep answers focused, refer back to earlier material instead of repeating it, and summarize "
    "long material incrementally."
)
CONTINUATION = (
    "Your response was cut off at the token limit. Resume DIRECTLY from where you stopped - do not repeat any content."
)
INTERRUPTED = (
    "Your response was cut off by a connection error. Resume DIRECTLY from where you stopped - do not repeat any "
    "content."
)


@dataclass
class SessionStats:
    """Counters persisted with the session (saved by ``Session.save``, restored by ``Session.load``)."""

    requests: int = 0
    failures_by_kind: dict[str, int] = field(default_factory=dict)
    recoveries_by_level: dict[str, int] = field(default_factory=dict)  # recovery ladder level ("1".."3") -> count
    compactions: int = 0
    truncation_falls: int = 0  # compactions that needed the truncation stage (the last resort)
    summary_calls: int = 0
    summarizer_prompt_tokens: int = 0
    summarizer_completion_tokens: int = 0
    summarizer_cost: float = 0.0
    bytes_sent: int = 0
    tokens_sent: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    cached_prompt_tokens: int = 0  # prompt tokens the provider served from its prompt cache
    cache_write_tokens: int = 0
    cache_breaks: int = 0  # requests whose previous request body was not a prefix (the prompt cache was lost)
    retries: int = 0
    escalations: int = 0
    tool_calls: int = 0
    provider_edits: int = 0  # server-side context edits the provider applied (Session(context_engine="provider"))
    provider_cleared_results: int = 0  # tool results those edits cleared
    provider_cleared_tokens: int = 0  # input tokens they freed, as the provider reported
    expected_cache_rebuilds: int = 0  # cache writes that followed a provider edit (a rebuild it caused, not a break)

    @property
    def cached_share(self) -> float | None:
        """Share of prompt tokens served from the provider's prompt cache (None before any reply)."""
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else None

    def to_dict(self) -> dict[str, Any]:
        """The counters, plus ``cached_share`` (derived; ignored by ``from_dict``)."""
        return asdict(self) | {"cached_share": self.cached_share}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionStats:
        """Counters from ``to_dict`` output; older saved sessions' ``level3_falls`` is read as ``truncation_falls``."""
        known = {k: v for k, v in renamed_stats(data).items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def count_failure(self, kind: str) -> None:
        self.failures_by_kind[kind] = self.failures_by_kind.get(kind, 0) + 1

    def count_recovery(self, level: int) -> None:
        key = str(level)
        self.recoveries_by_level[key] = self.recoveries_by_level.get(key, 0) + 1


@dataclass(frozen=True)
class Fact:
    """A self-standing fact a turn met (kept when the turn fails): ``accepted`` (a body went through),
    ``rejected`` (a 413 / 431; ``value`` is the cap it taught), ``window`` (the provider stated it),
    ``content`` (a firewall page refused the request's content: no excerpt test at that endpoint)."""

    what: str
    endpoint: str
    nbytes: int = 0
    tokens: int = 0
    how: str = ""
    value: int | None = None


@dataclass(frozen=True)
class LimitsSnapshot:
    """The limits and evidence at the start of a turn (what a failed turn returns to)."""

    cap: int | None
    cap_source: str | None
    context_window: int
    window_source: str
    evidence: EvidenceBook
    clean_turns: int


@dataclass
class SessionState:
    """Everything the turn flow reads and changes. Session-local by construction."""

    model: str
    session_id: str
    limits: Limits
    context_window: int
    history: list[Message] = field(default_factory=list)
    cap: int | None = None
    cap_source: str | None = None
    turn_budget: int = 200_000
    per_result_budget: int = 20_000
    size_warned: bool = False
    stats: SessionStats = field(default_factory=SessionStats)
    max_tokens: int | None = None
    turns: int = 0  # user turns started (event turn numbers)
    window_source: str = "model"  # configured | model | assumed | learned
    base_window: int = 0  # the window before anything was learned (what reset_limits restores)
    base_window_source: str = "model"
    evidence: EvidenceBook = field(default_factory=EvidenceBook)
    clean_turns: int = 0  # successful turns since the last size failure or limit change
    window_announced: bool = False
    turn_facts: list[Fact] = field(default_factory=list)  # self-standing facts of the turn in progress
    # a size reading of a refusal that states no size is being tested: the newest message stays whole
    # (an excerpt that cut a blocked line would "confirm" a size limit that is not there)
    keep_newest_whole: bool = False
    # the provider counts the output a request asks for (max_tokens) against the window (vLLM, TGI):
    # learned from an overflow that says so; a request then reserves its max_tokens
    window_counts_output: bool = False
    asked_output: int = 0  # max_tokens of the request being sent (0: none asked)

    @classmethod
    def create(
        cls, model: str, session_id: str, limits: Limits, context_window: int, *, window_source: str = "model"
    ) -> SessionState:
        cap = limits.payload_cap
        return cls(
            model=model,
            session_id=session_id,
            limits=limits,
            context_window=context_window,
            cap=cap,
            cap_source="configured" if cap else None,
            turn_budget=limits.tool_result_turn_budget,
            per_result_budget=limits.tool_result_max_chars,
            window_source=window_source,
            base_window=context_window,
            base_window_source=window_source,
        )

    @property
    def turn(self) -> int:
        """The user-turn count: what every event's ``turn`` carries."""
        return self.turns

    @property
    def budgets_halved(self) -> bool:
        return (self.turn_budget, self.per_result_budget) != (
            self.limits.tool_result_turn_budget,
            self.limits.tool_result_max_chars,
        )

    def has_payload_notice(self) -> bool:
        return any(PAYLOAD_NOTICE_MARKER in m.content for m in self.history)
