"""The identifier ledger: the exact strings a summary must not lose, computed without a model.

A weak summarizer paraphrases ``/etc/billing/billing.conf`` into "the config file" and ``pytest -q
tests/test_store.py`` into "ran the tests". The ledger is extracted deterministically from the
summarized segment (regular expressions, no model) and appended to every summary, so the
session keeps every path, URL, command, number with a unit, port, id or hash, error code and
function or table name even when the prose is poor. The same extraction scores a summary
(``retention``) and checks a model's prose for facts that are not in the segment (``ungrounded``).

Pure: text in, values out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

# Rendering order is priority order: when the ledger's budget is short, later classes are cut first.
CLASSES = ("paths", "urls", "commands", "errors", "ports", "ids", "names", "numbers")
LEDGER_HEADER = "## Identifier Ledger (exact strings from the summarized messages)"

_MARKER_RE = re.compile(r"<<ccr:[0-9a-f]{16}>>")
_URL_RE = re.compile(r"\b(?:https?|wss?|ftp|postgres(?:ql)?|mysql|redis|s3|file)://[^\s<>\"'`)\]]+")
_EXT = (
    r"py|pyi|ipynb|js|mjs|ts|tsx|jsx|go|rs|java|kt|rb|php|c|h|cc|cpp|hpp|cs|swift|sh|bash|ps1|md|rst|txt|json|"
    r"jsonl|toml|ya?ml|ini|cfg|conf|env|lock|csv|tsv|sql|html|css|scss|xml|log|service|socket|timer|gguf|"
    r"db|sqlite|parquet|tar|gz|zip|whl|pem|crt|key|proto|tf|dockerfile"
)
# A path: absolute or ~/ ./ ../ with at least two components, any relative path ending in a file
# extension, or a bare file name with a known extension. "and/or", "req/s", "I/O" are not paths.
_PATH_RE = re.compile(
    r"(?<![\w/.~:@-])(?:"
    rf"(?:~|\.{{1,2}})?/[\w.@+-]+(?:/[\w.@+-]+)+/?"
    rf"|(?:[\w.@+-]+/)+[\w@+-][\w.@+-]*\.(?:{_EXT})"
    rf"|[\w@+-][\w.@+-]*\.(?:{_EXT})"
    r")(?![\w/])",
    re.IGNORECASE,
)
_SHELL_FENCE_RE = re.compile(r"```(?:sh|bash|shell|console|zsh|terminal)\s*\n(.*?)```", re.DOTALL)
_DOLLAR_RE = re.compile(r"(?m)^\s*\$\s+(\S[^\n]{0,200}?)\s*$")
_INLINE_CODE_RE = re.compile(r"`([^`\n]{2,200})`")
_TOOL_CALLS_RE = re.compile(r"\[tool_calls: ([^\n]+)\]")
_COMMAND_WORDS_TEXT = (
    "apt apt-get awk bash brew cargo cat cd chmod chown cmake cp curl docker docker-compose du echo find gcc git "
    "go gradle grep gunzip gzip head helm htop jq journalctl kill kubectl less ln ls make mkdir mv mvn mypy "
    "nginx node npm npx pg_dump pip pip3 pnpm poetry psql pytest python python3 redis-cli rg rm rsync ruff "
    "scp sed service sort sqlite3 ssh sudo systemctl tail tar terraform tee top touch uv uvicorn wc wget yarn"
)
COMMAND_WORDS = frozenset(_COMMAND_WORDS_TEXT.split())
_CMD_KEYS = ("cmd", "command", "script", "shell")
_ERROR_RES = (
    re.compile(r"\b(?:HTTP|status)[ /]?[1-5]\d\d\b"),
    re.compile(r"\bexit (?:code|status) \d+\b"),
    re.compile(r"\bE\d{3,5}\b"),
    re.compile(r"\b(?:ERR|ERROR)_[A-Z0-9_]{3,}\b"),
    re.compile(
        r"\bE(?:CONNRESET|CONNREFUSED|CONNABORTED|TIMEDOUT|ADDRINUSE|ADDRNOTAVAIL|HOSTUNREACH|NETUNREACH|NOENT|"
        r"NOSPC|NOMEM|ACCES|PERM|PIPE|AGAIN|EXIST|INVAL|MFILE|BADF|BUSY|NOTDIR|ISDIR|NOTEMPTY|ROFS|PROTO)\b"
    ),
    re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Exceeded|Timeout)\b"),
)
_PORT_RES = (
    re.compile(r"\bport[s]?\s+(\d{2,5})\b", re.IGNORECASE),
    re.compile(r"--port[= ](\d{2,5})\b"),
    re.compile(r"\s-[pP] ?(\d{4,5})\b"),  # ssh -p 2222, psql -p 5432
    re.compile(r"(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1?\]|\b[a-z][\w-]*(?:\.[\w-]+)+):(\d{2,5})\b"),
)
_ID_RES = (
    re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE),
    re.compile(r"(?<![\w-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}(?![\w-])"),
    re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d{1,6}\b"),
)
_NAME_RES = (
    re.compile(r"\b(?:def|function|func|fn)\s+([A-Za-z_]\w*)"),
    re.compile(r"\bclass\s+([A-Z]\w*)"),
    re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\(\))"),
    re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+[`\"]?([A-Za-z_][\w.]*)"),
    re.compile(r"\btable\s+[`\"]?([a-z][\w.]*_[\w.]*)", re.IGNORECASE),
)
_UNITS = (
    r"ms|µs|us|ns|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|weeks?|"
    r"[KMGTP]i?B|bytes?|[KMG]bps|tokens?|req/s|rps|qps|ops/s|%|°C|x|MHz|GHz|cores?|vCPUs?|rows|lines"
)
_NUMBER_RES = (
    re.compile(rf"(?<![\w.])\d+(?:[.,]\d+)?\s?(?:{_UNITS})(?![\w/])"),
    re.compile(r"(?<![\w.])\d+\.\d+\.\d+(?:[-+][\w.]+)?(?![\w.])"),  # versions
    re.compile(r"(?<![\w.,/-])\d{3,}(?![\w/-])"),  # not a piece of a date, path or range
)
# "  12| code", "line 102: code", "0042 " at the start of a line: a listing's line numbers, not facts
_LINE_NUMBER_RE = re.compile(r"(?m)^[ \t]*(?:line[ \t]+)?\d+(?=[:|\t ])")
_NUMBER_ONLY_RE = re.compile(r"\d+(?:[.,]\d+)*")


@dataclass(frozen=True)
class Ledger:
    """Identifiers by class, each class in first-appearance order."""

    items: tuple[tuple[str, tuple[str, ...]], ...]

    def by_class(self) -> dict[str, tuple[str, ...]]:
        return dict(self.items)

    def all(self) -> set[str]:
        return {value for _, values in self.items for value in values}

    def __len__(self) -> int:
        return sum(len(values) for _, values in self.items)

    def render(self, budget: int, expendable: Collection[str] = ()) -> str:
        """The ledger as markdown within ``budget`` characters ("" when there is nothing to list).

        When it does not fit, the ``expendable`` identifiers (those an earlier summary already carried:
        the oldest) are left out first, the oldest of each class in turn; then classes are written in
        priority order. What is left out is counted, never silently cut.
        """
        if not self.items:
            return ""
        if self._size() <= budget:
            return self._full()
        ledger, shed = self._shed(budget, set(expendable)) if expendable else (self, 0)
        lines = [LEDGER_HEADER]
        used = len(LEDGER_HEADER) + 1
        left = len(ledger) + shed
        for cls, values in ledger.items:
            entries, head, sep = _entries(cls, values)
            line, shown = head, 0
            for entry in entries:
                piece = (sep if shown or cls == "commands" else "") + entry
                if used + len(line) + len(piece) + _MORE_LINE > budget:  # room for the "more not listed" line
                    break
                line += piece
                shown += 1
            if shown:
                lines.append(line)
                used += len(line) + 1
                left -= shown
            if shown < len(values):
                break
        if left:
            lines.append(_more_line(left))
        return "\n".join(lines) if len(lines) > 1 else ""

    def _full(self) -> str:
        lines = [LEDGER_HEADER]
        for cls, values in self.items:
            entries, head, sep = _entries(cls, values)
            lines.append(head + ("" if cls != "commands" else sep) + sep.join(entries))
        return "\n".join(lines)

    def _size(self) -> int:
        """Characters of the full rendering."""
        return len(LEDGER_HEADER) + sum(_rendered_size(cls, values) + 1 for cls, values in self.items)

    def _shed(self, budget: int, expendable: set[str]) -> tuple[Ledger, int]:
        """This ledger without as many ``expendable`` identifiers as it takes to fit ``budget``: the oldest
        of each class in turn (each class lists oldest first), lowest-priority class first in a round."""
        size = self._size()
        queues = [[v for v in values if v in expendable] for cls, values in reversed(self.items)]
        widths = [5 if cls == "commands" else 2 for cls, _ in reversed(self.items)]
        dropped: set[str] = set()
        while size + _MORE_LINE > budget and any(queues):
            for queue, width in zip(queues, widths, strict=True):
                if queue and size + _MORE_LINE > budget:
                    value = queue.pop(0)
                    dropped.add(value)
                    size -= len(value) + width
        kept = tuple((cls, tuple(v for v in values if v not in dropped)) for cls, values in self.items)
        return Ledger(tuple((cls, values) for cls, values in kept if values)), len(dropped)


def _more_line(count: int) -> str:
    return f"- ({count} more identifiers not listed: recall the full segment with its marker)"


_MORE_LINE = len(_more_line(99_999)) + 1  # room kept for that line (and its newline) when cutting


def _entries(cls: str, values: Sequence[str]) -> tuple[list[str], str, str]:
    """(entries, line head, separator) of one class's line."""
    if cls == "commands":
        return [f"  $ {v}" for v in values], f"- {cls}:", "\n"
    return list(values), f"- {cls}: ", ", "


