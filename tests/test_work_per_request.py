"""contextkit's own work per request is O(new content), not O(history): in a 100-turn tool session
each request is measured a bounded number of times, and the messages the meter sums, serialises,
lists and joins per request, and those pairing's check, the tool-result budgets and aging look at,
do not grow with the history; what is reused from the last request equals what would be built anew."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextkit import Limits, Session, ToolResult
from contextkit.archive import Archive
from contextkit.limits import preflight
from contextkit.messages import Message, ToolCall, to_wire_list
from contextkit.policy import budgets, pairing
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
    counts: dict[str, list[float]] = {
        "calls": [], "summed": [], "serialised": [], "listed": [], "joined": [], "paired": [], "budgeted": [], "aging": [],
        "history": [], "cap": [], "compared": [],
    }  # fmt: skip
    walked = {"paired": 0, "budgeted": 0, "aging": 0}  # messages pairing, the budgets and aging looked at
    shape, groups, ages = pairing._has_valid_shape, budgets._groups, preflight.ages

    def counted_shape(history: Sequence[Message], start: int = 0) -> bool:
        walked["paired"] += len(history) - start
        return shape(history, start)

    def counted_groups(history: Sequence[Message], begin: int = 0) -> list[list[int]]:
        walked["budgeted"] += len(history) - begin
        return groups(history, begin)

    def counted_ages(history: Sequence[Message], start: int = 0) -> bool:
        walked["aging"] += len(history) - start
        return ages(history, start)

    patch = pytest.MonkeyPatch()
    patch.setattr(pairing, "_has_valid_shape", counted_shape)
    patch.setattr(budgets, "_groups", counted_groups)
    patch.setattr(preflight, "ages", counted_ages)
    with patch.context(), GatewaySimulator(max_body="64KB", reject_with="413") as gw:
        archive = Archive(Path(folder) / "a.sqlite", session_id="w", retention=None)
        session = Session(gw.model, api_base=gw.api_base, api_key="k", archive=archive, session_id="w",
                          tools=[read_file], limits=Limits(context_window=1_000_000), status=None,
                          on_flush=None)  # fmt: skip
        meter = session._meter
        for turn in range(1, TURNS + 1):
            gw.clear_log()
            calls, summed, serialised = meter.calls, meter.summed, meter.serialised
            listed, joined, paired, budgeted = meter.listed, meter.joined, walked["paired"], walked["budgeted"]
            aging = walked["aging"]
            session.send(f'[[tool:read_file {{"path": "src/mod_{turn % 37}.py"}}]] turn {turn}: check it')
            requests = len(gw.requests)
            assert requests >= 1
            counts["calls"].append((meter.calls - calls) / requests)
            counts["summed"].append((meter.summed - summed) / requests)
            counts["serialised"].append((meter.serialised - serialised) / requests)
            counts["listed"].append((meter.listed - listed) / requests)
            counts["joined"].append((meter.joined - joined) / requests)
            counts["paired"].append((walked["paired"] - paired) / requests)
            counts["budgeted"].append((walked["budgeted"] - budgeted) / requests)
            counts["aging"].append((walked["aging"] - aging) / requests)
            counts["history"].append(len(session.history))
            counts["cap"].append(session.payload_cap or 0)
            counts["compared"].append(meter._list.compared)
        session.close()
        archive.close()
    return counts


def test_the_history_grows_enough_to_tell(per_request: dict[str, list[float]]) -> None:
    assert max(per_request["history"][-20:]) >= 4 * min(per_request["history"][5:20])


def test_each_request_is_measured_a_bounded_number_of_times(per_request: dict[str, list[float]]) -> None:
    assert max(per_request["calls"]) <= 16


@pytest.mark.parametrize("what", ["summed", "serialised", "listed", "joined", "paired", "budgeted", "aging"])
def test_messages_per_request_do_not_grow_with_the_history(per_request: dict[str, list[float]], what: str) -> None:
    """Median over the first and the last 20 turns: a pass that rewrites many results costs its
    rewrites once (a few turns), an append-only request only its new messages."""
    early = statistics.median(per_request[what][5:25])
    late = statistics.median(per_request[what][-20:])
    assert late <= early + 2, (early, late)
    assert late <= 12, late


@given(st.lists(st.integers(0, 3), max_size=8), st.lists(st.integers(0, 3), max_size=8), st.booleans())
def test_a_prefix_copy_is_a_copy_and_the_shared_prefix(last: list[int], items: list[int], as_tuple: bool) -> None:
    from contextkit.sizing.lastbuilt import common_prefix, prefix_copy

    objects = [object() for _ in range(4)]  # compared by identity, as messages are
    last_objects = [objects[i] for i in last]
    given_items = [objects[i] for i in items]
    held, shared = prefix_copy(last_objects, tuple(given_items) if as_tuple else given_items)
    assert held == given_items and held is not given_items and type(held) is list
    assert shared == common_prefix(last_objects, given_items)


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


def test_copies_the_receiver_left_as_they_were_are_handed_out_again() -> None:
    """A request copies only its new messages: the copies handed out last time are handed out again
    while they equal the wire dicts (in a new list), and once the receiver changed one, the next
    list is copied anew and equals a fresh one."""
    from contextkit.messages import ToolCall, to_wire_list

    meter = RequestMeter()
    history = [Message.system("s"), Message.assistant("", [ToolCall("c", "f", '{"a": 1}')]), Message.tool("c", "ok")]
    first = meter.wire_list(history)
    history.append(Message.user("next"))
    second = meter.wire_list(history)
    assert second is not first and all(a is b for a, b in zip(first, second, strict=False))
    assert second == to_wire_list(history)
    second[1]["tool_calls"][0]["function"]["arguments"] = "{}"  # litellm may rewrite a call in place
    second.append({"role": "user", "content": "added by the receiver"})
    third = meter.wire_list(history)
    assert third == to_wire_list(history)
    assert third[1] is not second[1] and third[1]["tool_calls"][0] is not second[1]["tool_calls"][0]


def test_litellms_writes_to_the_copies_it_is_handed_cost_no_comparison_later(
    per_request: dict[str, list[float]],
) -> None:
    """Through litellm as installed, a 100-turn tool session hands out the same copies request after
    request: litellm writes nothing into them, or only equal values (its validation sets
    ``tool_calls`` anew), so no copy is compared with its wire dict when the next list is built."""
    assert per_request["compared"][-1] == 0


def test_the_budgets_walk_the_whole_history_only_after_a_compaction(per_request: dict[str, list[float]]) -> None:
    """A pressure pass replaces results by shorter stubs in place, which pass the budgets the originals
    passed: the request after it still looks only at its new rounds. Only a compaction (the history
    got shorter) or new limits (a cap learned: previews are sized from it), in that turn or the one
    before, send the budgets over everything again."""
    history, cap = per_request["history"], per_request["cap"]
    walks = [t for t, n in enumerate(per_request["budgeted"]) if n > 12]
    changed = {t for t in range(1, len(history)) if history[t] < history[t - 1] or cap[t] != cap[t - 1]}
    assert walks, "no compaction in the session: the fixture no longer shows a walk over everything"
    assert all(t in changed or t - 1 in changed for t in walks), (walks, sorted(changed))


def test_a_receivers_equal_writes_keep_the_copies_and_its_other_writes_are_copied_anew() -> None:
    """litellm's message validation sets an assistant message's ``tool_calls`` to a copy of itself: an
    equal value keeps the copy (nothing is copied anew, nothing is compared later). Any other write,
    at any depth and by any of dict's or list's methods, has that copy - and only that one - copied
    anew for the next list; copies of a copy are plain."""
    import copy
    import pickle

    from contextkit.messages import ToolCall, to_wire_list

    meter = RequestMeter()
    history = [
        Message.system("s"),
        Message.assistant("", [ToolCall("c", "f", '{"a": 1}')]),
        Message.tool("c", "ok"),
        Message.user("look", images=("data:image/png;base64,iVBORw0KGgo=",)),
    ]
    first = meter.wire_list(history)
    for wire in first:  # what litellm's validate_and_fix_openai_messages does to each message it is given
        if wire.get("tool_calls"):
            wire["tool_calls"] = [dict(c) for c in wire["tool_calls"]]
        wire["role"] = wire["role"]
    assert not meter._list._notes  # nothing to compare on the next list
    second = meter.wire_list(history)
    assert all(a is b for a, b in zip(first, second, strict=True)) and meter._list.compared == 0
    assert second[1]["tool_calls"] is not None and second == to_wire_list(history)
    assert type(copy.copy(second[1])) is dict and type(copy.deepcopy(second[1])["tool_calls"]) is list
    assert type(pickle.loads(pickle.dumps(second[3]))["content"]) is list
    writes = [
        lambda w: w.pop("role"),
        lambda w: w.__setitem__("name", "x"),
        lambda w: w.update(role="user"),
        lambda w: w.setdefault("name", "x"),
        lambda w: w["tool_calls"].append({}),
        lambda w: w["tool_calls"][0]["function"].__setitem__("arguments", "{}"),
        lambda w: w["tool_calls"].insert(0, {}),
        lambda w: w.clear(),
        lambda w: w["tool_calls"][0].popitem(),
    ]
    for write in writes:
        handed = meter.wire_list(history)
        recopied = meter._list.recopied
        write(handed[1])
        again = meter.wire_list(history)
        assert again == to_wire_list(history) and meter._list.recopied == recopied + 1
        assert again[1] is not handed[1] and all(again[i] is handed[i] for i in (0, 2, 3))
    handed = meter.wire_list(history)
    handed[3]["content"][1]["image_url"]["url"] = "data:,"  # a content block, two levels down
    assert meter.wire_list(history) == to_wire_list(history)


def _message(i: int) -> Message:
    """The i-th message of a varied history: non-ASCII text, tool calls, tool results, content blocks."""
    kind = i % 4
    if kind == 0:
        return Message.user(f"question {i} é€")
    if kind == 1:
        return Message.assistant(f"step {i}", [ToolCall(f"c{i}", "read_file", '{"path": "a.py"}')])
    if kind == 2:
        return Message.tool(f"c{i - 1}", f"result {i} " * (i % 7))
    return Message.user(f"picture {i}", images=("data:image/png;base64,iVBORw0KGgo=",))  # content blocks


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["append", "rewrite", "cut", "other"]), st.integers(0, 30)), max_size=12))
def test_lists_and_bodies_built_from_the_last_ones_equal_fresh_ones(steps: list[tuple[str, int]]) -> None:
    """``wire_list`` and ``wire_body`` reuse what the last call built for the prefix it shares with this
    one: after appends, a rewrite in the middle, a cut and an unrelated history, each must still equal
    the list and the body built from nothing (and a receiver's change to a copy must not leak)."""
    from contextkit.messages import to_wire_list
    from contextkit.sizing import dumps

    meter = RequestMeter()
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    history = [Message.system("s"), *(_message(i) for i in range(5))]
    made = 5
    for op, n in [("append", 0), *steps]:
        if op == "append":
            history += [_message(made + j) for j in range(n % 5 + 1)]
            made += n % 5 + 1
        elif op == "rewrite" and history:
            history[n % len(history)] = Message.user(f"rewritten {made}")
            made += 1
        elif op == "cut":
            history = history[: n % (len(history) + 1)]
        else:
            history = [Message.system("other"), *(_message(made + j) for j in range(n % 6))]
            made += n % 6
        listed = meter.wire_list(history)
        assert listed == to_wire_list(history)
        for k, wire in enumerate(listed if n % 2 else ()):  # the receiver may change its copies (or leave them)
            if (k + n) % 3 == 0:
                wire["role"] = "changed"
            elif (k + n) % 3 == 1:
                wire.pop("content", None)
            for call in wire.get("tool_calls") or ():
                call["function"]["name"] = "changed"
            if isinstance(wire.get("content"), list):
                wire["content"].append({"type": "text", "text": "added"})
        body = dumps({"tools": tools, "messages": to_wire_list(history)}).encode("utf-8", "surrogatepass")
        assert meter.wire_body(history, tools) == body


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["append", "rewrite", "longer", "flag", "accent", "cut", "other", "same", "tools", "body"]),
            st.integers(0, 30),
        ),
        max_size=14,
    )
)
def test_the_body_step_reads_the_bodies_as_the_byte_probe_does(steps: list[tuple[str, int]]) -> None:
    """``body_step`` compares each body with the one before from the pieces' sizes, without joining
    either: after appends, rewrites (one that only lengthens a message, one that changes only what is
    not sent, one that changes a character sharing its first UTF-8 byte), cuts, an unrelated history,
    the same history again and other tools, its figures must be those of ``PrefixProbe`` over the
    whole bodies, byte for byte (and ``wire_body`` or ``retain`` in between must not move them)."""
    from dataclasses import replace

    from contextkit.prompt.prefix import PrefixProbe
    from contextkit.sizing import dumps

    meter, probe = RequestMeter(), PrefixProbe()
    toolsets = [
        [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}],
        [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "recall", "description": "é", "parameters": {"type": "object"}}}],
        [],
    ]  # fmt: skip
    tools = toolsets[0]
    history = [Message.system("s"), *(_message(i) for i in range(5))]
    made = 5
    for op, n in [("same", 0), *steps]:
        i = n % len(history) if history else 0
        if op == "append":
            history = [*history, *(_message(made + j) for j in range(n % 5 + 1))]
            made += n % 5 + 1
        elif op == "rewrite" and history:
            history = [*history[:i], Message.user(f"rewritten {made}"), *history[i + 1 :]]
            made += 1
        elif op == "longer" and history:  # the old JSON's text up to its close leads the new one
            history = [*history[:i], replace(history[i], content=history[i].content + " more"), *history[i + 1 :]]
        elif op == "flag" and history:  # a message unequal to the old one, with the same JSON
            old = history[i]
            history = [*history[:i], replace(old, preserve_verbatim=not old.preserve_verbatim), *history[i + 1 :]]
        elif op == "accent" and history:  # é and è share their first UTF-8 byte
            history = [*history[:i], replace(history[i], content=history[i].content.replace("é", "è")), *history[i + 1 :]]
        elif op == "cut":
            history = history[: n % (len(history) + 1)]
        elif op == "other":
            history = [Message.system("other"), *(_message(made + j) for j in range(n % 6))]
            made += n % 6
        elif op == "tools":
            tools = toolsets[n % len(toolsets)]
        elif op == "body":  # asked between requests: neither moves what the next request is compared with
            meter.wire_body([_message(made)], toolsets[2])
            meter.retain(history[: n % (len(history) + 1)])
        body = dumps({"tools": tools, "messages": to_wire_list(history)}).encode("utf-8", "surrogatepass")
        expected = probe.feed(body)
        assert meter.body_step(history, tools) == (expected.body_bytes, expected.previous_bytes, expected.shared_bytes)
        assert meter.wire_body(history, tools) == body


