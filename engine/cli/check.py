"""``encore check``: load a production as ``encore run`` would and say what would fail,
without running anything (docs/operating.md); each item's settings are shown with their
source. One line per check; exit status 1 when any failed.
"""
from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import click

from engine.config.production import ItemConfig, ProductionOutline
from engine.config.sources import given_settings
from engine.errors import AdapterNotReady, ConfigurationError, EncoreError, StoreError

__all__ = ["check"]


@dataclass
class _Report:
    """The lines printed so far and how many of them were problems."""

    problems: int = 0
    lines: list[str] = field(default_factory=list)

    def ok(self, what: str, text: str) -> None:
        self._say(f"{what}: {text}")

    def bad(self, what: str, text: str) -> None:
        self.problems += 1
        self._say(f"{what}: {text}")

    def _say(self, line: str) -> None:
        click.echo(line)
        self.lines.append(line)


@click.command("check")
@click.pass_obj
def check(ctx: object) -> None:
    """Load the production as `encore run` would and say what would fail (exit 1).

    Every setting, class, WSDL, router rule, port and the database: one line per item and
    check."""
    outline = ctx.outline  # type: ignore[attr-defined]
    report = _Report()
    where = f" ({outline.path.resolve()})" if outline.path else ""
    click.echo(f"production {outline.name}{where}")
    if outline.system_defaults is not None:
        rows = len(outline.system_defaults.rows)
        click.echo(f"defaults {outline.system_defaults.path}: {rows} row{'s' if rows != 1 else ''}"
                   f" for this production")
    items = _resolved_items(outline, report)
    _check_database(ctx, report)
    _check_ports(outline, report)
    if report.problems:
        click.echo(f"{report.problems} problem{'s' if report.problems > 1 else ''}: "
                   "`encore run` would refuse or not deliver all of it", err=True)
        sys.exit(1)
    click.echo(f"all {len(items)} item{'s' if len(items) != 1 else ''} ready")


# -- items ---------------------------------------------------------------------------------
def _resolved_items(outline: ProductionOutline, report: _Report) -> list[ItemConfig]:
    """Every item that resolves; one line for each item."""
    items: dict[str, ItemConfig] = {}
    failed: dict[str, str] = {}
    for entry in outline.entries:
        try:
            items[entry.name] = entry.resolve()
        except ConfigurationError as exc:
            failed[entry.name] = _without_item(str(exc), entry.name)
    if not failed:
        try:
            outline.resolve()  # the items together: the targets they name, [inbound]
        except ConfigurationError as exc:
            failed[exc.item or "production"] = _without_item(str(exc), exc.item)
    offered = {name: _operations_of(item, failed) for name, item in items.items()}
    for entry in outline.entries:
        label = entry.name if entry.enabled else f"{entry.name} (disabled)"
        if entry.name in failed:
            report.bad(label, f"not ready: {failed[entry.name]}")
            continue
        item = items[entry.name]
        problem = _inbound_problem(item, items, offered)
        if problem is not None:
            report.bad(label, f"not ready: {problem}")
        else:
            report.ok(label, "ready" + _detail(item, offered.get(entry.name)))
        for name, value, source in given_settings(item.settings, item.sources):
            click.echo(f"  {name} = {json.dumps(value, default=str)}  ({source})")
    if "production" in failed:
        report.bad("production", failed["production"])
    return [items[n] for n in items if n not in failed]


def _operations_of(item: ItemConfig, failed: dict[str, str]) -> list[str] | None:
    """Start ``item``'s adapter (or load an inbound service's WSDL) and stop it again; return
    the WSDL's operations, or None."""
    try:
        adapter_class = getattr(item.cls, "adapter_class", None)
        if adapter_class is not None:
            return _started_adapter(item, adapter_class)
        if getattr(item.cls, "serves_inbound", False) and item.settings.get("wsdl"):
            from engine.inbound.wsdl import SoapContract

            contract = SoapContract(item.settings["wsdl"])
            contract.load()
            return contract.operation_names
    except EncoreError as exc:
        failed[item.name] = _without_item(str(exc), item.name)
    except Exception as exc:  # a WSDL zeep cannot read: its reason, named
        failed[item.name] = f"cannot load the WSDL {item.settings.get('wsdl')}: {exc}"
    return None


