"""What the archive says when the operating system refuses: too many open files, a full disk, a read-only file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from contextkit.archive import Archive
from contextkit.errors import ArchiveError

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )  # fmt: skip


def test_too_many_open_files_is_named_with_the_limit_and_a_fix(tmp_path: Path) -> None:
    out = run_python(f"""
        import resource
        from contextkit.archive import Archive
        from contextkit.errors import ArchiveError
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        held = []
        try:
            while True:
                held.append(open("/dev/null"))
        except OSError:
            pass
        try:
            Archive({str(tmp_path / "a.sqlite")!r}, session_id="x")
        except ArchiveError as exc:
            print(exc)
    """)
    assert out.returncode == 0, out.stderr
    assert "too many open files" in out.stdout and "limit 64" in out.stdout
    assert "session.close()" in out.stdout and "ulimit -n" in out.stdout
    assert "unable to open database file" not in out.stdout


def test_a_full_disk_is_named_with_the_free_space_and_a_fix(tmp_path: Path) -> None:
    with Archive(tmp_path / "full.sqlite", session_id="x") as arc:
        arc.put("small")
        arc._store.conn.execute("PRAGMA max_page_count = 20")  # SQLite's own "disk is full" path
        with pytest.raises(ArchiveError) as info:
            arc.put("y" * 500_000)
        assert arc.get(arc.put("small") or "") == "small"  # the failed write changed nothing
    text = str(info.value)
    assert "the disk is full" in text and "bytes free" in text and "archive.prune(" in text


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_a_read_only_folder_is_named() -> None:
    base = Path(tempfile.mkdtemp(prefix="ck-ro-"))  # under /tmp, which another user may enter
    folder = base / "ro"
    folder.mkdir()
    with Archive(folder / "a.sqlite", session_id="x") as arc:
        arc.put("written while it was writable")
    os.chmod(folder / "a.sqlite", 0o444)
    os.chmod(folder, 0o555)
    base.chmod(0o755)
    out = run_python(f"""
        import os
        from contextkit.archive import Archive
        from contextkit.errors import ArchiveError
        os.seteuid(65534)  # nobody: the permissions apply
        try:
            Archive({str(folder / "a.sqlite")!r}, session_id="x")
        except ArchiveError as exc:
            print(exc)
    """)
    os.chmod(folder, 0o755)
    shutil.rmtree(base)
    assert out.returncode == 0, out.stderr
    assert f"the file {folder / 'a.sqlite'} is read-only" in out.stdout and "Make it writable" in out.stdout, out.stdout
