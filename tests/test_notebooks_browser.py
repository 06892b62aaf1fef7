"""The stored notebooks as a class sees them: JupyterLab in headless Chromium at 1440x900 and 1280x800.

Opens notebooks 01, 02, 04 and 05 with the outputs ``scripts/execute_notebooks.py`` stored (nothing
is run), the left sidebar closed as on a projector, and checks what a teacher would: the tour's
dashboard names what the session knows about the gateway (known to pass, known to fail, the send
limit, the simulator's real cap), notebook 04 shows its chart of those lines as an image (a PNG:
JupyterLab does not show a stored SVG in an untrusted notebook, as on Binder; the lines and legend
entries of the chart are checked in the chart Vega draws live, in tests/test_widgets_browser.py
(JupyterLab) and tests/test_voila_browser.py (Voila at 1024x768, notebooks 01, 02, 04 and 05)), the
"what happened" line and the numbers table count the same compactions and recovery steps, no image
or table is wider than its output area, and the console shows no Vega warning and no failed
network request. A screenshot of each notebook at each size goes to ``test-artifacts/``.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.browser import ARTIFACTS, _free_port, _launch, _serve, _server_env
from playwright.sync_api import sync_playwright

from contextkit.widgets.labels import stat_label

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOKS = ("01_tour", "02_recovery_ladder", "04_gateway_caps", "05_per_level_outcomes")
SIZES = ((1440, 900), (1280, 800))

# every output's images and tables against the width of its output area (images at their own size:
# JupyterLab shrinks a wider one, which makes its text unreadable on a projector)
MEASURE = """() => {
  const wide = [];
  for (const out of document.querySelectorAll('.jp-OutputArea-output')) {
    const room = out.clientWidth;
    for (const img of out.querySelectorAll('img')) {
      if (img.naturalWidth > room + 1) wide.push(`image ${img.naturalWidth} px in ${room} px`);
    }
    for (const table of out.querySelectorAll('table')) {
      if (table.scrollWidth > room + 1) wide.push(`table ${table.scrollWidth} px in ${room} px`);
    }
  }
  return wide;
}"""


@pytest.fixture(scope="module")
def stored_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """JupyterLab serving copies of the stored notebooks (cells rendered all at once, no news)."""
    tmp = tmp_path_factory.mktemp("lab")
    folder = tmp / "nb"
    folder.mkdir()
    for name in NOTEBOOKS:
        shutil.copy(ROOT / "notebooks" / f"{name}.ipynb", folder)
    settings = tmp / "labsettings" / "@jupyterlab"
    (settings / "apputils-extension").mkdir(parents=True)
    (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    (settings / "notebook-extension").mkdir(parents=True)
    (settings / "notebook-extension" / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    (tmp / "workspaces").mkdir()
    port = _free_port()
    env = _server_env(tmp, JUPYTERLAB_SETTINGS_DIR=str(tmp / "labsettings"))
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip", "127.0.0.1",
        "--port", str(port), "--IdentityProvider.token=", "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True", f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        f"--ServerApp.root_dir={folder}",
    ]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with _serve(cmd, cwd=folder, env=env, log_path=tmp / "lab.log", ready_url=f"{base}/api/status"):
        try:
            yield base
        finally:
            try:
                request = urllib.request.Request(f"{base}/api/shutdown", method="POST")
                urllib.request.urlopen(request, timeout=5).close()
            except (urllib.error.URLError, OSError):
                pass


def _count(text: str, pattern: str) -> int:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in {text[:300]!r}"
    return int(found.group(1))


def test_the_stored_notebooks_fit_the_screen_and_tell_one_story(stored_lab: str) -> None:
    problems: list[str] = []
    with sync_playwright() as pw:
        browser = _launch(pw)
        try:
            for width, height in SIZES:
                page = browser.new_page(viewport={"width": width, "height": height})
                console: list[str] = []
                failed: list[str] = []
                page.on("console", lambda m, sink=console: sink.append(f"{m.type}: {m.text}"))
                # a request the next page load cancels (net::ERR_ABORTED) did not fail on the network
                page.on("requestfailed", lambda r, sink=failed: None if "ABORTED" in (r.failure or "") else sink.append(
                    f"{r.url}: {r.failure}"))  # fmt: skip
                for name in NOTEBOOKS:
                    page.goto(f"{stored_lab}/lab/tree/{name}.ipynb?reset", wait_until="domcontentloaded")
                    page.wait_for_selector(".jp-Notebook .jp-OutputArea-output", timeout=60_000)
                    if page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").count():
                        page.keyboard.press("Control+b")  # the file browser closed, as on a projector
                    page.wait_for_timeout(1_000)  # images decode and the layout settles
                    for dialog in page.locator(".jp-Dialog .jp-mod-accept").all():
                        dialog.click()
                    problems += [f"{name} at {width}px: {w}" for w in page.evaluate(MEASURE)]
                    first = page.locator(".jp-OutputArea-output img").first
                    if first.count():
                        first.scroll_into_view_if_needed()
                    page.screenshot(path=str(ARTIFACTS / f"lab-{name}-{width}x{height}.png"))
                    if name == "01_tour":
                        header = page.locator(".ck-dashboard-static .ck-known").first.inner_text()
                        for text in ("known to pass", "send limit", "known to fail", "real cap"):
                            assert text in header, header
                        idle = page.locator(".ck-idle-line").first.inner_text()
                        numbers = {  # rows found by their label (the notebook's HTML keeps no data attributes)
                            key: page.locator("tr", has=page.locator("th", has_text=re.compile(
                                rf"^{re.escape(stat_label(key)[0])}$"))).locator("td").first.inner_text()
                            for key in ("compactions", "recoveries_by_level")
                        }  # fmt: skip
                        assert _count(idle, r"(\d+) compaction") == int(numbers["compactions"].replace(",", ""))
                        steps = 0 if numbers["recoveries_by_level"] == "none" else _count(
                            numbers["recoveries_by_level"], r"(\d+) step"
                        )
                        assert _count(idle, r"(\d+) recovery step") == steps, (idle, numbers)
                    if name == "04_gateway_caps":  # the chart of what the session knows, drawn as a PNG
                        cell = page.locator(".jp-CodeCell", has_text="snapshot_chart(learner")
                        widths = cell.locator(".jp-OutputArea-output img").evaluate_all(
                            "els => els.map(e => e.naturalWidth)"
                        )
                        assert widths and widths[0] > 300, f"notebook 04 shows no chart of what the session knows: {widths}"
                vega = [m for m in console if re.search(r"vega|infinite extent|WARN ", m, re.I)]
                assert vega == [], vega
                assert failed == [], failed
                page.close()
        finally:
            browser.close()
    assert problems == [], "\n".join(problems)
