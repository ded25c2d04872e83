"""Paths in a production file are read from its directory; ``response_timeout`` takes -1 (no
limit) and refuses 0; every refusal names a setting as the file spells it."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from adapters.deadline import MAX_SOCKET_WAIT, TryScope, attempt_deadline
from engine.clock import VirtualClock
from engine.config.production import load_production, parse_production
from engine.errors import ConfigurationError
from engine.retry.policy import RetryPolicy

FILE = """
[production]
name = "Paths"

[portal]
tls_cert = "tls/cert.pem"
tls_key = "/etc/encore/key.pem"

[inbound]
port = 8081

[[items]]
name = "Backend"
class = "operations.soap:SoapOperation"
[items.settings]
wsdl = "contracts/echo.wsdl"
ca_bundle = "tls/ca.pem"
client_cert = "/etc/encore/client.pem"

[[items]]
name = "Remote"
class = "operations.soap:SoapOperation"
[items.settings]
wsdl = "http://127.0.0.1:9/?wsdl"
ResponseTimeout = -1

[[items]]
name = "Front"
class = "engine.inbound:SoapService"
[items.settings]
wsdl = "contracts/echo.wsdl"
path = "/soap/echo"
target = "Backend"
"""


def _load(directory: Path, text: str = FILE):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "production.toml").write_text(text)
    return load_production(directory / "production.toml", {})


def test_relative_paths_are_read_from_the_production_files_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # elsewhere than the file, which is in prod/
    home = tmp_path / "prod"
    production = _load(home)
    backend = production.item("Backend").settings
    assert backend["wsdl"] == str(home / "contracts" / "echo.wsdl")
    assert backend["ca_bundle"] == str(home / "tls" / "ca.pem")
    assert backend["client_cert"] == "/etc/encore/client.pem"  # absolute: as it is
    assert production.item("Front").settings["wsdl"] == str(home / "contracts" / "echo.wsdl")
    assert production.item("Remote").settings["wsdl"] == "http://127.0.0.1:9/?wsdl"  # a URL
    assert production.portal is not None
    assert production.portal.tls_cert == str(home / "tls" / "cert.pem")
    assert production.portal.tls_key == "/etc/encore/key.pem"


def test_a_production_given_as_a_relative_path_reads_its_paths_from_its_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _load(tmp_path / "prod")
    monkeypatch.chdir(tmp_path)
    production = load_production(Path("prod/production.toml"), {})
    assert production.item("Backend").settings["wsdl"] == str(
        tmp_path / "prod" / "contracts" / "echo.wsdl")


def test_text_without_a_file_keeps_its_paths_as_they_are() -> None:
    production = parse_production(FILE, env={})
    assert production.item("Backend").settings["wsdl"] == "contracts/echo.wsdl"


def test_a_response_timeout_of_minus_one_is_accepted_as_no_limit(tmp_path: Path) -> None:
    item = _load(tmp_path).item("Remote")
    assert item.adapter_settings is not None
    assert item.adapter_settings.response_timeout == -1
    assert attempt_deadline(5.0, item.adapter_settings.response_timeout) == math.inf


@pytest.mark.parametrize("spelling", [
    "response_timeout",  # Encore's name
    "ResponseTimeout",  # Ensemble's, an accepted alias
])
def test_a_response_timeout_of_zero_is_refused_naming_the_setting_as_spelt(
        tmp_path: Path, spelling: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        _load(tmp_path, FILE.replace("ResponseTimeout = -1", f"{spelling} = 0"))
    text = str(refused.value)
    assert text.startswith(f"item 'Remote', setting {spelling!r}: 0 leaves an attempt no time")
    assert "-1 for no limit" in text
    assert refused.value.key == spelling


def test_a_refused_value_names_the_setting_as_the_file_spells_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as refused:
        _load(tmp_path, FILE.replace("ResponseTimeout = -1", 'ResponseTimeout = "soon"'))
    assert str(refused.value).startswith("item 'Remote', setting 'ResponseTimeout': expected")


def test_an_attempt_without_a_deadline_is_never_cut_short_by_the_policy() -> None:
    policy = RetryPolicy(failure_timeout=30)
    assert policy.deadline(first_started=0, started=12, response_timeout=-1) == math.inf
    assert policy.deadline(first_started=0, started=12, response_timeout=7) == 19
    strict = RetryPolicy(failure_timeout=30, strict=True)  # a hard budget still ends it
    assert strict.deadline(first_started=0, started=12, response_timeout=-1) == 30


def test_a_scope_without_a_deadline_waits_as_long_as_a_socket_can() -> None:
    clock = VirtualClock()
    scope = TryScope(deadline=attempt_deadline(clock.monotonic(), -1), monotonic=clock.monotonic)
    clock.advance(86400 * 365)
    assert not scope.expired()
    assert scope.time_left() == MAX_SOCKET_WAIT
