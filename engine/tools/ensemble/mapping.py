"""One Ensemble item as an Encore item: its class by :mod:`.classes`, its attributes, its
settings by :mod:`.settings_map` (and :mod:`.address`, :mod:`.rules`), every value checked
against the Encore class's own declarations before it is written, and a report line for
each thing read."""
from __future__ import annotations

import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ConfigurationError
from engine.settings import Setting, validate_settings
from engine.tools.ensemble.address import ADDRESS_SETTINGS, PROXY_SETTINGS, map_address, map_proxy
from engine.tools.ensemble.classes import (
    CLASS_TABLE,
    OPERATION,
    PROCESS,
    SERVICE,
    HostKind,
    host_kind,
)
from engine.tools.ensemble.model import EnsClass, EnsItem, EnsSetting
from engine.tools.ensemble.report import DEFAULT, MAPPED, NONE, NOT_NEEDED, TODO, Section
from engine.tools.ensemble.rules import router_rules
from engine.tools.ensemble.schedule import window_of
from engine.tools.ensemble.settings_map import (
    ENSEMBLE_DEFAULTS,
    NO_EQUIVALENT,
    SETTING_TABLE,
)
from engine.tools.ensemble.settings_map import (
    NOT_NEEDED as NOT_NEEDED_SETTINGS,
)
from engine.tools.ensemble.skeleton_spec import SkeletonSpec, snake, value_of
from engine.tools.ensemble.skeletons import declared_of, skeleton_for

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
SOAP_SERVICE = "engine.inbound:SoapService"
# Item attributes that need no line: the name and class are the section's title.
_TITLE_ATTRIBUTES = {"Name", "ClassName"}


@dataclass
class ItemPlan:
    """An Encore item to write: its keys, comments and settings, and its report section."""

    name: str
    class_path: str
    kind: str
    pool_size: int
    enabled: bool
    section: Section
    comments: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    skeleton: SkeletonSpec | None = None


@dataclass
class Context:
    """What every item's mapping shares: the source's classes, the skeleton package, the
    production's actor pool, the inbound port and the skeletons made so far."""

    classes: Mapping[str, EnsClass]
    package: str
    actor_pool_size: int | None
    inbound_port: int | None = None
    http_services: int = 0
    skeletons: dict[str, SkeletonSpec] = field(default_factory=dict)


def map_item(item: EnsItem, ctx: Context) -> ItemPlan:
    """The plan for ``item`` (see the module doc)."""
    known = CLASS_TABLE.get(item.class_name)
    if known is not None:
        kind = HostKind(known.kind, known.adapter, None, "", True)
        class_path, skeleton = known.encore, None
    else:
        kind = host_kind(item, ctx.classes)
        skeleton = skeleton_for(item, kind, ctx.classes, ctx.skeletons)
        class_path = f"{ctx.package}.{skeleton.module}:{skeleton.class_name}"
    section = Section(f"item {item.name} ({item.class_name} → {class_path})",
                      name=f"item {item.name}")
    plan = ItemPlan(name=item.name, class_path=class_path, kind=kind.kind, pool_size=1,
                    enabled=True, section=section, skeleton=skeleton)
    if skeleton is not None:
        _skeleton_lines(item, kind, skeleton, section)
    _map_attributes(item, plan, ctx)
    raw = _map_settings(item, plan, kind, ctx)
    if plan.class_path == SOAP_SERVICE:
        _soap_service_contract(plan, raw)
    plan.settings = _checked(raw, declared_of_plan(plan), plan)
    if plan.kind == OPERATION and kind.adapter is not None:
        _report_defaults(plan)
    return plan


