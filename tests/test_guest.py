"""contextkit is a guest in its host's process.

Importing or using it changes no environment variable, no warnings filter, no litellm global and no
logging configuration of the host, and writes nothing to stderr when the host configured no logging:
status lines are records on the ``contextkit`` logger. ``contextkit.offline()`` is the explicit
opt-in for a process that owns its environment on a closed network.

The host checks run in fresh interpreters (no conftest, no offline set-up), each given only the
environment a host on this machine would choose: the test process's own, minus what
``contextkit.offline()`` set in it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from contextkit import ConfigError, Limits, Session, backend
from contextkit.archive import Archive
from contextkit.events import NoticeEvent
from contextkit.sim import GatewaySimulator, Workspace

# What offline() sets; a host that did not call it has none of them (the machine has no internet,
# so the host itself asks litellm for its bundled cost map: LITELLM_LOCAL_MODEL_COST_MAP stays).
OFFLINE_ONLY = [name for name in backend.OFFLINE_ENV if name != "LITELLM_LOCAL_MODEL_COST_MAP"]

# Snapshots a host takes of everything of its own a guest could change.
SNAPSHOT = textwrap.dedent(
    '''
    import json, logging, os, sys, warnings

    def filters():
        return [[a, getattr(m, "pattern", m), c.__name__, getattr(mod, "pattern", mod), n]
                for a, m, c, mod, n in warnings.filters]

    def litellm_globals():
        """litellm's module-level settings (every public plain value), and its callback lists' lengths."""
        module = sys.modules.get("litellm")
        out = {}
        for name, value in (vars(module) if module is not None else {}).items():
            if name.startswith("_"):  # litellm's private state (caches, flags of its own) is not a setting
                continue
            if value is None or isinstance(value, (bool, int, float, str)):
                out[name] = repr(value)
            elif isinstance(value, list) and "callback" in name:
                out[name] = len(value)
        return out

    def snapshot():
        root = logging.getLogger()
        return {"env": dict(os.environ), "filters": filters(), "root": [repr(h) for h in root.handlers],
                "root_level": root.level, "litellm": litellm_globals()}
    '''
)


def host_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_ONLY and k != "TIKTOKEN_CACHE_DIR"}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(Path(__file__).resolve().parents[1]), **extra)
    return env


def run_host(code: str, tmp_path: Path, *args: str, **extra: str) -> tuple[dict[str, Any], str, str]:
    """Run ``code`` (after the snapshot helpers) in a fresh interpreter; (its JSON result, stdout, stderr)."""
    script = tmp_path / f"host_{len(list(tmp_path.glob('host_*.py')))}.py"
    result = tmp_path / f"{script.stem}.json"
    script.write_text(SNAPSHOT + textwrap.dedent(code), encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(script), str(result), *args],
        capture_output=True, text=True, timeout=300, env=host_env(**extra), cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(result.read_text(encoding="utf-8")), out.stdout, out.stderr


def changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What a process changed of its own between two snapshots (litellm's globals: their final state)."""
    env0, env1 = before["env"], after["env"]
    return {
        "env": {k: env1.get(k) for k in set(env0) | set(env1) if env0.get(k) != env1.get(k)},
        "filters added": [f for f in after["filters"] if f not in before["filters"]],
        "filters removed": [f for f in before["filters"] if f not in after["filters"]],
        "root": (before["root"], after["root"]) if before["root"] != after["root"] else None,
        "root_level": (before["root_level"], after["root_level"]) if before["root_level"] != after["root_level"] else None,
    }  # fmt: skip


# litellm prints these to stdout on its own while ``litellm.suppress_debug_info`` is False (its
# default): a provider error, a cost lookup for a model it cannot route. A host quiets them by
# setting that global (``contextkit.offline()`` does); contextkit leaves it as the host has it.
LITELLM_DEBUG_LINES = ("Provider List: ", "Give Feedback / Get Help: ", "LiteLLM.Info: ")


def own_stdout(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.strip() and not any(s in line for s in LITELLM_DEBUG_LINES)]