def _rendered_size(cls: str, values: Sequence[str]) -> int:
    entries, head, sep = _entries(cls, values)
    return len(head) + sum(len(e) for e in entries) + len(sep) * (len(entries) - (cls != "commands"))


def _strip(value: str) -> str:
    return value.strip().rstrip(".,:;!?)]}'\"").strip()


def _commands(text: str) -> list[str]:
    found: list[str] = []
    for block in _SHELL_FENCE_RE.findall(text):
        for line in block.splitlines():
            line = re.sub(r"^\s*[$#]\s+", "", line).strip()
            if line and not line.startswith("#"):
                found.append(line)
    found.extend(_DOLLAR_RE.findall(text))
    for code in _INLINE_CODE_RE.findall(text):
        words = code.split()
        first = words[0] if words else ""
        if first in COMMAND_WORDS or (first.startswith(("./", "bin/", "scripts/")) and len(first) > 2):
            found.append(code.strip())
    for calls in _TOOL_CALLS_RE.findall(text):
        found.extend(_tool_commands(calls))
    return found


def _tool_commands(calls: str) -> list[str]:
    """Shell commands in rendered native tool calls ``bash({"cmd": "..."}), read_file({...})``."""
    out = []
    for hit in re.finditer(r"([\w.-]+)\((\{.*?\})\)(?=, [\w.-]+\(|$)", calls):
        try:
            args = json.loads(hit.group(2))
        except ValueError:
            continue
        if isinstance(args, dict):
            for key in _CMD_KEYS:
                value = args.get(key)
                if isinstance(value, str) and value.strip():
                    out.append(value.strip())
    return out


