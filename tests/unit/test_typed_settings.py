"""The typed, frozen settings objects: built from what the validator returns, every default
in one place (the Setting declaration), and the validator's refusals unchanged."""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from adapters.http import HttpAdapter, HttpAdapterSettings
from adapters.settings import AdapterSettings
from adapters.soap import SoapAdapterSettings
from engine.config.production import PortalConfig, ProductionSettings, parse_production
from engine.delivery.guards import GuardSettings
from engine.errors import ConfigurationError
from engine.host import HOST_SETTINGS, OperationSettings
from engine.retry import RetryPolicy, RetrySettings
from engine.retry.backoff import ExponentialBackoff, FixedBackoff, RetryAfterBackoff
from engine.retry.settings import RETRY_DEFAULTS
from engine.router import RoutingSettings
from engine.service import ServiceSettings
from engine.settings import TypedSettings, validate_settings

TYPED = [
    RetrySettings,  # engine.retry.settings
    OperationSettings,  # engine.host: the rest of a business operation's settings
    GuardSettings,  # engine.delivery.guards: its window's, breaker's and rate limit's
    AdapterSettings,  # adapters.settings: every outbound adapter's
    HttpAdapterSettings,  # adapters.http: those and url, redirects
    SoapAdapterSettings,  # adapters.soap: those and wsdl, auth
    ServiceSettings,  # engine.service
    RoutingSettings,  # engine.router: a router's own, besides a process's
    ProductionSettings,  # engine.config.production: [production]
    PortalConfig,  # engine.config.production: [portal]
]

PRODUCTION = """
[production]
name = "Typed"

[[items]]
name = "Orders"
class = "operations.http:HttpOperation"
[items.settings]
url = "http://127.0.0.1:9/orders"
ResponseTimeout = 7
FailureTimeout = 30
retry_interval = 10
queue_count_alert = 5
idempotent = false

[[items]]
name = "Shop"
class = "tests.unit.sample_processes:QuoteAndTax"

[[items]]
name = "Poller"
class = "tests.unit.test_service:PingService"
[items.settings]
call_interval = 2
"""


def declared_default(cls: type[TypedSettings], name: str) -> Any:
    default = next(s.default for s in cls.DECLARED if s.name == name)
    return tuple(default) if isinstance(default, list) else default


@pytest.mark.parametrize("cls", TYPED, ids=lambda c: c.__name__)
def test_a_settings_object_is_frozen(cls: type[TypedSettings]) -> None:
    settings = cls.defaults()
    field = dataclasses.fields(settings)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(settings, field, None)


@pytest.mark.parametrize("cls", TYPED, ids=lambda c: c.__name__)
def test_every_field_is_a_declared_setting_without_a_default_of_its_own(
        cls: type[TypedSettings]) -> None:
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    assert {f.name for f in fields} == {s.name for s in cls.DECLARED}
    assert [f.name for f in fields if f.default is not dataclasses.MISSING
            or f.default_factory is not dataclasses.MISSING] == []
    with pytest.raises(TypeError, match="missing"):
        cls()  # nothing to fall back on: only from_validated fills in defaults


@pytest.mark.parametrize("cls", TYPED, ids=lambda c: c.__name__)
def test_an_empty_table_gives_the_declared_default_of_every_field(
        cls: type[TypedSettings]) -> None:
    settings = cls.defaults()
    for field in dataclasses.fields(settings):  # type: ignore[arg-type]
        assert getattr(settings, field.name) == declared_default(cls, field.name), field.name
    assert cls.from_validated(validate_settings("Item", {}, cls.DECLARED)) == settings


def test_whole_numbers_of_seconds_become_floats_and_lists_tuples() -> None:
    clean = validate_settings("Orders", {"RetryInterval": 10, "failure_timeout": -1,
                                         "retry_on_status": [503], "url": "http://a/"},
                              (*RetrySettings.DECLARED, *HttpAdapter.SETTINGS))
    retry, adapter = RetrySettings.from_validated(clean), HttpAdapterSettings.from_validated(clean)
    assert type(retry.retry_interval) is float and retry.retry_interval == 10.0
    assert retry.failure_timeout == -1.0  # forever
    assert adapter.retry_on_status == (503,) and adapter.url == "http://a/"


def test_a_loaded_item_holds_its_typed_settings_built_once() -> None:
    prod = parse_production(PRODUCTION, env={})
    orders = prod.item("Orders")
    assert orders.retry_settings == RetrySettings.from_validated(orders.settings)
    assert (orders.retry_settings.failure_timeout, orders.retry_settings.retry_interval,
            orders.retry_settings.idempotent) == (30.0, 10.0, False)
    assert orders.operation_settings is not None
    assert orders.operation_settings.queue_count_alert == 5
    assert isinstance(orders.adapter_settings, HttpAdapterSettings)
    assert orders.adapter_settings.response_timeout == 7.0
    assert orders.settings["response_timeout"] == 7  # the dict stays, for custom settings


def test_a_process_keeps_its_own_default_and_a_service_has_no_operation_settings() -> None:
    prod = parse_production(PRODUCTION, env={})
    shop, poller = prod.item("Shop"), prod.item("Poller")
    assert shop.retry_settings is not None and shop.retry_settings.failure_timeout == -1.0
    assert shop.adapter_settings is None  # no adapter: idempotent etc. as declared
    assert shop.retry_settings.idempotent is RetrySettings.defaults().idempotent
    assert (poller.retry_settings, poller.operation_settings, poller.adapter_settings) == (
        None, None, None)


def test_the_policy_and_strategies_default_to_the_declared_defaults() -> None:
    assert RetryPolicy() == RetryPolicy.from_settings(RetrySettings.defaults())
    assert FixedBackoff() == FixedBackoff(RETRY_DEFAULTS.retry_interval)
    assert ExponentialBackoff() == ExponentialBackoff(
        base=RETRY_DEFAULTS.backoff_base, multiplier=RETRY_DEFAULTS.backoff_multiplier,
        cap=RETRY_DEFAULTS.backoff_max, jitter=RETRY_DEFAULTS.jitter)
    assert RetryAfterBackoff().unit == RETRY_DEFAULTS.retry_after_unit


@pytest.mark.parametrize("raw, says", [
    # out of range: the same text as before the typed objects
    ({"retry_interval": -1},
     "item 'Payments', setting 'retry_interval': -1 is out of range; expected number ≥ 0"),
    # a wrong type, through a CamelCase alias: named as it was spelt
    ({"FailureTimeout": "x"},
     "item 'Payments', setting 'FailureTimeout': expected number ≥ 0 (or -1), got str 'x'"),
    # not one of the choices
    ({"retry_mode": "later"}, ("item 'Payments', setting 'retry_mode': 'later' is not "
                               "allowed; expected one of 'blocking', 'requeue'")),
])
def test_a_bad_value_is_still_refused_by_the_validator(raw: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        validate_settings("Payments", raw, HOST_SETTINGS)
    assert str(refused.value) == says


def test_an_unknown_key_is_still_refused_with_the_closest_one_suggested() -> None:
    with pytest.raises(ConfigurationError) as refused:
        validate_settings("Payments", {"retry_intervall": 3}, HOST_SETTINGS)
    assert str(refused.value).startswith(
        "item 'Payments', setting 'retry_intervall': unknown setting. Did you mean "
        "'retry_interval'? Allowed: alert_on_error, alert_retry_grace_period, backoff, ")
