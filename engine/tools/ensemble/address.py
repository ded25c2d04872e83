"""Where an operation sends: Ensemble's address settings (``HTTPServer``, ``HTTPPort``,
``URL``, ``SSLConfig``; ``WebServiceURL``; the proxy's) as Encore's ``url``, ``servers``,
``wsdl`` and ``proxy``."""
from __future__ import annotations

from typing import Any

from engine.tools.ensemble.classes import HTTP, SOAP
from engine.tools.ensemble.model import EnsItem
from engine.tools.ensemble.report import DEFAULT, MAPPED, NONE, Section

ADDRESS_SETTINGS = ("HTTPServer", "HTTPPort", "URL", "SSLConfig", "WebServiceURL")
PROXY_SETTINGS = ("ProxyServer", "ProxyPort", "ProxyHTTPS")


def map_address(item: EnsItem, adapter: str | None, section: Section) -> dict[str, Any]:
    """The Encore settings for the item's address; a report line for each part."""
    given = {name: s.value for name in ADDRESS_SETTINGS
             if (s := item.setting(name)) is not None and s.value}
    if not given:
        return {}
    shown = ", ".join(f"{k}={v}" for k, v in given.items())
    if adapter is None:
        section.add(NONE, shown, "the item has no HTTP or SOAP adapter to send to it")
        return {}
    out: dict[str, Any] = {}
    if "HTTPServer" in given:
        scheme = "https" if given.get("SSLConfig") else "http"
        port = f":{given['HTTPPort']}" if given.get("HTTPPort") else ""
        path = given.get("URL", "")
        url = f"{scheme}://{given['HTTPServer']}{port}{'/' if path[:1] != '/' else ''}{path}"
    elif "WebServiceURL" in given:
        url = given["WebServiceURL"]
    else:
        section.add(NONE, shown, "no HTTPServer or WebServiceURL: the address is incomplete")
        return {}
    if adapter == HTTP:
        out["url"] = url
        section.add(MAPPED, shown, f"url = {url!r}")
    elif adapter == SOAP:
        out["servers"] = [url]
        out["wsdl"] = url + ("&wsdl" if "?" in url else "?wsdl")
        section.add(MAPPED, shown, f"servers = [{url!r}]; wsdl = {out['wsdl']!r} (Encore "
                    "reads the service's WSDL: the address + '?wsdl', as most SOAP servers "
                    "serve it; `encore check` fetches it, and wsdl may name a file instead)")
    if given.get("SSLConfig"):
        section.add(DEFAULT, f"SSLConfig={given['SSLConfig']}",
                    "https, verified against the system's CA certificates (ssl_verify = "
                    "true); the SSL configuration's CA file or client certificate, if it has "
                    "one, goes in ca_bundle or client_cert")
    return out


def map_proxy(item: EnsItem, section: Section) -> dict[str, Any]:
    """``proxy`` from ``ProxyServer``/``ProxyPort``/``ProxyHTTPS``."""
    server = item.setting("ProxyServer")
    if server is None or not server.value:
        return {}
    port = item.setting("ProxyPort")
    https = item.setting("ProxyHTTPS")
    scheme = "https" if https is not None and https.value in ("1", "true") else "http"
    proxy = f"{scheme}://{server.value}" + (f":{port.value}" if port and port.value else "")
    section.add(MAPPED, "ProxyServer/ProxyPort", f"proxy = {proxy!r}")
    return {"proxy": proxy}
