"""The provider engine (``Session(..., context_engine="provider")``): the model's own server-side
context editing, mirrored in the local history.

On Anthropic's API every request carries ``context_management`` with one
``clear_tool_uses_20250919`` edit (litellm adds the ``context-management-2025-06-27`` beta header
for it): above 100,000 input tokens the server clears the oldest tool results, keeps the 5 newest
tool uses, and only when that frees at least 20,000 tokens. The server edits its copy only: the
next request would bring the cleared results back, and the server would clear them again. So when
an answer reports applied edits, the local history does what the server did - every tool result
but the 5 newest becomes a stub whose original is archived and recallable (a JSON answer reports the
edits in the message; a stream on its final ``message_delta`` event, which ``backend`` keeps because
litellm's stream parser drops it; both end up in ``ModelReply.context_edits``) - and:

- a ``ProviderEditEvent`` and a ``provider_clearing`` notice (event and status line) say how many
  edits, results and tokens the provider cleared (the dashboard's gauge shows the totals); ``SessionStats.provider_edits`` / ``provider_cleared_results`` /
  ``provider_cleared_tokens`` add them up;
- the next cache write is counted as an expected rebuild (``expected_cache_rebuilds``, a
  ``cache_rebuild`` notice): the edit changed the prompt, so the provider writes its cache again -
  a cost the edit chose, not a break.

Providers without an equivalent ignore the option; the session says so once.
"""

from __future__ import annotations

from typing import Any

from contextkit.events import ProviderEditEvent
from contextkit.limits.context import FlowContext, emit_history, measure
from contextkit.policy.clearing import ClearingConfig, clear_tool_uses

EDIT_TYPE = "clear_tool_uses_20250919"
TRIGGER_TOKENS = 100_000
KEEP_TOOL_USES = 5
CLEAR_AT_LEAST_TOKENS = 20_000
CONTEXT_MANAGEMENT = {
    "edits": [
        {
            "type": EDIT_TYPE,
            "trigger": {"type": "input_tokens", "value": TRIGGER_TOKENS},
            "keep": {"type": "tool_uses", "value": KEEP_TOOL_USES},
            "clear_at_least": {"type": "input_tokens", "value": CLEAR_AT_LEAST_TOKENS},
        }
    ]
}


def supports_provider_edits(model: str) -> bool:
    """Anthropic's own API (``anthropic/...``): the one provider with server-side tool-result clearing."""
    return model.startswith("anthropic/")


def count_rebuild(ctx: FlowContext, cache_write_tokens: int) -> None:
    """The first cache write after a provider edit is the rebuild that edit caused."""
    if ctx.expect_rebuild and cache_write_tokens > 0:
        ctx.state.stats.expected_cache_rebuilds += 1
        ctx.expect_rebuild = False
        ctx.notify(
            "cache_rebuild",
            f"the provider wrote its prompt cache again ({cache_write_tokens:,} tokens) after its context edit: "
            "an expected rebuild, not a cache break",
            "info",
        )


def mirror(ctx: FlowContext, edits: tuple[dict[str, Any], ...]) -> None:
    """The provider applied ``edits``: make the local history what the server made of it."""
    st = ctx.state
    cleared = sum(int(e.get("cleared_tool_uses") or 0) for e in edits)
    tokens = sum(int(e.get("cleared_input_tokens") or 0) for e in edits)
    st.stats.provider_edits += len(edits)
    st.stats.provider_cleared_results += cleared
    st.stats.provider_cleared_tokens += tokens
    config = ClearingConfig(trigger=0, keep=KEEP_TOOL_USES)
    history, report = clear_tool_uses(
        st.history, archive=ctx.archive, count_tokens=lambda msgs: measure(ctx, msgs).tokens, config=config
    )
    if report.applied:
        st.history = history
        emit_history(ctx, "provider_clearing")
    ctx.expect_rebuild = True
    ctx.events.append(
        ProviderEditEvent(session_id=st.session_id, turn=st.turn, edits=len(edits), cleared_results=cleared,
                          cleared_tokens=tokens, stubs=report.cleared)
    )  # fmt: skip
    ctx.notify(
        "provider_clearing",
        f"the provider cleared {cleared} tool result{'s' if cleared != 1 else ''} ({tokens:,} tokens) server-side "
        f"in {len(edits)} edit{'s' if len(edits) != 1 else ''}; the local history mirrors it: "
        f"{report.cleared} stub{'s' if report.cleared != 1 else ''}, originals archived (recall their markers)",
        "info",
    )