CONTEXTKIT_HOST = """
out_path = sys.argv[1]
before = snapshot()
import contextkit
from contextkit import Limits, Session
from contextkit.archive import Archive
from contextkit.sim import GatewaySimulator, Workspace

with GatewaySimulator(max_body="24KB", reject_with="413") as gw:
    kwargs = gw.litellm_kwargs()
    ws = Workspace(seed=3, target_bytes=9_000)
    session = Session(kwargs.pop("model"), system="You are a coding agent.", archive=Archive.in_memory(),
                      tools=list(ws.tools.values()), limits=Limits(context_window=32_000), **kwargs)
    for t in range(4):  # tool results pile up until the gateway refuses the body: recovery compacts
        session.send(f'turn {t} [[tool:read_file {{"path": "src/mod/file_{t:02d}.py"}}]]')
    streamed = "".join(session.stream("stream a short summary"))
    session.compact("keep file names")  # a summary by the simulator's summarizer
    ran = {"tool_results": sum(m.role == "tool" for m in session.history), "streamed": len(streamed),
           "compactions": session.stats.compactions, "summaries": session.stats.summary_calls,
           "failures": dict(session.stats.failures_by_kind),
           "warnings": sum(getattr(e, "level", "") == "warning" for e in session.events)}
logger = logging.getLogger("contextkit")
after = snapshot()
json.dump({"before": before, "after": after, "ran": ran, "contextkit_logger": [type(h).__name__ for h in logger.handlers],
           "contextkit_level": logger.level, "debug_info": sys.modules["litellm"].suppress_debug_info},
          open(out_path, "w"))
"""

# The same litellm calls contextkit makes, made directly: what litellm does to a process on its own.
LITELLM_HOST = """
out_path, api_base, model = sys.argv[1:4]
before = snapshot()
import litellm

call = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]}
messages = [{"role": "user", "content": "hi"}, call, {"role": "tool", "tool_call_id": "c1", "content": "x = 1"}]
litellm.token_counter(model="gpt-4o", messages=messages)
litellm.get_model_info("gpt-4o")
reply = litellm.completion(model=model, api_base=api_base, api_key="sim-key", messages=messages[:1], max_retries=0)
try:
    litellm.completion_cost(completion_response=reply, model=model)
except Exception:  # the simulator's model is not priced (contextkit catches this too)
    pass
chunks = list(litellm.completion(model=model, api_base=api_base, api_key="sim-key", messages=messages[:1],
                                 stream=True, max_retries=0))
litellm.stream_chunk_builder(chunks, messages=messages[:1])
json.dump({"before": before, "after": snapshot()}, open(out_path, "w"))
"""


def test_a_host_keeps_its_environment_filters_litellm_globals_logging_and_stderr(
    tmp_path: Path, gw: GatewaySimulator
) -> None:
    """A Session with tools, streaming and compaction against the simulator changes nothing of
    its host but what litellm's own import and calls change (measured here, in a host that uses
    litellm directly), and writes nothing to stderr although it logs warnings."""
    host, stdout, stderr = run_host(CONTEXTKIT_HOST, tmp_path)
    ran = host["ran"]
    assert ran["tool_results"] >= 1 and ran["streamed"] > 0 and ran["summaries"] >= 1
    assert ran["compactions"] >= 2 and ran["failures"].get("payload_too_large", 0) >= 1
    assert ran["warnings"] >= 1  # WARNING records reached the logger: stderr stays empty all the same
    assert stderr == ""
    assert own_stdout(stdout) == []  # nothing printed by contextkit (litellm's own debug lines aside)

    bare, _, _ = run_host(LITELLM_HOST, tmp_path, gw.api_base, gw.model)
    assert changes(host["before"], host["after"]) == changes(bare["before"], bare["after"])
    assert host["after"]["litellm"] == bare["after"]["litellm"]  # suppress_debug_info, telemetry, ...
    assert host["debug_info"] is False  # litellm's default, as the host left it
    assert host["contextkit_logger"] == ["NullHandler"] and host["contextkit_level"] == logging.NOTSET
    # in particular: none of the offline variables appeared
    assert not set(OFFLINE_ONLY) & set(host["after"]["env"])  # TIKTOKEN_CACHE_DIR: litellm sets it, as above