def _tool_names(text: str) -> list[str]:
    names: list[str] = []
    for calls in _TOOL_CALLS_RE.findall(text):
        names.extend(hit.group(1) for hit in re.finditer(r"(?:^|, )([\w.-]+)(?=\(|,|$)", calls))
    return names


def extract(text: str) -> Ledger:
    """The identifiers of ``text`` by class (``<<ccr:KEY>>`` markers are plumbing and not counted)."""
    text = _MARKER_RE.sub(" ", text)
    found: dict[str, list[str]] = {cls: [] for cls in CLASSES}
    urls = [_strip(u) for u in _URL_RE.findall(text)]
    found["urls"] = urls
    rest = _URL_RE.sub(" ", text)
    found["commands"] = _commands(text)
    found["paths"] = [_strip(p) for p in _PATH_RE.findall(rest)]
    found["errors"] = [m.group(0) for rx in _ERROR_RES for m in rx.finditer(text)]
    found["ports"] = [m.group(1) for rx in _PORT_RES for m in rx.finditer(text)]
    found["ids"] = [m.group(0) for rx in _ID_RES for m in rx.finditer(rest)]
    names = [m.group(1) for rx in _NAME_RES for m in rx.finditer(rest)]
    called = {n for n in names if n.endswith("()")}
    # `def load_batch(...)` and `load_batch()` are one function: keep the call form
    found["names"] = [n for n in names if n + "()" not in called] + _tool_names(text)
    numbers = [m.group(0) for rx in _NUMBER_RES for m in rx.finditer(_LINE_NUMBER_RE.sub(" ", rest))]
    found["numbers"] = numbers
    return _dedup(found)


