"""The dashboard in a real JupyterLab, rendered by headless Debian Chromium.

JupyterLab: starts it on 127.0.0.1 (free port, no token, private settings and workspace folders),
opens a notebook generated here and runs all cells through the Lab UI: a real Session against
the gateway simulator with the Dashboard displayed, then turns (from a background thread and from
the kernel's event loop) that force a gateway rejection, a learned cap, recovery and summaries,
then a 3 s summary. The test sees that summary's running row live and saves
``test-artifacts/lab-dashboard-running.png``, waits for the end, compares the DOM with the values
the kernel printed (header, chart marks, timeline rows, archive, stub diff, numbers) and saves
``test-artifacts/dashboard.png``.

The tour as a Voila app (1024x768, live, offline, kernels culled) is in tests/test_voila_browser.py.

The chart is an SVG (vega-embed's svg renderer): each named layer's items sit in one
``g.role-mark.<layer>_N_marks`` group, so marks are counted in the DOM.

Part of the default test run: a missing ``/usr/bin/chromium`` is a failure (``.ci/run``
installs it), never a skip.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from helpers.browser import ARTIFACTS, _free_port, _get, _launch, _serve, _server_env
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from contextkit.widgets.series import KNOWN_TO_FAIL, KNOWN_TO_PASS, REAL_CAP, SEND_LIMIT

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "widgets_browser.ipynb"
DONE = "ALL-CELLS-" + "DONE"  # split so the marker only appears in the output, not in the cell source

SETUP = """\
import json, threading
import contextkit
contextkit.offline()  # as the notebooks do: litellm prints no debug hints into the outputs
from contextkit import Limits
from contextkit.archive import Archive
from contextkit.markers import marker
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace
from contextkit.sizing import format_size
from contextkit.widgets import Dashboard

gw = GatewaySimulator(max_body="64KB", reject_with="waf403").start()  # the gateway rejects bodies over 64 KB
kw = gw.litellm_kwargs("openai")
session = Session(kw.pop("model"), **kw, system="Be brief.", limits=Limits(context_window=48_000),
                  archive=Archive.in_memory(session_id="browser"), session_id="browser", status=None)
logs = Workspace(seed=1, target_bytes=6000)
"""
SHOW = "dash = Dashboard(session)\ndash"
DRIVE = """\
def turns(first, last):
    for i in range(first, last):
        session.send(f"turn {i}: please look at this log\\n" + logs.tail_log(80).content)

worker = threading.Thread(target=turns, args=(0, 8))  # the dashboard updates from a background thread
worker.start(); worker.join()
await session.asend("turn 8: and this one\\n" + logs.tail_log(80).content)  # ... and from the kernel's event loop
turns(9, 10)
gw.configure(latency=3.0)  # the next summary stays in flight for 3 s: the test watches its running row
slow = threading.Thread(target=session.compact)
slow.start()
"""
FINISH = """\
slow.join()
stubbed = next(e.key for e in reversed(session.archive.entries())
               if any(marker(e.key) in m.content for m in session.history))
dash.children[5].selected_index = 0  # open the archive section
dash.browser.select(stubbed)
gauge, m = dash.gauge, session.measure()
expected = {
    "bytes": format_size(m.bytes), "bytes_pct": f"{gauge.bytes_ratio:.0%}", "tokens": f"{m.tokens:,}",
    "messages": f"{m.messages} messages", "cap": gauge.cap_detail, "state": gauge.state,
    "rows": len(dash.timeline.rows), "archive": len(session.archive.entries()),
    "stub": dash.browser.stub_indices[0], "original": session.archive.get(stubbed)[:40],
    "requests": session.stats.requests, "rejected": sum(not r.accepted for r in gw.requests),
    "turn_requests": sum(r.kind == "turn" for r in gw.requests), "marks": dash.chart.series.counts(),
    "error": dash.last_error,
}
gw.stop()
print("ALL-CELLS-" + "DONE", json.dumps(expected))
"""




def _write_notebook(folder: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in (SETUP, SHOW, DRIVE, FINISH)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, folder / NOTEBOOK)








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
    env = _server_env(tmp_path, JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "labsettings"))
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip", "127.0.0.1",
        "--port", str(port), "--IdentityProvider.token=", "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True", f"--LabApp.workspaces_dir={workspaces}", "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", f"--ServerApp.root_dir={notebooks}",
    ]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with _serve(cmd, cwd=notebooks, env=env, log_path=tmp_path / "lab.log", ready_url=f"{base}/api/status"):
        try:
            yield base
        finally:
            try:
                request = urllib.request.Request(f"{base}/api/shutdown", method="POST")  # also stops the kernels
                urllib.request.urlopen(request, timeout=5).close()
            except (urllib.error.URLError, OSError):
                pass


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


def _marks(page: Any, layer: str) -> int:
    """Items drawn in a named chart layer (one ``path`` per point or rule)."""
    return int(page.locator(f"g.role-mark[class*=' {layer}_'] > *").count())


def _wait_marks(page: Any, layer: str, count: int, timeout: float = 20_000) -> None:
    """The chart redraws asynchronously after the kernel's last event: wait for ``count`` marks."""
    page.wait_for_function(
        "([layer, count]) => document.querySelectorAll(`g.role-mark[class*=' ${layer}_'] > *`).length === count",
        arg=[layer, count],
        timeout=timeout,
    )




