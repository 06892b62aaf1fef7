"""What a pressure pass clears first (policy/reuse.py), what its stubs say, and where it stops."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contextkit.markers import extract_keys
from contextkit.messages import Message, ToolCall, from_wire
from contextkit.policy.arguments import is_archived_arguments
from contextkit.policy.microcompact import ONE_LINER_PREFIX
from contextkit.policy.pressure import PressureConfig, pressure, relieve_pressure
from contextkit.policy.reuse import call_text, names, rank, stub_names
from contextkit.policy.testing import MemorySink
from contextkit.replay import load_trajectory, replay
from contextkit.sizing import Measure, RequestMeter

METER = RequestMeter()
TRACE = Path(__file__).parent / "fixtures" / "traces" / "pvlib-1606-format-error.traj.json"


def measure(history: Sequence[Message]) -> Measure:
    return METER.measure(history)


def bash_run(outputs: Sequence[tuple[str, str]], *, said: str = "") -> list[Message]:
    """An agent run of one bash call per step: ``(command, output)`` pairs; ``said`` is what the
    agent wrote with its last call (names it has referred to)."""
    h = [Message.system("You are a coding agent."), Message.user("Fix the bug.")]
    for n, (command, output) in enumerate(outputs):
        text = said if n == len(outputs) - 1 else ""
        h += [
            Message.assistant(text, [ToolCall(f"c{n}", "bash", json.dumps({"command": command}))]),
            Message.tool(f"c{n}", output, name="bash"),
        ]
    return h


def filler(n: int, size: int = 3_000) -> str:
    """Output with no names in it (plain words)."""
    return "".join(f"line {n} {k} of plain words here\n" for k in range(size // 30))


def named(prefix: str, count: int, size: int = 3_000) -> str:
    """Output holding ``count`` distinct names (``prefix_k``), padded with plain words to ``size``
    (lines of its own: no other output shows them)."""
    body = "".join(f"def {prefix}_{k}(): pass\n" for k in range(count))
    return body + "".join(f"{prefix} says {k} plain words here\n" for k in range((size - len(body)) // 30))


def test_superseded_results_go_first_then_fewest_unused_names_per_byte_then_oldest():
    h = bash_run([
        ("pytest tests/", named("old_run", 5)),           # 0: re-run later -> superseded
        ("cat src/a.py", named("dense", 40)),              # 1: many unused names
        ("ls", filler(2)),                                  # 2: no names at all
        ("ls -la", filler(3)),                              # 3: no names either, newer
        ("grep -n x src/b.py", named("sparse", 3)),         # 4: a few names
        ("pytest tests/", named("new_run", 5)),            # 5: the re-run
        ("echo done", "done"),                              # 6: kept (newest)
    ])  # fmt: skip
    results = [i for i, m in enumerate(h) if m.role == "tool"]
    order = [results.index(c.index) for c in rank(h, protect={results[-1]})]
    assert order[0] == 0  # the command ran again later: its older output goes first
    assert order[1:3] == [2, 3]  # nothing unused in them: oldest first
    assert order.index(4) < order.index(1)  # 3 unused names per 3 KB before 40 per 3 KB
    assert 6 not in order  # protected


def test_an_older_view_a_later_output_shows_again_is_superseded():
    view = "".join(f"    {k:3d}  value_{k} = compute_thing({k})\n" for k in range(60))
    h = bash_run([("sed -n 1,60p src/m.py", view), ("cat src/m.py", "header\n" + view + "footer\n"), ("ls", "x")])
    results = [i for i, m in enumerate(h) if m.role == "tool"]
    first = rank(h, protect={results[-1]})[0]
    assert first.index == results[0] and first.superseded


def test_names_the_agent_already_wrote_do_not_count():
    h = bash_run([("cat a.py", named("known", 20)), ("cat b.py", named("fresh", 5)), ("ls", "x")],
                 said=" ".join(f"known_{k}" for k in range(20)))  # fmt: skip
    results = [i for i, m in enumerate(h) if m.role == "tool"]
    by = {c.index: c for c in rank(h, protect={results[-1]})}
    assert by[results[0]].unused == 0 and by[results[1]].unused == 5
    assert rank(h, protect={results[-1]})[0].index == results[0]


def test_bulky_arguments_of_calls_that_ran_are_candidates_and_become_excerpts():
    heredoc = "cat > src/new.py << 'EOF'\n" + "x = 1\n" * 600 + "EOF"
    h = bash_run([(heredoc, "written"), ("ls", filler(1)), ("cat src/new.py", "x = 1\n" * 600), ("ls", "y")])
    results = [i for i, m in enumerate(h) if m.role == "tool"]
    first = rank(h, protect={results[-1]})[0]
    assert first.arguments and h[first.index].role == "assistant"
    out, report = relieve_pressure(
        h, archive=(sink := MemorySink()), measure=measure, window=int(measure(h).tokens / 0.7), cap=None,
        config=PressureConfig(trigger=0.6, target=0.0, keep=1, clear_at_least=0.0),
    )  # fmt: skip
    args = out[first.index].tool_calls[0].arguments
    assert report.acted and is_archived_arguments(args) and len(args) < 600
    assert sink.get(extract_keys(args)[0]) == h[first.index].tool_calls[0].arguments  # nothing lost


def test_a_stub_names_the_call_and_a_few_names_it_held():
    output = "src/pkg/core.py:12: def parse_header(raw):\nsrc/pkg/util.py:3: class HeaderError\n" + filler(0)
    h = bash_run([("grep -rn 'def parse_header' src/", output), ("ls", filler(1)), ("ls", "z")])
    out, report = relieve_pressure(
        h, archive=MemorySink(), measure=measure, window=int(measure(h).tokens / 0.7), cap=None,
        config=PressureConfig(trigger=0.6, target=0.0, keep=1, clear_at_least=0.0),
    )  # fmt: skip
    stub = out[3].content
    assert report.acted and stub.startswith(ONE_LINER_PREFIX) and extract_keys(stub)
    assert "grep -rn 'def parse_header' src/" in stub  # the call that produced it
    assert "src/pkg/core.py" in stub and "src/pkg/util.py" in stub  # paths first
    assert len(stub.split("\n")[0]) < 260  # still one short line
    assert stub_names(output, referred={"src/pkg/core.py"}) == ["src/pkg/util.py", "parse_header", "HeaderError"]
    # a name the stub already shows (in its call) is not listed again
    assert stub_names(output, referred=set(), said="cat src/pkg/core.py")[0] == "src/pkg/util.py"


def test_call_text_is_one_short_line_without_markers_or_brackets():
    call = ToolCall("c", "bash", json.dumps({"command": "cat <<ccr:0123456789abcdef>> [x]\n" + "y" * 200}))
    text = call_text(call)
    assert "\n" not in text and "<<ccr:" not in text and "[" not in text and len(text) <= 60
    assert names("see src/a.py and FooBar, self.x_y; plain words") == ["src/a.py", "FooBar", "self.x_y"]


def test_the_pass_stops_at_the_target_and_clears_no_further():
    h = bash_run([(f"cat f{n}.txt", filler(n)) for n in range(12)])
    window = int(measure(h).tokens / 0.8)
    out, report = relieve_pressure(
        h, archive=MemorySink(), measure=measure, window=window, cap=None,
        config=PressureConfig(trigger=0.6, target=0.5, keep=1, clear_at_least=0.1),
    )  # fmt: skip
    results = [i for i, m in enumerate(h) if m.role == "tool"]
    cleared = [i for i in results if out[i].content.startswith(ONE_LINER_PREFIX)]
    assert report.acted and report.after <= 0.5 and 0 < len(cleared) < len(results) - 1
    assert cleared == results[: len(cleared)]  # equal value: oldest first
    undo = list(out)
    undo[cleared[-1]] = h[cleared[-1]]  # one result fewer cleared is above the target
    assert pressure(measure(undo), window=window, cap=None) > 0.5


def test_a_pass_frees_at_least_clear_at_least_even_when_the_target_is_near():
    """Started just above the target, stopping at it would free too little for a cache break: the pass
    goes deeper, to clear_at_least below where it started, instead of being skipped."""
    h = bash_run([(f"cat f{n}.txt", filler(n)) for n in range(12)])
    window = int(measure(h).tokens / 0.62)
    _out, report = relieve_pressure(
        h, archive=MemorySink(), measure=measure, window=window, cap=None,
        config=PressureConfig(trigger=0.6, target=0.58, keep=1, clear_at_least=0.1),
    )  # fmt: skip
    assert report.acted and report.before - report.after >= 0.1


def test_verbatim_share_falls_for_a_strategy_that_clears_the_wrong_results():
    """Every old output but two cleared on each request: keeping the two reuse ranks last (most
    likely to be used again) keeps more of the agent's first-use names verbatim than keeping the two
    it ranks first."""
    traj = load_trajectory(TRACE)

    def clearing(reverse: bool) -> Any:
        def shape(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
            msgs = [from_wire(m, index=i) for i, m in enumerate(history)]
            results = [i for i, m in enumerate(msgs) if m.role == "tool"]
            order = [c.index for c in rank(msgs, protect=set(results[-1:])) if not c.arguments]
            chosen = set((order[::-1] if reverse else order)[: max(0, len(order) - 2)])
            return [{**m, "content": "[cleared]"} if i in chosen else m for i, m in enumerate(history)]

        shape.__name__ = "wrong" if reverse else "reuse"
        return shape

    right = replay(traj, clearing(False), window=100_000)
    wrong = replay(traj, clearing(True), window=100_000)
    assert right.served_all and wrong.served_all and right.needed == wrong.needed > 0
    assert right.verbatim_share is not None and wrong.verbatim_share is not None
    assert wrong.verbatim_share < right.verbatim_share