FIRST_USE = """
out_path = sys.argv[1]
before = snapshot()
import litellm  # the host uses litellm itself, and imported it first
bare = snapshot()
from contextkit import backend, sizing

backend.litellm()
backend.model_info("gpt-4o")
sizing.text_tokens("hello", "gpt-4o")
json.dump({"before": before, "bare": bare, "after": snapshot(),
           "telemetry": type(getattr(litellm, "telemetry", None)).__name__}, open(out_path, "w"))
"""


def test_contextkits_first_litellm_use_sets_no_variable_filter_or_global(tmp_path: Path) -> None:
    """The set-up every first litellm use used to run (offline variables written into os.environ,
    a warnings filter, ``suppress_debug_info`` and ``telemetry`` overwritten) is gone."""
    host, _, stderr = run_host(FIRST_USE, tmp_path)
    assert changes(host["bare"], host["after"]) == changes(host["after"], host["after"])
    assert host["after"]["litellm"] == host["bare"]["litellm"]
    assert host["telemetry"] != "bool"  # litellm.telemetry is litellm's subpackage (or absent), never False
    assert stderr == ""


TOKENS_OFFLINE = """
out_path = sys.argv[1]
import socket

def refuse(*args, **kwargs):
    raise OSError("network blocked by the test")

socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
before = snapshot()
from contextkit import sizing

counts = {m: sizing.text_tokens("Hello, world! <|endoftext|> Grüße 12345 " * 40, m) for m in ("gpt-4o", "gpt-3.5-turbo")}
json.dump({"before": before, "after": snapshot(), "counts": counts, "litellm": "litellm" in sys.modules},
          open(out_path, "w"))
"""


def test_token_counting_never_downloads_and_leaves_the_hosts_tiktoken_cache_alone(tmp_path: Path) -> None:
    """With the network blocked and the host's own, empty tiktoken cache, contextkit still counts
    tokens (from the encodings bundled in litellm's wheel), exactly as tiktoken does, and writes
    neither that cache nor the environment. litellm is not even imported."""
    import tiktoken

    cache = tmp_path / "host-tiktoken-cache"
    cache.mkdir()
    host, _, stderr = run_host(TOKENS_OFFLINE, tmp_path, TIKTOKEN_CACHE_DIR=str(cache))
    text = "Hello, world! <|endoftext|> Grüße 12345 " * 40
    expected = {  # tiktoken itself, on litellm's bundled files (this process ran offline())
        m: sum(len(tiktoken.get_encoding(name).encode(text[i : i + 1024], disallowed_special=()))
               for i in range(0, len(text), 1024))
        for m, name in (("gpt-4o", "o200k_base"), ("gpt-3.5-turbo", "cl100k_base"))
    }  # fmt: skip
    assert host["counts"] == expected
    assert list(cache.iterdir()) == [] and host["litellm"] is False
    assert changes(host["before"], host["after"]) == changes(host["after"], host["after"])
    assert stderr == ""


OFFLINE = """
out_path = sys.argv[1]
before = snapshot()
import contextkit

contextkit.offline()
contextkit.offline()  # idempotent
first = snapshot()
from contextkit import backend

quiet = backend.litellm().suppress_debug_info  # offline() came first: quieted when contextkit imports it
json.dump({"before": before, "first": first, "quiet": quiet}, open(out_path, "w"))
"""


def test_offline_sets_what_the_host_has_not_set_and_quiets_litellm(tmp_path: Path) -> None:
    host, _, stderr = run_host(OFFLINE, tmp_path, HF_HUB_OFFLINE="0")
    env = changes(host["before"], host["first"])["env"]
    assert env == {
        "LITELLM_OFFLINE_MODE": "true",
        "HEADROOM_OFFLINE": "1",
        "TIKTOKEN_CACHE_DIR": str(backend.litellm_tokenizers_dir()),
    }  # LITELLM_LOCAL_MODEL_COST_MAP and HF_HUB_OFFLINE=0 were the host's: kept as they were
    assert host["quiet"] is True and stderr == ""


OFFLINE_LATE = """
out_path = sys.argv[1]
import litellm  # the host imported litellm before it called offline()
import contextkit

contextkit.offline()
json.dump({"quiet": litellm.suppress_debug_info}, open(out_path, "w"))
"""


