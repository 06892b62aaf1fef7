"""Pressure-gated, batched rewrites: gating, keep-K, target, clear_at_least, staging."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from contextkit.errors import ConfigError
from contextkit.markers import extract_keys
from contextkit.messages import Message, ToolCall
from contextkit.policy.budgets import enforce_tool_result_budgets, is_budget_preview
from contextkit.policy.microcompact import ONE_LINER_PREFIX, MicrocompactConfig, microcompact
from contextkit.policy.pressure import PressureConfig, kept_indices, pressure, relieve_pressure
from contextkit.policy.testing import MemorySink, StagedSink
from contextkit.policy.trim import STUB_PREFIX, dedup_repeated_reads
from contextkit.settings import Limits
from contextkit.sizing import Measure, RequestMeter

METER = RequestMeter()


def measure(history: Sequence[Message]) -> Measure:
    return METER.measure(history)


def agent(turns: int, size: int = 6_000, *, paths: Sequence[str] | None = None) -> list[Message]:
    """``turns`` agent turns, each reading one ~``size``-char file and answering."""
    h = [Message.system("You are a coding agent.")]
    for t in range(turns):
        path = paths[t] if paths else f"src/file_{t}.py"
        body = "".join(f"{t:03d}:{n:04d} | some source line with content\n" for n in range(size // 37))
        h += [
            Message.user(f"turn {t}: read {path}"),
            Message.assistant("", [ToolCall(f"c{t}", "read_file", f'{{"path": "{path}"}}')]),
            Message.tool(f"c{t}", body, name="read_file", path=path),
            Message.assistant(f"read {path}"),
        ]
    return h


def window_for(history: Sequence[Message], share: float) -> int:
    """A window in which ``history`` sits at ``share`` of it."""
    return int(measure(history).tokens / share)


def relieve(history: Sequence[Message], window: int, sink: MemorySink | None = None, **config: float) -> tuple:
    return relieve_pressure(
        history,
        archive=MemorySink() if sink is None else sink,
        measure=measure,
        window=window,
        cap=None,
        config=PressureConfig(**config),
    )


def test_below_the_trigger_nothing_changes_even_when_microcompact_would():
    h = agent(10)
    assert microcompact(h, archive=MemorySink())[1].changed  # the always-on rewrite would act here
    sink = MemorySink()
    out, report = relieve(h, window_for(h, 0.59), sink)
    assert out == h and not report.acted and report.reason == "below trigger"
    assert 0.58 < report.before < 0.6 and len(sink) == 0  # nothing archived either


def test_above_the_trigger_one_batch_frees_down_to_the_target_and_keeps_the_last_k():
    h = agent(10)
    sink = MemorySink()
    out, report = relieve(h, window_for(h, 0.70), sink, trigger=0.6, target=0.4, keep=2)
    assert report.acted and report.before == pytest.approx(0.70, abs=0.01) and report.after <= 0.4
    results = [i for i, m in enumerate(h) if m.role == "tool"]
    for i in results[-2:]:
        assert out[i] == h[i]  # the last K results stay verbatim
    cleared = [i for i in results[:-2] if out[i].content.startswith(ONE_LINER_PREFIX)]
    assert cleared, "older results became one-line stubs"
    for i in cleared:  # nothing lost: every stub's marker resolves to its original
        assert sink.get(extract_keys(out[i].content)[0]) == h[i].content
    assert report.describe().startswith("pressure 70% -> ")


def test_keep_counts_tool_results_from_the_end_and_never_drops_an_unanswered_round():
    h = agent(5)
    results = [i for i, m in enumerate(h) if m.role == "tool"]
    assert kept_indices(h, 3) == frozenset(results[-3:])
    assert kept_indices(h, 0) == frozenset() and kept_indices(h, 99) == frozenset(results)
    calls = [ToolCall(f"p{n}", "read_file", "{}") for n in range(3)]
    parallel = [*h, Message.user("read three"), Message.assistant("", calls)]
    parallel += [Message.tool(c.id, "y" * 5_000, name="read_file") for c in calls]
    new = frozenset(range(len(h) + 2, len(parallel)))
    assert kept_indices(parallel, 1) == new  # all three results are new to the model
    out, report = relieve(parallel, window_for(parallel, 0.9), trigger=0.6, target=0.0, keep=1, clear_at_least=0.0)
    assert report.acted and all(out[i] == parallel[i] for i in new)


def test_clear_at_least_skips_a_pass_that_frees_too_little():
    h = agent(3)  # only one result outside keep=2: clearing it frees ~1/3 of the request
    window = window_for(h, 0.65)
    out, report = relieve(h, window, trigger=0.6, target=0.0, keep=2, clear_at_least=0.5)
    assert out == h and not report.acted and "not worth a cache break" in report.reason
    out, report = relieve(h, window, trigger=0.6, target=0.0, keep=2, clear_at_least=0.1)
    assert report.acted and out != h


def test_a_skipped_pass_archives_nothing_and_an_applied_one_archives_what_it_cites():
    h = agent(3)
    sink = MemorySink()
    relieve(h, window_for(h, 0.65), sink, trigger=0.6, target=0.0, keep=2, clear_at_least=0.9)
    assert len(sink) == 0
    out, report = relieve(h, window_for(h, 0.65), sink, trigger=0.6, target=0.0, keep=2, clear_at_least=0.0)
    cited = {k for m in out for k in extract_keys(m.content)}
    assert report.acted and set(sink.entries) == cited == set(report.archived_keys)


def test_staged_sink_reads_staged_content_and_commits_only_what_is_cited():
    sink = MemorySink()
    staged = StagedSink(sink)
    a, b = staged.put("alpha " * 50), staged.put("beta " * 50)
    assert a and b and staged.get(a) == "alpha " * 50 and len(sink) == 0
    assert staged.put("quotes <<ccr:0123456789abcdef>>") is None  # markers: refused unless allowed
    assert staged.commit([Message.user(f"see <<ccr:{a}>>")])
    assert set(sink.entries) == {a}


def test_the_escalation_clears_oldest_first_until_the_target():
    h = agent(12, size=4_000)
    micro = MicrocompactConfig(truncate_turns=10**6, summarize_turns=10**6)  # aging alone frees nothing
    out, report = relieve_pressure(
        h, archive=MemorySink(), measure=measure, window=window_for(h, 0.8), cap=None,
        config=PressureConfig(trigger=0.6, target=0.5, keep=1, clear_at_least=0.0), micro=micro,
    )  # fmt: skip
    results = [i for i, m in enumerate(h) if m.role == "tool"]
    flags = [out[i].content.startswith(ONE_LINER_PREFIX) for i in results]
    assert report.cleared == sum(flags) and 0 < report.cleared < len(results) - 1
    assert flags == sorted(flags, reverse=True)  # a prefix of the oldest results, nothing after it
    assert 0.45 < report.after <= 0.5


def test_the_cap_counts_too():
    h = agent(6)
    m = measure(h)
    share = pressure(m, window=10**9, cap=int(m.bytes / 0.7))
    assert share == pytest.approx(0.7, abs=0.01)
    _out, report = relieve_pressure(h, archive=MemorySink(), measure=measure, window=10**9, cap=int(m.bytes / 0.7))
    assert report.acted and report.after < 0.7


def test_superseded_reads_go_first_and_protected_reads_still_supersede():
    h = agent(4, paths=["a.py", "b.py", "a.py", "a.py"])
    sink = MemorySink()
    out, report = relieve(h, window_for(h, 0.7), sink, trigger=0.6, target=0.0, keep=1, clear_at_least=0.0)
    results = [i for i, m in enumerate(h) if m.role == "tool"]
    assert report.dedup.superseded == 2 and out[results[-1]] == h[results[-1]]
    assert out[results[0]].content.startswith(STUB_PREFIX) and out[results[2]].content.startswith(STUB_PREFIX)
    assert dedup_repeated_reads(h, archive=MemorySink(), protect={results[0]})[1].superseded == 1


def test_a_pass_leaves_one_liners_alone_even_when_a_later_read_supersedes_them():
    """A one-liner deep in the history frees a hundred characters as a dedup stub and would move the
    prompt-cache break back to its place: the pass clears the new results and leaves it."""
    h = agent(8, paths=[f"{name}.py" for name in "abcdefgh"])
    names = "".join(f"def compute_{w}_totals(records_{w}): return summarize_{w}(records_{w})\n" for w in range(60))
    h[3] = h[3].with_content(names * 3)  # a.py: names its one-liner cites, so the stub is longer than a dedup stub
    h, first = relieve(h, window_for(h, 0.7), trigger=0.6, target=0.0, keep=1, clear_at_least=0.0)
    results = [i for i, m in enumerate(h) if m.role == "tool"]
    assert first.acted and h[results[0]].content.startswith(ONE_LINER_PREFIX)  # a.py
    h += agent(3, paths=["i.py", "a.py", "j.py"])[1:]  # new reads, one of a.py again
    out, report = relieve(h, window_for(h, 0.7), trigger=0.6, target=0.0, keep=1, clear_at_least=0.0)
    assert report.acted and report.dedup.superseded == 0
    first_rewritten = next(i for i, (a, b) in enumerate(zip(h, out, strict=True)) if a is not b)
    assert first_rewritten == results[-1]  # the cache holds up to the newest result of the last pass (kept then)
    assert out[results[0]] is h[results[0]]


def test_trigger_zero_is_the_old_always_on_rewrite():
    h = agent(6)
    old, _ = microcompact(h, archive=MemorySink())
    old, _ = dedup_repeated_reads(old, archive=MemorySink())
    out, report = relieve(h, window_for(h, 0.01), trigger=0.0)  # far below any pressure
    assert out == old and report.acted and report.reason == "always on"


def test_limits_fields_validate_and_reach_the_config():
    cfg = PressureConfig.from_limits(Limits(pressure_trigger=0.7, pressure_target=0.3, keep_tool_results=4))
    assert (cfg.trigger, cfg.target, cfg.keep, cfg.clear_at_least) == (0.7, 0.3, 4, 0.10)
    assert PressureConfig.from_limits(Limits()) == PressureConfig()  # one set of defaults
    assert PressureConfig.from_limits(Limits(pressure_trigger=0)).always_on
    with pytest.raises(ConfigError, match="pressure_target"):
        Limits(pressure_trigger=0.5, pressure_target=0.6)
    with pytest.raises(ConfigError, match="share"):
        Limits(pressure_trigger=1.5)
    with pytest.raises(ConfigError, match="keep_tool_results"):
        Limits(keep_tool_results=1.5)  # type: ignore[arg-type]


def test_at_a_hard_limit_the_pass_applies_whatever_it_frees():
    """pressure >= 1: the request cannot be sent as it is and the cache breaks anyway, so the cheapest
    rewrite (no LLM) is applied even when it frees less than clear_at_least."""
    h = agent(3)
    out, report = relieve(h, window_for(h, 1.05), trigger=0.6, target=0.0, keep=2, clear_at_least=0.9)
    assert report.acted and out != h and report.before - report.after < 0.9
    out, report = relieve(h, window_for(h, 0.95), trigger=0.6, target=0.0, keep=2, clear_at_least=0.9)
    assert not report.acted and out == h


def budgeted(turns: int, sink: MemorySink, *, whole: Sequence[int] = ()) -> list[Message]:
    """``turns`` agent turns whose ~30 KB outputs entered as budget previews, except turns in ``whole``
    (a ~6 KB file, entered whole)."""
    h = agent(turns, size=30_000)
    for t in whole:
        i = 3 + 4 * t
        h[i] = h[i].with_content(h[i].content[:6_000])
    out, _ = enforce_tool_result_budgets(h, archive=sink, preview=2_500)
    return out


def test_between_the_excerpt_trigger_and_the_trigger_only_previews_of_archived_outputs_go():
    sink = MemorySink()
    h = budgeted(10, sink, whole=(2, 5))
    results = [i for i, m in enumerate(h) if m.role == "tool"]
    previews = [i for i in results if is_budget_preview(h[i])]
    assert len(previews) == 8
    out, report = relieve(h, window_for(h, 0.45), sink, clear_at_least=0.0)
    assert report.acted and report.reason == "excerpts" and report.after < report.before
    assert report.cleared == 7 and out[results[-1]] == h[results[-1]]  # the kept (newest) preview stays
    for i in results:
        if i in previews[:-1]:  # every other preview became a one-liner citing the full original
            assert out[i].content.startswith(ONE_LINER_PREFIX)
            assert len(sink.get(extract_keys(out[i].content)[0]) or "") > 25_000
        else:  # whole results wait for the trigger
            assert out[i] == h[i]
    assert "previews of archived outputs cleared" in report.describe()


def test_the_excerpt_tier_is_gated_too():
    sink = MemorySink()
    h = budgeted(10, sink)
    out, report = relieve(h, window_for(h, 0.29), sink)
    assert out == h and not report.acted and report.reason == "below trigger"
    out, report = relieve(h, window_for(h, 0.45), sink, excerpt_trigger=0.6)  # at the trigger: tier off
    assert out == h and not report.acted
    out, report = relieve(h, window_for(h, 0.45), sink, clear_at_least=0.9)  # a break must be worth it
    assert out == h and not report.acted and "not worth a cache break" in report.reason
    whole = agent(10)  # whole results only: nothing for the tier, the history stays append-only
    out, report = relieve(whole, window_for(whole, 0.45), sink)
    assert out == whole and not report.acted and report.reason == "below trigger"
