"""The import as a whole: the production chosen from the source, its own settings, every
item mapped (:mod:`.mapping`), and the production file, skeleton package and report that
result — written only where nothing would be overwritten, unless asked."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config.production import MAX_SHUTDOWN_TIMEOUT
from engine.tools.ensemble import toml_out
from engine.tools.ensemble.default_settings import map_defaults, read_default_settings
from engine.tools.ensemble.errors import SourceError
from engine.tools.ensemble.mapping import Context, ItemPlan, map_item
from engine.tools.ensemble.model import EnsProduction
from engine.tools.ensemble.report import MAPPED, NONE, NOT_NEEDED, Report, Section
from engine.tools.ensemble.skeleton_spec import snake
from engine.tools.ensemble.skeleton_text import render
from engine.tools.ensemble.source import choose_production, read_source

ALERT_ITEM = "Ens.Alert"  # Ensemble sends every alert to the item of this name
DEFAULT_INBOUND_PORT = 8081  # Encore's [inbound] port when no service names one

# Production-level settings and attributes: name → (status, what it becomes or why).
PRODUCTION_TABLE: dict[str, tuple[str, str]] = {
    "UpdateTimeout": (NOT_NEEDED, "a reload in Encore is all or nothing and waits for no item"),
    "TestingEnabled": (NOT_NEEDED, "the Testing Service is there for every operator"),
    "AlertNotificationManager": (NONE, "Encore sends every Alert to alert_item"),
    "AlertNotificationOperation": (NONE, "Encore sends every Alert to alert_item"),
    "AlertNotificationRecipients": (NONE, "alert_item's own settings say where alerts go"),
    "AlertActionWindow": (NONE, "Encore has no alert management"),
}


@dataclass
class ImportResult:
    """What an import gives: the production file's text, the skeleton modules (by path
    relative to the production file's directory) and the report."""

    production: EnsProduction
    production_text: str
    package: str
    skeletons: dict[str, str] = field(default_factory=dict)
    report: Report = field(default_factory=lambda: Report([]))
    defaults_text: str | None = None  # the defaults file (``--defaults``), None: none

    def write(self, output: Path, *, force: bool = False) -> list[Path]:
        """Write the production file at ``output``, the skeletons beside it and the report
        (:func:`report_path`); SourceError naming a file that exists (unless ``force``)."""
        files = {output: self.production_text, report_path(output): self.report.text()}
        if self.defaults_text is not None:
            files[defaults_path(output)] = self.defaults_text
        files.update({output.parent / rel: text for rel, text in self.skeletons.items()})
        existing = [str(p) for p in files if p.exists()]
        if existing and not force:
            verb = "exists" if len(existing) == 1 else "exist"
            raise SourceError(f"{', '.join(existing)} already {verb}; choose another -o, or "
                              "pass --force to overwrite")
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return list(files)


def report_path(output: Path) -> Path:
    """Where the report goes: ``production.toml`` → ``production.import-report.txt``."""
    return output.with_name(output.stem + ".import-report.txt")


def defaults_path(output: Path) -> Path:
    """Where the defaults file goes: ``production.toml`` → ``production.defaults.toml``."""
    return output.with_name(output.stem + ".defaults.toml")


def import_production(source: Path, *, name: str | None = None,
                      output: Path = Path("production.toml"),
                      defaults: Path | None = None) -> ImportResult:
    """Import production ``name`` (the only one when None) from ``source``; ``defaults``:
    an exported ``Ens.Config.DefaultSettings`` table, read into a defaults file beside the
    output (:func:`defaults_path`) that the production file names."""
    found = read_source(source)
    exported = read_default_settings(defaults) if defaults is not None else None
    production = choose_production(found, name)
    package = _package_name(production.class_name, output.parent)
    report = Report([f"encore import ensemble: production {production.class_name} from "
                     f"{source}", f"→ {output}"])
    own = Section(f"production {production.class_name}", name="the production")
    report.sections.append(own)
    settings = _production_settings(production, own)
    ctx = Context(classes=found.classes, package=package,
                  actor_pool_size=_actor_pool(production, own))
    plans = [map_item(item, ctx) for item in production.items]
    report.sections.extend(plan.section for plan in plans)
    if any(p.name == ALERT_ITEM for p in plans):
        settings["alert_item"] = ALERT_ITEM
        own.add(MAPPED, f"item {ALERT_ITEM}", f"alert_item = {ALERT_ITEM!r}")
    inbound = _inbound(plans, ctx, own)
    defaults_text = None
    if exported is not None and defaults is not None:
        target = defaults_path(output)
        mapped = map_defaults(exported, plans, {i.class_name: p.class_path for i, p in
                                                zip(production.items, plans, strict=True)},
                              (production.class_name, settings["name"]),
                              f"defaults {defaults.name} → {target.name}")
        report.sections.append(mapped.section)
        settings["defaults"] = target.name
        own.add(MAPPED, f"Ens.Config.DefaultSettings ({defaults.name})",
                f"defaults = {target.name!r}, {len(mapped.rows)} row(s)")
        defaults_text = mapped.text(settings["name"], defaults)
    skeletons = {f"{package}/{spec.module}.py": render(spec) for spec in ctx.skeletons.values()}
    if skeletons:
        doc = (f"Skeletons of the classes of {production.class_name}, written by `encore "
               "import ensemble`.")
        skeletons[f"{package}/__init__.py"] = f"{doc!r}\n"  # a literal: names are data
        report.header[1] += f", skeletons in {package}/"
    text = _production_file(production, source, settings, inbound, plans, output)
    return ImportResult(production=production, production_text=text,
                        package=package if skeletons else "", skeletons=skeletons,
                        report=report, defaults_text=defaults_text)


