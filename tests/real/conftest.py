"""Fixtures of the real-infrastructure lane: Debian's nginx, Squid, HAProxy, Apache + ModSecurity +
OWASP CRS, Caddy, and llama-cpp-python's server.

``scripts/test.sh`` installs both (nginx with apt, the llama-cpp-python wheel built once into
``${XDG_CACHE_HOME:-~/.cache}/contextkit/wheels``). When they are missing these fixtures fail with
the command that installs them; ``--skip-real`` skips the lane on purpose.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from contextkit.sim import GatewaySimulator
from contextkit.sim import llama as llama_mod
from contextkit.sim.llama import LlamaServer
from contextkit.sim.middlebox import MIDDLEBOXES, Middlebox, install_hint, middlebox_binary
from contextkit.sim.nginx import NginxGateway, nginx_binary

INSTALL_HINT = "run `bash scripts/test.sh` once (it installs them), or skip this lane with --skip-real"


@pytest.fixture(scope="session")
def sim() -> Iterator[GatewaySimulator]:
    with GatewaySimulator() as gw:
        yield gw


@pytest.fixture
def nginx_in_front() -> Iterator[Callable[..., NginxGateway]]:
    """``nginx_in_front(upstream_port, variant="413", max_body="48k")`` -> a started NginxGateway."""
    if nginx_binary() is None:
        pytest.fail(f"nginx is not installed: {INSTALL_HINT}")
    started: list[NginxGateway] = []

    def start(upstream_port: int, variant: str = "413", max_body: str = "48k") -> NginxGateway:
        gateway = NginxGateway(upstream_port, variant=variant, max_body=max_body).start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.cleanup()


@pytest.fixture
def middlebox_in_front() -> Iterator[Callable[..., Middlebox]]:
    """``middlebox_in_front(kind, upstream_port, **options)`` -> a started middlebox
    (``contextkit.sim.middlebox``: squid, haproxy, apache, caddy); skips when its package is missing."""
    started: list[Middlebox] = []

    def start(kind: str, upstream_port: int, **options: object) -> Middlebox:
        if middlebox_binary(kind) is None:
            pytest.skip(f"{kind} is not installed: {install_hint(kind)}, or skip this lane with --skip-real")
        box = MIDDLEBOXES[kind](upstream_port, **options).start()  # type: ignore[arg-type]
        started.append(box)
        return box

    yield start
    for box in started:
        box.cleanup()


@pytest.fixture(scope="module")
def llama_2048() -> Iterator[LlamaServer]:
    """SmolLM2-135M-Instruct behind llama-cpp-python's server with n_ctx 2048.

    One thread unless ``CONTEXTKIT_LLAMA_THREADS`` says otherwise: llama.cpp's threads wait for each
    other at every step, so two threads on a machine where anything else runs (another test worker, a
    neighbour's build) were many times slower than one and a summary call outlived the test timeout.
    """
    if not llama_mod.available():
        pytest.fail(f"llama-cpp-python's server or the SmolLM2 GGUF is missing: {INSTALL_HINT}")
    with LlamaServer(n_ctx=2048, n_threads=int(os.environ.get("CONTEXTKIT_LLAMA_THREADS") or 1)) as server:
        yield server
