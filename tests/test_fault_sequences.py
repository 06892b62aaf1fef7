"""Property test over random fault sequences: the promises about evidence, archive and rollback.

A random agent workload (tool calls reading big outputs, pastes of random size) runs behind a random
gateway (no cap, a 413 / WAF / dropping cap, a small window) while random one-shot faults (context
overflow, 413, WAF 403, dropped connection, schema 400, 429, 500) hit random turns - through litellm
over real HTTP to the simulator. After every turn:

(a) no request was >= a size the endpoint had already rejected as evidence of a limit (the
    simulator's request log, ``logcheck``);
(b) every byte that left the history is in the archive (every user message, tool output and reply
    of a successful turn is recoverable from the history's markers);
(c) the newest user message of the turn is in the history (whole, or as an excerpt of its archived
    original) - or the turn failed and left no trace;
(d) a turn that met only non-size failures changed no learned limit (and, if it failed, not the
    history).

The default run is bounded (a fixed set of examples, well under a minute); ``-m slow`` explores more.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers.faults import FAULTS, GATEWAYS, PROFILE, run_sequence
from hypothesis import given, settings
from hypothesis import strategies as st

from contextkit.sim import GatewaySimulator


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewaySimulator]:
    with GatewaySimulator() as sim:
        yield sim


turns = st.lists(
    st.tuples(
        st.sampled_from([None, "read_file", "read_file", "grep", "tail_log", "get_json"]),  # the tool the model calls
        st.sampled_from([0, 0, 0, 2_000, 30_000]),  # chars the user pastes
        st.sampled_from([None, None, *FAULTS]),  # a one-shot fault queued before the turn
        st.integers(1, 2),  # how many times
    ),
    min_size=3,
    max_size=7,
)


@settings(max_examples=12, derandomize=True, **PROFILE)  # type: ignore[arg-type]
@given(gateway=st.sampled_from(GATEWAYS), plan=turns, seed=st.integers(0, 3))
def test_random_fault_sequences(gw: GatewaySimulator, gateway: dict[str, Any], plan: list[Any], seed: int) -> None:
    run_sequence(gw, gateway, plan, seed)


@pytest.mark.slow
@settings(max_examples=200, **PROFILE)  # type: ignore[arg-type]
@given(gateway=st.sampled_from(GATEWAYS), plan=turns, seed=st.integers(0, 50))
def test_random_fault_sequences_long(gw: GatewaySimulator, gateway: dict[str, Any], plan: list[Any], seed: int) -> None:
    run_sequence(gw, gateway, plan, seed)
