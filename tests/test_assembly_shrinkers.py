"""The assembler's floor shrinkers: instruction blocks under a shared budget, blocks that age into stubs."""

from __future__ import annotations

import pytest

from contextkit.errors import ConfigError
from contextkit.markers import extract_keys_tolerant
from contextkit.policy.testing import MemorySink
from contextkit.prompt.assembly import MIN_INSTRUCTION_TOKENS, Assembler, Block
from contextkit.sizing import text_tokens

SKILL_A = "Skill A: always run the tests before committing. " * 20  # about 200 tokens
SKILL_B = "Skill B: write the changelog entry in the past tense. " * 20
SKILL_C = "Skill C: never push on Fridays. " * 20


def test_instruction_blocks_share_the_budget_in_layout_order() -> None:
    asm = Assembler(
        [
            Block("persona", "You are a careful agent.", stability=0),
            Block("a", SKILL_A, stability=1, instruction=True),
            Block("b", SKILL_B, stability=2, instruction=True),
            Block("c", SKILL_C, stability=3, instruction=True),
        ],
        instruction_budget=300,
    )
    result = asm.assemble()
    by_name = {e.name: e for e in result.log.entries}
    assert by_name["a"].entered and by_name["a"].reason == ""  # fits whole
    assert by_name["b"].entered and "instruction budget 300" in by_name["b"].reason  # cut to what is left
    assert not by_name["c"].entered and "over the instruction budget" in by_name["c"].reason
    assert sum(by_name[n].tokens for n in "abc") <= 300 + 2  # the system merge's separators aside
    assert by_name["persona"].entered  # blocks that are not instructions are not counted
    # without a budget every instruction enters whole: the budget is what made the difference
    whole = Assembler([Block("a", SKILL_A, instruction=True), Block("b", SKILL_B, instruction=True)]).assemble()
    assert all(e.entered and e.reason == "" for e in whole.log.entries)
    assert text_tokens(whole.messages[0].content) > 300
    assert MIN_INSTRUCTION_TOKENS > 0


def test_a_block_ages_into_a_recallable_stub_after_n_calls() -> None:
    sink = MemorySink()
    asm = Assembler([Block("rules", SKILL_A, age_out_after=2), Block("now", lambda ctx: ctx["now"], stability=9, role="user")],
                    archive=sink)  # fmt: skip
    texts = [asm.assemble(now=f"call {i}").messages[0].content for i in range(4)]
    assert texts[0] == texts[1] and texts[0].startswith(SKILL_A)
    assert texts[2].startswith("[rules: aged out after 2 calls]") and len(texts[2]) < 200
    (key,) = extract_keys_tolerant(texts[2])
    assert sink.get(key) == SKILL_A
    assert "aged out after 2 calls" in asm.logs[2].entries[0].reason
    # a block whose text changes starts its count again
    asm2 = Assembler([Block("rules", lambda ctx: ctx["rules"], age_out_after=1)], archive=MemorySink())
    assert asm2.assemble(rules="v1").messages[0].content == "v1"
    assert asm2.assemble(rules="v2").messages[0].content == "v2"
    assert asm2.assemble(rules="v2").messages[0].content.startswith("[rules: aged out")


def test_aging_needs_an_archive_and_budgets_must_be_sane() -> None:
    with pytest.raises(ConfigError, match="archive"):
        Assembler([Block("rules", "x", age_out_after=2)])
    with pytest.raises(ConfigError, match="age_out_after"):
        Block("rules", "x", age_out_after=0)
    with pytest.raises(ConfigError, match="instruction_budget"):
        Assembler([Block("a", "x")], instruction_budget=-1)
