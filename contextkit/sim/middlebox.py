"""Real middleboxes (Debian's packages) in front of any upstream, as foreground processes in temp dirs.

Nobody here wrote these servers: what they answer is what a session meets in production. Each one
writes its own config, pid and logs into a directory, listens on a free loopback port and proxies to
``127.0.0.1:upstream_port`` with a request-body cap (64 KB unless told):

* ``SquidProxy`` - Squid as a *forward* proxy (the client names it in ``HTTP_PROXY``), with
  ``request_body_max_size``: Squid's own "413 Request Entity Too Large" page (``ERR_TOO_BIG``);
* ``HAProxyGateway(deny=403 | 413)`` - HAProxy denying ``req.body_size`` above the cap with its
  built-in 403 or 413 page;
* ``ModSecurityGateway`` - Apache 2.4 + ModSecurity 2 + the OWASP Core Rule Set: the body limit
  (``SecRequestBodyLimit``, answered 413) and the CRS content rules (command injection such as
  ``cat /etc/passwd``, SQL injection), answered 403 with Apache's "Forbidden" page;
* ``CaddyGateway`` - Caddy's ``request_body max_size``: the body is cut while it is proxied, and
  Caddy answers 502 with an empty body.

``Middlebox.start()`` raises ``ConfigError`` naming the package when a binary is missing;
``middlebox_binary(kind)`` tells whether it is installed (the real lane skips when it is not).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from abc import abstractmethod
from pathlib import Path
from typing import ClassVar, Self

from contextkit.errors import ConfigError
from contextkit.sim.nginx import ServerProcess, die_with_parent, free_port, wait_for_port

CAP = 64 * 1024

# binary candidates and the Debian package that installs them, per kind
_BINARIES = {
    "squid": (("squid", "/usr/sbin/squid"), "squid"),
    "haproxy": (("haproxy", "/usr/sbin/haproxy"), "haproxy"),
    "apache": (("apache2", "/usr/sbin/apache2"), "apache2 libapache2-mod-security2 modsecurity-crs"),
    "caddy": (("caddy", "/usr/bin/caddy"), "caddy"),
}
APACHE_MODULES = Path("/usr/lib/apache2/modules")
CRS_RULES = Path("/usr/share/modsecurity-crs/rules")
CRS_SETUP = Path("/etc/modsecurity/crs/crs-setup.conf")


def middlebox_binary(kind: str) -> str | None:
    """The installed binary for ``kind`` (squid, haproxy, apache, caddy), or None. For apache, the
    ModSecurity module and the Core Rule Set must be installed too."""
    if kind not in _BINARIES:
        raise ConfigError(f"middlebox {kind!r} is unknown; use one of {', '.join(_BINARIES)}")
    names, _ = _BINARIES[kind]
    if kind == "apache" and not ((APACHE_MODULES / "mod_security2.so").is_file() and CRS_RULES.is_dir()):
        return None
    for candidate in (shutil.which(names[0]), names[1]):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def install_hint(kind: str) -> str:
    return f"`apt-get install {_BINARIES[kind][1]}` (scripts/test.sh does it)"


class Middlebox(ServerProcess):
    """A server started as a foreground process in a temp dir; subclasses write its config and command."""

    kind: ClassVar[str] = ""

    def __init__(self, upstream_port: int, *, max_body: int = CAP, directory: str | Path | None = None) -> None:
        self.upstream_port = int(upstream_port)
        self.max_body = int(max_body)
        super().__init__(directory, prefix=f"ck-{self.kind}-")

    # what a client points at -------------------------------------------------------------------
    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``: the Anthropic route's ``api_base``; add ``/v1`` for the OpenAI one."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.origin}/v1"

    # lifecycle ---------------------------------------------------------------------------------
    @abstractmethod
    def config(self) -> str:
        """The server's config file (written to ``server.conf`` in its directory)."""

    @abstractmethod
    def command(self, binary: str) -> list[str]:
        """The command line that runs ``binary`` in the foreground on that config."""

    def prepare(self) -> None:
        """Files the server needs besides its config (folders, pages)."""

    def start(self, timeout: float = 30.0) -> Self:
        binary = middlebox_binary(self.kind)
        if binary is None:
            raise ConfigError(f"{self.kind} is not installed: {install_hint(self.kind)}")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o777)  # servers that drop root (squid, apache) write their logs and temp files here
        self.port = free_port()
        self.prepare()
        (self.dir / "server.conf").write_text(self.config(), encoding="utf-8")
        self.process = subprocess.Popen(
            self.command(binary),
            stdout=(self.dir / "stdout.log").open("wb"),
            stderr=(self.dir / "stderr.log").open("wb"),
            cwd=self.dir,
            # Caddy autosaves its config under the user's config folder: keep that in the temp dir too
            env={**os.environ, "HOME": str(self.dir), "XDG_CONFIG_HOME": str(self.dir), "XDG_DATA_HOME": str(self.dir)},
            preexec_fn=die_with_parent,
        )
        try:
            wait_for_port(self.port, timeout=timeout, process=self.process)
        except (RuntimeError, TimeoutError, OSError):
            self.stop()
            raise RuntimeError(f"{self.kind} did not start: {self.logs()[-1200:]}") from None
        return self

    def logs(self) -> str:
        parts = []
        for path in sorted(self.dir.glob("*.log")):
            parts.append(f"--- {path.name}\n" + path.read_text(encoding="utf-8", errors="replace"))
        return "\n".join(parts)


