"""contextkit installs like a library: ``pip wheel .`` builds, and the wheel with only the core
dependencies runs a Session against the simulator and the demo in a fresh venv.

The fresh venv has nothing but the wheel and its core requirements (litellm, tiktoken, pydantic,
tqdm and what they pull in): no ipywidgets, polars or altair, so the optional parts must fail with
a clear "install contextkit[notebook]" error. Dependencies come from a wheelhouse kept in
``~/.cache/contextkit/wheelhouse-core`` (filled from the package index the first time, about 20 s;
later runs install from it with ``--no-index``: about 25 s for the whole module).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = Path(os.environ.get("CONTEXTKIT_WHEELHOUSE", Path.home() / ".cache" / "contextkit" / "wheelhouse-core"))
OPTIONAL = ("ipywidgets", "polars", "altair", "anywidget", "vl_convert", "pyarrow", "traitlets", "IPython")


def _run(cmd: list[str], *, cwd: Path, timeout: float = 600, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)], cwd=out)
    (built,) = out.glob("contextkit-*.whl")
    return built


@pytest.fixture(scope="module")
def core_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv holding the wheel and the core dependencies only; yields its python."""
    venv = tmp_path_factory.mktemp("core-venv")
    _run([sys.executable, "-m", "venv", str(venv)], cwd=venv)
    python = venv / "bin" / "python"
    # --no-compile: byte-compiling all of litellm at install time costs more than compiling what is imported
    install = [
        str(python),
        "-m",
        "pip",
        "install",
        "-q",
        "--no-compile",
        "--no-index",
        "--find-links",
        str(WHEELHOUSE),
        str(wheel),
    ]
    proc = subprocess.run(install, cwd=venv, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:  # first run, or the requirements changed: fill the wheelhouse from the index
        WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        _run([str(python), "-m", "pip", "wheel", "-q", "-w", str(WHEELHOUSE), str(wheel)], cwd=venv)
        for stale in WHEELHOUSE.glob("contextkit-*.whl"):
            stale.unlink()
        _run(install, cwd=venv)
    yield python


def _offline_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTEXTKIT_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(HOME=str(tmp), LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_LOG="ERROR")
    return env


def test_the_core_install_has_no_notebook_stack(core_venv: Path, tmp_path: Path) -> None:
    code = f"import importlib.util, json; print(json.dumps([m for m in {OPTIONAL!r} if importlib.util.find_spec(m)]))"
    assert json.loads(_run([str(core_venv), "-c", code], cwd=tmp_path)) == []


def test_core_only_session_against_the_simulator_and_clear_extra_errors(core_venv: Path, tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import json, sys
        import contextkit
        from contextkit import Limits, Session
        from contextkit.sim import GatewaySimulator

        assert contextkit.__file__.startswith(sys.prefix), contextkit.__file__  # the installed wheel
        light = [m for m in ("litellm", "polars", "altair", "ipywidgets") if m in sys.modules]
        with GatewaySimulator(context_window=32_000, max_body="64KB", reject_with="413") as gw:
            s = Session(gw.model, api_base=gw.api_base, api_key="sim-key", limits=Limits(context_window=32_000))
            for i in range(4):  # the history outgrows the unknown 64 KB cap: rejected, learned, recovered
                reply = s.send(f"part {i}: " + "lorem ipsum " * 2_000)
            out = {"light": light, "text": reply.text, "cap": s.cap_source, "rejected": sum(not r.accepted for r in gw.requests)}
        from contextkit.widgets import session_html  # the stdlib-only fallback works without the extra
        out["html"] = "ck-session-html" in session_html(s)
        errors = {}
        for what in ("from contextkit.widgets import Dashboard", "import contextkit.analysis",
                     "from contextkit.experiments import run_sweep, GatewaySpec; run_sweep(['none'], [GatewaySpec()], [0], 1)"):
            try:
                exec(what)
            except ImportError as exc:
                errors[what.split(";")[0]] = str(exc)
        out["errors"] = errors
        print(json.dumps(out))
        """
    )
    result = json.loads(_run([str(core_venv), "-c", script], cwd=tmp_path, env=_offline_env(tmp_path)).splitlines()[-1])
    assert result["light"] == [] and result["text"] and result["html"]
    assert result["cap"] == "learned" and result["rejected"] >= 1
    assert len(result["errors"]) == 3, result["errors"]
    for message in result["errors"].values():
        assert "pip install 'contextkit[notebook]'" in message, message


def test_the_wheel_runs_the_demo_with_python_m_and_the_script(core_venv: Path, tmp_path: Path) -> None:
    env = _offline_env(tmp_path)
    out = subprocess.run(
        [str(core_venv), "-m", "contextkit", "demo", "--steps", "6", "--out", str(tmp_path / "demo")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "contextkit demo - what happened" in out.stdout and "The gateway refused " in out.stdout
    assert (tmp_path / "demo" / "archive.sqlite").exists()
    script = core_venv.parent / "contextkit"
    assert "demo" in _run([str(script), "--help"], cwd=tmp_path, env=env)
