"""What a failure teaches: per-endpoint evidence of one session and the verdicts drawn from it.

Pure (values in, a ``Verdict`` out; no IO, no clock). The turn flow records every request's
outcome here and asks ``judge`` what a classified failure means before it changes anything:

* **retry** - the same request again after a back-off, learning nothing: rate limits, 5xx,
  timeouts; a *single* gateway rejection (413 / WAF 403) of a request clearly smaller than a body
  this endpoint already accepted in this session (a stray page, not a size limit), and likewise a
  single overflow of a request clearly smaller (in tokens) than one already accepted; the first
  drop of a request (connections drop for many reasons).
* **recover** - a failure about size, consistent with the evidence: a context overflow (teaches a
  token window, never a byte cap), a gateway rejection of a body no larger one contradicts, a
  request dropped again after smaller requests to the endpoint succeeded (or above 500 KB, the
  classifier's hint), any drop above the largest accepted body once the endpoint has shown that
  it drops bodies for their size. The flow learns the limit, compacts and resends.
* **fail** - anything else (schema 400, unknown parameter, auth, output budget), and a WAF page
  refusing the *same* request again when it is clearly smaller than a body the endpoint accepted
  (a firewall rule about its content, not a size limit): nothing learned, nothing rewritten.

A rejection the flow learned from is *binding*: no later request of the session to that endpoint
may be at least that big (``EndpointEvidence.ceiling``), unless ``Session.reset_limits`` forgets it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from contextkit.failures.classify import Failure, FailureKind
from contextkit.sizing import format_size

# A rejection below this share of the largest body the endpoint accepted contradicts a size limit.
STRAY_BELOW = 0.9
# A learned cap is 3/4 of the rejected size: far enough below the refused body that the next request
# is likely to pass, close enough not to shrink the history for nothing.
LEARNED_CAP_SHARE = 0.75
WINDOW_SHARE = 0.75  # an overflow without a number: the window is below 3/4 of what overflowed


class Lesson(StrEnum):
    RETRY = "retry"
    RECOVER = "recover"
    FAIL = "fail"


@dataclass(frozen=True)
class Verdict:
    """What to do about one failure; ``failure`` may be re-kinded by the evidence (a repeated drop
    becomes ``LIKELY_PAYLOAD``, a stray 413 ``TRANSIENT``) and ``why`` says so in words."""

    lesson: Lesson
    failure: Failure
    why: str = ""
    once: bool = False  # the one retry a request gets before its failure counts as evidence (not a transient retry)

    @property
    def about_window(self) -> bool:
        return self.lesson == Lesson.RECOVER and self.failure.kind == FailureKind.CONTEXT_OVERFLOW

    @property
    def about_bytes(self) -> bool:
        return self.lesson == Lesson.RECOVER and self.failure.kind != FailureKind.CONTEXT_OVERFLOW


@dataclass
class EndpointEvidence:
    """What one endpoint (model + gateway) showed this session."""

    largest_accepted: int = 0  # bytes of the largest body it accepted
    largest_accepted_tokens: int = 0  # tokens (our count) of the largest request it accepted
    smallest_rejected: int | None = None  # bytes of the smallest body rejected for its size (binding)
    rejected_how: str = ""
    smallest_overflow_tokens: int | None = None  # tokens of the smallest request that overflowed
    failures: dict[str, int] = field(default_factory=dict)  # body digest -> failures since the last success

    @property
    def ceiling(self) -> int | None:
        """The largest body that may still be sent (one byte below the smallest binding rejection)."""
        return self.smallest_rejected - 1 if self.smallest_rejected else None

    def accepted(self, nbytes: int, tokens: int = 0) -> None:
        self.largest_accepted = max(self.largest_accepted, nbytes)
        self.largest_accepted_tokens = max(self.largest_accepted_tokens, tokens)
        self.failures.clear()

    def failed(self, digest: str) -> int:
        """Count one more failure of this body; returns how many times it had failed before."""
        seen = self.failures.get(digest, 0)
        self.failures[digest] = seen + 1
        return seen

    def rejected(self, nbytes: int, how: str) -> None:
        """A binding size rejection. Earlier acceptances above it are stale (the limit moved)."""
        if self.smallest_rejected is None or nbytes < self.smallest_rejected:
            self.smallest_rejected, self.rejected_how = nbytes, how
        if self.largest_accepted >= nbytes:
            self.largest_accepted = 0

    def overflowed(self, tokens: int) -> None:
        """A binding overflow at ``tokens`` (our count). Earlier acceptances above it are stale."""
        if tokens > 0 and (self.smallest_overflow_tokens is None or tokens < self.smallest_overflow_tokens):
            self.smallest_overflow_tokens = tokens
        if self.largest_accepted_tokens >= tokens:
            self.largest_accepted_tokens = 0

    def describe(self) -> str:
        parts = []
        if self.largest_accepted:
            parts.append(f"largest body accepted {format_size(self.largest_accepted)}")
        if self.smallest_rejected:
            parts.append(f"smallest rejected {format_size(self.smallest_rejected)} ({self.rejected_how})")
        if self.smallest_overflow_tokens:
            parts.append(f"smallest overflow {self.smallest_overflow_tokens:,} tokens")
        return "; ".join(parts) or "no evidence yet"


@dataclass
class EvidenceBook:
    """Evidence per endpoint for one session (the turn model and, when it differs, the summarizer's)."""

    endpoints: dict[str, EndpointEvidence] = field(default_factory=dict)

    def of(self, endpoint: str) -> EndpointEvidence:
        found = self.endpoints.get(endpoint)
        if found is None:
            found = self.endpoints[endpoint] = EndpointEvidence()
        return found

    def clear(self) -> None:
        self.endpoints.clear()


def is_connection_drop(failure: Failure) -> bool:
    """The connection closed before any answer (nginx ``return 444``, a proxy resetting big bodies);
    litellm reports it as an InternalServerError (status 500), so the classifier flags it."""
    return failure.connection_drop


def gateway_how(failure: Failure) -> str:
    if is_connection_drop(failure):
        return "connection dropped"
    if failure.kind == FailureKind.WAF_REJECTION:
        return f"WAF {failure.status or 403}"
    return str(failure.status or 413)


def judge(ev: EndpointEvidence, failure: Failure, *, sent_bytes: int, seen: int, sent_tokens: int = 0) -> Verdict:
    """The lesson of ``failure`` for a request of ``sent_bytes`` / ``sent_tokens`` that had failed
    ``seen`` times before."""
    kind = failure.kind
    if is_connection_drop(failure):
        return _judge_drop(ev, failure, sent_bytes, seen)
    if kind.retryable:
        return Verdict(Lesson.RETRY, failure, failure.reason)
    if kind in (FailureKind.PAYLOAD_TOO_LARGE, FailureKind.WAF_REJECTION):
        if seen == 0 and sent_bytes < STRAY_BELOW * ev.largest_accepted:
            why = (
                f"gateway rejected a {format_size(sent_bytes)} request ({gateway_how(failure)}) but accepted "
                f"{format_size(ev.largest_accepted)} earlier this session - not a size limit; retrying once"
            )
            return Verdict(Lesson.RETRY, replace(failure, kind=FailureKind.TRANSIENT, reason=why), why, once=True)
        if kind == FailureKind.WAF_REJECTION and sent_bytes < STRAY_BELOW * ev.largest_accepted:
            # A WAF that refuses the same small body again, after letting a much larger one through,
            # objects to its content: shrinking the session for it would cripple it for nothing.
            why = (
                f"the gateway's firewall ({gateway_how(failure)}) refused the same {format_size(sent_bytes)} request "
                f"twice but accepted {format_size(ev.largest_accepted)} earlier this session - it objects to the "
                "request's content, not its size (rephrase or remove what it blocks; if the gateway's limit really "
                "went down, session.reset_limits() lets the session learn it again)"
            )
            return Verdict(Lesson.FAIL, replace(failure, kind=FailureKind.OTHER, reason=why), why)
        return Verdict(Lesson.RECOVER, failure, f"gateway rejected a {format_size(sent_bytes)} request")
    if kind == FailureKind.CONTEXT_OVERFLOW:
        if seen == 0 and sent_tokens < STRAY_BELOW * ev.largest_accepted_tokens:
            why = (
                f"the provider reported an overflow for {sent_tokens:,} tokens but accepted "
                f"{ev.largest_accepted_tokens:,} earlier this session - not the window; retrying once"
            )
            return Verdict(Lesson.RETRY, replace(failure, kind=FailureKind.TRANSIENT, reason=why), why, once=True)
        return Verdict(Lesson.RECOVER, failure, failure.reason)
    return Verdict(Lesson.FAIL, failure, failure.reason)


def _judge_drop(ev: EndpointEvidence, failure: Failure, sent_bytes: int, seen: int) -> Verdict:
    size = format_size(sent_bytes)
    if ev.largest_accepted >= sent_bytes:
        why = f"connection dropped on a {size} request; {format_size(ev.largest_accepted)} went through before"
    elif ev.rejected_how == "connection dropped":  # this endpoint already showed it drops bodies for size
        why = (
            f"connection dropped on a {size} request; this endpoint dropped {format_size(ev.smallest_rejected or 0)} "
            f"before and accepted at most {format_size(ev.largest_accepted)} - treating it as a body-size limit"
        )
        return Verdict(Lesson.RECOVER, replace(failure, kind=FailureKind.LIKELY_PAYLOAD, reason=why), why)
    elif seen == 0:
        why = f"connection dropped on a {size} request - retrying it once before suspecting its size"
        return Verdict(Lesson.RETRY, replace(failure, kind=FailureKind.TRANSIENT, reason=why), why, once=True)
    elif ev.largest_accepted or failure.kind == FailureKind.LIKELY_PAYLOAD:
        basis = (
            f"while {format_size(ev.largest_accepted)} requests to this endpoint succeeded"
            if ev.largest_accepted
            else "and it is above 500 KB"
        )
        why = f"the same {size} request dropped {seen + 1} times {basis} - treating it as a body-size limit"
        return Verdict(Lesson.RECOVER, replace(failure, kind=FailureKind.LIKELY_PAYLOAD, reason=why), why)
    else:
        why = f"connection dropped on a {size} request; no request to this endpoint has succeeded yet"
    return Verdict(Lesson.RETRY, replace(failure, kind=FailureKind.TRANSIENT, reason=why), why)


def learned_cap(rejected: int, *, floor: int, current: int | None) -> int | None:
    """3/4 of the rejected size (``LEARNED_CAP_SHARE``), but never below the smallest request the session
    can make when that still fits under the rejected size. None when the cap would not tighten: a
    learned cap only ever tightens, and an explicit smaller cap wins."""
    new = max(int(rejected * LEARNED_CAP_SHARE), min(floor, rejected - 1))
    return new if new > 0 and (current is None or new < current) else None


def learned_window(
    failure: Failure, tokens: int, current: int, *, assumed: bool, learned_this_episode: bool
) -> tuple[int, str] | None:
    """``(window, evidence)`` an overflow teaches, or None. The provider's own number wins (and may
    correct an assumed window upwards); without one, 3/4 of the measured tokens, once per episode."""
    stated = failure.window_tokens  # the classifier read it from the provider's message
    if stated:
        if stated < current or (assumed and stated != current):
            return stated, f"the provider states a {stated:,}-token window"
        return None
    if learned_this_episode or not tokens:
        return None
    new = int(tokens * WINDOW_SHARE)
    if new < current:
        return new, f"a {tokens:,}-token request overflowed (the provider gave no number)"
    return None


def probe_cap(cap: int, ceiling: int | None) -> int | None:
    """The next cap to try upwards (a quarter more, never at or above a binding rejection)."""
    target = cap + max(cap // 4, 1)
    if ceiling is not None:
        target = min(target, ceiling)
    return target if target > cap else None