class SquidProxy(Middlebox):
    """Squid 5 as a forward proxy: clients send ``HTTP_PROXY=proxy_url``, bodies above the cap get 413."""

    kind = "squid"
    stop_signal = signal.SIGINT

    @property
    def proxy_url(self) -> str:
        return self.origin

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def upstream(self, route: str = "openai") -> str:
        """The ``api_base`` a client uses through this proxy: the upstream itself (a forward proxy)."""
        base = f"http://127.0.0.1:{self.upstream_port}"
        return f"{base}/v1" if route == "openai" else base

    def config(self) -> str:
        d = self.dir
        return f"""http_port 127.0.0.1:{self.port}
pid_filename {d}/squid.pid
access_log stdio:{d}/access.log
cache_log {d}/cache.log
cache_store_log none
cache deny all
cache_mem 8 MB
coredump_dir {d}
acl localhost_src src 127.0.0.1/32
acl to_loopback dst 127.0.0.1/32
http_access allow localhost_src to_loopback
http_access deny all
request_body_max_size {self.max_body} bytes
shutdown_lifetime 0 seconds
forwarded_for delete
via off
"""

    def command(self, binary: str) -> list[str]:
        return [binary, "-N", "-f", str(self.dir / "server.conf")]


class HAProxyGateway(Middlebox):
    """HAProxy 2.6 in reverse-proxy mode, denying bodies above the cap with ``deny_status`` (403 or 413)."""

    kind = "haproxy"
    stop_signal = signal.SIGUSR1  # soft stop

    def __init__(self, upstream_port: int, *, deny: int = 413, max_body: int = CAP,
                 directory: str | Path | None = None) -> None:  # fmt: skip
        if deny not in (403, 413):
            raise ConfigError(f"HAProxy deny status {deny!r}: use 403 or 413")
        super().__init__(upstream_port, max_body=max_body, directory=directory)
        self.deny = deny

    def config(self) -> str:
        return f"""global
    log stderr format raw local0 info
    pidfile {self.dir}/haproxy.pid
    tune.bufsize {max(2 * self.max_body, 131072)}
defaults
    mode http
    log global
    option httplog
    timeout connect 5s
    timeout client 900s
    timeout server 900s
    timeout http-request 60s
frontend front
    bind 127.0.0.1:{self.port}
    option http-buffer-request
    http-request deny deny_status {self.deny} if {{ req.body_size gt {self.max_body} }}
    http-request deny deny_status {self.deny} if {{ req.hdr_val(content-length) gt {self.max_body} }}
    default_backend upstream
backend upstream
    server sim 127.0.0.1:{self.upstream_port}
"""

    def command(self, binary: str) -> list[str]:
        return [binary, "-db", "-f", str(self.dir / "server.conf")]