def _skeleton_lines(item: EnsItem, kind: HostKind, skeleton: SkeletonSpec,
                    section: Section) -> None:
    status = MAPPED if kind.sure else TODO
    section.add(status, "ClassName", f"{kind.how}; no Encore equivalent: skeleton "
                f"{skeleton.class_name} in {skeleton.module}.py")
    if kind.adapter_class and kind.adapter is None:
        section.add(NONE, f"ADAPTER {kind.adapter_class}", "Encore has no such adapter: the "
                    "skeleton has none")
    section.add(TODO, "its logic", "rewrite the ObjectScript (or PEX code) in Python where "
                "the skeleton says TODO")


def _soap_service_contract(plan: ItemPlan, raw: dict[str, Any]) -> None:
    """A SoapService's ``path`` and ``wsdl``: Ensemble's generic service had neither."""
    raw.setdefault("path", f"/soap/{snake(plan.name)}")
    plan.section.add(DEFAULT, "the address callers use", f"path = {raw['path']!r} on the "
                     "[inbound] port (Ensemble's went through its web server)")
    raw.setdefault("wsdl", f"{snake(plan.name)}.wsdl")
    plan.section.add(TODO, "the contract", f"wsdl = {raw['wsdl']!r}: put the WSDL callers use "
                     "there, beside the production file (Ensemble's generic service took any "
                     "envelope; Encore checks each request against a WSDL)")


def _map_attributes(item: EnsItem, plan: ItemPlan, ctx: Context) -> None:
    section = plan.section
    attrs = dict(item.attributes)
    pool = attrs.pop("PoolSize", "1")
    _map_pool(pool, plan, ctx)
    enabled = attrs.pop("Enabled", "true").lower() in ("true", "1")
    plan.enabled = enabled
    section.add(MAPPED, f"Enabled={str(enabled).lower()}", f"enabled = {str(enabled).lower()}")
    for key in ("Category", "Comment"):
        value = attrs.pop(key, "")
        if value:
            plan.comments.append(f"{key}: {value}")
            section.add(MAPPED, key, "a comment above the item")
    trace = attrs.pop("LogTraceEvents", "false").lower() in ("true", "1")
    if trace:
        plan.settings["trace"] = True
        section.add(MAPPED, "LogTraceEvents=true", "trace = true")
    schedule = attrs.pop("Schedule", "")
    if schedule:
        _map_schedule(schedule, plan)
    foreground = attrs.pop("Foreground", "false").lower() in ("true", "1")
    if foreground:
        section.add(NOT_NEEDED, "Foreground=true", "run `encore run` in a terminal to watch it")
    for key in ("DisableErrorTraps", "InactivityTimeout"):
        if attrs.pop(key, "false").lower() in ("true", "1"):
            section.add(NONE, key, "no equivalent in Encore")
    for key, value in attrs.items():
        if key not in _TITLE_ATTRIBUTES:
            section.add(NONE, f"{key}={value}", "an item attribute Encore does not know")


def _map_pool(text: str, plan: ItemPlan, ctx: Context) -> None:
    try:
        pool = int(text)
    except ValueError:
        plan.section.add(NONE, f"PoolSize={text}", "not a whole number: pool_size = 1")
        return
    if pool > 0:
        plan.pool_size = pool
        plan.section.add(MAPPED, f"PoolSize={pool}", f"pool_size = {pool}")
    elif plan.kind == PROCESS:
        size = ctx.actor_pool_size or 1
        plan.pool_size = size
        plan.section.add(MAPPED if ctx.actor_pool_size else DEFAULT, "PoolSize=0",
                         f"the actor pool: pool_size = {size}" + (
                             " (the production's ActorPoolSize)" if ctx.actor_pool_size
                             else " (the production sets no ActorPoolSize)"))
    elif plan.kind == SERVICE:
        plan.section.add(NOT_NEEDED, "PoolSize=0", "an inbound service is served by the "
                         "daemon's own server (pool_size 1)")
    else:
        plan.enabled = False
        plan.section.add(NONE, "PoolSize=0", "an operation with no job never runs in "
                         "Ensemble; Encore has pool_size ≥ 1: written disabled")


