"""Notebooks 01, 02, 04 and 05 as Voila apps, at 1024x768, rendered by headless Debian Chromium.

Voila runs exactly as the README and Binder run it: through ``binder/start``, so with the settings in
``binder/jupyter`` (progressive rendering, the ``contextkit`` template that loads nothing from a CDN,
kernel culling), with only the culling times shortened on the command line so that the test sees a
closed page's kernel go within seconds rather than minutes.

The tour (``01_tour``): the chart must grow in front of the class, so the number of request marks is
sampled while the page is open and must take several increasing values before the tour's closing
sentence appears. At the end the chart has one request mark per request the sentence counts, a
rejection mark per refusal, a recovery mark per recovery step, the lines of what the session knows
about the gateway (known to pass, send limit, known to fail, the simulator's real cap) each with its
legend entry, and the "what happened" line counts what the numbers table counts. When the tour's
figures differ from those of the committed README image (``docs/images/dashboard.json``), the image
and its figures are rewritten from this run (``tests/test_docs_assets.py`` checks them against the
stored tour).

Every page: no image, table, chart or dashboard wider than its output area, no Vega warning in the
console, no failed request and no request to any host but Voila's. A closed page (closed without its
``beforeunload`` handler, as a crashed tab or a lost connection) has its kernel culled. A
screenshot of each notebook (its top, and its first chart or the dashboard) goes to
``test-artifacts/voila-NAME-1024x768*.png``.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import ARTIFACTS, _free_port, _launch, _serve, _server_env
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from contextkit.widgets.series import KNOWN_TO_FAIL, KNOWN_TO_PASS, REAL_CAP, SEND_LIMIT

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
NOTEBOOKS = ("01_tour", "02_recovery_ladder", "04_gateway_caps", "05_per_level_outcomes")
WIDTH, HEIGHT = 1024, 768
# binder/jupyter says 300 s; the same setting, shortened for the test (not below the time a kernel
# takes to start on a loaded machine: a kernel no page has connected to yet is culled too)
CULL_SECONDS = 30
CLOSED: list[tuple[str, set[int]]] = []  # each closed page and its kernel processes, checked by the last test

# every output's images, tables, charts and dashboards against the width of its output area
MEASURE = """() => {
  const wide = [];
  for (const out of document.querySelectorAll('.jp-OutputArea-output')) {
    const room = out.getBoundingClientRect().width;
    for (const img of out.querySelectorAll('img')) {
      if (img.naturalWidth > room + 1) wide.push(`image ${img.naturalWidth} px in ${room} px`);
    }
    for (const el of out.querySelectorAll('table, svg.marks, .ck-dashboard')) {
      const width = Math.max(el.scrollWidth || 0, el.getBoundingClientRect().width);
      if (width > room + 1) wide.push(`${el.tagName.toLowerCase()}.${el.classList[0] || ''} ${width} px in ${room} px`);
    }
  }
  return wide;
}"""
# Voila (progressive rendering) puts a skeleton in every cell and removes it when the cell's result arrives
DONE = """() => document.querySelector('.jp-OutputArea-output') !== null
  && document.querySelectorAll('[cell-index]').length > 0
  && document.querySelectorAll('.voila-skeleton-container').length === 0"""
REQUEST_MARKS = "() => document.querySelectorAll(\"g.role-mark[class*=' requests_'] > *\").length"


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (the kernels Voila started)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


@pytest.fixture(scope="module")
def voila(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """Voila serving copies of the notebooks through binder/start; yields its URL and its process id."""
    tmp = tmp_path_factory.mktemp("voila")
    app = tmp / "app"
    app.mkdir()
    for name in NOTEBOOKS:
        shutil.copyfile(ROOT / "notebooks" / f"{name}.ipynb", app / f"{name}.ipynb")
    port = _free_port()
    cmd = [
        "bash", str(ROOT / "binder" / "start"), sys.executable, "-m", "voila", str(app), "--no-browser",
        "--Voila.ip=127.0.0.1", f"--Voila.port={port}", "--show_tracebacks=True",
        f"--MappingKernelManager.cull_idle_timeout={CULL_SECONDS}", "--MappingKernelManager.cull_interval=2",
    ]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with _serve(cmd, cwd=app, env=_server_env(tmp), log_path=tmp / "voila.log", ready_url=f"{base}/voila/api/status") as proc:
        try:
            yield base, proc.pid
        finally:
            proc.terminate()  # Voila has no shutdown endpoint; SIGTERM stops it and its kernels


class Watched:
    """A page at 1024x768 with its console, failed requests and requests to other hosts recorded."""

    def __init__(self, browser: Any, base: str) -> None:
        self.page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        self.console: list[str] = []
        self.failed: list[str] = []
        self.foreign: list[str] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("requestfailed", lambda r: self.failed.append(f"{r.url}: {r.failure}"))
        self.page.on("request", lambda r: None if r.url.startswith((base, "data:", "blob:")) else self.foreign.append(r.url))

    def problems(self, name: str) -> list[str]:
        found = [f"{name}: {w}" for w in self.page.evaluate(MEASURE)]
        found += [f"{name}: console {m}" for m in self.console if re.search(r"vega|infinite extent|WARN ", m, re.I)]
        found += [f"{name}: request failed {r}" for r in self.failed]
        found += [f"{name}: request to another host {r}" for r in self.foreign]
        return found


def _open(watched: Watched, base: str, name: str, timeout_ms: int = 240_000) -> None:
    watched.page.goto(f"{base}/voila/render/{name}.ipynb", wait_until="domcontentloaded", timeout=60_000)
    try:
        watched.page.wait_for_function(DONE, timeout=timeout_ms, polling=500)
    except PlaywrightTimeout as exc:
        watched.page.screenshot(path=str(ARTIFACTS / f"voila-{name}-failure.png"), full_page=True)
        raise AssertionError(f"{name} did not finish in Voila:\n{watched.page.inner_text('body')[-3000:]}") from exc
    assert "Traceback" not in watched.page.inner_text("body"), watched.page.inner_text("body")[-3000:]


def _close(watched: Watched, voila_pid: int, before: set[int], name: str) -> None:
    """Close the page without its beforeunload handler (its own shutdown request is never sent), as a
    crashed tab or a lost connection does; the last test sees its kernel culled."""
    kernels = _children(voila_pid) - before
    assert kernels, f"no kernel process was started for {name}"
    watched.page.close()
    CLOSED.append((name, kernels))


def _marks(page: Any, layer: str) -> int:
    return int(page.locator(f"g.role-mark[class*=' {layer}_'] > *").count())


def _count(text: str, pattern: str) -> int:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in {text[:300]!r}"
    return int(found.group(1))


def _refresh_readme_image(dash: Any, figures: dict[str, str]) -> None:
    """Rewrite docs/images/dashboard.png and its figures when this run's figures differ from them."""
    sidecar = IMAGES / "dashboard.json"
    committed = json.loads(sidecar.read_text(encoding="utf-8")) if sidecar.exists() else None
    if committed == figures and (IMAGES / "dashboard.png").exists():
        return
    dash.screenshot(path=str(IMAGES / "dashboard.png"))
    sidecar.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


