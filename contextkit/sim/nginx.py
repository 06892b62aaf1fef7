"""A real nginx (Debian's package) in front of any upstream, as a foreground process in a temp dir.

The simulator imitates gateways; this runs the real one. ``NginxGateway(upstream_port, variant=...)``
writes its own prefix, config, pid, logs and temp paths into a directory and starts
``nginx -p DIR -c DIR/nginx.conf -g 'daemon off;'``. Variants differ only in nginx config, all with
a small ``client_max_body_size``:

* ``"413"``   - nginx's own "413 Request Entity Too Large" HTML page;
* ``"drop"``  - ``error_page 413 = @drop; location @drop { return 444; }``: the connection closes, no answer;
* ``"waf403"`` - ``error_page 413 =403 /blocked.html``: a 403 HTML "Request blocked ... security policy" page.

The access log records ``$status`` and ``$content_length`` (the declared body size; ``$request_length``
counts only what nginx read, often just the headers) for every request: ``access_log()``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self

from contextkit.errors import ConfigError

VARIANTS = ("413", "drop", "waf403")
BLOCKED_PAGE = (
    "<!DOCTYPE html>\n<html><head><title>403 Forbidden</title></head><body>\n"
    "<h1>Request blocked</h1>\n<p>Your request was blocked by the security policy of this site.</p>\n"
    "</body></html>\n"
)
_VARIANT_CONF = {
    "413": "",
    "drop": "        error_page 413 = @drop;\n        location @drop { return 444; }\n",
    "waf403": (
        "        error_page 413 =403 /blocked.html;\n"
        "        location = /blocked.html { internal; root {dir}; default_type text/html; }\n"
    ),
}
_CONF = """worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    client_body_temp_path {dir}/client_temp;
    proxy_temp_path {dir}/proxy_temp;
    fastcgi_temp_path {dir}/fastcgi_temp;
    uwsgi_temp_path {dir}/uwsgi_temp;
    scgi_temp_path {dir}/scgi_temp;
    log_format contextkit '$status\\t$content_length\\t$request_length\\t$request_method\\t$request_uri';
    access_log {dir}/access.log contextkit;
    client_max_body_size {cap};
    proxy_read_timeout 900s;
    proxy_send_timeout 900s;
    server {{
        listen 127.0.0.1:{port};
{variant}        location / {{
            proxy_pass http://127.0.0.1:{upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


def nginx_binary() -> str | None:
    """Debian's nginx (``CONTEXTKIT_NGINX`` overrides), or None when it is not installed."""
    for candidate in (os.environ.get("CONTEXTKIT_NGINX"), shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, *, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    """Until something accepts connections on 127.0.0.1:port (or the process died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode} before listening on {port}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listened on 127.0.0.1:{port} within {timeout:g} s")


def die_with_parent() -> None:
    """``preexec_fn``: the kernel stops this server when the thread that started it ends (Linux), so a
    killed test run or benchmark never leaves nginx or llama.cpp behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_process(process: subprocess.Popen[bytes] | None, sig: int, *, grace: float) -> None:
    """Send ``sig``, wait ``grace`` seconds, then kill: a server that hangs never outlives its owner."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


class ServerProcess(ABC):
    """A server run as a foreground process in a directory of its own (a temp dir unless one is given):
    ``stop`` (``stop_signal``, then a kill after ``stop_grace`` seconds), ``cleanup`` (stopped, the temp
    dir removed) and ``with`` (started, then cleaned up). A subclass writes ``start``."""

    stop_signal: ClassVar[int] = signal.SIGTERM
    stop_grace: ClassVar[float] = 10

    def __init__(self, directory: str | Path | None, *, prefix: str) -> None:
        self._own_dir = directory is None
        self.dir = Path(directory or tempfile.mkdtemp(prefix=prefix))
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @abstractmethod
    def start(self, timeout: float = 30.0) -> Self:
        """Start the server and wait until it listens (at most ``timeout`` seconds); ``self``."""

    def stop(self) -> None:
        process, self.process = self.process, None
        stop_process(process, self.stop_signal, grace=self.stop_grace)

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


@dataclass(frozen=True)
class AccessRecord:
    """One line of the access log: what nginx answered and the body size the client declared."""

    status: int
    content_length: int | None
    request_length: int
    method: str
    uri: str


class NginxGateway(ServerProcess):
    """Debian's nginx as a foreground process, proxying 127.0.0.1:port -> 127.0.0.1:upstream_port."""

    stop_signal = signal.SIGQUIT  # graceful: the access log is flushed

    def __init__(self, upstream_port: int, *, variant: str = "413", max_body: str = "48k",
                 directory: str | Path | None = None) -> None:  # fmt: skip
        if variant not in VARIANTS:
            raise ConfigError(f"nginx variant {variant!r} is unknown; use one of {', '.join(VARIANTS)}")
        self.upstream_port = int(upstream_port)
        self.variant = variant
        self.max_body = max_body
        super().__init__(directory, prefix=f"ck-nginx-{variant}-")

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def config_path(self) -> Path:
        return self.dir / "nginx.conf"

    def config(self) -> str:
        variant = _VARIANT_CONF[self.variant].replace("{dir}", str(self.dir))
        return _CONF.format(dir=self.dir, cap=self.max_body, port=self.port, upstream=self.upstream_port,
                            variant=variant)  # fmt: skip

    def start(self, timeout: float = 20.0) -> Self:
        binary = nginx_binary()
        if binary is None:
            raise ConfigError(
                "nginx is not installed: `apt-get install nginx` (scripts/test.sh does it), or set CONTEXTKIT_NGINX"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.config_path.write_text(self.config(), encoding="utf-8")
        (self.dir / "blocked.html").write_text(BLOCKED_PAGE, encoding="utf-8")
        # nginx opens its default error log before reading -p; a writable prefix keeps it quiet
        (self.dir / "logs").mkdir(exist_ok=True)
        self.dir.chmod(0o755)  # the worker (user nobody when run as root) serves blocked.html from here
        self.process = subprocess.Popen(
            [binary, "-p", str(self.dir), "-c", str(self.config_path), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=(self.dir / "stderr.log").open("wb"),
            preexec_fn=die_with_parent,
        )
        try:
            wait_for_port(self.port, timeout=timeout, process=self.process)
        except (RuntimeError, TimeoutError, OSError):
            self.stop()
            raise RuntimeError(f"nginx did not start: {self.error_log()[-800:]}") from None
        return self

    def error_log(self) -> str:
        parts = []
        for name in ("stderr.log", "error.log"):
            path = self.dir / name
            if path.exists():
                parts.append(path.read_text(encoding="utf-8", errors="replace"))
        return "\n".join(parts)

    def access_log(self) -> list[AccessRecord]:
        """Every request nginx logged so far, in order (nginx writes each line when the request ends)."""
        path = self.dir / "access.log"
        if not path.exists():
            return []
        out = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            fields = line.split("\t")
            if len(fields) != 5:
                continue
            status, length, read, method, uri = fields
            out.append(AccessRecord(int(status), int(length) if length.isdigit() else None, int(read), method, uri))
        return out

    def clear_access_log(self) -> None:
        """Truncate the access log in place (nginx keeps writing to the same file)."""
        path = self.dir / "access.log"
        if path.exists():
            with path.open("r+b") as fh:
                fh.truncate(0)