def _production_settings(production: EnsProduction, section: Section) -> dict[str, Any]:
    settings: dict[str, Any] = {"name": production.name or production.class_name,
                                "database": "sqlite:///encore.db"}
    section.add(MAPPED, f"Name={settings['name']}", f"name = {settings['name']!r}")
    for attribute, value in production.attributes.items():
        if attribute == "Name":
            continue
        if attribute == "LogGeneralTraceEvents":
            if value.lower() in ("true", "1"):
                section.add(NONE, "LogGeneralTraceEvents=true", "Encore traces per item "
                            "(trace = true)")
            continue
        status, why = PRODUCTION_TABLE.get(attribute, (NONE, "not an attribute Encore has"))
        section.add(status, f"{attribute}={value}", why)
    for setting in production.settings:
        where = f"{setting.name} = {setting.value}"
        if setting.name == "ShutdownTimeout":
            try:
                seconds = float(setting.value)
            except ValueError:
                section.add(NONE, where, "not a number of seconds")
                continue
            if 0 <= seconds <= MAX_SHUTDOWN_TIMEOUT:
                settings["shutdown_timeout"] = int(seconds) if seconds.is_integer() else seconds
                section.add(MAPPED, where, f"shutdown_timeout = {settings['shutdown_timeout']}")
            else:
                section.add(NONE, where, f"out of Encore's range 0–{MAX_SHUTDOWN_TIMEOUT:g}")
            continue
        status, why = PRODUCTION_TABLE.get(setting.name, (NONE, "not a setting Encore has"))
        section.add(status, where, why)
    return settings


def _actor_pool(production: EnsProduction, section: Section) -> int | None:
    if production.actor_pool_size is None:
        return None
    try:
        size = int(production.actor_pool_size)
    except ValueError:
        section.add(NONE, f"ActorPoolSize={production.actor_pool_size}", "not a whole number")
        return None
    section.add(MAPPED, f"ActorPoolSize={size}", "the pool_size of every process with "
                "PoolSize=0 (Encore has no shared actor pool: each process has its own)")
    return size if size > 0 else None


def _inbound(plans: list[ItemPlan], ctx: Context, section: Section) -> dict[str, Any] | None:
    services = [p for p in plans if p.class_path.startswith("engine.inbound:")]
    if not services:
        return None
    port = ctx.inbound_port or DEFAULT_INBOUND_PORT
    if ctx.inbound_port is None:
        section.add(MAPPED, "inbound services", f"[inbound] port = {port} (Encore's; no "
                    "service named a Port)")
    return {"port": port}


def _package_name(class_name: str, directory: Path) -> str:
    """The skeleton package: the production class's name, unless that is a module Python
    already finds elsewhere (it would win over the one beside the production file)."""
    name = snake(class_name.replace(".", "_"))
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and Path(spec.origin or "").resolve().parent.parent != directory.resolve():
        name += "_hosts"
    return name


def _production_file(production: EnsProduction, source: Path, settings: dict[str, Any],
                     inbound: dict[str, Any] | None, plans: list[ItemPlan],
                     output: Path) -> str:
    lines = toml_out.comment(f"Imported from Ensemble by `encore import ensemble`: production "
                             f"{production.class_name} from {source.name}.")
    lines += toml_out.comment(f"{report_path(output).name} beside this file says what became "
                              "of every setting (docs/migrating.md).")
    if production.description:
        lines += toml_out.comment(production.description)
    lines += ["", *toml_out.table("production", settings)]
    if inbound is not None:
        lines += ["", *toml_out.table("inbound", inbound)]
    for plan in plans:
        lines.append("")
        for text in plan.comments:
            lines += toml_out.comment(text)
        lines += ["[[items]]", f"name = {toml_out.value(plan.name)}",
                  f"class = {toml_out.value(plan.class_path)}",
                  f"pool_size = {plan.pool_size}",
                  f"enabled = {toml_out.value(plan.enabled)}"]
        if plan.settings:
            lines += toml_out.table("items.settings", plan.settings)
    return "\n".join(lines) + "\n"
