"""The middleboxes of the real lane refuse bad settings and a missing package in words (no server started)."""

from __future__ import annotations

import pytest

from contextkit.errors import ConfigError
from contextkit.sim import middlebox
from contextkit.sim.middlebox import CAP, HAProxyGateway, ModSecurityGateway, SquidProxy, install_hint, middlebox_binary


def test_an_unknown_middlebox_names_the_known_ones():
    with pytest.raises(ConfigError, match="squid, haproxy, apache, caddy"):
        middlebox_binary("traefik")


def test_haproxy_denies_only_with_403_or_413():
    with pytest.raises(ConfigError, match="use 403 or 413"):
        HAProxyGateway(1, deny=500)


def test_a_missing_package_is_named_with_its_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(middlebox, "middlebox_binary", lambda kind: None)
    with pytest.raises(ConfigError, match=r"apt-get install apache2 libapache2-mod-security2 modsecurity-crs"):
        ModSecurityGateway(1, directory=tmp_path).start()
    assert "apt-get install squid" in install_hint("squid")


def test_configs_carry_the_cap_the_upstream_and_the_crs_threshold(tmp_path):
    squid = SquidProxy(4242, directory=tmp_path / "s").config()
    assert f"request_body_max_size {CAP} bytes" in squid
    haproxy = HAProxyGateway(4242, deny=403, directory=tmp_path / "h").config()
    assert f"deny_status 403 if {{ req.body_size gt {CAP} }}" in haproxy and "127.0.0.1:4242" in haproxy
    apache = ModSecurityGateway(4242, anomaly_threshold=10, directory=tmp_path / "a").config()
    assert f"SecRequestBodyLimit {CAP}" in apache and "inbound_anomaly_score_threshold=10" in apache


def test_a_middlebox_without_its_config_and_command_cannot_be_built(tmp_path):
    class Half(middlebox.Middlebox):
        kind = "squid"

        def config(self) -> str:
            return ""

    with pytest.raises(TypeError, match=r"abstract method.*command"):
        Half(1, directory=tmp_path)
    with pytest.raises(TypeError, match="abstract method"):
        middlebox.Middlebox(1, directory=tmp_path)


def test_a_server_process_removes_only_the_temp_dir_it_made(tmp_path):
    from contextkit.sim.nginx import NginxGateway, ServerProcess
    from contextkit.sim.postgres import PostgresServer

    own = PostgresServer()
    assert own.dir.is_dir() and own.process is None and own.port == 0
    own.cleanup()  # never started: nothing to stop, the temp dir goes
    assert not own.dir.exists()
    given = NginxGateway(1, directory=tmp_path / "given")
    given.dir.mkdir()
    given.cleanup()
    assert given.dir.is_dir()  # a directory the caller named stays
    with pytest.raises(TypeError, match="abstract method"):
        ServerProcess(tmp_path, prefix="x")
