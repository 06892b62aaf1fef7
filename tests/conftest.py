"""Shared fixtures: offline environment before anything imports litellm."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import contextkit

contextkit.offline()  # the test process owns its environment: no network, litellm quiet

from contextkit.sim import GatewaySimulator  # noqa: E402 - after the offline environment is set

# --- one simulator per test module, reset before each test (a module may define its own) --------


@pytest.fixture(scope="module")
def sim() -> Iterator[GatewaySimulator]:
    with GatewaySimulator() as gw:
        yield gw


@pytest.fixture
def gw(sim: GatewaySimulator) -> GatewaySimulator:
    sim.reset()
    return sim


# --- the archive's backends: every archive test that takes open_archive runs on both ---------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """Debian's PostgreSQL, started once per test session as a foreground process (the real lane)."""
    from helpers.archives import DATABASE

    from contextkit.sim.postgres import INSTALL_HINT, PostgresServer, postgres_bin

    if postgres_bin() is None:
        pytest.fail(f"PostgreSQL's server is not installed: {INSTALL_HINT}; or skip this lane with --skip-real")
    with PostgresServer() as server:
        server.create_database(DATABASE)
        yield server


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.real)])
def archive_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_archive(archive_backend: str, tmp_path: Any, request: pytest.FixtureRequest) -> Any:
    from helpers.archives import postgres_opener, sqlite_opener

    if archive_backend == "sqlite":
        return sqlite_opener(tmp_path)
    return postgres_opener(request.getfixturevalue("postgres_server"))


# --- slow tests and report tables (reliability suite) --------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False, help="also run tests marked slow")
    parser.addoption(
        "--skip-real",
        action="store_true",
        default=False,
        help="skip the real-infrastructure lane (tests/real: Debian's nginx and a llama.cpp server); CI runs it",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--skip-real"):
        skip_real = pytest.mark.skip(reason="real-infrastructure lane skipped with --skip-real")
        for item in items:
            if "real" in item.keywords:
                item.add_marker(skip_real)
    # `-m slow` selects them explicitly; otherwise slow tests need --run-slow.
    if config.getoption("--run-slow") or "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow (or -m slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Tables that test modules left on ``config.contextkit_reports`` (e.g. the fault matrix)."""
    for title, table in getattr(config, "contextkit_reports", []):
        terminalreporter.write_sep("=", title)
        terminalreporter.write_line(table)
