"""An imported production passes `encore check`: the bare export of tests/ensemble_data,
its SOAP and HTTP operations pointed at real loopback servers and its defaults export
imported beside it (`encore import ensemble --defaults`), is checked by the command line as a
team would before its first run — every item, the skeletons of its custom classes included,
resolves and is `ready`, and the value a system default gives is shown with its source."""
from __future__ import annotations

import re
from pathlib import Path

from tests.acceptance.daemon import encore
from tests.integration.inbound_support import free_port
from tests.servers import HttpTestServer, SoapTestServer, respond

DATA = Path(__file__).parents[1] / "ensemble_data"
SOURCE = DATA / "bare" / "Demo.Production.xml"
EXPORT = DATA / "defaults" / "Ens.Config.DefaultSettings.xml"
CARDS = {"ENCORE_CREDENTIALS_CARDS_USERNAME": "shop", "ENCORE_CREDENTIALS_CARDS_PASSWORD": "x"}
MAPPED = ("OrdersIn", "PaymentsRouter", "PaymentsSoap", "OrdersHttp")  # Encore's own classes
SKELETONS = ("ChargeCard", "FraudCheck", "Ens.Alert")  # custom classes: skeletons


def _retargeted(soap: int, http: int, inbound: int) -> str:
    text = SOURCE.read_text(encoding="utf-8")
    for host, port, ours in (("payments", 8765, soap), ("orders", 8080, http)):
        text = text.replace(f"{host}.example.internal</Setting>", "127.0.0.1</Setting>")
        text = text.replace(f'Name="HTTPPort">{port}<', f'Name="HTTPPort">{ours}<')
    return text.replace('Name="Port">9980<', f'Name="Port">{inbound}<')


def test_the_imported_production_passes_check_against_loopback_servers(
        tmp_path: Path) -> None:
    routes = {"/api/orders": respond(200, b"ok")}
    with SoapTestServer() as soap, HttpTestServer(routes) as http:
        source = tmp_path / "Demo.Production.xml"
        source.write_text(_retargeted(soap.port, http.port, free_port()), encoding="utf-8")
        imported = encore("import", "ensemble", str(source), "-o", "production.toml",
                          "--defaults", str(EXPORT), cwd=tmp_path, check=False)
        # exit 1: the report names gaps (the skeletons' logic, rows Encore has no place for)
        assert imported.returncode == 1, imported.stderr
        assert "production.defaults.toml" in imported.stderr
        encore("-p", "production.toml", "db", "upgrade", cwd=tmp_path)
        checked = encore("-p", "production.toml", "check", cwd=tmp_path, check=False,
                         env=CARDS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    out = checked.stdout
    for item in (*MAPPED, *SKELETONS):
        assert re.search(rf"^{re.escape(item)}: ready", out, re.M), (item, out)
    assert "all 7 items ready" in out
    assert "defaults " in out and "production.defaults.toml: 3 rows for this production" in out
    orders = out.split("OrdersHttp: ready", 1)[1].split("\nChargeCard", 1)[0]
    assert "connect_timeout = 4" in orders
    assert "(system default (production.defaults.toml, row 1))" in orders
    payments = out.split("PaymentsSoap: ready", 1)[1].split("\nOrdersHttp", 1)[0]
    assert f"http://127.0.0.1:{soap.port}/?wsdl" in payments  # the WSDL check loaded


def test_check_says_which_item_is_not_ready_when_a_server_is_gone(tmp_path: Path) -> None:
    with SoapTestServer() as soap:
        gone = soap.port  # the SOAP service stops before the check: its WSDL cannot load
    source = tmp_path / "Demo.Production.xml"
    source.write_text(_retargeted(gone, free_port(), free_port()), encoding="utf-8")
    encore("import", "ensemble", str(source), "-o", "production.toml", cwd=tmp_path,
           check=False)
    encore("-p", "production.toml", "db", "upgrade", cwd=tmp_path)
    checked = encore("-p", "production.toml", "check", cwd=tmp_path, check=False, env=CARDS)
    assert checked.returncode == 1
    assert re.search(r"^PaymentsSoap: not ready: cannot load the WSDL", checked.stdout, re.M)
    assert re.search(r"^OrdersHttp: ready", checked.stdout, re.M)
