"""Skeletons: what an Ensemble class Encore has no equivalent of becomes — a Python class of
the right kind, with the adapter Encore has for its own, its settings declared, and a TODO
where the ObjectScript (or PEX code) must be rewritten. :func:`skeleton_for` decides what
it holds while the items are mapped; :func:`render` writes its module."""
from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from engine.settings import Setting
from engine.tools.ensemble.classes import HTTP, OPERATION, PROCESS, SOAP, HostKind, is_pex
from engine.tools.ensemble.model import EnsClass, EnsItem
from engine.tools.ensemble.settings_map import (
    COMPOSITE_SETTINGS,
    NO_EQUIVALENT,
    NOT_NEEDED,
    SETTING_TABLE,
)
from engine.tools.ensemble.skeleton_spec import (
    OwnSetting,
    SkeletonSpec,
    class_identifier,
    guess_kind,
    python_kind,
    snake,
    value_of,
)

_KNOWN = {*SETTING_TABLE, *COMPOSITE_SETTINGS, *NOT_NEEDED, *NO_EQUIVALENT}


def skeleton_for(item: EnsItem, kind: HostKind, classes: Mapping[str, EnsClass],
                 skeletons: MutableMapping[str, SkeletonSpec]) -> SkeletonSpec:
    """The skeleton ``item``'s class becomes, from the source's ``classes``; one per class in
    ``skeletons`` (a second item of the class adds to it)."""
    remote = _remote_class(item)
    key = remote or item.class_name
    spec = skeletons.get(key)
    if spec is None:
        spec = SkeletonSpec(module=snake(key.replace(".", "_")), class_name=class_identifier(key),
                            kind=kind.kind, adapter=kind.adapter, ensemble=key,
                            source=classes.get(item.class_name))
        _declare_properties(spec, classes)
        if remote:
            spec.notes.append(f"PEX host {item.class_name}: its remote class {remote}")
        skeletons[key] = spec
    spec.items.append(item.name)
    taken = {s.name for s in _base_settings(spec)}
    for setting in item.settings:
        if setting.name == "%remoteSettings":
            _declare_remote(spec, setting.value, taken)
        elif (spec.source is None and setting.target == "Host" and setting.name not in _KNOWN
              and not setting.name.startswith("%") and setting.name not in spec.own):
            _declare(spec, setting.name, setting.name, guess_kind(setting.value),
                     setting.value, "Ensemble setting (its declaration was not in the source)",
                     taken)
    return spec


def declared_of(spec: SkeletonSpec) -> tuple[Setting, ...]:
    """Every setting an item of the skeleton's class accepts."""
    own = tuple(Setting(name=o.name, kind=o.kind, default=o.default, help=o.help)
                for o in spec.own.values())
    return (*_base_settings(spec), *own)


def _remote_class(item: EnsItem) -> str | None:
    if not is_pex(item.class_name):
        return None
    for name in ("%remoteClassname", "%classname"):
        found = item.setting(name)
        if found is not None and found.value:
            module = item.setting("%module")
            return f"{module.value}.{found.value}" if module and module.value else found.value
    return None


def _declare_properties(spec: SkeletonSpec, classes: Mapping[str, EnsClass]) -> None:
    """The properties the class's SETTINGS parameter (or a super's in the source) lists."""
    cls: EnsClass | None = spec.source
    seen: set[str] = set()
    taken = {s.name for s in _base_settings(spec)}
    while cls is not None and cls.name not in seen:
        seen.add(cls.name)
        properties = {p.name: p for p in cls.properties}
        for name in cls.settings_names():
            prop = properties.get(name)
            if prop is None or name in spec.own:
                continue
            kind = python_kind(prop.type)
            try:
                default = value_of(prop.initial, kind) if prop.initial else kind()
            except ValueError:
                default = kind()
            _declare(spec, name, name, kind, default, f"Ensemble property {name} "
                     f"({prop.type}) of {cls.name}", taken)
        cls = next((classes[p] for p in cls.supers if p in classes), None)


def _declare_remote(spec: SkeletonSpec, text: str, taken: set[str]) -> None:
    for line in text.replace("\r", "\n").split("\n"):
        name, sep, value = line.partition("=")
        if sep and name.strip():
            _declare(spec, f"%remoteSettings:{name.strip()}", name.strip(),
                     guess_kind(value.strip()), value_of(value, guess_kind(value.strip())),
                     f"PEX remote setting {name.strip()}", taken, remote=True)


def _declare(spec: SkeletonSpec, key: str, ensemble: str, kind: type, default: object,
             help_text: str, taken: set[str], *, remote: bool = False) -> None:
    name = snake(ensemble)
    if name in taken or any(o.name == name for o in spec.own.values()):
        return  # an Encore setting of that name (or the same one twice) wins
    if not remote and not isinstance(default, kind):
        default = value_of(str(default), kind)
    spec.own[key] = OwnSetting(name=name, ensemble="%remoteSettings" if remote else ensemble,
                               kind=kind, default=default, help=help_text)


def _base_settings(spec: SkeletonSpec) -> tuple[Setting, ...]:
    if spec.kind == OPERATION:
        from engine.delivery.guards import GUARD_SETTINGS
        from engine.host import HOST_SETTINGS
        adapter: tuple[Setting, ...] = ()
        if spec.adapter == SOAP:
            from adapters.soap import SoapAdapter
            adapter = SoapAdapter.SETTINGS
        elif spec.adapter == HTTP:
            from adapters.http import HttpAdapter
            adapter = HttpAdapter.SETTINGS
        return (*HOST_SETTINGS, *GUARD_SETTINGS, *adapter)
    if spec.kind == PROCESS:
        from engine.process import PROCESS_SETTINGS
        return PROCESS_SETTINGS + (Setting(name="target_config_names", kind=list, default=[],
                                           help="Ensemble's TargetConfigNames"),)
    from engine.service import SERVICE_SETTINGS
    return SERVICE_SETTINGS
