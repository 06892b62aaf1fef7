"""``contextkit ask`` (one shot, pipeable) and ``contextkit chat`` (a REPL): Session's recovery in a terminal.

Both build one ``Session`` from the same options (model, ``--api-base``, ``--api-key``, ``--system``,
``--archive``, ``--max-payload``, ``--context-window``), so a refusal is recovered exactly as in
a notebook: the notices of a recovery are the session's status lines, printed on stderr.

``contextkit ask [-p TEXT | -]``: the prompt is ``-p TEXT``, or ``-`` (or no prompt and a piped
stdin) to read it from stdin. stdout gets the answer alone, followed by one newline; every notice
goes to stderr. Exit codes:

====  =====================================================================================
0     answered
1     the turn failed: the provider or a gateway refused and recovery could not help, or the
      request could not be sent (the reason is on stderr; nothing on stdout)
2     usage: a bad option, no prompt, an empty prompt
3     the provider refused the credentials (``--api-key``, or the provider's own variable)
130   interrupted (Ctrl-C)
====  =====================================================================================

``contextkit chat MODEL``: type a message and press Enter; a line that starts with ``/`` is a
command: ``/compact [instruction]``, ``/rewind`` (undo the last compaction), ``/context`` (what
the next request holds, by origin, against the limits), ``/cost``, ``/recall KEY``, ``/help``,
``/quit`` (or Ctrl-D). A failed turn is reported on stderr and the conversation goes on from the
history as it was before that turn.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from typing import Any, TextIO

from contextkit.errors import AuthenticationFailed, ContextkitError, UsageError
from contextkit.sizing import format_size, message_bytes

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_AUTH, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _session_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api-base", help="the provider's or gateway's base URL")
    parser.add_argument("--api-key", help="the API key (default: the provider's own environment variable)")
    parser.add_argument("--system", help="a system prompt")
    parser.add_argument("--archive", help="archive file for what compaction removes (default: a private in-memory one)")
    parser.add_argument("--max-payload", help='the gateway body cap if you know it, e.g. "128KB"')
    parser.add_argument("--context-window", type=int, help="the model's window in tokens, if litellm does not know it")
    parser.add_argument("--session-id", help="the session id (scope in the archive)")


def make_session(model: str, args: argparse.Namespace) -> Any:
    from contextkit.archive import Archive
    from contextkit.session.core import Session
    from contextkit.settings import Limits

    kwargs: dict[str, Any] = {}
    if args.api_base:
        kwargs["api_base"] = args.api_base
    if args.api_key:
        kwargs["api_key"] = args.api_key
    limits = Limits(max_payload=args.max_payload, context_window=args.context_window)
    archive = Archive(args.archive, session_id=args.session_id) if args.archive else Archive.in_memory()
    return Session(model, system=args.system, limits=limits, archive=archive, session_id=args.session_id, **kwargs)


def _failure_code(exc: BaseException) -> int:
    return EXIT_AUTH if isinstance(exc, AuthenticationFailed) else EXIT_FAILED


# ask ---------------------------------------------------------------------------------------------
def run_ask_cli(argv: list[str] | None = None, *, stdin: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="contextkit ask",
        description="Ask once; the answer alone on stdout, every notice on stderr. "
        "Exit codes: 0 answered, 1 the turn failed, 2 usage, 3 credentials refused, 130 interrupted.",
    )
    parser.add_argument("prompt", nargs="?", help='"-" to read the prompt from stdin')
    parser.add_argument("-p", "--prompt", dest="text", help="the prompt")
    parser.add_argument("--model", required=True, help='a litellm model name, e.g. "openai/gpt-4.1-mini"')
    _session_options(parser)
    args = parser.parse_args(argv)
    stdin = sys.stdin if stdin is None else stdin
    if args.text is not None and args.prompt is not None:
        return _usage("give the prompt once: -p TEXT or - (stdin), not both")
    if args.prompt not in (None, "-"):
        return _usage(f"unexpected argument {args.prompt!r}: pass the prompt as -p TEXT, or - to read stdin")
    if args.text is not None:
        text = args.text
    elif args.prompt == "-" or not stdin.isatty():
        text = stdin.read()
    else:
        return _usage("no prompt: pass -p TEXT, or pipe it in with -")
    if not text.strip():
        return _usage("the prompt is empty: pass -p TEXT, or pipe non-empty text in with -")
    try:
        session = make_session(args.model, args)
    except (UsageError, ImportError) as exc:
        return _usage(str(exc))
    try:
        reply = session.send(text)
    except KeyboardInterrupt:
        print("contextkit ask: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ContextkitError as exc:
        print(f"contextkit ask: {exc}", file=sys.stderr)
        return _failure_code(exc)
    except Exception as exc:  # noqa: BLE001 - a provider client's own error: say it, exit 1, keep stdout clean
        print(f"contextkit ask: the request failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        session.close()
    sys.stdout.write(reply.text + "\n")
    sys.stdout.flush()
    return EXIT_OK


def _usage(text: str) -> int:
    print(f"contextkit: {text}", file=sys.stderr)
    return EXIT_USAGE


# chat --------------------------------------------------------------------------------------------
HELP = """commands:
  /compact [instruction]  summarize the older messages now (following the instruction)
  /rewind                 undo the last compaction (turns made since are kept)
  /context                what the next request holds, by origin, against the limits
  /cost                   requests, tokens and cost so far
  /recall KEY             the archived original behind <<ccr:KEY>>
  /quit                   leave (or Ctrl-D)"""


def context_report(session: Any) -> str:
    """What the next request holds, grouped by where it came from, against the window and the cap."""
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for message in session.history:
        if message.is_summary:
            label = "summaries"
        elif message.role == "tool":
            label = f"tool results ({message.origin.tool})" if message.origin and message.origin.tool else "tool results"
        else:
            label = {"system": "system prompt", "user": "user messages", "assistant": "assistant messages"}.get(
                message.role, message.role
            )
        groups[label][0] += 1
        groups[label][1] += message_bytes(message)
    measure = session.measure()
    lines = [f"next request: {measure.messages} messages, {format_size(measure.bytes)}, {measure.tokens:,} tokens"]
    width = max((len(k) for k in groups), default=0)
    for label, (count, size) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"  {label.ljust(width)}  {count:>4} messages  {format_size(size):>9}")
    window = session.context_window
    lines.append(f"window: {measure.tokens:,} / {window:,} tokens ({measure.tokens / window:.0%})" if window else "window: unknown")
    cap = session.payload_cap
    if cap:
        lines.append(f"payload cap: {format_size(measure.bytes)} / {format_size(cap)} ({measure.bytes / cap:.0%}, {session.cap_source})")
    else:
        lines.append("payload cap: none known (learned from the first refusal, if any)")
    return "\n".join(lines)


def cost_report(session: Any) -> str:
    s = session.stats
    return (
        f"requests: {s.requests} (retries {s.retries}), prompt tokens {s.prompt_tokens:,} "
        f"(cached {s.cached_prompt_tokens:,}), completion tokens {s.completion_tokens:,}\n"
        f"summaries: {s.summary_calls} calls; cost ${s.cost + s.summarizer_cost:.4f}"
    )


def chat_command(session: Any, line: str, out: TextIO) -> bool:
    """Run one ``/command``; False when the REPL should end."""
    name, _, rest = line[1:].partition(" ")
    rest = rest.strip()
    if name in ("quit", "exit", "q"):
        return False
    if name == "help":
        print(HELP, file=out)
    elif name == "compact":
        before = len(session.history)
        result = session.compact(rest or None)
        after = len(session.history)
        if getattr(result, "changed", False):
            print(f"compacted: {before} -> {after} messages (/rewind undoes it)", file=out)
        else:
            print("nothing to compact", file=out)
    elif name == "rewind":
        before = len(session.history)
        if session.rewind():
            print(f"rewound the last compaction: {before} -> {len(session.history)} messages", file=out)
        else:
            print("no compaction to rewind", file=out)
    elif name == "context":
        print(context_report(session), file=out)
    elif name == "cost":
        print(cost_report(session), file=out)
    elif name == "recall":
        if not rest:
            print("usage: /recall KEY (the 16 hex characters of a <<ccr:KEY>> marker)", file=out)
        else:
            print(session.archive.recall(rest).text, file=out)
    else:
        print(f"unknown command /{name}; /help lists them", file=out)
    return True


def run_chat_cli(argv: list[str] | None = None, *, stdin: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contextkit chat", description="A chat REPL with contextkit's recovery.")
    parser.add_argument("model", help='a litellm model name, e.g. "openai/gpt-4.1-mini"')
    _session_options(parser)
    args = parser.parse_args(argv)
    stdin = sys.stdin if stdin is None else stdin
    try:
        session = make_session(args.model, args)
    except (UsageError, ImportError) as exc:
        return _usage(str(exc))
    out = sys.stdout
    print(f"contextkit chat with {args.model} - /help for commands, /quit or Ctrl-D to leave", file=out)
    try:
        while True:
            out.write("you> ")
            out.flush()
            line = stdin.readline()
            if not line:
                print(file=out)
                break
            line = line.rstrip("\n")
            if not line.strip():
                continue
            try:
                if line.startswith("/"):
                    if not chat_command(session, line, out):
                        break
                    continue
                reply = session.send(line)
                print(reply.text, file=out)
            except KeyboardInterrupt:
                print("(interrupted: the history is as it was before this turn)", file=sys.stderr)
            except ContextkitError as exc:
                print(f"contextkit chat: {exc}", file=sys.stderr)
            except Exception as exc:  # noqa: BLE001 - a provider client's own error: report it, keep the REPL
                print(f"contextkit chat: the request failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            out.flush()
    except KeyboardInterrupt:
        print(file=out)
    finally:
        session.close()
    return EXIT_OK
