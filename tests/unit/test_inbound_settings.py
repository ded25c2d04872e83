"""Loading inbound services (docs/inbound.md): the [inbound] table, and settings refused at
load time with the item and the key named."""
from __future__ import annotations

import pytest

from engine.config.production import parse_production
from engine.errors import ConfigurationError

ROUTER = ('[[items]]\nname = "Router"\nclass = "engine.router:Router"\n'
          '[items.settings]\ndefault_target = "Noop"\n'
          '[[items]]\nname = "Noop"\nclass = "operations.http:HttpOperation"\n'
          '[items.settings]\nurl = "http://127.0.0.1:9"\n')


def _soap(settings: str, inbound: str = "[inbound]\nport = 8099\n") -> str:
    return (inbound + '[[items]]\nname = "In"\nclass = "engine.inbound:SoapService"\n'
            f"[items.settings]\n{settings}\n" + ROUTER)


def _http(settings: str) -> str:
    return ('[inbound]\nport = 8099\n[[items]]\nname = "In"\nclass = "engine.inbound:HttpService"\n'
            f"[items.settings]\n{settings}\n" + ROUTER)


GOOD_SOAP = 'wsdl = "x.wsdl"\npath = "/soap/x"\ntarget = "Router"\n'


def test_the_inbound_table_and_a_soap_service_load() -> None:
    production = parse_production(_soap(GOOD_SOAP, "[inbound]\nport = 8099\nhost = "
                                                   '"0.0.0.0"\n'), env={})
    assert production.inbound is not None and production.inbound.port == 8099
    assert production.inbound.host == "0.0.0.0" and not production.inbound.tls
    item = production.item("In")
    assert item.settings["auth"] == "none" and item.settings["response_timeout"] == 30


@pytest.mark.parametrize("text, key, words", [
    (_soap(GOOD_SOAP, inbound=""), None, "needs an [inbound] table"),
    (_soap(GOOD_SOAP.replace('"Router"', '"Nobody"')), "target", "is not an item"),
    (_soap(GOOD_SOAP.replace('"x.wsdl"', '"http://h/x?wsdl"')), "wsdl", "local WSDL file"),
    (_soap(GOOD_SOAP.replace('"/soap/x"', '"soap"')), "path", "expected a URL path"),
    (_soap(GOOD_SOAP + 'auth = "digest"\n'), "auth", "'none', 'basic', 'token'"),
    (_soap(GOOD_SOAP, "[inbound]\nport = 8099\ntls_cert = \"c.pem\"\n"), "tls_key",
     "go together"),
    (_http('routes = [{method = "POST", path = "/o", target = "Router", x = 1}]'), "routes",
     "exactly method, path and target"),
    (_http('routes = [{method = "BREW", path = "/o", target = "Router"}]'), "routes",
     "method 'BREW' is not one of"),
    (_http('routes = [{method = "POST", path = "/o", target = "Gone"}]'), "routes",
     "route 1 (POST /o): target 'Gone' is not an item"),
    (_http('routes = [{method = "POST", path = "/o", target = "Router"}]\nmode = "later"'),
     "mode", "'sync', 'async'"),
])
def test_bad_settings_are_refused_naming_the_item_and_key(text: str, key: str | None,
                                                         words: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        parse_production(text, env={})
    assert words in str(error.value)
    if key is not None:
        assert key in str(error.value)
