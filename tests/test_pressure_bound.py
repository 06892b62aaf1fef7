"""The pressure pass's shortcut: a pass that could not free ``clear_at_least`` is not built at all
(``most_freed``, from the messages' sizes). Attacked over random agent histories: the bound is never
below what a pass really frees, and a session's pass decides exactly as it did without the
shortcut (the same history out, the same verdict)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextkit.messages import Message, ToolCall
from contextkit.policy.budgets import enforce_tool_result_budgets, is_budget_preview
from contextkit.policy.pressure import (
    PressureConfig,
    PressureReport,
    PressureTally,
    kept_indices,
    most_freed,
    pressure,
    relieve_pressure,
)
from contextkit.policy.testing import MemorySink
from contextkit.sizing import Measure, RequestMeter

METER = RequestMeter()
LINE = st.sampled_from(["def handler(self): return 1", "naïve café — 😀 ünïcode", 'print("a\\tb")', "x" * 70])


def measure(history: Sequence[Message]) -> Measure:
    return METER.measure(history)


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """An agent run: reads of a few paths (some read again), outputs of mixed sizes and scripts, now
    and then a call with bulky arguments (a file written through the call), and part of it already
    through one pressure pass (so one-liners and dedup stubs are in it)."""
    h = [Message.system("You are a coding agent."), Message.user("fix the bug in src/app/core.py")]
    turns = draw(st.integers(4, 18))
    passed_at = draw(st.integers(max(2, turns - 4), turns))  # late: most of the run is stubs
    for t in range(turns):
        path = f"src/mod_{draw(st.integers(0, 5))}.py"
        lines = draw(st.lists(LINE, min_size=1, max_size=4))
        body = "\n".join(f"{n:4d}| {lines[n % len(lines)]} name_{t}_{n}" for n in range(draw(st.integers(1, 160))))
        args = json.dumps({"path": path})
        if draw(st.integers(0, 5)) == 0:
            args = json.dumps({"path": path, "content": "w" * draw(st.integers(900, 4_000))})
        h += [
            Message.assistant("", [ToolCall(f"c{t}", "read_file", args)]),
            Message.tool(f"c{t}", body, name="read_file", path=path),
            Message.assistant(f"read {path}; next step {t}"),
        ]
        if t + 1 == passed_at:
            window = max(1, measure(h).tokens)
            h, _ = relieve_pressure(h, archive=MemorySink(), measure=measure, window=window * 2, cap=None,
                                    config=PressureConfig(trigger=0.1, target=0.0, clear_at_least=0.0))  # fmt: skip
    return h


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.floats(0.5, 3.0), st.booleans(), st.sampled_from([1.0, 0.93, 1.17]))
def test_no_pass_frees_more_than_the_bound(history: list[Message], fill: float, by_bytes: bool, ratio: float) -> None:
    meter = RequestMeter()
    meter.ratio = ratio  # calibrated: the measure scales its token sum, the sizes are the messages' own
    measure = meter.measure
    m = measure(history)
    window, cap = (10**9, max(1, int(m.bytes / fill))) if by_bytes else (max(1, int(m.tokens / fill)), None)
    config = PressureConfig(trigger=0.0001, excerpt_trigger=1.0, target=0.0, clear_at_least=0.0)  # clear all it may
    out, report = relieve_pressure(history, archive=MemorySink(), measure=measure, window=window, cap=cap,
                                   config=config)  # fmt: skip
    protect = kept_indices(history, config.keep)
    bound = most_freed(history, protect, meter.message_sizes, window=window, cap=cap, ratio=ratio)
    freed = pressure(m, window=window, cap=cap) - pressure(measure(out), window=window, cap=cap)
    assert freed <= bound + 1e-9, (freed, bound, report.describe())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.floats(0.55, 1.2), st.booleans(), st.floats(0.02, 0.3))
def test_the_shortcut_decides_as_the_whole_pass(history: list[Message], fill: float, by_bytes: bool, least: float) -> None:
    m = measure(history)
    window, cap = (10**9, max(1, int(m.bytes / fill))) if by_bytes else (max(1, int(m.tokens / fill)), None)
    config = PressureConfig(clear_at_least=least)
    def run(sizes: Callable[[Message], tuple[int, int]] | None) -> tuple[list[Message], PressureReport]:
        return relieve_pressure(history, archive=MemorySink(), measure=measure, window=window, cap=cap,
                                config=config, sizes=sizes)  # fmt: skip

    (whole, whole_report), (short, short_report) = run(None), run(METER.message_sizes)
    assert short == whole
    assert short_report.acted == whole_report.acted
    assert (short_report.before, short_report.after, short_report.cleared) == (
        whole_report.before, whole_report.after, whole_report.cleared,
    )  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.lists(st.integers(0, 10**6), min_size=1, max_size=8), st.integers(1, 3))
def test_the_tally_kept_from_request_to_request_is_the_bound(history: list[Message], steps: list[int], keep: int) -> None:
    """The flow asks the bound of a history that grew, or was rewritten near its end, or cut back,
    since the last request: the running totals it keeps give what a whole walk gives, every time."""
    tally = PressureTally()
    current = history[:2]
    for n, step in enumerate(steps):
        results = [j for j, m in enumerate(current) if m.role == "tool"]
        if step % 3 == 0 and results:  # a rewrite: a tool result replaced by a stub
            i = results[step % len(results)]
            current = [*current[:i], current[i].with_content("[Old tool result cleared - 1 lines]"), *current[i + 1 :]]
        elif step % 5 == 1:  # cut back (a truncation)
            current = current[: max(2, step % (len(current) + 1))]
        else:  # the history grew
            current = history[: max(len(current), 2 + step % (len(history) + 1))]
        protect = kept_indices(current, keep)
        ratio = 1.0 if n % 3 else 1.13  # calibration moved: the sums kept are the messages' own
        expected = most_freed(current, protect, METER.message_sizes, window=10_000, cap=50_000, ratio=ratio)
        assert tally.bound(current, protect, METER.message_sizes, window=10_000, cap=50_000, ratio=ratio) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.lists(st.integers(0, 10**6), min_size=1, max_size=8))
def test_the_previews_kept_from_request_to_request_are_where_a_walk_finds_them(
    history: list[Message], steps: list[int]
) -> None:
    """The excerpt tier asks where the previews of archived outputs are on every request between its
    trigger and the pass's: the positions kept for the shared prefix, and the new messages looked at,
    are where a walk over the whole history finds them - after growth, after a preview cleared to a
    one-liner, after a cut."""
    history, _ = enforce_tool_result_budgets(history, archive=MemorySink(), per_result=1_500)  # the long reads: previews
    tally = PressureTally()
    current = history[:2]
    for step in steps:
        previews = [j for j, m in enumerate(current) if is_budget_preview(m)]
        if step % 4 == 0 and previews:  # the excerpt tier cleared one
            i = previews[step % len(previews)]
            current = [*current[:i], current[i].with_content("[Old tool result cleared - 1 lines]"), *current[i + 1 :]]
        elif step % 4 == 1:  # cut back (a truncation)
            current = current[: max(2, step % (len(current) + 1))]
        else:  # the history grew
            current = history[: max(len(current), 2 + step % (len(history) + 1))]
        assert tally.previews(current) == [j for j, m in enumerate(current) if is_budget_preview(m)]


def test_the_shortcut_skips_a_history_of_stubs_without_building_the_pass() -> None:
    """Old results all one-liners already, the newest kept: nothing a pass may touch could free 10%."""
    h = [Message.system("s"), Message.user("task")]
    for t in range(60):
        h += [
            Message.assistant("", [ToolCall(f"c{t}", "read_file", json.dumps({"path": f"src/m{t}.py"}))]),
            Message.tool(f"c{t}", "\n".join(f"line {n} of m{t}" for n in range(200)), name="read_file", path=f"src/m{t}.py"),
            Message.assistant(f"done {t}"),
        ]  # fmt: skip
    everything = PressureConfig(trigger=0.01, target=0.0, clear_at_least=0.0)
    h, first = relieve_pressure(h, archive=MemorySink(), measure=measure, window=max(1, measure(h).tokens), cap=None,
                                config=everything)  # fmt: skip
    assert first.acted and first.cleared == 59
    window = int(measure(h).tokens / 0.7)  # over the trigger, on stubs and short answers
    sink = MemorySink()
    out, report = relieve_pressure(h, archive=sink, measure=measure, window=window, cap=None,
                                   sizes=METER.message_sizes)  # fmt: skip
    assert out == h and not report.acted
    assert report.reason.startswith("would free at most"), report.reason
    assert sink.puts == 0  # nothing staged, nothing archived
    whole, whole_report = relieve_pressure(h, archive=MemorySink(), measure=measure, window=window, cap=None)
    assert whole == h and not whole_report.acted  # the whole pass, built, says the same


# The per-text work every pass repeats over old outputs, made cheap: attacked against the plain way.

SUFFIX_PARTS = st.sampled_from([
    "\n[full content recoverable via @recall ", "<<ccr:0123456789abcdef>>", " ", "]", "\n", "text ", "<<ccr:XYZ>>",
])  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(SUFFIX_PARTS, max_size=12).map("".join))
def test_the_suffix_found_from_its_last_head_is_the_one_a_search_finds(content: str) -> None:
    from contextkit.policy import _common

    match = _common._SUFFIX_RE.search(content)
    expected = (content, ()) if match is None else (content[: match.start()], tuple(dict.fromkeys(
        _common.MARKER_RE.findall(match.group(1)))))  # fmt: skip
    assert _common.split_suffix(content) == expected
    assert _common.is_derived(content) == (match is not None)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="ab_./Cc dD<>:0123456789\n", max_size=200))
def test_names_remembered_are_the_names_scanned(text: str) -> None:
    from contextkit.markers import MARKER_RE, extract_keys, has_marker
    from contextkit.policy import reuse

    assert reuse.names(text) == list(reuse._scan_names(text))
    assert reuse.names(text) == list(reuse._scan_names(text))  # the second time from memory
    assert reuse._lines(text) == reuse._scan_lines(text)
    assert extract_keys(text) == list(dict.fromkeys(MARKER_RE.findall(text)))
    assert has_marker(text) == (MARKER_RE.search(text) is not None)


def test_the_memo_holds_at_most_its_share_of_characters(monkeypatch) -> None:
    from contextkit.policy import reuse

    monkeypatch.setattr(reuse, "_MEMO_CHARS", 1_000)
    memo = reuse._Memo(reuse._scan_names)
    texts = [f"text_{i:02d} " * 20 for i in range(40)]  # 160 characters each
    for text in texts:
        assert memo(text) == reuse._scan_names(text)
    assert memo._chars <= 1_000 and len(memo._known) == 6
    assert list(memo._known) == texts[-6:]  # the oldest went first
