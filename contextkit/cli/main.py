"""The ``contextkit`` command: ``demo``, ``sim``, ``experiment``, ``mcp``, ``ask``, ``chat`` and ``proxy``."""

from __future__ import annotations

import argparse
import sys

from contextkit.backend import offline
from contextkit.display.status import show_status_on_stderr


def main(argv: list[str] | None = None) -> int:
    # The command owns its process: it runs offline (the simulator needs no network) and shows
    # the sessions' status lines on stderr.
    offline()
    show_status_on_stderr()
    parser = argparse.ArgumentParser(prog="contextkit", description="Context engineering toolkit.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a scripted agent behind a 128 KB gateway against the simulator")
    demo.add_argument(
        "--out", default=None, help="folder for the archive, the saved session and the event log (default: a new temporary folder)"
    )
    demo.add_argument("--steps", type=int, default=30, help="agent steps (tool calls)")
    sub.add_parser("sim", help="serve the gateway simulator (see contextkit sim --help)", add_help=False)
    sub.add_parser("experiment", help="run a named strategy sweep (see contextkit experiment --help)", add_help=False)
    sub.add_parser("mcp", help="serve an archive to MCP clients (see contextkit mcp --help)", add_help=False)
    sub.add_parser("ask", help="ask once: the answer on stdout, notices on stderr (see --help)", add_help=False)
    sub.add_parser("chat", help="a chat REPL with recovery and /commands (see --help)", add_help=False)
    sub.add_parser("proxy", help="serve an OpenAI/Anthropic-compatible proxy that manages each client's context "
                   "(see contextkit proxy --help)", add_help=False)  # fmt: skip
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from contextkit.cli.demo import run_demo

        run_demo(args.out, steps=args.steps)
        return 0
    if args.command == "sim":
        from contextkit.sim import run_sim_cli

        return run_sim_cli(rest)
    if args.command == "mcp":
        from contextkit.cli.mcp_server import run_mcp_cli

        return run_mcp_cli(rest)
    if args.command in ("ask", "chat"):
        from contextkit.cli.loops import run_ask_cli, run_chat_cli

        return (run_ask_cli if args.command == "ask" else run_chat_cli)(rest)
    if args.command == "proxy":
        from contextkit.integrations.proxy import run_proxy_cli

        return run_proxy_cli(rest)
    from contextkit.experiments.report import run_experiment_cli

    return run_experiment_cli(rest)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
