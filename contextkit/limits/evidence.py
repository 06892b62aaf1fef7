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

The cap is an **interval** per endpoint: what is known to pass (``largest_accepted``) and what is
known to fail for its size (``smallest_rejected``); the send limit sits inside it
(``EndpointEvidence.interval``, ``cap_inside``) and probing never reaches the upper end.

Size and content are different hypotheses. A 413 (a status or body that states a size) is evidence
of a size limit by itself. A firewall page (403), a dropped connection or an empty 5xx is not: it
counts as size only when it is consistent with a size limit (the request is above anything the
endpoint took, and a smaller request with the same new content may still pass). A refusal of a
request far below what the endpoint already took, or below any size a gateway limits bodies to
(``MIN_PLAUSIBLE_CAP``), is about content or access, and the endpoint keeps ``content_refused``.
A page refusing a request that only an excerpt of the newest message could get under may be tested
with that excerpt (``excerpt_test_refused``) when the refusal is far above anything the endpoint
took and it has refused no content: a passing excerpt shows nothing about size, so the cap sized
for it lasts until it passes, and only the refused size stays known to fail. What a failed turn
inferred is rolled back by the flow; only self-standing facts (a 413, a provider-stated window, a
body accepted, a content refusal) are kept.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from contextkit.failures.classify import Failure, FailureKind
from contextkit.sizing import format_size

# A rejection below this share of the largest body the endpoint accepted contradicts a size limit.
STRAY_BELOW = 0.9
# A learned cap is 3/4 of the rejected size: far enough below the refused body that the next request
# is likely to pass, close enough not to shrink the history for nothing.
LEARNED_CAP_SHARE = 0.75
WINDOW_SHARE = 0.75  # an overflow without a number: the window is below 3/4 of what overflowed
# No gateway limits API request bodies below this: a refusal that names no size (a 403 page, a drop,
# an empty 5xx) of a smaller request is about its content or access (an nginx "403 Forbidden" on a
# 97-byte first request), never a body-size limit.
MIN_PLAUSIBLE_CAP = 4_096
RECENT = 8  # outcomes per endpoint that count as "recent" when a drop is weighed (smaller bodies went through)
# A page that states no size, on a request only an excerpt of the newest message could get under, may be
# tested with that excerpt when the refused body is at least this many times the largest one the endpoint
# accepted: whatever the reading, the refused size stays at least twice anything the session sent.
EXCERPT_TEST_ABOVE = 2.0
# ... and at least this big: the refused size stays known to fail, and a smaller one would hold back an
# ordinary conversation (a blocked line in a pasted page or two is read as content, never as a limit).
EXCERPT_TEST_MIN = 64 * 1024


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
    hypothesis: bool = False  # a size reading of a refusal that names no size (a 403 page): to be tested
    content: bool = False  # a firewall page read as a refusal of the request's content (a fact about the endpoint)
    excerpt_test: bool = False  # the size reading is tested with an excerpt of the newest message

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
    # the endpoint refused a request for its content this session: from then on a page that states no
    # size is read as size only with the newest message whole (never on an excerpt's evidence)
    content_refused: bool = False
    failures: dict[str, int] = field(default_factory=dict)  # body digest -> failures since the last success
    # the last RECENT outcomes, (bytes, accepted): whether smaller bodies went through *recently*
    recent: deque[tuple[int, bool]] = field(default_factory=lambda: deque(maxlen=RECENT))

    @property
    def ceiling(self) -> int | None:
        """The largest body that may still be sent (one byte below the smallest binding rejection)."""
        return self.smallest_rejected - 1 if self.smallest_rejected else None

    @property
    def known_to_pass(self) -> int:
        """Bytes of the largest body this endpoint accepted (0: none yet): the interval's lower end."""
        return self.largest_accepted

    @property
    def known_to_fail(self) -> int | None:
        """Bytes of the smallest body it rejected for its size (None: none): the interval's upper end."""
        return self.smallest_rejected

    @property
    def interval(self) -> tuple[int, int | None]:
        """(known to pass, known to fail): the real limit lies between them."""
        return self.largest_accepted, self.smallest_rejected

    def cap_inside(self, cap: int) -> int:
        """``cap`` moved inside the interval: never at or above a size rejected for size, and never
        below a body that went through when that is still under the rejection."""
        if self.smallest_rejected is not None:
            cap = min(cap, self.smallest_rejected - 1)
            if self.largest_accepted < self.smallest_rejected:
                cap = max(cap, self.largest_accepted)
        return cap

    def accepted(self, nbytes: int, tokens: int = 0) -> None:
        self.largest_accepted = max(self.largest_accepted, nbytes)
        self.largest_accepted_tokens = max(self.largest_accepted_tokens, tokens)
        self.failures.clear()
        self.recent.append((nbytes, True))

    def went_through_recently(self, below: int) -> bool:
        """A body smaller than ``below`` bytes was accepted among the recent outcomes."""
        return any(ok and n < below for n, ok in self.recent)

    def failed(self, digest: str) -> int:
        """Count one more failure of this body; returns how many times it had failed before."""
        seen = self.failures.get(digest, 0)
        self.failures[digest] = seen + 1
        return seen

    def failed_at(self, nbytes: int) -> None:
        """A request of ``nbytes`` got no answer it could use (the recent outcomes drops are weighed on)."""
        self.recent.append((nbytes, False))

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
        if self.largest_accepted or self.smallest_rejected:
            parts.append(self.describe_interval())
        if self.smallest_overflow_tokens:
            parts.append(f"smallest overflow {self.smallest_overflow_tokens:,} tokens")
        return "; ".join(parts) or "no evidence yet"

    def describe_interval(self) -> str:
        """The interval in words: "known to pass 40.0 KB, known to fail 64.0 KB (413)"."""
        passes = format_size(self.largest_accepted) if self.largest_accepted else "nothing yet"
        fails = (
            f"{format_size(self.smallest_rejected)} ({self.rejected_how})" if self.smallest_rejected else "nothing yet"
        )
        return f"known to pass {passes}, known to fail {fails}"

    def to_dict(self) -> dict[str, Any]:
        """What ``Session.save`` keeps (the per-body failure counts and recent outcomes are per turn)."""
        return {
            "largest_accepted": self.largest_accepted,
            "largest_accepted_tokens": self.largest_accepted_tokens,
            "smallest_rejected": self.smallest_rejected,
            "rejected_how": self.rejected_how,
            "smallest_overflow_tokens": self.smallest_overflow_tokens,
            "content_refused": self.content_refused,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EndpointEvidence:
        def size(name: str) -> int | None:
            value = data.get(name)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"evidence {name} must be a whole number of bytes or tokens, got {value!r}")
            return value

        return cls(
            largest_accepted=size("largest_accepted") or 0,
            largest_accepted_tokens=size("largest_accepted_tokens") or 0,
            smallest_rejected=size("smallest_rejected") or None,
            rejected_how=str(data.get("rejected_how") or ""),
            smallest_overflow_tokens=size("smallest_overflow_tokens") or None,
            content_refused=data.get("content_refused") is True,
        )