@pytest.mark.timeout(600)  # the tour itself takes about a minute; a loaded CI machine needs more
def test_the_tour_grows_live_in_voila(voila: tuple[str, int]) -> None:
    base, pid = voila
    with sync_playwright() as pw:
        browser = _launch(pw)
        try:
            before = _children(pid)
            watched = Watched(browser, base)
            page = watched.page
            page.goto(f"{base}/voila/render/01_tour.ipynb", wait_until="domcontentloaded", timeout=60_000)
            dash = page.locator(".ck-dashboard")
            final = page.locator(".jp-OutputArea-output", has_text="removed pieces")  # the tour's closing sentence
            seen: list[int] = []
            deadline = time.monotonic() + 300
            try:
                dash.wait_for(timeout=120_000)
                while not final.count():
                    assert time.monotonic() < deadline, f"the tour did not finish; request marks seen: {seen}"
                    marks = page.evaluate(REQUEST_MARKS)
                    if not seen or marks != seen[-1]:
                        seen.append(marks)
                        if len(seen) == 3:  # the chart mid-run, as the class sees it at 1024x768
                            # in the page's own script: the chart redraws its svg as marks arrive, so a
                            # handle taken from Python may be detached by the time it is scrolled
                            page.evaluate("document.querySelector('.ck-dashboard svg.marks')?.scrollIntoView()")
                            page.screenshot(path=str(ARTIFACTS / "voila-dashboard-running.png"))
                    page.wait_for_timeout(250)
                page.wait_for_function(DONE, timeout=60_000, polling=500)
            except (PlaywrightTimeout, AssertionError) as exc:
                page.screenshot(path=str(ARTIFACTS / "voila-failure.png"), full_page=True)
                raise AssertionError(f"no live tour in Voila ({exc}):\n{page.inner_text('body')[-3000:]}") from exc
            sentence = final.last.inner_text().strip()
            told = re.search(r"sent (\d+) requests and the gateway refused (\d+);.*took (\d+) recovery", sentence)
            assert told, sentence
            requests, refused, steps = (int(g) for g in told.groups())
            assert requests > 10 and refused >= 1
            page.wait_for_function(f"() => ({REQUEST_MARKS})() === {requests}", timeout=20_000)
            # the chart grew while the page was open: several counts, rising, each below the final one
            growing = [n for n in seen if 0 < n < requests]
            assert len(growing) >= 3 and growing == sorted(growing), f"request marks seen while running: {seen}"
            assert _marks(page, "rejections") == refused and _marks(page, "recoveries") == steps

            # what the session knows about the gateway: four lines, each with its legend entry
            assert _marks(page, "limits") == 4, "known to pass, send limit, known to fail and the real cap"
            legend = " | ".join(page.locator(".ck-dashboard g.role-legend-label text").all_text_contents())
            for line in (KNOWN_TO_PASS, SEND_LIMIT, KNOWN_TO_FAIL, REAL_CAP):
                assert line in legend, (line, legend)
            header = dash.locator(".ck-known").inner_text()
            for words in ("known to pass", "send limit", "known to fail", "real cap"):
                assert words in header, header

            # the "what happened" line and the numbers table count the same things
            idle = dash.locator(".ck-idle-line").inner_text()
            stats = dash.locator(".ck-stats-table")
            compactions = stats.locator("tr[data-key=compactions] td").inner_text()
            by_level = stats.locator("tr[data-key=recoveries_by_level] td").inner_text()
            assert _count(idle, r"(\d+) compaction") == int(compactions.replace(",", "")) >= 1, (idle, compactions)
            table_steps = 0 if by_level == "none" else _count(by_level, r"(\d+) step")
            assert _count(idle, r"(\d+) recovery step") == table_steps == steps, (idle, by_level, sentence)
            assert stats.locator("tr[data-key=requests] td").inner_text() == str(requests)

            page.locator(".ck-dashboard svg.marks").first.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "voila-01_tour-1024x768.png"))
            problems = watched.problems("01_tour")
            assert problems == [], "\n".join(problems)
            page.set_viewport_size({"width": 1300, "height": 2600})  # the whole dashboard in one picture
            dash.scroll_into_view_if_needed()
            page.wait_for_timeout(500)
            dash.screenshot(path=str(ARTIFACTS / "voila-dashboard.png"))
            cost = stats.locator("tr[data-key=cost] td").inner_text()
            _refresh_readme_image(dash, {"sentence": sentence, "cost": cost})
            _close(watched, pid, before, "01_tour")
        finally:
            browser.close()
    assert (ARTIFACTS / "voila-dashboard.png").stat().st_size > 10_000


