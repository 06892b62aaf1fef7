"""Simulator settings and the request record (plain values, no IO)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from contextkit.errors import ConfigError
from contextkit.sim import faults
from contextkit.sim.model import AgentScript
from contextkit.sim.replay import ReplayScript
from contextkit.sizing import parse_size

SUMMARY_MODES = ("extract", "refuse", "short", "error_text", "fail", "timeout")
FAULT_KINDS = (
    "overflow", "413", "413-html", "waf403", "bedrock403", "drop", "429", "500", "503", "model_gone",
    "timeout", "auth401", "auth403", "stream_drop", "stream_error", "empty_stream", "length", "400", "422",
    "empty502",
)  # fmt: skip
BODY_FAULTS = ("400", "422")  # answered with the body given to fail_next(kind, body=...)
FaultBody = str | Mapping[str, Any] | None  # the body of a "400" / "422" fault (see fail_next)
STREAM_FAULTS = ("stream_drop", "stream_error", "empty_stream")  # empty_stream: 200, an event stream with no events
SIM_MODEL = "sim-model"
REFUSAL = "I'm sorry, but I can't help with summarizing this conversation."
SHORT_SUMMARY = "## Summary\n- ok"
ERROR_TEXT = "Error: the summarization backend failed with an internal error. Please try again later."


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the simulator saw it. ``bytes`` is the exact body length received."""

    seq: int
    route: str
    path: str
    bytes: int
    tokens: int
    status: int
    accepted: bool
    reason: str
    stream: bool
    kind: str
    body_sha256: str
    model: str
    ts: float
    cached_tokens: int = 0  # prompt tokens read from the simulated prompt cache (sim/cache.py)
    cache_write_tokens: int = 0  # prompt tokens newly written to it
    completion_tokens: int = 0  # reply tokens billed (as the usage object reports them)


@dataclass(frozen=True)
class SimConfig:
    context_window: int | None = None
    overflow_style: str = "openai"
    max_body: int | None = None
    reject_with: str = "413"
    max_output_tokens: int | None = None
    latency: float = 0.0
    summary_mode: str = "extract"
    timeout_sleep: float = 5.0
    agent: AgentScript | ReplayScript | None = None  # a replay answers every turn request from its recording
    # llama.cpp's server answers a streamed request that overflows its context with 200 and an empty
    # event stream (no chunk, no finish reason, no error); non-streamed requests still get the 400.
    empty_stream_on_overflow: bool = False
    # A deployment that refuses continuation requests (the prompt asking the model to resume a cut-off
    # answer) with a 400: a streamed answer interrupted mid-way can then not be continued.
    refuse_continuation: bool = False
    # a firewall content rule: a body containing this text is refused with a 403 page (ModSecurity's
    # CRS on "cat /etc/passwd"); block_style "apache" (the CRS default page) or "nginx"
    block_phrase: str | None = None
    block_style: str = "apache"
    retry_after: str = "0"  # the Retry-After header of a 429 fault: seconds or an HTTP-date
    # vLLM: the window counts the output the request asks for (prompt + max_tokens must fit)
    window_counts_output: bool = False
    prompt_cache: bool = True  # model a provider prefix cache and report it in usage (sim/cache.py)
    cache_min_tokens: int = 1024
    cache_ttl: float = 300.0

    def checked(self) -> SimConfig:
        """Validated and normalised copy (size strings become bytes)."""
        if self.overflow_style not in faults.OVERFLOW_STYLES:
            raise ConfigError(
                f"overflow_style {self.overflow_style!r} is unknown; use one of {', '.join(faults.OVERFLOW_STYLES)}"
            )
        if self.reject_with not in faults.REJECT_MODES:
            raise ConfigError(
                f"reject_with {self.reject_with!r} is unknown; use one of {', '.join(faults.REJECT_MODES)}"
            )
        if self.summary_mode not in SUMMARY_MODES:
            raise ConfigError(f"summary_mode {self.summary_mode!r} is unknown; use one of {', '.join(SUMMARY_MODES)}")
        for name in ("context_window", "max_output_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ConfigError(f"{name} must be a positive int (tokens) or None, got {value!r}")
        if (
            isinstance(self.cache_min_tokens, bool)
            or not isinstance(self.cache_min_tokens, int)
            or self.cache_min_tokens < 1
        ):
            raise ConfigError(f"cache_min_tokens must be a positive int (tokens), got {self.cache_min_tokens!r}")
        if self.cache_ttl < 0:
            raise ConfigError(f"cache_ttl must be >= 0 seconds, got {self.cache_ttl!r}")
        if self.latency < 0 or self.timeout_sleep < 0:
            raise ConfigError("latency and timeout_sleep must be >= 0 seconds")
        if self.agent is not None and not isinstance(self.agent, AgentScript | ReplayScript):
            raise ConfigError(f"agent must be an AgentScript, a ReplayScript or None, got {type(self.agent).__name__}")
        cap = None if self.max_body is None else parse_size(self.max_body, what="max_body")
        return replace(self, max_body=cap)


CONFIG_KEYS = tuple(f.name for f in fields(SimConfig))