@pytest.mark.timeout(600)
def test_dashboard_renders_and_updates_in_jupyterlab(lab: str) -> None:
    with sync_playwright() as pw:
        browser = _launch(pw)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 2000})
            page.goto(f"{lab}/lab/tree/{NOTEBOOK}?reset", wait_until="domcontentloaded")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=30_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status=idle]", timeout=30_000)
            _wait_for_kernel_connection(lab)
            for dialog in page.locator(".jp-Dialog .jp-mod-accept").all():
                dialog.click()
            _run_all_cells(page)
            # the live view of the slow manual summary, while the kernel is still busy (under load an
            # automatic compaction's summary of an earlier turn may be seen running first: wait for this one)
            live = page.locator(".ck-timeline .ck-episode.ck-running", has_text="because you called compact()")
            running = page.locator(".ck-running-line", has_text="summarized old messages")
            try:
                live.wait_for(timeout=180_000)  # ten turns first: over a minute on a loaded machine
                running.wait_for(timeout=10_000)
            except PlaywrightTimeout as exc:
                page.screenshot(path=str(ARTIFACTS / "dashboard-failure.png"))
                raise AssertionError(f"no running manual summary row; outputs:\n{_outputs_text(page)}") from exc
            assert "now: summarized old messages" in live.inner_text(), _outputs_text(page)
            assert _marks(page, "requests") >= 10  # the chart is live mid-run
            page.locator(".ck-dashboard").screenshot(path=str(ARTIFACTS / "lab-dashboard-running.png"))
            done = page.locator(".jp-OutputArea-output", has_text=DONE)
            try:
                done.wait_for(timeout=60_000)
            except PlaywrightTimeout as exc:
                page.screenshot(path=str(ARTIFACTS / "dashboard-failure.png"))
                raise AssertionError(f"the notebook did not finish; outputs:\n{_outputs_text(page)}") from exc
            text = done.inner_text().strip()
            expected = json.loads(text.removeprefix(DONE))
            assert expected["error"] is None, text  # no panel swallowed an exception
            assert expected["rejected"] == 1 and expected["cap"].startswith("learned "), text

            dash = page.locator(".ck-dashboard")
            dash.wait_for(timeout=10_000)
            # the chart: one request mark per request the session sent (= turn requests the simulator got)
            assert expected["marks"]["requests"] == expected["requests"] == expected["turn_requests"], text
            _wait_marks(page, "requests", expected["requests"])
            _wait_marks(page, "tokens", expected["requests"])
            assert _marks(page, "rejections") == expected["rejected"] == 1  # a rejection mark after a rejection
            assert _marks(page, "recoveries") == expected["marks"]["recoveries"] >= 1
            # summary and truncation steps as rules, routine trims as small ticks
            assert _marks(page, "compactions") == expected["marks"]["major_compactions"] >= 1
            assert _marks(page, "routine") == expected["marks"]["routine"]
            # what the session knows about the gateway, drawn: three lines (no simulator was given for
            # its real cap), each with its legend entry
            assert _marks(page, "limits") == 3
            legend = " | ".join(dash.locator("g.role-legend-label text").all_text_contents())
            for line in (KNOWN_TO_PASS, SEND_LIMIT, KNOWN_TO_FAIL):
                assert line in legend, (line, legend)
            assert REAL_CAP not in legend

            gauge = dash.locator(".ck-gauge")
            assert gauge.locator(".ck-bytes").inner_text() == expected["bytes"]
            assert gauge.locator(".ck-bytes-pct").inner_text() == expected["bytes_pct"]
            assert gauge.locator(".ck-tokens").inner_text() == expected["tokens"]
            assert gauge.locator(".ck-messages").inner_text() == expected["messages"]
            assert gauge.locator(".ck-cap").inner_text() == f"cap: {expected['cap']}"
            assert expected["state"] in gauge.locator(".ck-state").inner_text()
            assert gauge.locator(".ck-preflight").count() == 2  # the 85% line on both bars

            episodes = dash.locator(".ck-timeline .ck-episode")
            assert episodes.count() == expected["rows"] > 0
            assert dash.locator(".ck-timeline .ck-episode.ck-running").count() == 0
            recovered = dash.locator(".ck-timeline .ck-episode.ck-recovery.ck-recovered")
            assert recovered.count() == 1 and "firewall/proxy page" in recovered.inner_text()
            manual = dash.locator(".ck-timeline .ck-episode.ck-compaction", has_text="because you called compact()")
            assert manual.count() == 1 and "summarized old messages" in manual.first.inner_text()
            manual.first.locator("summary").click()  # a row expands to its phases
            assert manual.first.locator(".ck-step").count() >= 2

            assert dash.locator(".ck-archive-count").inner_text() == str(expected["archive"])
            assert f"history[{expected['stub']}]" in dash.locator(".ck-stub").inner_text()
            assert dash.locator(".ck-archive .ck-content").inner_text().startswith(expected["original"].strip())
            assert dash.locator(".ck-archive .ck-diff .ck-add").count() >= 1  # the stub the model saw, as a diff
            stats = dash.locator(".ck-stats-table")
            requests_row = stats.locator("tr[data-key=requests]")
            assert requests_row.locator("td").inner_text() == str(expected["requests"])
            assert "requests sent" in requests_row.inner_text() and requests_row.get_attribute("title")

            dash.screenshot(path=str(ARTIFACTS / "dashboard.png"))
        finally:
            browser.close()
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000
