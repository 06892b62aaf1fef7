"""contextkit's own work per request is O(new content), not O(history): in a 100-turn tool session
each request is measured a bounded number of times, and the messages the meter sums or serialises
per request do not grow with the history."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from contextkit import Limits, Session, ToolResult
from contextkit.archive import Archive
from contextkit.messages import Message
from contextkit.sim import GatewaySimulator, Workspace
from contextkit.sizing import RequestMeter, request_bytes

TURNS = 100


@pytest.fixture(scope="module")
def per_request(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[float]]:
    """Per turn of a 100-turn agent session (each turn reads a ~2 KB file; the gateway's 64 KB cap
    keeps the pressure pass acting): measures, messages summed and messages serialised per request,
    and the history's length."""
    ws = Workspace(seed=1, target_bytes=2_000)

    def read_file(path: str) -> ToolResult:
        """Read a whole file."""
        out = ws.read_file(path)
        return ToolResult(out.content, path=out.path, lines=out.lines)

    folder = tmp_path_factory.mktemp("work")
    counts: dict[str, list[float]] = {"calls": [], "summed": [], "serialised": [], "history": []}
    with GatewaySimulator(max_body="64KB", reject_with="413") as gw:
        archive = Archive(Path(folder) / "a.sqlite", session_id="w", retention=None)
        session = Session(gw.model, api_base=gw.api_base, api_key="k", archive=archive, session_id="w",
                          tools=[read_file], limits=Limits(context_window=1_000_000), status=None,
                          on_flush=None)  # fmt: skip
        meter = session._meter
        for turn in range(1, TURNS + 1):
            gw.clear_log()
            calls, summed, serialised = meter.calls, meter.summed, meter.serialised
            session.send(f'[[tool:read_file {{"path": "src/mod_{turn % 37}.py"}}]] turn {turn}: check it')
            requests = len(gw.requests)
            assert requests >= 1
            counts["calls"].append((meter.calls - calls) / requests)
            counts["summed"].append((meter.summed - summed) / requests)
            counts["serialised"].append((meter.serialised - serialised) / requests)
            counts["history"].append(len(session.history))
        session.close()
        archive.close()
    return counts


def test_the_history_grows_enough_to_tell(per_request: dict[str, list[float]]) -> None:
    assert max(per_request["history"][-20:]) >= 4 * min(per_request["history"][5:20])


def test_each_request_is_measured_a_bounded_number_of_times(per_request: dict[str, list[float]]) -> None:
    assert max(per_request["calls"]) <= 16


@pytest.mark.parametrize("what", ["summed", "serialised"])
def test_messages_per_request_do_not_grow_with_the_history(per_request: dict[str, list[float]], what: str) -> None:
    """Median over the first and the last 20 turns: a pass that rewrites many results costs its
    rewrites once (a few turns), an append-only request only its new messages."""
    early = statistics.median(per_request[what][5:25])
    late = statistics.median(per_request[what][-20:])
    assert late <= early + 2, (early, late)
    assert late <= 12, late


def test_a_running_total_equals_a_fresh_measure_after_a_rewrite_in_the_middle() -> None:
    meter = RequestMeter()
    history = [Message.system("s"), *(Message.user(f"message {i} " + "x" * i) for i in range(50))]
    meter.measure(history)
    rewritten = [*history[:20], Message.user("a shorter one"), *history[21:], Message.assistant("new")]
    summed = meter.summed
    assert meter.measure(rewritten).bytes == request_bytes(rewritten)
    assert meter.summed - summed == len(rewritten) - 20  # from the rewritten message on
    assert meter.measure(rewritten[:10]).bytes == request_bytes(rewritten[:10])
    assert meter.summed - summed == len(rewritten) - 20  # a prefix of a run: nothing summed


def test_the_body_joined_from_cached_pieces_is_the_body_serialised_whole() -> None:
    from contextkit.messages import ToolCall, to_wire_list
    from contextkit.sizing import dumps

    meter = RequestMeter()
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    history = [
        Message.user("Grüße \ud800 😀"),
        Message.assistant("", [ToolCall("c", "f", "{}")]),
        Message.tool("c", "ok"),
    ]
    assert meter.wire_body(history, tools) == dumps({"tools": tools, "messages": to_wire_list(history)}).encode(
        "utf-8", "surrogatepass"
    )
    copies = meter.wire_list(history)
    assert copies == to_wire_list(history)
    copies[1]["tool_calls"][0]["function"]["name"] = "changed"  # a receiver's change stays in its copy
    assert meter.wire_list(history) == to_wire_list(history)
    assert meter.serialised == 3
