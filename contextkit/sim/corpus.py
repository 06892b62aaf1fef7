"""Generated texts with known identifiers: agent segments and pasted documents (the retention corpus).

Summaries are judged by what they keep. To measure that, the identifiers must be known in
advance rather than extracted by the code under test: every generator here returns its text
together with the ``Planted`` identifiers it wrote, by class. Deterministic in the seed, so a
benchmark, a test and a notebook see the same bytes.

* ``agent_segment(seed)`` - a coding-agent exchange (a task, tool calls, file and command output,
  an error, a decision) as ``Message`` objects, about 2 KB (small: a real small model summarizes it in seconds).
* ``document(seed, size)`` - an incident report / runbook a user pastes into a chat, ``size`` bytes.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field

from contextkit.messages import Message, ToolCall

CLASSES = ("paths", "urls", "commands", "numbers", "ports", "ids", "errors", "names")

_SERVICES = ("billing", "ingest", "search", "ledger", "gateway", "scheduler", "notifier", "reports", "checkout")
_MODULES = ("handlers", "models", "store", "client", "retry", "schema", "worker", "cache")
_VERBS = ("parse", "load", "flush", "validate", "render", "resolve", "sync", "merge")
_NOUNS = ("invoice", "batch", "cursor", "session", "payload", "receipt", "token", "quota")
_ERRNOS = ("ECONNRESET", "ETIMEDOUT", "ECONNREFUSED", "ENOSPC", "EADDRINUSE")
_EXCEPTIONS = ("KeyError", "TimeoutError", "IntegrityError", "ValueError", "PermissionError")
_FILLER = (
    "the team reviewed the dashboards and agreed that the rollout should continue once the alerts are quiet",
    "nothing in the upstream changelog explains the change so the investigation moved to our own code",
    "a second engineer reproduced the problem on a staging host with the same configuration",
    "the on-call notes say the symptoms started shortly after the nightly batch window opened",
    "customers reported slower pages but no data loss and the support queue stayed short",
    "the capacity plan assumed a steady load which the last two weeks did not match",
    "we kept the old behaviour behind a flag so that a rollback takes one configuration change",
    "the metrics agree with the logs once the clock skew between the two hosts is taken into account",
    "the migration guide was followed step by step and every step was recorded in the ticket",
    "after the fix the error rate returned to its usual level within a few minutes",
)


@dataclass
class Planted:
    """The identifiers a generator wrote, by class (each list in first-appearance order)."""

    paths: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    numbers: list[str] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    def add(self, cls: str, value: str) -> str:
        items: list[str] = getattr(self, cls)
        if value not in items:
            items.append(value)
        return value

    def items(self) -> list[tuple[str, str]]:
        """(class, identifier) pairs."""
        return [(cls, value) for cls in CLASSES for value in getattr(self, cls)]

    def __len__(self) -> int:
        return sum(len(getattr(self, cls)) for cls in CLASSES)


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class _Facts:
    """Draws one scenario's identifiers and records them as they are written."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.planted = Planted()
        self.service = rng.choice(_SERVICES)
        self.module = rng.choice(_MODULES)
        self.port = str(rng.randint(8000, 9899))
        self.db_port = str(rng.choice((5432, 5433, 6432)))
        self.function = f"{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}"
        self.table = f"{self.service}_{rng.choice(_NOUNS)}_log"
        self.build = "".join(rng.choice("0123456789abcdef") for _ in range(10))
        if not any(c.isalpha() for c in self.build):  # a hash has a letter and a digit
            self.build = "a" + self.build[1:]
        if not any(c.isdigit() for c in self.build):
            self.build = self.build[:-1] + "7"
        self.ticket = f"OPS-{rng.randint(1000, 9999)}"
        self.code = f"E{rng.randint(1000, 9999)}"
        self.errno = rng.choice(_ERRNOS)
        self.exception = rng.choice(_EXCEPTIONS)
        self.http = str(rng.choice((502, 503, 504, 429)))

    def add(self, cls: str, value: str) -> str:
        return self.planted.add(cls, value)

    def path(self, kind: str) -> str:
        s, m = self.service, self.module
        options = {
            "source": f"src/{s}/{m}.py",
            "test": f"tests/test_{m}.py",
            "config": f"/etc/{s}/{s}.conf",
            "log": f"/var/log/{s}/error.log",
            "unit": f"/etc/systemd/system/{s}.service",
            "migration": f"migrations/{self.rng.randint(100, 999)}_{self.table}.sql",
        }
        return self.add("paths", options[kind])

    def number(self, kind: str) -> str:
        rng = self.rng
        options = {
            "latency": f"{rng.randint(120, 9800)} ms",
            "memory": f"{rng.randint(130, 7900)} MB",
            "disk": f"{rng.randint(51, 99)}%",
            "timeout": f"{rng.randint(15, 600)} s",
        }
        return self.add("numbers", options[kind])

    def url(self, kind: str) -> str:
        if kind == "health":
            self.add("ports", self.port)
            return self.add("urls", f"http://127.0.0.1:{self.port}/health")
        return self.add("urls", f"https://ci.example.com/{self.service}/builds/{self.build}")

    def command(self, kind: str) -> str:
        s, m = self.service, self.module
        options = {
            "restart": f"systemctl restart {s}",
            "test": f"pytest -q tests/test_{m}.py -k {self.function}",
            "curl": f"curl -s http://127.0.0.1:{self.port}/health",
            "journal": f"journalctl -u {s} --since today",
            "revert": f"git revert {self.build[:7]}",
            "vacuum": f"psql -p {self.db_port} -c 'VACUUM ANALYZE {self.table}'",
        }
        if kind == "curl":
            self.add("ports", self.port)
        return self.add("commands", options[kind])


