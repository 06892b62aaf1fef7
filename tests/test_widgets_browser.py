"""The dashboard in a real JupyterLab, rendered by headless Debian Chromium (SPEC S8.5).

Starts JupyterLab on 127.0.0.1 (free port, no token, private settings and workspace folders),
opens a notebook generated here, runs all cells through the Lab UI — a session against the
gateway simulator with the Dashboard displayed, then turns that force compaction and recovery —
waits for the widgets, asserts on the DOM and saves ``test-artifacts/dashboard.png``.

Part of the default test run: a missing ``/usr/bin/chromium`` is a failure (``.ci/run``
installs it), never a skip.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
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
NOTEBOOK = "widgets_browser.ipynb"
DONE = "ALL-CELLS-" + "DONE"  # split so the marker only appears in the output, not in the cell source

SETUP = """\
import os
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import threading
from types import SimpleNamespace
from contextkit.archive import Archive
from contextkit.events import (ArchiveEvent, CapEvent, CompactionEvent, EventLog, HistoryEvent, NoticeEvent,
                               RecoveryEvent, RequestEvent)
from contextkit.markers import marker
from contextkit.messages import Message
from contextkit.settings import Limits
from contextkit.widgets import Dashboard

class Stats:
    requests = 0
    compactions = 0
    def to_dict(self):
        return {"requests": self.requests, "compactions": self.compactions}

archive = Archive.in_memory()
session = SimpleNamespace(events=EventLog(), history=[Message.system("be brief")], archive=archive,
                          limits=Limits(max_payload="128KB", context_window=32_000), payload_cap=131072,
                          context_window=32_000, cap_source="configured", model="openai/sim", session_id="browser",
                          stats=Stats(), measure=lambda: SimpleNamespace(bytes=200, tokens=20, messages=1))
"""
SHOW = "dash = Dashboard(session)\ndash"
DRIVE = """\
big = "def parse_config(path):\\n    return toml.load(path)\\n" * 400
key = archive.put(big, kind="tool_result", origin={"tool": "read_file", "path": "src/config.py"}, turn=1)
session.events.append(ArchiveEvent(key=key, kind="tool_result", bytes=len(big), origin="read_file src/config.py", turn=1))
session.history = [Message.system("be brief"), Message.user("read it"), Message.user("[cleared] " + marker(key))]
session.events.append(HistoryEvent(messages=30, bytes=118_000, tokens=20_000, cap_bytes=131072, context_window=32_000))
session.events.append(RecoveryEvent(failure_kind="payload_too_large", reason="403 waf", level=1, attempt=1,
                                    bytes_before=140_000, bytes_after=90_000, outcome="recovered"))
session.events.append(CapEvent(cap_bytes=122_880, rejected_bytes=140_000, source="learned"))
session.events.append(CompactionEvent(phase="summarize", level=2, outcome="running", bytes_before=118_000,
                                      status="Summarizing 24 messages"))
session.stats.requests = 5
t = threading.Thread(target=lambda: session.events.append(CompactionEvent(
    phase="summarize", level=2, outcome="applied", bytes_before=118_000, bytes_after=30_000, messages_before=30,
    messages_after=8, summarizer_cost=0.0021, summarizer_prompt_tokens=900, summarizer_completion_tokens=200)))
t.start(); t.join()
session.events.append(HistoryEvent(messages=8, bytes=30_000, tokens=5_000, cap_bytes=122_880, context_window=32_000))
dash.browser.select(key)
print("ALL-CELLS-" + "DONE", dash.last_error)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_notebook(folder: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in (SETUP, SHOW, DRIVE)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, folder / NOTEBOOK)


def _get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read())


