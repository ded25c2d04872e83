"""`encore import ensemble --defaults`: an exported Ens.Config.DefaultSettings table
(tests/ensemble_data/defaults) becomes a defaults file the imported production names, its
settings through the item settings' table; the daemon's loader resolves a value from it with
its source label; every row Encore cannot take is a `none` line of the report."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from engine.tools.ensemble import ImportResult, import_production
from engine.tools.ensemble.errors import SourceError
from engine.tools.ensemble.report import MAPPED, NONE, NOT_NEEDED

DATA = Path(__file__).parents[1] / "ensemble_data"
ROOT = Path(__file__).parents[2]
SOURCE = DATA / "bare" / "Demo.Production.xml"
EXPORT = DATA / "defaults" / "Ens.Config.DefaultSettings.xml"
CARDS = {"ENCORE_CREDENTIALS_CARDS_USERNAME": "shop", "ENCORE_CREDENTIALS_CARDS_PASSWORD": "x"}


@pytest.fixture(autouse=True)
def _no_skeleton_of_another_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """The skeleton package is named ``demo_production`` only while Python finds no other of
    that name: forget those that tests run earlier in this process imported or put on the
    path, so the names below do not depend on the order of the tests."""
    for name in [m for m in sys.modules if m.split(".")[0] == "demo_production"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path
                                      if not (Path(entry or ".") / "demo_production").is_dir()])


def _import(tmp_path: Path) -> tuple[Path, ImportResult]:
    output = tmp_path / "production.toml"
    result = import_production(SOURCE, output=output, defaults=EXPORT)
    result.write(output)
    return output, result


def test_the_export_becomes_a_defaults_file_that_the_production_names(tmp_path: Path) -> None:
    output, _ = _import(tmp_path)
    production = tomllib.loads(output.read_text())
    assert production["production"]["defaults"] == "production.defaults.toml"
    rows = tomllib.loads((tmp_path / "production.defaults.toml").read_text())["defaults"]
    assert rows == [
        {"production": "*", "item": "*", "class": "operations.http:HttpOperation",
         "setting": "connect_timeout", "value": 4,
         "description": "test bed: every HTTP operation connects within 4 s"},
        {"production": "Demo.Production", "item": "PaymentsSoap", "class": "*",
         "setting": "response_timeout", "value": 12},
        {"production": "*", "item": "*",  # a custom class: its skeleton's
         "class": "demo_production.demo_charge_card_operation:ChargeCardOperation",
         "setting": "retry_interval", "value": 15},
        {"production": "Demo.OtherProduction", "item": "*", "class": "*",
         "setting": "failure_timeout", "value": 90},
    ]


def test_every_row_of_the_export_is_a_line_of_the_report(tmp_path: Path) -> None:
    _, result = _import(tmp_path)
    section = next(s for s in result.report.sections
                   if s.title.startswith("defaults Ens.Config.DefaultSettings.xml"))
    by_row = {line.what.split("(row ")[1].split(":")[0]: line for line in section.lines
              if "(row " in line.what}
    assert {row: line.status for row, line in by_row.items()} == {
        "1": MAPPED, "2": MAPPED, "3": MAPPED, "4": NONE, "5": NONE, "6": NONE, "7": NONE,
        "8": MAPPED, "9": NONE}
    assert "part of a setting made of several" in by_row["4"].text  # HTTPServer
    assert "no equivalent" in by_row["5"].text  # InactivityTimeout
    assert "unknown setting of item 'OrdersIn'" in by_row["6"].text  # not an HttpService's
    assert "cannot be read" in by_row["7"].text  # QueueWaitAlert = soon
    assert "Acme.Unknown.Operation is neither" in by_row["9"].text
    assert [line.status for line in section.lines if line.what == "Deployable"] == [NOT_NEEDED]
    assert not result.report.complete
    assert "the system defaults" in result.report.summary()


def test_the_loader_resolves_an_item_setting_from_the_imported_defaults(tmp_path: Path) -> None:
    _import(tmp_path)
    script = textwrap.dedent("""
        import json
        from pathlib import Path
        from engine.config.production import load_production
        production = load_production(Path("production.toml"), env={})
        print(json.dumps({f"{item}.{name}": [production.item(item).settings[name],
                                             production.item(item).sources[name]]
                          for item, name in (("OrdersHttp", "connect_timeout"),
                                             ("PaymentsSoap", "response_timeout"),
                                             ("PaymentsSoap", "connect_timeout"),
                                             ("ChargeCard", "retry_interval"))}))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), **CARDS}
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        # row 1, for every HTTP generic operation: OrdersHttp gives no connect_timeout
        "OrdersHttp.connect_timeout": [4, "system default (production.defaults.toml, row 1)"],
        "PaymentsSoap.response_timeout": [7, "file"],  # the file's value outranks row 2
        "PaymentsSoap.connect_timeout": [3, "file"],  # a SOAP operation: row 1 is not its
        "ChargeCard.retry_interval": [15, "system default (production.defaults.toml, row 3)"],
    }


def test_a_file_that_is_not_an_export_of_the_table_is_refused_by_name(tmp_path: Path) -> None:
    export = tmp_path / "settings.xml"
    export.write_text("<Export><Document name='x'/></Export>")
    with pytest.raises(SourceError, match="settings.xml holds no Ens.Config.DefaultSettings"):
        import_production(SOURCE, output=tmp_path / "p.toml", defaults=export)
