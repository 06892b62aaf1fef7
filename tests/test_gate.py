"""The summary gate with its repair: invented facts cost their clause, not the whole answer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextkit.policy import gate
from contextkit.policy import ledger as ids

SEGMENT = (
    "[user]: Fix src/app/api.py; the server listens on port 8081 (build 7f3a9c2e1b).\n\n"
    "[assistant]: Running `pytest -q tests/test_api.py`: 1 failed in 0.32s, p99 850 ms, error E1042.\n"
)


def screen(text: str, **kwargs: object) -> gate.GateVerdict:
    return gate.screen_summary(text, 10_000, source=SEGMENT, **kwargs)  # type: ignore[arg-type]


def test_a_faithful_answer_is_kept_as_it_is() -> None:
    text = "## Files Read\n- src/app/api.py, port 8081\n## Commands Executed\n- pytest -q tests/test_api.py -> 1 failed"
    verdict = screen(text)
    assert verdict == gate.GateVerdict(True, "ok", text) and verdict.note() == ""


def test_only_the_clauses_with_invented_identifiers_go() -> None:
    text = (
        "## Files Read\n"
        "- src/app/api.py was fixed, see OPS-1038. The server listens on port 8081.\n"
        "- src/app/models.py (the handler)\n"
        "## Key Decisions\n"
        "- moved the server to port 8443\n"
        "## Current Task State\n"
        "- Done: the fix for E1042; Pending: rerun the tests, deploy build 9e8d7c6b5a\n"
    )
    verdict = screen(text)
    assert verdict.ok, verdict.reason
    assert verdict.prose == (
        "## Files Read\n"
        "- src/app/api.py was fixed The server listens on port 8081.\n"
        "## Current Task State\n"
        "- Done: the fix for E1042; Pending: rerun the tests"
    )
    assert set(verdict.invented) == {"OPS-1038", "src/app/models.py", "8443", "9e8d7c6b5a"}
    assert ids.ungrounded(verdict.prose, SEGMENT) == []
    assert verdict.note().startswith("4 clauses with facts not in the segment dropped (")
    assert "Key Decisions" not in verdict.prose  # a header with nothing left under it goes too


def test_an_answer_made_of_invented_facts_is_still_refused() -> None:
    """The gate can fail: when nothing is left without the invented facts, the answer is a discard."""
    verdict = screen("## Files Read\n- src/app/invented.py on port 8443, build 9f8e7d6c5b\n## Key Decisions\n- OPS-77")
    assert not verdict.ok and verdict.prose == ""
    assert verdict.reason.startswith("facts not in the segment: src/app/invented.py, 8443")
    assert verdict.reason.endswith("nothing usable left without them")
    # what survives must still be notes: a few words are not
    short = screen("- ok.\n- src/app/invented.py on port 8443")
    assert not short.ok and "nothing usable left" in short.reason


def test_a_fenced_command_that_was_invented_drops_everything() -> None:
    """An identifier that spans lines cannot be cut out by clause: nothing is kept rather than a fake."""
    text = "Ran the deploy script for the api service today.\n```bash\ndocker compose up -d\n```\n"
    kept, dropped, invented = gate.ground_prose(text, SEGMENT)
    assert kept == "" and invented == ("docker compose up -d",) and dropped
    assert not screen(text).ok


def test_a_fence_left_without_its_other_half_goes() -> None:
    text = "Ran the tests for src/app/api.py again.\n```bash\nsee OPS-1038\n```\n- port 8081 still answers"
    kept, _, invented = gate.ground_prose(text, SEGMENT)
    assert "OPS-1038" in invented and "```" not in kept  # the block was emptied
    assert kept == "Ran the tests for src/app/api.py again.\n- port 8081 still answers"
    half = "Ran the tests for src/app/api.py again.\n```\n- port 8081 still answers, see OPS-1038"
    assert "```" not in gate.ground_prose(half, SEGMENT)[0]  # a fence without its other half


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty summary"),
        ("I'm sorry, I cannot do that for src/app/api.py today.", "refusal"),
        ("Error: upstream returned 500 for the summary request", "error text"),
        ("<<ccr:0123456789abcdef>>", "only a marker"),
        ("ok, fine", "too short"),
    ],
)
def test_what_is_not_notes_is_refused_before_any_repair(text: str, reason: str) -> None:
    verdict = screen(text)
    assert not verdict.ok and verdict.reason.startswith(reason) and verdict.prose == ""


def test_the_kept_prose_must_be_smaller_than_what_it_replaces() -> None:
    text = "- src/app/api.py was fixed and the tests were run again after the fix"
    assert not screen(text, max_chars=len(text)).ok
    assert screen(text, max_chars=len(text) + 1).ok


def test_passes_gate_refuses_what_screen_repairs() -> None:
    text = "- src/app/api.py was fixed, see OPS-1038, and the tests were run again"
    assert gate.passes_gate(text, 10_000, source=SEGMENT) == (False, "facts not in the segment: OPS-1038")
    assert screen(text).ok


WORDS = st.sampled_from(
    ["src/app/api.py", "port 8081", "port 9090", "OPS-1038", "fixed", "the", "tests", "7f3a9c2e1b", "abc1234ef",
     "850 ms", "999 ms", "E1042", "E7777", ", ", ". ", "\n- ", "\n## Notes\n", "`pytest -q tests/test_api.py`"]
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(WORDS, min_size=1, max_size=30).map(" ".join))
def test_whatever_is_kept_names_only_facts_of_the_segment(text: str) -> None:
    verdict = screen(text)
    if verdict.ok:
        assert ids.ungrounded(verdict.prose, SEGMENT) == []
        assert len(gate.substance(verdict.prose)) >= gate.PROSE_FLOOR
    else:
        assert verdict.prose == ""