def test_a_request_body_is_compared_without_being_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's requests are compared with the ones before from the pieces' sizes: no request
    body is joined while every request succeeds (a join copies the whole history), and a chat that
    only appends reads as one, each request sharing all of the one before but its closing ``]}``."""
    from contextkit.events import RequestEvent
    from contextkit.sizing import lastbuilt

    joined: list[int] = []
    build = lastbuilt.LastBody.build
    monkeypatch.setattr(lastbuilt.LastBody, "build", lambda self, *a: joined.append(1) or build(self, *a))
    with GatewaySimulator() as gw:
        session = Session(gw.model, api_base=gw.api_base, api_key="k", status=None, on_flush=None)
        for turn in range(6):
            session.send(f"turn {turn}: " + "é" * turn)
        sent = [e for e in session.events if isinstance(e, RequestEvent)]
        session.close()
    assert joined == []
    assert len(sent) == 6 and sent[0].append_only is None
    assert all(e.append_only and 0.9 < (e.prefix_share or 0) < 1 for e in sent[1:])


@pytest.mark.parametrize("copies", [False, True])
def test_the_meter_forgets_the_messages_a_history_no_longer_holds(copies: bool) -> None:
    """``retain`` keeps memory bounded by the history: the originals compaction replaced are dropped
    (``copies``: an equal copy of a message was sized too, which the caches hold differently)."""
    meter = RequestMeter()
    history = [Message.system("s"), *(Message.user(f"message {i}") for i in range(20))]
    meter.measure(history)
    if copies:
        meter.measure([Message.system("s"), Message.user("message 3")])  # equal, not the same objects
    kept = [history[0], *history[10:]]
    meter.retain(kept)
    assert meter.entries == len(kept)
    misses = meter.misses
    assert meter.measure(kept).bytes == request_bytes(kept)
    assert meter.misses == misses  # every kept message's sizes are still there
    assert meter.measure(history).bytes == request_bytes(history) and meter.misses == misses + 9


def test_retain_waits_while_the_caches_hold_at_most_an_eighth_more_than_the_history() -> None:
    """After every turn of a long session the history has only grown: ``retain`` does not walk the
    caches then, and once more than an eighth of them is stale it drops all of it."""
    meter = RequestMeter()
    history = [Message.system("s"), *(Message.user(f"message {i}") for i in range(99))]
    meter.measure(history)
    meter.retain(history)
    assert meter.entries == 100
    meter.retain(history[:95])  # 5 stale, at most 95 // 8: they wait
    assert meter.entries == 100
    meter.retain(history[:80])  # 20 stale: everything stale goes
    assert meter.entries == 80
    assert meter.measure(history[:80]).bytes == request_bytes(history[:80])


def test_a_settled_prefix_is_only_the_same_messages_checked_with_the_same_limits() -> None:
    from contextkit.limits.context import SettledPrefix

    settled = SettledPrefix()
    history = [Message.system("s"), *(Message.user(f"m{i}") for i in range(5))]
    assert settled.start("budgets", history, 1) == 0  # nothing passed yet
    settled.passed("budgets", history, 1)
    grown = [*history, Message.assistant("a")]
    assert settled.start("budgets", grown, 1) == len(history)
    assert settled.start("budgets", grown, 2) == 0  # other limits: everything again
    assert settled.start("pairing", grown) == 0  # another check
    equal_copy = [*history[:2], Message.user("m1"), *history[3:], grown[-1]]  # equal, not the same object
    assert settled.start("budgets", equal_copy, 1) == len(history)  # the same message: it passes the same
    other = [*history[:2], Message.user("m1 changed"), *history[3:], grown[-1]]
    assert settled.start("budgets", other, 1) == 0
    assert settled.start("budgets", tuple(grown), 1) == len(history)  # any sequence
    assert settled.start("budgets", history[:3], 1) == 0  # a cut: the passed history is gone


def test_a_settled_prefix_carries_over_a_rewrite_that_only_shortened_messages_in_place() -> None:
    from contextkit.limits.context import SettledPrefix
    from contextkit.messages import ToolCall

    settled = SettledPrefix()
    history = [Message.user("task"), Message.assistant("", [ToolCall("c", "f", "{}")]), Message.tool("c", "x" * 500)]
    settled.passed("budgets", history, 1)
    stubbed = [*history[:2], Message.tool("c", "stub")]
    settled.shrunk("budgets", history, stubbed)
    assert settled.start("budgets", [*stubbed, Message.user("next")], 1) == 3
    for other in (
        [*history[:2], Message.tool("c", "x" * 501)],  # longer
        [*history[:2], Message.tool("d", "stub")],  # another call's result
        [*history[:2], Message.tool("c", "stub", preserve_verbatim=True)],
        [history[0], Message.assistant("", [ToolCall("c", "g", "{}")]), history[2]],  # another call
        [*history[:2], Message.user("stub")],  # another kind
        history[:2],  # a message gone
    ):
        settled.passed("budgets", history, 1)
        settled.shrunk("budgets", history, other)
        assert settled.start("budgets", other, 1) == 0, other
    settled.passed("budgets", history[:2], 1)  # what the check passed is not what was rewritten
    settled.shrunk("budgets", history, stubbed)
    assert settled.start("budgets", stubbed, 1) == 2  # the record stays as it was
