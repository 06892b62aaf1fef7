"""What the Binder image installs and how it serves Voila (``binder/``), read from the shipped files.

The browser tests (``tests/test_voila_browser.py``) run Voila through ``binder/start`` with these
settings and see their effect: the tour streams into the page, nothing is requested from a CDN, the
kernel of a closed page is culled.
"""

from __future__ import annotations

import ast
import json
import re
import tomllib
from pathlib import Path

from contextkit.experiments.peers import PEER_PACKAGES, PEERS

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_extras() -> set[str]:
    lines = (BINDER / "requirements.txt").read_text(encoding="utf-8").splitlines()
    found = [re.fullmatch(r"-e \.\[([\w,-]+)\]", line.strip()) for line in lines]
    extras = [m.group(1) for m in found if m]
    assert len(extras) == 1, "binder/requirements.txt installs contextkit once, with its extras"
    return set(extras[0].split(","))


def _notebook_strategies(name: str) -> list[str]:
    """The ``strategies = [...]`` list a notebook's source runs."""
    source = (ROOT / "notebooks" / f"{name}.py").read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "strategies" for t in node.targets):
            value = ast.literal_eval(node.value) if isinstance(node.value, ast.List) else None
            if value:
                return list(value)
    raise AssertionError(f"notebook {name} has no strategies list")


def test_binder_installs_every_peer_notebook_05_runs() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = pyproject["project"]["optional-dependencies"]
    installed = {
        _norm(re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0]) for extra in _installed_extras() for req in extras[extra]
    }
    peers = [s for s in _notebook_strategies("05_per_level_outcomes") if s in PEERS]
    assert peers, "notebook 5 runs no peer library: this test no longer checks anything"
    missing = {peer: dist for peer in peers for dist in PEER_PACKAGES[peer] if _norm(dist) not in installed}
    assert missing == {}, f"Binder would not run these rows of notebook 5: {missing}"


def test_binder_serves_voila_live_offline_and_culls_closed_pages() -> None:
    start = (BINDER / "start").read_text(encoding="utf-8")
    assert 'export JUPYTER_CONFIG_PATH="$here' in start and 'export JUPYTER_PATH="$here' in start
    assert start.rstrip().endswith('exec "$@"')
    config = BINDER / "jupyter"
    voila = json.loads((config / "voila.json").read_text(encoding="utf-8"))
    assert voila["VoilaConfiguration"]["progressive_rendering"] is True  # the cells stream into the page
    template = config / "voila" / "templates" / voila["VoilaConfiguration"]["template"]
    assert json.loads((template / "conf.json").read_text(encoding="utf-8"))["base_template"] == "lab"
    assert "fontawesome" in (template / "index.html.j2").read_text(encoding="utf-8")  # the links it removes
    server = json.loads((config / "jupyter_server_config.json").read_text(encoding="utf-8"))
    # Voila runs the whole notebook inside one websocket message handler, during which tornado reads no
    # frame from that socket, pongs included: with pings on, a run longer than the ping timeout (90 s,
    # a slow Binder) has its socket closed and the rest of the tour never reaches the page
    assert voila["Voila"]["tornado_settings"]["ws_ping_interval"] == 0
    assert server["ServerApp"]["tornado_settings"]["ws_ping_interval"] == 0
    for settings in (voila, server):  # standalone Voila reads voila.json, Binder's server its own config
        culling = settings["MappingKernelManager"]
        assert culling["cull_connected"] is False  # a page still open keeps its kernel
        assert 0 < culling["cull_idle_timeout"] <= 600 and 0 < culling["cull_interval"] <= culling["cull_idle_timeout"]
