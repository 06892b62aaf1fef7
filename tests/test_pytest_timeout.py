"""The suite's pytest-timeout setting ends a hung test: a hang fails the run instead of holding CI.

A finaliser that swallows every exception and waits again is a hang the ``signal`` method cannot break
(its one exception is caught); the ``thread`` method (pyproject.toml) dumps the stacks and exits.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HANG = textwrap.dedent(
    """
    import gc
    import time


    class Stuck:
        def __del__(self):
            while True:  # swallows whatever interrupts it
                try:
                    time.sleep(0.05)
                except BaseException:
                    pass


    def test_hangs_in_a_finaliser():
        stuck = Stuck()
        del stuck
        gc.collect()
    """
)


def _run_hang(tmp_path: Path, *options: str, wait: float = 30) -> subprocess.CompletedProcess[str] | None:
    (tmp_path / "test_hang.py").write_text(HANG, encoding="utf-8")
    command = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
               "-p", "no:nbval", "-q", "--timeout", "2", *options, str(tmp_path / "test_hang.py")]  # fmt: skip
    try:
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=wait)
    except subprocess.TimeoutExpired:
        return None  # still hanging


def test_the_suite_uses_the_thread_method() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    assert config["timeout_method"] == "thread"


def test_a_hang_the_signal_method_cannot_break_fails_the_run(tmp_path: Path) -> None:
    done = _run_hang(tmp_path)
    assert done is not None, "the hung test was still running after 30 s"
    assert done.returncode != 0 and "Timeout" in done.stdout + done.stderr


def test_the_signal_method_would_have_hung(tmp_path: Path) -> None:
    # the check above can fail: under the signal method the same test (timeout 1 s) still runs at 10 s
    done = _run_hang(tmp_path, "-o", "timeout_method=signal", "--timeout", "1", wait=10)
    assert done is None