def _map_schedule(schedule: str, plan: ItemPlan) -> None:
    if plan.kind == SERVICE:
        plan.section.add(NONE, f"Schedule={schedule}", "a service's schedule in Encore is "
                         "when it polls, not when it runs")
        return
    try:
        window = window_of(schedule)
    except ValueError as exc:
        plan.section.add(NONE, f"Schedule={schedule}", str(exc))
        return
    plan.settings["schedule"] = window
    plan.section.add(MAPPED, f"Schedule={schedule}",
                     f"schedule = {{ start = {window['start']!r}, stop = {window['stop']!r} }} "
                     "(Encore's crons are UTC, Ensemble's times the server's local time: "
                     "shift them if that was not UTC)")


def _map_settings(item: EnsItem, plan: ItemPlan, kind: HostKind,
                  ctx: Context) -> dict[str, Any]:
    section = plan.section
    raw: dict[str, Any] = dict(plan.settings)
    raw.update(map_address(item, kind.adapter, section))
    raw.update(map_proxy(item, section))
    composite = {*ADDRESS_SETTINGS, *PROXY_SETTINGS}
    for setting in item.settings:
        if setting.name in composite:
            continue
        where = f"{setting.name} ({setting.target})"
        if not setting.value and setting.name not in ("%remoteSettings",):
            section.add(DEFAULT, where, "empty: Encore's default")
            continue
        _map_one(setting, where, plan, kind, ctx, raw)
    return raw


def _map_one(setting: EnsSetting, where: str, plan: ItemPlan, kind: HostKind, ctx: Context,
             raw: dict[str, Any]) -> None:
    section, name, value = plan.section, setting.name, setting.value
    rule = SETTING_TABLE.get(name)
    if rule is not None:
        try:
            raw[rule.encore] = rule.read(value)
        except ValueError as exc:
            section.add(NONE, f"{where} = {value}", f"cannot be read: {exc}")
            return
        note = f" ({rule.note})" if rule.note and (value == "-1"
                                                    or not rule.note.startswith("-1")) else ""
        section.add(MAPPED, f"{where} = {value}", f"{rule.encore} = {raw[rule.encore]!r}{note}")
    elif name in ("TargetConfigName", "TargetConfigNames"):
        _map_targets(value, where, plan, ctx, raw)
    elif name == "BusinessRuleName" and plan.class_path == "engine.router:Router":
        _map_rules(value, where, plan, ctx, raw)
    elif name == "Port" and plan.kind == SERVICE and plan.skeleton is None:
        _map_port(value, where, plan, ctx)
    elif plan.skeleton is not None and name in plan.skeleton.own:
        own = plan.skeleton.own[name]
        try:
            raw[own.name] = value_of(value, own.kind)
        except ValueError as exc:
            section.add(NONE, f"{where} = {value}", f"not a {own.kind.__name__}: {exc}")
            return
        section.add(MAPPED, f"{where} = {value}", f"{own.name}, declared by the skeleton")
    elif name == "%remoteSettings" and plan.skeleton is not None:
        for own in plan.skeleton.own.values():
            if own.ensemble == "%remoteSettings":
                raw[own.name] = own.default
        section.add(MAPPED, where, "one setting of the skeleton per name=value line")
    elif name == "%remoteClassname" and plan.skeleton is not None:
        section.add(MAPPED, f"{where} = {value}", f"the skeleton {plan.skeleton.class_name}")
    elif name in NOT_NEEDED_SETTINGS:
        section.add(NOT_NEEDED, f"{where} = {value}", NOT_NEEDED_SETTINGS[name])
    elif name in NO_EQUIVALENT:
        section.add(NONE, f"{where} = {value}", f"no equivalent: {NO_EQUIVALENT[name]}")
    else:
        section.add(NONE, f"{where} = {value}", "not a setting Encore has")


