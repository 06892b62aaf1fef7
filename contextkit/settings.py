"""Settings from ``CONTEXTKIT_*`` variables (S12) and per-session ``Limits``.

Process defaults are read from the environment once per call of ``Limits.from_env`` and never
mutated; a session takes a ``Limits`` value (its own copy) and every override is local to it.

How the two combine (S12: per-session overrides win): a ``Limits(...)`` value remembers which fields
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
    """Per-session limits. ``None`` for ``context_window`` means "from litellm's model info".

    ``max_payload`` accepts bytes or a size string (``"128KB"``); it is normalised to bytes.
    """

    context_window: int | None = None
    max_payload: int | str | None = None
    max_recovery_attempts: int = 3
    max_token_escalations: int = 2
    emergency_keep_messages: int = 10
    nuclear_keep_messages: int = 4
    nuclear_message_cap: int = 4_000
    microcompact_truncate_turns: int = 2
    microcompact_summarize_turns: int = 4
    microcompact_head_chars: int = 2_000
    microcompact_tail_chars: int = 500
    microcompact_min_chars: int = 3_000
    tool_result_turn_budget: int = 200_000
    tool_result_max_chars: int = 20_000
    assistant_cap_level1: int = 5_000
    budget_ratio: float = 0.60
    preflight_ratio: float = 0.85
    preflight_budget_ratio: float = 0.40
    min_keep_recent: int = 8
    # Pressure-gated rewrites (issue 14; contextkit/policy/pressure.py): read dedup and microcompact
    # act only when the request reaches `pressure_trigger` of the window or the cap, never touch the
    # last `keep_tool_results` tool results, and when they act they go down to `pressure_target` and
    # must free at least `clear_at_least` (shares of the limit), so one prompt-cache break buys many
    # append-only requests. pressure_trigger=0 restores rewriting on every request.
    pressure_trigger: float = 0.60
    pressure_target: float = 0.40
    keep_tool_results: int = 1
    clear_at_least: float = 0.10
    # Outputs too big to enter whole (over tool_result_max_chars) enter as a head+tail preview of
    # `tool_result_preview_share` of the request limit (>= 1,000 chars, <= the usual 5,000; 0 = always
    # the usual), and from `excerpt_trigger` such previews (not the kept ones) become one-liners; whole
    # results wait for pressure_trigger. Why (cached prompts are billed on every request): pressure.py.
    excerpt_trigger: float = 0.30
    tool_result_preview_share: float = 0.02
    compact_model: str | None = None
    request_timeout: float = 120.0
    summary_timeout: float = 600.0
    max_retries: int = 2  # transient / rate-limit retries (ours; the SDK's own are disabled)
    retry_backoff: float = 0.5
    cap_probe_turns: int = 8  # clean turns after which a learned cap is raised a quarter (0 = never)
    probe_configured_cap: bool = False  # also probe a configured max_payload upwards

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
        """These limits' explicit fields over the ``CONTEXTKIT_*`` process defaults (S12); ``self``
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
