"""`encore import ensemble` on real production sources (tests/ensemble_data): the three forms
a production is kept in give the same production, whose settings are the sources' (a table
over the mapping), whose custom classes become loadable skeletons, and whose report names
every gap. Hostile sources are refused or carried as data."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from engine.config.production import ProductionOutline, parse_outline
from engine.tools.ensemble import import_production
from engine.tools.ensemble.classes import CLASS_TABLE
from engine.tools.ensemble.errors import SourceError
from engine.tools.ensemble.importer import PRODUCTION_TABLE
from engine.tools.ensemble.schedule import window_of
from engine.tools.ensemble.settings_map import (
    COMPOSITE_SETTINGS,
    NO_EQUIVALENT,
    NOT_NEEDED,
    SETTING_TABLE,
)

DATA = Path(__file__).parents[1] / "ensemble_data"
ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs" / "migrating.md"

# The three forms of the same production: (source, --name).
FORMS = {
    "udl": (DATA / "udl", None),  # source control: one .cls per class
    "export": (DATA / "export" / "Demo.Productions.xml", "Demo.Production"),  # two productions
    "bare": (DATA / "bare" / "Demo.Production.xml", None),  # the <Production> alone
}

# (item, Encore setting, the value the source's Ensemble setting gives) — every row holds
# for every form.
SETTINGS_ROWS: list[tuple[str, str, Any]] = [
    # the SOAP generic operation: the three timeouts, reply codes, alerts
    ("PaymentsSoap", "response_timeout", 7),
    ("PaymentsSoap", "connect_timeout", 3),
    ("PaymentsSoap", "retry_interval", 10),
    ("PaymentsSoap", "failure_timeout", 30),
    ("PaymentsSoap", "reply_code_actions", "E#Server=R,E=F"),
    ("PaymentsSoap", "alert_on_error", True),
    ("PaymentsSoap", "alert_retry_grace_period", 60),
    ("PaymentsSoap", "queue_count_alert", 500),
    ("PaymentsSoap", "queue_wait_alert", 120),
    ("PaymentsSoap", "servers", ["http://payments.example.internal:8765/"]),
    ("PaymentsSoap", "wsdl", "http://payments.example.internal:8765/?wsdl"),
    # the HTTP generic operation
    ("OrdersHttp", "response_timeout", 7),
    ("OrdersHttp", "retry_interval", 10),
    ("OrdersHttp", "failure_timeout", 30),
    ("OrdersHttp", "reply_code_actions", "E#503=R,E=F"),
    ("OrdersHttp", "alert_on_error", True),
    ("OrdersHttp", "alert_retry_grace_period", 30),
    ("OrdersHttp", "queue_count_alert", 100),
    ("OrdersHttp", "queue_wait_alert", 60),
    ("OrdersHttp", "url", "http://orders.example.internal:8080/api/orders"),
    # the router: FailureTimeout -1, LogTraceEvents
    ("PaymentsRouter", "failure_timeout", -1),
    ("PaymentsRouter", "trace", True),
    # the custom operation: its adapter's address over TLS, credentials, Schedule, its own
    ("ChargeCard", "url", "https://cards.example.internal:443/v2"),
    ("ChargeCard", "credentials", "cards"),
    ("ChargeCard", "response_timeout", 20),
    ("ChargeCard", "failure_timeout", 0),
    ("ChargeCard", "schedule", {"start": "0 8 * * 1-5", "stop": "0 18 * * 1-5"}),
    ("ChargeCard", "region", "EU"),
    ("ChargeCard", "max_amount", 5000),
    # the PEX host: its remote settings
    ("FraudCheck", "threshold", 0.8),
    ("FraudCheck", "model", "v2"),
]

# (item, pool_size, enabled): PoolSize, and the actor pool for the router's PoolSize=0
ITEM_ROWS = [("OrdersIn", 1, True), ("PaymentsRouter", 2, True), ("PaymentsSoap", 2, True),
             ("OrdersHttp", 3, True), ("ChargeCard", 1, True), ("FraudCheck", 1, True),
             ("Ens.Alert", 1, True)]


def _imported(form: str, tmp_path: Path) -> tuple[ProductionOutline, Any]:
    source, name = FORMS[form]
    output = tmp_path / "production.toml"
    result = import_production(source, name=name, output=output)
    result.write(output)
    return parse_outline(result.production_text, env={}, path=output), result


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_imports_to_a_production_whose_settings_are_the_sources(
        form: str, tmp_path: Path) -> None:
    outline, result = _imported(form, tmp_path)
    assert outline.name == "Demo.Production" and outline.shutdown_timeout == 60
    assert outline.alert_item == "Ens.Alert"
    assert outline.inbound is not None and outline.inbound.port == 9980
    for item, key, expected in SETTINGS_ROWS:
        assert outline.entry(item).raw_settings.get(key) == expected, (form, item, key)
    for item, pool_size, enabled in ITEM_ROWS:
        entry = outline.entry(item)
        assert (entry.pool_size, entry.enabled) == (pool_size, enabled), (form, item)
    assert [e.name for e in outline.entries] == [name for name, _, _ in ITEM_ROWS]
    assert not result.report.complete  # skeletons are left to finish


@pytest.mark.parametrize("form", ["udl", "export"])
def test_the_router_gets_the_rules_of_its_rule_class_and_names_the_one_it_cannot_hold(
        form: str, tmp_path: Path) -> None:
    outline, result = _imported(form, tmp_path)
    router = outline.entry("PaymentsRouter").raw_settings
    assert router["rules"] == [
        {"field": "Country", "equals": "PT", "target": "PaymentsSoap"},
        {"field": "Amount", "greater_than": 1000, "target": "ChargeCard"}]
    assert router["default_target"] == "OrdersHttp"
    lines = _lines(result, "item PaymentsRouter")
    assert any(line.status == "none" and "DollarsAudit" in line.what for line in lines)
    assert any("Legacy" in line.what and "left out" in line.text for line in lines)


def test_without_the_rule_class_the_router_says_where_its_rules_are(tmp_path: Path) -> None:
    outline, result = _imported("bare", tmp_path)
    assert "rules" not in outline.entry("PaymentsRouter").raw_settings
    line = next(x for x in _lines(result, "item PaymentsRouter")
                if x.what.startswith("BusinessRuleName"))
    assert line.status == "none" and "not in the source" in line.text


def test_a_custom_class_from_the_source_becomes_a_skeleton_on_its_adapter_with_its_settings(
        tmp_path: Path) -> None:
    _, result = _imported("export", tmp_path)
    text = result.skeletons["demo_production/demo_charge_card_operation.py"]
    assert "adapter_class = HttpAdapter" in text
    assert "Setting(name='max_amount', kind=int, default=10000," in text
    assert "# Method Charge(pRequest:Demo.ChargeRequest" in text  # the logic, to rewrite
    assert "TODO" in text


def test_without_its_class_an_item_is_a_skeleton_whose_kind_is_a_guess_marked_todo(
        tmp_path: Path) -> None:
    _, result = _imported("bare", tmp_path)
    line = _lines(result, "item ChargeCard")[0]
    assert line.status == "todo" and "by its name" in line.text and "HTTP" in line.text


@pytest.mark.parametrize("form", list(FORMS))
def test_the_imported_production_loads_with_its_skeletons_and_a_skeleton_fails_its_messages(
        form: str, tmp_path: Path) -> None:
    _imported(form, tmp_path)
    script = textwrap.dedent("""
        import json, sys
        from pathlib import Path
        from engine.config.production import load_production
        production = load_production(Path("production.toml"), env={})
        charge = production.item("ChargeCard")
        host = charge.cls("ChargeCard", charge.settings)
        try:
            host.on_message({"order": "A1"})
        except NotImplementedError as exc:
            refusal = str(exc)
        print(json.dumps({"classes": {i.name: i.class_path for i in production.items},
                          "max_amount": charge.settings["max_amount"],
                          "adapter": charge.cls.adapter_class.__name__,
                          "refusal": refusal}))
    """)
    out = _run([sys.executable, "-c", script], tmp_path)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout)
    assert loaded["classes"]["PaymentsSoap"] == "operations.soap:SoapOperation"
    assert loaded["classes"]["FraudCheck"] == \
        "demo_production.com_example_fraud_fraud_check:FraudCheck"
    assert loaded["max_amount"] == 5000 and loaded["adapter"] == "HttpAdapter"
    assert "skeleton" in loaded["refusal"]


def test_several_productions_are_listed_and_one_is_chosen_by_name(tmp_path: Path) -> None:
    source = FORMS["export"][0]
    with pytest.raises(SourceError, match="Demo.Production, Demo.TestProduction"):
        import_production(source, output=tmp_path / "p.toml")
    with pytest.raises(SourceError, match="no production named 'Nope'"):
        import_production(source, name="Nope", output=tmp_path / "p.toml")
    result = import_production(source, name="Demo.TestProduction", output=tmp_path / "p.toml")
    outline = parse_outline(result.production_text, env={})
    assert [e.name for e in outline.entries] == ["OrdersHttp"]  # the XData held inline
    assert result.report.complete and result.report.summary() == "everything mapped"


def test_the_command_prints_the_report_writes_it_beside_and_exits_by_completeness(
        tmp_path: Path) -> None:
    source = str(FORMS["export"][0])
    out = _encore(["import", "ensemble", source, "--name", "Demo.TestProduction"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "production.import-report.txt").read_text() == out.stdout
    again = _encore(["import", "ensemble", source, "--name", "Demo.TestProduction"], tmp_path)
    assert again.returncode == 1 and "already exist" in again.stderr  # nothing overwritten
    full = _encore(["import", "ensemble", source, "--name", "Demo.Production", "-o",
                    "full.toml"], tmp_path)
    assert full.returncode == 1, full.stderr
    assert "none        AlertGroups (Host) = ops: no equivalent" in full.stdout
    assert (tmp_path / "full.import-report.txt").read_text() == full.stdout
    assert (tmp_path / "demo_production" / "__init__.py").exists()


def test_a_source_with_a_doctype_is_refused_naming_it(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.xml"
    bomb.write_text('<?xml version="1.0"?>\n<!DOCTYPE Production [<!ENTITY a "aaaaaaaa">'
                    '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>\n'
                    '<Production Name="&b;"><Item Name="X" ClassName="Y"/></Production>')
    with pytest.raises(SourceError, match="bomb.xml has a DOCTYPE"):
        import_production(bomb, output=tmp_path / "p.toml")


def test_hostile_names_and_values_stay_data_in_the_file_and_the_skeleton(
        tmp_path: Path) -> None:
    source = tmp_path / "hostile.xml"
    note = 'a\u2028\tb\nimport os #"""'
    source.write_text(
        '<Production Name="P&quot;]&#10;[evil">'
        '<Item Name="A&quot; = 1&#10;[[items]]" ClassName="X.Op&quot;&quot;&quot;;import os;#"'
        ' PoolSize="1" Enabled="true" Comment="line&#10;break [x] &quot;q&quot;">'
        f'<Setting Target="Host" Name="Note">{note.replace(chr(10), "&#10;")}</Setting>'
        '</Item></Production>', encoding="utf-8")
    output = tmp_path / "production.toml"
    result = import_production(source, output=output)
    result.write(output)
    outline = parse_outline(result.production_text, env={}, path=output)
    assert outline.name == 'P"]\n[evil'
    assert [e.name for e in outline.entries] == ['A" = 1\n[[items]]']
    skeleton = next(tmp_path.glob("p_evil*/*op*.py"))
    imported = {node.module if isinstance(node, ast.ImportFrom) else alias.name
                for node in ast.walk(ast.parse(skeleton.read_text()))
                if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names}
    assert imported == {"__future__", "typing", "engine", "engine.settings"}
    script = ("from engine.config.production import load_production; from pathlib import Path; "
              "import json; p = load_production(Path('production.toml'), env={}); "
              "print(json.dumps(p.items[0].settings['note']))")
    out = _run([sys.executable, "-c", script], tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == note


@pytest.mark.parametrize(("schedule", "window"), [
    # every day, 08:00 to 18:00
    ("START:*-*-*T08:00:00,STOP:*-*-*T18:00:00", {"start": "0 8 * * *", "stop": "0 18 * * *"}),
    # Monday, Wednesday, Friday, as weekdays (00 = Sunday)
    ("START:WEEK-*-01T07:30:00,START:WEEK-*-03T07:30:00,START:WEEK-*-05T07:30:00,"
     "STOP:WEEK-*-01T12:00:00,STOP:WEEK-*-03T12:00:00,STOP:WEEK-*-05T12:00:00",
     {"start": "30 7 * * 1,3,5", "stop": "0 12 * * 1,3,5"}),
    # the 1st of every month
    ("START:*-*-01T00:00:00,STOP:*-*-01T06:00:00", {"start": "0 0 1 * *", "stop": "0 6 1 * *"}),
])
def test_an_ensemble_schedule_becomes_a_window_of_two_crons(schedule: str,
                                                           window: dict[str, str]) -> None:
    assert window_of(schedule) == window


@pytest.mark.parametrize(("schedule", "why"), [
    ("@BusinessHours", "schedule spec defined outside"),  # a named spec
    ("START:2024-*-*T08:00:00,STOP:*-*-*T18:00:00", "one given year"),
    ("START:WEEK-02-01T08:00:00,STOP:*-*-*T18:00:00", "n-th weekday"),
    ("START:*-*-*T08:00:30,STOP:*-*-*T18:00:00", "no seconds"),
    ("START:*-*-*T08:00:00,START:*-*-*T13:00:00,STOP:*-*-*T18:00:00", "different times"),
    ("START:*-*-*T08:00:00", "needs START and STOP"),
])
def test_a_schedule_a_cron_cannot_say_is_refused_with_the_reason(schedule: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        window_of(schedule)


def test_docs_migrating_lists_every_row_of_the_class_and_setting_tables() -> None:
    text = DOCS.read_text(encoding="utf-8")
    names = [*CLASS_TABLE, *SETTING_TABLE, *COMPOSITE_SETTINGS, *NOT_NEEDED, *NO_EQUIVALENT,
             *PRODUCTION_TABLE]
    missing = [n for n in names if f"`{n}`" not in text]
    assert not missing, f"docs/migrating.md does not list {missing}"
    for rule in SETTING_TABLE.values():
        assert f"`{rule.encore}`" in text


def _lines(result: Any, name: str) -> list[Any]:
    return next(s.lines for s in result.report.sections if s.name == name)


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def _encore(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "engine.cli", *args], cwd)


def test_a_generic_soap_service_gets_a_path_and_a_wsdl_to_provide_marked_todo(
        tmp_path: Path) -> None:
    source = tmp_path / "passthrough.xml"
    source.write_text(
        '<Production Name="Passthrough">'
        '<Item Name="EchoService" ClassName="EnsLib.SOAP.GenericService" PoolSize="0">'
        '<Setting Target="Host" Name="TargetConfigName">EchoBackend</Setting></Item>'
        '<Item Name="EchoBackend" ClassName="EnsLib.SOAP.GenericOperation" PoolSize="1">'
        '<Setting Target="Adapter" Name="WebServiceURL">http://10.0.0.5/echo</Setting></Item>'
        '</Production>', encoding="utf-8")
    result = import_production(source, output=tmp_path / "production.toml")
    outline = parse_outline(result.production_text, env={})
    service = outline.entry("EchoService").raw_settings
    assert service == {"target": "EchoBackend", "path": "/soap/echo_service",
                       "wsdl": "echo_service.wsdl"}
    assert outline.inbound is not None and outline.inbound.port == 8081
    assert outline.entry("EchoBackend").raw_settings == {
        "servers": ["http://10.0.0.5/echo"], "wsdl": "http://10.0.0.5/echo?wsdl"}
    assert [x.what for x in _lines(result, "item EchoService") if x.status == "todo"] == \
        ["the contract"]
    assert result.skeletons == {} and "skeletons in" not in result.report.text()
