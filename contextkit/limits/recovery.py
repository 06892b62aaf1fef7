"""Recovery after a failure the evidence says is about size: learn the limit, check the floor,
climb one rung of the 3-level ladder, add the one-time payload notice. Changes only the session's
own state; a failure that is not about size never reaches this module."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from contextkit.errors import PayloadFloorError
from contextkit.events import RecoveryEvent
from contextkit.failures.classify import Failure, FailureKind
from contextkit.limits.context import Flow, FlowContext, emit_history, measure
from contextkit.limits.evidence import (
    STRAY_BELOW,
    Lesson,
    Verdict,
    excerpt_test_refused,
    gateway_how,
    is_self_standing,
    learned_cap,
    learned_window,
)
from contextkit.limits.floor import floor_measure, floor_text
from contextkit.limits.learning import halve_budgets, learn_cap, learn_window, note_fact, restore_budgets, set_cap
from contextkit.limits.preflight import compact_if_needed
from contextkit.limits.state import PAYLOAD_NOTICE, PAYLOAD_NOTICE_CHAT, Fact
from contextkit.messages import Message
from contextkit.policy.budgets import aggressive_level1
from contextkit.policy.truncate import emergency_truncate
from contextkit.sizing import Measure, format_size

KNOWN_LIMIT = "known_limit"  # RecoveryEvent.failure_kind of a request refused before sending


@dataclass
class Episode:
    """One recovery episode: the failures of a turn until a request goes through."""

    level: int = 0
    window_learned: bool = False
    waf_refused: int | None = None  # bytes of the smallest request a firewall page refused in this episode
    dropped: int | None = None  # bytes of the smallest request whose drop (or empty 5xx) was read as its size
    floor_whole: int = 0  # the smallest request with the newest message whole (a 403 page's size reading)
    # (cap, cap source) before an excerpt test set the cap: restored when the episode ends (None: no test)
    excerpt_prior: tuple[int | None, str | None] | None = None
    page_cap_before: tuple[int | None, str | None] | None = None  # (cap, source) before a page was first read as size


def weigh_size_reading(ctx: FlowContext, verdict: Verdict, sent: Measure, episode: Episode) -> Verdict:
    """A refusal that states no size (a firewall's 403 page) is size evidence only if a smaller
    request with the same new content can pass: the newest message stays whole until the smaller
    request answers. When the newest message alone keeps every request near the refused size, only
    an excerpt of it could get under, and an excerpt that passes cannot tell a size limit from a
    content rule on a line it left out. The excerpt is sent all the same when being wrong costs
    nothing the session relies on (``excerpt_test_refused``: the refusal is far above anything the
    endpoint took, and it has shown no content rule); the cap sized for it lasts for this recovery
    episode only (``end_episode``), the refused size stays known to fail. Otherwise the turn fails,
    saying both readings and the fix for each. A content verdict is noted as a fact about the
    endpoint (kept when the turn fails): no later excerpt test there."""
    if verdict.content:
        note_content_refusal(ctx)
        return verdict
    if not verdict.hypothesis:
        return verdict
    floor = floor_measure(ctx, excerpt_newest=False)
    only_excerpt = floor.bytes >= STRAY_BELOW * sent.bytes and floor_measure(ctx).bytes < sent.bytes
    if only_excerpt or episode.excerpt_prior is not None:
        # only an excerpt of the newest message could get under the refused size, or the excerpt was
        # refused too: a smaller one is cut from the original, on the same conditions (when nothing
        # can get under, the floor diagnostic says so and names what is too big)
        ev = ctx.evidence()
        size = format_size(sent.bytes)
        refused = excerpt_test_refused(ev, sent.bytes)
        if not refused:
            ctx.notify(
                "excerpt_test",
                f"the gateway refused a {size} request ({gateway_how(verdict.failure)}) with a page that states no "
                f"size; only an excerpt of your newest message can get under it, and the refusal is far above the "
                f"{format_size(ev.largest_accepted)} this endpoint accepted, so it is read as a size limit for this "
                "turn: the message is archived whole and sent as an excerpt the model can page through with recall "
                f"(the send limit sized for it lasts until the excerpt goes through; {size} stays known to fail)",
                "warning",
            )
            ctx.state.keep_newest_whole = False  # a smaller request with the message whole was refused too
            episode.floor_whole = 0
            return replace(verdict, excerpt_test=True)
        whole = (
            "the excerpt of your newest message was refused too"
            if episode.excerpt_prior is not None
            else f"no smaller request can keep your newest message whole (the smallest is {format_size(floor.bytes)})"
        )
        why = (
            f"the gateway refused a {size} request ({gateway_how(verdict.failure)}) with a page that states no size, "
            f"and {whole}; "
            f"an excerpt could not tell size from content because {refused}: most likely its firewall objects to the "
            "content (rephrase or remove what it blocks, such as a shell command or SQL-like text); if the gateway "
            f"does limit body size, set Limits(max_payload=...) below {size}"
        )
        return Verdict(Lesson.FAIL, replace(verdict.failure, kind=FailureKind.OTHER, reason=why), why)
    ctx.state.keep_newest_whole = True
    # the cap this test sets must hold the resend: the notice recovery adds, and 2% of the refused size for
    # what the floor's measure does not see (the output reservation, parameters); still below the refusal
    episode.floor_whole = min(sent.bytes - 1, floor.bytes + _notice_bytes(ctx) + sent.bytes // 50)
    return verdict


def _notice_bytes(ctx: FlowContext) -> int:
    """What the one-time payload notice recovery adds to the request (0 once the history has it): a cap
    set to the smallest request with the newest message whole must leave room for it, or the resend
    would be above the cap it was sized for."""
    if ctx.state.has_payload_notice():
        return 0
    has_tools = any(t.get("function", {}).get("name") != "recall" for t in ctx.tools)
    notice = Message.user(PAYLOAD_NOTICE if has_tools else PAYLOAD_NOTICE_CHAT, synthetic=True)
    return measure(ctx, [notice]).bytes - measure(ctx, []).bytes


def note_content_refusal(ctx: FlowContext) -> None:
    """The endpoint refused a request for its content: a fact a failed turn keeps."""
    st = ctx.state
    ctx.evidence().content_refused = True
    note_fact(ctx, Fact("content", st.model))


def end_episode(ctx: FlowContext, episode: Episode, evidence: str) -> None:
    """The episode's request went through: the tool-result budgets come back, and so does the cap an
    excerpt test set (it only sized the excerpt: a passing excerpt does not show the limit was size;
    the refused size stays known to fail)."""
    restore_budgets(ctx, evidence)
    if episode.excerpt_prior is not None:
        cap, source = episode.excerpt_prior
        episode.excerpt_prior = None
        ev = ctx.evidence()
        if cap is not None:
            cap = ev.cap_inside(cap)
        set_cap(
            ctx, cap, source="rollback",
            evidence=f"an excerpt went through, which does not show the refusal was about size; {ev.describe_interval()}",
        )  # fmt: skip
        ctx.state.cap_source = source


def record_recovery(
    ctx: FlowContext,
    outcome: str,
    *,
    level: int = 0,
    failure: Failure | None = None,
    before: Measure | None = None,
    after: Measure | None = None,
    keys: tuple[str, ...] = (),
    kind: str = "",
    reason: str = "",
) -> None:
    """Append one ``RecoveryEvent``: kind, level, sizes before/after, outcome (what the per-level
    analyses read)."""
    st = ctx.state
    ctx.events.append(
        RecoveryEvent(
            session_id=st.session_id,
            turn=st.turn,
            failure_kind=failure.kind.value if failure else kind,
            reason=failure.reason if failure else reason,
            level=level,
            attempt=level,
            outcome=outcome,
            bytes_before=before.bytes if before else 0,
            tokens_before=before.tokens if before else 0,
            messages_before=before.messages if before else 0,
            bytes_after=after.bytes if after else 0,
            tokens_after=after.tokens if after else 0,
            messages_after=after.messages if after else 0,
            archived_keys=keys,
        )
    )


def check_floor(ctx: FlowContext, failure: Failure, sent: Measure) -> int:
    """Fail fast when the smallest request recovery can make is as big as the rejected one (no rung
    could get it through, so climbing would only burn attempts on the same payload); returns that
    floor in bytes."""
    rejected = failure.rejected_bytes or sent.bytes
    floor = floor_measure(ctx)
    if floor.bytes >= rejected:
        record_recovery(ctx, "floor", failure=failure, before=sent)
        page = (
            f" with a {failure.status or 403} page that states no size (if its firewall objects to the content "
            "instead, rephrase or remove what it blocks)"
            if failure.kind == FailureKind.WAF_REJECTION
            else ""
        )
        raise PayloadFloorError(
            floor_text(ctx, f"The gateway rejected a {format_size(rejected)} request{page}", floor),
            base_bytes=floor.bytes,
            rejected_bytes=rejected,
            failure=failure,
        )
    base = measure(ctx, [m for m in ctx.state.history if m.role == "system"])
    if base.bytes >= rejected * 3 // 4:
        has_system = any(m.role == "system" for m in ctx.state.history)
        what = " and ".join(w for w, on in (("system prompt", has_system), ("tool schemas", bool(ctx.tools))) if on)
        ctx.notify(
            "floor_warning",
            f"{what or 'the request framing'} alone {'are' if ' and ' in what else 'is'} {format_size(base.bytes)} - "
            f"close to the gateway's rejection size ({format_size(rejected)}); consider fewer tools or a shorter "
            "system prompt",
            "warning",
        )
    return floor.bytes


def learn(ctx: FlowContext, verdict: Verdict, sent: Measure, episode: Episode) -> None:
    """What a size failure teaches: an overflow a token window, a gateway rejection a byte cap."""
    st = ctx.state
    failure = verdict.failure
    ev = ctx.evidence()
    if verdict.about_window:
        stated = failure.window_tokens
        overflowed = 0
        if stated is None or stated < sent.tokens:
            # our count agrees it overflowed: never send this many tokens again. (A stated window above
            # our count means the provider counts more, or reserves the output: the window is the lesson.)
            ev.overflowed(sent.tokens)
            overflowed = sent.tokens
        got = learned_window(
            failure,
            sent.tokens,
            st.context_window,
            assumed=st.window_source == "assumed",
            learned_this_episode=episode.window_learned,
        )
        if got is not None:
            learn_window(ctx, *got)
            episode.window_learned = True
        asked = st.asked_output
        if failure.output_tokens or (stated and sent.tokens < stated and asked and sent.tokens + asked > stated):
            # the provider counted the asked output against the window (vLLM): from now on a
            # request reserves it, instead of sending the identical body again after a no-op compaction
            if not st.window_counts_output:
                ctx.notify("window_counts_output", f"the provider counts max_tokens against the {st.context_window:,}"
                           "-token window: requests reserve their output from now on", "info")  # fmt: skip
            st.window_counts_output = True
        if stated:  # the provider's own number: a fact a failed turn keeps
            note_fact(ctx, Fact("window", st.model, tokens=overflowed if stated < sent.tokens else 0,
                                value=st.context_window))  # fmt: skip
        return
    rejected = failure.rejected_bytes or sent.bytes
    how = gateway_how(failure)
    if verdict.hypothesis and episode.page_cap_before is None:
        episode.page_cap_before = (st.cap, st.cap_source)  # before the episode's first reading of a page
    if verdict.excerpt_test:
        # an excerpt test also takes back the readings of pages before it in the episode: none was confirmed
        episode.excerpt_prior = episode.excerpt_prior or episode.page_cap_before
    else:  # a reading with the newest message whole, a 413 or a drop: the cap it teaches stays
        episode.excerpt_prior = None
        if not verdict.hypothesis:
            episode.page_cap_before = None
    ev.rejected(rejected, how)
    if failure.kind == FailureKind.WAF_REJECTION:
        episode.waf_refused = min(rejected, episode.waf_refused or rejected)
    if failure.connection_drop:
        episode.dropped = min(rejected, episode.dropped or rejected)
    fact = Fact("rejected", st.model, rejected, how=how) if is_self_standing(failure) else None
    if fact is not None:  # kept even when the floor check below ends the turn
        note_fact(ctx, fact)
    floor = check_floor(ctx, failure, sent)
    new = learned_cap(rejected, floor=max(floor, episode.floor_whole), current=st.cap, accepted=ev.largest_accepted)
    if new is not None:
        lasting = "until the excerpt goes through" if verdict.excerpt_test else "for this session"
        learn_cap(ctx, new, rejected=rejected, how=how, lasting=lasting)
        if fact is not None:
            st.turn_facts[st.turn_facts.index(fact)] = replace(fact, value=new)


def apply_level(ctx: FlowContext, level: int) -> tuple[str, ...]:
    """One rung of the ladder on the persistent history; returns the archive keys created.

    Level 1 repairs tool pairing, halves the tool-result budgets for this episode and caps long
    assistant messages; level 2 keeps the system prompt and the last ``emergency_keep_messages``;
    level 3 keeps the last ``nuclear_keep_messages``, each capped at ``nuclear_message_cap``.
    Everything removed is archived first.
    """
    st = ctx.state
    lim = st.limits
    report: Any
    if level == 1:
        halve_budgets(ctx, "recovery level 1: tool-result budgets halved for this episode")
        history, report = aggressive_level1(
            st.history,
            archive=ctx.archive,
            turn_budget=st.turn_budget,
            per_result=st.per_result_budget,
            assistant_cap=lim.assistant_cap_level1,
        )
    elif level == 2:
        history, report = emergency_truncate(st.history, keep=lim.emergency_keep_messages, archive=ctx.archive)
    else:
        history, report = emergency_truncate(
            st.history, keep=lim.nuclear_keep_messages, archive=ctx.archive, per_message_cap=lim.nuclear_message_cap
        )
    st.history = list(history)
    return tuple(getattr(report, "archived_keys", ()))


def add_payload_notice(ctx: FlowContext) -> None:
    """The notice asking the model to keep requests small: once per session (a second copy would only
    grow the request it is meant to shrink), just before the latest user message; advice about file
    reads only when the session has tools that read."""
    st = ctx.state
    if st.has_payload_notice():
        return
    has_tools = any(t.get("function", {}).get("name") != "recall" for t in ctx.tools)
    # verbatim: shrink must not reduce it to a pointer (it would then be added again, once per shrink)
    notice = Message.user(PAYLOAD_NOTICE if has_tools else PAYLOAD_NOTICE_CHAT, synthetic=True, preserve_verbatim=True)
    last_user = max((i for i, m in enumerate(st.history) if m.role == "user"), default=len(st.history))
    st.history = [*st.history[:last_user], notice, *st.history[last_user:]]
    ctx.notify("payload_notice", "added a one-time notice asking the model to keep requests small", "info")


def recover(ctx: FlowContext, verdict: Verdict | None, sent: Measure, level: int, episode: Episode,
            *, refusal: str = "") -> Flow:  # fmt: skip
    """Learn from ``verdict`` (None: the request was refused before sending), climb to ``level``."""
    st = ctx.state
    before = measure(ctx, st.history)
    why = verdict.failure.reason if verdict else refusal
    ctx.notify("recovery", f"recoverable failure ({why}) - compacting and retrying (level {level})", "warning")
    if verdict is not None:
        learn(ctx, verdict, sent, episode)
    keys = apply_level(ctx, level)
    st.stats.count_recovery(level)
    yield from compact_if_needed(ctx, trigger="recovery")
    if verdict is not None and verdict.about_bytes:
        add_payload_notice(ctx)
    after = emit_history(ctx, "recovery")
    failure = verdict.failure if verdict else None
    record_recovery(ctx, "retrying", level=level, failure=failure, before=before, after=after, keys=keys,
                    kind=KNOWN_LIMIT, reason=refusal)  # fmt: skip