def test_offline_after_litellm_was_imported_quiets_it_at_once(tmp_path: Path) -> None:
    host, _, _ = run_host(OFFLINE_LATE, tmp_path)
    assert host["quiet"] is True


# status through logging ---------------------------------------------------------------------------


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Any:
    logger = logging.getLogger("contextkit")
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def rejected_session(gw: GatewaySimulator, **kw: Any) -> Session:
    gw.configure(max_body="24KB", reject_with="413")
    kwargs = gw.litellm_kwargs()
    ws = Workspace(seed=3, target_bytes=9_000)
    session = Session(kwargs.pop("model"), archive=Archive.in_memory(), tools=list(ws.tools.values()),
                      limits=Limits(context_window=32_000), **kwargs, **kw)  # fmt: skip
    for t in range(4):
        session.send(f'turn {t} [[tool:read_file {{"path": "src/mod/file_{t:02d}.py"}}]]')
    return session


def test_status_true_logs_each_line_on_the_contextkit_logger(gw: GatewaySimulator, records: Any) -> None:
    session = rejected_session(gw)
    notices = [e for e in session.events if isinstance(e, NoticeEvent)]
    assert {"info", "warning"} <= {n.level for n in notices}
    mine = [r for r in records if getattr(r, "session_id", None) == session.session_id]
    assert mine and len(mine) == len(records) and all(r.name == "contextkit" for r in mine)
    by_code = [(r.code, r.levelname, r.getMessage()) for r in mine if r.code != "compaction"]  # type: ignore[attr-defined]
    level = {"info": "INFO", "warning": "WARNING", "error": "ERROR"}
    assert by_code == [(n.code, level[n.level], n.text) for n in notices]  # every notice, in order
    assert any(r.levelname == "WARNING" and r.code == "recovery" for r in mine)  # type: ignore[attr-defined]
    phases = [r for r in mine if r.code == "compaction"]  # type: ignore[attr-defined]
    assert phases and all(r.levelno == logging.INFO for r in phases)
    assert "LogStatus" in repr(session.status_sink)


@pytest.mark.parametrize("status", [False, None, "callable"])
def test_status_false_or_none_is_silent_and_a_callable_gets_the_lines(
    gw: GatewaySimulator, records: Any, status: Any
) -> None:
    lines: list[str] = []
    session = rejected_session(gw, status=lines.append if status == "callable" else status)
    assert records == []
    if status == "callable":
        notices = [e.text for e in session.events if isinstance(e, NoticeEvent)]
        assert notices and set(notices) <= set(lines)
    else:
        assert lines == [] and session.status_sink is None


def test_a_status_that_is_neither_a_switch_nor_a_callable_is_a_clear_error(gw: GatewaySimulator) -> None:
    with pytest.raises(ConfigError, match=r"status must be True .* or a callable"):
        Session(gw.model, api_base=gw.api_base, api_key="k", status="stderr")  # type: ignore[arg-type]


def test_the_package_logger_has_a_null_handler_so_the_last_resort_stays_quiet() -> None:
    logger = logging.getLogger("contextkit")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)


def test_an_unmapped_model_is_priced_and_described_without_litellms_banner(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """litellm prints a "Provider List" banner to stdout whenever it is asked about a model its cost map
    does not name (the simulator's, a local server's) and its debug info is on, as a host leaves it by
    default: contextkit answers those lookups from the map itself, so its own calls print nothing."""
    from litellm.types.utils import ModelResponse

    from contextkit import backend

    monkeypatch.setattr(backend.litellm(), "suppress_debug_info", False)
    backend.model_info.cache_clear()
    reply = ModelResponse(model="sim-model", choices=[{"message": {"role": "assistant", "content": "hi"}}])
    assert backend.model_info("openai/sim-model") == {} and backend.completion_cost(reply) == 0.0
    assert not backend.is_priced("openai/sim-model")
    assert capsys.readouterr().out == ""
    assert backend.model_info("openai/gpt-4o")["max_input_tokens"] > 0  # a mapped model still asks litellm
