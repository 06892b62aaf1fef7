"""The identifier ledger: extraction by class, rendering within a budget, grounding of a model's prose."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextkit.messages import render_transcript
from contextkit.policy import ledger as ids
from contextkit.sim.corpus import CLASSES, agent_segment, document


@pytest.mark.parametrize(
    ("text", "cls", "expected"),
    [
        ("read /etc/nginx/nginx.conf and ~/work/notes.md, then src/app/api.py:42", "paths",
         ["/etc/nginx/nginx.conf", "~/work/notes.md", "src/app/api.py"]),
        ("see README.md and ./scripts/test.sh", "paths", ["./scripts/test.sh", "README.md"]),
        ("fetch https://ci.example.com/a/builds/7 and http://127.0.0.1:8081/health.", "urls",
         ["https://ci.example.com/a/builds/7", "http://127.0.0.1:8081/health"]),
        ("```bash\n$ make test\ngit push origin main\n```\nrun `pytest -q tests` then\n$ ruff check .", "commands",
         ["make test", "git push origin main", "ruff check .", "pytest -q tests"]),
        ('[tool_calls: bash({"cmd": "ls -la /tmp"}), read_file({"path": "a.py"})]', "commands", ["ls -la /tmp"]),
        ("got HTTP 503, then ECONNRESET, error E1042, KeyError and exit code 2", "errors",
         ["HTTP 503", "exit code 2", "E1042", "ECONNRESET", "KeyError"]),
        ("listens on port 8081, db at localhost:5432, ssh -p 2222 host", "ports", ["8081", "2222", "5432"]),
        ("commit 9f3a2bc1d, ticket OPS-1234, id 123e4567-e89b-12d3-a456-426614174000", "ids",
         ["123e4567-e89b-12d3-a456-426614174000", "9f3a2bc1d", "OPS-1234"]),
        ("def load_batch(x): ...\nSELECT * FROM billing_invoices; call parse_invoice() then table user_accounts",
         "names", ["parse_invoice()", "billing_invoices", "user_accounts", "load_batch"]),
        ("p99 850 ms, rss 512 MB, 97% disk, timeout 30 s, version 1.22.1 and request 48213", "numbers",
         ["850 ms", "512 MB", "97%", "30 s", "1.22.1", "48213"]),
    ],
)
def test_extract_by_class(text: str, cls: str, expected: list[str]) -> None:
    found = ids.extract(text).by_class().get(cls, ())
    assert sorted(found) == sorted(expected)


@pytest.mark.parametrize(
    "text",
    ["and/or req/s I/O km/h", "2024/05/01", "the end.", "1 2 3 and 42", "## Files Read - path, line", "ERROR EVENT"],
)
def test_no_false_identifiers(text: str) -> None:
    assert ids.extract(text).all() == set()


def test_listing_line_numbers_and_markers_are_not_identifiers() -> None:
    listing = "\n".join(f"{n:>5}| code here" for n in range(100, 400)) + "\nline 402: more\n<<ccr:0123456789abcdef>>"
    assert ids.extract(listing).all() == set()


@pytest.mark.parametrize("seed", range(25))
def test_every_planted_identifier_is_extracted(seed: int) -> None:
    """The corpus plants identifiers of every class; the ledger finds each one (the retention bar's basis)."""
    messages, planted = agent_segment(seed)
    doc, doc_planted = document(seed, 6000 + 160 * seed)
    for text, known in ((render_transcript(messages), planted), (doc, doc_planted)):
        found = ids.extract(text).all()
        assert {cls for cls, _ in known.items()} == set(CLASSES)  # every class is planted
        assert [v for _, v in known.items() if v not in found] == []


def test_render_respects_the_budget_and_counts_what_it_leaves_out() -> None:
    doc, _ = document(3, 9000)
    led = ids.extract(doc)
    full = led.render(100_000)
    assert full.startswith(ids.LEDGER_HEADER) and "not listed" not in full
    assert ids.retention(led.all(), full) == 1.0
    short = led.render(400)
    assert len(short) <= 400 and "more identifiers not listed" in short
    kept = ids.retention(led.all(), short)
    assert kept is not None and 0 < kept < 1  # the metric can fail
    assert ids.Ledger(()).render(1000) == ""


def test_commands_are_one_per_line() -> None:
    text = ids.extract("run `git commit -m 'a, b'` and `make test`").render(1000)
    assert "  $ git commit -m 'a, b'\n  $ make test" in text


def test_retention_metric() -> None:
    assert ids.retention([], "x") is None
    assert ids.retention(["a.py", "b.py"], "only a.py") == 0.5


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400))
def test_extract_never_fails_and_its_ledger_is_grounded(text: str) -> None:
    led = ids.extract(text)
    rendered = led.render(10_000)
    # the ledger is made of the segment's own strings, so the gate never calls it invented
    assert all(value in text for value in led.all())
    assert ids.ungrounded(rendered.replace(ids.LEDGER_HEADER, ""), text) == []


def test_ungrounded_is_lenient_with_faithful_forms_only() -> None:
    source = "edit src/app/api.py; p99 850 ms; port 8081; build 7f3a9c2e1b; run `pytest -q tests/test_api.py`"
    assert ids.ungrounded("api.py, app/api.py, 850ms, 8081, 7F3A9C2E1B, pytest -q", source) == []
    assert ids.ungrounded("src/app.py, 851 ms, port 8082, build 7f3a9c2e1c, `pytest -x`", source) == [
        "src/app.py", "pytest -x", "8082", "7f3a9c2e1c", "851 ms",
    ]  # fmt: skip


def test_render_sheds_expendable_identifiers_first_and_counts_them() -> None:
    """A ledger over its budget leaves out the expendable (oldest) identifiers before any other."""
    old = [f"/srv/old{i}/service.conf" for i in range(8)]
    led = ids.extract(" ".join(old) + " and new /srv/b/new.conf on port 8002, 850 ms, 512 MB")
    full = led.render(10**6)
    assert led.render(len(full)) == full  # a budget that fits everything lists everything
    table = led.render(len(full) - 60, expendable=set(old))
    assert all(i in table for i in led.all() - set(old)) and len(table) <= len(full) - 60
    shed = [p for p in old if p not in table]
    assert shed and f"{len(shed)} more identifiers not listed" in table
    # without expendable identifiers the priority cut applies: the lowest class (numbers) goes first
    assert "512 MB" not in led.render(len(full) - 60)
    assert led.render(10**6, expendable=set(old)) == full  # nothing is shed when everything fits
