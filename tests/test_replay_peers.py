"""The peers on a replay: each runs on a short real trajectory and gives a sane row; a peer that
cannot run gives a row that says why; ``benchmarks/traces.py`` caches and resumes.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from contextkit.replay import REPLAY_PEERS, load_trajectory, peer_status, replay
from contextkit.sim.replay import Trajectory

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
ROOT = Path(__file__).resolve().parents[1]
STEPS = 14  # steps kept of the fixture: enough for first-use references (three steps apart) and pressure
WINDOW = 6144  # the short run's requests grow to 10.5k tokens: unmanaged, it stops at step 6


def _short(traj: Trajectory, steps: int) -> Trajectory:
    """The run up to (and with the tool results of) step ``steps - 1``."""
    end = traj.steps[steps] if steps < len(traj.steps) else len(traj.messages)
    return replace(traj, name=f"{traj.name}-short", messages=traj.messages[:end])


@pytest.fixture(scope="module")
def short() -> Trajectory:
    return _short(load_trajectory(FIXTURES / "pvlib-1606-format-error.traj.json"), STEPS)


@pytest.fixture(scope="module")
def unmanaged(short: Trajectory) -> Any:
    return replay(short, "none", window=WINDOW)


NEEDS = {
    "langchain-summarization": ("langchain", "langchain_openai"),
    "langchain-context-editing": ("langchain", "langchain_openai"),
    "headroom": ("headroom",),
    "anthropic-clearing": (),
    "litellm-compress": (),
}


def _skip_without(peer: str) -> None:
    for module in NEEDS[peer]:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{peer} needs {module} (the dev extra)")


def test_the_short_run_is_over_the_window_unmanaged(short: Trajectory, unmanaged: Any) -> None:
    assert len(short.steps) == STEPS
    assert not unmanaged.served_all and unmanaged.rejected == 1 and "ContextWindowExceeded" in (unmanaged.error or "")


@pytest.mark.parametrize("peer", REPLAY_PEERS)
def test_each_peer_replays_the_short_run_with_a_sane_row(peer: str, short: Trajectory, unmanaged: Any) -> None:
    _skip_without(peer)
    assert peer_status(peer) is None
    run = replay(short, peer, window=WINDOW)
    assert run.available and run.strategy == peer and run.trajectory == short.name and run.note
    assert run.steps_total == STEPS and 0 < run.steps_served <= STEPS
    # the ones that clear, stub or summarize old content get further than no management; headroom
    # compresses only the outputs its transforms recognize (here none, and its retrieval tool's schema
    # makes each request larger: it can stop a step earlier than no management)
    if peer != "headroom":
        assert run.steps_served > unmanaged.steps_served
    assert run.served_all == (run.error is None and run.steps_served == STEPS)
    assert run.billed > 0 and run.prompt_tokens > 0 and run.requests >= run.steps_served
    assert run.records and run.needed > 0 and run.own_ms_per_step >= 0
    v, r = run.verbatim_share, run.reachable_share
    assert v is not None and r is not None and 0 <= v <= r <= 1
    assert all(rec.recalled <= rec.needed - rec.verbatim for rec in run.records)
    # the requests sent, in order: each served step once, each refusal counted
    assert len({x.step for x in run.sent if x.step is not None}) == run.steps_served
    assert sum(not x.accepted for x in run.sent if x.kind == "turn") == run.rejected


def test_litellm_compress_stubs_behind_keys_its_store_resolves(short: Trajectory) -> None:
    """Above its trigger litellm's compress replaces messages by stubs naming a key; the peer finds the
    keys in a request and the stored original of each (what "one recall away" reads)."""
    from contextkit.replay.peers import plain_peer

    plain = plain_peer("litellm-compress", short, WINDOW, None)
    history = [m.wire() for m in short.messages]
    sent, tools = plain.shape(history)
    text = "\n".join(str(m.get("content") or "") for m in sent)
    keys = list(plain.keys(text))
    assert keys and [t["function"]["name"] for t in tools] == ["litellm_content_retrieve"]
    originals = [plain.original(k) for k in keys]
    assert all(originals) and all(o in "\n".join(m.text for m in short.messages) for o in originals if o)
    assert plain.original("not-a-key") is None
    assert len(sent) == len(history)  # stubs replace messages; none is dropped, tool calls keep their results


def test_langchain_summarization_is_billed_for_its_summaries(short: Trajectory) -> None:
    _skip_without("langchain-summarization")
    run = replay(short, "langchain-summarization", window=WINDOW)
    assert run.requests > run.steps_served  # the summary requests go to the same provider


def test_a_peer_whose_library_is_missing_gives_a_row_that_says_why(
    short: Trajectory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextkit.experiments import peers

    monkeypatch.setitem(peers._MODULES, "headroom-ai", "headroom_not_installed_here")
    why = peer_status("headroom")
    assert why is not None and "headroom-ai" in why and "import failed" in why
    run = replay(short, "headroom", window=WINDOW)
    assert not run.available and not run.served_all and run.steps_served == 0
    assert run.error == f"not run: {why}" and run.note == why


def test_a_litellm_without_compress_gives_a_row_that_says_why(
    short: Trajectory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextkit import backend

    monkeypatch.setattr(backend.litellm(), "compress", None)
    why = peer_status("litellm-compress")
    assert why is not None and "no compress()" in why
    run = replay(short, "litellm-compress", window=WINDOW)
    assert not run.available and run.error == f"not run: {why}"


def test_an_unknown_peer_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown replay peer"):
        peer_status("nope")
    with pytest.raises(ValueError, match="unknown replay strategy"):
        replay(_short(load_trajectory(FIXTURES / "pvlib-1606-format-error.traj.json"), 3), "nope", window=WINDOW)


# benchmarks/traces.py ---------------------------------------------------------------------------


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Any:
    # imported by name from benchmarks/ on sys.path: the spawned workers import it the same way
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("traces")


def test_the_benchmark_measures_in_workers_caches_and_resumes(
    bench: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "traces" / "set"
    folder.mkdir(parents=True)
    (folder / "a.traj.json").write_bytes((FIXTURES / "pvlib-1072-reasoner-error.traj.json").read_bytes())
    cache = tmp_path / "cache.jsonl"
    argv = ["--traces", str(tmp_path / "traces"), "--windows", "8192", "--strategies", "none,masking", "--jobs", "1",
            "--cache", str(cache)]  # fmt: skip
    bench.main(argv)
    first = capsys.readouterr()
    assert "measuring 3 of 3 replays in 1 process" in first.err
    assert len(cache.read_text().splitlines()) == 3  # tokens, none, masking
    table = [line for line in first.out.splitlines() if line.startswith(("none ", "masking "))]
    assert len(table) == 2 and "1 of 1 runs" in first.out and "token-count error" in first.out
    # a second invocation measures nothing: every cell comes from the cache
    bench.main(argv)
    second = capsys.readouterr()
    assert "measuring" not in second.err
    assert [line for line in second.out.splitlines() if line.startswith(("none ", "masking "))] == table
    # a half-written last line (a stopped run) is skipped and measured again
    lines = cache.read_text().splitlines()
    cache.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    bench.main(argv)
    assert "measuring 1 of 3 replays" in capsys.readouterr().err


def test_the_benchmark_prints_an_unavailable_peer_as_a_row_with_its_reason(bench: Any) -> None:
    row = bench.aggregate([{"available": False, "note": "headroom-ai not installed", "error": "not run: x"}])
    assert row == {"available": False, "why": "headroom-ai not installed", "n": 1}
