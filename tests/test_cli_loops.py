"""``contextkit ask`` and ``contextkit chat``: Session's recovery in a pipe and in a terminal."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator

import pexpect
import pytest
from helpers.histories import DECISIONS

from contextkit.cli.loops import run_ask_cli
from contextkit.sim import GatewaySimulator

CLI = [sys.executable, "-m", "contextkit.cli.main"]
# 36 KB: above the 16 KB gateway, so the first request is refused and the session must recover
BIG_QUESTION = "Please summarise this log.\n" + "".join(f"line {i}: worker ERR_CONN_4471 retry {i}\n" for i in range(900))


@pytest.fixture(scope="module")
def gateway() -> Iterator[GatewaySimulator]:
    with GatewaySimulator(max_body="16KB") as gw:
        yield gw


def ask(gw: GatewaySimulator, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "ask", "--model", gw.model, "--api-base", gw.api_base, "--api-key", "sim-key", *args],
        input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_ask_from_stdin_prints_only_the_answer_and_recovery_notices_go_to_stderr(gateway: GatewaySimulator) -> None:
    gateway.reset(max_body="16KB")
    out = ask(gateway, "-", stdin=BIG_QUESTION)
    assert out.returncode == 0, out.stderr[-2000:]
    refused = [r for r in gateway.requests if not r.accepted]
    assert refused, "the gateway must refuse the first request for this test to mean anything"
    # stdout is exactly the model's answer (the simulator's answers start "Reply N:"): one line,
    # none of contextkit's notices
    assert out.stdout.count("\n") == 1 and out.stdout.startswith("Reply ")
    assert "[contextkit]" not in out.stdout and "gateway rejected" not in out.stdout
    assert "gateway rejected" in out.stderr and "payload cap set to" in out.stderr


def ask_here(gw: GatewaySimulator, *args: str, stdin: str = "") -> int:
    """``contextkit ask`` in this process (a subprocess costs seconds of start-up on a small machine)."""
    argv = ["--model", gw.model, "--api-base", gw.api_base, "--api-key", "sim-key", *args]
    return run_ask_cli(argv, stdin=io.StringIO(stdin))


def test_ask_with_p_and_a_short_prompt(gateway: GatewaySimulator, capsys: pytest.CaptureFixture[str]) -> None:
    gateway.reset(max_body="16KB")
    assert ask_here(gateway, "-p", "What is the capital of France?") == 0
    out = capsys.readouterr().out
    assert out.startswith("Reply ") and out.count("\n") == 1
    assert all(r.accepted for r in gateway.requests)


@pytest.mark.parametrize(
    ("argv", "stdin", "needle"),
    [
        (["-p", "x", "-"], "", "not both"),
        (["-"], "   \n", "the prompt is empty"),
        (["question"], "", "pass the prompt as -p TEXT"),
    ],
)
def test_ask_usage_errors_exit_2(argv: list[str], stdin: str, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_ask_cli(["--model", "openai/sim-model", *argv], stdin=io.StringIO(stdin))
    captured = capsys.readouterr()
    assert code == 2 and needle in captured.err and captured.out == ""


def test_ask_exit_codes_for_a_failed_turn_and_refused_credentials(
    gateway: GatewaySimulator, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway.reset(max_body="16KB")
    gateway.fail_next("auth401")
    assert ask_here(gateway, "-p", "hi") == 3
    captured = capsys.readouterr()
    assert captured.out == "" and "contextkit ask:" in captured.err
    gateway.fail_next("400")  # a refusal that is not about size: nothing to recover
    assert ask_here(gateway, "-p", "hi") == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "contextkit ask:" in captured.err


def test_chat_repl_in_a_terminal_recovers_and_rewinds_a_compaction(gateway: GatewaySimulator) -> None:
    gateway.reset(max_body="16KB")
    seen = io.StringIO()
    child = pexpect.spawn(
        CLI[0],
        [*CLI[1:], "chat", gateway.model, "--api-base", gateway.api_base, "--api-key", "sim-key"],
        encoding="utf-8", timeout=90, dimensions=(50, 400),
    )  # fmt: skip
    child.logfile_read = seen
    try:
        child.expect("you> ")
        # three 3.5 KB messages (a terminal line holds at most 4 KB) and their answers outgrow the 16 KB gateway
        for i in range(6):
            child.sendline(f"note {i}: " + " ".join(f"fact-{i}-{j}" for j in range(380)))
            child.expect("you> ")
            if any(not r.accepted for r in gateway.requests):
                break
        assert any(not r.accepted for r in gateway.requests), "the gateway never refused: the test proves nothing"
        child.sendline("/context")
        child.expect("you> ")
        report = child.before or ""
        assert "next request:" in report and "user messages" in report and "payload cap: " in report
        child.sendline("/compact keep every fact number")
        child.expect(r"compacted: (\d+) -> (\d+) messages")
        before, after = int(child.match.group(1)), int(child.match.group(2))
        assert after < before
        child.expect("you> ")
        child.sendline("/rewind")
        child.expect(r"rewound the last compaction: (\d+) -> (\d+) messages")
        assert (int(child.match.group(1)), int(child.match.group(2))) == (after, before)
        child.expect("you> ")
        child.sendline("/cost")
        child.expect(r"requests: (\d+)")
        assert int(child.match.group(1)) >= 3
        child.expect("you> ")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    # the recovery's notices reached the terminal (stderr), and every message got its answer
    assert "gateway rejected" in seen.getvalue() and "contextkit chat:" not in seen.getvalue()


def test_chat_recall_prints_the_archived_original_and_explains_bad_keys() -> None:
    from contextkit.archive import Archive
    from contextkit.cli.loops import chat_command
    from contextkit.session.core import Session

    with GatewaySimulator() as gw:
        session = Session(gw.model, api_base=gw.api_base, api_key="k", archive=Archive.in_memory(session_id="r"), status=None)
        try:
            session.add_messages(DECISIONS)
            out = io.StringIO()
            assert chat_command(session, "/compact", out) and "compacted:" in out.getvalue()
            key = next(iter(session.archive.entries())).key
            for line in (f"/recall {key}", "/recall", "/recall 0123456789abcdef"):
                out = io.StringIO()
                assert chat_command(session, line, out)  # the REPL goes on
                shown = out.getvalue()
                if line == "/recall":
                    assert shown.startswith("usage: /recall KEY")
                elif key in line:
                    assert "port 8443" in shown
                else:
                    assert "0123456789abcdef" in shown and "port 8443" not in shown
        finally:
            session.close()
