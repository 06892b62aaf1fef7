"""The README is a landing page: what it is, the two commands, a quickstart that runs as pasted, the
picture, the notebooks, Binder and the docs. The long prose lives in docs/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 150
# the offline set-up and the status handler a reader's own Python would not have: the quickstart must
# bring what it needs itself, so the child process starts without any of these
HOST_ONLY = ("LITELLM_", "HF_HUB_", "HEADROOM_", "TIKTOKEN_", "CONTEXTKIT_")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def quickstart(text: str) -> str:
    found = re.search(r"^## Quickstart\n.*?^```python\n(.*?)^```", text, re.S | re.M)
    assert found, "no ```python block under '## Quickstart'"
    return found.group(1)


def test_the_readme_is_a_landing_page_of_at_most_150_lines() -> None:
    text = readme()
    assert len(text.splitlines()) <= MAX_LINES, f"README.md has {len(text.splitlines())} lines (at most {MAX_LINES})"
    # the first screen says what it is, then the two commands, exactly as they work today
    head = "\n".join(text.splitlines()[:20])
    assert "context window" in head and "gateway" in head
    commands = re.search(r"```bash\n(.*?)```", text, re.S)
    assert commands, "the two commands are the README's first code block"
    lines = [line.split("#")[0].strip() for line in commands.group(1).splitlines()]
    assert lines == ["bash scripts/demo.sh", "bash scripts/test.sh"], lines
    assert (ROOT / "scripts" / "demo.sh").is_file() and (ROOT / "scripts" / "test.sh").is_file()


def test_the_readme_shows_the_picture_the_notebooks_binder_and_the_docs() -> None:
    text = readme()
    assert "](docs/images/dashboard.png)" in text
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"](notebooks/{notebook.name})" in text, f"README.md does not link {notebook.name}"
    binder = [line for line in text.splitlines() if "mybinder.org/v2/gh/" in line]
    assert binder, "the Binder badge is gone"
    if any("OWNER" in line for line in binder):  # until the hosting account is filled in, say what to set
        assert "set `Repository` under `[project.urls]` in pyproject.toml" in text
    assert "](docs/index.md)" in text and "](docs/benchmarks.md)" in text and "](ARCHITECTURE.md)" in text


def test_every_relative_link_of_the_readme_exists() -> None:
    targets = re.findall(r"\]\(([^)\s]+)\)", readme())
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    assert local, "no relative links found: the pattern is wrong"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links files that do not exist: {missing}"


def test_the_quickstart_is_about_ten_lines_and_the_same_on_the_docs_front_page() -> None:
    code = quickstart(readme())
    assert len([line for line in code.splitlines() if line.strip()]) <= 12
    front = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert quickstart(front) == code, "docs/index.md shows another quickstart than the README"


def test_the_readme_quickstart_runs_as_pasted(tmp_path: Path) -> None:
    code = quickstart(readme())
    env = {k: v for k, v in os.environ.items() if not k.startswith(HOST_ONLY)}
    env["CONTEXTKIT_ARCHIVE"] = str(tmp_path / "archive.sqlite")  # not the developer's own archive
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # it does what the README says: the unknown cap is learned from the refusal, the history recovers,
    # the removed messages are archived
    cap = re.search(r"learned cap ([\d,]+) bytes; next request ([\d,]+) bytes", run.stdout)
    assert cap, run.stdout
    learned, following = (int(g.replace(",", "")) for g in cap.groups())
    assert following < learned < 128 * 1024
    archived = re.search(r"recoveries by level \{'1': (\d+)\}; (\d+) originals archived", run.stdout)
    assert archived and int(archived.group(2)) > 0, run.stdout
    # the status lines it promises show on stderr; litellm stayed off the network and quiet
    assert re.search(r"^\[contextkit\] .*cap", run.stderr, re.M), run.stderr[-3000:]
    noise = [line for line in run.stderr.splitlines() if line.strip() and not line.startswith("[contextkit] ")]
    assert not noise, "\n".join(noise[:20])


def _set_repository() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("set_repository", ROOT / "scripts" / "set_repository.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_binder_links_are_made_from_the_one_repository_address() -> None:
    tool = _set_repository()
    address = tool.repository(ROOT)
    block = re.search(r"<!-- binder-links -->\n(.*?)\n<!-- /binder-links -->", readme(), re.S)
    assert block and block.group(1) == tool.binder_links(address), "run: python scripts/set_repository.py"
    # the placeholder lives only in pyproject.toml's [project.urls] and the README's links made from it
    shipped = [p for pattern in ("docs/**/*.md", "binder/*", "mkdocs.yml", "notebooks/*.py", "contextkit/**/*.py")
               for p in ROOT.glob(pattern) if p.is_file()]  # fmt: skip
    assert shipped and not [p for p in shipped if "github.com/OWNER" in p.read_text(encoding="utf-8")]


def test_once_the_address_is_set_no_placeholder_remains(tmp_path: Path) -> None:
    tool = _set_repository()
    for name in ("README.md", "pyproject.toml"):
        (tmp_path / name).write_text((ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    assert "OWNER" in (tmp_path / "README.md").read_text(encoding="utf-8")  # the check below can fail
    tool.apply(tmp_path, "https://github.com/acme/contextkit")
    for name in ("README.md", "pyproject.toml"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert "OWNER" not in text and "acme/contextkit" in text, name
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "mybinder.org/v2/gh/acme/contextkit/HEAD?labpath=notebooks%2F01_tour.ipynb" in text
    assert "to publish, set" not in text
    with pytest.raises(SystemExit, match=re.escape("https://github.com/OWNER/NAME")):
        tool.apply(tmp_path, "acme/contextkit")
