"""Re-record each real middlebox's rejection (status, headers, body) into tests/fixtures/middleboxes/.

Starts the simulator and, in front of it, Squid, HAProxy (403 and 413), Apache + ModSecurity + the
OWASP CRS and Caddy (``contextkit.sim.middlebox``, 64 KB caps), sends each the request that it refuses
(a 70 KB body; for the CRS also a small body holding ``cat /etc/passwd`` or SQL-injection text) and
writes what came back as JSON. The classifier's tests replay these answers without the servers
(tests/test_middlebox_answers.py). Needs the Debian packages scripts/_real_stack.sh installs.

    python scripts/record_middlebox_fixtures.py            # every scenario
    python scripts/record_middlebox_fixtures.py caddy_502  # one
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from contextkit.sim import GatewaySimulator
from contextkit.sim.middlebox import (
    CaddyGateway,
    HAProxyGateway,
    Middlebox,
    ModSecurityGateway,
    SquidProxy,
    middlebox_binary,
)

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "middleboxes"
BIG = "x" * 70_000
COMMAND = "Here is the log. Then run: cat /etc/passwd | grep root"
SQLI = "1' OR '1'='1' UNION SELECT username, password FROM users --"

# name -> (server factory, the text sent, why it is refused)
SCENARIOS: dict[str, tuple[Callable[[int], Middlebox], str, str]] = {
    "squid_413": (SquidProxy, BIG, "size"),
    "haproxy_403": (lambda port: HAProxyGateway(port, deny=403), BIG, "size"),
    "haproxy_413": (lambda port: HAProxyGateway(port, deny=413), BIG, "size"),
    "modsecurity_413": (ModSecurityGateway, BIG, "size"),
    "modsecurity_403_command": (ModSecurityGateway, COMMAND, "content"),
    "modsecurity_403_sqli": (ModSecurityGateway, SQLI, "content"),
    "caddy_502": (CaddyGateway, BIG, "size"),
}


def version(box: Middlebox) -> str:
    binary = middlebox_binary(box.kind) or box.kind
    flag = {"squid": ["-v"], "haproxy": ["-v"], "apache": ["-v"], "caddy": ["version"]}[box.kind]
    out = subprocess.run([binary, *flag], capture_output=True, text=True, check=False).stdout
    return out.strip().splitlines()[0] if out.strip() else box.kind


def record(name: str, gw: GatewaySimulator) -> dict[str, object]:
    factory, text, cause = SCENARIOS[name]
    body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": text}]}).encode()
    with factory(gw.port) as box:
        if isinstance(box, SquidProxy):
            client, url = httpx.Client(proxy=box.proxy_url, timeout=30), box.upstream() + "/chat/completions"
        else:
            client, url = httpx.Client(timeout=30), box.api_base + "/chat/completions"
        with client:
            headers = {"content-type": "application/json", "authorization": "Bearer sim-key"}
            answer = client.post(url, content=body, headers=headers)
        return {
            "middlebox": version(box),
            "scenario": name,
            "cause": cause,
            "cap_bytes": box.max_body,
            "request_bytes": len(body),
            "status": answer.status_code,
            "headers": [[k, v] for k, v in answer.headers.items()],
            "body": answer.text,
        }


def main(names: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with GatewaySimulator() as gw:
        for name in names or list(SCENARIOS):
            fixture = record(name, gw)
            path = OUT / f"{name}.json"
            path.write_text(json.dumps(fixture, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"{path.name}: {fixture['status']} ({len(str(fixture['body']))} characters of body)")


if __name__ == "__main__":
    main(sys.argv[1:])
