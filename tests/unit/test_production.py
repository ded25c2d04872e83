"""Loading and validating production files."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.config.production import (
    MAX_ITEM_NAME,
    MAX_PRODUCTION_NAME,
    find_production_file,
    load_production,
    parse_production,
)
from engine.errors import ConfigurationError
from engine.runtime.cluster import item_lease_name
from engine.store.models import metadata

GOOD = """
[production]
name = "Demo"

[[items]]
name = "Payments"
class = "tests.unit.sample_ops:StubOperation"
pool_size = 2
[items.settings]
ResponseTimeout = 7
retry_interval = 10
FailureTimeout = 30
"""


def parse(text: str, env: dict[str, str] | None = None):
    return parse_production(text, env=env or {})


def test_a_good_file_loads_with_aliases_and_defaults() -> None:
    prod = parse(GOOD)
    item = prod.item("Payments")
    assert prod.name == "Demo"
    assert prod.database == "sqlite:///encore.db"
    assert item.pool_size == 2
    assert item.settings["response_timeout"] == 7
    assert item.settings["failure_timeout"] == 30
    assert item.settings["max_attempts"] == 0  # a default filled in
    assert item.settings["retry_mode"] == "blocking"


def test_the_environment_overrides_the_database_url() -> None:
    prod = parse(GOOD, {"ENCORE_DATABASE_URL": "postgresql+psycopg://x/y"})
    assert prod.database == "postgresql+psycopg://x/y"


@pytest.mark.parametrize(("edit", "expected"), [
    # a misspelt setting names the item and suggests the right key
    (("ResponseTimeout = 7", "respons_timeout = 7"),
     ["'Payments'", "'respons_timeout'", "Did you mean 'response_timeout'?"]),
    # a wrong type says what is expected
    (("retry_interval = 10", 'retry_interval = "ten"'), ["'retry_interval'", "expected number"]),
    # a value out of range says the range, naming the setting as the file spells it
    (("FailureTimeout = 30", "FailureTimeout = -5"), ["'FailureTimeout'", "-5", "(or -1)"]),
    # a class that does not import names the key
    (("tests.unit.sample_ops:StubOperation", "nowhere:Thing"), ["setting 'class'", "'nowhere'"]),
    # a class that is not a host is refused
    (("tests.unit.sample_ops:StubOperation", "pathlib:Path"), ["not a BusinessOperation"]),
    # a pool of zero workers is refused
    (("pool_size = 2", "pool_size = 0"), ["'pool_size'", "out of range"]),
    # an unknown item key suggests the right one
    (("pool_size = 2", "poolsize = 2"), ["Did you mean 'pool_size'?"]),
    # the same setting under two spellings
    (("retry_interval = 10", "retry_interval = 10\nRetryInterval = 3"), ["given twice"]),
    # a malformed reply_code_actions gives the position
    (("retry_interval = 10", 'reply_code_actions = "E=Q"'), ["'reply_code_actions'", "3"]),
])
def test_bad_files_are_refused_with_a_message_that_names_the_problem(
        edit: tuple[str, str], expected: list[str]) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse(GOOD.replace(*edit))
    for fragment in expected:
        assert fragment in str(info.value)


def test_duplicate_item_names_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="duplicate item name"):
        parse(GOOD + GOOD.split("\n", 4)[4])


def test_invalid_toml_is_refused_with_the_parser_message() -> None:
    with pytest.raises(ConfigurationError, match="not valid TOML"):
        parse("[production\n")


def test_the_production_file_is_found_by_option_then_environment_then_default(
        tmp_path: Path) -> None:
    assert find_production_file("x.toml", {"ENCORE_PRODUCTION": "y.toml"}) == Path("x.toml")
    assert find_production_file(None, {"ENCORE_PRODUCTION": "y.toml"}) == Path("y.toml")
    assert find_production_file(None, {}) == Path("production.toml")
    with pytest.raises(ConfigurationError, match="cannot read production file"):
        load_production(tmp_path / "missing.toml", {})


@pytest.mark.parametrize(("edit", "item", "key", "value"), [
    # TOML's nan passes every range check unless refused
    (("retry_interval = 10", "retry_interval = nan"), "Payments", "retry_interval", "nan"),
    # an infinite response timeout under its CamelCase alias, named so
    (("ResponseTimeout = 7", "ResponseTimeout = inf"), "Payments", "ResponseTimeout", "inf"),
    # -inf is refused as not finite, not merely as out of range
    (("FailureTimeout = 30", "FailureTimeout = -inf"), "Payments", "FailureTimeout", "-inf"),
    # +inf in a setting whose minimum it would satisfy
    (("retry_interval = 10", "backoff_max = +inf"), "Payments", "backoff_max", "inf"),
    # inside a list
    (("retry_interval = 10", "retry_on_status = [503, nan]"), "Payments", "retry_on_status",
     "nan"),
    # a production setting
    (('name = "Demo"', 'name = "Demo"\nlease_seconds = inf'), "[production]", "lease_seconds",
     "inf"),
    # jitter takes a number or "full": the number must still be finite
    (("retry_interval = 10", "jitter = nan"), "Payments", "jitter", "nan"),
])
def test_nan_and_infinity_are_refused_naming_the_item_and_the_key(
        edit: tuple[str, str], item: str, key: str, value: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse(GOOD.replace(*edit))
    text = str(info.value)
    assert f"item {item!r}, setting {key!r}: {value} is not a finite number" in text
    assert (info.value.item, info.value.key) == (item, key)


def test_finite_floats_and_integers_are_accepted() -> None:
    prod = parse(GOOD.replace("retry_interval = 10", "retry_interval = 1e3\nbackoff_max = 0.5"))
    assert prod.item("Payments").settings["retry_interval"] == 1000.0


@pytest.mark.parametrize(("edit", "item", "key", "allowed"), [
    # a port past 65535 would crash the metrics endpoint at start
    (('name = "Demo"', 'name = "Demo"\nmetrics_port = 99999'), "[production]", "metrics_port",
     "from 0 to 65535"),
    # a negative port
    (('name = "Demo"', 'name = "Demo"\nmetrics_port = -1'), "[production]", "metrics_port",
     "from 0 to 65535"),
    # the portal's port (0 is no port there: the portal is served when the table is there)
    (('name = "Demo"', 'name = "Demo"\n[portal]\nport = 99999'), "[portal]", "port",
     "from 1 to 65535"),
    (('name = "Demo"', 'name = "Demo"\n[portal]\nport = 0'), "[portal]", "port",
     "from 1 to 65535"),
    # a lease of 31 years: a dead daemon's messages would never be taken over
    (('name = "Demo"', 'name = "Demo"\nlease_seconds = 1e9'), "[production]", "lease_seconds",
     "from 1 to 86400"),
    # an idle worker that would look at its queue once a month
    (('name = "Demo"', 'name = "Demo"\npoll_interval = 3e6'), "[production]", "poll_interval",
     "from 0.01 to 300"),
    # a thread wait past what the platform's timeout can hold
    (('name = "Demo"', 'name = "Demo"\nshutdown_timeout = 1e12'), "[production]",
     "shutdown_timeout", "from 0 to 86400"),
    # a cut-off date before year 1
    (('name = "Demo"', 'name = "Demo"\nretention_days = 1e9'), "[production]", "retention_days",
     "from 0 to 36500"),
    # 10**12 worker threads
    (("pool_size = 2", "pool_size = 1000000000000"), "Payments", "pool_size", "from 1 to 1000"),
])
def test_numbers_past_their_range_are_refused_naming_the_key_and_the_range(
        edit: tuple[str, str], item: str, key: str, allowed: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse(GOOD.replace(*edit))
    assert (info.value.item, info.value.key) == (item, key)
    assert "is out of range" in str(info.value) and allowed in str(info.value)


def test_the_largest_values_in_range_are_accepted() -> None:
    prod = parse(GOOD.replace('name = "Demo"', 'name = "Demo"\nmetrics_port = 65535\n'
                              'lease_seconds = 86400\nretention_days = 36500\n[portal]\n'
                              'port = 65535').replace("pool_size = 2", "pool_size = 1000"))
    assert (prod.metrics_port, prod.portal.port, prod.item("Payments").pool_size) == (
        65535, 65535, 1000)


def test_an_item_name_longer_than_the_database_stores_is_refused_naming_the_item() -> None:
    longest = "P" * MAX_ITEM_NAME
    assert parse(GOOD.replace('"Payments"', f'"{longest}"')).item(longest).name == longest
    with pytest.raises(ConfigurationError) as info:
        parse(GOOD.replace('"Payments"', f'"{longest}Q"'))
    assert (info.value.item, info.value.key) == (longest + "Q", "name")
    assert f"{MAX_ITEM_NAME + 1} characters is too long; a name has at most {MAX_ITEM_NAME}" \
        in str(info.value)


def test_a_production_name_longer_than_the_database_stores_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="at most 200") as info:
        parse(GOOD.replace('name = "Demo"', f'name = "{"D" * 201}"'))
    assert (info.value.item, info.value.key) == ("[production]", "name")


def test_the_name_limits_fit_every_column_that_stores_a_name() -> None:
    columns = [t.c[name] for t in metadata.tables.values() for name in ("config_name", "target",
                                                                        "source")
               if name in t.c]
    assert columns and all(c.type.length >= MAX_ITEM_NAME for c in columns)
    assert metadata.tables["lease"].c.name.type.length >= len(item_lease_name("x" * MAX_ITEM_NAME))
    assert metadata.tables["daemon"].c.production.type.length >= MAX_PRODUCTION_NAME
