"""``contextkit sim``: run the gateway simulator in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import sys
import time

from contextkit.errors import ConfigError
from contextkit.sim.faults import OVERFLOW_STYLES, REJECT_MODES
from contextkit.sim.server import SUMMARY_MODES, GatewaySimulator


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="contextkit sim",
        description="Serve the contextkit gateway simulator (OpenAI + Anthropic APIs) on 127.0.0.1.",
    )
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: a free port)")
    p.add_argument("--context-window", type=int, default=None, help="model context window in tokens")
    p.add_argument("--max-body", default=None, help='gateway body cap, e.g. "128KB" or "5MB"')
    p.add_argument("--reject-with", default="413", choices=REJECT_MODES, help="how the gateway rejects big bodies")
    p.add_argument("--overflow-style", default="openai", choices=sorted(OVERFLOW_STYLES), help="overflow wording")
    p.add_argument("--max-output-tokens", type=int, default=None, help="cut replies (finish_reason=length)")
    p.add_argument("--latency", type=float, default=0.0, help="seconds to wait before answering")
    p.add_argument("--summary-mode", default="extract", choices=SUMMARY_MODES, help="summarizer behaviour")
    return p


def run_sim_cli(argv: list[str] | None = None, *, _serve_seconds: float | None = None) -> int:
    """Parse ``argv``, serve until Ctrl-C (or ``_serve_seconds``, for tests); return the exit code."""
    args = build_parser().parse_args(argv)
    try:
        gw = GatewaySimulator(
            port=args.port,
            context_window=args.context_window,
            max_body=args.max_body,
            reject_with=args.reject_with,
            overflow_style=args.overflow_style,
            max_output_tokens=args.max_output_tokens,
            latency=args.latency,
            summary_mode=args.summary_mode,
        )
        gw.start()
    except (ConfigError, OSError) as exc:
        print(f"contextkit sim: {exc}", file=sys.stderr)
        return 2
    print(f"api_base: {gw.api_base}   (litellm model={gw.model!r}, api_key='sim-key')")
    print(f"anthropic_api_base: {gw.anthropic_api_base}   (model={gw.anthropic_model!r})")
    print(f"request log: {gw.anthropic_api_base}/log   - Ctrl-C to stop", flush=True)
    try:
        deadline = None if _serve_seconds is None else time.monotonic() + _serve_seconds
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        gw.stop()
    return 0
