"""Plain-language names and explanations for everything the panels show (stdlib only).

A student reading a projected dashboard sees "requests the gateway or provider refused", not
``failures_by_kind``; hovering any number shows what it counts and why it matters. Every
``SessionStats`` field has an entry (a test checks), so a new counter cannot appear unexplained.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The recovery ladder's levels: what each does to the history after a refusal about size.
LEVELS: dict[int, str] = {
    1: "level 1: halve the tool-result budgets",
    2: "level 2: emergency truncation",
    3: "level 3: nuclear truncation",
}
# What each level does, in the words of notebook 02's table (the tooltips add it to the name).
LEVEL_HELP: dict[int, str] = {
    1: "for this recovery episode; also repair tool-call pairing and cap long assistant messages",
    2: "keep the system prompt and the last 10 messages",
    3: "keep the last 4 messages, each capped at 4,000 chars",
}

# The compaction pipeline's stages (``CompactionEvent.stage``) -> (label, tooltip).
STAGES: dict[str, tuple[str, str]] = {
    "trim": ("trim", "Rewrites without a model call: old reasoning, repeated reads and big old tool output."),
    "summary": ("summary", "A model summarizes the oldest part of the conversation."),
    "truncation": ("truncation", "The last resort: old messages are dropped, else the biggest one is cut."),
}

# SessionStats field -> (label, tooltip)
STATS: dict[str, tuple[str, str]] = {
    "requests": ("requests sent", "Every request sent to the model, including ones that were refused and retried."),
    "failures_by_kind": (
        "requests refused, by reason",
        "Requests the gateway or the provider refused, grouped by what the error said "
        "(e.g. a firewall page, 'payload too large', 'context window exceeded').",
    ),
    "recoveries_by_level": (
        "recovery steps, by level",
        "After a refusal about size the session shrank the history and tried again, one level at a time: "
        + "; ".join(f"{LEVELS[n]} ({LEVEL_HELP[n]})" for n in LEVELS)
        + ". Everything cut is archived first.",
    ),
    "compactions": (
        "times the history was compacted",
        "Times the session shrank the history before sending because it was close to a limit (or you asked).",
    ),
    "truncation_falls": (
        "times the session had to cut messages",
        "Compactions that had to use the last resort (the truncation stage): drop old messages or cut one huge "
        "message. Everything cut is archived first and can be recalled.",
    ),
    "summary_calls": (
        "summaries written",
        "Times a model was asked to summarize old messages (the summary stage). Each is an extra model call.",
    ),
    "summarizer_prompt_tokens": (
        "tokens read by the summarizer",
        "Input tokens of all summary calls: the old messages the summarizer had to read.",
    ),
    "summarizer_completion_tokens": (
        "tokens written by the summarizer",
        "Output tokens of all summary calls: the length of the summaries.",
    ),
    "summarizer_cost": ("cost of summaries (USD)", "What the summary calls cost at the model's listed prices."),
    "bytes_sent": (
        "bytes sent in total",
        "The size of every request body sent, added up: what gateways and proxies count.",
    ),
    "tokens_sent": ("tokens sent in total", "The tokens of every request sent, added up: what the model counts."),
    "prompt_tokens": ("input tokens billed", "Input tokens the provider reported for accepted requests."),
    "completion_tokens": ("output tokens billed", "Tokens the model wrote in its answers."),
    "cost": (
        "cost of the conversation (USD)",
        "What the accepted requests cost at the model's listed prices (with cache discounts when known).",
    ),
    "retries": (
        "retries after a temporary error",
        "Requests repeated after a rate limit or a network hiccup; the history was not changed.",
    ),
    "escalations": (
        "answers cut off and continued",
        "Times an answer hit the output-token limit and the session asked the model to continue.",
    ),
    "tool_calls": ("tool calls run", "Times the model asked for a tool (read a file, grep, …) and the session ran it."),
    "cached_prompt_tokens": (
        "input tokens read from the prompt cache",
        "Input tokens the provider did not have to process again because the request started like an earlier "
        "one; they are billed at a discount.",
    ),
    "cache_write_tokens": (
        "input tokens written to the prompt cache",
        "Input tokens the provider stored for later requests (some providers bill the writing at a premium).",
    ),
    "cache_breaks": (
        "times the prompt cache was lost",
        "Requests that did not start like the request before (e.g. after a compaction), so the provider "
        "could not reuse its cached prompt.",
    ),
    "provider_edits": (
        "context edits the provider made",
        "Times the provider itself cleared old context on its side (Session(context_engine='provider')).",
    ),
    "provider_cleared_results": (
        "tool results the provider cleared",
        "Tool results those provider-side edits replaced; the local history mirrors them as stubs, originals archived.",
    ),
    "provider_cleared_tokens": (
        "input tokens the provider's edits freed",
        "Input tokens the provider reported its own context edits saved.",
    ),
    "expected_cache_rebuilds": (
        "prompt cache rebuilds after a provider edit",
        "Cache writes that followed a provider-side edit: a rebuild the edit caused, not a cache break.",
    ),
    "cached_share": (
        "share of input read from the cache",
        "Cached input tokens divided by all input tokens billed: the higher, the cheaper and faster.",
    ),
}

PHASES: dict[str, tuple[str, str]] = {
    "start": ("compaction started", "The history was over its budget, so compaction began."),
    "trim": ("dropped old reasoning", "Trim stage: removes the model's old private reasoning; no model call."),
    "dedup": ("dropped repeated file reads", "Trim stage: when a file was read twice, the older copy is replaced."),
    "microcompact": (
        "shortened old tool output",
        "Trim stage: old tool results become a preview (head and tail), then a one-line pointer to the archive.",
    ),
    "clearing": ("cleared old tool results", "Trim stage: old tool results are replaced by a pointer to the archive."),
    "aging": (
        "aged messages into stubs",
        "Trim stage: a message sent with age_out_after=N became a one-line stub N turns later; the original is archived.",
    ),
    "budget": (
        "capped big tool results",
        "Trim stage: a tool result over its size budget is cut; the rest is archived.",
    ),
    "verbatim": (
        "capped pinned messages",
        "Trim stage: messages marked to keep verbatim were over their own budget; the originals are archived.",
    ),
    "summarize": (
        "summarized old messages",
        "Summary stage: a model summarizes the oldest part of the conversation; the originals are archived.",
    ),
    "truncate": (
        "dropped old messages",
        "Truncation stage (last resort): the oldest messages are dropped, the recent ones kept; all archived first.",
    ),
    "shrink": (
        "cut a huge message",
        "Truncation stage (last resort): one message too big for the limit is cut to fit; the original is archived.",
    ),
    "done": ("compaction finished", "The compaction ended; sizes before and after are shown."),
}

TRIGGERS: dict[str, str] = {
    "auto": "before sending (the history was over its budget)",
    "turn": "between turns (old tool output aged)",
    "recovery": "to recover from a refused request",
    "manual": "because you called compact()",
}

FAILURES: dict[str, str] = {
    "context_overflow": "the model's context window was exceeded",
    "payload_too_large": "the gateway refused the body as too large (413)",
    "waf_rejection": "a firewall/proxy page refused the request (e.g. Cloudflare 403)",
    "likely_payload": "the connection dropped, most likely because of the body size",
    "output_truncated": "the answer hit the output-token limit",
    "rate_limit": "rate limited",
    "auth": "authentication failed",
    "transient": "a temporary network or server error",
    "other": "an unclassified error",
}


def stat_label(key: str) -> tuple[str, str]:
    """(label, tooltip) of a stats field; unknown fields fall back to a readable form of the key."""
    return STATS.get(key, (key.replace("_", " "), "A session counter."))


def phase_label(phase: str) -> str:
    return PHASES.get(phase, (phase, ""))[0]


def phase_help(phase: str) -> str:
    return PHASES.get(phase, ("", phase))[1]


def failure_label(kind: str | None) -> str:
    return FAILURES.get(kind or "", (kind or "").replace("_", " "))


def level_label(level: int) -> str:
    """A recovery level in words (``level 2: emergency truncation``)."""
    return LEVELS.get(level, f"level {level}")


def stage_label(stage: str) -> str:
    """A compaction stage's name as the panels show it (``summary``); "" for none."""
    return STAGES.get(stage, (stage, ""))[0]


def stat_value(key: str, value: Any) -> str:
    """Values as a reader expects them: counts by reason in plain words, money with a $ sign."""
    if isinstance(value, Mapping):
        if not value:
            return "none"
        if key == "failures_by_kind":
            return ", ".join(f"{n} × {failure_label(str(k))}" for k, v in value.items() for n in [v])
        if key == "recoveries_by_level":
            steps = sum(int(v) for v in value.values())
            each = ", ".join(f"{v} × level {k}" for k, v in sorted(value.items()))
            return f"{steps} step{'' if steps == 1 else 's'} ({each})"
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    if key.endswith("_share"):
        return "not reported" if value is None else f"{value:.0%}"
    if isinstance(value, float):
        return f"${value:.4f}" if "cost" in key else f"{value:.4g}"
    if isinstance(value, int) and "bytes" in key:
        from contextkit.sizing import format_size

        return format_size(value)
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
