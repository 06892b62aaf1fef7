"""Checks over the simulator's request log: what an endpoint rejected for its size is never sent again.

A rejection of S bytes is *binding* (evidence of a size limit) when nothing the endpoint accepted
earlier was at least S bytes: a 413 or the gateway's own cap (whatever page it answers with), or a
connection dropped (or an empty 5xx) by the gateway's cap twice for the same body while a smaller
request succeeded recently (or above 500 KB); a one-shot drop fault is an outage, not a size. A single stray rejection of a body smaller than one already accepted,
a first drop, and a one-shot firewall page (the simulator's ``waf403`` fault: a page that states no
size, which the session may rightly read as a content block) are not evidence - the session may
send that size again. After a binding rejection, no request to that simulator may be >= S.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from contextkit.sim.config import RequestRecord

GATEWAY_FAULTS = ("fault:413", "fault:413-html")
LIKELY_PAYLOAD_MIN_BYTES = 500_000
RECENT = 8  # outcomes that count as recent (contextkit.limits.evidence.RECENT)
MIN_PLAUSIBLE_CAP = 4_096  # contextkit.limits.evidence.MIN_PLAUSIBLE_CAP


def is_gateway_rejection(record: RequestRecord) -> bool:
    """Refused by the gateway for its size (or a one-shot gateway fault): not an overflow, not a 5xx."""
    return not record.accepted and (record.reason.startswith("body ") or record.reason in GATEWAY_FAULTS)


def is_drop(record: RequestRecord) -> bool:
    """No answer: a dropped connection, or an empty 502 (Caddy's body limit)."""
    if record.accepted:
        return False
    empty_502 = record.status == 502 and (record.reason.startswith("body ") or record.reason == "fault:empty502")
    return empty_502 or (record.status == 0 and record.reason != "fault:timeout")


def binding_rejections(records: Sequence[RequestRecord]) -> list[tuple[int, int]]:
    """``(seq, bytes)`` of every rejection that is evidence of a size limit."""
    largest_accepted = 0
    drops: dict[str, int] = {}
    recent: deque[tuple[int, bool]] = deque(maxlen=RECENT)
    out: list[tuple[int, int]] = []
    for r in sorted(records, key=lambda r: r.seq):
        if r.accepted or r.status == 200:  # through the gateway (a cut or dropped stream included)
            largest_accepted = max(largest_accepted, r.bytes)
            drops.clear()
            recent.append((r.bytes, True))
            continue
        if is_drop(r):
            drops[r.body_sha256] = drops.get(r.body_sha256, 0) + 1
            repeated = drops[r.body_sha256] >= 2
            smaller_recently = any(ok and n < r.bytes for n, ok in recent)
            plausible = r.bytes >= MIN_PLAUSIBLE_CAP  # no gateway limits bodies below it: a drop there is no size
            # a one-shot drop fault is not a size (an outage): the session may read it as one while the turn
            # lasts, and a failed turn rolls that reading back - only the gateway's real cap binds
            real = r.reason.startswith("body ")
            if real and plausible and repeated and largest_accepted < r.bytes and (smaller_recently or r.bytes > LIKELY_PAYLOAD_MIN_BYTES):
                out.append((r.seq, r.bytes))
            recent.append((r.bytes, False))
        else:
            if is_gateway_rejection(r) and largest_accepted < r.bytes:
                out.append((r.seq, r.bytes))
            recent.append((r.bytes, False))
    return out


def assert_known_limits_respected(records: Sequence[RequestRecord]) -> None:
    """(a) no request was >= a size the endpoint had already rejected as evidence of a limit."""
    ordered = sorted(records, key=lambda r: r.seq)
    for seq, size in binding_rejections(ordered):
        later = [r for r in ordered if r.seq > seq and r.bytes >= size]
        assert not later, (
            f"request {later[0].seq} ({later[0].bytes} bytes, {later[0].kind}) was sent after request {seq} "
            f"of {size} bytes had been rejected for its size"
        )