@pytest.mark.parametrize("name", NOTEBOOKS[1:])
def test_the_notebook_fits_1024_in_voila(voila: tuple[str, int], name: str) -> None:
    base, pid = voila
    with sync_playwright() as pw:
        browser = _launch(pw)
        try:
            before = _children(pid)
            watched = Watched(browser, base)
            _open(watched, base, name)
            watched.page.wait_for_timeout(500)  # images decode and the layout settles
            watched.page.screenshot(path=str(ARTIFACTS / f"voila-{name}-{WIDTH}x{HEIGHT}.png"))
            first = watched.page.locator(".jp-OutputArea-output img").first
            if first.count():  # the first chart, as the class sees it
                first.scroll_into_view_if_needed()
                watched.page.screenshot(path=str(ARTIFACTS / f"voila-{name}-{WIDTH}x{HEIGHT}-chart.png"))
            problems = watched.problems(name)
            assert problems == [], "\n".join(problems)
            _close(watched, pid, before, name)
        finally:
            browser.close()


def test_the_kernels_of_closed_pages_are_culled(voila: tuple[str, int]) -> None:
    _, pid = voila
    assert CLOSED, "no page was closed: run this file whole"
    deadline = time.monotonic() + CULL_SECONDS + 30
    running = {name: _children(pid) & kernels for name, kernels in CLOSED}
    while any(running.values()) and time.monotonic() < deadline:
        time.sleep(1)
        running = {name: _children(pid) & kernels for name, kernels in CLOSED}
    assert not any(running.values()), f"kernels of closed pages still run: {running}"
