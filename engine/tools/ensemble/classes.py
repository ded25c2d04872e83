"""The class table: which Ensemble classes Encore has an equivalent of, and what kind of
host (operation, process, service) and adapter any other class is, for its skeleton.

docs/migrating.md lists the table; a test keeps the two the same.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine.tools.ensemble.model import EnsClass, EnsItem

OPERATION, PROCESS, SERVICE = "operation", "process", "service"
SOAP, HTTP = "soap", "http"  # the outbound adapters Encore has


@dataclass(frozen=True)
class ClassMapping:
    """An Ensemble class Encore has: its Encore class (``module:Class``), its kind, and the
    adapter whose settings it takes (None: none)."""

    encore: str
    kind: str
    adapter: str | None = None


CLASS_TABLE: Mapping[str, ClassMapping] = {
    "EnsLib.SOAP.GenericOperation": ClassMapping("operations.soap:SoapOperation", OPERATION,
                                                 SOAP),
    "EnsLib.SOAP.GenericOperationInProc": ClassMapping("operations.soap:SoapOperation",
                                                       OPERATION, SOAP),
    "EnsLib.HTTP.GenericOperation": ClassMapping("operations.http:HttpOperation", OPERATION,
                                                 HTTP),
    "EnsLib.HTTP.GenericOperationInProc": ClassMapping("operations.http:HttpOperation",
                                                       OPERATION, HTTP),
    "EnsLib.MsgRouter.RoutingEngine": ClassMapping("engine.router:Router", PROCESS),
    "EnsLib.MsgRouter.VDocRoutingEngine": ClassMapping("engine.router:Router", PROCESS),
    "EnsLib.SOAP.GenericService": ClassMapping("engine.inbound:SoapService", SERVICE),
    "EnsLib.HTTP.GenericService": ClassMapping("engine.inbound:HttpService", SERVICE),
}

# The adapters an ADAPTER parameter may name that Encore has.
ADAPTER_TABLE: Mapping[str, str] = {
    "EnsLib.SOAP.OutboundAdapter": SOAP,
    "EnsLib.HTTP.OutboundAdapter": HTTP,
}

# Ensemble's base classes, by the kind of host they make.
_BASE_KINDS: Mapping[str, str] = {
    "Ens.BusinessOperation": OPERATION,
    "Ens.BusinessProcess": PROCESS,
    "Ens.BusinessProcessBPL": PROCESS,
    "Ens.BusinessService": SERVICE,
    "EnsLib.PEX.BusinessOperation": OPERATION,
    "EnsLib.PEX.BusinessProcess": PROCESS,
    "EnsLib.PEX.BusinessService": SERVICE,
    "EnsLib.MsgRouter.RoutingEngine": PROCESS,
    "EnsLib.HL7.MsgRouter.RoutingEngine": PROCESS,
    "EnsLib.SOAP.Service": SERVICE,
}

PEX_PREFIXES = ("EnsLib.PEX.", "Grongier.PEX.", "IOP.")  # PEX hosts (Java, .NET, Python)


@dataclass(frozen=True)
class HostKind:
    """What an item's class is, and how that was found (``how``: a sentence for the
    report; ``sure``: False when only the class's name or settings hinted at it)."""

    kind: str
    adapter: str | None
    adapter_class: str | None  # the Ensemble adapter, as named
    how: str
    sure: bool


def is_pex(class_name: str) -> bool:
    return class_name.startswith(PEX_PREFIXES)


def host_kind(item: EnsItem, classes: Mapping[str, EnsClass]) -> HostKind:
    """The kind and adapter of ``item``'s class, from its definition in the source (its
    supers followed through the source), else from the names Ensemble gives its classes and
    the adapter settings the item carries."""
    found, adapter_class, chain = _from_source(item.class_name, classes)
    if found is not None:
        return HostKind(found, ADAPTER_TABLE.get(adapter_class or ""), adapter_class,
                        f"extends {' → '.join(chain)}", True)
    if is_pex(item.class_name):
        kind = _kind_by_name(item.class_name) or OPERATION
        return HostKind(kind, None, None, f"a PEX {kind}", True)
    kind = _kind_by_name(item.class_name) or OPERATION
    adapter = _adapter_by_settings(item) if kind == OPERATION else None
    how = (f"its class is not in the source: taken for a{'n' if kind[0] in 'aeiou' else ''} "
           f"{kind} by its name")
    if adapter:
        how += f", on the {adapter.upper()} adapter by its settings"
    return HostKind(kind, adapter, None, how, False)


def _from_source(name: str, classes: Mapping[str, EnsClass]
                 ) -> tuple[str | None, str | None, list[str]]:
    chain = [name]
    adapter: str | None = None
    seen = set()
    current = classes.get(name)
    while current is not None and current.name not in seen:
        seen.add(current.name)
        adapter = adapter or current.adapter
        base = next((p for p in current.supers if p in _BASE_KINDS), None)
        if base is not None:
            return _BASE_KINDS[base], adapter, [*chain, base]
        parent = next((p for p in current.supers if p in classes), None)
        if parent is None:
            break
        chain.append(parent)
        current = classes[parent]
    return None, adapter, chain


def _kind_by_name(name: str) -> str | None:
    last = name.rsplit(".", 1)[-1].lower()
    for word, kind in (("service", SERVICE), ("process", PROCESS), ("router", PROCESS),
                       ("bpl", PROCESS), ("operation", OPERATION)):
        if word in last:
            return kind
    return None


def _adapter_by_settings(item: EnsItem) -> str | None:
    names = {s.name for s in item.settings if s.target == "Adapter"}
    if names & {"WebServiceURL", "WebServiceClientClass"}:
        return SOAP
    if names & {"HTTPServer", "HTTPPort", "URL"}:
        return HTTP
    return None
