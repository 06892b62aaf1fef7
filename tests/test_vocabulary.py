"""One name per concept: the compaction pipeline has *stages* (trim, summary, truncation), the
recovery ladder has *levels* (1-3); data stored under the old compaction level numbers still reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contextkit.archive import Archive
from contextkit.compaction.compactor import Compactor
from contextkit.compaction.types import CompactionStats
from contextkit.events import COMPACTION_STAGES, CompactionEvent, EventLog, event_from_dict, stage_of_number
from contextkit.limits.state import SessionStats
from contextkit.messages import Message
from contextkit.settings import Limits
from contextkit.sim import GatewaySimulator
from contextkit.widgets.labels import LEVELS, PHASES, STAGES

ROOT = Path(__file__).resolve().parents[1]
# the modules that read counters saved under their old name, on purpose
READS_OLD_NAMES = ("contextkit/compaction/types.py", "contextkit/limits/state.py")


def _measure(history: list[Message]) -> int:
    return sum(len(m.content) for m in history)


def _run(history: list[Message], budget: int) -> tuple[list[CompactionEvent], str]:
    log = EventLog()
    compactor = Compactor(archive=Archive.in_memory(session_id="v"), limits=Limits(), events=log)
    result = compactor.compact(history, summarizer=None, trigger="auto", budget=budget, measure=_measure)
    return [e for e in log if isinstance(e, CompactionEvent)], result.stage


def _chat(n: int, size: int) -> list[Message]:
    out = [Message.system("You are terse.")]
    for i in range(n):
        out += [Message.user(f"question {i} " + "q" * size), Message.assistant(f"answer {i} " + "a" * size)]
    return out


def test_every_compaction_event_names_its_stage_and_the_phases_map_to_one_stage_each() -> None:
    events, stage = _run(_chat(30, 2_000), budget=20_000)  # no summarizer: trim, then truncation
    assert stage == "truncation"
    by_phase: dict[str, set[str]] = {}
    for e in events:
        by_phase.setdefault(e.phase, set()).add(e.stage)
    assert by_phase["start"] == {""}  # the start of a pass belongs to no stage yet
    assert by_phase["done"] == {"truncation"}  # the last stage that changed the history
    expected = {"trim": "trim", "dedup": "trim", "microcompact": "trim", "budget": "trim", "truncate": "truncation"}
    for phase, stage_name in expected.items():
        assert by_phase[phase] == {stage_name}, phase
    assert all(e.stage in (*COMPACTION_STAGES, "") for e in events)


def test_a_pass_that_changes_nothing_has_no_stage() -> None:
    events, stage = _run(_chat(2, 10), budget=10**6)
    assert stage == "" and events[-1].phase == "done" and events[-1].stage == ""


def test_compaction_events_saved_with_level_numbers_read_as_stages() -> None:
    for number, name in ((1, "trim"), (2, "summary"), (3, "truncation"), (0, ""), (7, ""), (True, "")):
        old = {"type": "compaction", "phase": "x", "level": number, "outcome": "applied"}
        event = event_from_dict(old)
        assert isinstance(event, CompactionEvent) and event.stage == name, number
        assert stage_of_number(number) == name
    # today's dicts round-trip, and a stage already present wins over a stray level
    today = CompactionEvent(phase="summarize", stage="summary").to_dict()
    assert "level" not in today and event_from_dict(today) == CompactionEvent(phase="summarize", stage="summary")
    assert event_from_dict({**today, "level": 3}).stage == "summary"  # type: ignore[attr-defined]


def test_counters_saved_as_level3_falls_read_as_truncation_falls() -> None:
    assert SessionStats.from_dict({"level3_falls": 4, "compactions": 9}).truncation_falls == 4
    assert CompactionStats.from_dict({"level3_falls": 2}).truncation_falls == 2
    assert CompactionStats.from_dict({"level3_falls": 2, "truncation_falls": 5}).truncation_falls == 5
    assert "level3_falls" not in SessionStats().to_dict() and "level3_falls" not in CompactionStats().to_dict()


def test_a_session_saved_before_the_rename_loads_with_its_counts(tmp_path: Path) -> None:
    from contextkit.session.core import Session

    with GatewaySimulator(context_window=32_000) as gw:
        session = Session(gw.model, api_base=gw.api_base, api_key="k", archive=Archive(tmp_path / "a.sqlite"),
                          status=None, on_flush=None)  # fmt: skip
        session.send("hello")
        session.compactor.stats.truncation_falls = 3
        path = session.save(tmp_path / "s.json")
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        for part in ("stats", "compactor"):  # the file as an older contextkit wrote it
            data[part]["level3_falls"] = data[part].pop("truncation_falls")
        Path(path).write_text(json.dumps(data), encoding="utf-8")
        loaded = Session.load(path, api_base=gw.api_base, api_key="k", status=None, on_flush=None)
        assert loaded.stats.truncation_falls == 3 and loaded.compactor.stats.truncation_falls == 3


def test_labels_say_stage_for_compaction_and_level_for_recovery() -> None:
    assert set(STAGES) == set(COMPACTION_STAGES) and sorted(LEVELS) == [1, 2, 3]
    for phase, (_label, tooltip) in PHASES.items():
        assert not re.search(r"\blevel\b", tooltip, re.I), f"phase {phase!r} is explained with a recovery word"
    assert all(text.startswith(f"level {n}: ") for n, text in LEVELS.items())


@pytest.mark.parametrize("folder", ["contextkit", "tests", "benchmarks", "notebooks", "scripts"])
def test_compaction_stages_are_not_called_levels(folder: str) -> None:
    """The compaction pipeline's tiers are stages, never levels (no "Level-2 summary", "Level 3
    truncation", "level-3 falls", "compaction L2"). Recovery levels 2 and 3 do truncate: "level 2:
    emergency truncation" is a recovery level and stays."""
    pattern = re.compile(
        r"\blevel[- ]?2[- ]summar|\blevel[- ]?3[- ]truncat|level3_falls|\bcompaction L\d|\blevel-[123]\b"
        r"|\bL[123] (summar|trim|trunc)",
        re.I,
    )
    here = Path(__file__).resolve()
    hits = [
        f"{p.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for p in sorted((ROOT / folder).rglob("*.py"))
        if p.resolve() != here
        for text in [p.read_text(encoding="utf-8")]
        for m in pattern.finditer(text)
        if not (m.group(0) == "level3_falls" and str(p.relative_to(ROOT)) in READS_OLD_NAMES)
    ]
    assert hits == []
    for sample in ("a Level-2 summary was rejected", "Level 3 truncation", "stats.level3_falls", "compaction L2"):
        assert pattern.search(sample), sample  # the check can fail
    assert not pattern.search("recovery level 2: emergency truncation")