class ModSecurityGateway(Middlebox):
    """Apache 2.4 + ModSecurity 2 + OWASP CRS as a reverse proxy (engine on, blocking, JSON bodies parsed)."""

    kind = "apache"
    stop_signal = signal.SIGWINCH  # graceful-stop

    def __init__(self, upstream_port: int, *, max_body: int = CAP, anomaly_threshold: int = 10,
                 directory: str | Path | None = None) -> None:  # fmt: skip
        super().__init__(upstream_port, max_body=max_body, directory=directory)
        # CRS blocks at an inbound anomaly score of 5 unless told: one critical match (5 points) on
        # ordinary technical prose - "lock" before a line with "http/", "()" before a line break -
        # plus the 3 points every request to a numeric Host gets would block most pasted reports.
        # 10 lets one such match through and still blocks real attack text (two or more rules).
        self.anomaly_threshold = int(anomaly_threshold)

    def config(self) -> str:
        d, m = self.dir, APACHE_MODULES
        modules = ["mpm_event", "authz_core", "proxy", "proxy_http", "unique_id", "security2", "headers"]
        loads = "\n".join(f"LoadModule {name}_module {m}/mod_{name}.so" for name in modules)
        user = "User www-data\nGroup www-data\n" if os.geteuid() == 0 else ""
        return f"""ServerRoot {d}
ServerName 127.0.0.1
PidFile {d}/apache.pid
Listen 127.0.0.1:{self.port}
{loads}
{user}ErrorLog {d}/error.log
LogLevel warn security2:error
LogFormat "%>s\\t%{{Content-Length}}i\\t%r" contextkit
CustomLog {d}/access.log contextkit
Mutex file:{d}
DefaultRuntimeDir {d}
ServerTokens Prod
ServerSignature Off
Timeout 900
SecRuleEngine On
SecRequestBodyAccess On
SecRule REQUEST_HEADERS:Content-Type "^application/json" \\
    "id:200001,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=JSON"
SecRequestBodyLimit {self.max_body}
SecRequestBodyNoFilesLimit {self.max_body}
SecRequestBodyInMemoryLimit {self.max_body}
SecRequestBodyLimitAction Reject
SecResponseBodyAccess Off
SecTmpDir {d}/tmp
SecDataDir {d}/data
SecAuditEngine Off
SecArgumentSeparator &
SecCookieFormat 0
SecStatusEngine Off
Include {CRS_SETUP}
SecAction "id:900110,phase:1,nolog,pass,t:none,setvar:tx.inbound_anomaly_score_threshold={self.anomaly_threshold},\
    setvar:tx.outbound_anomaly_score_threshold=4"
Include {CRS_RULES}/*.conf
ProxyPass / http://127.0.0.1:{self.upstream_port}/
ProxyPassReverse / http://127.0.0.1:{self.upstream_port}/
ProxyTimeout 900
"""

    def prepare(self) -> None:
        for sub in ("tmp", "data"):
            (self.dir / sub).mkdir(exist_ok=True)
            (self.dir / sub).chmod(0o777)

    def command(self, binary: str) -> list[str]:
        return [binary, "-DFOREGROUND", "-f", str(self.dir / "server.conf")]


class CaddyGateway(Middlebox):
    """Caddy 2 as a reverse proxy with ``request_body max_size``: an oversized body is cut while proxied
    and the client gets a 502 with no body."""

    kind = "caddy"

    def config(self) -> str:
        return f"""{{
    admin off
    auto_https off
    storage file_system {self.dir}/data
}}
http://127.0.0.1:{self.port} {{
    request_body {{
        max_size {self.max_body}B
    }}
    reverse_proxy 127.0.0.1:{self.upstream_port}
    log {{
        output file {self.dir}/access.log
        format json
    }}
}}
"""

    def command(self, binary: str) -> list[str]:
        return [binary, "run", "--config", str(self.dir / "server.conf"), "--adapter", "caddyfile"]


MIDDLEBOXES: dict[str, type[Middlebox]] = {
    "squid": SquidProxy,
    "haproxy": HAProxyGateway,
    "apache": ModSecurityGateway,
    "caddy": CaddyGateway,
}