def _sentences(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_FILLER).capitalize() + "." for _ in range(n))


# agent segments -----------------------------------------------------------------------------------


def agent_segment(seed: int) -> tuple[list[Message], Planted]:
    """A coding-agent exchange with known identifiers (about 2 KB of messages)."""
    rng = _rng("segment", seed)
    f = _Facts(rng)
    src, test, log = f.path("source"), f.path("test"), f.path("log")
    f.add("names", f"{f.function}()")
    f.add("ids", f.ticket)
    health = f.url("health")
    user = (
        f"Ticket {f.ticket}: the {f.service} service returns HTTP {f.http} under load. "
        f"The health check is {health}. Please find the cause in {src} and fix it."
    )
    f.add("errors", f"HTTP {f.http}")
    body = "\n".join(
        [f"# {src}", "import logging", "", f"def {f.function}(raw, limit=100):"]
        + [f"    # {line}" for line in _sentences(rng, 4).split(". ")]
        + [f"    rows = db.query('SELECT * FROM {f.table} WHERE id = %s', raw['id'])", "    return rows[:limit]"]
    )
    f.add("names", f.table)
    test_cmd = f.command("test")
    latency, memory = f.number("latency"), f.number("memory")
    output = (
        f"FAILED {test}::test_{f.function} - {f.exception}: 'id'\n"
        f"{f.errno} while connecting to 127.0.0.1:{f.db_port} after {latency}\n"
        f"worker rss {memory}, error {f.code} written to {log}\n1 failed, 11 passed"
    )
    f.add("errors", f.exception)
    f.add("errors", f.errno)
    f.add("errors", f.code)
    f.add("ports", f.db_port)
    revert = f.command("revert")
    restart = f.command("restart")
    f.add("ids", f.build)
    messages = [
        Message.user(user),
        Message.assistant(f"I will read {src} first.", [ToolCall("c1", "read_file", json.dumps({"path": src}))]),
        Message.tool("c1", body, name="read_file"),
        Message.assistant("Running the failing test.", [ToolCall("c2", "bash", json.dumps({"cmd": test_cmd}))]),
        Message.tool("c2", output, name="bash"),
        Message.assistant(
            f"The query in {f.function}() assumes the key 'id'. Build {f.build} introduced it; "
            f"I decided to revert it with `{revert}` and then run `{restart}`. " + _sentences(rng, 2)
        ),
        Message.user("Go ahead. " + _sentences(rng, 1)),
        Message.assistant(f"Reverted and restarted. {_sentences(rng, 2)} The test now passes."),
    ]
    return messages, f.planted


# pasted documents ---------------------------------------------------------------------------------


def document(seed: int, size: int = 8000) -> tuple[str, Planted]:
    """An incident report a user pastes into a chat: about ``size`` bytes, identifiers planted."""
    rng = _rng("document", seed)
    f = _Facts(rng)
    facts = [
        f"The service reads its settings from {f.path('config')} and writes errors to {f.path('log')}.",
        f"The unit file is {f.path('unit')}; restart it with `{f.command('restart')}`.",
        f"It listens on port {f.add('ports', f.port)}; check it with `{f.command('curl')}`.",
        f"The build that shipped the change is {f.add('ids', f.build)} ({f.url('build')}).",
        f"During the incident p99 latency reached {f.number('latency')} and memory use {f.number('memory')}.",
        f"The logs show {f.add('errors', f.errno)} and error code {f.add('errors', f.code)} "
        f"from {f.add('names', f.function + '()')}.",
        f"Every failed request touched the table {f.add('names', f.table)} through {f.path('source')}.",
        f"The fix is tracked in {f.add('ids', f.ticket)}; the schema change is {f.path('migration')}.",
        f"To inspect, run `{f.command('journal')}` and `{f.command('vacuum')}`.",
        f"Disk usage peaked at {f.number('disk')} before the cleanup; the client timeout is {f.number('timeout')}.",
    ]
    f.add("ports", f.db_port)
    title = f"# Incident {f.ticket}: {f.service} degraded\n\n"
    parts = [title]
    budget = max(size - len(title) - sum(len(x) + 2 for x in facts), 0)
    per_fact = budget // len(facts)
    for i, fact in enumerate(facts):
        filler = ""
        while len(filler) + 60 < per_fact:
            filler += rng.choice(_FILLER).capitalize() + ". "
        heading = (
            f"## {('Summary', 'Timeline', 'Impact', 'Cause', 'Fix', 'Follow-up')[i % 6]}\n\n" if i % 2 == 0 else ""
        )
        parts.append(f"{heading}{filler}{fact}\n\n")
    return "".join(parts).rstrip() + "\n", f.planted