@pytest.fixture()
def lab(tmp_path: Path) -> Iterator[str]:
    """A JupyterLab server on a free loopback port; yields its base URL, shuts it down after."""
    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    _write_notebook(notebooks)
    settings = tmp_path / "labsettings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    workspaces = tmp_path / "workspaces"
    workspaces.mkdir()
    port = _free_port()
    env = dict(os.environ)
    env.update(
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "labsettings"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_PLATFORM_DIRS="1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_LOG="ERROR",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
        PATH=os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", ""))),
    )
    log = (tmp_path / "lab.log").open("w")
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip", "127.0.0.1",
        "--port", str(port), "--IdentityProvider.token=", "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True", f"--LabApp.workspaces_dir={workspaces}", "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", f"--ServerApp.root_dir={notebooks}",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=notebooks)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{(tmp_path / 'lab.log').read_text()[-3000:]}")
            try:
                _get(f"{base}/api/status")
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail(f"jupyter lab did not answer in 30 s:\n{(tmp_path / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.2)
        yield base
    finally:
        try:
            request = urllib.request.Request(f"{base}/api/shutdown", method="POST")  # also stops the kernels
            urllib.request.urlopen(request, timeout=5).close()
        except (urllib.error.URLError, OSError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def _wait_for_kernel_connection(base: str, timeout: float = 30.0) -> None:
    """The page's kernel is started, idle and connected over its websocket."""
    deadline = time.monotonic() + timeout
    kernels: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        try:
            kernels = json.loads(_get(f"{base}/api/kernels"))
        except (urllib.error.URLError, OSError):  # a 500 while the kernel is still being registered
            time.sleep(0.2)
            continue
        if any(k.get("execution_state") == "idle" and k.get("connections", 0) >= 1 for k in kernels):
            return
        time.sleep(0.2)
    raise AssertionError(f"no connected idle kernel after {timeout:.0f} s: {kernels}")


def _run_all_cells(page: Any) -> None:
    """Run > Run All Cells; again if no cell started (the kernel connection can lag the idle badge)."""
    started = page.locator(".jp-InputPrompt", has_text=re.compile(r"\[(\*|\d+)\]"))
    for _ in range(4):
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
        try:
            started.first.wait_for(timeout=5_000)
            return
        except PlaywrightTimeout:  # retry the click
            page.keyboard.press("Escape")
    raise AssertionError("Run All Cells did not start any cell (is the kernel starting?)")


def _outputs_text(page: Any) -> str:
    texts = page.locator(".jp-OutputArea-output").all_inner_texts()
    return "\n---\n".join(texts)


def test_dashboard_renders_and_updates_in_jupyterlab(lab: str) -> None:
    assert CHROMIUM.exists(), (
        f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium fonts-liberation; "
        ".ci/run does this). `playwright install` cannot download here."
    )
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            page.goto(f"{lab}/lab/tree/{NOTEBOOK}?reset", wait_until="domcontentloaded")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=30_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status=idle]", timeout=30_000)
            _wait_for_kernel_connection(lab)
            for dialog in page.locator(".jp-Dialog .jp-mod-accept").all():
                dialog.click()
            _run_all_cells(page)
            done = page.locator(".jp-OutputArea-output", has_text=DONE)
            try:
                done.wait_for(timeout=40_000)
            except PlaywrightTimeout as exc:
                page.screenshot(path=str(ARTIFACTS / "dashboard-failure.png"))
                raise AssertionError(f"the notebook did not finish; outputs:\n{_outputs_text(page)}") from exc
            assert done.inner_text().strip() == f"{DONE} None", _outputs_text(page)  # no view error

            dash = page.locator(".ck-dashboard")
            dash.wait_for(timeout=10_000)
            gauge = dash.locator(".ck-gauge")
            assert gauge.locator(".ck-bytes").inner_text() == "29.3 KB"
            assert gauge.locator(".ck-bytes-pct").inner_text() == "24%"
            assert gauge.locator(".ck-tokens").inner_text() == "5,000"
            assert "8 messages" in gauge.locator(".ck-messages").inner_text()
            assert "learned 120.0 KB after a rejected 136.7 KB request" in gauge.locator(".ck-cap").inner_text()
            assert gauge.locator(".ck-preflight").count() == 2

            rows = dash.locator(".ck-timeline-table tr.ck-row")
            assert rows.count() == 2
            assert "payload_too_large" in rows.nth(0).inner_text() and "recovered" in rows.nth(0).inner_text()
            summary = rows.nth(1).inner_text()
            assert "summarize (L2)" in summary and "applied" in summary and "$0.0021" in summary
            assert dash.locator(".ck-timeline-table tr.ck-running").count() == 0

            archive_rows = dash.locator(".ck-archive-table tr.ck-row")
            assert archive_rows.count() == 1 and "read_file src/config.py" in archive_rows.nth(0).inner_text()
            assert dash.locator(".ck-archive-count").inner_text() == "1"
            assert "history[2] (user)" in dash.locator(".ck-stub").inner_text()
            assert dash.locator(".ck-archive .ck-content").inner_text().startswith("def parse_config(path):")
            assert "5" in dash.locator(".ck-stats-table").inner_text()

            dash.screenshot(path=str(ARTIFACTS / "dashboard.png"))
        finally:
            browser.close()
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000
