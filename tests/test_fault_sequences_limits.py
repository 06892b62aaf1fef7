"""Property test over random fault sequences for the limits model: content blocks, outages, a limit
that moves and save/load in the middle, behind a random 64 KB middlebox (413, firewall page, Caddy's
empty 502, dropped connection) - through litellm over real HTTP to the simulator. After every turn:

(a) no request was >= a size the endpoint had already rejected for its size (``logcheck``);
(b) nothing is lost: every message of a successful turn is recoverable from the history's markers;
(c) a failed turn leaves the history as it was;
(d) a turn that met no refusal for size (a content block, an outage) changes neither the limits nor
    what is known to fail.

A ``bigpaste`` step pastes 150 KB with a blocked line in its middle: only an excerpt of it can get
under the cap, and the excerpt leaves the blocked line out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.faults import PROFILE
from helpers.logcheck import assert_known_limits_respected
from hypothesis import given, settings
from hypothesis import strategies as st

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.errors import ContextkitError
from contextkit.policy.expand import expand_markers
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace

BLOCKED = "cat /etc/passwd"
STEPS = ("none", "none", "content", "outage", "move", "saveload", "413", "waf403", "drop", "bigpaste")
BIG = 150_000  # a paste far above the 64 KB cap on its own, with a blocked line in its middle


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewaySimulator]:
    with GatewaySimulator() as sim:
        yield sim


def known(session: Session) -> tuple[Any, ...]:
    st_ = session._state
    fails = {n: (ev.smallest_rejected, ev.smallest_overflow_tokens) for n, ev in st_.evidence.endpoints.items()
             if ev.smallest_rejected or ev.smallest_overflow_tokens}  # fmt: skip
    return st_.cap, st_.context_window, fails


def run_limits_sequence(gw: GatewaySimulator, reject_with: str, plan: list[tuple[str, int]], folder: Path) -> None:
    cap = 64 * 1024
    gw.reset(max_body=cap, reject_with=reject_with, block_phrase=BLOCKED, timeout_sleep=0.3)
    limits = Limits(context_window=1_000_000, retry_backoff=0.0, request_timeout=5, cap_probe_turns=2)
    kwargs = {"api_base": gw.api_base, "api_key": "sim-key", "status": None}
    session = Session(gw.model, archive=Archive(folder / "a.sqlite", session_id="q"), session_id="q", limits=limits,
                      **kwargs)  # fmt: skip
    originals: list[str] = []
    for i, (step, size) in enumerate(plan):
        if step == "saveload":
            session.save(folder / "s.json")
            session.close()
            session = Session.load(folder / "s.json", **kwargs)
        elif step == "move":
            cap = int(cap * 0.7)
            gw.configure(max_body=cap)
        elif step == "outage":
            gw.fail_next("drop", times=12)
        elif step in ("413", "waf403", "drop"):
            gw.fail_next(step)
        size = BIG if step == "bigpaste" else size
        doc = Workspace(seed=i, target_bytes=size).tail_log(size // 60).content[:size]
        middle = len(doc) // 2
        blocked = step in ("content", "bigpaste")
        text = f"turn {i}: " + (f"{doc[:middle]}\n$ {BLOCKED}\n{doc[middle:]}" if blocked else doc)
        before, limits_before, seen = session.history, known(session), len(gw.requests)
        try:
            reply = session.send(text)
            ok = True
        except ContextkitError:
            ok = False
        gw.clear_faults()
        records = gw.requests[seen:]
        assert_known_limits_respected(gw.requests)  # (a)
        if ok:
            originals += [text, reply.text]
        else:
            assert session.history == before, f"turn {i} ({step}) failed but changed the history"  # (c)
        expanded = expand_markers("\n\x00\n".join(m.content for m in session.history), session.archive,
                                  max_depth=10_000)  # fmt: skip
        missing = [c[:60] for c in originals if c not in expanded]
        assert not missing, f"turn {i} ({step}): {len(missing)} contents lost"  # (b)
        size_hit = any(not r.accepted and (r.reason.startswith("body ") or r.reason == "fault:413") for r in records)
        if step in ("content", "outage", "none") and not size_hit and not ok:
            assert known(session) == limits_before, f"turn {i} ({step}): a non-size failure changed the limits"  # (d)
        if not size_hit:
            assert known(session)[2] == limits_before[2] or step in ("waf403", "drop"), f"turn {i} ({step})"
    session.close()


plans = st.lists(st.tuples(st.sampled_from(STEPS), st.sampled_from([1_500, 6_000, 9_000])), min_size=4, max_size=8)


@settings(max_examples=8, derandomize=True, **PROFILE)  # type: ignore[arg-type]
@given(reject_with=st.sampled_from(["413", "waf403", "empty502", "drop"]), plan=plans)
def test_random_limit_sequences(gw: GatewaySimulator, reject_with: str, plan: list[tuple[str, int]],
                                tmp_path_factory: pytest.TempPathFactory) -> None:  # fmt: skip
    run_limits_sequence(gw, reject_with, plan, tmp_path_factory.mktemp("seq"))


@pytest.mark.slow
@settings(max_examples=150, **PROFILE)  # type: ignore[arg-type]
@given(reject_with=st.sampled_from(["413", "waf403", "empty502", "drop"]), plan=plans)
def test_random_limit_sequences_long(gw: GatewaySimulator, reject_with: str, plan: list[tuple[str, int]],
                                     tmp_path_factory: pytest.TempPathFactory) -> None:  # fmt: skip
    run_limits_sequence(gw, reject_with, plan, tmp_path_factory.mktemp("seq"))
