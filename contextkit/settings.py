"""Settings from ``CONTEXTKIT_*`` variables and per-session ``Limits``.

Process defaults are read from the environment once per call of ``Limits.from_env`` and never
mutated; a session takes a ``Limits`` value (its own copy) and every override is local to it.

How the two combine (per-session overrides win, so one session can be tuned without touching the
others or the environment): a ``Limits(...)`` value remembers which fields
were passed to it (``explicit_fields``). A session resolves its limits with ``limits.over_env()``:
the fields you set win, every other field comes from ``CONTEXTKIT_*`` (or the built-in default when
the variable is unset). ``Limits(max_payload="128KB")`` therefore keeps
``CONTEXTKIT_MAX_RECOVERY_ATTEMPTS=5`` from the environment.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from contextkit.errors import ConfigError
from contextkit.sizing import parse_size

ENV_PREFIX = "CONTEXTKIT_"
# litellm keyword arguments that name a limit contextkit owns: given to a Session they set it (the
# request timeout; our retries - the SDK's own stay off so every failure is classified and shown).
LIMIT_KWARGS = {
    "timeout": "request_timeout",
    "request_timeout": "request_timeout",
    "max_retries": "max_retries",
    "num_retries": "max_retries",
}


def _env_int(env: Mapping[str, str], name: str, default: int | None, *, minimum: int = 1) -> int | None:
    raw = env.get(ENV_PREFIX + name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(
            f"{ENV_PREFIX}{name}={raw!r} is not a whole number; set it to an integer >= {minimum} or unset it"
        ) from None
    if value < minimum:
        raise ConfigError(f"{ENV_PREFIX}{name}={raw!r} must be >= {minimum}; set a larger value or unset it")
    return value


_ZERO_OK = {
    "max_retries", "retry_backoff", "max_token_escalations", "cap_probe_turns",
    "pressure_trigger", "pressure_target", "keep_tool_results", "clear_at_least", "excerpt_trigger",
    "tool_result_preview_share",
}  # fmt: skip


@dataclass(frozen=True)
class Limits:
    """Per-session limits: every field says what it limits, its unit, its default and the
    ``CONTEXTKIT_*`` variable that sets it (if any).

    ``None`` for ``context_window`` means "from litellm's model info". ``max_payload`` accepts bytes
    or a size string (``"128KB"``); it is normalised to bytes. Shares (``*_ratio``, ``pressure_*``,
    ``clear_at_least``, ``excerpt_trigger``, ``tool_result_preview_share``) are between 0 and 1.
    """

    context_window: int | None = None
    """The model's context window, in tokens: what one request may hold. ``None`` takes it from
    litellm's model info; for a model litellm does not know, a window is assumed (and said once) and
    learned from the first overflow. Set by ``CONTEXTKIT_CONTEXT_WINDOW``. Default: ``None``."""

    max_payload: int | str | None = None
    """The payload cap: the largest request body, in bytes, that a proxy or gateway in front of the
    provider accepts. Bytes or a size string (``"128KB"``, ``"2.5MB"``; a bare number is MB),
    normalised to bytes. ``None``: no cap known, so one is learned from the first refusal about size.
    Set by ``CONTEXTKIT_MAX_PAYLOAD``. Default: ``None``."""

    max_recovery_attempts: int = 3
    """How many levels of the recovery ladder a request refused for its size may climb before the
    turn fails with ``RecoveryFailedError`` (the ladder has three levels; more attempts repeat level
    3). Set by ``CONTEXTKIT_MAX_RECOVERY_ATTEMPTS`` (at least 1). Default: ``3``."""

    max_token_escalations: int = 2
    """How many times an answer cut off at ``max_tokens`` is continued with a doubled ``max_tokens``
    (up to the model's output limit) before the partial answer is returned; 0: never. Set by
    ``CONTEXTKIT_MAX_TOKEN_ESCALATIONS``. Default: ``2``."""

    emergency_keep_messages: int = 10
    """Messages the truncation stage and recovery level 2 keep: the system prompt and the last this
    many messages (the newest user message and its tool calls are kept whatever the number says).
    Set by ``CONTEXTKIT_EMERGENCY_KEEP_MESSAGES``. Default: ``10``."""

    nuclear_keep_messages: int = 4
    """Messages recovery level 3 keeps besides the system prompt, each cut to
    ``nuclear_message_cap``; also the smallest request the floor diagnostic measures. No environment
    variable. Default: ``4``."""

    nuclear_message_cap: int = 4_000
    """Characters each kept non-system message is cut to at recovery level 3 (the original is archived
    first). No environment variable. Default: ``4_000``."""

    microcompact_truncate_turns: int = 2
    """Age, in assistant turns, at which microcompact turns a tool result of at least
    ``microcompact_min_chars`` into a head + tail preview. Set by
    ``CONTEXTKIT_MICROCOMPACT_TRUNCATE_TURNS``. Default: ``2``."""

    microcompact_summarize_turns: int = 4
    """Age, in assistant turns, at which microcompact turns an old tool result (or its preview) into a
    one-line stub; at least ``microcompact_truncate_turns``. Set by
    ``CONTEXTKIT_MICROCOMPACT_SUMMARIZE_TURNS``. Default: ``4``."""

    microcompact_head_chars: int = 2_000
    """Characters of the start of a tool result that a microcompact preview keeps. No environment
    variable. Default: ``2_000``."""

    microcompact_tail_chars: int = 500
    """Characters of the end of a tool result that a microcompact preview keeps. No environment
    variable. Default: ``500``."""

    microcompact_min_chars: int = 3_000
    """The smallest tool result, in characters, that microcompact shortens: a smaller one would not be
    worth the stub. No environment variable. Default: ``3_000``."""

    tool_result_turn_budget: int = 200_000
    """Characters all tool results of one assistant turn may take together; beyond it the largest are
    cut to a head + tail preview (originals archived). Halved for a recovery episode. No environment
    variable. Default: ``200_000``."""

    tool_result_max_chars: int = 20_000
    """Characters one tool result may take; a longer one enters the history as a preview (original
    archived). Halved for a recovery episode. No environment variable. Default: ``20_000``."""

    assistant_cap_level1: int = 5_000
    """Characters recovery level 1 cuts each long assistant message to (original archived). No
    environment variable. Default: ``5_000``."""

    budget_ratio: float = 0.60
    """Share of the context window the history may fill before automatic compaction runs, and the size
    it compacts down to (converted to bytes with the history's own bytes per token, and never above
    70% of the payload cap). No environment variable. Default: ``0.60``."""

    preflight_ratio: float = 0.85
    """Share of the payload cap at which pre-flight compacts the history (to
    ``preflight_budget_ratio``) before a request is sent; a newest message that alone passes this
    share of the cap or of the window is sent as an excerpt. No environment variable.
    Default: ``0.85``."""

    preflight_budget_ratio: float = 0.40
    """Share of the context window a pre-flight compaction aims for (instead of ``budget_ratio``), so
    the next requests have room before the cap is near again. No environment variable.
    Default: ``0.40``."""

    min_keep_recent: int = 8
    """Messages at the end of the history the summary stage never summarizes (the conversation the
    model is in the middle of). No environment variable. Default: ``8``."""

    pressure_trigger: float = 0.60
    """Share of the window or the payload cap (whichever is nearer) at which read dedup and
    microcompact rewrite old tool results. Below it the history is append-only and the provider's
    prompt cache survives; 0: rewrite on every request. No environment variable. Default: ``0.60``."""

    pressure_target: float = 0.25
    """Share of the window or cap a pressure pass brings the request down to, in one step, so one
    prompt-cache break buys many append-only requests; at most ``pressure_trigger``. An automatic
    compaction that comes to truncating cuts down to the same share. No environment variable.
    Default: ``0.25``: on the recorded agent runs of ``benchmarks/traces.py``, 0.40 billed 2-5% more
    input for 0.3-4 points more of the names the agent used again kept verbatim."""

    keep_tool_results: int = 1
    """The newest tool results a pressure pass never rewrites (the model is likely still reading
    them). No environment variable. Default: ``1``."""

    clear_at_least: float = 0.10
    """Share of the limit a pressure pass must free to be applied (a cache break must be worth it);
    a request at or above a hard limit is rewritten whatever it frees. Compaction's no-LLM stages
    are enough only when they leave this share of the pass's budget free (else the pass goes on to
    the summary stage). No environment variable. Default: ``0.10``."""

    excerpt_trigger: float = 0.30
    """Share of the window or cap from which the previews of outputs too big to enter whole become
    one-liners (their originals stay in the archive); whole results wait for ``pressure_trigger``.
    No environment variable. Default: ``0.30``."""

    tool_result_preview_share: float = 0.02
    """Size of the preview an output over ``tool_result_max_chars`` enters as, as a share of the
    request limit in bytes (at least 1,000 characters, at most the usual 5,000); 0: always the usual
    preview. No environment variable. Default: ``0.02``."""

    compact_model: str | None = None
    """The litellm model string that writes summaries (a smaller, cheaper model than the session's,
    say); ``None``: the session's own model. Set by ``CONTEXTKIT_COMPACT_MODEL``. Default: ``None``."""

    request_timeout: float = 120.0
    """Seconds one model request may take before it counts as a failed (transient) attempt. Also set
    by the litellm keywords ``timeout`` / ``request_timeout`` given to ``Session``. No environment
    variable. Default: ``120.0``."""

    summary_timeout: float = 600.0
    """Seconds one summarizer call may take: generous, because a small local model can need minutes
    for a long segment, and a summary abandoned half-way is paid for and lost. No environment
    variable. Default: ``600.0``."""

    context_engine_timeout: float = 180.0
    """Seconds an external context engine (``Session(context_engine="mcp:...")``) may take to answer
    one ``context_compact`` call; after that the built-in summarizer writes that compaction's
    summary. No environment variable. Default: ``180.0``."""

    max_retries: int = 2
    """Retries of a request after a transient error or a rate limit, with the history unchanged (these
    are contextkit's retries: the SDK's own are disabled so every failure is classified and shown).
    Also set by the litellm keywords ``max_retries`` / ``num_retries`` given to ``Session``. No
    environment variable. Default: ``2``."""

    retry_backoff: float = 0.5
    """Seconds before the first retry; each further retry doubles it, with jitter in its upper half so
    clients that failed together do not retry together (a provider's ``Retry-After`` wins). No
    environment variable. Default: ``0.5``."""

    max_retry_wait: float = 60.0
    """The longest wait, in seconds, before one retry: a provider's ``Retry-After`` (seconds or an
    HTTP-date) is honoured up to this; one that asks for longer fails the turn at once with a
    message saying how long the provider asked for (sleeping less would only be refused again). No
    environment variable. Default: ``60.0``."""

    cap_probe_turns: int = 8
    """Turns without a size failure after which a learned payload cap is raised a quarter (never to a
    size the endpoint refused), so one early refusal does not cap the session for good; 0: never. No
    environment variable. Default: ``8``."""

    probe_configured_cap: bool = False
    """Raise a configured ``max_payload`` the same way as a learned one (for a cap set too low on
    purpose or by guess). No environment variable. Default: ``False``."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Limits:
        # Remember which fields the caller set, so they can win over CONTEXTKIT_* and the rest not.
        self = super().__new__(cls)
        names = [f.name for f in fields(cls)]
        object.__setattr__(self, "_explicit", frozenset(names[: len(args)]) | frozenset(kwargs))
        return self

    @property
    def explicit_fields(self) -> frozenset[str]:
        """The fields passed to the constructor (or to ``with_overrides``); the others are defaults."""
        return frozenset(getattr(self, "_explicit", ()))

    def over_env(self, env: Mapping[str, str] | None = None) -> Limits:
        """These limits' explicit fields over the ``CONTEXTKIT_*`` process defaults; ``self``
        when the environment changes nothing."""
        resolved = Limits.from_env(env, _keep_none=True, **{name: getattr(self, name) for name in self.explicit_fields})
        return self if resolved == self else resolved

    def __post_init__(self) -> None:
        if self.max_payload is not None and not isinstance(self.max_payload, int):
            object.__setattr__(self, "max_payload", parse_size(self.max_payload, what="max_payload"))
        if isinstance(self.max_payload, int) and (isinstance(self.max_payload, bool) or self.max_payload <= 0):
            raise ConfigError(f"max_payload must be a positive size such as '128KB', got {self.max_payload!r}")
        window = self.context_window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
            raise ConfigError(f"context_window must be a positive whole number of tokens, got {window!r}")
        if self.compact_model is not None and not isinstance(self.compact_model, str):
            raise ConfigError(f"compact_model must be a litellm model string or None, got {self.compact_model!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in {"context_window", "max_payload", "compact_model"}:
                continue
            if f.name == "probe_configured_cap":
                if not isinstance(value, bool):
                    raise ConfigError(f"Limits.probe_configured_cap must be True or False, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ConfigError(f"Limits.{f.name} must be a finite number, got {value!r}")
            if value < 0 or (value == 0 and f.name not in _ZERO_OK):
                least = "zero or more" if f.name in _ZERO_OK else "greater than zero"
                raise ConfigError(f"Limits.{f.name} must be {least}, got {value!r}")
        shares = (
            "pressure_trigger",
            "pressure_target",
            "clear_at_least",
            "excerpt_trigger",
            "tool_result_preview_share",
        )
        for name in shares:
            if getattr(self, name) > 1:
                raise ConfigError(f"Limits.{name} is a share of the window or cap (0-1), got {getattr(self, name)!r}")
        if not isinstance(self.keep_tool_results, int):
            raise ConfigError(f"Limits.keep_tool_results must be a whole number, got {self.keep_tool_results!r}")
        if self.pressure_trigger and self.pressure_target > self.pressure_trigger:
            raise ConfigError(
                f"Limits.pressure_target ({self.pressure_target}) must not exceed pressure_trigger "
                f"({self.pressure_trigger}): a pass frees down to the target once the trigger is reached"
            )
        if self.microcompact_summarize_turns < self.microcompact_truncate_turns:
            raise ConfigError(
                "microcompact_summarize_turns must be >= microcompact_truncate_turns "
                f"(got {self.microcompact_summarize_turns} < {self.microcompact_truncate_turns})"
            )

    @property
    def payload_cap(self) -> int | None:
        return self.max_payload if isinstance(self.max_payload, int) else None

    def with_overrides(self, **changes: Any) -> Limits:
        changes = {k: v for k, v in changes.items() if v is not None}
        new = replace(self, **changes)
        object.__setattr__(new, "_explicit", self.explicit_fields | frozenset(changes))
        return new

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, _keep_none: bool = False, **overrides: Any) -> Limits:
        """Process defaults from ``CONTEXTKIT_*`` variables, then ``overrides`` (which win; ``None``
        overrides are ignored). The result's ``explicit_fields`` are the overrides only."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        window = _env_int(env, "CONTEXT_WINDOW", None)
        if window is not None:
            values["context_window"] = window
        payload = env.get(ENV_PREFIX + "MAX_PAYLOAD")
        if payload is not None and payload.strip():
            values["max_payload"] = parse_size(payload, what=f"{ENV_PREFIX}MAX_PAYLOAD")
        for name, env_name, minimum in (
            ("max_recovery_attempts", "MAX_RECOVERY_ATTEMPTS", 1),
            ("max_token_escalations", "MAX_TOKEN_ESCALATIONS", 0),
            ("emergency_keep_messages", "EMERGENCY_KEEP_MESSAGES", 1),
            ("microcompact_truncate_turns", "MICROCOMPACT_TRUNCATE_TURNS", 1),
            ("microcompact_summarize_turns", "MICROCOMPACT_SUMMARIZE_TURNS", 1),
        ):
            value = _env_int(env, env_name, None, minimum=minimum)
            if value is not None:
                values[name] = value
        model = env.get(ENV_PREFIX + "COMPACT_MODEL")
        if model and model.strip():
            values["compact_model"] = model.strip()
        chosen = {k: v for k, v in overrides.items() if _keep_none or v is not None}
        values.update(chosen)
        limits = cls(**values)
        object.__setattr__(limits, "_explicit", frozenset(chosen))
        return limits


def archive_path_from_env(env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    value = env.get(ENV_PREFIX + "ARCHIVE")
    return value.strip() if value and value.strip() else None