def _started_adapter(item: ItemConfig, adapter_class: type) -> list[str] | None:
    adapter = adapter_class(item.settings, item_name=item.name, pool_size=item.pool_size,
                            env=os.environ)
    try:
        adapter.start()
        operations = getattr(adapter, "operations", None)
        return list(operations) if operations is not None else None
    except AdapterNotReady as exc:
        raise ConfigurationError(str(exc)) from exc
    finally:
        adapter.stop()


def _inbound_problem(item: ItemConfig, items: dict[str, ItemConfig],
                     offered: dict[str, list[str] | None]) -> str | None:
    """An inbound SOAP service's first WSDL operation that no SOAP operation it reaches offers."""
    if not getattr(item.cls, "serves_inbound", False) or offered.get(item.name) is None:
        return None
    backends = [name for name in _reached(item, items)
                if getattr(items[name].cls, "adapter_class", None) is not None
                and offered.get(name) is not None and items[name].settings.get("wsdl")]
    if not backends:
        return None
    have = {op for name in backends for op in offered[name] or ()}
    for operation in offered[item.name] or ():
        if operation not in have:
            return (f"its WSDL's operation {operation!r} is in the WSDL of none of the SOAP "
                    f"items its calls reach ({', '.join(sorted(backends))}, which offer "
                    f"{', '.join(sorted(have))})")
    return None


def _reached(item: ItemConfig, items: dict[str, ItemConfig]) -> Iterator[str]:
    """The items ``item``'s messages can reach, through routers and processes."""
    seen: set[str] = {item.name}
    pending = [item]
    while pending:
        current = pending.pop()
        for ref in current.cls.declared_targets(current.settings):
            if ref.target in items and ref.target not in seen:
                seen.add(ref.target)
                pending.append(items[ref.target])
                yield ref.target


def _detail(item: ItemConfig, operations: list[str] | None) -> str:
    if operations is None:
        return ""
    return f" (WSDL {item.settings.get('wsdl')}: {', '.join(operations)})"


def _without_item(text: str, name: str | None) -> str:
    """``text`` without its leading ``item 'NAME'``."""
    if name is None:
        return text
    for prefix in (f"item {name!r}, ", f"item {name!r}: "):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


# -- the database and the ports --------------------------------------------------------------
def _check_database(ctx: object, report: _Report) -> None:
    from engine.store import migrate
    from engine.store.opening import open_store
    from engine.store.url import safe_url

    url = ctx.database_url()  # type: ignore[attr-defined]
    try:
        store = open_store(url)
    except StoreError as exc:
        report.bad("database", str(exc).splitlines()[0])
        return
    try:
        revision = migrate.current_revision(store.engine)
        name = safe_url(store.url)
        report.ok("database", f"{name}, at the latest schema (revision {revision})")
    finally:
        store.dispose()


def _check_ports(outline: ProductionOutline, report: _Report) -> None:
    listeners = []
    if outline.portal is not None:
        listeners.append(("[portal] port", outline.portal.host, outline.portal.port))
    if outline.inbound is not None:
        listeners.append(("[inbound] port", outline.inbound.host, outline.inbound.port))
    if outline.metrics_port:
        listeners.append(("metrics_port", outline.metrics_host, outline.metrics_port))
    for what, host, port in listeners:
        problem = _bind_problem(host, port)
        if problem is None:
            report.ok(what, f"{host}:{port} free")
        else:
            report.bad(what, f"cannot listen on {host}:{port}: {problem}")


def _bind_problem(host: str, port: int) -> str | None:
    """Why a server could not listen on ``host``:``port`` now (None: it could)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"{host!r} is not an address of this machine ({exc.strerror or exc})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None
