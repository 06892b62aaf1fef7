"""``contextkit mcp --archive PATH``: the mcp SDK's own client, over stdio, reads what a Session archived."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from contextkit import Limits
from contextkit.archive import Archive
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator
from contextkit.tools import ToolResult

LOG_LINE = "2026-11-30 12:00:{:02d} worker-{} ERR_CONN_4471 upstream db-primary:5432 refused in src/app/pool.py\n"


def _write_archive(path: Path) -> None:
    """A real Session whose tool output is too big to keep whole: the output goes to the archive."""

    def read_log(name: str) -> ToolResult:
        """Read a log file."""
        body = "".join(LOG_LINE.format(i % 60, i % 7) for i in range(400))
        return ToolResult(body, path=f"logs/{name}")

    with GatewaySimulator() as gw:
        kw = gw.litellm_kwargs("openai")
        model = kw.pop("model")
        session = Session(
            model,
            **kw,
            tools=[read_log],
            archive=Archive(path, session_id="writer"),
            limits=Limits(tool_result_max_chars=4_000),
            session_id="writer",
            status=None,
        )
        session.send('[[tool:read_log {"name": "pool.log"}]] read the pool log')
        session.close()


@pytest.fixture(scope="module")
def archive_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "archive.sqlite"
    _write_archive(path)
    with Archive(path, session_id="writer") as archive:
        assert len(archive) >= 1
    return path


def _call(archive_file: Path, calls: list[tuple[str, dict[str, Any]]], *extra: str) -> tuple[list[str], list[Any]]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "contextkit.cli.main", "mcp", "--archive", str(archive_file), *extra]
    )
    tools: list[str] = []
    results: list[Any] = []

    async def main() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            listed = await client.list_tools()
            tools.extend(t.name for t in listed.tools)
            for name, args in calls:
                results.append(await client.call_tool(name, args))

    anyio.run(main)
    return tools, results


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def test_an_mcp_client_lists_the_tools_and_reads_the_text_profile(archive_file: Path) -> None:
    tools, (pack, empty, found, original) = _call(
        archive_file,
        [
            ("recall_context", {"query": "ERR_CONN_4471 pool", "max_items": 3, "max_tokens": 200}),
            ("recall_context", {"query": "ERR_NEVER_SEEN_9999"}),
            ("search", {"query": "ERR_CONN_4471"}),
            ("recall", {"key": "placeholder"}),
        ],
    )
    assert {"recall", "recall_context", "search"} <= set(tools)
    text = _text(pack)
    lines = text.splitlines()
    assert lines[0].startswith("### ") and lines[0].endswith(" Context")
    assert lines[1].startswith("Items: ") and int(lines[1].split()[1]) >= 1
    refs = [line for line in lines if line.startswith("Reference: ")]
    assert refs and all(" | Type: " in r and " | Location: " in r for r in refs)
    assert "Location: " in refs[0] and "logs/pool.log" in text
    assert "Context:" in lines and "ERR_CONN_4471" in text.split("Context:", 1)[1]
    # a 200-token budget cannot hold a 30 KB log: the Budget line says it was shortened
    assert any(line.startswith("Budget: ") for line in lines)
    assert pack.structured_content["used_items"] == len(refs)
    assert 0 < pack.structured_content["used_tokens"] <= 200
    assert not pack.is_error
    assert _text(empty) == "No matching archived memory was found."
    assert "ERR_CONN_4471" not in _text(empty)
    key = _text(found).split(" | ")[0]
    assert len(key) == 16
    assert original.is_error  # "placeholder" is no key: a clear tool error, not a crash


def test_recall_returns_the_archived_original(archive_file: Path) -> None:
    with Archive(archive_file, session_id="writer") as archive:
        key = archive.search("ERR_CONN_4471")[0].key
        original = archive.get(key)
    _, (result,) = _call(archive_file, [("recall", {"key": f"<<ccr:{key}>>"})])
    assert not result.is_error
    assert original is not None and original.splitlines()[0] in _text(result)


OUT_OF_RANGE = [
    ({"query": "pool", "max_items": 0}, "max_items must be a whole number from 1 to 50, got 0"),
    ({"query": "pool", "max_items": 51}, "max_items must be a whole number from 1 to 50, got 51"),
    ({"query": "pool", "max_tokens": 0}, "max_tokens must be a whole number from 1 to 12,000, got 0"),
    ({"query": "pool", "max_tokens": 12_001}, "max_tokens must be a whole number from 1 to 12,000, got 12001"),
    ({"query": "  "}, "query must be non-empty text"),
    ({"query": "pool", "max_items": 50, "max_tokens": 12_000}, None),  # the edges are allowed
]


def test_out_of_range_parameters_give_the_documented_error(archive_file: Path) -> None:
    _, results = _call(archive_file, [("recall_context", args) for args, _ in OUT_OF_RANGE])
    for (_, needle), result in zip(OUT_OF_RANGE, results, strict=True):
        text = _text(result)
        if needle is None:
            assert not result.is_error and text.startswith("### "), text
        else:
            assert result.is_error and text.startswith("422 ") and needle in text, text


def test_a_missing_archive_or_session_is_a_clear_error(tmp_path: Path) -> None:
    from contextkit.cli.main import main

    assert main(["mcp", "--archive", str(tmp_path / "nope.sqlite")]) == 2
    assert not (tmp_path / "nope.sqlite").exists()  # the server never creates an archive


def test_an_unknown_session_names_the_ones_the_file_holds(archive_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from contextkit.cli.main import main

    assert main(["mcp", "--archive", str(archive_file), "--session", "ghost"]) == 2
    err = capsys.readouterr().err
    assert "no session ghost" in err and "writer" in err