@dataclass(frozen=True)
class CapInterval:
    """What a session knows about its endpoint's body limit: ``known_to_pass`` (the largest body it
    accepted, 0: none yet) <= ``cap`` (the send limit, None: no cap) < ``known_to_fail`` (the
    smallest body it rejected for its size, None: none). The real limit lies between the two ends."""

    known_to_pass: int
    cap: int | None
    known_to_fail: int | None

    def __str__(self) -> str:
        passes = format_size(self.known_to_pass) if self.known_to_pass else "nothing yet"
        fails = format_size(self.known_to_fail) if self.known_to_fail else "nothing yet"
        cap = format_size(self.cap) if self.cap else "none"
        return f"known to pass {passes}, send limit {cap}, known to fail {fails}"


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

    def to_dict(self) -> dict[str, Any]:
        return {name: ev.to_dict() for name, ev in self.endpoints.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvidenceBook:
        if not isinstance(data, dict):
            raise ValueError(f"evidence must be a mapping of endpoint to evidence, got {type(data).__name__}")
        return cls({str(name): EndpointEvidence.from_dict(ev) for name, ev in data.items()})


def is_connection_drop(failure: Failure) -> bool:
    """No answer came back: the connection closed before any answer (nginx ``return 444``, a proxy
    resetting big bodies; litellm reports it as an InternalServerError, status 500), or a gateway
    answered a 5xx with an empty body (Caddy's ``request_body max_size``). The classifier flags both."""
    return failure.connection_drop


def gateway_how(failure: Failure) -> str:
    if is_connection_drop(failure):
        return f"empty {failure.status}" if failure.status and failure.status != 500 else "connection dropped"
    if failure.kind == FailureKind.WAF_REJECTION:
        return f"WAF {failure.status or 403}"
    return str(failure.status or 413)


def is_self_standing(failure: Failure) -> bool:
    """A refusal that states a size by itself (a 413 / 431 status or a byte-size phrase): a fact
    about the endpoint that a failed turn keeps, unlike what was inferred from a 403 page or a drop."""
    return failure.kind == FailureKind.PAYLOAD_TOO_LARGE and not failure.connection_drop


def _content(failure: Failure, why: str) -> Verdict:
    return Verdict(Lesson.FAIL, replace(failure, kind=FailureKind.OTHER, reason=why), why, content=True)


def excerpt_test_refused(ev: EndpointEvidence, refused: int) -> str:
    """Why a size reading of a page that states no size may *not* be tested with an excerpt of the
    newest message ("" when it may). An excerpt that passes cannot tell a size limit from a content
    rule on a line it left out, so the test is allowed only where being wrong costs nothing the
    session relies on: the refused body is at least ``EXCERPT_TEST_MIN`` and ``EXCERPT_TEST_ABOVE``
    times the largest one the endpoint accepted (the size it leaves known to fail is far above anything
    the session sent), and the endpoint has shown no content rule this session. (Refusals of small requests, and of a
    request that shrank below a size the endpoint took, are content verdicts before this is asked.)"""
    if ev.content_refused:
        return "this endpoint already refused a request for its content this session"
    if refused < EXCERPT_TEST_MIN:
        return (
            f"it is below {format_size(EXCERPT_TEST_MIN)}, too small a size to keep as known to fail on an excerpt's "
            "evidence"
        )
    if refused < EXCERPT_TEST_ABOVE * ev.largest_accepted:
        return (
            f"it is not far above the {format_size(ev.largest_accepted)} this endpoint accepted "
            f"(an excerpt is tried only above {EXCERPT_TEST_ABOVE:g}x that)"
        )
    return ""


def judge(
    ev: EndpointEvidence,
    failure: Failure,
    *,
    sent_bytes: int,
    seen: int,
    sent_tokens: int = 0,
    shrunk_from: int | None = None,
) -> Verdict:
    """The lesson of ``failure`` for a request of ``sent_bytes`` / ``sent_tokens`` that had failed
    ``seen`` times before; ``shrunk_from``: the size of a request refused the same way earlier in
    this recovery episode (this one is the smaller request sent to test a size reading)."""
    kind = failure.kind
    size = format_size(sent_bytes)
    if is_connection_drop(failure):
        return _judge_drop(ev, failure, sent_bytes, seen, shrunk_from)
    if kind.retryable:
        return Verdict(Lesson.RETRY, failure, failure.reason)
    if kind == FailureKind.WAF_REJECTION and sent_bytes < MIN_PLAUSIBLE_CAP:
        return _content(
            failure,
            f"the gateway refused a {size} request with a {failure.status or 403} page that states no size "
            f"({gateway_how(failure)}); no gateway limits request bodies that small, so it objects to the request's "
            "content or to access: check the api_base and the gateway's access rules, or rephrase or remove what "
            "its firewall blocks",
        )
    if kind in (FailureKind.PAYLOAD_TOO_LARGE, FailureKind.WAF_REJECTION):
        far_below = sent_bytes < STRAY_BELOW * ev.largest_accepted
        if kind == FailureKind.WAF_REJECTION and far_below and shrunk_from is not None:
            return _content(
                failure,
                f"the gateway's firewall ({gateway_how(failure)}) refused the request again after it shrank from "
                f"{format_size(shrunk_from)} to {size}, below the {format_size(ev.largest_accepted)} it accepted "
                "earlier this session - it objects to the request's content, not its size (rephrase or remove "
                "what it blocks)",
            )
        if seen == 0 and far_below:
            why = (
                f"gateway rejected a {size} request ({gateway_how(failure)}) but accepted "
                f"{format_size(ev.largest_accepted)} earlier this session - not a size limit; retrying once"
            )
            return Verdict(Lesson.RETRY, replace(failure, kind=FailureKind.TRANSIENT, reason=why), why, once=True)
        if kind == FailureKind.WAF_REJECTION and far_below:
            # A WAF that refuses the same small body again, after letting a much larger one through,
            # objects to its content: shrinking the session for it would cripple it for nothing.
            return _content(
                failure,
                f"the gateway's firewall ({gateway_how(failure)}) refused the same {size} request "
                f"twice but accepted {format_size(ev.largest_accepted)} earlier this session - it objects to the "
                "request's content, not its size (rephrase or remove what it blocks; if the gateway's limit really "
                "went down, session.reset_limits() lets the session learn it again)",
            )
        hypothesis = kind == FailureKind.WAF_REJECTION
        return Verdict(Lesson.RECOVER, failure, f"gateway rejected a {size} request", hypothesis=hypothesis)
    if kind == FailureKind.CONTEXT_OVERFLOW:
        if seen == 0 and sent_tokens < STRAY_BELOW * ev.largest_accepted_tokens:
            why = (
                f"the provider reported an overflow for {sent_tokens:,} tokens but accepted "
                f"{ev.largest_accepted_tokens:,} earlier this session - not the window; retrying once"
            )
            return Verdict(Lesson.RETRY, replace(failure, kind=FailureKind.TRANSIENT, reason=why), why, once=True)
        return Verdict(Lesson.RECOVER, failure, failure.reason)
    return Verdict(Lesson.FAIL, failure, failure.reason)


def _dropped_for_size_before(ev: EndpointEvidence) -> bool:
    return ev.rejected_how == "connection dropped" or ev.rejected_how.startswith("empty ")


def _judge_drop(
    ev: EndpointEvidence, failure: Failure, sent_bytes: int, seen: int, shrunk_from: int | None = None
) -> Verdict:
    """No answer is not a size: it counts as one only with discrimination - smaller bodies to this
    endpoint went through *recently* and the same body failed again (or this endpoint already showed
    it drops bodies for their size). A drop below a size accepted before, while smaller ones go
    through, means the limit moved; when nothing smaller went through recently it is an outage.
    ``shrunk_from``: this recovery episode already read a drop of that size as a size limit, so the
    smaller body failing twice goes on down the ladder (a failed turn rolls the reading back, so an
    outage that outlasts the ladder teaches nothing)."""
    size = format_size(sent_bytes)
    how = gateway_how(failure)
    what = "connection dropped" if how == "connection dropped" else f"the gateway answered {how.split()[1]} with no body"

    def size_limit(why: str) -> Verdict:
        return Verdict(Lesson.RECOVER, replace(failure, kind=FailureKind.LIKELY_PAYLOAD, reason=why), why)

    def transient(why: str, once: bool = False) -> Verdict:
        return Verdict(Lesson.RETRY, replace(failure, kind=FailureKind.TRANSIENT, reason=why), why, once=once)

    if sent_bytes < MIN_PLAUSIBLE_CAP:
        return transient(f"{what} on a {size} request - below any body-size limit a gateway sets, so not its size")
    if _dropped_for_size_before(ev) and sent_bytes > ev.largest_accepted:
        return size_limit(
            f"{what} on a {size} request; this endpoint dropped {format_size(ev.smallest_rejected or 0)} "
            f"before and accepted at most {format_size(ev.largest_accepted)} - treating it as a body-size limit"
        )
    if seen == 0:
        return transient(f"{what} on a {size} request - retrying it once before suspecting its size", once=True)
    recent = ev.went_through_recently(sent_bytes)
    if shrunk_from is not None and sent_bytes < shrunk_from:
        return size_limit(
            f"the same {size} request failed {seen + 1} times ({what}) after a {format_size(shrunk_from)} one was "
            "read as too large - the limit is lower still (or moved)"
        )
    if ev.largest_accepted >= sent_bytes:
        if recent:
            return size_limit(
                f"the same {size} request failed {seen + 1} times ({what}) while smaller ones went through "
                f"recently, though {format_size(ev.largest_accepted)} went through before - the limit moved"
            )
        return transient(
            f"{what} on a {size} request {seen + 1} times; {format_size(ev.largest_accepted)} went through before "
            "and nothing smaller went through recently - an outage, not a size limit"
        )
    if recent or failure.kind == FailureKind.LIKELY_PAYLOAD:
        basis = "while smaller requests to this endpoint went through recently" if recent else "and it is above 500 KB"
        return size_limit(f"the same {size} request failed {seen + 1} times ({what}) {basis} - treating it as a "
                          "body-size limit")  # fmt: skip
    return transient(f"{what} on a {size} request; no smaller request to this endpoint went through recently")


def learned_cap(rejected: int, *, floor: int, current: int | None, accepted: int = 0) -> int | None:
    """3/4 of the rejected size (``LEARNED_CAP_SHARE``), but never below the smallest request the session
    can make when that still fits under the rejected size, nor below a body the endpoint accepted
    (``accepted``, when under the rejection): the cap sits inside the interval. None when the cap would
    not tighten: a learned cap only ever tightens, and an explicit smaller cap wins."""
    new = max(int(rejected * LEARNED_CAP_SHARE), min(floor, rejected - 1))
    if accepted < rejected:
        new = max(new, accepted)
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
