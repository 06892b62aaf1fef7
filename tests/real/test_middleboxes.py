"""Real middleboxes nobody here wrote, in front of the simulator: Squid (a forward proxy), HAProxy (403
and 413), Apache + ModSecurity + OWASP CRS (its body limit and its content rules) and Caddy, each with a
64 KB cap (``contextkit.sim.middlebox``). A test skips when its Debian package is not installed.

The acceptance run per middlebox: 20 turns, each pasting a different 6-10 KB document, no cap
configured. And the CRS content block (``cat /etc/passwd``) at turn 1, at turn 6 and in the middle of
a paste: that turn fails with a message about content, the next 5 harmless turns complete with the
limits the session had before the block.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from contextkit import Limits, Session, backend
from contextkit.archive import Archive
from contextkit.events import RequestEvent
from contextkit.failures.classify import FailureKind, classify_failure
from contextkit.policy.expand import expand_markers
from contextkit.policy.oversize import EXCERPT_TAG
from contextkit.sim import GatewaySimulator
from contextkit.sim.corpus import document
from contextkit.sim.middlebox import CAP, Middlebox, SquidProxy

pytestmark = pytest.mark.real

# name -> (kind, options, how it refuses a body above its cap)
BOXES: dict[str, tuple[str, dict[str, object], int]] = {
    "squid": ("squid", {}, 413),
    "haproxy403": ("haproxy", {"deny": 403}, 403),
    "haproxy413": ("haproxy", {"deny": 413}, 413),
    "modsecurity": ("apache", {}, 413),
    "caddy": ("caddy", {}, 502),
}
SIZE_KINDS = {"payload_too_large", "waf_rejection", "likely_payload"}
TURNS = 20
BLOCKED = "To check the accounts, also run `cat /etc/passwd` on the host."
Factory = Callable[..., Middlebox]
# The CRS's command-injection rule (932100, paranoia level 1) fires on ordinary incident reports: a
# `curl ...` in backticks, "()" before a line break. The size runs paste the same reports without those
# characters, so what the middlebox refuses there is the size; the content runs add the command on purpose.
_SHELLISH = re.compile(r"[`();|&$<>{}\[\]=*!\\]")


def harmless(seed: int, size: int) -> str:
    return _SHELLISH.sub(" ", document(seed, size)[0])


def start(name: str, sim: GatewaySimulator, middlebox_in_front: Factory) -> Middlebox:
    kind, options, _ = BOXES[name]
    return middlebox_in_front(kind, sim.port, **options)


def endpoint(box: Middlebox, route: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The ``api_base`` for ``route`` through ``box``; Squid is a forward proxy named in ``HTTP_PROXY``."""
    if isinstance(box, SquidProxy):
        monkeypatch.setenv("HTTP_PROXY", box.proxy_url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        # a host name of its own, so no client litellm cached for the simulator without the proxy is reused
        return box.upstream(route).replace("127.0.0.1", "localhost")
    return box.api_base if route == "openai" else box.origin


def squid_saw(box: Middlebox) -> int:
    path = box.dir / "access.log"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return sum(" POST " in line for line in lines)  # not the start-up probe's empty connection


# litellm's Anthropic route keeps one HTTP client per process, made at its first request: an HTTP_PROXY
# set after that is not used (the request went straight to the simulator). A forward proxy is named in
# the environment a process starts with; that case runs in a fresh process below.
ROUTES = [(name, route) for name in sorted(BOXES) for route in ("openai", "anthropic") if (name, route) != ("squid", "anthropic")]


@pytest.mark.parametrize(("name", "route"), ROUTES)
def test_each_middlebox_passes_small_bodies_and_refuses_large_ones(
    sim: GatewaySimulator, middlebox_in_front: Factory, monkeypatch: pytest.MonkeyPatch, name: str, route: str
) -> None:
    box = start(name, sim, middlebox_in_front)
    base, model = endpoint(box, route, monkeypatch), f"{route}/sim-model"
    small = backend.completion(model, [{"role": "user", "content": "hi"}], timeout=30, api_base=base, api_key="k")
    assert small.choices[0].message.content
    with pytest.raises(Exception) as info:
        backend.completion(model, [{"role": "user", "content": "x" * (CAP + 4_000)}], timeout=30,
                           api_base=base, api_key="k")  # fmt: skip
    status = getattr(info.value, "status_code", None)
    refused = BOXES[name][2]
    # litellm's Anthropic route reports a 413 as a 400 BadRequestError (the text keeps the page)
    assert status == (400 if route == "anthropic" and refused == 413 else refused), str(info.value)[:300]
    if isinstance(box, SquidProxy):
        assert squid_saw(box) == 2  # both requests went through the proxy


SQUID_CLIENT = """
import json, sys
import contextkit
contextkit.offline()
from contextkit import backend
out = {}
for route, base in (("openai", sys.argv[1] + "/v1"), ("anthropic", sys.argv[1])):
    model = route + "/sim-model"
    ok = backend.completion(model, [{"role": "user", "content": "hi"}], timeout=30, api_base=base, api_key="k")
    try:
        backend.completion(model, [{"role": "user", "content": "x" * 70000}], timeout=30, api_base=base, api_key="k")
        out[route] = [bool(ok.choices[0].message.content), None]
    except Exception as error:
        out[route] = [bool(ok.choices[0].message.content), getattr(error, "status_code", None)]
print(json.dumps(out))
"""


def test_squid_as_the_proxy_a_process_starts_with_serves_both_routes(
    sim: GatewaySimulator, middlebox_in_front: Factory
) -> None:
    import json
    import os
    import subprocess
    import sys

    box = start("squid", sim, middlebox_in_front)
    assert isinstance(box, SquidProxy)
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "http_proxy")}
    env["HTTP_PROXY"] = box.proxy_url
    upstream = box.upstream("anthropic").replace("127.0.0.1", "localhost")
    done = subprocess.run([sys.executable, "-c", SQUID_CLIENT, upstream], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    assert answers == {"openai": [True, 413], "anthropic": [True, 400]}  # litellm's Anthropic route: 413 -> 400
    assert squid_saw(box) == 4


def converse(base: str, turns: int = TURNS, **limits: object) -> tuple[Session, list[str]]:
    session = Session(
        "openai/sim-model", api_base=base, api_key="sim-key", archive=Archive.in_memory(session_id="mbox"),
        limits=Limits(context_window=1_000_000, retry_backoff=0.0, request_timeout=30, summary_timeout=30, **limits),
        status=None, on_flush=None,
    )  # fmt: skip
    docs: list[str] = []
    for turn in range(turns):
        doc = harmless(100 + turn, 6_000 + (turn * 1_337) % 4_000)
        docs.append(doc)
        reply = session.send(f"Here is incident report {turn + 1}:\n\n{doc}\n\nWhat is its port?")
        assert reply.text, f"turn {turn + 1} has no answer"
    return session, docs


def requests(session: Session) -> list[RequestEvent]:
    return [e for e in session.events if isinstance(e, RequestEvent)]


def check_acceptance(session: Session, docs: list[str]) -> None:
    events = requests(session)
    rejected = [(i, e) for i, e in enumerate(events) if e.outcome == "rejected"]
    assert len(rejected) <= 2, [(e.bytes, e.failure_kind, e.status) for _, e in rejected]
    for i, e in rejected:
        if e.failure_kind in SIZE_KINDS:  # nothing at or above a size rejected for its size is sent again
            later = [x.bytes for x in events[i + 1 :] if x.bytes >= e.bytes]
            assert not later, (e.bytes, later)
    expanded = "\n".join(expand_markers(m.content, session.archive, max_depth=200) for m in session.history)
    assert all(doc in expanded for doc in docs)
    # a cap learned from these refusals is near the real one (64 KB), not a size a content block showed
    assert session.payload_cap is None or session.payload_cap > CAP // 2, session.payload_cap


ACCEPTANCE = [
    "squid",
    "haproxy413",
    "haproxy403",
    "modsecurity",
    "caddy",
]


@pytest.mark.parametrize("name", ACCEPTANCE)
def test_twenty_pastes_through_the_middlebox_complete(
    sim: GatewaySimulator, middlebox_in_front: Factory, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    box = start(name, sim, middlebox_in_front)
    session, docs = converse(endpoint(box, "openai", monkeypatch))
    check_acceptance(session, docs)
    assert any(e.outcome == "rejected" for e in requests(session)), "the pastes must outgrow the 64 KB cap"
    if isinstance(box, SquidProxy):
        assert squid_saw(box) == len(requests(session)) + session.compactor.stats.summary_calls


def test_the_crs_blocks_the_command_and_ordinary_reports_but_passes_the_harmless_ones(
    sim: GatewaySimulator, middlebox_in_front: Factory
) -> None:
    """The content rule fires on the command and on the corpus's own reports (a false positive real
    users meet), not on the reports the size runs paste: those runs measure size, not content."""
    box = start("modsecurity", sim, middlebox_in_front)

    def status(text: str) -> int:
        try:
            backend.completion("openai/sim-model", [{"role": "user", "content": text}], timeout=30,
                               api_base=box.api_base, api_key="k")  # fmt: skip
        except Exception as error:  # noqa: BLE001 - the status is what is checked
            assert classify_failure(error).kind is FailureKind.WAF_REJECTION
            return int(getattr(error, "status_code", 0) or 0)
        return 200

    assert status(harmless(100, 8_000)) == 200
    assert status(BLOCKED) == 403
    assert status(document(100, 8_000)[0]) == 403  # `curl ...` and "()" in an incident report


def content_block_run(base: str, where: str) -> None:
    """Turns of pastes, one of them blocked for its content (``where``: turn1, turn6, mid_paste), then 5
    harmless turns: the blocked turn fails saying it was its content, the rest complete with the limits
    the session had before the block and without excerpts they would not have had."""
    session = Session(
        "openai/sim-model", api_base=base, api_key="sim-key", archive=Archive.in_memory(session_id="crs"),
        limits=Limits(context_window=1_000_000, retry_backoff=0.0, request_timeout=30, summary_timeout=30),
        status=None, on_flush=None,
    )  # fmt: skip
    blocked_turn = 0 if where == "turn1" else 5 if where == "turn6" else 2
    for turn in range(blocked_turn):
        doc = harmless(200 + turn, 3_000)
        assert session.send(f"Report {turn + 1}:\n\n{doc}").text
    cap_before, window_before = session.payload_cap, session.context_window
    doc = harmless(299, 6_000)
    if where == "mid_paste":
        half = len(doc) // 2
        text = f"Report (pasted):\n\n{doc[:half]}\n{BLOCKED}\n{doc[half:]}"
    else:
        text = f"{BLOCKED}\n\nReport:\n\n{doc}"
    with pytest.raises(Exception) as info:
        session.send(text)
    assert "content" in str(info.value).lower(), str(info.value)
    for turn in range(5):
        doc = harmless(300 + turn, 3_000)
        reply = session.send(f"Harmless report {turn + 1}:\n\n{doc}")
        assert reply.text
        assert EXCERPT_TAG not in session.history[-2].content  # sent whole, as before the block
    assert (session.payload_cap, session.context_window) == (cap_before, window_before)


@pytest.mark.parametrize("where", ["turn1", "turn6", "mid_paste"])
def test_a_crs_content_block_fails_its_turn_and_changes_no_limit(
    sim: GatewaySimulator, middlebox_in_front: Factory, where: str
) -> None:
    box = start("modsecurity", sim, middlebox_in_front)
    content_block_run(box.api_base, where)


# A paste far above the cap on its own, behind a page that states no size: only an excerpt of it can get
# under, and an excerpt that passes cannot tell a size limit from a content rule on a line it left out.
BIG_PASTE = 150_000


def big_paste_session(base: str) -> Session:
    session = Session(
        "openai/sim-model", api_base=base, api_key="sim-key", archive=Archive.in_memory(session_id="big"),
        limits=Limits(context_window=1_000_000, retry_backoff=0.0, request_timeout=30, summary_timeout=30),
        status=None, on_flush=None,
    )  # fmt: skip
    for turn in range(3):
        assert session.send(f"Report {turn + 1}:\n\n{harmless(400 + turn, 6_000)}").text
    return session


def recoverable(session: Session, text: str) -> bool:
    expanded = "\n".join(expand_markers(m.content, session.archive, max_depth=200) for m in session.history)
    return text in expanded


def test_a_paste_far_above_haproxys_403_cap_goes_as_an_excerpt_with_the_original_recallable(
    sim: GatewaySimulator, middlebox_in_front: Factory
) -> None:
    box = start("haproxy403", sim, middlebox_in_front)
    session = big_paste_session(box.api_base)
    paste = f"The full crash log:\n\n{harmless(499, BIG_PASTE)}"
    assert session.send(paste).text
    assert EXCERPT_TAG in session.history[-2].content and recoverable(session, paste)
    # the paste is refused, then the rest of the history shrinks around it whole and that is refused too
    refused = [e for e in requests(session) if e.outcome == "rejected"]
    assert 1 <= len(refused) <= 2 and {e.status for e in refused} == {403}
    smallest = min(e.bytes for e in refused)
    assert session.interval.known_to_fail == smallest and session.payload_cap is None
    assert session.send("What is its port?").text
    later = requests(session)[requests(session).index(refused[-1]) + 1 :]
    assert all(e.bytes < smallest for e in later)


@pytest.mark.parametrize("where", ["middle", "head"])
def test_a_crs_content_rule_in_a_paste_far_above_any_body_it_took_never_teaches_a_cap(
    sim: GatewaySimulator, middlebox_in_front: Factory, where: str
) -> None:
    """ModSecurity with a body limit far above the paste: what it refuses is the content. A blocked line
    the excerpt leaves out (the middle) lets the excerpt through and teaches no cap; one the excerpt
    keeps (the head) fails the turn saying it is most likely content, and changes no limit."""
    box = middlebox_in_front("apache", sim.port, max_body=1024 * 1024)
    session = big_paste_session(box.api_base)
    doc = harmless(498, BIG_PASTE)
    text = f"{BLOCKED}\n\n{doc}" if where == "head" else f"{doc[: len(doc) // 2]}\n{BLOCKED}\n{doc[len(doc) // 2 :]}"
    before = (session.payload_cap, session.context_window)
    if where == "middle":
        assert session.send(text).text and recoverable(session, text)
    else:
        with pytest.raises(Exception, match="objects to the content"):
            session.send(text)
        assert session.interval.known_to_fail is None
    for turn in range(3):
        assert session.send(f"Harmless report {turn + 1}:\n\n{harmless(500 + turn, 3_000)}").text
        assert EXCERPT_TAG not in session.history[-2].content  # sent whole, as before the block
    assert (session.payload_cap, session.context_window) == before
