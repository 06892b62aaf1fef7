"""Set the repository's address in one place and make the README's Binder and Voila links from it.

    python scripts/set_repository.py https://github.com/acme/contextkit   # set it, then rewrite the links
    python scripts/set_repository.py                                      # rewrite the links from pyproject.toml

The address lives in ``pyproject.toml`` (``[project.urls]``: ``Repository``; ``Homepage``, ``Issues``
and ``Documentation`` follow it). The README's Binder and Voila badges sit between the
``<!-- binder-links -->`` markers and are made from it; while the address still carries the
``OWNER`` placeholder, the README says in one line what to set.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = "OWNER"
START, END = "<!-- binder-links -->", "<!-- /binder-links -->"
NOTEBOOK = "notebooks/01_tour.ipynb"
GITHUB = re.compile(r"^https://github\.com/([\w.-]+)/([\w.-]+?)/?$")


def repository(root: Path = ROOT) -> str:
    """The ``Repository`` address of ``[project.urls]``."""
    data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return str(data["project"]["urls"]["Repository"])


def binder_links(url: str) -> str:
    """The README's badge lines for a GitHub address (and the one line to set while it is a placeholder)."""
    found = GITHUB.match(url)
    if not found:
        raise SystemExit(f"the repository address must look like https://github.com/OWNER/NAME, got {url!r}")
    owner, name = found.groups()
    base = f"https://mybinder.org/v2/gh/{owner}/{name}/HEAD"
    lab = NOTEBOOK.replace("/", "%2F")
    lines = [
        f"[![Binder](https://mybinder.org/badge_logo.svg)]({base}?labpath={lab})",
        f"[![Voila](https://img.shields.io/badge/launch-Voila-f37726)]({base}?urlpath=voila%2Frender%2F{lab})",
    ]
    if owner == PLACEHOLDER:
        lines.append(
            "— to publish, set `Repository` under `[project.urls]` in pyproject.toml and run "
            "`python scripts/set_repository.py` (it rewrites these links)."
        )
    return "\n".join(lines)


def apply(root: Path = ROOT, url: str | None = None) -> str:
    """Set the address (when given) in pyproject.toml and rewrite the README's links; returns it."""
    pyproject = root / "pyproject.toml"
    if url is not None:
        binder_links(url)  # a clear error before anything is written
        old = repository(root).rstrip("/")
        text = pyproject.read_text(encoding="utf-8")
        section = re.search(r"^\[project\.urls\]\n(.*?)(?=^\[)", text, re.S | re.M)
        assert section, "pyproject.toml has no [project.urls] table"
        body = section.group(1).replace(old, url.rstrip("/"))
        pyproject.write_text(text[: section.start(1)] + body + text[section.end(1) :], encoding="utf-8")
    address = repository(root)
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(START) + r"\n.*?\n" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"README.md has no {START} ... {END} block to rewrite")
    readme.write_text(pattern.sub(lambda _: f"{START}\n{binder_links(address)}\n{END}", text), encoding="utf-8")
    return address


if __name__ == "__main__":
    print("links made from", apply(ROOT, sys.argv[1] if len(sys.argv) > 1 else None))