def _map_targets(value: str, where: str, plan: ItemPlan, ctx: Context,
                 raw: dict[str, Any]) -> None:
    targets = [t.strip() for t in value.split(",") if t.strip()]
    shown = f"{where} = {value}"
    if plan.class_path == "engine.inbound:SoapService" and len(targets) == 1:
        raw["target"] = targets[0]
        plan.section.add(MAPPED, shown, f"target = {targets[0]!r}")
    elif plan.class_path == "engine.inbound:HttpService" and len(targets) == 1:
        ctx.http_services += 1
        prefix = "" if ctx.http_services == 1 else f"/{plan.name}"
        path = f"{prefix}/{{path:path}}"
        raw["routes"] = [{"method": m, "path": path, "target": targets[0]} for m in HTTP_METHODS]
        plan.section.add(MAPPED, shown, f"routes: every method on {path!r} → "
                         f"{targets[0]!r}")
    elif plan.skeleton is not None and plan.kind == SERVICE:
        raw["targets"] = targets
        plan.section.add(MAPPED, shown, f"targets = {targets!r}")
    elif plan.skeleton is not None and plan.kind == PROCESS:
        raw["target_config_names"] = targets
        plan.section.add(MAPPED, shown, f"target_config_names = {targets!r}, declared by the "
                         "skeleton")
    else:
        plan.section.add(NONE, shown, "Encore has no such setting for this class")


def _map_rules(value: str, where: str, plan: ItemPlan, ctx: Context,
               raw: dict[str, Any]) -> None:
    cls = ctx.classes.get(value)
    if cls is None:
        plan.section.add(NONE, f"{where} = {value}", "the rule class is not in the source: "
                         "pass its file too (a directory source), or write rules by hand")
        return
    found = router_rules(cls)
    if found.rules:
        raw["rules"] = found.rules
    if found.default_target:
        raw["default_target"] = found.default_target
    plan.section.add(MAPPED, f"{where} = {value}", f"{len(found.rules)} rule(s) read")
    plan.section.lines.extend(found.lines)


def _map_port(value: str, where: str, plan: ItemPlan, ctx: Context) -> None:
    try:
        port = int(value)
    except ValueError:
        plan.section.add(NONE, f"{where} = {value}", "not a port number")
        return
    if ctx.inbound_port in (None, port):
        ctx.inbound_port = port
        plan.section.add(MAPPED, f"{where} = {value}", f"[inbound] port = {port}")
    else:
        plan.section.add(NONE, f"{where} = {value}", f"Encore serves every inbound service "
                         f"on one port, {ctx.inbound_port} (another service's)")


def declared_of_plan(plan: ItemPlan) -> tuple[Setting, ...]:
    if plan.skeleton is not None:
        return declared_of(plan.skeleton)
    cls = pkgutil.resolve_name(plan.class_path)
    return tuple(cls.declared_settings())


def _checked(raw: dict[str, Any], declared: tuple[Setting, ...],
             plan: ItemPlan) -> dict[str, Any]:
    """``raw`` less what the Encore class refuses (each refusal a line, naming why)."""
    kept: dict[str, Any] = {}
    for key, value in raw.items():
        try:
            validate_settings(plan.name, {key: value}, declared)
        except ConfigurationError as exc:
            plan.section.add(NONE, key, f"refused by {plan.class_path}: "
                             f"{str(exc).split(': ', 2)[-1]}")
            continue
        kept[key] = value
    return kept


def _report_defaults(plan: ItemPlan) -> None:
    """A line for each core setting the item left to Encore's default, with Ensemble's."""
    declared = {s.name: s.default for s in declared_of_plan(plan)}
    for key, ensemble in ENSEMBLE_DEFAULTS.items():
        if key in plan.settings or key not in declared:
            continue
        theirs = "Ensemble's too" if declared[key] == ensemble else f"Ensemble's: {ensemble!r}"
        plan.section.add(DEFAULT, key, f"not set: Encore's default {declared[key]!r} "
                         f"({theirs})")


__all__ = ["Context", "ItemPlan", "declared_of_plan", "map_item"]
