"""System default settings (docs/settings.md#system-default-settings): a value in the
production file, else the most specific row of the defaults file, else the class default;
every refusal names the defaults file and its row."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.config.production import load_production, read_outline
from engine.errors import ConfigurationError

HTTP = "operations.http:HttpOperation"
PRODUCTION = f"""
[production]
name = "Shop"
defaults = "env/defaults.toml"

[[items]]
name = "Orders"
class = "{HTTP}"
[items.settings]
retry_interval = 7

[[items]]
name = "Stock"
class = "{HTTP}"
[items.settings]
ResponseTimeout = 9
"""


def _row(production: str, item: str, klass: str, setting: str, value: str) -> str:
    return (f'[[defaults]]\nproduction = "{production}"\nitem = "{item}"\nclass = "{klass}"\n'
            f'setting = "{setting}"\nvalue = {value}\n')


ROWS = "".join([
    _row("*", "*", "*", "url", '"http://any.invalid/"'),  # row 1: everything
    _row("*", "*", HTTP, "url", '"http://class.invalid/"'),  # row 2: the class
    _row("*", "Orders", "*", "url", '"http://item.invalid/"'),  # row 3: the item
    _row("Shop", "*", "*", "response_timeout", "11"),  # row 4: the production
    _row("*", "Orders", HTTP, "response_timeout", "12"),  # row 5: item and class
    _row("Other", "Orders", HTTP, "url", '"http://other.invalid/"'),  # row 6: not ours
    _row("*", "*", "*", "RetryInterval", "3"),  # row 7: CamelCase; the file's 7 wins
    _row("*", "*", "*", "xml_max_depth", "5"),  # row 8: a SOAP setting, no HTTP item has it
])


def _write(directory: Path, rows: str = ROWS, production: str = PRODUCTION) -> Path:
    (directory / "env").mkdir(parents=True, exist_ok=True)
    (directory / "env" / "defaults.toml").write_text(rows)
    path = directory / "production.toml"
    path.write_text(production)
    return path


def test_the_file_wins_then_the_most_specific_row_then_the_class(tmp_path: Path) -> None:
    production = load_production(_write(tmp_path, ROWS.replace(  # row 8: for a SOAP class
        'class = "*"\nsetting = "xml_max_depth"',
        'class = "operations.soap:SoapOperation"\nsetting = "xml_max_depth"')), env={})
    orders, stock = production.item("Orders"), production.item("Stock")
    assert orders.settings["url"] == "http://item.invalid/"
    assert orders.sources["url"] == "system default (defaults.toml, row 3)"
    assert stock.settings["url"] == "http://class.invalid/"
    assert stock.sources["url"] == "system default (defaults.toml, row 2)"
    # a named production outranks a named item and class (Ensemble's order)
    assert orders.settings["response_timeout"] == 11.0
    assert orders.sources["response_timeout"] == "system default (defaults.toml, row 4)"
    assert (stock.settings["response_timeout"], stock.sources["response_timeout"]) == (9.0,
                                                                                       "alias")
    assert (orders.settings["retry_interval"], orders.sources["retry_interval"]) == (7.0, "file")
    assert stock.settings["retry_interval"] == 3.0
    assert stock.sources["retry_interval"] == "system default (defaults.toml, row 7)"
    assert (orders.settings["backoff"], orders.sources["backoff"]) == ("fixed", "class default")
    assert orders.adapter_settings is not None
    assert orders.adapter_settings.response_timeout == 11.0  # the typed settings too
    assert production.files == (tmp_path / "production.toml", tmp_path / "env/defaults.toml")


def test_encore_defaults_names_another_file_read_from_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "prod")
    (tmp_path / "live.toml").write_text(_row("*", "*", "*", "url", '"http://live.invalid/"'))
    monkeypatch.chdir(tmp_path)
    production = load_production(path, env={"ENCORE_DEFAULTS": "live.toml"})
    assert production.item("Orders").settings["url"] == "http://live.invalid/"
    assert production.item("Orders").sources["url"] == "system default (live.toml, row 1)"
    assert production.system_defaults is not None
    assert production.system_defaults.path == tmp_path / "live.toml"


def test_without_a_defaults_file_every_source_is_the_file_or_the_class(tmp_path: Path) -> None:
    text = PRODUCTION.replace('defaults = "env/defaults.toml"\n', "").replace(
        "retry_interval = 7", 'retry_interval = 7\nurl = "http://x.invalid/"')
    production = load_production(_write(tmp_path, production=text), env={})
    assert production.system_defaults is None and production.files == (
        tmp_path / "production.toml",)
    assert set(production.item("Orders").sources.values()) == {"file", "class default"}


REFUSED = [
    # a misspelt setting for a named item: refused naming the row, with a suggestion
    (_row("*", "Orders", "*", "urll", '"http://x.invalid/"'), "row 1: setting 'urll'",
     "Did you mean 'url'?"),
    # a misspelt setting for every item: none of them has it
    ("\n" + _row("*", "*", "*", "respons_timeout", "3"), "row 1: setting 'respons_timeout'",
     "Did you mean 'response_timeout'?"),
    # a value of the wrong type, refused as the production file's would be
    (_row("*", "*", "*", "url", "5"), "row 1: item 'Orders', setting 'url'",
     "expected string"),
    # the same production, item, class and setting twice
    (_row("*", "*", "*", "url", '"http://a.invalid/"') * 2, "row 2", "as row 1"),
    # a key a row does not have
    ('[[defaults]]\nsetting = "url"\nvalue = "http://a.invalid/"\nitme = "Orders"\n',
     "row 1: unknown key 'itme'", "Did you mean 'item'?"),
    # a row without its value
    ('[[defaults]]\nsetting = "url"\n', "row 1: missing 'value'", "a setting and its value"),
    # one value for every setting
    ('[[defaults]]\nsetting = "*"\nvalue = 1\n', "row 1: setting '*'", "name it"),
    # a snake_case and a CamelCase row for the same setting, of the same rank
    (_row("*", "*", "*", "url", '"http://a.invalid/"') + _row("*", "*", "*", "Url",
                                                                 '"http://b.invalid/"'),
     "row 2: gives item 'Orders' setting 'url' as row 1 does", "keep one"),
]


@pytest.mark.parametrize(("rows", "where", "why"), REFUSED)
def test_a_bad_row_is_refused_naming_the_file_and_the_row(
        tmp_path: Path, rows: str, where: str, why: str) -> None:
    path = _write(tmp_path, rows)
    with pytest.raises(ConfigurationError) as refused:
        load_production(path, env={})
    text = str(refused.value)
    assert f"defaults file {str(tmp_path / 'env' / 'defaults.toml')!r}, {where}" in text, text
    assert why in text, text


def test_a_missing_defaults_file_is_refused_when_the_outline_is_read(tmp_path: Path) -> None:
    path = tmp_path / "production.toml"
    path.write_text(PRODUCTION)
    with pytest.raises(ConfigurationError, match="cannot read defaults file .*defaults.toml"):
        read_outline(path, env={})


def test_a_relative_path_in_a_row_is_read_from_the_defaults_files_directory(
        tmp_path: Path) -> None:
    rows = _row("*", "*", "*", "ca_bundle", '"tls/ca.pem"') + _row(
        "*", "*", "*", "url", '"https://x.invalid/"')
    production = load_production(_write(tmp_path, rows), env={})
    assert production.item("Orders").settings["ca_bundle"] == str(
        tmp_path / "env" / "tls" / "ca.pem")