def _dedup(found: dict[str, list[str]]) -> Ledger:
    seen: set[str] = set()
    items = []
    for cls in CLASSES:
        values = []
        for value in found[cls]:
            value = value.strip()
            if len(value) < 2 or value in seen:
                continue
            # a bare number already written inside another identifier adds nothing to the ledger
            if cls == "numbers" and value.isdigit() and any(value in v for v in seen):
                continue
            seen.add(value)
            values.append(value)
        if values:
            items.append((cls, tuple(values)))
    return Ledger(tuple(items))


def identifiers(text: str) -> set[str]:
    """Every identifier of ``text`` (all classes)."""
    return extract(text).all()


def retention(wanted: Iterable[str], summary: str) -> float | None:
    """Share of ``wanted`` identifiers found verbatim in ``summary``; None when there are none."""
    wanted = set(wanted)
    if not wanted:
        return None
    return sum(1 for ident in wanted if ident in summary) / len(wanted)


def ungrounded(prose: str, source: str) -> list[str]:
    """Identifiers in ``prose`` that ``source`` does not contain: invented files, ports, ids, numbers.

    Lenient where a faithful summary may differ: a path may be shortened to its file name or a
    suffix, a number may lose or change its unit spacing, a command may be quoted in part.
    """
    ledger = extract(prose)
    missing = []
    for cls, values in ledger.items:
        for value in values:
            if not _grounded(cls, value, source):
                missing.append(value)
    return missing


def _grounded(cls: str, value: str, source: str) -> bool:
    if value in source:
        return True
    if cls == "paths":
        bare = value.lstrip("~./").rstrip("/")
        return bool(bare) and re.search(rf"(?<![\w.-]){re.escape(bare)}(?![\w-])", source) is not None
    if cls == "urls":
        return value.rstrip("/") in source
    if cls == "commands":  # quoted in part or re-spaced, but made of the segment's own words
        return all(word in source for word in value.split())
    if cls == "names":
        return value.rstrip("()") in source
    if cls == "ids":
        return value.lower() in source.lower()
    numbers = _NUMBER_ONLY_RE.findall(value)
    if not numbers:  # an error name such as ECONNRESET or KeyError
        return value.lower() in source.lower()
    return all(re.search(rf"(?<![\d.,]){re.escape(n)}(?![\d])", source) is not None for n in numbers)
