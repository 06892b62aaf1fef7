"""The docs site (mkdocs + mkdocstrings): it builds strict, every page is in the navigation, the API
reference covers the public API, and the built site loads nothing from another host.

``scripts/test.sh`` builds it too (its docs lane); this file builds it once more into a temporary
folder so the checks below read a site made from the files as they are now.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

import contextkit

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONFIG = ROOT / "mkdocs.yml"
# Material prints a banner about MkDocs 2.0 on every build unless told not to; it is not a warning
# of ours, and it is set for the child process only
QUIET = {"NO_MKDOCS_2_WARNING": "1"}


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        pytest.fail("mkdocs is not installed: pip install '.[docs]' (the dev extra includes it)")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=ROOT,
        env=os.environ | QUIET,
        capture_output=True,
        text=True,
        timeout=280,
    )


def load_config(path: Path = CONFIG) -> dict[str, Any]:
    # mkdocs.yml uses no custom tags, so the safe loader reads it
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def nav_pages(nav: Any) -> Iterator[str]:
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from nav_pages(value)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = build(CONFIG, out)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    return out


def test_the_config_is_strict_and_the_test_command_builds_it_strict() -> None:
    assert load_config().get("strict") is True
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    lines = script.splitlines()
    docs = [i for i, line in enumerate(lines) if "mkdocs build --strict" in line]
    mypy = [i for i, line in enumerate(lines) if "mypy contextkit" in line]
    pytest_ = [i for i, line in enumerate(lines) if "python -m pytest" in line]
    assert docs and mypy and pytest_, "scripts/test.sh lost its docs, mypy or pytest lane"
    assert mypy[0] < docs[0] < pytest_[0], "the docs build runs after mypy, before pytest"
    site_dir = re.search(r"--site-dir\s+(\S+)", lines[docs[0]])
    assert site_dir and site_dir.group(1).startswith("build/"), "the site goes to a git-ignored folder"


def test_the_site_builds_strict(site: Path) -> None:
    assert (site / "index.html").is_file() and (site / "reference" / "contextkit.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strict build is the check of every link and page: with this config a broken link is an error."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# A page\n\nSee [a page that is not there](missing.md).\n", encoding="utf-8")
    config = load_config()
    config.update(docs_dir=str(docs), nav=[{"Home": "index.md"}])
    broken = tmp_path / "mkdocs.yml"
    broken.write_text(yaml.safe_dump(config), encoding="utf-8")
    run = build(broken, tmp_path / "site")
    assert run.returncode != 0
    assert "missing.md" in run.stdout + run.stderr


def test_every_page_in_docs_is_in_the_nav() -> None:
    in_nav = set(nav_pages(load_config()["nav"]))
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert on_disk - in_nav == set(), f"pages missing from the nav in mkdocs.yml: {sorted(on_disk - in_nav)}"
    assert in_nav - on_disk == set(), f"the nav names pages that do not exist: {sorted(in_nav - on_disk)}"


def test_the_reference_documents_every_public_name(site: Path) -> None:
    page = (site / "reference" / "contextkit.html").read_text(encoding="utf-8")
    ids = set(re.findall(r'id="(contextkit\.[A-Za-z_]\w*)"', page))
    missing = [n for n in contextkit.__all__ if not n.startswith("_") and f"contextkit.{n}" not in ids]
    assert not missing, f"the API reference does not document: {missing}"


def test_every_limits_field_is_in_the_reference(site: Path) -> None:
    from dataclasses import fields

    from contextkit.settings import Limits

    page = (site / "reference" / "contextkit.html").read_text(encoding="utf-8")
    missing = [f.name for f in fields(Limits) if f'id="contextkit.Limits.{f.name}"' not in page]
    assert not missing, f"Limits fields missing from the API reference: {missing}"


class Resources(HTMLParser):
    """Every URL a page loads by itself: scripts, stylesheets, icons, images, frames, media."""

    LOADS = {"script": "src", "img": "src", "iframe": "src", "source": "src", "video": "src", "audio": "src",
             "embed": "src", "object": "data", "link": "href"}  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.mermaid = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        name = self.LOADS.get(tag)
        if name and values.get(name):
            if tag == "link" and (values.get("rel") or "") in ("canonical", "alternate", "prev", "next"):
                return  # navigation between pages, not a resource
            self.urls.append(values[name] or "")
        if values.get("srcset"):
            self.urls.extend(part.split()[0] for part in (values["srcset"] or "").split(",") if part.strip())
        # Material fetches its diagram library from a CDN for such blocks
        if "mermaid" in (values.get("class") or "").split():
            self.mermaid = True


def external(url: str) -> bool:
    return bool(re.match(r"(?i)([a-z][a-z0-9+.-]*:)?//", url)) and not url.lower().startswith("file:")


def test_the_site_loads_nothing_from_another_host(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 10
    found: dict[str, list[str]] = {}
    for page in pages:
        parser = Resources()
        parser.feed(page.read_text(encoding="utf-8"))
        bad = [u for u in parser.urls if external(u)]
        if parser.mermaid:
            bad.append("a mermaid diagram (its library comes from a CDN)")
        if bad:
            found[page.relative_to(site).as_posix()] = bad
    for sheet in sorted(site.rglob("*.css")):
        text = sheet.read_text(encoding="utf-8", errors="replace")
        bad = [u for u in re.findall(r"""(?:url\(|@import\s+)\s*['"]?([^'")\s]+)""", text) if external(u)]
        if bad:
            found[sheet.relative_to(site).as_posix()] = bad
    assert not found, f"the built site loads from other hosts: {found}"


def test_the_resource_check_sees_an_external_font() -> None:
    parser = Resources()
    parser.feed('<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">'
                '<script src="//cdn.example.org/x.js"></script><img src="images/dashboard.png">')  # fmt: skip
    assert [u for u in parser.urls if external(u)] == ["https://fonts.googleapis.com/css?family=Roboto",
                                                        "//cdn.example.org/x.js"]  # fmt: skip


def test_the_docs_cite_no_document_outside_the_repository() -> None:
    cites = re.compile(r"\bSPEC\b|\bS\d+(\.\d+)+\b|\bissue \d+|research §|shared/research")
    found = {
        page.relative_to(DOCS).as_posix(): [m.group(0) for m in cites.finditer(page.read_text(encoding="utf-8"))]
        for page in DOCS.rglob("*.md")
    }
    assert not {k: v for k, v in found.items() if v}, found


def test_the_docs_extra_is_pinned_in_the_lock_within_its_ranges() -> None:
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    assert "contextkit[" in " ".join(extras["dev"]) and any("docs" in r for r in extras["dev"] if "contextkit[" in r)
    pins = {}
    for line in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines():
        name, _, version = line.partition("==")
        pins[canonicalize_name(name)] = version
    for text in extras["docs"]:
        req = Requirement(text)
        pinned = pins.get(canonicalize_name(req.name))
        assert pinned, f"{req.name} (the docs extra) has no pin in requirements.lock"
        assert req.specifier.contains(pinned), f"requirements.lock pins {req.name}=={pinned}, outside {req.specifier}"
