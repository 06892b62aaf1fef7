"""``Session(context_engine="mcp:...")``: summaries from a real MCP server process, and the fallback.

The server below is written for the test: each call reads what to do from a mode file (answer,
hang, error, empty), so one session meets every behaviour, and logs the arguments it got.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest
from helpers.histories import DECISIONS

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.errors import ConfigError
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator

SERVER = '''
import json, sys, time
from pathlib import Path
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

mode_file, log_file = Path(sys.argv[1]), Path(sys.argv[2])
server = MCPServer("test-engine", log_level="WARNING")

@server.tool()
def context_compact(segment: str, budget_chars: int, instruction: str = "") -> str:
    """Summarize a segment of a conversation in at most budget_chars characters."""
    mode = mode_file.read_text().strip()
    with log_file.open("a") as fh:
        fh.write(json.dumps({"mode": mode, "segment": segment, "budget_chars": budget_chars,
                             "instruction": instruction}) + "\\n")
    if mode == "hang":
        time.sleep(60)
    if mode == "error":
        raise ToolError("engine store is offline")
    if mode == "empty":
        return ""
    return ("Engine notes: the inventory service moved to port 8443; the retry logic in src/retry.py "
            "stays; the deploy waits for the load test.")

server.run("stdio")
'''

HISTORY = DECISIONS


@pytest.fixture
def engine(tmp_path: Path) -> tuple[str, Path, Path]:
    script, mode, log = tmp_path / "engine.py", tmp_path / "mode", tmp_path / "calls.jsonl"
    script.write_text(SERVER)
    mode.write_text("answer")
    return f"mcp:{sys.executable} {script} {mode} {log}", mode, log


def _calls(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _summary(session: Session) -> str:
    return next(m.content for m in session.history if m.is_summary)


def test_summaries_come_from_the_engine_and_every_failure_falls_back(engine: tuple[str, Path, Path]) -> None:
    spec, mode, log = engine
    notices: list[str] = []
    with GatewaySimulator() as gw:
        kw = gw.litellm_kwargs()
        model = kw.pop("model")
        session = Session(
            model, **kw, context_engine=spec, archive=Archive.in_memory(session_id="e"),
            limits=Limits(context_engine_timeout=5, min_keep_recent=2), status=notices.append,
        )  # fmt: skip
        try:
            session.add_messages(HISTORY)
            # 1. the engine answers: its text is the summary (through the same gate and ledger)
            result = session.compact("keep the port")
            assert result.changed
            summary = _summary(session)
            assert "Engine notes" in summary and "8443" in summary, (notices, _calls(log))
            call = _calls(log)[-1]
            assert call["instruction"] == "keep the port" and "port 8443" in str(call["segment"])
            assert 0 < int(str(call["budget_chars"])) < len(str(call["segment"]))
            assert not [r for r in gw.requests if r.kind == "summary"], "the built-in summarizer was not needed"
            assert session.archive.get(next(iter(session.archive.entries())).key) is not None  # originals archived
            assert session.rewind()

            # 2.-4. a server that errs, answers empty or hangs: the built-in summarizer, within the timeout
            for failing, why in (("error", "engine store is offline"), ("empty", "empty summary"), ("hang", "no answer within 5 s")):
                mode.write_text(failing)
                gw.clear_log()
                notices.clear()
                started = time.monotonic()
                assert session.compact("keep the port").changed
                took = time.monotonic() - started
                assert "Engine notes" not in _summary(session), failing
                assert [r for r in gw.requests if r.kind == "summary"], f"{failing}: the built-in summarizer did not run"
                assert any("context engine" in n and why in n for n in notices), (failing, notices)
                assert took < 30, f"{failing}: {took:.1f} s"
                # the engine was asked once for this compaction; its retry stayed with the built-in summarizer
                assert [c["mode"] for c in _calls(log)].count(failing) == 1
                assert session.rewind()

            # the next compaction asks the engine again (after the hang, a fresh server process)
            mode.write_text("answer")
            assert session.compact().changed and "Engine notes" in _summary(session)
            engine_obj = session.context_engine
            assert engine_obj is not None and engine_obj.fallbacks == 3 and engine_obj.answers == 2
        finally:
            session.close()


@pytest.mark.parametrize("spec", ["mcp:", "python engine.py", "mcp:'unclosed", 42])
def test_a_bad_context_engine_is_a_clear_error(spec: object) -> None:
    with pytest.raises(ConfigError, match="context_engine"):
        Session("openai/sim-model", context_engine=spec, status=None)  # type: ignore[arg-type]


def test_a_turn_that_needs_compaction_gets_its_summary_from_the_engine(engine: tuple[str, Path, Path]) -> None:
    """Not only ``compact()``: the compaction a turn needs before it can be sent asks the engine too
    (and falls back to the built-in summarizer when the engine errs), in ``send`` and ``asend``."""
    spec, mode, log = engine
    with GatewaySimulator(context_window=1_100) as gw:
        kw = gw.litellm_kwargs()
        model = kw.pop("model")
        session = Session(
            model, **kw, context_engine=spec, archive=Archive.in_memory(session_id="t"),
            limits=Limits(context_engine_timeout=5, min_keep_recent=2, context_window=1_100), status=None,
        )  # fmt: skip
        try:
            session.add_messages(HISTORY)
            reply = session.send("Where are we? " + "please " * 120)
            assert reply.text and session.stats.compactions >= 1
            assert "Engine notes" in _summary(session) and [c["mode"] for c in _calls(log)] == ["answer"]
            assert not [r for r in gw.requests if r.kind == "summary"]
            assert all(r.tokens <= 1_100 for r in gw.requests if r.accepted)
            mode.write_text("error")
            session.add_messages(HISTORY)
            gw.clear_log()
            reply = asyncio.run(session.asend("And now? " + "please " * 120))
            assert reply.text and [c["mode"] for c in _calls(log)][-1] == "error"
            assert [r for r in gw.requests if r.kind == "summary"], "the built-in summarizer wrote this one"
        finally:
            session.close()


def test_the_example_engine_of_the_docs_writes_the_summaries(tmp_path: Path) -> None:
    doc = (Path(__file__).parent.parent / "docs" / "howto" / "terminal-and-mcp.md").read_text(encoding="utf-8")
    code = next(b.split("\n", 1)[1] for b in doc.split("```")[1::2] if "# my_engine.py" in b)
    script = tmp_path / "my_engine.py"
    script.write_text(code, encoding="utf-8")
    with GatewaySimulator() as gw:
        kw = gw.litellm_kwargs()
        model = kw.pop("model")
        session = Session(
            model, **kw, context_engine=f"mcp:{sys.executable} {script}", archive=Archive.in_memory(session_id="d"),
            limits=Limits(context_engine_timeout=20, min_keep_recent=2), status=None,
        )  # fmt: skip
        try:
            session.add_messages(HISTORY)
            assert session.compact().changed
            assert "\n\nNotes: [user]: We are moving the inventory service to port 8443" in _summary(session)
            assert not [r for r in gw.requests if r.kind == "summary"]  # the engine wrote it, not the built-in one
            engine_obj = session.context_engine
            assert engine_obj is not None and engine_obj.answers == 1 and engine_obj.fallbacks == 0
        finally:
            session.close()
