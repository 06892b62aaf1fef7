"""Hypothesis invariants over random histories for every policy and the whole chain.

Histories mix system messages (also mid-history), tool calls (parallel, re-used ids, missing and
orphan results), preserve_verbatim flags, recall output, reasoning, file reads and tiny to huge
contents. After any phase and after all phases chained: no orphan call/result, system messages
untouched, nothing lost (every original content appears verbatim in the recursive marker expansion
of the result), and for truncate+shrink the result fits the budget whenever the system messages plus
a small pointer allowance per remaining message fit. Pairing repair is idempotent.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextkit.messages import Message, Origin, ToolCall
from contextkit.policy.budgets import aggressive_level1, enforce_tool_result_budgets
from contextkit.policy.expand import expand_markers
from contextkit.policy.microcompact import MicrocompactConfig, microcompact
from contextkit.policy.pairing import find_orphans, repair_tool_pairing
from contextkit.policy.shrink import cap_verbatim, shrink_to_budget
from contextkit.policy.testing import MemorySink
from contextkit.policy.trim import dedup_repeated_reads, strip_reasoning
from contextkit.policy.truncate import emergency_truncate
from contextkit.sizing import message_bytes, request_bytes

PROFILE = settings(
    deadline=None,
    database=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SIZES = [0, 3, 40, 300, 1_200, 3_500, 9_000, 24_000]
SLACK = st.one_of(st.integers(0, 1_500), st.integers(0, 30_000))
PATTERNS = ["line {i} of output\n", "x", "é€𝄞 ünï\n", '{"k": "v"},\n', "def f():\n    return 1\n"]


def text(uid: int, size: int, pattern: int) -> str:
    unit = PATTERNS[pattern].replace("{i}", str(uid))
    body = (unit * (size // max(1, len(unit)) + 1))[:size]
    return f"<m{uid}>" + body


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    uid = iter(range(10_000))
    size = st.sampled_from(SIZES)
    pattern = st.integers(0, len(PATTERNS) - 1)
    h: list[Message] = [Message.system(text(next(uid), draw(st.sampled_from([5, 300, 2_000])), 0))]
    for _ in range(draw(st.integers(0, 9))):
        kind = draw(st.sampled_from(["user", "user", "plain", "calls", "calls", "system", "orphan", "recall"]))
        n = next(uid)
        if kind == "user":
            h.append(
                Message.user(
                    text(n, draw(size), draw(pattern)), preserve_verbatim=draw(st.booleans()) and draw(st.booleans())
                )
            )
        elif kind == "system":
            h.append(Message.system(text(n, 20, 0)))
        elif kind == "plain":
            content = text(n, draw(size), draw(pattern))
            if draw(st.booleans()):
                content = f"<thinking>{text(next(uid), 200, 1)}</thinking>\n" + content
            h.append(Message.assistant(content, reasoning=draw(st.sampled_from([None, "why " * 30]))))
        elif kind == "orphan":
            h.append(Message.tool(f"ghost:{n}", text(n, draw(size), draw(pattern))))
        elif kind == "recall":
            h.append(Message.assistant("", [ToolCall("r:0", "recall")]))
            h.append(Message.tool("r:0", text(n, draw(size), 0), preserve_verbatim=True, is_recall=True))
        else:
            count = draw(st.integers(1, 3))
            ids = [draw(st.sampled_from([f"web_fetch:{k}", f"c{n}_{k}", ""])) for k in range(count)]
            h.append(
                Message.assistant(
                    text(n, draw(st.sampled_from([0, 40, 6_000])), 0), [ToolCall(i, "read_file") for i in ids]
                )
            )
            answered = draw(st.permutations(ids))[: draw(st.integers(0, count))]
            for cid in answered:
                if not cid:
                    continue
                m = next(uid)
                path = draw(st.sampled_from([None, "a.py", "b.py"]))
                lines = draw(st.sampled_from([None, (1, 50), (10, 20)]))
                origin = Origin(
                    tool="read_file",
                    path=path,
                    line_start=lines[0] if lines else None,
                    line_end=lines[1] if lines else None,
                )
                h.append(
                    Message.tool(
                        cid,
                        text(m, draw(size), draw(pattern)),
                        origin=origin,
                        preserve_verbatim=draw(st.integers(0, 7)) == 0,
                    )
                )
            if draw(st.booleans()):
                h.append(Message.user(text(next(uid), 10, 0)))
    return h


def cached_measure() -> Callable[[Sequence[Message]], int]:
    """Equal to ``request_bytes`` (checked below) with a per-message cache, like RequestMeter."""
    skeleton = request_bytes([])
    cache: dict[Message, int] = {}

    def measure(history: Sequence[Message]) -> int:
        total = skeleton + max(0, len(history) - 1)
        for m in history:
            b = cache.get(m)
            if b is None:
                b = cache[m] = message_bytes(m)
            total += b
        return total

    return measure


def systems(h: Sequence[Message]) -> list[str]:
    return [m.content for m in h if m.role == "system"]


def assert_nothing_lost(originals: Sequence[Message], result: Sequence[Message], sink: MemorySink) -> None:
    expanded = expand_markers("\n\x00".join(m.content for m in result), sink)
    for m in originals:
        original = expand_markers(m.content, sink)
        assert original in expanded, f"lost content of a {m.role} message ({len(m.content)} chars)"


def checked_base(raw: list[Message], sink: MemorySink) -> list[Message]:
    base, report = repair_tool_pairing(raw, archive=sink)
    archived = {sink.get(k) for k in report.archived_keys}
    assert all(orphan.content in archived for orphan in report.orphans)  # removed orphans are archived
    again, r2 = repair_tool_pairing(base)
    assert again is base and not r2.changed  # idempotent
    assert find_orphans(base) == ([], [])
    return base


def newest_user(h: Sequence[Message]) -> Message | None:
    return next((m for m in reversed(h) if m.role == "user" and not m.synthetic), None)


def task_bytes(h: Sequence[Message]) -> int:
    """Bytes of the newest user message, which truncation and shrink never cut (the task survives)."""
    task = newest_user(h)
    return 0 if task is None or task.preserve_verbatim else message_bytes(task) + 1


def check_phase(base: list[Message], out: list[Message], sink: MemorySink) -> None:
    assert find_orphans(out) == ([], [])
    assert systems(out) == systems(base)
    assert_nothing_lost(base, out, sink)


@settings(PROFILE, max_examples=400)
@given(histories())
def test_repair_invariants(raw: list[Message]) -> None:
    sink = MemorySink()
    base, report = repair_tool_pairing(raw, archive=sink)
    assert find_orphans(base) == ([], [])
    assert systems(base) == systems(raw)
    archived = {sink.get(k) for k in report.archived_keys}
    assert all(o.content in archived for o in report.orphans)
    kept = [m for m in raw if m.role != "tool" or m in base]
    assert_nothing_lost(kept, base, sink)
    again, r2 = repair_tool_pairing(base, archive=sink)
    assert again is base and not r2.changed


@settings(PROFILE, max_examples=400)
@given(histories(), st.integers(1, 5), st.sampled_from([500, 3_000, 20_000]))
def test_each_phase_alone(raw: list[Message], turns: int, per_result: int) -> None:
    sink = MemorySink()
    base = checked_base(raw, sink)
    cfg = MicrocompactConfig(truncate_turns=1, summarize_turns=turns, min_chars=1000)
    phases = [
        lambda h: strip_reasoning(h, archive=sink)[0],
        lambda h: dedup_repeated_reads(h, archive=sink)[0],
        lambda h: microcompact(h, archive=sink, config=cfg)[0],
        lambda h: enforce_tool_result_budgets(h, archive=sink, turn_budget=per_result * 2, per_result=per_result)[0],
        lambda h: aggressive_level1(
            h, archive=sink, turn_budget=per_result, per_result=per_result // 2, assistant_cap=per_result
        )[0],
    ]
    for phase in phases:
        out = phase(base)
        check_phase(base, out, sink)
        assert phase(out) == out or phase is phases[2]  # a second run is a no-op (microcompact may age further)


@settings(PROFILE, max_examples=400)
@given(histories(), st.integers(0, 8), st.booleans(), SLACK)
def test_truncate_then_shrink_fits_budget(raw: list[Message], keep: int, nuclear: bool, slack: int) -> None:
    sink = MemorySink()
    measure = cached_measure()
    base = checked_base(raw, sink)
    assert measure(base) == request_bytes(base)
    truncated, _ = emergency_truncate(base, keep=keep, archive=sink, per_message_cap=4000 if nuclear else None)
    check_phase(base, truncated, sink)
    assert not truncated or truncated[0].role == "system"
    first = next((m for m in truncated if m.role != "system"), None)
    assert first is None or first.role == "user" or first.preserve_verbatim
    if newest_user(base) is not None:
        assert newest_user(truncated) == newest_user(base)  # the task survives truncation
    floor = measure([m for m in truncated if m.role == "system"]) + task_bytes(truncated)
    budget = int((floor + 300 * (len(truncated) + 1)) * 4 / 3) + slack
    capped, _ = cap_verbatim(truncated, budget=budget, measure=measure, archive=sink)
    check_phase(base, capped, sink)
    out, report = shrink_to_budget(capped, budget=budget, measure=measure, archive=sink)
    check_phase(base, out, sink)
    assert measure(out) <= budget and report.within_budget
    assert newest_user(out) == newest_user(capped)  # ... and shrinking


@settings(PROFILE, max_examples=300)
@given(histories(), st.integers(1, 6), SLACK)
def test_all_phases_chained(raw: list[Message], keep: int, slack: int) -> None:
    sink = MemorySink()
    measure = cached_measure()
    base = checked_base(raw, sink)
    h, _ = strip_reasoning(base, archive=sink)
    h, _ = dedup_repeated_reads(h, archive=sink)
    h, _ = microcompact(h, archive=sink, config=MicrocompactConfig(truncate_turns=1, summarize_turns=2, min_chars=500))
    h, _ = enforce_tool_result_budgets(h, archive=sink, turn_budget=10_000, per_result=4_000)
    h, _ = aggressive_level1(h, archive=sink, turn_budget=5_000, per_result=2_000)
    h, _ = emergency_truncate(h, keep=keep, archive=sink, per_message_cap=4000)
    budget = int((measure([m for m in h if m.role == "system"]) + task_bytes(h) + 300 * (len(h) + 1)) * 4 / 3) + slack
    h, _ = cap_verbatim(h, budget=budget, measure=measure, archive=sink)
    h, _ = shrink_to_budget(h, budget=budget, measure=measure, archive=sink)
    check_phase(base, h, sink)
    assert measure(h) <= budget


@settings(PROFILE, max_examples=300)
@given(histories(), SLACK)
def test_shrink_alone_fits_budget(raw: list[Message], slack: int) -> None:
    sink = MemorySink()
    measure = cached_measure()
    base = checked_base(raw, sink)
    verbatim = sum(message_bytes(m) + 1 for m in base if m.preserve_verbatim and m.role != "system")
    budget = measure([m for m in base if m.role == "system"]) + 300 * (len(base) + 1) + verbatim + slack
    budget += task_bytes(base)
    out, report = shrink_to_budget(base, budget=budget, measure=measure, archive=sink)
    check_phase(base, out, sink)
    assert measure(out) <= budget and report.within_budget
    assert [m for m in out if m.preserve_verbatim] == [m for m in base if m.preserve_verbatim]


@settings(PROFILE, max_examples=200)
@given(histories())
def test_shrink_leaves_systems_when_they_alone_do_not_fit(raw: list[Message]) -> None:
    sink = MemorySink()
    measure = cached_measure()
    base = checked_base(raw, sink)
    budget = max(1, measure([m for m in base if m.role == "system"]) - 1)
    out, report = shrink_to_budget(base, budget=budget, measure=measure, archive=sink)
    check_phase(base, out, sink)
    assert not report.within_budget and [m for m in out if m.role == "system"] == [
        m for m in base if m.role == "system"
    ]


@settings(PROFILE, max_examples=300)
@given(histories(), histories(), st.sampled_from([500, 3_000, 20_000]), st.booleans())
def test_a_check_that_starts_after_its_settled_prefix_decides_as_a_whole_check(
    raw: list[Message], more: list[Message], per_result: int, extend_round: bool
) -> None:
    """The flow checks pairing and the tool-result budgets only from what a history gained since the
    check last passed it (``valid_prefix``, ``settled``): on any grown history the answer must be the
    whole check's, including a result appended to a round the settled part had closed."""
    settled, _ = repair_tool_pairing(raw, archive=MemorySink())
    tail = more[1:]
    if extend_round:
        tail = [Message.tool("c0_0", "late result"), *tail]  # answers a call of the settled part, or none
    grown = [*settled, *tail]
    whole, whole_report = repair_tool_pairing(grown, archive=MemorySink())
    part, part_report = repair_tool_pairing(grown, archive=MemorySink(), valid_prefix=len(settled))
    assert part == whole and part_report.changed == whole_report.changed
    limits = {"turn_budget": per_result * 2, "per_result": per_result}
    budgeted, _ = enforce_tool_result_budgets(settled, archive=MemorySink(), **limits)
    grown = [*budgeted, *tail]
    assert (
        enforce_tool_result_budgets(grown, archive=MemorySink(), settled=len(budgeted), **limits)[0]
        == enforce_tool_result_budgets(grown, archive=MemorySink(), **limits)[0]
    )


@settings(PROFILE, max_examples=300)
@given(histories(), st.integers(-1, 4))
def test_the_kept_results_are_the_newest_and_the_unanswered(raw: list[Message], keep: int) -> None:
    """``kept_indices`` stops walking back once it has both; the whole walk is the reference."""
    from contextkit.policy.microcompact import is_candidate
    from contextkit.policy.pressure import kept_indices

    results = [i for i, m in enumerate(raw) if m.role == "tool" or (m.role == "user" and is_candidate(m))]
    last_assistant = max((i for i, m in enumerate(raw) if m.role == "assistant"), default=-1)
    expected = set(results[-keep:] if keep > 0 else ()) | {i for i in results if i > last_assistant}
    assert kept_indices(raw, keep) == expected
