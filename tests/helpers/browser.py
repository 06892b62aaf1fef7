"""Shared by the browser tests: Debian's Chromium, a Jupyter server on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"


CHROMIUM = Path("/usr/bin/chromium")


CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read())


def _server_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CONTEXTKIT_NOTEBOOK_MODEL", None)  # the simulator, always
    env.update(
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),  # no user-level server/lab config leaks in
        JUPYTER_PLATFORM_DIRS="1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_LOG="ERROR",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
        PATH=os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", ""))),
        **extra,
    )
    return env


@contextlib.contextmanager
def _serve(
    cmd: list[str], *, cwd: Path, env: dict[str, str], log_path: Path, ready_url: str
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a Jupyter server until ``ready_url`` answers (any HTTP status); stop it afterwards."""
    name = cmd[2] if len(cmd) > 2 else cmd[0]
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
        try:
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"{name} exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
                try:
                    _get(ready_url)
                    break
                except urllib.error.HTTPError:  # an answer, even a 403, means the server is up
                    break
                except (urllib.error.URLError, OSError):
                    if time.monotonic() > deadline:
                        pytest.fail(f"{name} did not answer in 30 s:\n{log_path.read_text()[-3000:]}")
                    time.sleep(0.2)
            yield proc
        finally:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _launch(pw: Any) -> Any:
    assert CHROMIUM.exists(), (
        f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium fonts-liberation; "
        ".ci/run does this). `playwright install` cannot download here."
    )
    ARTIFACTS.mkdir(exist_ok=True)
    return pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)

